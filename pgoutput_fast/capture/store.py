"""The capture directory on disk: names, the checkpoint, the manifest, the lock, and the
one writer of segments.

Layout::

    capture.lock                 held (flock) by the capture that owns the directory
    checkpoint.json              the durable state (``CaptureState``) and its checksum
    manifest.jsonl               one line per segment: size, SHA-256, ordinals, hash chain
    0000000001.parquet           segments, in order; columns lsn, data, ordinal
    0000000002.parquet
    .0000000003.parquet.tmp      being written (never part of the durable record)

How a segment becomes durable (``DirectoryWriter.commit``): the temp file is written
(Parquet with page checksums), fsynced and hashed; renamed; the directory fsynced; its
manifest line appended and fsynced; then the checkpoint is replaced (temp, fsync,
rename, directory fsync). The checkpoint vouches for the first ``manifest_entries``
lines of the manifest (their byte length and the chain hash of the last one), so:

* a crash before the checkpoint leaves at most one segment (``last_segment + 1``) and
  one manifest line (whole or torn) past what the checkpoint lists: capture removes
  them on restart only when the slot proves they were never confirmed
  (``confirmed_flush_lsn`` not past the checkpoint's ``acked_lsn``);
* anything else past the checkpoint (two segments, a segment with no manifest line),
  a checkpoint that is missing beside segments, damaged, or older than the slot, is
  refused with ``DirectoryRefused`` and nothing is touched;
* a reader verifies the checkpoint's checksum, the manifest's chain, and each
  segment's size, SHA-256 and ordinals before it hands a row out (``segments.py``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import uuid
from typing import Any

import pyarrow as pa

from .errors import DirectoryRefused, DurabilityError, SegmentError
from .state import FORMAT, LEGACY_FORMAT, CaptureState

__all__ = ["CHECKPOINT", "MANIFEST", "LOCK", "SEGMENT_SCHEMA", "SegmentEntry", "segment_name",
           "segment_seq", "read_checkpoint", "write_checkpoint", "read_manifest",
           "DirectoryLock", "open_directory", "DirectoryWriter", "SegmentEncoder", "Recovery", "plan_recovery", "DEFAULT_FILE_MODE",
           "STREAM_COMPRESSION", "SNAPSHOT_COMPRESSION"]

CHECKPOINT = "checkpoint.json"
MANIFEST = "manifest.jsonl"
LOCK = "capture.lock"
DEFAULT_FILE_MODE = 0o600
#: the Parquet codec of segments when capture is given none (``CaptureConfig.compression``
#: None): zstd for the stream's segments (written as the server sends, small on disk);
#: LZ4 (pyarrow's "lz4": Parquet's LZ4_RAW) for an initial snapshot's or a backfill's,
#: whose encoding competes with the server's COPY for the CPU (about 30% less encoding
#: CPU than zstd, twice the bytes on disk; docs/capture.md "Initial snapshot")
STREAM_COMPRESSION = "zstd"
SNAPSHOT_COMPRESSION = "lz4"

#: The columns of a segment (``framing.read_capture`` reads ``lsn`` and ``data``).
SEGMENT_SCHEMA = pa.schema([
    pa.field("lsn", pa.int64(), nullable=False),       # XLogData dataStart (0/0 for R, Y, ...)
    pa.field("data", pa.binary(), nullable=False),     # one pgoutput message
    pa.field("ordinal", pa.int64(), nullable=False),   # position in the whole capture, from 0
])

_SEGMENT_RE = re.compile(r"(\d{10})\.parquet")
_TEMP_RE = re.compile(r"\.(\d{10})\.parquet\.tmp")
_HASH_CHUNK = 4 << 20


def segment_name(seq: int) -> str:
    return f"{seq:010d}.parquet"


def temp_name(seq: int) -> str:
    return "." + segment_name(seq) + ".tmp"


def segment_seq(name: str):
    """The number of a segment file name of capture's exact naming, else None."""
    m = _SEGMENT_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def dir_mode(file_mode: int) -> int:
    """A directory mode for a file mode: the x bit wherever the r bit is (0600 -> 0700)."""
    return file_mode | ((file_mode & 0o444) >> 2)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_digest(path) -> tuple[int, str]:
    """``(size, SHA-256 hex)`` of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            block = f.read(_HASH_CHUNK)
            if not block:
                break
            size += len(block)
            h.update(block)
    return size, h.hexdigest()


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _describe_os_error(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.EROFS:
        return "the file system is read-only"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    return exc.strerror or str(exc)


# ======================================================================================
# the checkpoint
# ======================================================================================

def encode_checkpoint(state: CaptureState) -> bytes:
    body = state.to_json()
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    return json.dumps(body, sort_keys=True, indent=1).encode("utf-8") + b"\n"


def decode_checkpoint(raw: bytes, where: str) -> CaptureState:
    """The state in a checkpoint's bytes; ``SegmentError`` when it does not prove itself
    (a torn or altered write fails the checksum)."""
    try:
        body = json.loads(raw.decode("utf-8"))
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
    except (UnicodeDecodeError, ValueError) as exc:
        raise SegmentError(f"{where}: the checkpoint is damaged (not valid JSON: {exc})") from None
    fmt = body.get("format")
    if fmt != LEGACY_FORMAT:
        checksum = body.pop("checksum", None)
        want = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
        if checksum != want:
            raise SegmentError(f"{where}: the checkpoint is damaged (its checksum does not match "
                               "its content)")
    try:
        return CaptureState.from_json(body)
    except (KeyError, TypeError, ValueError) as exc:
        raise SegmentError(f"{where}: the checkpoint is not one this version reads ({exc})") from None


def read_checkpoint(directory, store=None) -> CaptureState | None:
    """The checkpoint of a capture directory, or None when it has none. ``store``: the
    ``pgoutput_fast.storage.Store`` the directory is on (default: local)."""
    from ..storage import LOCAL

    store = store or LOCAL
    path = store.join(directory, CHECKPOINT)
    try:
        raw = store.read_bytes(path)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise SegmentError(f"{path}: is a directory, not a checkpoint") from None
    return decode_checkpoint(raw, path)


def write_checkpoint(directory, state: CaptureState, mode: int = DEFAULT_FILE_MODE):
    """Replace the checkpoint atomically: temp file, fsync, rename, directory fsync."""
    path = os.path.join(directory, CHECKPOINT)
    tmp = path + ".tmp"
    data = encode_checkpoint(state)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)



def checkpoint_or_fail(directory, state: CaptureState, mode: int, undone: str):
    """write_checkpoint; its failure is the DurabilityError that says which checkpoint
    and what was therefore not done (undone: "nothing was confirmed", ...)."""
    try:
        write_checkpoint(directory, state, mode)
    except OSError as exc:
        raise DurabilityError(f"writing the checkpoint of {directory} failed: "
                              f"{exc.strerror or exc}; {undone}") from None


# ======================================================================================
# the manifest
# ======================================================================================

class SegmentEntry:
    """One segment as the manifest lists it (picklable: Spark tasks get these)."""

    __slots__ = ("seq", "path", "bytes", "sha256", "first_ordinal", "messages", "store")

    def __init__(self, seq, path, nbytes=None, sha256=None, first_ordinal=None, messages=None,
                 store=None):
        self.seq = seq
        self.path = path                      # a local path, or the URI of the object
        self.bytes = nbytes
        self.sha256 = sha256                  # None for a legacy (format 1) directory
        self.first_ordinal = first_ordinal
        self.messages = messages
        self.store = store                    # pgoutput_fast.storage.Store; None: local

    def __reduce__(self):
        # the store pickles with its storage options (a Spark task reopens the file
        # system from them); repr() never shows them
        return (SegmentEntry, (self.seq, self.path, self.bytes, self.sha256,
                               self.first_ordinal, self.messages, self.store))

    def __repr__(self):
        return (f"SegmentEntry(seq={self.seq}, path={self.path!r}, bytes={self.bytes}, "
                f"first_ordinal={self.first_ordinal}, messages={self.messages})")


def manifest_seed(capture_id: str) -> str:
    return hashlib.sha256(b"pgoutput-fast manifest " + capture_id.encode()).hexdigest()


def manifest_line(entry: dict, prev_chain: str) -> tuple[bytes, str]:
    """A manifest line for ``entry`` (without ``chain``) and the chain hash it carries:
    SHA-256 over the previous chain hash and the entry's canonical JSON."""
    chain = hashlib.sha256(bytes.fromhex(prev_chain) + _canonical(entry)).hexdigest()
    line = dict(entry)
    line["chain"] = chain
    return _canonical(line) + b"\n", chain


