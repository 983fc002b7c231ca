"""RelationCatalog: what each relation OID looked like, versioned by LSN.

Built from Relation (``R``) and Type (``Y``) messages. A new version starts whenever a
Relation message differs from the current one for its OID (columns, types, names or
replica identity); identical repeats (sent after every reconnect, SQL call, stream, or
cache invalidation) reuse the current version. The catalog is small, serializable (JSON
and pickle) and can seed a new ``Decoder(catalog=...)``: that is how Spark tasks decode
segments in parallel.
"""

from __future__ import annotations

import json
from typing import Iterable, TypeVar

from .messages import Relation, RelationColumn, Type
from .types import ColumnType, resolve_column_type

__all__ = ["RelationVersion", "RelationCatalog"]


class RelationVersion:
    """One schema version of a relation: its columns and their resolved types."""

    __slots__ = ("relid", "nspname", "relname", "replident", "columns", "column_types",
                 "from_lsn", "version", "_key")

    def __init__(self, relid, nspname, relname, replident, columns, column_types, from_lsn, version):
        self.relid = relid
        self.nspname = nspname
        self.relname = relname
        self.replident = replident
        self.columns = tuple(columns)
        self.column_types = tuple(column_types)
        self.from_lsn = from_lsn
        self.version = version
        self._key = (nspname, relname, replident, self.columns, self.column_types)

    @property
    def schema(self) -> str:
        """Schema name (PostgreSQL sends an empty string for pg_catalog)."""
        return self.nspname or "pg_catalog"

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.relname}"

    @property
    def column_names(self) -> tuple:
        return tuple(c.name for c in self.columns)

    @property
    def key_columns(self) -> tuple:
        return tuple(c.name for c in self.columns if c.flags & 1)

    def same_shape(self, other: "RelationVersion") -> bool:
        return self._key == other._key

    def to_dict(self) -> dict:
        return {
            "relid": self.relid,
            "nspname": self.nspname,
            "relname": self.relname,
            "replident": self.replident,
            "from_lsn": self.from_lsn,
            "version": self.version,
            "columns": [list(c) for c in self.columns],
            "column_types": [list(t) for t in self.column_types],
        }

    @classmethod
    def from_dict(cls, d) -> "RelationVersion":
        return cls(
            d["relid"], d["nspname"], d["relname"], d["replident"],
            [RelationColumn(*c) for c in d["columns"]],
            [ColumnType(*t) for t in d["column_types"]],
            d["from_lsn"], d["version"],
        )

    def __eq__(self, other):
        return (isinstance(other, RelationVersion) and self.relid == other.relid
                and self.version == other.version and self.from_lsn == other.from_lsn
                and self._key == other._key)

    def __hash__(self):
        return hash((self.relid, self.version))

    def __reduce__(self):
        return (RelationVersion.from_dict, (self.to_dict(),))

    def __repr__(self):
        cols = ", ".join(c.name for c in self.columns)
        return (f"RelationVersion({self.qualified_name} relid={self.relid} v{self.version} "
                f"from_lsn={self.from_lsn} ident={self.replident!r} ({cols}))")


_Catalog = TypeVar("_Catalog", bound="RelationCatalog")


class RelationCatalog:
    """relid -> [RelationVersion ...] in LSN order, plus Type messages seen."""

    def __init__(self):
        self.relations: dict[int, list[RelationVersion]] = {}
        self.types: dict[int, tuple[str, str]] = {}

    # -- building ------------------------------------------------------------------
    def apply_type(self, msg: Type) -> None:
        self.types[msg.typid] = (msg.nspname, msg.typname)

    def apply_relation(self, msg: Relation, lsn: int = 0) -> RelationVersion:
        """Record a Relation message; return the version now current for its OID."""
        types = [resolve_column_type(c.type_oid, c.typmod, self.types) for c in msg.columns]
        versions = self.relations.setdefault(msg.relid, [])
        cand = RelationVersion(msg.relid, msg.nspname, msg.relname, msg.replident,
                               msg.columns, types, int(lsn or 0), len(versions))
        if versions and versions[-1].same_shape(cand):
            return versions[-1]
        versions.append(cand)
        return cand

    # -- lookup --------------------------------------------------------------------
    def current(self, relid: int) -> RelationVersion | None:
        versions = self.relations.get(relid)
        return versions[-1] if versions else None

    def at(self, relid: int, lsn: int) -> RelationVersion | None:
        """The version in effect at ``lsn`` (the last one whose from_lsn <= lsn)."""
        found = None
        for v in self.relations.get(relid, ()):
            if v.from_lsn <= lsn:
                found = v
        return found

    def versions(self) -> Iterable[RelationVersion]:
        for vs in self.relations.values():
            yield from vs

    def by_name(self, qualified_name: str) -> list[RelationVersion]:
        return [v for v in self.versions() if v.qualified_name == qualified_name]

    def copy(self) -> "RelationCatalog":
        return RelationCatalog.from_dict(self.to_dict())

    def merge(self, other: "RelationCatalog") -> None:
        """Add the versions of another catalog (e.g. built from a later segment)."""
        self.types.update(other.types)
        for v in sorted(other.versions(), key=lambda v: (v.from_lsn, v.relid, v.version)):
            versions = self.relations.setdefault(v.relid, [])
            if versions and versions[-1].same_shape(v):
                continue
            versions.append(RelationVersion.from_dict({**v.to_dict(), "version": len(versions)}))

    # -- serialization -------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": "pgoutput_fast.catalog/1",
            "types": [[k, ns, n] for k, (ns, n) in sorted(self.types.items())],
            "relations": [v.to_dict() for v in self.versions()],
        }

    @classmethod
    def from_dict(cls: "type[_Catalog]", d) -> "_Catalog":
        if d.get("format") != "pgoutput_fast.catalog/1":
            raise ValueError("not a pgoutput_fast catalog")
        cat = cls()
        cat.types = {k: (ns, n) for k, ns, n in d["types"]}
        for vd in d["relations"]:
            v = RelationVersion.from_dict(vd)
            cat.relations.setdefault(v.relid, []).append(v)
        for vs in cat.relations.values():
            vs.sort(key=lambda v: v.version)
        return cat

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "RelationCatalog":
        return cls.from_dict(json.loads(text))

    def __reduce__(self):
        return (RelationCatalog.from_dict, (self.to_dict(),))

    def __eq__(self, other):
        return isinstance(other, RelationCatalog) and self.to_dict() == other.to_dict()

    def __repr__(self):
        n = sum(len(v) for v in self.relations.values())
        return f"RelationCatalog({len(self.relations)} relations, {n} versions, {len(self.types)} types)"
