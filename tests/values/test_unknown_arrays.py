"""Arrays of types the decoder does not know (enum[], a composite's or a domain's array,
point[] ...): a list of the elements, text in text mode, send bytes in binary mode.

* The column type: which array types are resolved as ``K_ARRAY`` of ``K_UNKNOWN``
  (types.py) and their Arrow type per mode.
* The values: native and reference parse the same inputs identically, valid or not
  (Hypothesis: random shapes, lower bounds, NULL elements, then truncated, with a bad
  ndim / flags / dimension / lower bound / element length, or trailing bytes: a
  DecodeError, never a crash), and the change-event text of a binary value (format_text)
  is the same in both and reads back, through bytea[]'s text form, as the typed list.
* The text form: PostgreSQL's array literal with quoting and escapes, checked against a
  writer of array_out's rules (quote when empty, "NULL", or holding '"', '\\', '{', '}',
  ',' or white space; backslash before '"' and '\\').

Ground truth against a real server is in tests/decoder/test_unknown_arrays_pg.py.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from pgoutput_fast import DecodeError, _native
from pgoutput_fast._reference import textformat as ref_textformat
from pgoutput_fast.types import (
    BUILTIN_NAMES, K_ARRAY, K_BYTEA, K_INT4, K_UNKNOWN, NOT_COMMA_ARRAY_NAMES,
    UNKNOWN_ELEMENT_ARRAY_OIDS, ColumnType, resolve_column_type,
)
from tests.values.test_values import ERROR, FAST, A, array_send, raw, twins

UA = A(K_UNKNOWN)  # array of an unknown element type


# -- the column type ---------------------------------------------------------------------

def test_user_array_named_by_type_message_is_a_list():
    types = {90001: ("public", "_mood"), 90002: ("public", "mood"), 90003: ("", "_point"),
             90004: ("", "_int4"), 90005: ("public", "_geometry"), 90006: ("s", "_"),
             90007: ("", "_box")}
    assert resolve_column_type(90001, -1, types) == UA              # enum[]
    assert resolve_column_type(90002, -1, types) == ColumnType(K_UNKNOWN)  # the enum
    assert resolve_column_type(90003, -1, types) == UA              # a domain over point[]
    assert resolve_column_type(90004, -1, types) == A(K_INT4)       # a domain over int4[]
    assert resolve_column_type(90005, -1, types) == ColumnType(K_UNKNOWN)  # ':' delimiter
    assert resolve_column_type(90006, -1, types) == ColumnType(K_UNKNOWN)
    assert resolve_column_type(90007, -1, types) == ColumnType(K_UNKNOWN)  # ';' delimiter
    assert resolve_column_type(90001, -1, None) == ColumnType(K_UNKNOWN)   # no Type message


def test_builtin_arrays_of_unknown_elements():
    for oid in (1017, 791, 3905, 2210, 2287, 6150):  # point money int4range regclass record int4multirange
        assert oid in UNKNOWN_ELEMENT_ARRAY_OIDS
        assert resolve_column_type(oid, -1) == UA
    assert resolve_column_type(1020, -1) == ColumnType(K_UNKNOWN)  # box[]: ';'
    assert "_box" in NOT_COMMA_ARRAY_NAMES
    # none of them is an array the decoder types element by element
    assert not UNKNOWN_ELEMENT_ARRAY_OIDS & set(BUILTIN_NAMES.values())


def test_arrow_types_per_mode():
    assert UA.arrow_type(binary_unknown=False) == pa.list_(pa.string())
    assert UA.arrow_type(binary_unknown=True) == pa.list_(pa.binary())


# -- binary framing ----------------------------------------------------------------------

def test_binary_examples():
    arr, specials = twins(UA, [
        ("b", array_send([b"happy", None, b"", b"x y"], elem_oid=16390)),
        None,
        ("b", array_send([], elem_oid=16390)),
        ("b", array_send([None], elem_oid=16390)),
        ("b", array_send([b"a", b"b", b"c", b"d"], elem_oid=16390, dims=[2, 2])),   # 2-D
        ("b", array_send([b"a", b"b"], elem_oid=16390, lbounds=[0])),            # [0:1]
    ])
    assert arr.type == pa.list_(pa.binary())
    assert raw(arr) == [[b"happy", None, b"", b"x y"], None, [], [None], None, None]
    assert specials == [4, 5]


def test_any_binary_value_makes_the_column_binary():
    # (as for a K_UNKNOWN column: one binary value, even an empty or a special array)
    for v in (array_send([]), array_send([None]), array_send([b"a"] * 4, dims=[2, 2])):
        arr, _ = twins(UA, [("t", b"{a}"), ("b", v)])
        assert arr.type == pa.list_(pa.binary())
    arr, _ = twins(UA, [("t", b"{a}"), None])
    assert arr.type == pa.list_(pa.string())


BAD_BINARY = [
    b"",
    b"\x00\x00\x00\x01",                                       # header cut
    struct.pack(">iiI", -1, 0, 1),                             # negative ndim
    struct.pack(">iiI", 7, 0, 1) + b"\x00" * 56,               # ndim > 6
    struct.pack(">iiI", 1, 2, 1) + struct.pack(">ii", 0, 1),   # flags not 0/1
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">i", 1),       # dimension cut
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">ii", -1, 1),  # negative dimension
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">ii", 2**31 - 1, 1),           # huge
    struct.pack(">iiI", 2, 0, 1) + struct.pack(">iiii", 65536, 1, 65536, 1),   # > MaxArraySize
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">ii", 2, 2**31 - 1),           # ub overflows
    # last subscript INT32_MAX: array_recv's ArrayCheckBounds wants dim + lb in int32
    struct.pack(">iiI", 1, 1, 1) + struct.pack(">iii", 1, 2**31 - 1, -1),
    struct.pack(">iiI", 2, 1, 1) + struct.pack(">iiiii", 1, 1, 1, 2**31 - 1, -1),
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">ii", 1, 1),                   # no element
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">iii", 1, 1, -2),              # length -2
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">iii", 1, 1, 5) + b"abc",      # length > rest
    struct.pack(">iiI", 1, 0, 1) + struct.pack(">iii", 1, 1, 1) + b"ab",       # trailing
    struct.pack(">iiI", 0, 0, 1) + b"\x00",                                    # trailing, empty
]


@pytest.mark.parametrize("data", BAD_BINARY, ids=[str(i) for i in range(len(BAD_BINARY))])
def test_malformed_binary_is_a_decode_error(data):
    assert twins(UA, [("b", data)]) is ERROR
    for fmt in (_native.format_binary_values, _reference_format):
        with pytest.raises(DecodeError):
            fmt(UA, [data])


def _reference_format(ct, values):
    return ref_textformat.format_binary_values(ct, values)


_elements = st.lists(st.one_of(st.none(), st.binary(max_size=12)), max_size=12)


@st.composite
def binary_arrays(draw):
    """array_send() of random shape: 0-3 dimensions, lower bounds mostly 1."""
    ndim = draw(st.integers(0, 3))
    if ndim == 0:
        return array_send([], elem_oid=draw(st.integers(0, 2**32 - 1)))
    dims = [draw(st.integers(0 if ndim == 1 else 1, 4)) for _ in range(ndim)]
    n = 1
    for d in dims:
        n *= d
    lbs = [draw(st.sampled_from([1, 1, 1, 0, -3, 2**31 - 5])) for _ in range(ndim)]
    if any(lb + d - 1 > 2**31 - 1 for lb, d in zip(lbs, dims)):
        lbs = [1] * ndim
    elements = draw(st.lists(st.one_of(st.none(), st.binary(max_size=12)), min_size=n, max_size=n))
    if n == 0:
        return struct.pack(">iiI", ndim, 0, 16390) + b"".join(
            struct.pack(">ii", d, lb) for d, lb in zip(dims, lbs))
    return array_send(elements, elem_oid=16390, dims=dims, lbounds=lbs)


@st.composite
def mutated(draw, source):
    """A valid value, then maybe cut, extended or with 4 bytes overwritten (ndim, flags,
    a dimension, a lower bound, an element length ...)."""
    data = bytearray(draw(source))
    how = draw(st.sampled_from(["keep", "cut", "extend", "poke", "poke"]))
    if how == "cut" and data:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "extend":
        data += draw(st.binary(min_size=1, max_size=6))
    elif how == "poke" and len(data) >= 4:
        at = draw(st.sampled_from([0, 4] + list(range(12, len(data) - 3, 4)) or [0]))
        word = draw(st.sampled_from([-1, -2, 0, 1, 2, 6, 7, 2**31 - 1, -(2**31), 1 << 20]))
        data[at:at + 4] = struct.pack(">i", word)
    return bytes(data)


@FAST
@given(st.lists(st.one_of(st.none(), mutated(binary_arrays())), max_size=6))
def test_binary_parity(values):
    """Native == reference for any input (same list, same specials, or both DecodeError);
    a valid one-dimensional array with lower bound 1 gives its elements."""
    twins(UA, [None if v is None else ("b", v) for v in values])


@FAST
@given(_elements)
def test_binary_elements_roundtrip(elements):
    arr, specials = twins(UA, [("b", array_send(elements, elem_oid=16390))])
    assert specials == [] and raw(arr) == [elements]


@FAST
@given(mutated(binary_arrays()))
def test_event_text_parity_and_read_back(data):
    """format_text: native == reference (text or DecodeError); the text reads back through
    bytea[]'s text form as the typed value (spark.apply.events_batch_to_typed does so)."""
    try:
        nat = _native.format_binary_values(UA, [data])[0]
    except DecodeError:
        nat = ERROR
    try:
        ref = _reference_format(UA, [data])[0]
    except DecodeError:
        ref = ERROR
    assert nat == ref
    typed = twins(UA, [("b", data)])
    assert (typed is ERROR) == (nat is ERROR)
    if nat is ERROR:
        return
    back = twins(A(K_BYTEA), [("t", nat.encode())])
    assert raw(back[0]) == raw(typed[0]) and back[1] == typed[1]