def read_manifest(directory, state: CaptureState, store=None) -> tuple[list, bytes]:
    """The entries the checkpoint vouches for (verified: line count, byte length, chain)
    and the raw bytes past them (the unconfirmed tail, normally empty)."""
    from ..storage import LOCAL

    store = store or LOCAL
    path = store.join(directory, MANIFEST)
    try:
        raw = store.read_bytes(path)
    except FileNotFoundError:
        if state.manifest_entries:
            raise SegmentError(f"{path}: missing, but the checkpoint lists "
                               f"{state.manifest_entries} segments") from None
        return [], b""
    if len(raw) < state.manifest_bytes:
        raise SegmentError(f"{path}: truncated ({len(raw)} bytes, the checkpoint vouches for "
                           f"{state.manifest_bytes})")
    body, tail = raw[:state.manifest_bytes], raw[state.manifest_bytes:]
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) != state.manifest_entries or (body and not body.endswith(b"\n")):
        raise SegmentError(f"{path}: holds {len(lines)} entries where the checkpoint vouches "
                           f"for {state.manifest_entries}")
    chain = manifest_seed(state.capture_id or "")
    entries = []
    for i, line in enumerate(lines):
        try:
            d = json.loads(line)
            want_chain = d.pop("chain")
        except (ValueError, KeyError, AttributeError):
            raise SegmentError(f"{path}: line {i + 1} is damaged") from None
        chain = hashlib.sha256(bytes.fromhex(chain) + _canonical(d)).hexdigest()
        if want_chain != chain:
            raise SegmentError(f"{path}: line {i + 1} is altered (its hash chain does not match)")
        if d.get("seq") != i + 1 or d.get("file") != segment_name(i + 1):
            raise SegmentError(f"{path}: line {i + 1} names segment {d.get('file')!r}, "
                               f"expected {segment_name(i + 1)}")
        entries.append(SegmentEntry(d["seq"], store.join(directory, d["file"]), d["bytes"],
                                    d["sha256"], d["first_ordinal"], d["messages"],
                                    None if store.local else store))
    if state.manifest_entries and chain != state.manifest_chain:
        raise SegmentError(f"{path}: its hash chain does not match the checkpoint's")
    if len(entries) != state.last_segment:
        raise SegmentError(f"{path}: lists {len(entries)} segments, the checkpoint "
                           f"{state.last_segment}")
    return entries, tail


