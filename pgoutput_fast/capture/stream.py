"""The walsender connection: options from the server version, START_REPLICATION, and
the CopyData traffic (XLogData in, keepalives answered, standby status updates out).

psycopg2 (``LogicalReplicationConnection``) opens the connection: DSN parsing, TLS,
authentication, ``replication=database``. The CopyData traffic after
``START_REPLICATION`` goes through libpq directly, not through
``ReplicationCursor.read_message``. The reason is correctness, not speed:
psycopg2 answers keepalives itself and, when the last XLogData's ``dataStart`` is at
or below the last flush position the client confirmed (true after every Relation,
Type or Begin-before-Origin message, whose ``dataStart`` is 0/0, and after any change
of a transaction interleaved in WAL), it moves its own ``flush_lsn`` up to the
keepalive's ``walEnd`` and sends that. The slot would then confirm transactions that
were received but not yet written to a durable segment, and a crash would lose them.
Here the only flush position ever sent is one the caller passes in (``set_flush``).

The receive loop is native: ``CopyReader`` (``src/capture_loop.pxi``) calls
``PQgetCopyData(async)`` until nothing more comes, with the GIL released, parses the
XLogData headers (``dataStart``, ``walEnd``) and keepalives, appends each payload to
one growing buffer with its end offset and LSN (``MessageColumns``: the capture then
copies runs of it into the row group being filled and hands that memory to Arrow, no
Python object per message), records the index of each message that is not a change
inside a transaction (``INSIDE_TYPES``), and drains the socket (``PQconsumeInput``)
without waiting. It returns to Python when nothing more is there (``read_batch`` then
waits in ``select``, as before), at the byte budget, or at once when a keepalive asks
for a reply, which ``send_status`` answers with the caller's flush position. The extension does not link libpq: psycopg2(-binary) brings
its own, and one PGconn must only see the library that made it, so the loop gets the
addresses of that library's functions (found with ctypes, ``_load_libpq``) and keeps
``PGconn`` opaque. ``read_into`` is the same loop in Python through ctypes, the twin
used with ``PGOUTPUT_FAST_IMPL=python`` (or ``ReplicationStream(native_loop=False)``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import select
import struct
import time
from typing import Any

from .columns import MessageColumns as _PyColumns
from .errors import CaptureError, ServerRefused
from ..lsn import format_lsn, parse_lsn
from ..protocol import INSIDE_ONLY, SESSION_SETTINGS

__all__ = ["ReplicationOptions", "ReplicationStream", "choose_options", "SESSION_SETTINGS",
           "max_protocol", "CaptureError"]


PG_EPOCH_UNIX_US = 946_684_800_000_000
#: message types that only occur inside B..C, b..P or S..E and need no tracking (Insert,
#: Update, Delete, Truncate, Origin, Relation, Type; a Relation or Type outside one,
#: which the resume filter emits itself, is written first and not read from here)
INSIDE_TYPES = INSIDE_ONLY


_XLOG_HEAD = struct.Struct(">QQq")       # dataStart, walEnd, sendTime (after the 'w')
_KEEPALIVE = struct.Struct(">Qq?")       # walEnd, sendTime, replyRequested (after the 'k')
_STATUS = struct.Struct(">cQQQq?")


def max_protocol(version_num: int) -> int:
    """Highest pgoutput ``proto_version`` a server accepts (docs/protocol.md §0.3)."""
    if version_num >= 160000:
        return 4
    if version_num >= 150000:
        return 3
    if version_num >= 140000:
        return 2
    return 1


class ReplicationOptions:
    """The pgoutput options of ``START_REPLICATION`` (docs/protocol.md §1.2), validated."""

    __slots__ = ("proto_version", "publication_names", "binary", "messages", "streaming",
                 "two_phase", "origin")

    def __init__(self, proto_version, publication_names, binary=False, messages=False,
                 streaming=None, two_phase=False, origin=None):
        self.proto_version = proto_version
        #: the publications' exact names (a list; quoted for the server in ``pairs``)
        self.publication_names = publication_list(publication_names)
        self.binary = binary
        self.messages = messages
        self.streaming = streaming      # None (not sent), "on", "off", "parallel"
        self.two_phase = two_phase
        self.origin = origin            # None, "any", "none"

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def pairs(self) -> list:
        # pgoutput splits publication_names as a list of SQL identifiers (unquoted ones
        # are folded to lower case): quote each, so that "MyPub" stays MyPub
        out = [("proto_version", str(self.proto_version)),
               ("publication_names", ",".join(_quote_ident(p) for p in self.publication_names))]
        if self.binary:
            out.append(("binary", "true"))
        if self.messages:
            out.append(("messages", "true"))
        if self.streaming is not None:
            out.append(("streaming", self.streaming))
        if self.two_phase:
            out.append(("two_phase", "on"))
        if self.origin is not None:
            out.append(("origin", self.origin))
        return out

    def command(self, slot: str, start_lsn: int = 0) -> str:
        opts = ", ".join(f'"{k}" {_quote_literal(v)}' for k, v in self.pairs())
        return f"START_REPLICATION SLOT {_quote_ident(slot)} LOGICAL {format_lsn(start_lsn)} ({opts})"


def publication_list(names) -> list:
    """Publication names as a list of exact names: a list as it is, a string split at
    commas (names are case-sensitive and may hold spaces; give a list for a name with a
    comma)."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    out = [str(n) for n in names if str(n) != ""]
    if not out:
        raise CaptureError("no publication given (--publication NAME)")
    return out


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def choose_options(version_num, publication, *, proto_version="auto", binary=False,
                   messages=False, streaming=None, two_phase=False, origin=None):
    """``ReplicationOptions`` for a server version and the user's flags.

    ``proto_version="auto"`` picks the highest the server supports, capped to what the
    other flags need: streaming needs 2, two-phase 3, ``streaming="parallel"`` 4.
    Flags the server cannot honour raise ``CaptureError`` (unknown options are a hard
    error on the server anyway: docs/protocol.md §1.2).
    """
    top = max_protocol(version_num)
    if proto_version in (None, "auto"):
        proto = top
    else:
        proto = int(proto_version)
        if not 1 <= proto <= top:
            raise CaptureError(f"proto_version {proto}: this server (version_num {version_num}) "
                               f"supports 1..{top}")
    if isinstance(streaming, bool):
        streaming = "on" if streaming else "off"
    if streaming == "parallel" and proto < 4:
        raise CaptureError("--streaming parallel needs protocol 4 (PostgreSQL 16+)")
    if streaming == "on" and proto < 2:
        raise CaptureError("--streaming on needs protocol 2 or later (PostgreSQL 14+)")
    if two_phase and proto < 3:
        raise CaptureError("--two-phase needs protocol 3 or later (PostgreSQL 15+)")
    if (binary or messages) and version_num < 140000:
        raise CaptureError("--binary and --messages need PostgreSQL 14+")
    if origin is not None and version_num < 160000:
        raise CaptureError("--origin needs PostgreSQL 16+")
    if streaming == "off":
        streaming = None if version_num < 140000 else "off"
    return ReplicationOptions(proto, publication, binary=bool(binary), messages=bool(messages),
                              streaming=streaming, two_phase=bool(two_phase), origin=origin)


