/* The exerciser script interpreter (docs/firmware.md): checks an image exactly as
   tlpx_script::decode does, then runs it, writing 32-byte result records into the ring the
   host gave (never over an unread record) and ending with one end record. */
#include "types.h"

#include "console.h"
#include "hw.h"
#include "mailbox.h"
#include "script.h"

/* The run in progress (one at a time). */
struct run {
    int active;          /* a RUN_SCRIPT command is being served (for the trap handler) */
    int ring_ok;         /* records may be written */
    int gen_started;     /* this script started the generator */
    u32 img, len;   /* the image in SRAM */
    u32 insns, dmas, events, slots; /* table addresses */
    u32 insn_count, dma_count, event_count, slot_count, depth;
    u32 buffer_len;
    u64 buf_bus;    /* the host buffer's bus address */
    u32 ring, ring_cap;
    u64 *values;    /* one u64 per result slot, after the image in the script area */
    u32 written;    /* records written by this command */
    u32 pc;         /* instruction being run (the records' pc) */
    u64 executed;   /* instructions executed */
    u32 clock_hz;
};

static struct run R;

const char *status_name(u32 status)
{
    static const char *const names[] = {
        "OK", "COMPARE_FAILED", "ASSERT_FAILED", "EVENT_TIMEOUT",
        "DMA_LIMIT", "BAD_IMAGE", "BUFFER_TOO_SMALL", "STOPPED",
    };
    if (status < sizeof names / sizeof names[0])
        return names[status];
    if (status == ST_SELFTEST_FAILED)
        return "SELFTEST_FAILED";
    if (status == ST_UNKNOWN_COMMAND)
        return "UNKNOWN_COMMAND";
    return "?";
}

/* ---- image access: every field of 4 bytes or more is 4-aligned in the image ---- */

static inline u32 w32(u32 addr)
{
    return *(const u32 *)PTR(addr);
}

static inline u8 b8(u32 addr)
{
    return *(const u8 *)PTR(addr);
}

static inline u64 w64(u32 addr)
{
    return (u64)w32(addr + 4u) << 32 | w32(addr);
}

static inline int aborted(void)
{
    return mbox_rd(MBOX_ABORT) != 0;
}

/* CRC-32 (IEEE/zlib: reflected 0xEDB88320, init and final XOR 0xFFFFFFFF), 4 bits a step. */
static u32 crc32(u32 addr, u32 len)
{
    static const u32 nib[16] = {
        0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
        0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c, 0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
    };
    u32 crc = 0xFFFFFFFFu;
    for (u32 i = 0; i < len; i++) {
        crc ^= b8(addr + i);
        crc = (crc >> 4) ^ nib[crc & 0xFu];
        crc = (crc >> 4) ^ nib[crc & 0xFu];
    }
    return ~crc;
}

/* UTF-8 as Rust's str::from_utf8 accepts it (no overlongs, surrogates or > U+10FFFF). */
static int utf8_ok(u32 s, u32 n)
{
    u32 i = 0;
    while (i < n) {
        u8 c = b8(s + i);
        if (c < 0x80u) {
            i++;
            continue;
        }
        u32 need;
        u8 lo = 0x80u, hi = 0xBFu;
        if (c >= 0xC2u && c <= 0xDFu) {
            need = 1;
        } else if (c == 0xE0u) {
            need = 2;
            lo = 0xA0u;
        } else if (c == 0xEDu) {
            need = 2;
            hi = 0x9Fu;
        } else if (c >= 0xE1u && c <= 0xEFu) {
            need = 2;
        } else if (c == 0xF0u) {
            need = 3;
            lo = 0x90u;
        } else if (c >= 0xF1u && c <= 0xF3u) {
            need = 3;
        } else if (c == 0xF4u) {
            need = 3;
            hi = 0x8Fu;
        } else {
            return 0;
        }
        if (n - i - 1u < need)
            return 0;
        u8 c1 = b8(s + i + 1u);
        if (c1 < lo || c1 > hi)
            return 0;
        for (u32 k = 2; k <= need; k++)
            if ((b8(s + i + k) & 0xC0u) != 0x80u)
                return 0;
        i += need + 1u;
    }
    return 1;
}

