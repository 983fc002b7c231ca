"""The one error type of the decoder."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .decoder import ChangeSet

__all__ = ["DecodeError", "UserError", "check_names_utf8"]


class UserError(Exception):
    """A failure with a known cause that the user can act on (bad input, a full disk, a
    wrong password, a missing publication, a refused directory).

    The command line prints ``str(exc)`` as one line, with no traceback unless
    ``--debug`` is given, and exits with ``exit_code``. The message says what failed,
    where, and what to do; it never holds a secret (a password of a connection string).
    Subclasses set their own ``exit_code`` (``pgoutput_fast.capture.errors`` lists the
    capture's).
    """

    exit_code = 1


class DecodeError(ValueError):
    """Bad or unsupported pgoutput input.

    Attributes:
        reason: what is wrong, in words.
        offset: byte offset inside the message where the problem was found (or None).
        message_type: the message's type byte as a one-character str (or None when the
            message was empty).
        message_index: index of the message within the batch fed to a decoder (or None
            for ``decode_message``).
        changes: set only when raised by ``Decoder.feed``: the committed changes before
            the bad message.
    """

    changes: ChangeSet  # annotation only: the attribute exists once Decoder.feed sets it

    def __init__(self, reason, offset=None, message_type=None, message_index=None):
        self.reason = reason
        self.offset = offset
        self.message_type = message_type
        self.message_index = message_index
        super().__init__(reason)

    def __str__(self):
        where = []
        if self.message_index is not None:
            where.append(f"message #{self.message_index}")
        if self.message_type is not None:
            where.append(f"type {self.message_type!r}")
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def __reduce__(self):
        return (DecodeError, (self.reason, self.offset, self.message_type, self.message_index))


def check_names_utf8(msg) -> None:
    """Raise ``DecodeError`` when a name of a Relation, Type or Origin message is not
    UTF-8 (it would become an Arrow field, table name or string value).

    ``decode_message`` keeps such bytes as surrogate escapes; the decoders of both
    implementations call this on the names they keep. The offset is the first bad byte,
    counted from the message's type byte (with the stream XID when ``msg.xid`` is set).
    """
    t = msg.type_byte
    if t == "O":
        fields = [(9, msg.name)]
    elif t in ("R", "Y"):
        pos = 5 + (4 if msg.xid is not None else 0)
        fields = []
        names = (msg.nspname, msg.relname) if t == "R" else (msg.nspname, msg.typname)
        for name in names:
            fields.append((pos, name))
            pos += len(name.encode("utf-8", "surrogateescape")) + 1
        if t == "R":
            pos += 3                       # replica identity, column count
            for col in msg.columns:
                fields.append((pos + 1, col.name))
                pos += 1 + len(col.name.encode("utf-8", "surrogateescape")) + 1 + 8
    else:
        return
    for start, name in fields:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raw = name.encode("utf-8", "surrogateescape")
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(f"name {raw!r} is not valid UTF-8", start + exc.start, t) from None
            raise DecodeError(f"name {name!r} is not valid UTF-8", start, t) from None
