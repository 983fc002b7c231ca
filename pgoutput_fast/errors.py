"""The one error type of the decoder."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .decoder import ChangeSet

__all__ = ["DecodeError"]


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
