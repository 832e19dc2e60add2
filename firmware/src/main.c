/* tlpx card firmware: the self-test at boot, then the mailbox's command loop. */
#include "types.h"

#include "console.h"
#include "hw.h"
#include "mailbox.h"
#include "script.h"

#ifndef FW_VERSION_MAJOR
#error "FW_VERSION_MAJOR / FW_VERSION_MINOR come from the Makefile"
#endif
#define FW_VERSION ((u32)FW_VERSION_MAJOR << 16 | (u32)FW_VERSION_MINOR)

void fw_main(void) __attribute__((noreturn));
void fw_trap(u32 mcause, u32 mepc) __attribute__((noreturn));

extern char _payload_end[], _bss_end[], _stack_top[], _stack_bottom[];

static u32 clock_hz = 125000000u;
static u32 busy_seq;  /* cmd_seq of the command being served */
static int busy;           /* a command is being served */
static u32 traps;

static const struct {
    u32 shift;
    const char *name;
} features[] = {
    {TLPX_IDENT_FEATURES_REQUEST_PATH_SHIFT, "request_path"},
    {TLPX_IDENT_FEATURES_MSI_SHIFT, "msi"},
    {TLPX_IDENT_FEATURES_DMA_LOOPBACK_SHIFT, "dma_loopback"},
    {TLPX_IDENT_FEATURES_GENERATOR_SHIFT, "generator"},
    {TLPX_IDENT_FEATURES_SPY_SHIFT, "spy"},
    {TLPX_IDENT_FEATURES_IRQ_TIMER_SHIFT, "irq_timer"},
    {TLPX_IDENT_FEATURES_RULE30_SHIFT, "rule30"},
    {TLPX_IDENT_FEATURES_RT_LOOP_SHIFT, "rt_loop"},
    {TLPX_IDENT_FEATURES_CPU_SHIFT, "cpu"},
};

static u32 field(u32 v, u32 shift, u32 width)
{
    return (v >> shift) & (width >= 32u ? 0xFFFFFFFFu : (1u << width) - 1u);
}