def _load_libpq(psycopg2_module):
    """The libpq that psycopg2 itself is linked with (the PGconn must stay in one libpq)."""
    import psycopg2._psycopg as ext  # noqa: F401  (loads libpq into the process)

    candidates = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if "/libpq" in path and path not in candidates:
                    candidates.append(path)
    except OSError:
        pass
    found = ctypes.util.find_library("pq")
    if found:
        candidates.append(found)
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            lib.PQgetCopyData  # noqa: B018
            break
        except (OSError, AttributeError):
            continue
    else:
        raise CaptureError("could not find the libpq psycopg2 uses")
    lib.PQgetCopyData.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.PQgetCopyData.restype = ctypes.c_int
    lib.PQputCopyData.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.PQputCopyData.restype = ctypes.c_int
    lib.PQflush.argtypes = [ctypes.c_void_p]
    lib.PQflush.restype = ctypes.c_int
    lib.PQconsumeInput.argtypes = [ctypes.c_void_p]
    lib.PQconsumeInput.restype = ctypes.c_int
    lib.PQfreemem.argtypes = [ctypes.c_void_p]
    lib.PQfreemem.restype = None
    lib.PQsocket.argtypes = [ctypes.c_void_p]
    lib.PQsocket.restype = ctypes.c_int
    lib.PQerrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQerrorMessage.restype = ctypes.c_char_p
    lib.PQgetResult.argtypes = [ctypes.c_void_p]
    lib.PQgetResult.restype = ctypes.c_void_p
    lib.PQresultErrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQresultErrorMessage.restype = ctypes.c_char_p
    lib.PQclear.argtypes = [ctypes.c_void_p]
    lib.PQclear.restype = None
    lib.PQsetnonblocking.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.PQsetnonblocking.restype = ctypes.c_int
    return lib