/* tlpx_script::image::check_offset: 1 or 2 words, 4-aligned, inside BAR0. */
static const char *offset_problem(u32 offset, u32 words)
{
    if (words != 1u && words != 2u)
        return "an access of 1 or 2 words";
    if (offset % 4u)
        return "a BAR0 offset that is a multiple of 4";
    if (offset > BAR0_SIZE - 4u * words)
        return "a BAR0 offset inside BAR0 (1 MiB)";
    return 0;
}

static inline u32 slot_kind(u32 s)
{
    return b8(R.slots + s * IMG_SLOT_LEN);
}

#define REFUSE(...)                                   \
    do {                                              \
        console_puts("script: refused (BAD_IMAGE): "); \
        console_printf(__VA_ARGS__);                  \
        console_puts("\n");                           \
        return ST_BAD_IMAGE;                          \
    } while (0)

/* The slot field of instruction i must name a slot of kind `kind` (or none, if optional). */
static u32 check_slot(u32 i, u32 s, u32 kind, int optional)
{
    if (optional && s == IMG_NO_SLOT)
        return ST_OK;
    if (s >= R.slot_count)
        REFUSE("instruction %u: result slot %u of %u", i, s, R.slot_count);
    if (slot_kind(s) != kind)
        REFUSE("instruction %u: slot %u is of kind %u, not %u", i, s, slot_kind(s), kind);
    return ST_OK;
}

/* Everything tlpx_script::decode checks, plus this card's map hash and clock, the host
   buffer's size and the room for the value table. Fills R's table addresses. */
