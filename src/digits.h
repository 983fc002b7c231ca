/* Decimal digit runs, 8 digits at a time (SWAR), for the scan loop's integer fast path.
 * Little-endian hosts load 8 bytes at once; other hosts take a plain byte loop.
 * pgo_digits_back8 reads the 8 bytes that END at p + nd: the caller guarantees that the
 * (8 - nd) bytes before p are readable (they are masked off, never used). */
#ifndef PGO_DIGITS_H
#define PGO_DIGITS_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "endian.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(PGO_LITTLE_ENDIAN) && PGO_LITTLE_ENDIAN \
    && !defined(PGO_PORTABLE_SHIFTS)
#  define PGO_SWAR_DIGITS 1
#else
#  define PGO_SWAR_DIGITS 0
#endif

/* v: 8 ASCII bytes as loaded little-endian (first byte lowest). 1 and *out = their
 * value (first byte most significant) if all 8 are '0'..'9', else 0. */
static inline int pgo_eight_digits(uint64_t v, uint64_t *out) {
    if (((v & 0xF0F0F0F0F0F0F0F0ULL) | (((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4))
            != 0x3333333333333333ULL)
        return 0;
    v -= 0x3030303030303030ULL;
    v = (v * 10) + (v >> 8);
    v = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)))
         + (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
    *out = v;
    return 1;
}

/* ':MM:SS' in p[2..8) (8 bytes readable at p; p[0..2), an hour, is not looked at):
 * 1 with *mi, *se when that is the shape and both are 0..59, else 0. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))   /* (the profile-guided build made it a call per timestamp) */
#endif
static inline int pgo_mmss(const unsigned char *p, int *mi, int *se) {
#if PGO_SWAR_DIGITS
    uint64_t w, x;
    memcpy(&w, p, 8);
    if ((w & 0x0000FF0000FF0000ULL) != 0x00003A00003A0000ULL)      /* the two ':' */
        return 0;
    /* zero bytes of x: digits (a carry out of a byte >= 0xFA can only turn the next
       byte's digit into a non-digit here, never the reverse) */
    x = ((w & 0xF0F0F0F0F0F0F0F0ULL) | (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4))
        ^ 0x3333333333333333ULL;
    if (x & 0xFFFF00FFFF000000ULL)
        return 0;
    *mi = (int)((w >> 24) & 0xF) * 10 + (int)((w >> 32) & 0xF);
    *se = (int)((w >> 48) & 0xF) * 10 + (int)((w >> 56) & 0xF);
#else
    unsigned a = (unsigned)p[3] - 48u, b = (unsigned)p[4] - 48u;
    unsigned c = (unsigned)p[6] - 48u, d = (unsigned)p[7] - 48u;
    if (p[2] != 58 || p[5] != 58 || a > 9 || b > 9 || c > 9 || d > 9)
        return 0;
    *mi = (int)(a * 10 + b);
    *se = (int)(c * 10 + d);
#endif
    return *mi <= 59 && *se <= 59;
}

/* The run of digits at the start of p[0..avail), looked at 8 bytes at a time: how many
 * of the first min(8, avail) bytes are digits before the first non-digit (0..8), and
 * their value in *out. Reads nothing outside p[0..avail). */
static inline int pgo_digit_run8(const unsigned char *p, ptrdiff_t avail, uint64_t *out) {
    uint64_t v = 0;
    int k;
#if PGO_SWAR_DIGITS
    uint64_t x;
    if (avail >= 8) {
        memcpy(&v, p, 8);
        x = ((v & 0xF0F0F0F0F0F0F0F0ULL) | (((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4))
            ^ 0x3333333333333333ULL;                 /* nonzero bytes: not digits */
        k = x ? (__builtin_ctzll(x) >> 3) : 8;
        if (k == 0) {
            *out = 0;
            return 0;
        }
        if (k < 8)
            v = (v << (8 * (8 - k))) | (0x3030303030303030ULL >> (8 * k));
        v -= 0x3030303030303030ULL;
        v = (v * 10) + (v >> 8);
        *out = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)))
                + (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
        return k;
    }
#endif
    for (k = 0; k < 8 && k < avail; k++) {
        unsigned d = (unsigned)p[k] - 48u;
        if (d > 9)
            break;
        v = v * 10 + d;
    }
    *out = v;
    return k;
}

