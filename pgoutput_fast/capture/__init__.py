"""Capture from a live replication slot into durable Parquet segments, exactly once.

``pgoutput-fast capture --dsn DSN --slot NAME --publication NAME --out DIR`` (or
``run_capture(CaptureConfig(...))``) reads ``START_REPLICATION ... LOGICAL`` and writes
segment files with the columns ``lsn`` (XLogData dataStart), ``data`` (one pgoutput
message) and ``ordinal`` (the message's position in the whole capture). Feed the
segments, in order, to one ``pgoutput_fast.Decoder``: ``read_segments(dir)`` /
``iter_segments(dir)``.

With ``--create-slot`` the rows the published tables already hold come first
(``--snapshot initial``): the slot is created with an exported snapshot, the tables are
copied inside it and written as synthetic transactions below the slot's consistent
point (op ``'r'``), durable before the stream starts (``snapshot.py``).

How a transaction is neither lost nor duplicated
------------------------------------------------

* **Cuts.** A segment ends only outside ``B…C``, ``b…P`` and ``S…E``. It is written
  to a temp name in a writer thread, fsynced, hashed, renamed, the directory fsynced,
  its line (size, SHA-256, ordinals, hash chain) appended to ``manifest.jsonl``; then
  ``checkpoint.json`` (with its own checksum) is replaced the same way. Only a segment
  the checkpoint vouches for exists for readers (``store.py``).
* **The directory is capture's own.** ``capture.lock`` is held (``flock``) for the life
  of the process. The checkpoint records the server's system identifier, the
  database, slot and publications; a resume against others is refused. Startup
  removes only capture's own temp files and the one segment a crash can leave past the
  checkpoint, and that only when the slot proves it was never confirmed; anything
  else it cannot prove (no checkpoint beside segments, a damaged or older one) is
  refused with ``DirectoryRefused``, and nothing is deleted.
* **A failed write stops capture.** The first error of the writer thread (a full disk,
  a read-only file system, a failed fsync or rename) poisons it: no checkpoint is
  written after it, nothing more is confirmed, and ``run_capture`` raises
  ``DurabilityError`` within a round of the loop (0.1 s), idle or not.
* **Acknowledgement.** The flush position sent is the checkpoint's ``durable_lsn``: the
  highest end LSN of a transaction outcome in a durable segment (Commit, Stream Commit,
  Prepare, Stream Prepare, Commit/Rollback Prepared ``end_lsn``) or a durable
  non-transactional Message's LSN. Never a message's dataStart (it is not unique, and
  is 0/0 for Relation/Type), and never on receipt. When everything received is durable,
  the keepalive's walEnd is confirmed instead (no keepalive storm over skipped empty
  transactions), once a checkpoint holds it as ``acked_lsn``. psycopg2 opens the connection, but the CopyData traffic is read and
  answered here (``stream.py`` says why: psycopg2's own keepalive handling can confirm
  received, non-durable data).
* **What the server sends again** (docs/protocol.md §1.4). Decoding restarts at the slot's
  ``restart_lsn``; a transaction is sent again if its commit record starts at or after
  ``confirmed_flush_lsn``, which can be behind ``durable_lsn`` (a crash between the
  checkpoint and the status update). On resume the tracker drops these duplicates:
  a ``B…C`` whose ``final_lsn`` < ``durable_lsn``; Commit/Rollback Prepared with end
  ≤ ``durable_lsn``; a ``b…P`` whose (GID, prepare end) is in a durable segment (a
  ``b…P`` that PostgreSQL replays just before its Commit Prepared is *not* dropped when
  it is new); every block, Stream Commit/Prepare/Abort of an xid whose Stream Commit or
  Prepare is durable; a non-transactional Message at or below ``durable_lsn``. Relation
  and Type messages inside a dropped unit are kept (outside any transaction): the server
  does not send them again in that session and later transactions rely on them.
* **Streamed transactions still open** at the end of the durable segments: the flush
  position may pass their start (``restart_lsn`` stays before their first change, so
  the server decodes them again from the start). Their earlier blocks stay in the
  durable segments, and the first thing written after a resume is a Stream Abort
  ``A(xid, xid)`` for each of them (as the server itself sends for a transaction
  aborted by a crash): the decoder drops the old blocks, and the new
  ``first_segment`` blocks (or an ordinary ``B…C``) carry the whole transaction.
* **Prepared transactions** whose ``b…P`` is durable are not sent again once the slot
  confirmed past the prepare; the decoder holds them by GID across segments until
  ``K``/``r``.

The checkpoint keeps the few xids/GIDs the filter needs; entries the slot has confirmed
past are dropped at each start.

Memory
------

``CaptureConfig.memory_bytes`` (``--memory-budget``, 256MB) bounds the message data in
the process: one read (1/8 of it), the chunk being filled (1/8: it goes to the writer
thread as one Parquet row group when full, also in the middle of a transaction; runs of
a read are split so that a row group stays within it), and
the chunks queued for the writer (1/2, counted in bytes; a slower writer holds the
reader back, which keeps answering the server). A transaction larger than the budget,
streamed or not, is so written to the open segment's temp file as it arrives; the
rename, checkpoint and acknowledgement still wait for its end. The read and the chunk
are C memory (``MessageColumns``: payloads, offsets, LSNs; 16 bytes per message beyond
the payload), handed to Arrow without a copy; arrays are never built with ``pa.array``
(which imports pandas when installed: ~60 MiB).
"""

from .errors import (CaptureError, ConnectError, DirectoryRefused, DurabilityError,
                     SegmentError, ServerRefused)
from .state import CaptureState
from .store import SEGMENT_SCHEMA, SegmentEntry
from .segments import (iter_segments, load_state, read_segment, read_segments, segment_entries,
                       segment_paths, write_capture)
from .tracker import TransactionTracker
from .stream import ReplicationOptions, choose_options, max_protocol
from .runner import CaptureConfig, CaptureResult, run_capture

__all__ = ["run_capture", "CaptureConfig", "CaptureResult", "read_segments", "iter_segments",
           "segment_paths", "segment_entries", "read_segment", "write_capture", "load_state",
           "CaptureState", "SegmentEntry", "TransactionTracker", "SEGMENT_SCHEMA",
           "ReplicationOptions", "choose_options", "max_protocol", "CaptureError",
           "ConnectError", "ServerRefused", "DirectoryRefused", "DurabilityError",
           "SegmentError"]