/* Prints the self-test; returns 1 if it passed. */
static int selftest(void)
{
    const char *fail = 0;
    console_printf("tlpx-fw %u.%u: self-test\n", (unsigned)FW_VERSION_MAJOR, (unsigned)FW_VERSION_MINOR);

    u32 magic = rd32(TLPX_IDENT_MAGIC), version = rd32(TLPX_IDENT_VERSION);
    u32 map_hash = rd32(TLPX_IDENT_MAP_HASH), feat = rd32(TLPX_IDENT_FEATURES);
    u32 width = rd32(TLPX_IDENT_DATA_WIDTH);
    clock_hz = rd32(TLPX_IDENT_CLOCK_HZ);
    int magic_ok = magic == TLPX_CONST_IDENT_MAGIC, hash_ok = map_hash == TLPX_MAP_HASH_CPU;
    console_printf("ident: magic 0x%08x %s, version %u.%u, map hash 0x%08x %s (cpu card 0x%08x expected), "
                   "clock %u Hz, datapath %u bits\n",
                   magic, magic_ok ? "ok" : "BAD",
                   field(version, TLPX_IDENT_VERSION_MAJOR_SHIFT, TLPX_IDENT_VERSION_MAJOR_WIDTH),
                   field(version, TLPX_IDENT_VERSION_MINOR_SHIFT, TLPX_IDENT_VERSION_MINOR_WIDTH), map_hash,
                   hash_ok ? "ok" : "MISMATCH", TLPX_MAP_HASH_CPU, clock_hz, width);
    if (!magic_ok)
        fail = "ident.magic";
    else if (!hash_ok)
        fail = "ident.map_hash is not the CPU card's";
    if (clock_hz == 0) {
        fail = fail ? fail : "ident.clock_hz is 0";
        clock_hz = 125000000u;
    }

    console_puts("features:");
    for (u32 i = 0; i < sizeof features / sizeof features[0]; i++)
        if (feat & BIT(features[i].shift))
            console_printf(" %s", features[i].name);
    console_printf(" (0x%x)\n", feat);
    if (!(feat & BIT(TLPX_IDENT_FEATURES_CPU_SHIFT)))
        fail = fail ? fail : "ident.features has no cpu bit";

    /* ident.scratch: a bus round trip with data (the host's value is put back) */
    u32 saved = rd32(TLPX_IDENT_SCRATCH), bad = 0;
    static const u32 patterns[] = {0x00000000u, 0xFFFFFFFFu, 0xA5A5A5A5u, 0x5A5A5A5Au, 0x12345678u};
    for (u32 i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        wr32(TLPX_IDENT_SCRATCH, patterns[i]);
        if (rd32(TLPX_IDENT_SCRATCH) != patterns[i])
            bad++;
    }
    wr32(TLPX_IDENT_SCRATCH, saved);
    console_printf("scratch: %s (%u patterns written and read back)\n", bad ? "BAD" : "ok", 5u);
    if (bad)
        fail = fail ? fail : "ident.scratch does not read back";

    u64 t0 = cycles();
    for (volatile u32 i = 0; i < 1000u; i++) {
    }
    u64 t1 = cycles();
    int running = t1 > t0;
    console_printf("timebase: %s (%llu cycles in a 1000-turn busy loop, now at cycle %llu)\n",
                   running ? "running" : "STOPPED", (unsigned long long)(t1 - t0), (unsigned long long)t1);
    if (!running)
        fail = fail ? fail : "the timebase does not count";

    if (feat & BIT(TLPX_IDENT_FEATURES_REQUEST_PATH_SHIFT))
        console_printf("request_path: answers (mem_reads %u, mem_writes %u, ur_sent %u)\n",
                       rd32(TLPX_REQUEST_PATH_MEM_READS), rd32(TLPX_REQUEST_PATH_MEM_WRITES),
                       rd32(TLPX_REQUEST_PATH_UR_SENT));
    if (feat & BIT(TLPX_IDENT_FEATURES_MSI_SHIFT))
        console_printf("pcie_msi: answers (enable 0x%x)\n", rd32(TLPX_PCIE_MSI_ENABLE));
    if (feat & BIT(TLPX_IDENT_FEATURES_DMA_LOOPBACK_SHIFT))
        console_printf("pcie_dma0: answers (loopback_enable %u)\n", rd32(TLPX_PCIE_DMA0_LOOPBACK_ENABLE));
    if (feat & BIT(TLPX_IDENT_FEATURES_GENERATOR_SHIFT))
        console_printf("generator: answers (status 0x%x, transfers %llu)\n", rd32(TLPX_GENERATOR_STATUS),
                       (unsigned long long)rd64(TLPX_GENERATOR_TRANSFERS));
    if (feat & BIT(TLPX_IDENT_FEATURES_SPY_SHIFT))
        console_printf("spy: answers (status 0x%x)\n", rd32(TLPX_SPY_STATUS));
    if (feat & BIT(TLPX_IDENT_FEATURES_IRQ_TIMER_SHIFT))
        console_printf("irq_timer: answers (status 0x%x, fires %u)\n", rd32(TLPX_IRQ_TIMER_STATUS),
                       rd32(TLPX_IRQ_TIMER_FIRES));
    if (feat & BIT(TLPX_IDENT_FEATURES_RT_LOOP_SHIFT))
        console_printf("rt_loop: answers (status 0x%x, count %u)\n", rd32(TLPX_RT_LOOP_STATUS),
                       rd32(TLPX_RT_LOOP_COUNT));
    if (feat & BIT(TLPX_IDENT_FEATURES_RULE30_SHIFT)) {
        console_printf("rule30: window version 0x%08x at 0x%x (status 0x%x)\n", rd32(TLPX_RULE30_VERSION),
                       TLPX_RULE30_VERSION, rd32(TLPX_RULE30_STATUS));
        console_printf("rule30_batch: answers (status 0x%x, batches %u)\n", rd32(TLPX_RULE30_BATCH_STATUS),
                       rd32(TLPX_RULE30_BATCH_BATCHES));
    }
    if (feat & BIT(TLPX_IDENT_FEATURES_CPU_SHIFT)) {
        u32 st = rd32(TLPX_CPU_CTRL_STATUS);
        console_printf("cpu_ctrl: answers (status 0x%x, starts %u, refusals %u, sram 0x%x + 0x%x)\n", st,
                       rd32(TLPX_CPU_CTRL_STARTS), rd32(TLPX_CPU_CTRL_REFUSALS), rd32(TLPX_CPU_CTRL_SRAM_BASE),
                       rd32(TLPX_CPU_CTRL_SRAM_SIZE));
    }
    console_printf("uart: console (txfull %u, %u characters dropped so far)\n", rd32(TLPX_UART_TXFULL) & 1u,
                   mbox_rd(MBOX_DROPPED));

    u32 fw_bytes = (u32)(unsigned long)_payload_end - FW_BASE;
    console_printf("sram: 0x%x..0x%x, firmware %u bytes (+ bss to 0x%x), stack top 0x%x (%u bytes of stack), "
                   "mailbox 0x%x, script area 0x%x..0x%x, ring 0x%x\n",
                   TLPX_SRAM_BASE, SRAM_END - 1u, fw_bytes, (u32)(unsigned long)_bss_end, (u32)(unsigned long)_stack_top,
                   (u32)(unsigned long)_stack_top - (u32)(unsigned long)_bss_end, MBOX_BASE, SCRIPT_AREA, SCRIPT_AREA_END - 1u,
                   RING_AREA);
    if (traps)
        console_printf("traps: %u since boot\n", traps);

    if (fail)
        console_printf("self-test: FAIL (%s)\n", fail);
    else
        console_puts("self-test: PASS\n");
    return fail == 0;
}

