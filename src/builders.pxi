# Column builders: C memory that grows by doubling, exported zero-copy to Arrow.
#
# A Column holds one Arrow array under construction:
#   data      fixed-width values, bit-packed bools, or var-len bytes
#   offsets   int32 end offsets (var-len: into data; list: into child rows); offsets[0] = 0
#   validity  bit per row, 1 = valid
#   toast     bit per row, 1 = the value was sent as 'u' (unchanged TOAST), row is null
# Value parsers append the *data* of one valid value; the scanner then ends the row with
# col_end_row(), which writes offsets/validity/toast (and zeros for a fixed-width null).

from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memset

cdef enum ColLayout:
    LAYOUT_FIXED = 0      # fixed_width bytes per value
    LAYOUT_BOOL = 1       # 1 bit per value in data
    LAYOUT_VARLEN = 2     # int32 offsets into data
    LAYOUT_LIST = 3       # int32 offsets into child rows


cdef struct Buf:
    unsigned char *data
    Py_ssize_t len
    Py_ssize_t cap
    Py_ssize_t hint        # bytes the previous export of this Buf held: first growth target
    Py_ssize_t hw          # bytes of its block that may be resident from an earlier user
                           # (what the cache counted the block at), else 0
    Py_ssize_t last        # bytes its last hand-over held (what the next Decoder's hint
                           # is scaled from, when 4 KiB or more)


cdef struct Column

# One value's parser for one column: chosen once per column from its kind (see
# text_value_fn / binary_value_fn), so the scan loop makes one indirect call per value
# instead of walking a chain of kind tests. Same contract as parse_text_value.
ctypedef int (*value_fn)(Column *c, const unsigned char *p, Py_ssize_t n,
                         const char **why) noexcept nogil


# Column.bin_inline: the binary values whose common case scan_typed_fast stores without
# calling binary_fn (bn_fixed4, bn_fixed8, bn_timestamp, bn_bool, bn_text); anything else
# (a wrong length, infinity, non-ASCII text, no room) it leaves to them.
cdef enum:
    BIN_INLINE_NONE = 0
    # (numbered apart from TEXT_INLINE_*: the scan loop dispatches on either in one switch)
    BIN_INLINE_SWAP4 = 17         # 4 bytes byte-swapped
    BIN_INLINE_SWAP8 = 18         # 8 bytes byte-swapped
    BIN_INLINE_TIMESTAMP = 19     # int64 µs since 2000 -> since 1970, finite and in range
    BIN_INLINE_BOOL = 20          # 1 byte, 0 = false
    BIN_INLINE_TEXT = 21          # text-like bytes: ASCII stored inline, else bn_text

# Column.text_inline: the text values whose common case scan_typed_fast parses itself;
# whatever it does not finish (a sign or length it does not take, a non-digit, non-ASCII
# text, no room) goes to text_fn, which decides and reports as before.
cdef enum:
    TEXT_INLINE_NONE = 0
    TEXT_INLINE_INT4 = 1          # -?[0-9]{1,16} in int4 range
    TEXT_INLINE_INT8 = 2          # -?[0-9]{1,16}
    TEXT_INLINE_BOOL = 3          # 't' / 'f'
    TEXT_INLINE_TEXT = 4          # ASCII text copied as is
    TEXT_INLINE_TIMESTAMP = 5     # timestamp[tz] whose date and hour the column's memo holds


cdef struct Column:
    int kind              # value kind (see kinds.pxi), selects the parsers
    value_fn text_fn      # parser of a text ('t') value of this kind
    value_fn binary_fn    # parser of a binary ('b') value of this kind
    int layout            # ColLayout
    int fixed_width       # bytes per value for LAYOUT_FIXED
    int precision         # decimal128
    int scale
    Buf data
    Buf offsets
    Buf validity
    Buf toast
    Py_ssize_t length
    Py_ssize_t nulls      # validity is materialised only once the first null arrives
    bint any_toast
    bint any_binary       # a 'b' value was stored (for adaptive UNKNOWN columns)
    int bin_inline        # binary values the scan loop stores itself: BIN_INLINE_*
    int text_inline       # text values the scan loop parses itself: TEXT_INLINE_*
    # timestamp[tz] text memo: the first 13 bytes ('YYYY-MM-DD HH') of the last value
    # that took the full parser, and that hour's start in Unix µs (see ts_memo_hit)
    bint memo_set
    uint64_t memo_k0
    uint64_t memo_k1
    int64_t memo_base
    Column *child         # element column of LAYOUT_LIST


