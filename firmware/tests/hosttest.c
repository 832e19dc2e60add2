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
                   (unsigned long long)csr[(GEN_REG_BASE + 4) / 4] << 32 | csr[GEN_REG_BASE / 4],
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
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--validate-only"))
            hosttest_validate_only = 1;
        else if (!strcmp(argv[i], "--buf") && i + 1 < argc)
            buf_bytes = (u32)strtoul(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--ring-cap") && i + 1 < argc)
            ring_cap = (u32)strtoul(argv[++i], 0, 0);
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
