"""What a capture directory has made durable: the state written into its checkpoint."""

from __future__ import annotations

__all__ = ["CaptureState", "FORMAT", "LEGACY_FORMAT"]

#: The checkpoint format written: 2 adds the identity, ``acked_lsn``, the manifest's
#: extent and a checksum of the checkpoint itself.
FORMAT = 2
#: Format 1 (no manifest, no checksum) is still read; capture upgrades it on resume.
LEGACY_FORMAT = 1


class CaptureState:
    """What is durable: written into ``checkpoint.json`` after each segment.

    * ``durable_lsn``: the highest end LSN of a transaction outcome in a durable
      segment (Commit, Stream Commit, Commit/Rollback Prepared, Prepare, Stream Prepare)
      or the LSN of a durable non-transactional Message. The resume filter drops what
      the server sends again at or below it.
    * ``acked_lsn``: the highest flush position capture may send to the server (never
      below ``durable_lsn``; higher when everything received was durable and the server
      had moved on, e.g. past transactions of unpublished tables). Nothing is confirmed
      before a checkpoint holding it is durable, so a slot whose ``confirmed_flush_lsn``
      is past it proves that this checkpoint is not the newest one (or that the slot
      was moved by someone else).
    * ``open_streams``: xids of streamed transactions with blocks in durable segments
      and no outcome yet.
    * ``finished_streams``: ``{xid: end_lsn}`` of streamed transactions committed or
      prepared in durable segments, kept until the slot has confirmed past them.
    * ``prepares``: ``[[gid, prepare_end_lsn, outcome_end_lsn or None], ...]`` of prepared
      transactions in durable segments, kept until the slot has confirmed past the
      outcome.
    * The identity (``capture_id``, ``system_identifier``, ``database``, ``slot``,
      ``publications``): a resume against another server, database, slot or
      publication set is refused.
    * The manifest's extent (``manifest_entries``, ``manifest_bytes``,
      ``manifest_chain``): the segments this checkpoint vouches for, and the hash chain
      over their manifest lines (``store.py``).
    * ``snapshot``: None (no initial snapshot), or the initial snapshot's record
      (``capture/snapshot.py``): ``state`` is ``creating`` / ``copying`` (cut short if
      found at a start: readers see no segment, the next start copies again) or
      ``done``, with the slot, its consistent point and the summary.
    """

    def __init__(self):
        self.format = FORMAT
        self.durable_lsn = 0
        self.acked_lsn = 0
        self.last_segment = 0
        self.next_ordinal = 0
        self.open_streams: set = set()
        self.finished_streams: dict = {}
        self.prepares: list = []
        self.transactions = 0
        self.options = None
        self.slot = None
        self.publications = None
        self.system_identifier = None
        self.database = None
        self.capture_id = None
        self.manifest_entries = 0
        self.manifest_bytes = 0
        self.manifest_chain = None
        self.snapshot = None

    def copy(self):
        s = CaptureState()
        s.__dict__.update(self.__dict__)
        s.open_streams = set(self.open_streams)
        s.finished_streams = dict(self.finished_streams)
        s.prepares = [list(p) for p in self.prepares]
        s.snapshot = dict(self.snapshot) if self.snapshot is not None else None
        return s

    @property
    def confirmable_lsn(self) -> int:
        """The highest position this state lets capture confirm."""
        return max(self.durable_lsn, self.acked_lsn)

    def to_json(self) -> dict:
        out = {
            "format": FORMAT,
            "capture_id": self.capture_id,
            "system_identifier": self.system_identifier,
            "database": self.database,
            "slot": self.slot,
            "publications": self.publications,
            "options": self.options,
            "durable_lsn": self.durable_lsn,
            "acked_lsn": max(self.acked_lsn, self.durable_lsn),
            "last_segment": self.last_segment,
            "next_ordinal": self.next_ordinal,
            "transactions": self.transactions,
            "open_streams": sorted(self.open_streams),
            "finished_streams": {str(k): v for k, v in sorted(self.finished_streams.items())},
            "prepares": self.prepares,
            "manifest": {"entries": self.manifest_entries, "bytes": self.manifest_bytes,
                         "chain": self.manifest_chain},
        }
        if self.snapshot is not None:
            out["snapshot"] = self.snapshot
        return out

    @classmethod
    def from_json(cls, d) -> "CaptureState":
        fmt = d.get("format")
        if fmt not in (FORMAT, LEGACY_FORMAT):
            raise ValueError(f"unknown checkpoint format {fmt!r}")
        s = cls()
        s.format = fmt
        s.capture_id = d.get("capture_id")
        s.system_identifier = d.get("system_identifier")
        s.database = d.get("database")
        s.slot = d.get("slot")
        pubs = d.get("publications")
        s.publications = list(pubs) if pubs is not None else None
        s.options = d.get("options")
        s.durable_lsn = int(d["durable_lsn"])
        s.acked_lsn = int(d.get("acked_lsn", s.durable_lsn))
        s.last_segment = int(d["last_segment"])
        s.next_ordinal = int(d["next_ordinal"])
        s.transactions = int(d.get("transactions", 0))
        s.open_streams = {int(x) for x in d.get("open_streams", [])}
        s.finished_streams = {int(k): int(v) for k, v in d.get("finished_streams", {}).items()}
        s.prepares = [list(p) for p in d.get("prepares", [])]
        m = d.get("manifest") or {}
        s.manifest_entries = int(m.get("entries", 0))
        s.manifest_bytes = int(m.get("bytes", 0))
        s.manifest_chain = m.get("chain")
        snap = d.get("snapshot")
        s.snapshot = dict(snap) if isinstance(snap, dict) else None
        return s

    def prune(self, confirmed_flush: int):
        """Forget what the server can no longer send again: outcomes whose end the
        slot has confirmed (``confirmed_flush_lsn`` at connection time)."""
        self.finished_streams = {x: e for x, e in self.finished_streams.items() if e > confirmed_flush}
        self.prepares = [p for p in self.prepares if p[2] is None or p[2] > confirmed_flush]
