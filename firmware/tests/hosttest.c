/* Runs the firmware's script interpreter (src/script.c, src/console.c) on the build machine
   against a model of the card: the SRAM mapped at its CPU address (0x40000), the registers in
   an array, a timebase that advances on every read, a generator that ends its runs after a
   while, a host that consumes the result ring. Not the card: a check of the interpreter's
   logic (validation, records, loops, waits, limits, abort, ring-full waits).

   hosttest [options] IMAGE...      runs each image; prints its records and its status
     --validate-only                only check the images (one line each: file status)
     --buf BYTES                    host buffer bytes (default 16 MiB)
     --ring-cap N                   result ring records (default 512)
     --gen-never                    the generator never ends (DMA_LIMIT)
     --abort-after N                the host sets abort at its N-th look at the mailbox's abort
     --event-set OFFSET:BIT         this register bit reads 1
     --no-consume N                 the host consumes nothing for its first N looks
     --card-hash HASH               ident.map_hash (default TLPX_MAP_HASH_CPU)
     --mailbox                      runs the firmware's main (src/main.c: self-test, command
                                    loop) with a host model issuing RUN_SCRIPT of the first
                                    IMAGE, SELFTEST and an unknown command through the mailbox
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../src/console.h"
#include "../src/hw.h"
#include "../src/mailbox.h"
#include "../src/script.h"

int hosttest_validate_only;

static unsigned char *sram;
static u32 csr[0x40000 / 4];
static u64 now = 1000;
static u32 hi_latch;
static int gen_running, gen_done, gen_never;
static u64 gen_done_at;
static u32 gen_at_start[32];
static u32 card_hash = TLPX_MAP_HASH_CPU;
static long abort_after = -1;
static long no_consume;
static u32 host_next;
static u32 ring_addr = RING_AREA, ring_cap = 512;
static u64 buf_bus = 0x123456789000ull;
static int mailbox_mode;
static u32 image_len;
static void mailbox_host(void);
void fw_main(void) __attribute__((noreturn));

static void host_consume(void)
{
    u32 written = *(u32 *)(sram + MBOX_BASE - 0x40000 + MBOX_RECORDS);
    if (no_consume > 0) {
        no_consume--;
        return;
    }
    while (host_next != written) {
        const unsigned char *r = sram + ring_addr - 0x40000 + (host_next % ring_cap) * 32;
        u32 w[8];
        memcpy(w, r, 32);
        printf("record %u: slot %u kind %u status %u pc %u cycle %llu value %llu aux %llu\n", host_next,
               w[0] & 0xFFFF, (w[0] >> 16) & 0xFF, w[0] >> 24, w[1], (unsigned long long)w[3] << 32 | w[2],
               (unsigned long long)w[5] << 32 | w[4], (unsigned long long)w[7] << 32 | w[6]);
        host_next++;
    }
    *(u32 *)(sram + MBOX_BASE - 0x40000 + MBOX_CONSUMED) = host_next;
}

u32 hosttest_rd32(u32 a)
{
    if (a % 4) {
        fprintf(stderr, "hosttest: unaligned read 0x%x\n", a);
        exit(3);
    }
    if (a >= 0x40000 && a < 0x50000) {
        if (a == MBOX_BASE + MBOX_CONSUMED)
            host_consume();
        if (a == MBOX_BASE + MBOX_CMD_SEQ && mailbox_mode)
            mailbox_host();
        if (a == MBOX_BASE + MBOX_ABORT && abort_after > 0 && --abort_after == 0)
            *(u32 *)(sram + MBOX_BASE - 0x40000 + MBOX_ABORT) = 1;
        return *(u32 *)(sram + a - 0x40000);
    }
    if (a >= 0x40000) {
        fprintf(stderr, "hosttest: read outside BAR0's model 0x%x\n", a);
        exit(3);
    }
    switch (a) {
    case TLPX_TIMEBASE_CYCLES_LO:
        now += 13;
        hi_latch = (u32)(now >> 32);
        return (u32)now;
    case TLPX_TIMEBASE_CYCLES_HI:
        return hi_latch;
    case TLPX_GENERATOR_STATUS:
        if (gen_running && !gen_never && now >= gen_done_at) {
            gen_running = 0;
            gen_done = 1;
        }
        return (u32)gen_done << TLPX_GENERATOR_STATUS_DONE_SHIFT | (u32)gen_running;
    case TLPX_GENERATOR_CYCLES:
        return 4321;
    case TLPX_GENERATOR_TRANSFERS:
        return 256;
    case TLPX_IDENT_MAP_HASH:
        return card_hash;
    case TLPX_IDENT_CLOCK_HZ:
        return 125000000u;
    case TLPX_UART_TXFULL:
        return 0;
    default:
        return csr[a / 4];
    }
}

void hosttest_wr32(u32 a, u32 v)
{
    if (a % 4) {
        fprintf(stderr, "hosttest: unaligned write 0x%x\n", a);
        exit(3);
    }
    if (a >= 0x40000 && a < 0x50000) {
        if (a < MBOX_BASE || (a >= SCRIPT_AREA && a < SCRIPT_AREA + 0x4000)) {
            fprintf(stderr, "hosttest: write into the firmware or the image 0x%x\n", a);
            exit(3);
        }
        *(u32 *)(sram + a - 0x40000) = v;
        return;
    }
    if (a >= 0x40000) {
        fprintf(stderr, "hosttest: write outside BAR0's model 0x%x\n", a);
        exit(3);
    }
    switch (a) {
    case TLPX_GENERATOR_CONTROL:
        if (v & BIT(TLPX_GENERATOR_CONTROL_CLEAR_SHIFT)) {
            gen_done = 0;
            gen_running = 0;
        }
        if (v & BIT(TLPX_GENERATOR_CONTROL_START_SHIFT)) {
            gen_running = 1;
            gen_done = 0;
            gen_done_at = now + 5000;
            memcpy(gen_at_start, &csr[TLPX_GENERATOR_CONFIG / 4], sizeof gen_at_start);
            printf("generator: start config 0x%x size %u count %llu base 0x%llx window_mask 0x%x stride_log2 %u "
                   "timeout %u\n",
                   gen_at_start[0], gen_at_start[1], (unsigned long long)gen_at_start[3] << 32 | gen_at_start[2],
                   (unsigned long long)csr[(TLPX_GENERATOR_BASE + 4) / 4] << 32 | csr[TLPX_GENERATOR_BASE / 4],
                   csr[TLPX_GENERATOR_WINDOW_MASK / 4], csr[TLPX_GENERATOR_STRIDE_LOG2 / 4],
                   csr[TLPX_GENERATOR_TIMEOUT / 4]);
        }
        if (v & BIT(TLPX_GENERATOR_CONTROL_STOP_SHIFT)) {
            printf("generator: stop\n");
            gen_running = 0;
            gen_done = 1;
        }
        return;
    case TLPX_UART_RXTX:
        fputc((int)(v & 0xFF), stderr);
        return;
    default:
        csr[a / 4] = v;
    }
}

static int load(const char *path, u32 *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    memset(sram + SCRIPT_AREA - 0x40000, 0xEE, 0x4000);
    size_t n = fread(sram + SCRIPT_AREA - 0x40000, 1, 0x4000 + 1, f);
    fclose(f);
    if (n > 0x4000) {
        fprintf(stderr, "%s: larger than the script area\n", path);
        return -1;
    }
    *len = (u32)n;
    return 0;
}

int main(int argc, char **argv)
{
    u32 buf_bytes = 16u << 20;
    sram = mmap((void *)0x40000, 0x10000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                -1, 0);
    if (sram != (void *)0x40000) {
        perror("mmap 0x40000");
        return 3;
    }
    int i = 1, failures = 0;
    csr[TLPX_IDENT_MAGIC / 4] = TLPX_CONST_IDENT_MAGIC;
    csr[TLPX_IDENT_VERSION / 4] = 0x00000001u;
    csr[TLPX_IDENT_FEATURES / 4] = 0x1FFu;
    csr[TLPX_IDENT_DATA_WIDTH / 4] = 64u;
    csr[TLPX_RULE30_VERSION / 4] = 0x00010000u;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--validate-only"))
            hosttest_validate_only = 1;
        else if (!strcmp(argv[i], "--buf") && i + 1 < argc)
            buf_bytes = (u32)strtoul(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--ring-cap") && i + 1 < argc)
            ring_cap = (u32)strtoul(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--mailbox"))
            mailbox_mode = 1;
        else if (!strcmp(argv[i], "--gen-never"))
            gen_never = 1;
        else if (!strcmp(argv[i], "--abort-after") && i + 1 < argc)
            abort_after = strtol(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--no-consume") && i + 1 < argc)
            no_consume = strtol(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--card-hash") && i + 1 < argc)
            card_hash = (u32)strtoul(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--event-set") && i + 1 < argc) {
            char *end;
            u32 off = (u32)strtoul(argv[++i], &end, 0);
            u32 bit = (u32)strtoul(end + 1, 0, 0);
            csr[off / 4] |= 1u << bit;
        } else {
            fprintf(stderr, "hosttest: unknown option %s\n", argv[i]);
            return 3;
        }
    }
    if (mailbox_mode) {
        if (i >= argc || load(argv[i], &image_len))
            return 3;
        fw_main(); /* never returns: mailbox_host() exits */
    }
    for (; i < argc; i++) {
        u32 len;
        if (load(argv[i], &len))
            return 3;
        u32 *mb = (u32 *)(sram + MBOX_BASE - 0x40000);
        mb[MBOX_ARG(MBOX_ARG_IMAGE_ADDR) / 4] = SCRIPT_AREA;
        mb[MBOX_ARG(MBOX_ARG_IMAGE_LEN) / 4] = len;
        mb[MBOX_ARG(MBOX_ARG_BUF_LO) / 4] = (u32)buf_bus;
        mb[MBOX_ARG(MBOX_ARG_BUF_HI) / 4] = (u32)(buf_bus >> 32);
        mb[MBOX_ARG(MBOX_ARG_BUF_BYTES) / 4] = buf_bytes;
        mb[MBOX_ARG(MBOX_ARG_RING_ADDR) / 4] = ring_addr;
        mb[MBOX_ARG(MBOX_ARG_RING_RECORDS) / 4] = ring_cap;
        mb[MBOX_RECORDS / 4] = 0;
        mb[MBOX_CONSUMED / 4] = 0;
        mb[MBOX_ABORT / 4] = 0;
        host_next = 0;
        u32 st = script_run_command();
        long saved = no_consume;
        no_consume = 0;
        host_consume();
        no_consume = saved;
        printf("%s: status %u %s, %u records, %u instructions\n", argv[i], st, status_name(st), mb[MBOX_RECORDS / 4],
               mb[MBOX_INSNS / 4]);
        fflush(stdout);
        if (st != ST_OK)
            failures++;
    }
    return failures ? 1 : 0;
}

