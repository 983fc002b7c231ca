/* text_format.h: the C of the binary -> PostgreSQL text formatters (format_text.pxi).
 * 
 * Division constants, the two-digit table and the integer / float / time writers, and
 * the straight-line writer of the common numeric. Cython sees only what format_text.pxi
 * declares from it.
 */
#ifndef PGO_TEXT_FORMAT_H
#define PGO_TEXT_FORMAT_H

#include <stdint.h>
#include <string.h>
#include "endian.h"
#include "shortest.h"

    #define FMT_USECS_PER_DAY INT64_C(86400000000)
#define FMT_USECS_PER_HOUR INT64_C(3600000000)
#define FMT_USECS_PER_MINUTE INT64_C(60000000)
#define FMT_USECS_PER_SEC INT64_C(1000000)
#define FMT_MIN_TIMESTAMP INT64_C(-211813488000000000)   /* 4714-11-24 00:00:00 BC */
#define FMT_END_TIMESTAMP INT64_C(9223371331200000000)   /* 294277-01-01 00:00:00 */

    static const char pgo_digits2[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal digits of v: the bit length times log10(2) (1233 / 4096), one under or
   exact; v | 1 so that 0 counts one digit (10^t is even for t >= 1, so | 1 changes
   no other answer). */
static inline int pgo_ndigits(uint64_t v) {
    int n = ((64 - pgo_clz64(v | 1)) * 1233) >> 12;
    return n + ((v | 1) >= pgo_pow10_u128[n].lo);
}

/* Decimal digits of v at w, zero-padded to at least `width` (pg_ultostr_zeropad):
   the digit count first, then two digits per division from a table of 00..99,
   written in place from the last one back (the last 8 of a longer number as a
   chain of their own); returns the end. Always inlined: it is
   the innermost step of every integer, float and numeric written as text, where a
   call cost as much as the digits. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline char *pgo_w_u64(char *w, uint64_t v, int width) {
    int n, pad;
    uint64_t q;
    unsigned r;
    char *e;
    if (v < 100 && width <= 2) {              /* (dates, times, small numbers) */
        if (v >= 10 || width == 2) {
            memcpy(w, pgo_digits2 + 2 * v, 2);
            return w + 2;
        }
        w[0] = (char)(48 + v);
        return w + 1;
    }
    n = pgo_ndigits(v);
    pad = width - n;
    if (pad > 0) {
        memset(w, 48, (size_t)pad);
        w += pad;
    }
    e = w + n;
    if (v >= 100000000) {
        /* the last 8 digits on their own, in 32 bits: a chain of divisions half as
           long (the two halves' steps overlap) */
        uint64_t hi = v / 100000000;
        uint32_t lo = (uint32_t)(v - hi * 100000000), q32;
        int i;
        for (i = 0; i < 4; i++) {
            q32 = lo / 100;
            e -= 2;
            memcpy(e, pgo_digits2 + 2 * (lo - q32 * 100), 2);
            lo = q32;
        }
        v = hi;
    }
    while (v >= 100) {
        q = v / 100;
        r = (unsigned)(v - q * 100);
        e -= 2;
        memcpy(e, pgo_digits2 + 2 * r, 2);
        v = q;
    }
    if (v >= 10)
        memcpy(e - 2, pgo_digits2 + 2 * v, 2);
    else
        e[-1] = (char)(48 + v);
    return w + n;
}

/* The 4 + 4 digits of g0, g1 < 10^4, zero-padded, as ASCII in one word: g0's first
   digit in the lowest byte. Split in lanes (2 + 2, then 1 + 1 digits), each split a
   multiply and a shift per lane for all lanes at once. */
static inline uint64_t pgo_ascii4x2(uint64_t g0, uint64_t g1) {
    uint64_t y = g0 | (g1 << 32), hi;
    hi = ((y * 10486) >> 20) & 0x0000007F0000007FULL;       /* each lane / 100 */
    y = hi | ((y - hi * 100) << 16);
    hi = ((y * 103) >> 10) & 0x000F000F000F000FULL;          /* each lane / 10 */
    y = hi | ((y - hi * 10) << 8);
    return y | 0x3030303030303030ULL;
}

/* The 8 digits of v < 10^8, zero-padded, as ASCII in one word: the first digit in
   the lowest byte (v split 4 + 4, then pgo_ascii4x2). */
static inline uint64_t pgo_ascii8(uint32_t v) {
    const uint64_t hi = ((uint64_t)v * 109951163ULL) >> 40;   /* v / 10^4 */
    return pgo_ascii4x2(hi, v - hi * 10000);
}

/* "MM:SS[.ffffff][+00]" of t µs into the hour (0 <= t < 3.6e9), as a timestamp's text
   ends (AppendSeconds with precision 6: the fraction without trailing zeros), in word
   stores: the minutes, the colon and the seconds from the 00..99 table in one word,
   the fraction's 6 digits from pgo_ascii8 with its trailing zeros counted in the
   word. Writes up to 16 bytes from w; returns the end. Little-endian hosts; the
   others take fmt_timestamp_memo's own steps. */