static u32 validate(u32 buf_bytes)
{
    const u32 img = R.img, len = R.len;
    if (len < IMG_HEADER_LEN)
        REFUSE("image is %u bytes, shorter than its 48-byte header", len);
    if (w32(img) != IMG_MAGIC)
        REFUSE("bad magic 0x%08x: not a tlpx script image (expected \"TLXS\")", w32(img));
    u32 version = w32(img + 4u) & 0xFFFFu, header_len = w32(img + 4u) >> 16;
    if (version != IMG_VERSION)
        REFUSE("format version %u; this firmware reads version 1", version);
    if (header_len != IMG_HEADER_LEN)
        REFUSE("header length %u; version 1 headers are 48 bytes", header_len);
    u32 map_hash = w32(img + 8u);
    u32 clock_hz = w32(img + 12u);
    R.insn_count = w32(img + 16u);
    R.dma_count = w32(img + 20u) & 0xFFFFu;
    R.event_count = w32(img + 20u) >> 16;
    R.slot_count = w32(img + 24u) & 0xFFFFu;
    R.depth = w32(img + 24u) >> 16;
    u32 strings_len = w32(img + 28u);
    u32 body_len = w32(img + 32u);
    u32 body_crc = w32(img + 36u);
    R.buffer_len = w32(img + 40u);
    if (w32(img + 44u) != 0)
        REFUSE("reserved header word is 0x%08x, not 0", w32(img + 44u));
    u32 body = img + IMG_HEADER_LEN;
    if (body_len != len - IMG_HEADER_LEN)
        REFUSE("header says the body is %u bytes, the image has %u", body_len, len - IMG_HEADER_LEN);
    u32 crc = crc32(body, body_len);
    if (crc != body_crc)
        REFUSE("body CRC-32 is 0x%08x, the header says 0x%08x: the image is corrupt", crc, body_crc);
    /* The CPU card's map is a superset of the card's without the CPU (same registers, same
       offsets): a script compiled for either runs on the CPU card. */
    u32 card_hash = rd32(TLPX_IDENT_MAP_HASH);
    if (map_hash != card_hash && !(card_hash == TLPX_MAP_HASH_CPU && map_hash == TLPX_MAP_HASH))
        REFUSE("image was compiled for register map 0x%08x, this card's map is 0x%08x: recompile the script",
               map_hash, card_hash);
    if (clock_hz == 0)
        REFUSE("clock is 0 Hz");
    if (clock_hz != R.clock_hz)
        REFUSE("image's times were converted at %u Hz, this card runs at %u Hz: recompile with --clock",
               clock_hz, R.clock_hz);
    if (R.insn_count > IMG_MAX_INSNS)
        REFUSE("%u instructions, more than the %u the format allows", R.insn_count, IMG_MAX_INSNS);
    if (R.dma_count > IMG_MAX_DMAS)
        REFUSE("%u DMA descriptors, more than the %u the format allows", R.dma_count, IMG_MAX_DMAS);
    if (R.event_count > IMG_MAX_EVENTS)
        REFUSE("%u events, more than the %u the format allows", R.event_count, IMG_MAX_EVENTS);
    if (R.slot_count > IMG_MAX_SLOTS)
        REFUSE("%u result slots, more than the %u the format allows", R.slot_count, IMG_MAX_SLOTS);
    if (R.depth > IMG_MAX_DEPTH)
        REFUSE("%u loop depth, more than the %u the format allows", R.depth, IMG_MAX_DEPTH);
    if (strings_len > IMG_MAX_STRINGS)
        REFUSE("%u string bytes, more than the %u the format allows", strings_len, IMG_MAX_STRINGS);
    u32 padded_strings = (strings_len + 3u) & ~3u;
    u32 want = R.insn_count * IMG_INSN_LEN + R.dma_count * IMG_DMA_LEN + R.event_count * IMG_EVENT_LEN +
                    R.slot_count * IMG_SLOT_LEN + padded_strings;
    if (want != body_len)
        REFUSE("the header's counts make a %u-byte body, the image has %u bytes", want, body_len);
    if (R.insn_count == 0)
        REFUSE("no instructions (a program ends with END)");

    R.insns = body;
    R.dmas = R.insns + R.insn_count * IMG_INSN_LEN;
    R.events = R.dmas + R.dma_count * IMG_DMA_LEN;
    R.slots = R.events + R.event_count * IMG_EVENT_LEN;
    u32 strings = R.slots + R.slot_count * IMG_SLOT_LEN;

    for (u32 i = 0; i < R.event_count; i++) {
        u32 e = R.events + i * IMG_EVENT_LEN;
        u32 offset = w32(e), bits = w32(e + 4u);
        if ((bits & 0xFFu) > 31u || (bits >> 8) != 0)
            REFUSE("event %u: bit %u (0..=31) with padding 0x%06x (must be 0)", i, bits & 0xFFu, bits >> 8);
        const char *why = offset_problem(offset, 1);
        if (why)
            REFUSE("event %u: offset 0x%x: needs %s", i, offset, why);
    }
    for (u32 k = strings_len; k < padded_strings; k++)
        if (b8(strings + k) != 0)
            REFUSE("string table padding is not zero");
    u32 next_name = 0;
    for (u32 i = 0; i < R.slot_count; i++) {
        u32 s = R.slots + i * IMG_SLOT_LEN;
        u32 kind = b8(s), pad = b8(s + 1u), name_at = w32(s + 4u);
        if (name_at != next_name)
            REFUSE("result slot %u: name at string offset %u, expected %u (names are stored in slot order)", i,
                   name_at, next_name);
        if (kind < KIND_MARK || kind > KIND_EVENT)
            REFUSE("result slot %u: unknown kind %u", i, kind);
        if (pad != 0)
            REFUSE("result slot %u: padding byte is %u, not 0", i, pad);
        u32 end = name_at;
        while (end < strings_len && b8(strings + end) != 0)
            end++;
        if (end >= strings_len)
            REFUSE("result slot %u: name offset %u is not a string of the table", i, name_at);
        if (!utf8_ok(strings + name_at, end - name_at))
            REFUSE("result slot %u: name is not UTF-8", i);
        next_name = end + 1u;
    }
    if (next_name != strings_len)
        REFUSE("string table is %u bytes, the slot names take %u", strings_len, next_name);

    u32 loops[IMG_MAX_DEPTH];
    u32 open = 0, depth_seen = 0, last = R.insn_count - 1u;
    for (u32 i = 0; i < R.insn_count; i++) {
        u32 p = R.insns + i * IMG_INSN_LEN;
        u32 w0 = w32(p), a = w32(p + 4u);
        u32 op = w0 & 0xFFu, flags = (w0 >> 8) & 0xFFu, slot = w0 >> 16;
        int b_zero = (w32(p + 8u) | w32(p + 12u)) == 0, c_zero = (w32(p + 16u) | w32(p + 20u)) == 0;
        u32 st;
        const char *why;
        switch (op) {
        case OP_END:
            if (!(flags == 0 && slot == IMG_NO_SLOT && a == 0 && b_zero && c_zero))
                REFUSE("instruction %u (end): unused fields are not zero", i);
            if (i != last)
                REFUSE("instruction %u: END before the last instruction (%u)", i, last);
            break;
        case OP_DMA:
            if (!((flags & ~1u) == 0 && c_zero))
                REFUSE("instruction %u (dma): unused fields are not zero", i);
            if (a >= R.dma_count)
                REFUSE("instruction %u: DMA descriptor %u of %u", i, a, R.dma_count);
            if ((flags & 1u) && slot != IMG_NO_SLOT)
                REFUSE("instruction %u: a nowait DMA records no result", i);
            if ((st = check_slot(i, slot, KIND_DMA, 1)) != ST_OK)
                return st;
            break;
        case OP_POKE:
            if (!(slot == IMG_NO_SLOT && c_zero))
                REFUSE("instruction %u (poke): unused fields are not zero", i);
            if ((why = offset_problem(a, flags)) != 0)
                REFUSE("instruction %u (poke): offset 0x%x, %u words: needs %s", i, a, flags, why);
            if (flags == 1u && w32(p + 12u) != 0)
                REFUSE("instruction %u (poke): value 0x%llx does not fit one word", i,
                       (unsigned long long)w64(p + 8u));
            break;
        case OP_PEEK:
            if (!(b_zero && c_zero))
                REFUSE("instruction %u (peek): unused fields are not zero", i);
            if ((why = offset_problem(a, flags)) != 0)
                REFUSE("instruction %u (peek): offset 0x%x, %u words: needs %s", i, a, flags, why);
            if ((st = check_slot(i, slot, KIND_PEEK, 0)) != ST_OK)
                return st;
            break;
        case OP_WAIT:
            if (!(flags == 0 && slot == IMG_NO_SLOT && a == 0 && c_zero))
                REFUSE("instruction %u (wait): unused fields are not zero", i);
            break;
        case OP_WAIT_EVENT: {
            if (!(flags == 0 && c_zero))
                REFUSE("instruction %u (wait event): unused fields are not zero", i);
            u32 known = R.event_count >= 32u ? 0xFFFFFFFFu : (1u << R.event_count) - 1u;
            if (a == 0 || (a & ~known) != 0)
                REFUSE("instruction %u: event mask 0x%x names events outside the table of %u", i, a, R.event_count);
            if ((st = check_slot(i, slot, KIND_EVENT, 1)) != ST_OK)
                return st;
            break;
        }
        case OP_LOOP:
            if (!(flags == 0 && slot == IMG_NO_SLOT && b_zero && c_zero))
                REFUSE("instruction %u (loop): unused fields are not zero", i);
            if (a == 0)
                REFUSE("instruction %u: loop count 0", i);
            if (open >= IMG_MAX_DEPTH)
                REFUSE("instruction %u: loops nest deeper than %u", i, IMG_MAX_DEPTH);
            loops[open++] = i;
            if (open > depth_seen)
                depth_seen = open;
            break;
        case OP_END_LOOP:
            if (!(flags == 0 && slot == IMG_NO_SLOT && b_zero && c_zero))
                REFUSE("instruction %u (end loop): unused fields are not zero", i);
            if (open == 0)
                REFUSE("instruction %u: END_LOOP without a LOOP", i);
            open--;
            if (a != loops[open] + 1u)
                REFUSE("instruction %u: END_LOOP jumps to %u, its LOOP's body starts at %u", i, a, loops[open] + 1u);
            break;
        case OP_MARK:
            if (!(flags == 0 && a == 0 && b_zero && c_zero))
                REFUSE("instruction %u (mark): unused fields are not zero", i);
            if ((st = check_slot(i, slot, KIND_MARK, 0)) != ST_OK)
                return st;
            break;
        case OP_CHECK:
            if ((flags & 0x7Fu) > 5u)
                REFUSE("instruction %u: comparison code %u (0..=5)", i, flags & 0x7Fu);
            if (a >= R.slot_count || slot_kind(a) == KIND_CHECK)
                REFUSE("instruction %u: check source %u is not a value slot", i, a);
            if ((st = check_slot(i, slot, KIND_CHECK, 0)) != ST_OK)
                return st;
            break;
        default:
            REFUSE("instruction %u: unknown opcode 0x%02x", i, op);
        }
    }
    if (open != 0)
        REFUSE("instruction %u: LOOP without END_LOOP", loops[open - 1u]);
    if ((w32(R.insns + last * IMG_INSN_LEN) & 0xFFu) != OP_END)
        REFUSE("the last instruction is not END");
    if (depth_seen != R.depth)
        REFUSE("header says loops nest %u deep, the program nests %u", R.depth, depth_seen);

    /* This firmware's own limit: the value table (8 bytes a slot) lives in the script area
       after the image. */
    u32 values = (img + len + 7u) & ~7u;
    if (R.slot_count * 8u > SCRIPT_AREA_END - values)
        REFUSE("%u result slots need a %u-byte value table after the %u-byte image: only %u bytes are left "
               "below 0x%x (image + 8 bytes a slot must fit in the 16 KiB script area)",
               R.slot_count, R.slot_count * 8u, len, SCRIPT_AREA_END - values, SCRIPT_AREA_END);
    R.values = (u64 *)PTR(values);

    if (buf_bytes < R.buffer_len) {
        console_printf("script: refused (BUFFER_TOO_SMALL): the DMA runs need %u bytes of host buffer, the host gave %u\n",
                       R.buffer_len, buf_bytes);
        return ST_BUFFER_TOO_SMALL;
    }
    return ST_OK;
}