def legacy_entries(directory, state: CaptureState, store=None) -> list:
    """The segments of a format 1 directory (no manifest: no digests to check)."""
    from ..storage import LOCAL

    store = store or LOCAL
    out = []
    for seq in range(1, state.last_segment + 1):
        path = store.join(directory, segment_name(seq))
        if not store.exists(path):
            raise SegmentError(f"{path}: missing (the checkpoint lists segments 1 to "
                               f"{state.last_segment})")
        out.append(SegmentEntry(seq, path, store=None if store.local else store))
    return out


# ======================================================================================
# the lock
# ======================================================================================

class DirectoryLock:
    """An exclusive ``flock`` on ``capture.lock`` for the life of the capture; the file
    holds the owner's pid. A second capture fails at once, naming that pid. (flock is
    per open file: it holds on local file systems; NFS and other network file systems
    may not honour it, see docs.)"""

    def __init__(self, directory, mode: int = DEFAULT_FILE_MODE):
        import fcntl

        self.path = os.path.join(directory, LOCK)
        self.fd: int | None = None
        try:
            # read-only: the lock is the open file's, and a capture holding no file open
            # for writing while idle lets an administrator remount the file system
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, mode)
        except OSError as exc:
            raise DirectoryRefused(f"cannot open the lock file {self.path}: "
                                   f"{_describe_os_error(exc)}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(self.fd, 64, 0).decode("ascii", "replace").strip()
            except OSError:
                holder = ""
            os.close(self.fd)
            self.fd = None
            who = f"pid {holder}" if holder.isdigit() else "another process"
            raise DirectoryRefused(
                f"{directory} is in use by another capture ({who}): one directory takes one "
                "capture; stop that one first, or use another --out") from None
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, f"{os.getpid()}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass   # the lock holds without the pid (a read-only or full file system)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)    # closing the descriptor releases the flock
            self.fd = None


def open_directory(out, file_mode: int = DEFAULT_FILE_MODE, what: str = "capture") -> DirectoryLock:
    """Create the directory ``out`` if it is missing (the x bits matching ``file_mode``)
    and take its lock (``DirectoryLock``: the caller releases it). ``DirectoryRefused``
    when it cannot be created, is not a directory, or another process holds it."""
    try:
        os.makedirs(out, mode=dir_mode(file_mode), exist_ok=True)
    except OSError as exc:
        raise DirectoryRefused(f"cannot create the {what} directory {out}: "
                               f"{exc.strerror or exc}") from None
    if not os.path.isdir(out):
        raise DirectoryRefused(f"--out {out} is not a directory")
    return DirectoryLock(out, file_mode)


# ======================================================================================
# recovery: what startup may remove, proven by the checkpoint
# ======================================================================================

class Recovery:
    """What a capture directory holds, checked without changing anything.

    ``state`` is the checkpoint (None for a new directory). ``temp_files`` are capture's
    own temp files (never part of the durable record). ``tail_segment`` is a segment
    ``last_segment + 1`` renamed before a crash whose checkpoint was never written, and
    ``manifest_tail`` the bytes of its manifest line: both are removed only after the
    slot proves they were never confirmed (``apply``)."""

    def __init__(self, directory):
        self.directory = directory
        self.state: CaptureState | None = None
        self.entries: list = []
        self.temp_files: list = []
        self.tail_segment: int | None = None
        self.manifest_tail = b""
        self.legacy = False

    def check_slot(self, confirmed_flush: int, slot: str):
        """Refuse a checkpoint older than what the slot has confirmed."""
        st = self.state
        if st is None:
            return
        if confirmed_flush > st.confirmable_lsn:
            from ..lsn import format_lsn

            raise DirectoryRefused(
                f"{os.path.join(self.directory, CHECKPOINT)} is older than the slot: slot "
                f"{slot!r} has confirmed {format_lsn(confirmed_flush)}, the checkpoint only "
                f"{format_lsn(st.confirmable_lsn)}. The checkpoint was replaced by an older copy, "
                "or the slot was advanced or re-created, so transactions between the two may be "
                "missing from this directory. Nothing was changed: restore the newest "
                "checkpoint.json, or capture into a new directory (with a new slot and a "
                "snapshot) and keep this one for reading")

    def apply(self, file_mode: int = DEFAULT_FILE_MODE) -> list:
        """Remove what ``plan_recovery`` found and ``check_slot`` proved unconfirmed.
        Returns the names removed."""
        d = self.directory
        removed = []
        try:
            for name in self.temp_files:
                os.unlink(os.path.join(d, name))
                removed.append(name)
            if self.tail_segment is not None:
                os.unlink(os.path.join(d, segment_name(self.tail_segment)))
                removed.append(segment_name(self.tail_segment))
            if self.manifest_tail:
                fd = os.open(os.path.join(d, MANIFEST), os.O_WRONLY)
                try:
                    os.ftruncate(fd, self.state.manifest_bytes if self.state else 0)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                removed.append(f"{MANIFEST} (last {len(self.manifest_tail)} bytes)")
            if removed:
                fsync_dir(d)
        except OSError as exc:
            raise DurabilityError(f"cleaning up {d} failed: {_describe_os_error(exc)}; nothing "
                                  "past the checkpoint was confirmed; fix the cause and start "
                                  "capture again") from None
        self.temp_files, self.tail_segment, self.manifest_tail = [], None, b""
        return removed


def plan_recovery(directory) -> Recovery:
    """Check a capture directory before capture resumes in it; change nothing.

    Raises ``DirectoryRefused`` for anything capture cannot prove: segments or a
    manifest without a checkpoint, a damaged checkpoint or manifest, a segment the
    checkpoint lists that is missing or of another size, more than one segment (or a
    segment and a manifest line of other numbers) past the checkpoint."""
    rec = Recovery(directory)
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise DirectoryRefused(f"cannot read {directory}: {_describe_os_error(exc)}") from None
    segs = sorted(s for s in (segment_seq(n) for n in names) if s is not None)
    rec.temp_files = sorted(n for n in names if _TEMP_RE.fullmatch(n) or n == CHECKPOINT + ".tmp")
    try:
        state = read_checkpoint(directory)
    except SegmentError as exc:
        raise DirectoryRefused(f"{exc}. Nothing was changed: restore checkpoint.json from a "
                               "backup, or capture into a new directory") from None
    if state is None:
        if segs or MANIFEST in names:
            raise DirectoryRefused(
                f"{directory} holds segments but no {CHECKPOINT}: capture cannot tell which of "
                "them are complete and confirmed. Nothing was changed: restore checkpoint.json, "
                "or capture into a new directory")
        return rec
    rec.state = state
    if state.snapshot is not None and state.snapshot.get("state") != "done":
        # an initial snapshot cut short: its segments were never readable and nothing
        # was confirmed; the next start removes them and copies again (snapshot.py)
        return rec
    if state.format == LEGACY_FORMAT:
        rec.legacy = True
    else:
        try:
            rec.entries, rec.manifest_tail = read_manifest(directory, state)
        except SegmentError as exc:
            raise DirectoryRefused(f"{exc}. Nothing was changed: restore the file, or capture "
                                   "into a new directory") from None
    last = state.last_segment
    for seq in range(1, last + 1):
        if seq not in segs:
            raise DirectoryRefused(
                f"{os.path.join(directory, segment_name(seq))}: missing, but the checkpoint "
                "lists it. Nothing was changed: restore the segment, or capture into a new "
                "directory")
    for e in rec.entries:
        try:
            size = os.path.getsize(e.path)
        except OSError:
            size = None
        if size != e.bytes:
            raise DirectoryRefused(f"{e.path}: {size} bytes, the manifest says {e.bytes}. Nothing "
                                   "was changed: restore the segment, or capture into a new directory")
    beyond = [s for s in segs if s > last]
    if len(beyond) > 1 or (beyond and beyond[0] != last + 1):
        raise DirectoryRefused(
            f"{directory} holds segments past its checkpoint "
            f"({', '.join(segment_name(s) for s in beyond[:3])}), more than a crash can leave: "
            "the checkpoint may be an older copy. Nothing was changed: restore the newest "
            "checkpoint.json, or capture into a new directory")
    if rec.manifest_tail:
        lines = rec.manifest_tail.split(b"\n")
        whole = [x for x in lines[:-1]]
        ok = len(whole) <= 1 and beyond
        if whole and ok:
            try:
                ok = json.loads(whole[0]).get("seq") == last + 1
            except ValueError:
                ok = False
        if len(whole) > 1 or (whole and not ok):
            raise DirectoryRefused(
                f"{os.path.join(directory, MANIFEST)} lists segments past the checkpoint: the "
                "checkpoint may be an older copy. Nothing was changed: restore the newest "
                "checkpoint.json, or capture into a new directory")
    rec.tail_segment = beyond[0] if beyond else None
    return rec


# ======================================================================================
# the writer
# ======================================================================================

class DirectoryWriter:
    """Writes segments, the manifest and the checkpoint of one directory, in order.
    Synchronous: ``SegmentWriter`` runs it in a thread; ``segments.write_capture``
    directly. Every failure raises ``DurabilityError`` naming the file and the cause."""

    def __init__(self, directory, state: CaptureState, *, file_mode=DEFAULT_FILE_MODE,
                 compression="zstd", metadata=None):
        self.directory = directory
        self.file_mode = file_mode
        self.compression = compression
        self.metadata = metadata or {}
        self.last_segment = state.last_segment
        self.manifest_entries = state.manifest_entries
        self.manifest_bytes = state.manifest_bytes
        self.capture_id = state.capture_id
        if self.capture_id is None:
            raise ValueError("a DirectoryWriter needs a state with a capture_id")
        self.manifest_chain = state.manifest_chain or manifest_seed(self.capture_id)
        self.bytes_written = 0
        self.segments_written = 0
        self._pq: Any = None
        self._tmp: Any = None
        self._seq: Any = None
        #: the segments' schema: SEGMENT_SCHEMA with the capture's metadata
        self.schema = SEGMENT_SCHEMA.with_metadata(
            {k: json.dumps(v) for k, v in self.metadata.items()})
        self._first_ordinal: int | None = None
        self._rows = 0

    def _fail(self, what, path, exc: OSError):
        from ..lsn import format_lsn

        return DurabilityError(
            f"{what} {path} failed: {_describe_os_error(exc)}. Capture stopped; nothing past the "
            f"last checkpoint was confirmed to the server ({format_lsn(self._confirmed)}), so a "
            "restart after the cause is fixed loses nothing")

    _confirmed = 0

    def note_confirmable(self, lsn: int):
        """The position of the last durable checkpoint (for the error message)."""
        self._confirmed = lsn

    # -- one segment -----------------------------------------------------------------
    def begin(self, seq: int):
        import pyarrow.parquet as pq

        self._seq = seq
        self._tmp = os.path.join(self.directory, temp_name(seq))
        try:
            fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, self.file_mode)
            os.close(fd)
            self._pq = pq.ParquetWriter(self._tmp, self.schema,
                                        **parquet_options(self.compression))
        except OSError as exc:
            self.discard()
            raise self._fail("creating", self._tmp or self.directory, exc) from None
        self._first_ordinal = None
        self._rows = 0

    @property
    def open(self) -> bool:
        return self._pq is not None

    def write(self, arrays):
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if self._first_ordinal is None and table.num_rows:
            self._first_ordinal = table.column(2)[0].as_py()
        try:
            self._pq.write_table(table)
        except OSError as exc:
            raise self._fail("writing", self._tmp, exc) from None
        self._rows += table.num_rows

    def commit(self, state: CaptureState) -> CaptureState:
        """Close the open segment and make it durable, then the checkpoint ``state``
        (its segment and manifest fields are set here). Returns the state written."""
        seq, tmp = self._seq, self._tmp
        final = os.path.join(self.directory, segment_name(seq))
        if seq != self.last_segment + 1:
            raise RuntimeError(f"segment {seq} committed after {self.last_segment}")
        try:
            self._pq.close()
            self._pq = None
            _fsync_path(tmp)
            nbytes, digest = file_digest(tmp)
        except OSError as exc:
            raise self._fail("writing", tmp, exc) from None
        first = self._first_ordinal if self._first_ordinal is not None else state.next_ordinal
        self._record(seq, tmp, final, nbytes, digest, first, self._rows)
        self._tmp = None
        self._seq = None
        return self.checkpoint(state)

    def add_segment(self, seq: int, data, digest: str, first_ordinal: int, messages: int):
        """Make a segment encoded elsewhere (``SegmentEncoder``: its bytes and SHA-256)
        durable: temp file, fsync, rename, directory fsync, manifest line (fsynced). No
        checkpoint: the caller writes one (``checkpoint``) when the segments it vouches
        for are all added."""
        if seq != self.last_segment + 1:
            raise RuntimeError(f"segment {seq} added after {self.last_segment}")
        tmp = os.path.join(self.directory, temp_name(seq))
        final = os.path.join(self.directory, segment_name(seq))
        view = memoryview(data)
        nbytes = len(view)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, self.file_mode)
            self._tmp = tmp
            try:
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.discard()
            raise self._fail("writing", tmp, exc) from None
        self._record(seq, tmp, final, nbytes, digest, first_ordinal, messages)
        self._tmp = None

    def add_written_segment(self, seq: int, nbytes: int, digest: str, first_ordinal: int,
                            messages: int):
        """Make a segment that a ``SegmentEncoder`` wrote to its temp file (``temp_name``,
        fsynced) and hashed durable: rename, directory fsync, manifest line (fsynced).
        No checkpoint, as ``add_segment``."""
        if seq != self.last_segment + 1:
            raise RuntimeError(f"segment {seq} added after {self.last_segment}")
        tmp = os.path.join(self.directory, temp_name(seq))
        final = os.path.join(self.directory, segment_name(seq))
        self._record(seq, tmp, final, nbytes, digest, first_ordinal, messages)

    def _record(self, seq, tmp, final, nbytes, digest, first, rows):
        """Rename a fsynced temp file to its segment name, fsync the directory and
        append the segment's manifest line (fsynced)."""
        try:
            os.replace(tmp, final)
            self._tmp = None
            fsync_dir(self.directory)
        except OSError as exc:
            raise self._fail("renaming", final, exc) from None
        entry = {"seq": seq, "file": segment_name(seq), "bytes": nbytes, "sha256": digest,
                 "first_ordinal": first, "messages": rows}
        line, chain = manifest_line(entry, self.manifest_chain)
        mpath = os.path.join(self.directory, MANIFEST)
        try:
            fd = os.open(mpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, self.file_mode)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            if self.manifest_entries == 0:
                fsync_dir(self.directory)
        except OSError as exc:
            raise self._fail("appending to", mpath, exc) from None
        self.manifest_chain = chain
        self.manifest_entries += 1
        self.manifest_bytes += len(line)
        self.last_segment = seq
        self.bytes_written += nbytes
        self.segments_written += 1

    def checkpoint(self, state: CaptureState) -> CaptureState:
        """Write ``state`` as the checkpoint, stamped with this writer's segments."""
        state = state.copy()
        state.capture_id = self.capture_id
        state.last_segment = self.last_segment
        state.manifest_entries = self.manifest_entries
        state.manifest_bytes = self.manifest_bytes
        state.manifest_chain = self.manifest_chain if self.manifest_entries else None
        state.acked_lsn = max(state.acked_lsn, state.durable_lsn)
        try:
            write_checkpoint(self.directory, state, self.file_mode)
        except OSError as exc:
            raise self._fail("writing", os.path.join(self.directory, CHECKPOINT), exc) from None
        self._confirmed = state.confirmable_lsn
        return state

    def discard(self):
        """Drop the open segment (its temp file is never part of the durable record)."""
        _close_quietly(self._pq)
        self._pq = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass     # left for the next start to remove (a read-only file system)
            self._tmp = None
        self._seq = None