_LIBPQ = None
_LIBPQ_RAW = None
# ctypes.string_at (the documented API), where _MEMORY is not available. Not a CFUNCTYPE
# around its C function: a CFUNCTYPE call releases the GIL, and that C function builds a
# bytes object, which without the GIL corrupts memory while the segment writer thread
# runs (a segfault seen under load in the kill -9 test).
_string_at = ctypes.string_at


def _address_space():
    """The process's memory as one read-only byte memoryview (64-bit only), so that a
    buffer libpq returns is read with ``_MEMORY[address:address + n].tobytes()``: one
    copy, under the GIL, ~3x cheaper than ``ctypes.string_at`` (which goes through a
    ctypes foreign-function call per message). Nothing is touched but the slices read."""
    import sys

    if sys.maxsize < 2**62:
        return None
    try:
        return memoryview((ctypes.c_char * (sys.maxsize // 2)).from_address(0)).cast("B").toreadonly()
    except (ValueError, TypeError, OverflowError, MemoryError):
        return None


_MEMORY = _address_space()


def _native_module():
    """``pgoutput_fast._native`` when it is the selected implementation, else None."""
    import pgoutput_fast

    if pgoutput_fast.IMPL != "native":
        return None
    from .. import _native

    return _native


def _address(func) -> int:
    """The address of a ctypes foreign function."""
    return ctypes.cast(func, ctypes.c_void_p).value or 0


def now_pg_us() -> int:
    return int(time.time() * 1_000_000) - PG_EPOCH_UNIX_US


class ConnectionLost(Exception):
    """The walsender connection ended (server gone, network, or an ERROR from it)."""


class SlotBusy(Exception):
    """START_REPLICATION found the slot active for another process."""


class ConnectFailed(ConnectionLost):
    """Opening the connections failed; ``cause`` is psycopg2's error (classified by
    ``dsn.connect_error``: a retry helps only for some)."""

    def __init__(self, cause):
        super().__init__(str(cause).strip())
        self.cause = cause


class ReplicationStream:
    """One walsender session. ``open()`` connects and reads the server's facts;
    ``start()`` issues ``START_REPLICATION``; ``read(timeout)`` returns the XLogData
    received (list of ``(data_start, payload)``) and answers keepalives with the flush
    position last set by ``set_flush`` (never more)."""

    def __init__(self, dsn: str, *, application_name="pgoutput-fast-capture", native_loop=None):
        self.dsn = dsn
        self.application_name = application_name
        #: the receive loop: native (``CopyReader``) or the ctypes loop (``read_into``);
        #: None: native unless ``PGOUTPUT_FAST_IMPL=python``
        if native_loop is None:
            native_loop = _native_module() is not None
        elif native_loop and _native_module() is None:
            raise CaptureError("the native receive loop needs PGOUTPUT_FAST_IMPL=native")
        self.native_loop = bool(native_loop)
        #: the class of message columns ``read_batch`` fills (native or plain Python)
        self.columns_type: Any = _native_module().MessageColumns if self.native_loop else _PyColumns
        self._reader: Any = None
        self.conn: Any = None
        self.admin: Any = None
        self.version_num: Any = None
        self.wal_sender_timeout_ms = 60_000
        self.flush_lsn = 0        # what we confirm (durable)
        self.write_lsn = 0        # what we received (informational)
        self.server_wal_end = 0   # last walEnd seen (keepalive or XLogData)
        self.keepalives = 0
        self.replies = 0
        self.last_status = 0.0
        self.status_interval = 10.0
        self.database: Any = None
        self.system_identifier: Any = None
        self.backend_pid: Any = None
        self.session_started = False   # START_REPLICATION succeeded on this connection
        self._pgconn: Any = None
        self._buf = ctypes.c_void_p()
        self._lib: Any = None

    # -- setup -------------------------------------------------------------------------
    def open(self):
        import psycopg2
        from psycopg2.extras import LogicalReplicationConnection

        global _LIBPQ, _LIBPQ_RAW
        try:
            self.admin = psycopg2.connect(self.dsn, application_name=self.application_name + "-admin")
            self.admin.autocommit = True
            self.conn = psycopg2.connect(self.dsn, connection_factory=LogicalReplicationConnection,
                                         application_name=self.application_name)
        except psycopg2.OperationalError as exc:
            self.close()
            raise ConnectFailed(exc) from None
        self.version_num = self.conn.server_version
        with self.admin.cursor() as cur:
            cur.execute("SELECT current_setting('wal_level'), "
                        "(SELECT setting::int FROM pg_settings WHERE name = 'wal_sender_timeout')")
            wal_level, timeout_ms = cur.fetchone()
        if wal_level != "logical":
            raise CaptureError(f"the server runs with wal_level = {wal_level}; logical decoding "
                               "needs wal_level = logical")
        self.wal_sender_timeout_ms = timeout_ms or 0
        # reply well inside the server's timeout even when it does not ask (0 = no timeout)
        self.status_interval = 10.0 if not timeout_ms else min(10.0, timeout_ms / 1000 / 4)
        cur = self.conn.cursor()
        # one round trip (a walsender runs plain SQL as a simple query)
        cur.execute("; ".join(f"SET {name} = '{value}'" for name, value in SESSION_SETTINGS))
        cur.close()
        if _LIBPQ is None:
            _LIBPQ = _load_libpq(psycopg2)
            # the same library without argtypes, for the two calls made per message:
            # ctypes converts each argument against argtypes on every call (~2x the cost);
            # the arguments passed are ctypes objects (a pointer, byref) and a small int
            _LIBPQ_RAW = ctypes.CDLL(_LIBPQ._name)
        self._lib = _LIBPQ
        self._getcopy = _LIBPQ_RAW.PQgetCopyData
        self._freemem = _LIBPQ_RAW.PQfreemem
        self._freemem.restype = None
        return self

    def admin_query(self, sql, params=None):
        with self.admin.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None

    def slot_info(self, slot):
        """``(confirmed_flush_lsn, two_phase, plugin, database, active_pid)`` or None."""
        two_phase = "two_phase" if self.version_num >= 140000 else "false"
        rows = self.admin_query(
            f"SELECT confirmed_flush_lsn::text, {two_phase}, plugin, database, active_pid "
            "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if not rows:
            return None
        lsn, tp, plugin, db, pid = rows[0]
        return (parse_lsn(lsn) if lsn else 0), bool(tp), plugin, db, pid

    def create_slot(self, slot, *, two_phase=False):
        if two_phase:
            self.admin_query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)",
                             (slot,))
        else:
            self.admin_query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))

    def missing_publications(self, names) -> list:
        rows = self.admin_query("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)",
                                (list(names),))
        have = {r[0] for r in rows}
        return [n for n in names if n not in have]

    def create_publication(self, name):
        self.admin_query(f"CREATE PUBLICATION {_quote_ident(name)} FOR ALL TABLES")

    def drop_slot(self, slot):
        self.admin_query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = %s AND active_pid IS NULL", (slot,))

    def drop_publication(self, name):
        self.admin_query(f"DROP PUBLICATION IF EXISTS {_quote_ident(name)}")

    def identify(self):
        """``(system_identifier, database)`` of the server and connection."""
        cur = self.conn.cursor()      # IDENTIFY_SYSTEM: what a replication role may ask
        try:
            cur.execute("IDENTIFY_SYSTEM")
            systemid, _timeline, _xlogpos, dbname = cur.fetchone()
        finally:
            cur.close()
        return str(systemid), dbname

    def current_wal_lsn(self) -> int:
        return parse_lsn(self.admin_query("SELECT pg_current_wal_lsn()::text")[0][0])

    def start(self, slot, options: ReplicationOptions, start_lsn: int = 0):
        import psycopg2

        cur = self.conn.cursor()
        try:
            cur.start_replication_expert(options.command(slot, start_lsn), decode=False)
        except psycopg2.OperationalError as exc:
            if getattr(exc, "pgcode", None) == "55006":      # object_in_use: slot held
                raise SlotBusy(str(exc).strip()) from None
            raise ConnectionLost(str(exc).strip()) from None
        except psycopg2.Error as exc:
            if getattr(exc, "pgcode", None) == "55006":
                raise SlotBusy(str(exc).strip()) from None
            raise ServerRefused(f"START_REPLICATION failed: {str(exc).strip()}") from None
        self._cursor = cur
        self._pgconn = ctypes.c_void_p(self.conn.pgconn_ptr)
        self._ref = ctypes.byref(self._buf)
        self._lib.PQsetnonblocking(self._pgconn, 1)
        self._sock = self._lib.PQsocket(self._pgconn)
        if self.native_loop:
            # the functions of psycopg2's own libpq, by address (the extension does not
            # link libpq: two libpqs on one PGconn would be unsafe)
            lib = self._lib
            self._reader = _native_module().CopyReader(
                self.conn.pgconn_ptr, _address(lib.PQgetCopyData), _address(lib.PQfreemem),
                _address(lib.PQconsumeInput))
        self.last_status = time.monotonic()

    # -- traffic -----------------------------------------------------------------------
    def _error(self, what):
        msg = self._lib.PQerrorMessage(self._pgconn) or b""
        return ConnectionLost(f"{what}: {msg.decode('utf-8', 'replace').strip() or 'connection closed'}")

    def set_flush(self, lsn: int):
        if lsn > self.flush_lsn:
            self.flush_lsn = lsn

    def send_status(self, reply_requested=False):
        lib, pg = self._lib, self._pgconn
        write = max(self.write_lsn, self.flush_lsn)
        # apply = 0, as pg_recvlogical: for a logical slot only flush matters (§1.3)
        msg = _STATUS.pack(b"r", write, self.flush_lsn, 0, now_pg_us(), reply_requested)
        if lib.PQputCopyData(pg, msg, len(msg)) != 1:
            raise self._error("sending a status update")
        for _ in range(1000):
            r = lib.PQflush(pg)
            if r == 0:
                break
            if r < 0:
                raise self._error("sending a status update")
            select.select([], [self._sock], [], 0.01)
        self.last_status = time.monotonic()
        self.replies += 1

    def maybe_status(self):
        if time.monotonic() - self.last_status >= self.status_interval:
            self.send_status()

    def read(self, timeout: float, max_messages: int = 50_000, out=None, max_bytes: int = 32 << 20):
        """Append received XLogData as ``(data_start, payload)`` to ``out`` (a list);
        waits up to ``timeout`` seconds for the first one. ``max_messages=0`` only
        serves the connection (a status update when due). See ``read_batch``."""
        if out is None:
            out = []
        if max_messages <= 0:
            self.maybe_status()
            return out
        batch = self.columns_type()
        self.read_batch(timeout, batch, [], max_bytes)
        out.extend((batch.lsn(i), batch.message(i)) for i in range(len(batch)))
        return out

    def read_batch(self, timeout: float, batch, ctrl: list, max_bytes: int = 32 << 20) -> int:
        """Append received XLogData to ``batch`` (``columns_type``: each pgoutput
        message with its ``data_start``), and to ``ctrl`` the index in ``batch`` of each
        message whose type is not in ``INSIDE_TYPES`` (the changes, which need no
        per-message work in the capture loop). Waits up to ``timeout`` seconds for the
        first message; stops when nothing more is buffered or after ``max_bytes``
        (payload plus ``batch.MESSAGE_OVERHEAD`` per message). Keepalives are answered
        here (immediately when the server asks), status updates are sent every
        ``status_interval``. Returns the number of messages appended."""
        if self._reader is None:
            return self.read_into(timeout, batch.lsns, batch.datas, ctrl, max_bytes)
        reader = self._reader
        n0, b0 = len(batch), batch.nbytes
        overhead = batch.MESSAGE_OVERHEAD
        waited = False
        budget = max_bytes
        while True:
            r = reader.fill(batch, ctrl, budget)
            if reader.wal_end > self.server_wal_end:
                self.server_wal_end = reader.wal_end
            self.keepalives = reader.keepalives
            if r == reader.REPLY:
                self.send_status()
                budget = max_bytes - (batch.nbytes - b0) - overhead * (len(batch) - n0)
                if budget > 0:
                    continue
                break
            if r == reader.BUDGET:
                break
            if r == reader.EMPTY:
                if len(batch) > n0 or waited:
                    break
                self.maybe_status()
                select.select([self._sock], [], [], max(0.0, min(timeout, self.status_interval)))
                waited = True
                if self._lib.PQconsumeInput(self._pgconn) != 1:
                    raise self._error("reading from the server")
                continue
            if r == reader.END:
                raise ConnectionLost(self._end_message())
            raise self._error("reading from the server")
        self.maybe_status()
        return len(batch) - n0

    def read_into(self, timeout: float, lsns: list, datas: list, ctrl: list,
                  max_bytes: int = 32 << 20) -> int:
        """The receive loop in Python (ctypes), the twin of the native ``CopyReader``:
        ``read_batch`` into two lists, ``lsns`` and ``datas``; ``max_bytes`` counts
        what the Python objects cost."""
        lib, pg, buf = self._lib, self._pgconn, self._buf
        n0 = len(datas)
        getcopy, freemem, ref = self._getcopy, self._freemem, self._ref
        mem = _MEMORY
        unpack_x = _XLOG_HEAD.unpack_from
        append_lsn, append_data = lsns.append, datas.append
        inside = INSIDE_TYPES
        waited = drained = False
        wal_end_max = self.server_wal_end
        budget = max_bytes
        while budget > 0:
            n = getcopy(pg, ref, 1)
            if n > 0:
                budget -= n + 120
                a: int = buf.value  # type: ignore[assignment]  # set when n > 0
                if mem is not None:
                    t = mem[a]
                    if t == 0x77:  # 'w' XLogData (dataStart == walEnd in logical mode, §1.3)
                        start, wal_end, _send = unpack_x(mem, a + 1)
                        if mem[a + 25] not in inside:
                            ctrl.append(len(datas))
                        append_lsn(start)
                        append_data(mem[a + 25:a + n].tobytes())
                        freemem(buf)
                        if wal_end > wal_end_max:
                            wal_end_max = wal_end
                        continue
                    raw = mem[a:a + n].tobytes()
                else:
                    raw = _string_at(a, n)
                    t = raw[0]
                    if t == 0x77:
                        start, wal_end, _send = unpack_x(raw, 1)
                        if raw[25] not in inside:
                            ctrl.append(len(datas))
                        append_lsn(start)
                        append_data(raw[25:])
                        freemem(buf)
                        if wal_end > wal_end_max:
                            wal_end_max = wal_end
                        continue
                freemem(buf)
                if t == 0x6B:  # 'k' keepalive
                    wal_end, _send, reply = _KEEPALIVE.unpack_from(raw, 1)
                    self.keepalives += 1
                    if wal_end > wal_end_max:
                        wal_end_max = wal_end
                    self.server_wal_end = wal_end_max
                    if reply:
                        self.send_status()
                continue
            self.server_wal_end = wal_end_max
            if n == 0:
                if len(datas) > n0 or waited:
                    if drained:
                        break
                    # what arrived on the socket meanwhile, without waiting: bigger reads,
                    # fewer rounds of the capture loop
                    drained = True
                    if lib.PQconsumeInput(pg) != 1:
                        raise self._error("reading from the server")
                    continue
                self.maybe_status()
                r, _, _ = select.select([self._sock], [], [], max(0.0, min(timeout, self.status_interval)))
                waited = True
                if lib.PQconsumeInput(pg) != 1:
                    raise self._error("reading from the server")
                continue
            if n == -1:
                raise ConnectionLost(self._end_message())
            raise self._error("reading from the server")
        self.server_wal_end = wal_end_max
        self.maybe_status()
        return len(datas) - n0

    def _end_message(self):
        """The COPY ended: the server's ERROR (e.g. a publication that does not exist at
        the slot's position, docs/protocol.md §1.2) is in the next result."""
        lib, pg = self._lib, self._pgconn
        text = ""
        res = lib.PQgetResult(pg)
        if res:
            text = (lib.PQresultErrorMessage(res) or b"").decode("utf-8", "replace").strip()
            lib.PQclear(res)
        if not text:
            text = (lib.PQerrorMessage(pg) or b"").decode("utf-8", "replace").strip()
        return "replication stream ended: " + (text or "COPY done")

    def stop(self):
        """Best-effort CopyDone and close (the slot keeps what was confirmed)."""
        self.close()

    def close(self):
        for c in (self.conn, self.admin):
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
        self.conn = self.admin = None
        self._pgconn = None
        if self._reader is not None:
            self._reader.detach()