/* ---- result records ---- */

static inline int ring_full(void)
{
    return R.written - mbox_rd(MBOX_CONSUMED) >= R.ring_cap;
}

static void put_record(u32 slot, u32 kind, u32 status, u64 value, u64 aux, u64 now)
{
    u32 a = R.ring + (R.written % R.ring_cap) * RECORD_LEN;
    wr32(a, (slot & 0xFFFFu) | (kind & 0xFFu) << 16 | (status & 0xFFu) << 24);
    wr32(a + 4u, R.pc);
    wr64(a + 8u, now);
    wr64(a + 16u, value);
    wr64(a + 24u, aux);
    R.written++;
    mbox_wr(MBOX_RECORDS, R.written); /* after the record: the bus keeps the CPU's order */
}

/* Appends a record stamped `at` (or, if at is 0, when it is written), waiting while the ring
   is full; returns ST_STOPPED if the host asked to stop meanwhile (the record is then not
   written). */
static u32 emit_at(u32 slot, u32 kind, u32 status, u64 value, u64 aux, u64 at)
{
    while (ring_full())
        if (aborted())
            return ST_STOPPED;
    put_record(slot, kind, status, value, aux, at ? at : cycles());
    return ST_OK;
}

static u32 emit(u32 slot, u32 kind, u32 status, u64 value, u64 aux)
{
    return emit_at(slot, kind, status, value, aux, 0);
}