def _close_quietly(pq) -> None:
    """Close a ParquetWriter being dropped (None: nothing); what it raises does not matter
    then: its file is a temp file that is never part of the durable record."""
    if pq is not None:
        try:
            pq.close()
        except Exception:
            pass


def parquet_options(compression) -> dict:
    """How every segment is written: no dictionary, statistics of the LSN and ordinal,
    page checksums (every reader verifies them)."""
    return {"compression": compression, "use_dictionary": False,
            "write_statistics": ["lsn", "ordinal"], "write_page_checksum": True}


class _HashingFile:
    """The file object a ``ParquetWriter`` writes a segment's temp file through: every
    write goes to the descriptor and into the SHA-256 as it comes (no copy of the whole
    file in memory, no second read to hash it)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.sha = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        self.sha.update(view)
        while view:
            k = os.write(self.fd, view)
            view = view[k:]
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

    def flush(self):
        pass

    def writable(self) -> bool:
        return True

    def close(self):
        self.closed = True


class SegmentEncoder:
    """One segment encoded, the same Parquet ``DirectoryWriter`` writes (one row group
    per ``write``). In memory by default: ``finish()`` gives its bytes and SHA-256 for
    ``DirectoryWriter.add_segment``. With ``path`` (the segment's temp file,
    ``temp_name``) it is written there as it is encoded, hashed on the way, and
    ``finish()`` fsyncs it and gives ``(None, SHA-256)`` (``nbytes``: its size) for
    ``DirectoryWriter.add_written_segment``; ``discard()`` removes it. pyarrow and hashlib
    release the GIL: encoders in several threads run in parallel (the snapshot's
    pipeline)."""

    def __init__(self, schema, compression="zstd", path=None, file_mode=DEFAULT_FILE_MODE):
        import pyarrow.parquet as pq

        self.schema = schema
        self.path = path
        self.nbytes = 0
        self._file: _HashingFile | None = None
        self._pq: Any = None
        if path is None:
            self._sink: Any = pa.BufferOutputStream()
        else:
            self._file = _HashingFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                              file_mode))
            self._sink = self._file
        try:
            self._pq = pq.ParquetWriter(self._sink, schema, **parquet_options(compression))
        except BaseException:
            self.discard()
            raise
        self.first_ordinal: int | None = None
        self.rows = 0

    def write(self, columns):
        """One row group: ``[lsn, data, ordinal]`` (arrays or chunked arrays)."""
        table = pa.Table.from_arrays(columns, schema=self.schema)
        if self.first_ordinal is None and table.num_rows:
            self.first_ordinal = table.column(2)[0].as_py()
        self._pq.write_table(table)
        self.rows += table.num_rows

    def finish(self) -> tuple:
        """``(buffer, SHA-256 hex)`` of the whole file; ``(None, SHA-256 hex)`` when it
        was written to ``path`` (then fsynced and closed)."""
        self._pq.close()
        self._pq = None
        if self._file is None:
            data = self._sink.getvalue()
            self._sink = None
            self.nbytes = data.size
            return data, hashlib.sha256(data).hexdigest()
        f, self._file, self._sink = self._file, None, None
        try:
            os.fsync(f.fd)
        finally:
            os.close(f.fd)
        self.nbytes = f.size
        return None, f.sha.hexdigest()

    def discard(self):
        """Drop the segment (its temp file, if any; best effort: a temp file is never
        part of the durable record, and the next start removes what is left)."""
        _close_quietly(self._pq)
        self._pq = None
        if self._file is not None:
            try:
                os.close(self._file.fd)
            except OSError:
                pass
            self._file = None
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self._sink = None


def new_capture_id() -> str:
    return str(uuid.uuid4())


def upgrade_legacy(directory, state: CaptureState, file_mode=DEFAULT_FILE_MODE) -> CaptureState:
    """Give a format 1 directory a manifest (the digests of its segments as they are now)
    and a format 2 checkpoint. The segments are trusted as found: format 1 kept no
    digest to check them against."""
    from ..parquet_io import read_parquet

    state = state.copy()
    state.capture_id = state.capture_id or new_capture_id()
    chain = manifest_seed(state.capture_id)
    data = b""
    for seq in range(1, state.last_segment + 1):
        path = os.path.join(directory, segment_name(seq))
        nbytes, digest = file_digest(path)
        t = read_parquet(path, ["ordinal"])
        first = t.column(0)[0].as_py() if t.num_rows else None
        entry = {"seq": seq, "file": segment_name(seq), "bytes": nbytes, "sha256": digest,
                 "first_ordinal": first, "messages": t.num_rows}
        line, chain = manifest_line(entry, chain)
        data += line
    mpath = os.path.join(directory, MANIFEST)
    tmp = mpath + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, file_mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, mpath)
    state.manifest_entries = state.last_segment
    state.manifest_bytes = len(data)
    state.manifest_chain = chain if state.last_segment else None
    state.format = FORMAT
    write_checkpoint(directory, state, file_mode)
    return state
