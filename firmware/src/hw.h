/* Register access: every CSR is a 32-bit word at its BAR0 offset (CPU address == BAR0 offset);
   64-bit registers are two words, low first. */
#ifndef TLPX_FW_HW_H
#define TLPX_FW_HW_H

#include "types.h"
#include "tlpx_regs.h" /* generated (firmware/include, make regs): TLPX_<REGION>_<NAME> */

/* Address 0 is a register here (ident.magic): the firmware is built with
   -fno-delete-null-pointer-checks, so that GCC does not treat a read of it as a NULL
   dereference (it would put a trap there instead of the load). */

/* BAR0 size (generated, as tlpx_regs::BAR_SIZE): the decoder's bound on script offsets. */
#define BAR0_SIZE TLPX_BAR_SIZE

/* SRAM layout (docs/firmware.md, "Memory map") */
#define FW_BASE          0x40000u
#define FW_STACK_TOP     0x47F00u
#define SCRIPT_AREA      0x48000u
#define SCRIPT_AREA_END  0x4C000u
#define RING_AREA        0x4C000u
#define SRAM_END         (TLPX_SRAM_BASE + TLPX_SRAM_SIZE)

#define BIT(n) (1u << (n))

#ifdef FW_HOSTTEST
/* firmware/tests/hosttest.c: the card's registers and SRAM simulated on the build machine */
u32 hosttest_rd32(u32 addr);
void hosttest_wr32(u32 addr, u32 v);
static inline u32 rd32(u32 addr)
{
    return hosttest_rd32(addr);
}

static inline void wr32(u32 addr, u32 v)
{
    hosttest_wr32(addr, v);
}
#else
static inline u32 rd32(u32 addr)
{
    return *(volatile u32 *)PTR(addr);
}

static inline void wr32(u32 addr, u32 v)
{
    *(volatile u32 *)PTR(addr) = v;
}
#endif

static inline u64 rd64(u32 addr)
{
    u32 lo = rd32(addr);
    u32 hi = rd32(addr + 4u);
    return (u64)hi << 32 | lo;
}

static inline void wr64(u32 addr, u64 v)
{
    wr32(addr, (u32)v);
    wr32(addr + 4u, (u32)(v >> 32));
}

/* The card's cycle counter: reading cycles_lo latches the high half into cycles_hi. */
static inline u64 cycles(void)
{
    u32 lo = rd32(TLPX_TIMEBASE_CYCLES_LO);
    u32 hi = rd32(TLPX_TIMEBASE_CYCLES_HI);
    return (u64)hi << 32 | lo;
}

#endif