/* The end record: waits for room like any record, except when the host has asked to stop
   (then, with the ring full, it is dropped: the mailbox's status still says how it ended). */
static void emit_end(u32 status)
{
    if (!R.ring_ok)
        return;
    while (ring_full()) {
        if (aborted()) {
            console_printf("script: the ring is full and the host asked to stop: no end record (status %s)\n",
                           status_name(status));
            return;
        }
    }
    put_record(IMG_NO_SLOT, KIND_END, status, R.executed, 0, cycles());
}

/* ---- instructions ---- */

static void gen_stop_and_drain(void)
{
    wr32(TLPX_GENERATOR_CONTROL, BIT(TLPX_GENERATOR_CONTROL_STOP_SHIFT));
    u64 t0 = cycles(), drain = (u64)(R.clock_hz / 1000u) * DMA_DRAIN_MS;
    while (!(rd32(TLPX_GENERATOR_STATUS) & BIT(TLPX_GENERATOR_STATUS_DONE_SHIFT)))
        if (cycles() - t0 > drain)
            break;
}

static u32 op_dma(u32 desc, u32 flags, u32 slot, u64 limit)
{
    const u32 d = R.dmas + desc * IMG_DMA_LEN;
    /* as tlpx-device's generator::run: clear, the parameters in register order, start; the
       descriptor's layout is generated (TLPX_GENERATOR_DESC_*, as tlpx_script's image) */
    wr32(TLPX_GENERATOR_CONTROL, BIT(TLPX_GENERATOR_CONTROL_CLEAR_SHIFT));
    wr32(TLPX_GENERATOR_CONFIG, w32(d + TLPX_GENERATOR_DESC_CONFIG));
    wr32(TLPX_GENERATOR_TRANSFER_SIZE, w32(d + TLPX_GENERATOR_DESC_TRANSFER_SIZE));
    wr32(TLPX_GENERATOR_COUNT, w32(d + TLPX_GENERATOR_DESC_COUNT));
    wr32(TLPX_GENERATOR_COUNT + 4u, w32(d + TLPX_GENERATOR_DESC_COUNT + 4u));
    wr32(TLPX_GENERATOR_DURATION, w32(d + TLPX_GENERATOR_DESC_DURATION));
    wr32(TLPX_GENERATOR_DURATION + 4u, w32(d + TLPX_GENERATOR_DESC_DURATION + 4u));
    wr32(TLPX_GENERATOR_REQUEST_SIZE_LOG2, w32(d + TLPX_GENERATOR_DESC_REQUEST_SIZE_LOG2));
    wr32(TLPX_GENERATOR_PAYLOAD_SIZE_LOG2, w32(d + TLPX_GENERATOR_DESC_PAYLOAD_SIZE_LOG2));
    wr32(TLPX_GENERATOR_IDLE_CYCLES, w32(d + TLPX_GENERATOR_DESC_IDLE_CYCLES));
    wr32(TLPX_GENERATOR_MAX_OUTSTANDING, w32(d + TLPX_GENERATOR_DESC_MAX_OUTSTANDING));
    wr64(TLPX_GENERATOR_BASE, R.buf_bus + w32(d + TLPX_GENERATOR_DESC_BASE_OFFSET)); /* base_offset + the host buffer's bus address */
    wr32(TLPX_GENERATOR_WINDOW_MASK, w32(d + TLPX_GENERATOR_DESC_WINDOW_MASK));
    wr32(TLPX_GENERATOR_STRIDE_LOG2, w32(d + TLPX_GENERATOR_DESC_STRIDE_LOG2));
    wr32(TLPX_GENERATOR_OFFSET, w32(d + TLPX_GENERATOR_DESC_OFFSET));
    wr32(TLPX_GENERATOR_SEED, w32(d + TLPX_GENERATOR_DESC_SEED));
    wr32(TLPX_GENERATOR_TIMEOUT, w32(d + TLPX_GENERATOR_DESC_TIMEOUT));
    wr32(TLPX_GENERATOR_CONTROL, BIT(TLPX_GENERATOR_CONTROL_START_SHIFT));
    R.gen_started = 1;
    if (flags & 1u)
        return ST_OK; /* nowait: the script waits with `wait event generator.done` */

    u64 t0 = cycles();
    u32 st = ST_OK;
    while (!(rd32(TLPX_GENERATOR_STATUS) & BIT(TLPX_GENERATOR_STATUS_DONE_SHIFT))) {
        if (aborted()) {
            st = ST_STOPPED;
            break;
        }
        if (cycles() - t0 > limit) {
            st = ST_DMA_LIMIT;
            break;
        }
    }
    if (st != ST_OK) {
        gen_stop_and_drain();
        if (st == ST_DMA_LIMIT)
            console_printf("script: pc %u: the DMA run passed its limit of %llu cycles: generator stopped\n", R.pc,
                           (unsigned long long)limit);
        else
            return st;
    }
    if (slot != IMG_NO_SLOT) {
        u64 value = rd64(TLPX_GENERATOR_CYCLES);
        u64 aux = rd64(TLPX_GENERATOR_TRANSFERS);
        R.values[slot] = value;
        u32 e = emit(slot, KIND_DMA, st, value, aux);
        if (e != ST_OK)
            return e;
    }
    return st;
}