static void command_loop(void) __attribute__((noreturn));
static void command_loop(void)
{
    u32 period = clock_hz / 1000u; /* heartbeat: 1 ms of card time */
    u64 last = cycles();
    for (;;) {
        busy = 0;
        mbox_wr(MBOX_STATE, MBOX_STATE_READY);
        u32 seq;
        while ((seq = mbox_rd(MBOX_CMD_SEQ)) == mbox_rd(MBOX_DONE_SEQ)) {
            u64 now = cycles();
            if (now - last >= period) {
                mbox_wr(MBOX_HEARTBEAT, mbox_rd(MBOX_HEARTBEAT) + 1u);
                last = now - last >= 2u * (u64)period ? now : last + period;
            }
        }
        busy = 1;
        busy_seq = seq;
        u32 cmd = mbox_rd(MBOX_COMMAND), status;
        /* the counts of this command start from 0, and are 0 before the state says busy: a
           host that sees state busy (or done_seq == its cmd_seq) reads this command's */
        mbox_wr(MBOX_RECORDS, 0);
        mbox_wr(MBOX_CONSUMED, 0);
        if (cmd == MBOX_CMD_RUN_SCRIPT) {
            mbox_wr(MBOX_INSNS, 0);
            mbox_wr(MBOX_PC, 0);
        }
        mbox_wr(MBOX_STATE, MBOX_STATE_BUSY);
        switch (cmd) {
        case MBOX_CMD_RUN_SCRIPT:
            status = script_run_command();
            break;
        case MBOX_CMD_SELFTEST:
            status = selftest() ? ST_OK : ST_SELFTEST_FAILED;
            break;
        default:
            console_printf("command %u: unknown (1 RUN_SCRIPT, 2 SELFTEST)\n", cmd);
            status = ST_UNKNOWN_COMMAND;
            break;
        }
        mbox_wr(MBOX_STATUS, status);
        mbox_wr(MBOX_ABORT, 0);
        mbox_wr(MBOX_DONE_SEQ, seq);
        last = cycles();
    }
}

void fw_main(void)
{
    mbox_wr(MBOX_STATE, MBOX_STATE_BOOTING);
    mbox_wr(MBOX_VERSION, FW_VERSION);
    selftest();
    mbox_wr(MBOX_MAGIC, MBOX_MAGIC_VALUE);
    command_loop();
}

void fw_trap(u32 mcause, u32 mepc)
{
    traps++;
    console_printf("trap: mcause 0x%x at pc 0x%08x%s\n", mcause, mepc,
                   busy ? ": the command in progress ends STOPPED" : "");
    if (busy) {
        script_trap_cleanup();
        mbox_wr(MBOX_STATUS, ST_STOPPED);
        mbox_wr(MBOX_ABORT, 0);
        mbox_wr(MBOX_DONE_SEQ, busy_seq);
    }
    if (mbox_rd(MBOX_MAGIC) != MBOX_MAGIC_VALUE) {
        mbox_wr(MBOX_VERSION, FW_VERSION);
        mbox_wr(MBOX_MAGIC, MBOX_MAGIC_VALUE);
    }
    command_loop();
}