# -- memory blocks ---------------------------------------------------------------
# Large blocks (>= 256 KiB) are their own anonymous mappings on Linux: growing one is an
# mremap (the kernel moves page table entries; nothing is copied, where realloc of a
# heap block copies it), and from 16 MiB on they ask for transparent huge pages (one
# fault per 2 MiB instead of 512). Elsewhere, and in sanitizer builds (so that ASan
# checks every buffer), all blocks are malloc'd. A block's size class follows from its
# capacity, so every owner frees it with the capacity it holds (pgo_blk_free).

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__has_feature)
    #  if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
    #    define PGO_SANITIZED 1
    #  endif
    #endif
    #if defined(__SANITIZE_ADDRESS__)
    #  define PGO_SANITIZED 1
    #endif
    #if defined(__linux__) && !defined(PGO_SANITIZED)
    #  include <sys/mman.h>
    #  define PGO_HAVE_MAP 1
    #else
    #  define PGO_HAVE_MAP 0
    #endif
    #define PGO_MAP_MIN ((size_t)256 << 10)
    #define PGO_HUGE_MIN ((size_t)16 << 20)

    /* The capacity to allocate for a request of cap bytes (mapped blocks: whole pages). */
    static inline size_t pgo_blk_round(size_t cap) {
        if (PGO_HAVE_MAP && cap >= PGO_MAP_MIN)
            return (cap + 4095) & ~(size_t)4095;
        return cap;
    }

    #if PGO_HAVE_MAP
    static inline void pgo_blk_advise(void *p, size_t cap) {
    #  ifdef MADV_HUGEPAGE
        if (cap >= PGO_HUGE_MIN)
            (void)madvise(p, cap, MADV_HUGEPAGE);
    #  else
        (void)p; (void)cap;
    #  endif
    }
    #endif

    /* A block of new_cap bytes (from pgo_blk_round) holding the first `used` bytes of p
       (a block of old_cap bytes, or NULL). NULL on failure, p left intact. */
    static void *pgo_blk_resize(void *p, size_t old_cap, size_t used, size_t new_cap) {
    #if PGO_HAVE_MAP
        int old_mapped = p != NULL && old_cap >= PGO_MAP_MIN;
        int new_mapped = new_cap >= PGO_MAP_MIN;
        void *q;
        if (old_mapped && new_mapped) {
            q = mremap(p, old_cap, new_cap, MREMAP_MAYMOVE);
            if (q != MAP_FAILED) {
                if (new_cap > old_cap)
                    pgo_blk_advise(q, new_cap);
                return q;
            }
            if (new_cap < old_cap)
                return NULL;
            /* (a block the kernel will not move whole: copy it below) */
        }
        if (new_mapped) {
            q = mmap(NULL, new_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (q == MAP_FAILED)
                return NULL;
            pgo_blk_advise(q, new_cap);
        } else if (old_mapped) {
            q = malloc(new_cap ? new_cap : 1);
            if (q == NULL)
                return NULL;
        } else {
            return realloc(p, new_cap ? new_cap : 1);
        }
        if (used)
            memcpy(q, p, used);
        if (old_mapped)
            munmap(p, old_cap);
        else
            free(p);
        return q;
    #else
        (void)old_cap; (void)used;
        return realloc(p, new_cap ? new_cap : 1);
    #endif
    }

    static void pgo_blk_free(void *p, size_t cap) {
        if (p == NULL)
            return;
    #if PGO_HAVE_MAP
        if (cap >= PGO_MAP_MIN) {
            munmap(p, cap);
            return;
        }
    #endif
        (void)cap;
        free(p);
    }
    """
    size_t pgo_blk_round(size_t cap) noexcept nogil
    void *pgo_blk_resize(void *p, size_t old_cap, size_t used, size_t new_cap) noexcept nogil
    void pgo_blk_free(void *p, size_t cap) noexcept nogil


# -- a cache of large released blocks ---------------------------------------------
# Output buffers are handed to Arrow and freed when the arrays die. glibc returns big
# blocks to the kernel, so the next batch would write into fresh pages, and a page
# fault + kernel zeroing per 4 KiB costs more than decoding into warm memory (on the
# development VM a first write to fresh memory runs at ~1 GB/s, a rewrite at ~10 GB/s).
# Keeping a bounded number of released blocks lets steady-state decoding (a batch's
# output dropped before the next batch) write into warm pages. The bound (on the bytes
# the blocks held, not their room, whose pages are not resident) defaults to an eighth
# of physical memory, between 256 MiB and 2 GiB (set_buffer_cache_limit).
# Shared by every decoder of the process, and builders grow without the GIL (the block
# writers of block_writers.pxi run so): it is touched only under its own lock, which
# nothing holds while it waits for anything else.

cdef extern from *:
    """
    static PyThread_type_lock pgo_cache_mu = NULL;
    static int pgo_cache_lock_init(void) {
        if (pgo_cache_mu == NULL)
            pgo_cache_mu = PyThread_allocate_lock();
        return pgo_cache_mu != NULL ? 0 : -1;
    }
    static inline void pgo_cache_lock(void) { PyThread_acquire_lock(pgo_cache_mu, WAIT_LOCK); }
    static inline void pgo_cache_unlock(void) { PyThread_release_lock(pgo_cache_mu); }
    """
    int pgo_cache_lock_init() noexcept
    void pgo_cache_lock() noexcept nogil
    void pgo_cache_unlock() noexcept nogil

if pgo_cache_lock_init() < 0:
    raise MemoryError("pgoutput_fast: no lock for the buffer cache")

DEF CACHE_SLOTS = 1024
DEF CACHE_MIN_BLOCK = 1 << 16
# A buffer of a cached size or more grows 4x at a time: each step copies what it holds
# into another block (or moves its pages), and a 4x ladder copies a third of the final
# size where doubling copies all of it. The room not written costs no memory (pages are
# touched only when written; a large block's rest is trimmed when it is handed to Arrow).
DEF GROW_BIG = 4

# Blocks under TRIM_MIN are handed over whole. Trimming one (mremap) unmaps the pages
# past its bytes, and the next batch's buffers, which grow through other blocks of
# the cache, fault them in again (zeroed by the kernel): trimming every block gave a
# steady decode of transactions of 1 to 50 changes 2 to 4 times the page faults, and
# 3-26 % of the time in 11 of 12 oltp cells of benchmarks/ab.py (docs/performance.md).
# Such a block counts against the cache's bound at the bytes its pages may hold (what
# it held when it came from the cache, when more than what it holds now: Buf.hw).
DEF TRIM_MIN = 8 << 20
cdef void *_cache_ptr[CACHE_SLOTS]
cdef Py_ssize_t _cache_size[CACHE_SLOTS]
cdef Py_ssize_t _cache_cost[CACHE_SLOTS]   # what a block counts against the limit
cdef unsigned long long _cache_stamp[CACHE_SLOTS]   # when it was released (_cache_clock)
cdef unsigned long long _cache_clock = 0
cdef int _cache_n = 0
cdef Py_ssize_t _cache_total = 0
cdef Py_ssize_t _cache_limit = 256 << 20
cdef Py_ssize_t _fresh_blocks = 0         # buffers of CACHE_MIN_BLOCK or more given fresh
cdef Py_ssize_t _fresh_bytes = 0          # memory (not from the cache): their sizes
cdef Py_ssize_t _grown_bytes = 0          # bytes copied by buffers growing into another block
cdef Py_ssize_t _evicted_blocks = 0       # cached blocks freed to make room for newer ones


cdef inline void _cache_remove(int i) noexcept nogil:
    """Take slot i out of the cache (the caller holds the lock): the last slot moves in."""
    global _cache_n, _cache_total
    _cache_total -= _cache_cost[i]
    _cache_n -= 1
    _cache_ptr[i] = _cache_ptr[_cache_n]
    _cache_size[i] = _cache_size[_cache_n]
    _cache_cost[i] = _cache_cost[_cache_n]
    _cache_stamp[i] = _cache_stamp[_cache_n]


cdef inline int _cache_oldest() noexcept nogil:
    """The slot released longest ago (the caller holds the lock and the cache holds one)."""
    cdef int i, old = 0
    for i in range(1, _cache_n):
        if _cache_stamp[i] < _cache_stamp[old]:
            old = i
    return old


cdef void release_block(void *p, Py_ssize_t size, Py_ssize_t used) noexcept nogil:
    """Keep a block of `size` bytes for reuse (or free it past the cache's bound). used:
    what it counts against the bound, the bytes of it whose pages may be resident (what
    was written in it, by its last user or an earlier one; a block trimmed when handed
    over has no pages past its bytes and an eighth).

    When it does not fit (the bound or the slots), the blocks released longest ago are
    freed to make room: the blocks of the batch just dropped are the ones the next batch
    of the same workload takes. Refusing the new block instead kept the cache full of
    another workload's blocks for good (after a batch of 200,000 small transactions,
    batches of 4,000 took 3 to 16 fresh blocks each, every batch)."""
    global _cache_n, _cache_total, _cache_clock, _evicted_blocks
    cdef Py_ssize_t cost = (used + 4095) & ~<Py_ssize_t>4095
    cdef void *old
    cdef Py_ssize_t old_size
    cdef int i
    if p == NULL:
        return
    if cost > size:
        cost = size
    while size >= CACHE_MIN_BLOCK:
        pgo_cache_lock()
        if cost > _cache_limit:
            pgo_cache_unlock()
            break
        if _cache_n < CACHE_SLOTS and _cache_total + cost <= _cache_limit:
            _cache_clock += 1
            _cache_ptr[_cache_n] = p
            _cache_size[_cache_n] = size
            _cache_cost[_cache_n] = cost
            _cache_stamp[_cache_n] = _cache_clock
            _cache_n += 1
            _cache_total += cost
            pgo_cache_unlock()
            return
        # the limit or the slots are full (so the cache holds a block): free the oldest
        # (outside the lock: unmapping a large block takes a while) and try again
        i = _cache_oldest()
        old = _cache_ptr[i]
        old_size = _cache_size[i]
        _cache_remove(i)
        _evicted_blocks += 1
        pgo_cache_unlock()
        pgo_blk_free(old, <size_t>old_size)
    pgo_blk_free(p, <size_t>size)


cdef inline bint _more_resident_fit(Py_ssize_t a, Py_ssize_t b, Py_ssize_t want) noexcept nogil:
    """Of two cached blocks of one size, resident for a and b bytes, whether the first is
    the better one for a buffer that will write about `want`: the least resident of
    those resident for all of it (the more resident ones are left for bigger writers),
    else the most resident (the fewest pages to fault in)."""
    if a >= want:
        return b < want or a < b
    return b < want and a > b


cdef void *acquire_block(Py_ssize_t need, Py_ssize_t want, Py_ssize_t *size,
                         Py_ssize_t *cost) noexcept nogil:
    """A cached block for a buffer that needs `need` bytes and would grow to `want`: the
    smallest of at least `want` (but not more than 4x, or TRIM_MIN: a buffer starting to
    grow would take the block a big one needs later; blocks under TRIM_MIN are handed
    over untrimmed, up to 4x what they hold), else the largest of at least `need` (the
    exact size a buffer of the previous batch was handed over with), or NULL."""
    global _cache_n, _cache_total
    cdef int i, best = -1, fit = -1
    cdef void *p
    cdef Py_ssize_t most = 4 * want if 4 * want > TRIM_MIN else TRIM_MIN
    pgo_cache_lock()
    for i in range(_cache_n):
        if _cache_size[i] >= want and _cache_size[i] <= most:
            if (best < 0 or _cache_size[i] < _cache_size[best]
                    or (_cache_size[i] == _cache_size[best]
                        and _more_resident_fit(_cache_cost[i], _cache_cost[best], want))):
                best = i
        elif _cache_size[i] >= need and _cache_size[i] < want:
            if (fit < 0 or _cache_size[i] > _cache_size[fit]
                    or (_cache_size[i] == _cache_size[fit] and _cache_cost[i] > _cache_cost[fit])):
                fit = i
    if best < 0:
        best = fit
    if best < 0:
        pgo_cache_unlock()
        return NULL
    p = _cache_ptr[best]
    size[0] = _cache_size[best]
    cost[0] = _cache_cost[best]
    _cache_remove(best)
    pgo_cache_unlock()
    return p


def _default_cache_limit():
    import os
    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 256 << 20
    return max(256 << 20, min(2 << 30, phys // 8))


_cache_limit = _default_cache_limit()


def set_buffer_cache_limit(Py_ssize_t nbytes):
    """Bytes of released output buffers kept for reuse (0 disables; the default is an
    eighth of physical memory, between 256 MiB and 2 GiB)."""
    global _cache_limit
    cdef void *old
    cdef Py_ssize_t old_size
    cdef int i
    pgo_cache_lock()
    _cache_limit = nbytes
    while _cache_n and _cache_total > _cache_limit:
        # the oldest first, as release_block does
        i = _cache_oldest()
        old = _cache_ptr[i]
        old_size = _cache_size[i]
        _cache_remove(i)
        pgo_blk_free(old, <size_t>old_size)
    pgo_cache_unlock()


def buffer_cache_info():
    """The cache's blocks and the bytes they count against its limit; fresh_blocks and
    fresh_bytes: how many output buffers of 64 KiB or more were given memory not from
    the cache since the process started, and its size (a steady state adds none);
    grown_bytes: the bytes buffers copied when they grew into another block of the
    cache (a buffer started at its last hand-over size copies none); evicted_blocks:
    cached blocks freed to make room for blocks released later (the cache was full)."""
    pgo_cache_lock()
    info = {"blocks": _cache_n, "bytes": _cache_total, "limit": _cache_limit,
            "fresh_blocks": _fresh_blocks, "fresh_bytes": _fresh_bytes,
            "grown_bytes": _grown_bytes, "evicted_blocks": _evicted_blocks}
    pgo_cache_unlock()
    return info


def _buffer_cache_blocks():
    """The cache's blocks as (size, cost) pairs, largest first (for tests and tracing)."""
    pgo_cache_lock()
    blocks = [(_cache_size[i], _cache_cost[i]) for i in range(_cache_n)]
    pgo_cache_unlock()
    return sorted(blocks, reverse=True)


cdef inline int buf_reserve(Buf *b, Py_ssize_t extra) noexcept nogil:
    """Make room for `extra` more bytes (not zeroed: writers initialise what they use).

    0 ok, -1 out of memory. The check is inline; the growth (buf_grow) is a call (GCC
    did not inline the whole function, so every reserve that found room paid a call:
    5 % of a change-event table's decode)."""
    if b.len + extra <= b.cap:
        return 0
    return buf_grow(b, extra)


cdef int buf_grow(Buf *b, Py_ssize_t extra) noexcept nogil:
    """buf_reserve's growth, when the room is short. Fresh pages are zeroed by the
    kernel only when first touched, so growing ahead (2x, 4x past CACHE_MIN_BLOCK) costs
    no more than the memory actually written.
    """
    global _fresh_blocks, _fresh_bytes, _grown_bytes
    cdef Py_ssize_t need = b.len + extra
    cdef Py_ssize_t cap, want, cost
    cdef unsigned char *p
    if need <= b.cap:
        return 0
    if b.cap == 0 and b.hint >= need:
        # the previous batch's size: one allocation instead of a doubling series. A
        # cached block of at least that size will do (the block this buffer was handed
        # over in last time is exactly that size): asking for the 1/8 of headroom too
        # would pass over it and take a bigger one another buffer then misses. (A
        # smaller one will do too: the last batch may have been smaller than the hint,
        # which shrinks only when batches get much smaller.)
        cap = b.hint + (b.hint >> 3)
        want = b.hint
    else:
        if b.hint >= need and b.cap < b.hint:
            # a buffer that started in a block under its hint outgrew it: straight to
            # the hint's size, not 4x the block (after another workload's batch had left
            # the cache holding other sizes, a 353 MB buffer that started in a 27 MB
            # block grew through fresh 108 and 432 MB ones)
            cap = b.hint + (b.hint >> 3)
        elif b.cap < 64:
            cap = 64
        elif b.cap < CACHE_MIN_BLOCK:
            cap = b.cap * 2
        else:
            cap = b.cap * GROW_BIG
        while cap < need:
            cap *= 2
        want = cap
    if cap >= CACHE_MIN_BLOCK:
        p = <unsigned char *>acquire_block(need, want, &cap, &cost)
        if p != NULL:
            if b.len:
                memcpy(p, b.data, <size_t>b.len)
                pgo_cache_lock()
                _grown_bytes += b.len
                pgo_cache_unlock()
            # the block outgrown goes back to the cache too: the next batch's buffers
            # grow through the same sizes, into warm pages
            release_block(b.data, b.cap, b.len if b.len > b.hw else b.hw)
            b.data = p
            b.cap = cap
            b.hw = cost
            return 0
    cap = <Py_ssize_t>pgo_blk_round(<size_t>cap)
    p = <unsigned char *>pgo_blk_resize(b.data, <size_t>b.cap, <size_t>b.len, <size_t>cap)
    if p == NULL:
        return -1
    if cap >= CACHE_MIN_BLOCK:
        pgo_cache_lock()
        _fresh_blocks += 1
        _fresh_bytes += cap
        pgo_cache_unlock()
    b.data = p
    b.cap = cap
    return 0


cdef inline int buf_reserve_exact(Buf *b, Py_ssize_t n) noexcept nogil:
    """buf_reserve of an empty Buf whose size is known up front (an output written at
    export): the tightest cached block of at least n (the same output's of the last
    batch), where growth would ask for the next power of two and take a bigger one."""
    if b.cap == 0 and b.hint < n:
        b.hint = n
    return buf_reserve(b, n)


cdef inline int buf_append(Buf *b, const void *src, Py_ssize_t n) noexcept nogil:
    if n == 0:
        return 0
    if b.cap - b.len < n and buf_reserve(b, n) < 0:
        return -1
    memcpy(b.data + b.len, src, <size_t>n)
    b.len += n
    return 0


# fixed-size appends: constant-size memcpy compiles to a plain store
cdef inline int buf_append1(Buf *b, uint8_t v) noexcept nogil:
    if b.cap == b.len and buf_reserve(b, 1) < 0:
        return -1
    b.data[b.len] = v
    b.len += 1
    return 0


cdef inline int buf_append4(Buf *b, const void *src) noexcept nogil:
    if b.cap - b.len < 4 and buf_reserve(b, 4) < 0:
        return -1
    memcpy(b.data + b.len, src, 4)
    b.len += 4
    return 0


cdef inline int buf_append8(Buf *b, const void *src) noexcept nogil:
    if b.cap - b.len < 8 and buf_reserve(b, 8) < 0:
        return -1
    memcpy(b.data + b.len, src, 8)
    b.len += 8
    return 0


cdef inline int buf_append16(Buf *b, const void *src) noexcept nogil:
    if b.cap - b.len < 16 and buf_reserve(b, 16) < 0:
        return -1
    memcpy(b.data + b.len, src, 16)
    b.len += 16
    return 0


cdef inline void buf_free(Buf *b) noexcept nogil:
    release_block(b.data, b.cap, b.cap)
    b.data = NULL
    b.len = 0
    b.cap = 0
    b.hw = 0


cdef inline int bit_set(Buf *b, Py_ssize_t i, bint value) noexcept nogil:
    cdef Py_ssize_t byte = i >> 3
    if byte >= b.len:
        if byte >= b.cap and buf_reserve(b, byte + 1 - b.len) < 0:
            return -1
        if byte == b.len:
            b.data[byte] = 0               # the usual case: one new byte (no memset call)
        else:
            memset(b.data + b.len, 0, <size_t>(byte + 1 - b.len))
        b.len = byte + 1
    if value:
        b.data[byte] |= <unsigned char>(1 << (i & 7))
    else:
        b.data[byte] &= <unsigned char>~(1 << (i & 7))
    return 0


cdef inline bint bit_get(const Buf *b, Py_ssize_t i) noexcept nogil:
    return (b.data[i >> 3] >> (i & 7)) & 1


cdef Column *col_new(int kind, int layout, int fixed_width) noexcept nogil:
    cdef Column *c = <Column *>malloc(sizeof(Column))
    if c == NULL:
        return NULL
    memset(c, 0, sizeof(Column))
    c.kind = kind
    c.layout = layout
    c.fixed_width = fixed_width
    c.text_fn = text_value_fn(kind)
    c.binary_fn = binary_value_fn(kind)
    if layout == LAYOUT_FIXED:
        if c.binary_fn == bn_fixed4 and fixed_width == 4:
            c.bin_inline = BIN_INLINE_SWAP4
        elif c.binary_fn == bn_fixed8 and fixed_width == 8:
            c.bin_inline = BIN_INLINE_SWAP8
        elif c.binary_fn == bn_timestamp and fixed_width == 8:
            c.bin_inline = BIN_INLINE_TIMESTAMP
        if c.text_fn == tx_int4 and fixed_width == 4:
            c.text_inline = TEXT_INLINE_INT4
        elif c.text_fn == tx_int8 and fixed_width == 8:
            c.text_inline = TEXT_INLINE_INT8
        elif c.text_fn == tx_timestamp and fixed_width == 8:
            c.text_inline = TEXT_INLINE_TIMESTAMP
    elif layout == LAYOUT_BOOL:
        if c.text_fn == tx_bool:
            c.text_inline = TEXT_INLINE_BOOL
        if c.binary_fn == bn_bool:
            c.bin_inline = BIN_INLINE_BOOL
    elif layout == LAYOUT_VARLEN:
        if c.text_fn == tx_text:
            c.text_inline = TEXT_INLINE_TEXT
        if c.binary_fn == bn_text:
            c.bin_inline = BIN_INLINE_TEXT
    return c


cdef void col_free(Column *c) noexcept nogil:
    if c == NULL:
        return
    buf_free(&c.data)
    buf_free(&c.offsets)
    buf_free(&c.validity)
    buf_free(&c.toast)
    col_free(c.child)
    free(c)


# -- what parsers call -------------------------------------------------------------

cdef inline int col_push_fixed(Column *c, const void *value) noexcept nogil:
    if c.fixed_width == 8:
        return buf_append8(&c.data, value)
    if c.fixed_width == 4:
        return buf_append4(&c.data, value)
    if c.fixed_width == 16:
        return buf_append16(&c.data, value)
    return buf_append(&c.data, value, c.fixed_width)


cdef inline int col_push_bytes(Column *c, const void *p, Py_ssize_t n) noexcept nogil:
    return buf_append(&c.data, p, n)


cdef inline int col_push_bool(Column *c, bint value) noexcept nogil:
    return bit_set(&c.data, c.length, value)


# -- what the scanner calls --------------------------------------------------------

cdef inline void col_zero_fixed(Column *c) noexcept nogil:
    """Append the zero value of a fixed-width null (room for it already reserved):
    constant-size stores for the usual widths instead of a memset call."""
    cdef unsigned char *d = c.data.data + c.data.len
    cdef uint64_t z = 0
    if c.fixed_width == 8:
        memcpy(d, &z, 8)
    elif c.fixed_width == 4:
        memcpy(d, &z, 4)
    elif c.fixed_width == 16:
        memcpy(d, &z, 8)
        memcpy(d + 8, &z, 8)
    else:
        memset(d, 0, <size_t>c.fixed_width)
    c.data.len += c.fixed_width


cdef inline int col_end_row(Column *c, bint valid, bint toast) noexcept nogil:
    """Finish row `c.length`: offsets, zero value for a fixed-width null, bitmaps."""
    cdef int32_t end
    cdef Py_ssize_t i = c.length
    if c.layout == LAYOUT_VARLEN or c.layout == LAYOUT_LIST:
        if c.offsets.len == 0:
            end = 0
            if buf_append(&c.offsets, &end, 4) < 0:
                return -1
        if c.layout == LAYOUT_VARLEN:
            if c.data.len > 0x7FFFFFFF:
                return -2              # int32 offsets overflow: caller flushes earlier
            end = <int32_t>c.data.len
        else:
            end = <int32_t>c.child.length
        if buf_append4(&c.offsets, &end) < 0:
            return -1
    elif not valid:
        if c.layout == LAYOUT_FIXED:
            if buf_reserve(&c.data, c.fixed_width) < 0:
                return -1
            col_zero_fixed(c)
        else:
            if bit_set(&c.data, i, 0) < 0:
                return -1
    if not valid:
        if c.nulls == 0 and _validity_backfill(c) < 0:
            return -1
        c.nulls += 1
        if bit_set(&c.validity, i, 0) < 0:
            return -1
    elif c.nulls:
        if bit_set(&c.validity, i, 1) < 0:
            return -1
    if toast or c.any_toast:
        if bit_set(&c.toast, i, toast) < 0:
            return -1
        c.any_toast = c.any_toast or toast
    c.length = i + 1
    return 0


cdef inline int col_end_valid(Column *c) noexcept nogil:
    """col_end_row(c, 1, 0) with the common cases inline (no TOAST in the column)."""
    cdef int32_t end
    if not c.any_toast:
        if c.layout == LAYOUT_FIXED or c.layout == LAYOUT_BOOL:
            if c.nulls and bit_set(&c.validity, c.length, 1) < 0:
                return -1
            c.length += 1
            return 0
        if c.layout == LAYOUT_VARLEN and c.offsets.len != 0 and c.data.len <= 0x7FFFFFFF:
            end = <int32_t>c.data.len
            if buf_append4(&c.offsets, &end) < 0:
                return -1
            if c.nulls and bit_set(&c.validity, c.length, 1) < 0:
                return -1
            c.length += 1
            return 0
    return col_end_row(c, 1, 0)


cdef int _validity_backfill(Column *c) noexcept nogil:
    """First null of the column: rows 0..length-1 were all valid."""
    cdef Py_ssize_t nbytes = (c.length + 7) >> 3
    c.validity.len = 0
    if nbytes:
        if buf_reserve(&c.validity, nbytes) < 0:
            return -1
        memset(c.validity.data, 0xFF, <size_t>nbytes)
        c.validity.len = nbytes
    return 0


cdef void col_truncate(Column *c, Py_ssize_t n) noexcept nogil:
    """Drop rows >= n (used to roll back a failed or uncommitted tail)."""
    cdef int32_t end = 0
    cdef Py_ssize_t old = c.length
    if n > c.length:
        return
    # n == length still drops the bytes of a partially scanned row
    if c.layout == LAYOUT_FIXED:
        c.data.len = n * c.fixed_width
    elif c.layout == LAYOUT_BOOL:
        c.data.len = (n + 7) >> 3
    else:
        if c.offsets.len >= 4 * (n + 1):
            memcpy(&end, c.offsets.data + 4 * n, 4)
            c.offsets.len = 4 * (n + 1)
        else:
            c.offsets.len = 0          # no row was ever finished
        if c.layout == LAYOUT_VARLEN:
            c.data.len = end
        else:
            col_truncate(c.child, end)
    c.length = n
    if c.nulls:
        # the nulls left: those of the rows dropped taken off when they are fewer than
        # the rows kept (a rollback of a few rows on a column of many), else counted
        if old - n < n:
            c.nulls -= _zero_bits_between(&c.validity, n, old)
        else:
            c.nulls = _popcount_zero_bits(&c.validity, n)
        c.validity.len = (n + 7) >> 3
    if c.toast.len > (n + 7) >> 3:
        c.toast.len = (n + 7) >> 3


# -- splitting off the rows of a transaction still open at export ---------------------
# export() hands the committed rows to Arrow; the rows of a transaction that is still
# open move to fresh builders (copied once: from then on that transaction's builders hold
# no committed rows and are kept whole until its Commit).

cdef int buf_split(Buf *b, Py_ssize_t start, Buf *tail) noexcept nogil:
    """Move bytes [start, len) of b into the empty Buf tail."""
    if b.len > start:
        if buf_append(tail, b.data + start, b.len - start) < 0:
            return -1
        b.len = start
    return 0


cdef int bits_split(Buf *b, Py_ssize_t start, Py_ssize_t nbits, Buf *tail) noexcept nogil:
    """Move bits [start, start + nbits) of b into the empty bitmap tail."""
    cdef Py_ssize_t i
    for i in range(nbits):
        if bit_set(tail, i, ((start + i) >> 3) < b.len and bit_get(b, start + i)) < 0:
            return -1
    if b.len > (start + 7) >> 3:
        b.len = (start + 7) >> 3
    return 0


cdef int offsets_split(Buf *offsets, Py_ssize_t n, Py_ssize_t length, Buf *tail,
                       int32_t *base, int32_t *end) noexcept nogil:
    """Rebased int32 offsets of rows [n, length) into tail; base/end: their range."""
    cdef int32_t v
    cdef Py_ssize_t i
    base[0] = 0
    end[0] = 0
    if offsets.len < 4 * (length + 1):
        return 0                       # no row was ever finished
    memcpy(base, offsets.data + 4 * n, 4)
    memcpy(end, offsets.data + 4 * length, 4)
    for i in range(n, length + 1):
        memcpy(&v, offsets.data + 4 * i, 4)
        v -= base[0]
        if buf_append4(tail, &v) < 0:
            return -1
    offsets.len = 4 * (n + 1)
    return 0


cdef Column *col_split(Column *c, Py_ssize_t n) noexcept nogil:
    """A new Column with rows [n, length) of c, which keeps rows [0, n). NULL: no memory."""
    cdef Column *t = col_new(c.kind, c.layout, c.fixed_width)
    cdef Py_ssize_t m = c.length - n
    cdef Py_ssize_t i
    cdef int32_t base, end
    if t == NULL:
        return NULL
    t.precision = c.precision
    t.scale = c.scale
    t.any_binary = c.any_binary
    t.any_toast = c.any_toast
    if m <= 0:
        if c.child != NULL:
            t.child = col_split(c.child, c.child.length)
            if t.child == NULL:
                col_free(t)
                return NULL
        return t
    if c.layout == LAYOUT_FIXED:
        if buf_split(&c.data, n * c.fixed_width, &t.data) < 0:
            col_free(t)
            return NULL
    elif c.layout == LAYOUT_BOOL:
        if bits_split(&c.data, n, m, &t.data) < 0:
            col_free(t)
            return NULL
    else:
        if offsets_split(&c.offsets, n, c.length, &t.offsets, &base, &end) < 0:
            col_free(t)
            return NULL
        if c.layout == LAYOUT_VARLEN:
            if buf_split(&c.data, base, &t.data) < 0:
                col_free(t)
                return NULL
        else:
            t.child = col_split(c.child, base)
            if t.child == NULL:
                col_free(t)
                return NULL
    if c.nulls:
        for i in range(m):
            if not bit_get(&c.validity, n + i):
                t.nulls += 1
        if t.nulls and bits_split(&c.validity, n, m, &t.validity) < 0:
            col_free(t)
            return NULL
    if c.any_toast and bits_split(&c.toast, n, m, &t.toast) < 0:
        col_free(t)
        return NULL
    t.length = m
    col_truncate(c, n)
    return t


# -- export ------------------------------------------------------------------------

@cython.auto_pickle(False)
cdef class NativeBuffer:
    """Owns malloc'd memory and exposes it through the buffer protocol (for pa.py_buffer)."""
    cdef unsigned char *ptr
    cdef Py_ssize_t size
    cdef Py_ssize_t cap           # the block's capacity (what it is freed with)
    cdef Py_ssize_t resident      # of its bytes, those whose pages may be resident
    cdef Py_ssize_t shape[1]
    cdef bint uncached     # freed, not kept in the block cache (capture_loop.pxi)

    def __dealloc__(self):
        if self.uncached:
            free(self.ptr)
        else:
            release_block(self.ptr, self.cap, self.resident)

    def __getbuffer__(self, Py_buffer *view, int flags):
        view.buf = <void *>self.ptr
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        self.shape[0] = self.size
        view.shape = self.shape
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass


cdef inline void buf_note_handover(Buf *b, Py_ssize_t exact) noexcept nogil:
    """The size hints of a Buf whose `exact` bytes are handed over at export: the next
    growth of the Buf starts from them (the hint shrinks only when batches got much
    smaller)."""
    b.last = exact
    if exact > b.hint:
        b.hint = exact
    elif exact < b.hint >> 2:
        b.hint = exact


cdef object _take_buf(Buf *b, Py_ssize_t exact):
    """Hand a Buf's memory to Arrow (zero copy) and leave the Buf empty."""
    cdef NativeBuffer nb = NativeBuffer.__new__(NativeBuffer)
    cdef unsigned char *p
    cdef Py_ssize_t cap
    if exact > b.len:            # bitmaps may be shorter than needed when all bits are 0
        if buf_reserve(b, exact - b.len) < 0:
            raise MemoryError()
        memset(b.data + b.len, 0, <size_t>(exact - b.len))
        b.len = exact
    if b.data == NULL:
        b.data = <unsigned char *>malloc(1)
        if b.data == NULL:
            raise MemoryError()
        b.data[0] = 0
        b.cap = 1
    elif b.cap >= TRIM_MIN and b.cap > exact + (exact >> 3) + 4096 and exact > 0:
        # a large block is trimmed to its size and an eighth: the block goes back to
        # the cache when Arrow lets go of it, and the next batch's buffer (which asks
        # for this size) then has room to grow a little without moving to another
        # block; the eighth's pages are not resident unless written
        cap = <Py_ssize_t>pgo_blk_round(<size_t>(exact + (exact >> 3)))
        p = <unsigned char *>pgo_blk_resize(b.data, <size_t>b.cap, <size_t>exact, <size_t>cap)
        if p != NULL:
            b.data = p
            b.cap = cap
    buf_note_handover(b, exact)
    nb.ptr = b.data
    nb.size = exact
    nb.cap = b.cap
    # (a block under TRIM_MIN may hold pages an earlier user of it wrote past exact)
    nb.resident = b.hw if b.hw > exact and b.cap < TRIM_MIN else exact
    b.hw = 0
    b.data = NULL
    b.len = 0
    b.cap = 0
    return _pa_py_buffer(nb)


cdef extern from *:
    """
    static inline int pgo_popcount64(uint64_t x) {
    #if defined(__GNUC__) || defined(__clang__)
        return __builtin_popcountll(x);
    #else
        int n = 0;
        while (x) { x &= x - 1; n++; }
        return n;
    #endif
    }
    """
    int pgo_popcount64(uint64_t x) noexcept nogil


cdef Py_ssize_t _zero_bits_between(const Buf *b, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """Zero bits among bits lo..hi-1 of the bitmap (hi <= 8 * b.len): one at a time up
    to a word boundary, then eight bytes at a time, then the last bits."""
    cdef Py_ssize_t i = lo, ones = 0
    cdef uint64_t w
    while i < hi and (i & 63) != 0:
        ones += (b.data[i >> 3] >> (i & 7)) & 1
        i += 1
    while i + 64 <= hi:
        memcpy(&w, b.data + (i >> 3), 8)
        ones += pgo_popcount64(w)
        i += 64
    while i < hi:
        ones += (b.data[i >> 3] >> (i & 7)) & 1
        i += 1
    return (hi - lo) - ones


cdef Py_ssize_t _popcount_zero_bits(const Buf *b, Py_ssize_t n) noexcept nogil:
    """Zero bits among the first n of the bitmap (n <= 8 * b.len): eight bytes at a
    time, then the bits of the last partial word."""
    cdef Py_ssize_t i, ones = 0
    cdef uint64_t w
    for i in range(0, n >> 6):
        memcpy(&w, b.data + 8 * i, 8)
        ones += pgo_popcount64(w)
    for i in range(n & ~<Py_ssize_t>63, n):
        ones += (b.data[i >> 3] >> (i & 7)) & 1
    return n - ones


cdef object col_export(Column *c, object arrow_type):
    """Arrow array of the column's rows (the column is left empty for reuse)."""
    cdef Py_ssize_t n = c.length
    cdef Py_ssize_t nbitmap = (n + 7) >> 3
    cdef Py_ssize_t nulls = c.nulls
    validity = _take_buf(&c.validity, nbitmap) if nulls else None
    if not nulls:
        buf_free(&c.validity)
    c.nulls = 0
    if c.layout == LAYOUT_FIXED:
        arr = _pa_from_buffers(arrow_type, n, [validity, _take_buf(&c.data, n * c.fixed_width)], nulls)
    elif c.layout == LAYOUT_BOOL:
        arr = _pa_from_buffers(arrow_type, n, [validity, _take_buf(&c.data, nbitmap)], nulls)
    elif c.layout == LAYOUT_VARLEN:
        if n == 0:
            c.offsets.len = 0
        offsets = _take_buf(&c.offsets, 4 * (n + 1))
        arr = _pa_from_buffers(arrow_type, n, [validity, offsets, _take_buf(&c.data, c.data.len)], nulls)
    else:
        if n == 0:
            c.offsets.len = 0
        offsets = _take_buf(&c.offsets, 4 * (n + 1))
        child = col_export(c.child, arrow_type.value_type)
        arr = _pa_from_buffers(arrow_type, n, [validity, offsets], nulls, children=[child])
    c.length = 0
    c.any_toast = False
    c.any_binary = False
    buf_free(&c.toast)
    buf_free(&c.data)
    return arr


cdef object col_export_toast_mask(Column *c):
    """bool mask of rows sent as 'u', or None when there were none (call before col_export)."""
    cdef Py_ssize_t n = c.length
    if not c.any_toast:
        return None
    return _pa_from_buffers(pa.bool_(), n, [None, _take_buf(&c.toast, (n + 7) >> 3)], 0)