static u32 op_wait_event(u32 mask, u32 slot, u64 timeout)
{
    u64 t0 = cycles();
    for (;;) {
        u32 found = 0;
        for (u32 i = 0; i < R.event_count; i++) {
            if (!(mask & BIT(i)))
                continue;
            u32 e = R.events + i * IMG_EVENT_LEN;
            if ((rd32(w32(e)) >> (w32(e + 4u) & 31u)) & 1u)
                found |= BIT(i);
        }
        if (found) {
            if (slot == IMG_NO_SLOT)
                return ST_OK;
            R.values[slot] = found;
            return emit(slot, KIND_EVENT, ST_OK, found, 0);
        }
        if (aborted())
            return ST_STOPPED;
        if (cycles() - t0 > timeout) {
            console_printf("script: pc %u: no event of mask 0x%x within %llu cycles\n", R.pc, mask,
                           (unsigned long long)timeout);
            if (slot != IMG_NO_SLOT) {
                R.values[slot] = 0;
                u32 e = emit(slot, KIND_EVENT, ST_EVENT_TIMEOUT, 0, 0);
                if (e != ST_OK)
                    return e;
            }
            return ST_EVENT_TIMEOUT;
        }
    }
}

static int compare(u32 cmp, u64 left, u64 right)
{
    switch (cmp) {
    case 0: return left == right;
    case 1: return left != right;
    case 2: return left < right;
    case 3: return left <= right;
    case 4: return left > right;
    default: return left >= right;
    }
}

