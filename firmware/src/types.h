/* Fixed-width types as plain C types: this toolchain's <stdint.h> makes uint32_t a
   `long unsigned int`, which would need %lu everywhere in the console's printf formats. */
#ifndef TLPX_FW_TYPES_H
#define TLPX_FW_TYPES_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#ifndef FW_HOSTTEST
_Static_assert(sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8 && sizeof(void *) == 4,
               "rv32 ilp32 types");
#endif

/* A CPU address (== BAR0 offset) as a pointer. */
#define PTR(addr) ((void *)(unsigned long)(addr))

#endif