#if PGO_LITTLE_ENDIAN
#define PGO_HAVE_W_MMSS 1
static inline char *pgo_w_mmss(char *w, uint32_t t, int with_zone) {
    const uint32_t minute = t / 60000000u, r = t - minute * 60000000u;
    const uint32_t sec = r / 1000000u, fsec = r - sec * 1000000u;
    uint16_t m2, s2;
    uint64_t word, f, z;
    int nd;
    memcpy(&m2, pgo_digits2 + 2 * minute, 2);
    memcpy(&s2, pgo_digits2 + 2 * sec, 2);
    word = (uint64_t)m2 | ((uint64_t)58 << 16) | ((uint64_t)s2 << 24);
    if (fsec == 0) {
        word |= (uint64_t)0x30302B << 40;          /* "+00" (kept only with a zone) */
        memcpy(w, &word, 8);
        return w + (with_zone ? 8 : 5);
    }
    memcpy(w, &word, 8);
    f = pgo_ascii8(fsec) >> 16;                    /* the 6 digits, the first lowest */
    z = (f ^ 0x303030303030ULL) & 0xFFFFFFFFFFFFULL;
    nd = (63 - pgo_clz64(z)) / 8 + 1;              /* up to the last nonzero digit */
    f = 46 | (f << 8);                             /* ".ffffff" */
    memcpy(w + 5, &f, 8);
    w += 6 + nd;
    if (with_zone) {
        w[0] = 43;
        w[1] = 48;
        w[2] = 48;
        w += 3;
    }
    return w;
}
#else
#define PGO_HAVE_W_MMSS 0
static inline char *pgo_w_mmss(char *w, uint32_t t, int with_zone) {
    (void)t; (void)with_zone;
    return w;
}
#endif

/* digits * 10^exp_dec (0 < digits < 10^17) at w as float8out/float4out lay it out:
   fixed notation for a first-digit exponent e with -4 <= e < fixed_hi, else
   d.ddde+XX; no trailing zeros. Writes up to 33 bytes from w (the caller's room is
   40); returns the end.
   With 128-bit integers on a little-endian host, all 17 digits (zero-padded) are
   made at once (pgo_ascii8, no division or branch per digit), their trailing zeros
   counted in the words, and the text is placed by shifts in registers and stored in
   16-byte words: the integer part, then the point, then the rest over it. Nothing
   written is read back (a load of bytes just stored in pieces waits for them to
   reach the cache, behind every store before them). Elsewhere, one division splits
   the digits at the point and pgo_w_u64 writes both parts. */