/* Runs the checked program; returns the end record's status. */
static u32 execute(void)
{
    u32 counters[IMG_MAX_DEPTH];
    u32 depth = 0;
    u32 compare_failed = 0;

    for (u32 s = 0; s < R.slot_count; s++)
        R.values[s] = 0;
    R.pc = 0;
    for (;;) {
        if (aborted())
            return ST_STOPPED;
        u32 p = R.insns + R.pc * IMG_INSN_LEN;
        u32 w0 = w32(p), a = w32(p + 4u);
        u32 op = w0 & 0xFFu, flags = (w0 >> 8) & 0xFFu, slot = w0 >> 16;
        u64 b = w64(p + 8u);
        u32 next = R.pc + 1u, st = ST_OK;
        R.executed++;
        mbox_wr(MBOX_PC, R.pc);
        mbox_wr(MBOX_INSNS, (u32)R.executed);
        switch (op) {
        case OP_END:
            return compare_failed ? ST_COMPARE_FAILED : ST_OK;
        case OP_DMA:
            st = op_dma(a, flags, slot, b);
            break;
        case OP_POKE:
            if (flags == 2u)
                wr64(a, b);
            else
                wr32(a, (u32)b);
            break;
        case OP_PEEK: {
            u64 v = flags == 2u ? rd64(a) : rd32(a);
            R.values[slot] = v;
            st = emit(slot, KIND_PEEK, ST_OK, v, 0);
            break;
        }
        case OP_WAIT: {
            u64 t0 = cycles();
            while (cycles() - t0 < b) {
                if (aborted()) {
                    st = ST_STOPPED;
                    break;
                }
            }
            break;
        }
        case OP_WAIT_EVENT:
            st = op_wait_event(a, slot, b);
            break;
        case OP_LOOP:
            counters[depth++] = a;
            break;
        case OP_END_LOOP:
            if (--counters[depth - 1u] != 0)
                next = a;
            else
                depth--;
            break;
        case OP_MARK: {
            /* the slot's value is the timestamp, also the record's cycle; the record's value is 0 */
            u64 now = cycles();
            R.values[slot] = now;
            st = emit_at(slot, KIND_MARK, ST_OK, 0, 0, now);
            break;
        }
        case OP_CHECK: {
            u64 left = R.values[a] & w64(p + 16u);
            int holds = compare(flags & 7u, left, b);
            u32 rs = holds ? ST_OK : (flags & 0x80u) ? ST_ASSERT_FAILED : ST_COMPARE_FAILED;
            R.values[slot] = (u64)holds;
            st = emit(slot, KIND_CHECK, rs, (u64)holds, left);
            if (st == ST_OK && !holds) {
                if (flags & 0x80u) {
                    console_printf("script: pc %u: assert failed (value %llu)\n", R.pc, (unsigned long long)left);
                    st = ST_ASSERT_FAILED;
                } else {
                    compare_failed = 1;
                }
            }
            break;
        }
        default: /* refused by validate() */
            return ST_BAD_IMAGE;
        }
        if (st != ST_OK)
            return st;
        R.pc = next;
    }
}

