/* Big-endian loads for pgoutput_fast: the only place byte order is handled.
 * memcpy from possibly unaligned input, then a byte swap on little-endian hosts.
 * Never cast an unaligned pointer. */
#ifndef PGO_ENDIAN_H
#define PGO_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER)
#  include <stdlib.h>
#  define PGO_BSWAP16(x) _byteswap_ushort(x)
#  define PGO_BSWAP32(x) _byteswap_ulong(x)
#  define PGO_BSWAP64(x) _byteswap_uint64(x)
#  define PGO_LITTLE_ENDIAN 1
#elif defined(__GNUC__) || defined(__clang__)
#  define PGO_BSWAP16(x) __builtin_bswap16(x)
#  define PGO_BSWAP32(x) __builtin_bswap32(x)
#  define PGO_BSWAP64(x) __builtin_bswap64(x)
#  if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#    define PGO_LITTLE_ENDIAN 0
#  else
#    define PGO_LITTLE_ENDIAN 1
#  endif
#else
#  define PGO_PORTABLE_SHIFTS 1
#endif

#ifdef PGO_PORTABLE_SHIFTS
static inline uint16_t pgo_be16(const unsigned char *p) {
    return (uint16_t)(((uint16_t)p[0] << 8) | p[1]);
}
static inline uint32_t pgo_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t pgo_be64(const unsigned char *p) {
    return ((uint64_t)pgo_be32(p) << 32) | pgo_be32(p + 4);
}
#else
static inline uint16_t pgo_be16(const unsigned char *p) {
    uint16_t v; memcpy(&v, p, 2);
#  if PGO_LITTLE_ENDIAN
    v = PGO_BSWAP16(v);
#  endif
    return v;
}
static inline uint32_t pgo_be32(const unsigned char *p) {
    uint32_t v; memcpy(&v, p, 4);
#  if PGO_LITTLE_ENDIAN
    v = PGO_BSWAP32(v);
#  endif
    return v;
}
static inline uint64_t pgo_be64(const unsigned char *p) {
    uint64_t v; memcpy(&v, p, 8);
#  if PGO_LITTLE_ENDIAN
    v = PGO_BSWAP64(v);
#  endif
    return v;
}
#endif

static inline int16_t pgo_be16s(const unsigned char *p) { return (int16_t)pgo_be16(p); }
static inline int32_t pgo_be32s(const unsigned char *p) { return (int32_t)pgo_be32(p); }
static inline int64_t pgo_be64s(const unsigned char *p) { return (int64_t)pgo_be64(p); }

static inline double pgo_be_float8(const unsigned char *p) {
    uint64_t u = pgo_be64(p); double d; memcpy(&d, &u, 8); return d;
}
static inline float pgo_be_float4(const unsigned char *p) {
    uint32_t u = pgo_be32(p); float f; memcpy(&f, &u, 4); return f;
}

#endif