# -- text form ---------------------------------------------------------------------------

def pg_array_literal(elements) -> bytes:
    """array_out's text of a one-dimensional array of text elements (its quoting rules)."""
    out = []
    for e in elements:
        if e is None:
            out.append("NULL")
        elif e == "" or e.upper() == "NULL" or any(c in e for c in '"\\{},') \
                or any(c in e for c in " \t\n\r\v\f"):
            out.append('"' + e.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            out.append(e)
    return ("{" + ",".join(out) + "}").encode()


_text_elements = st.lists(st.one_of(
    st.none(),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10),
    st.sampled_from(["NULL", "null", "", " ", "a,b", '"', "\\", "{}", "c d", "é"])), max_size=10)


def test_text_examples():
    arr, specials = twins(UA, [
        ("t", b'{happy,NULL,"c d","x\\"y","a,b","NULL","\\\\",""}'),
        None,
        ("t", b"{}"),
        ("t", b"{{a,b},{c,d}}"),          # 2-D
        ("t", b"[0:1]={a,b}"),            # lower bound 0
    ])
    assert arr.type == pa.list_(pa.string())
    assert raw(arr) == [["happy", None, "c d", 'x"y', "a,b", "NULL", "\\", ""], None, [], None, None]
    assert specials == [3, 4]


@FAST
@given(_text_elements)
def test_text_elements_roundtrip(elements):
    arr, specials = twins(UA, [("t", pg_array_literal(elements))])
    assert specials == [] and raw(arr) == [elements]


@FAST
@given(_text_elements, st.data())
def test_text_parity_on_damaged_literals(elements, data):
    lit = bytearray(pg_array_literal(elements))
    how = data.draw(st.sampled_from(["cut", "poke", "insert"]))
    at = data.draw(st.integers(0, len(lit)))
    if how == "cut":
        del lit[at:]
    elif how == "poke" and at < len(lit):
        lit[at] = data.draw(st.sampled_from(b'{},"\\ Nx\xff'))
    else:
        lit[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    twins(UA, [("t", bytes(lit))])