/* ---- the firmware's main, with the host on the other side of the mailbox ---- */

#include "../src/main.c"

char _payload_end[4], _bss_end[4], _stack_top[4], _stack_bottom[4];

static void mailbox_host(void)
{
    static const u32 commands[] = {MBOX_CMD_RUN_SCRIPT, MBOX_CMD_SELFTEST, 99};
    static const u32 expected[] = {ST_OK, ST_OK, ST_UNKNOWN_COMMAND};
    static u32 issued, idle_looks;
    static int failed;
    u32 *mb = (u32 *)(sram + MBOX_BASE - 0x40000);
    if (mb[MBOX_CMD_SEQ / 4] != mb[MBOX_DONE_SEQ / 4])
        return; /* the firmware is picking the command up */
    if (mb[MBOX_MAGIC / 4] != MBOX_MAGIC_VALUE || mb[MBOX_VERSION / 4] != FW_VERSION ||
        mb[MBOX_STATE / 4] != MBOX_STATE_READY) {
        printf("mailbox: idle without magic/version/ready: magic 0x%x version 0x%x state %u\n", mb[MBOX_MAGIC / 4],
               mb[MBOX_VERSION / 4], mb[MBOX_STATE / 4]);
        exit(1);
    }
    if (issued && idle_looks == 0) {
        u32 st = mb[MBOX_STATUS / 4];
        printf("mailbox: command %u (%u) done: status %u %s, %u records, %u instructions, heartbeat %u\n", issued,
               commands[issued - 1], st, status_name(st), mb[MBOX_RECORDS / 4], mb[MBOX_INSNS / 4],
               mb[MBOX_HEARTBEAT / 4]);
        if (st != expected[issued - 1] || mb[MBOX_ABORT / 4] != 0)
            failed = 1;
        host_next = 0;
    }
    if (++idle_looks < 30000)
        return; /* let the heartbeat tick */
    idle_looks = 0;
    if (issued == sizeof commands / sizeof commands[0]) {
        u32 hb = mb[MBOX_HEARTBEAT / 4];
        printf("mailbox: heartbeat %u after %llu cycles\n", hb, (unsigned long long)now);
        if (hb < 3 || hb > now / 125000u + 1u)
            failed = 1;
        printf("mailbox: %s\n", failed ? "FAIL" : "PASS");
        fflush(stdout);
        exit(failed);
    }
    mb[MBOX_COMMAND / 4] = commands[issued];
    mb[MBOX_ARG(MBOX_ARG_IMAGE_ADDR) / 4] = SCRIPT_AREA;
    mb[MBOX_ARG(MBOX_ARG_IMAGE_LEN) / 4] = image_len;
    mb[MBOX_ARG(MBOX_ARG_BUF_LO) / 4] = (u32)buf_bus;
    mb[MBOX_ARG(MBOX_ARG_BUF_HI) / 4] = (u32)(buf_bus >> 32);
    mb[MBOX_ARG(MBOX_ARG_BUF_BYTES) / 4] = 16u << 20;
    mb[MBOX_ARG(MBOX_ARG_RING_ADDR) / 4] = ring_addr;
    mb[MBOX_ARG(MBOX_ARG_RING_RECORDS) / 4] = ring_cap;
    mb[MBOX_CONSUMED / 4] = 12345; /* stale: the firmware zeroes it */
    mb[MBOX_CMD_SEQ / 4]++;
    issued++;
}
