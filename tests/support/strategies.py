"""Hypothesis strategies for valid pgoutput message objects (every class).

Everything generated here satisfies ``decode(encode(m), in_stream=m.xid is not None)
== m``: flags take only their legal values (docs/protocol.md §3.12), strings contain no NUL
and are *canonical* under UTF-8 + surrogateescape (either plain text without surrogates,
or arbitrary non-NUL bytes decoded with surrogateescape), and integers span the whole
unsigned/signed range of their wire type (OIDs/XIDs >= 2^31, negative timestamps).
"""

from __future__ import annotations

from hypothesis import strategies as st

from pgoutput_fast import (
    UNCHANGED_TOAST,
    Value,
    RelationColumn,
    Begin,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    LogicalMessage,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
    BeginPrepare,
    Prepare,
    CommitPrepared,
    RollbackPrepared,
    StreamPrepare,
)

__all__ = [
    "lsns",
    "timestamps",
    "xids",
    "oids",
    "names",
    "values",
    "tuple_data",
    "stream_xids",
    "MESSAGE_STRATEGIES",
    "messages",
    "in_stream_messages",
]

# --- primitives ------------------------------------------------------------------------

lsns = st.integers(min_value=0, max_value=(1 << 64) - 1)
timestamps = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
xids = st.integers(min_value=0, max_value=(1 << 32) - 1)
oids = xids
typmods = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)

_plain_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)
# Non-UTF-8 bytes survive as lone surrogates (U+DC80..U+DCFF) via surrogateescape.
_raw_names = st.binary(max_size=12).filter(lambda b: b"\x00" not in b).map(
    lambda b: b.decode("utf-8", "surrogateescape")
)
names = st.one_of(_plain_text, _raw_names, st.sampled_from(["", "public", "pg_catalog"]))

values = st.one_of(
    st.none(),
    st.just(UNCHANGED_TOAST),
    st.builds(Value, st.sampled_from(["t", "b"]), st.binary(max_size=40)),
)
tuple_data = st.lists(values, max_size=8).map(tuple)
stream_xids = st.one_of(st.none(), xids)

# --- messages --------------------------------------------------------------------------

relation_columns = st.builds(RelationColumn, st.sampled_from([0, 1]), names, oids, typmods)

_updates = st.one_of(
    st.builds(Update, oids, st.none(), st.none(), tuple_data, stream_xids),
    st.builds(Update, oids, st.sampled_from(["K", "O"]), tuple_data, tuple_data, stream_xids),
)

MESSAGE_STRATEGIES = {
    Begin: st.builds(Begin, lsns, timestamps, xids),
    Commit: st.builds(Commit, st.just(0), lsns, lsns, timestamps),
    Origin: st.builds(Origin, lsns, names),
    Relation: st.builds(
        Relation,
        oids,
        names,
        names,
        st.sampled_from(["d", "n", "f", "i"]),
        st.lists(relation_columns, max_size=5).map(tuple),
        stream_xids,
    ),
    Type: st.builds(Type, oids, names, names, stream_xids),
    Insert: st.builds(Insert, oids, tuple_data, stream_xids),
    Update: _updates,
    Delete: st.builds(Delete, oids, st.sampled_from(["K", "O"]), tuple_data, stream_xids),
    Truncate: st.builds(
        Truncate,
        st.integers(min_value=0, max_value=3),
        st.lists(oids, max_size=6).map(tuple),
        stream_xids,
    ),
    LogicalMessage: st.builds(
        LogicalMessage, st.sampled_from([0, 1]), lsns, names, st.binary(max_size=60), stream_xids
    ),
    StreamStart: st.builds(StreamStart, xids, st.sampled_from([0, 1])),
    StreamStop: st.just(StreamStop()),
    StreamCommit: st.builds(StreamCommit, xids, st.just(0), lsns, lsns, timestamps),
    StreamAbort: st.one_of(
        st.builds(StreamAbort, xids, xids),
        st.builds(StreamAbort, xids, xids, lsns, timestamps),
    ),
    BeginPrepare: st.builds(BeginPrepare, lsns, lsns, timestamps, xids, names),
    Prepare: st.builds(Prepare, st.just(0), lsns, lsns, timestamps, xids, names),
    CommitPrepared: st.builds(CommitPrepared, st.just(0), lsns, lsns, timestamps, xids, names),
    RollbackPrepared: st.builds(
        RollbackPrepared, st.just(0), lsns, lsns, timestamps, timestamps, xids, names
    ),
    StreamPrepare: st.builds(StreamPrepare, st.just(0), lsns, lsns, timestamps, xids, names),
}

#: any valid message of any class (stream XID present or not where the class has one)
messages = st.one_of(list(MESSAGE_STRATEGIES.values()))

#: only messages that carry a stream XID (R/Y/I/U/D/T/M with ``xid`` set)
in_stream_messages = st.one_of(
    [
        s.filter(lambda m: m.xid is not None)
        for cls, s in MESSAGE_STRATEGIES.items()
        if cls.type_byte in "RYIUDTM"
    ]
)