#include "endian.h"
#if defined(__SIZEOF_INT128__) && !defined(PGO_NO_INT128) && PGO_LITTLE_ENDIAN
static inline void pgo_st16(char *w, unsigned __int128 v) { memcpy(w, &v, 16); }
static inline char *pgo_w_float(char *w, uint64_t digits, int32_t exp_dec, int fixed_hi) {
    const uint64_t a = digits / 100000000;
    const uint32_t a1 = (uint32_t)(a / 100000000);
    const uint64_t lo = pgo_ascii8((uint32_t)(digits - a * 100000000));
    const uint64_t mid = pgo_ascii8((uint32_t)(a - (uint64_t)a1 * 100000000));
    const unsigned __int128 T = ((unsigned __int128)lo << 64) | mid;  /* digits 2..17 */
    const int nd = pgo_ndigits(digits);
    int e = exp_dec + nd - 1, z, sig, i, p;
    unsigned __int128 S;
    uint64_t m;
    char c16;
    /* S: the digits from the first one in byte 0 (16 of them), c16 the 17th */
    if (nd == 17) {
        S = (T << 8) | (unsigned __int128)(48 + a1);
        c16 = (char)(lo >> 56);
    } else {
        S = T >> (8 * (16 - nd));
        c16 = 48;
    }
    m = lo ^ 0x3030303030303030ULL;        /* trailing zeros: the last digit is the */
    if (m)                                 /* highest byte of lo */
        z = pgo_clz64(m) >> 3;
    else {
        m = mid ^ 0x3030303030303030ULL;
        z = 8 + (m ? pgo_clz64(m) >> 3 : 8);
    }
    sig = nd - z;                          /* the digits that print (>= 1) */
    if (-4 <= e && e < fixed_hi) {
        if (e < 0) {                       /* 0.000ddd */
            memcpy(w, "0.00000", 8);
            w += 1 - e;
            pgo_st16(w, S);
            w[16] = c16;
            return w + sig;
        }
        if (sig <= e + 1) {                /* ddd000: an integer */
            pgo_st16(w, S);
            w[16] = c16;
            if (nd >= e + 1)
                return w + e + 1;
            w += nd;
            for (i = nd; i < e + 1; i++)
                *w++ = 48;
            return w;
        }
        p = e + 1;                         /* ddd.ddd: 1..15 digits before the point */
        pgo_st16(w, S);
        w[p] = 46;
        pgo_st16(w + p + 1, S >> (8 * p));
        w[17] = c16;
        return w + sig + 1;
    }
    w[0] = (char)S;                        /* d.ddde+XX */
    w[1] = 46;
    pgo_st16(w + 2, S >> 8);
    w[17] = c16;
    w += sig > 1 ? sig + 1 : 1;
#else
static inline char *pgo_w_float(char *w, uint64_t digits, int32_t exp_dec, int fixed_hi) {
    int nd, e, i, lo_n;
    uint64_t scale;
    while (digits % 10 == 0) {             /* (integers come with their trailing zeros) */
        digits /= 10;
        exp_dec++;
    }
    nd = pgo_ndigits(digits);
    e = exp_dec + nd - 1;
    if (-4 <= e && e < fixed_hi) {
        if (e < 0) {
            *w++ = 48;
            *w++ = 46;
            for (i = 0; i < -e - 1; i++)
                *w++ = 48;
            return pgo_w_u64(w, digits, 0);
        }
        if (nd <= e + 1) {
            w = pgo_w_u64(w, digits, 0);
            for (i = nd; i < e + 1; i++)
                *w++ = 48;
            return w;
        }
        lo_n = nd - e - 1;
    } else
        lo_n = nd - 1;
    if (lo_n > 0) {
        scale = pgo_pow10_u128[lo_n].lo;
        w = pgo_w_u64(w, digits / scale, 0);
        *w = 46;
        w = pgo_w_u64(w + 1, digits % scale, lo_n);
    } else
        w = pgo_w_u64(w, digits, 0);
    if (-4 <= e && e < fixed_hi)
        return w;
#endif
    w[0] = 101;
    if (e < 0) {
        w[1] = 45;
        e = -e;
    } else
        w[1] = 43;
    return pgo_w_u64(w + 2, (uint64_t)e, 2);
}

    /* The common numeric, written straight (no loop, no division): 1 to 4 base-10000
   digits, the first nonzero, weight -1..3, a plain sign, and a dscale that the 16
   decimal digits of those groups cover (the groups' digits from the point on, so
   that no zero is padded past them). Every group is made ASCII at once (two words of
   two groups each, pgo_ascii4x2), and the integer part and the fraction are stored
   from that 16-byte text by shifts. p: the value
   (n bytes, n >= 8), as numeric_send writes it. Returns the end (up to 35 bytes
   written from w), or NULL for any other value, which fmt_numeric's general loop
   then writes or rejects: this path takes only well-formed values, and writes
   what that loop writes for them (get_str_from_var: exactly dscale fraction
   digits, the digits past them cut, the sign kept: a value of this shape is never
   zero at its scale). */
#if defined(__SIZEOF_INT128__) && !defined(PGO_NO_INT128) && PGO_LITTLE_ENDIAN
static inline char *pgo_numeric_fast(char *w, const unsigned char *p, Py_ssize_t n) {
    const uint32_t nd = pgo_be16(p), sign = pgo_be16(p + 4), dscale = pgo_be16(p + 6);
    const int32_t weight = pgo_be16s(p + 2);
    uint64_t g0, g1 = 0, g2 = 0, g3 = 0, w0, w1 = 0x3030303030303030ULL;
    unsigned __int128 A;
    int lz0, ip;
    if (nd - 1 > 3 || n != 8 + 2 * (Py_ssize_t)nd || (sign & 0xBFFF) != 0
            || weight < -1 || weight > 3 || (int32_t)dscale > 16 - 4 * (weight + 1))
        return NULL;
    g0 = pgo_be16(p + 8);
    if (nd > 1) {
        g1 = pgo_be16(p + 10);
        if (nd > 2) {
            g2 = pgo_be16(p + 12);
            if (nd > 3)
                g3 = pgo_be16(p + 14);
        }
    }
    if (g0 == 0 || g0 > 9999 || g1 > 9999 || g2 > 9999 || g3 > 9999)
        return NULL;
    w0 = pgo_ascii4x2(g0, g1);
    if (nd > 2)
        w1 = pgo_ascii4x2(g2, g3);
    A = ((unsigned __int128)w1 << 64) | w0;
    lz0 = pgo_ctz64(w0 ^ 0x3030303030303030ULL) >> 3;   /* the first group's leading zeros */
    if (weight < 0) {                                   /* 0.dddd */
        if (lz0 >= (int)dscale)
            return NULL;                                /* (zero at its scale) */
        if (sign) {
            w[0] = 45;
            w++;
        }
        w[0] = 48;
        w[1] = 46;
        pgo_st16(w + 2, A);
        return w + 2 + dscale;
    }
    if (sign) {
        w[0] = 45;
        w++;
    }
    ip = 4 * (weight + 1);                              /* 4..16 */
    pgo_st16(w, A >> (8 * lz0));
    w += ip - lz0;
    if (dscale == 0)
        return w;
    w[0] = 46;                                          /* (ip < 16 here) */
    pgo_st16(w + 1, A >> (8 * ip));
    return w + 1 + dscale;
}
#else
static inline char *pgo_numeric_fast(char *w, const unsigned char *p, Py_ssize_t n) {
    (void)w; (void)p; (void)n;
    return NULL;
}
#endif

#endif /* PGO_TEXT_FORMAT_H */