/* nd (1..8) digits at p -> *out; 0 if any of them is not a digit. */
static inline int pgo_digits_back8(const unsigned char *p, int nd, uint64_t *out) {
#if PGO_SWAR_DIGITS
    uint64_t v, low;
    memcpy(&v, p + nd - 8, 8);
    if (nd < 8) {
        low = (1ULL << (8 * (8 - nd))) - 1;          /* the bytes before p */
        v = (v & ~low) | (0x3030303030303030ULL & low);
    }
    return pgo_eight_digits(v, out);
#else
    uint64_t v = 0;
    int i;
    for (i = 0; i < nd; i++) {
        unsigned d = (unsigned)p[i] - 48u;
        if (d > 9)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
#endif
}

/* nd (1..16) digits at p -> *out; 0 if any is not a digit. Same read-back rule. */
static inline int pgo_digits16(const unsigned char *p, int nd, uint64_t *out) {
    uint64_t hi, lo;
    if (nd <= 8)
        return pgo_digits_back8(p, nd, out);
    if (!pgo_digits_back8(p, nd - 8, &hi) || !pgo_digits_back8(p + nd - 8, 8, &lo))
        return 0;
    *out = hi * 100000000ULL + lo;
    return 1;
}


/* Hex digits, 8 at a time (SWAR): bytea's \x text and uuid's text in the typed tables. */

#define PGO_ONES8 0x0101010101010101ULL

/* v: 8 ASCII bytes as loaded little-endian (first byte lowest). 1 and *out = the 4 bytes
 * they spell (first digit most significant in out's first byte, as stored little-endian)
 * if all 8 are hex digits of either case, else 0. */
static inline int pgo_hex8(uint64_t v, uint32_t *out) {
    const uint64_t H = 0x8080808080808080ULL;
    uint64_t lower, digit, alpha, nib, w;
    if (v & H)
        return 0;                                    /* not ASCII */
    /* 7-bit bytes: x + (0x80 - lo) sets a byte's high bit iff x >= lo, and x + (0x7F -
       hi) iff x > hi; no sum carries out of its byte */
    lower = v | 0x2020202020202020ULL;               /* A-F -> a-f (digits keep their bits) */
    digit = (v + (0x80 - 0x30) * PGO_ONES8) & ~(v + (0x7F - 0x39) * PGO_ONES8);
    alpha = (lower + (0x80 - 0x61) * PGO_ONES8) & ~(lower + (0x7F - 0x66) * PGO_ONES8);
    if (((digit | alpha) & H) != H)
        return 0;
    /* a digit's value is its low nibble; a letter's (bit 6 set) its low nibble + 9 */
    nib = (v & 0x0F0F0F0F0F0F0F0FULL) + ((v >> 6) & PGO_ONES8) * 9;
    w = ((nib << 4) | (nib >> 8)) & 0x00FF00FF00FF00FFULL;
    w = (w | (w >> 8)) & 0x0000FFFF0000FFFFULL;
    w = (w | (w >> 16)) & 0xFFFFFFFFULL;
    *out = (uint32_t)w;
    return 1;
}

/* 16 hex digits at p -> 8 bytes at out; 0 (out partly written) if any is not one, and
 * always 0 where the 8-byte form is not built (its callers' byte loops decide). */
static inline int pgo_hex16(const unsigned char *p, unsigned char *out) {
#if PGO_SWAR_DIGITS
    uint64_t a, b;
    uint32_t x, y;
    memcpy(&a, p, 8);
    memcpy(&b, p + 8, 8);
    if (!pgo_hex8(a, &x) || !pgo_hex8(b, &y))
        return 0;
    memcpy(out, &x, 4);
    memcpy(out + 4, &y, 4);
    return 1;
#else
    (void)p; (void)out;
    return 0;
#endif
}

/* uuid text as PostgreSQL prints it, 8-4-4-4-12 hex digits (36 bytes at p, either
 * case) -> 16 bytes at out; 0 if that is not the shape. */
static inline int pgo_uuid36(const unsigned char *p, unsigned char *out) {
    unsigned char hex[32];
    if (p[8] != 45 || p[13] != 45 || p[18] != 45 || p[23] != 45)
        return 0;
    memcpy(hex, p, 8);
    memcpy(hex + 8, p + 9, 4);
    memcpy(hex + 12, p + 14, 4);
    memcpy(hex + 16, p + 19, 4);
    memcpy(hex + 20, p + 24, 12);
    return pgo_hex16(hex, out) && pgo_hex16(hex + 16, out + 8);
}


/* 4 bytes -> their 8 lowercase hex digits, as 8 bytes to store little-endian (the
 * first byte's high nibble first). */
static inline uint64_t pgo_hex_encode4(const unsigned char *p) {
    uint32_t x;
    uint64_t v, nib, ge10;
    memcpy(&x, p, 4);
    v = x;
    v = (v | (v << 16)) & 0x0000FFFF0000FFFFULL;     /* byte k of x at byte 2k */
    v = (v | (v << 8)) & 0x00FF00FF00FF00FFULL;
    nib = ((v >> 4) & 0x000F000F000F000FULL) | ((v & 0x000F000F000F000FULL) << 8);
    ge10 = ((nib + 6 * PGO_ONES8) >> 4) & PGO_ONES8; /* 1 in the bytes of 10..15 */
    return nib + 0x30 * PGO_ONES8 + ge10 * 39;       /* '0' + d, 'a' + d - 10 */
}

#endif