static u32 finish(u32 status)
{
    if (status == ST_STOPPED && R.gen_started)
        gen_stop_and_drain();
    emit_end(status);
    R.active = 0;
    return status;
}

u32 script_run_command(void)
{
    R = (struct run){0};
    R.active = 1;
    R.clock_hz = rd32(TLPX_IDENT_CLOCK_HZ);
    if (R.clock_hz == 0)
        R.clock_hz = 125000000u;
    R.img = mbox_rd(MBOX_ARG(MBOX_ARG_IMAGE_ADDR));
    R.len = mbox_rd(MBOX_ARG(MBOX_ARG_IMAGE_LEN));
    R.buf_bus = (u64)mbox_rd(MBOX_ARG(MBOX_ARG_BUF_HI)) << 32 | mbox_rd(MBOX_ARG(MBOX_ARG_BUF_LO));
    u32 buf_bytes = mbox_rd(MBOX_ARG(MBOX_ARG_BUF_BYTES));
    R.ring = mbox_rd(MBOX_ARG(MBOX_ARG_RING_ADDR));
    R.ring_cap = mbox_rd(MBOX_ARG(MBOX_ARG_RING_RECORDS));

    /* The ring: 32-byte aligned records in the SRAM's data area (0x48000..0x50000), not over
       the image nor the space after it (the value table). Without a ring no record at all. */
    int img_ok = R.img % 4u == 0 && R.img >= SCRIPT_AREA && R.img < SCRIPT_AREA_END && R.len <= SCRIPT_AREA_END - R.img;
    u32 img_lo = img_ok ? R.img : SCRIPT_AREA;
    if (R.ring % RECORD_LEN != 0 || R.ring < SCRIPT_AREA || R.ring >= SRAM_END || R.ring_cap == 0 ||
        R.ring_cap > (SRAM_END - R.ring) / RECORD_LEN ||
        (R.ring < SCRIPT_AREA_END && R.ring + R.ring_cap * RECORD_LEN > img_lo)) {
        console_printf("script: refused (BAD_IMAGE): result ring 0x%x of %u records: needs 32-byte aligned records "
                       "in 0x%x..0x%x, not over the image and its value table (0x%x..0x%x); no record written\n",
                       R.ring, R.ring_cap, SCRIPT_AREA, SRAM_END, img_lo, SCRIPT_AREA_END);
        R.active = 0;
        return ST_BAD_IMAGE;
    }
    R.ring_ok = 1;
    if (!img_ok) {
        console_printf("script: refused (BAD_IMAGE): image at 0x%x of %u bytes: needs a 4-aligned image inside "
                       "the script area 0x%x..0x%x\n",
                       R.img, R.len, SCRIPT_AREA, SCRIPT_AREA_END);
        return finish(ST_BAD_IMAGE);
    }
    u32 st = validate(buf_bytes);
    if (st != ST_OK)
        return finish(st);
#ifdef FW_HOSTTEST
    extern int hosttest_validate_only; /* tests/hosttest.c: the decoder's checks only */
    if (hosttest_validate_only)
        return finish(ST_OK);
#endif

    console_printf("script: start: image 0x%x (%u bytes), %u instructions, %u dma, %u events, %u slots; "
                   "host buffer 0x%llx (%u bytes); ring 0x%x x %u\n",
                   R.img, R.len, R.insn_count, R.dma_count, R.event_count, R.slot_count,
                   (unsigned long long)R.buf_bus, buf_bytes, R.ring, R.ring_cap);
    u64 t0 = cycles();
    st = execute();
    u64 took = cycles() - t0;
    finish(st);
    console_printf("script: end: %s, %llu instructions, %llu cycles, %u records\n", status_name(st),
                   (unsigned long long)R.executed, (unsigned long long)took, R.written);
    return st;
}

void script_trap_cleanup(void)
{
    if (!R.active)
        return;
    R.active = 0;
    if (R.gen_started)
        wr32(TLPX_GENERATOR_CONTROL, BIT(TLPX_GENERATOR_CONTROL_STOP_SHIFT));
    if (R.ring_ok && !ring_full())
        put_record(IMG_NO_SLOT, KIND_END, ST_STOPPED, R.executed, 0, cycles());
}
