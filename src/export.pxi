# DecoderCore's output: the change-event table's schema and the functions that export
# its committed event rows (and a typed table's specials column) to Arrow. Functions of
# DecoderCore (decoder_core.pxi) taking it as `self`.

cdef bint _any_truncate(const unsigned char *flags, Py_ssize_t n) noexcept nogil:
    """Whether any event row is a Truncate's (its flags byte is not 0xFF)."""
    cdef Py_ssize_t i
    for i in range(n):
        if flags[i] != 0xFF:
            return True
    return False


cdef object _truncate_options(object flags):
    """list<string> per event row: the Truncate's options, null for other operations
    (export_store calls it when one row is a Truncate's; else the column is all null)."""
    is_t = flags != 0xFF
    cascade = is_t & ((flags & 1) != 0)
    restart = is_t & ((flags & 2) != 0)
    counts = cascade.astype(np.int32) + restart.astype(np.int32)
    offsets = np.zeros(len(flags) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    starts = offsets[:len(flags)]          # (no negative indices: wraparound is off here)
    names = np.empty(int(offsets[len(flags)]), object)
    names[starts[cascade]] = "cascade"
    names[starts[restart] + cascade[restart]] = "restart_identity"
    # (from buffers: ListArray.from_arrays with a mask imports pyarrow.compute)
    nulls = int(np.count_nonzero(~is_t))
    return _pa_from_buffers(
        pa.list_(pa.string()), len(flags),
        [_pa_py_buffer(np.packbits(is_t, bitorder="little")) if nulls else None, _pa_py_buffer(offsets)],
        nulls, children=[_pa_strings(names)])


EVENT_SCHEMA = pa.schema([
    pa.field("lsn", pa.int64()),
    pa.field("commit_lsn", pa.int64(), nullable=False),
    pa.field("commit_ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("xid", pa.int64(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("op", pa.string(), nullable=False),
    pa.field("schema", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("relid", pa.int64(), nullable=False),
    pa.field("before", MAP_TYPE),
    pa.field("before_kind", pa.string()),
    pa.field("after", MAP_TYPE),
    pa.field("unchanged_toast", pa.list_(pa.string())),
    pa.field("origin", pa.string()),
    pa.field("truncate_options", pa.list_(pa.string())),
])


cdef object export_specials_column(DecoderCore self, RelBuilders rb, Py_ssize_t n):
    """map<string,string> per row: values the typed column could not represent."""
    typ = MAP_TYPE
    if not rb.specials:
        return _null_array(typ, n)
    names = rb.version.column_names
    per_row = {}
    for row, i, is_old, fmt, data in rb.specials:
        if fmt == "t":
            text = data.decode("utf-8", "surrogateescape")
        else:
            text = export_format_binary(self, rb.col_types[i], data)
        key = ("_before." if is_old else "") + names[i]
        per_row.setdefault(row, []).append((key, text))
    return _pa_map_rows([per_row.get(r) for r in range(n)], typ)


cdef object _pa_map_rows(list rows, object typ):
    """A map<string,string> array of rows: each a list of (key, value) pairs, or None."""
    cdef Py_ssize_t n = len(rows), i
    offsets = np.zeros(n + 1, np.int32)
    nulls = np.zeros(n, bool)
    keys = []
    items = []
    for i in range(n):
        row = rows[i]
        if row is None:
            nulls[i] = True
        else:
            for k, v in row:
                keys.append(k)
                items.append(v)
        offsets[i + 1] = len(keys)
    off = _pa_from_np(offsets, pa.int32())
    if nulls.any():         # (MapArray.from_arrays takes its nulls from a null offset)
        off = _pa_from_np(offsets, pa.int32(), np.concatenate([nulls, [False]]))
    return pa.MapArray.from_arrays(off, _pa_strings(keys), _pa_strings(items), type=typ)


cdef str export_format_binary(DecoderCore self, object ct, bytes data):
    return format_binary_values(ct, [data])[0]


cdef object export_events(DecoderCore self, tuple names=None):
    """The committed event rows (the EvChunks, then the decoder's own) as one table
    of a RecordBatch each; the rows of a transaction still open stay. names: the schema
    and table columns of the decoder's own rows, already written (DecoderCore.export,
    on the helper thread; only when there are no chunks and no rows but committed ones)."""
    cdef EvChunk ch
    batches = []
    chunks = self.ev_chunks
    self.ev_chunks = []
    for ch in chunks:
        batches.append(export_store(self, &ch.ev, ch.ev.meta.rows))
    del chunks
    if self.ev_committed or not batches:
        batches.append(export_own_events(self, names))
    return pa.Table.from_batches(batches, schema=EVENT_SCHEMA)


cdef object export_own_events(DecoderCore self, tuple names=None):
    """The decoder's committed event rows as a RecordBatch (see export_events)."""
    cdef Py_ssize_t n = self.ev_committed
    cdef Meta t_meta
    cdef Buf t_relid, t_rb, t_kind, t_trunc, t_toast_off, t_toast_ids
    cdef MapB t_before, t_after
    cdef int32_t base, end
    if self.ev.meta.rows == n:
        return export_event_rows(self, names)
    memset(&t_meta, 0, sizeof(Meta))
    memset(&t_relid, 0, sizeof(Buf)); memset(&t_rb, 0, sizeof(Buf))
    memset(&t_kind, 0, sizeof(Buf)); memset(&t_trunc, 0, sizeof(Buf))
    memset(&t_toast_off, 0, sizeof(Buf)); memset(&t_toast_ids, 0, sizeof(Buf))
    memset(&t_before, 0, sizeof(MapB)); memset(&t_after, 0, sizeof(MapB))
    if (meta_split(&self.ev.meta, n, &t_meta) < 0
            or buf_split(&self.ev.relid, 8 * n, &t_relid) < 0
            or buf_split(&self.ev.rb, 4 * n, &t_rb) < 0
            or buf_split(&self.ev.before_kind, n, &t_kind) < 0
            or buf_split(&self.ev.trunc, n, &t_trunc) < 0
            or map_split(&self.ev.before, n, &t_before) < 0
            or map_split(&self.ev.after, n, &t_after) < 0
            or offsets_split(&self.ev.toast_off, n, n + t_meta.rows, &t_toast_off, &base, &end) < 0
            or buf_split(&self.ev.toast_ids, 4 * <Py_ssize_t>base, &t_toast_ids) < 0):
        meta_free(&t_meta)
        buf_free(&t_relid); buf_free(&t_rb); buf_free(&t_kind); buf_free(&t_trunc)
        buf_free(&t_toast_off); buf_free(&t_toast_ids)
        map_free(&t_before); map_free(&t_after)
        raise MemoryError()
    events = export_event_rows(self)
    meta_free(&self.ev.meta)
    self.ev.meta = t_meta
    buf_free(&self.ev.relid); self.ev.relid = t_relid
    buf_free(&self.ev.rb); self.ev.rb = t_rb
    buf_free(&self.ev.before_kind); self.ev.before_kind = t_kind
    buf_free(&self.ev.trunc); self.ev.trunc = t_trunc
    buf_free(&self.ev.toast_off); self.ev.toast_off = t_toast_off
    buf_free(&self.ev.toast_ids); self.ev.toast_ids = t_toast_ids
    map_free(&self.ev.before); self.ev.before = t_before
    map_free(&self.ev.after); self.ev.after = t_after
    return events


cdef object export_event_rows(DecoderCore self, tuple names=None):
    batch = export_store(self, &self.ev, self.ev_committed, names)
    self.ev_committed = 0
    ev_hints_keep(&self.ev, self.feed_bytes)
    return batch


cdef object export_store(DecoderCore self, EvStore *e, Py_ssize_t n, tuple names=None):
    """A RecordBatch of e's first n rows (all of them: the caller splits off the
    rest); e's buffers are handed over. names: (schema, table) columns already written."""
    meta = meta_export(&e.meta, self.origins, "")
    rb_ids = _np_from_buf(&e.rb, np.int32, n)     # (handed over either way: the hints)
    if names is not None:
        schemas, tables = names
    else:
        schemas = _strings_by_id_np([rb.version.schema for rb in self.rb_all], rb_ids)
        tables = _strings_by_id_np([rb.version.relname for rb in self.rb_all], rb_ids)
    relid = _pa_from_buffers(pa.int64(), n, [None, _take_buf(&e.relid, 8 * n)])
    before_kind = _kind_strings(<const unsigned char *>e.before_kind.data, n)
    e.before_kind.len = 0             # (read, not handed over: its memory stays)
    before = map_export(&e.before)
    after = map_export(&e.after)
    if e.toast_off.len == 0:
        _take_buf(&e.toast_ids, 0)           # (handed over and let go, as when it is read)
        toast = _toast_lists(n, [], [])      # (none: empty lists, a slice of one array)
    else:
        toast_off = _np_from_buf(&e.toast_off, np.int32, n + 1)
        nt = int(toast_off[n]) if n else 0
        toast_names = _strings_by_id_np(self.names, _np_from_buf(&e.toast_ids, np.int32, nt))
        toast = pa.ListArray.from_arrays(_pa_from_np(toast_off, pa.int32()), toast_names)
    if e.trunc.len < n or _any_truncate(<const unsigned char *>e.trunc.data, n):
        trunc = _truncate_options(_np_from_buf(&e.trunc, np.uint8, n))
    else:
        _take_buf(&e.trunc, n)            # (handed over and let go, as when it is read)
        trunc = _null_array(_pa_list_str, n)
    # (in EVENT_SCHEMA's order)
    return pa.RecordBatch.from_arrays([
        meta["lsn"], meta["commit_lsn"], meta["commit_ts"], meta["xid"], meta["seq"],
        meta["op"], schemas, tables, relid, before, before_kind, after, toast,
        meta["origin"], trunc], schema=EVENT_SCHEMA)
