// Testbench of a Verilog slot user as the card sees it (test_verilog_user.py): the user's module
// with the slot's DMA mover (cores/slot/verilog.py's VerilogSlotUser, written by Migen as
// `slot_top`), a LiteX Wishbone master on its window (adr in DWs), and a host at TLP level:
// MRds answered with CplDs (after a latency, split at 64-byte RCB boundaries, or with UR),
// MWrs written through their byte enables. Every TLP is checked against the mover's promises
// (MRd within its size and 4 KiB, MWr <= 128 bytes within a 128-byte boundary, slot tags).
// Random ready on the TLP stream. TLPX_DW is the datapath width (64, 128, 256).
//
// Script on stdin (as accelerators/pci_epf_test/test/tb.cpp's): load ADDR FILE, dump ADDR LEN
// FILE, fill ADDR LEN BYTE, w OFF VALUE, r OFF (byte offsets in the window), run MAXCYCLES
// ("run CYCLES IRQS"), cplerr 0|1 (answer MRds with UR), counters ("counters R W RB WB E").
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "verilated.h"
#include "Vtop.h"

static constexpr int LANES = TLPX_DW / 32;
static constexpr unsigned TAG_BASE = SLOT_TAG_BASE, TAGS = SLOT_TAGS;
static Vtop *top;
static uint64_t cycle_count;
static unsigned irqs;
static bool cpl_error_mode;
static uint32_t rng = 777;
static bool coin(unsigned pct) { rng = rng * 1103515245u + 12345u; return ((rng >> 16) % 100) < pct; }

static uint32_t dw_of(QData v, int i) { return (uint32_t)(v >> (32 * i)); }
template <std::size_t N> static uint32_t dw_of(const VlWide<N> &v, int i) { return v[i]; }
static void set_dw(QData &v, int i, uint32_t x) {
    v = (v & ~(0xffffffffull << (32 * i))) | ((QData)x << (32 * i));
}
template <std::size_t N> static void set_dw(VlWide<N> &v, int i, uint32_t x) { v[i] = x; }

static std::unordered_map<uint64_t, std::vector<uint8_t>> pages;
static uint8_t &mem(uint64_t a) {
    auto &p = pages[a >> 12];
    if (p.empty()) p.assign(4096, 0);
    return p[a & 4095];
}
[[noreturn]] static void fail(const std::string &msg) {
    std::printf("ERROR %s (cycle %llu)\n", msg.c_str(), (unsigned long long)cycle_count);
    std::exit(1);
}

struct Pending { uint64_t due; std::vector<uint32_t> dws; };
static std::deque<Pending> pending;   // completions to send
static std::vector<uint32_t> rx;      // DWs of the TLP being received
static std::vector<uint32_t> cur;     // completion being sent
static size_t cur_pos;

static void handle(const std::vector<uint32_t> &d) {
    uint32_t h0 = d[0], h1 = d[1];
    unsigned fmt = h0 >> 29, type = (h0 >> 24) & 31, len = (h0 & 0x3ff) ? (h0 & 0x3ff) : 1024;
    if (type != 0) fail("not a memory request");
    bool four = fmt & 1;
    uint64_t addr = four ? ((uint64_t)d[2] << 32 | d[3]) : d[2];
    unsigned hdr = four ? 4 : 3, fbe = h1 & 15, lbe = (h1 >> 4) & 15, tag = (h1 >> 8) & 255;
    if (four != (addr >> 32 != 0)) fail("4-DW header below 4 GiB or 3-DW above");
    if (len == 1 ? lbe != 0 : (fbe != 15 || lbe == 0)) fail("byte enables");
    if (fmt & 2) {  // MWr
        if (d.size() != hdr + len) fail("MWr payload length");
        if (len > 32 || addr / 128 != (addr + 4 * len - 1) / 128) fail("MWr crosses 128 bytes");
        for (unsigned i = 0; i < len; i++) {
            unsigned be = i == 0 ? fbe : (i == len - 1 ? lbe : 15);
            for (unsigned b = 0; b < 4; b++)
                if (be >> b & 1) mem(addr + 4 * i + b) = d[hdr + i] >> (8 * b);
        }
        return;
    }
    if (d.size() != hdr) fail("MRd with payload");
    if (tag < TAG_BASE || tag >= TAG_BASE + TAGS) fail("MRd tag outside the slot's");
    if (addr / 4096 != (addr + 4 * len - 1) / 4096) fail("MRd crosses 4 KiB");
    uint64_t due = cycle_count + 30;
    if (cpl_error_mode) {  // UR, no data
        pending.push_back({due, {0x0a000000u, (1u << 13) | 4u, tag << 8}});
        return;
    }
    unsigned pos = 0, left = len * 4;
    while (pos < len) {
        unsigned step = std::min<unsigned>(len - pos, (64 - (addr + 4 * pos) % 64) / 4);
        std::vector<uint32_t> c = {0x4a000000u | step, left & 0xfff, tag << 8 | ((addr + 4 * pos) & 0x7f)};
        for (unsigned i = 0; i < step; i++) {
            uint64_t a = addr + 4 * (pos + i);
            c.push_back(mem(a) | mem(a + 1) << 8 | mem(a + 2) << 16 | (uint32_t)mem(a + 3) << 24);
        }
        pending.push_back({due, c});
        pos += step;
        left -= 4 * step;
    }
}

static void tick() {
    // completions: next beat of the current one
    if (cur_pos >= cur.size() && !pending.empty() && pending.front().due <= cycle_count) {
        cur = pending.front().dws;
        pending.pop_front();
        cur_pos = 0;
    }
    bool sending = cur_pos < cur.size();
    top->cpl_valid = sending;
    top->cpl_first = sending && cur_pos == 0;
    top->cpl_last = sending && cur_pos + LANES >= cur.size();
    uint64_t be = 0;
    for (int i = 0; i < LANES; i++) {
        bool used = sending && cur_pos + i < cur.size();
        set_dw(top->cpl_dat, i, used ? cur[cur_pos + i] : 0);
        if (used) be |= 0xfull << (4 * i);
    }
    top->cpl_be = be;
    top->tx_ready = coin(80);
    top->eval();
    bool tx_hs = top->tx_valid && top->tx_ready;
    bool cpl_hs = top->cpl_valid && top->cpl_ready;
    if (tx_hs) {
        if (top->tx_first && !rx.empty()) fail("a TLP started before the previous one ended");
        for (int i = 0; i < LANES; i++)
            if ((uint64_t)top->tx_be >> (4 * i) & 1) rx.push_back(dw_of(top->tx_dat, i));
        if (top->tx_last) { handle(rx); rx.clear(); }
    }
    top->sys_clk = 1;
    top->eval();
    top->sys_clk = 0;
    top->eval();
    cycle_count++;
    if (cpl_hs) cur_pos += LANES;
    if (top->irq) irqs++;
}

static uint32_t wb(bool we, uint32_t off, uint32_t value) {
    top->wb_adr = off >> 2; top->wb_dat_w = value; top->wb_sel = 0xf; top->wb_we = we;
    top->wb_cyc = 1; top->wb_stb = 1;
    for (int i = 0; !top->wb_ack; i++) {
        if (i > 16) fail("no wishbone ack");
        tick();
    }
    uint32_t r = top->wb_dat_r;
    top->wb_cyc = 0; top->wb_stb = 0; top->wb_we = 0;
    tick();
    return r;
}

int main(int argc, char **argv) {
    Verilated::commandArgs(argc, argv);
    top = new Vtop;
    top->sys_rst = 1;
    for (int i = 0; i < 4; i++) tick();
    top->sys_rst = 0;
    tick();
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        if (!(in >> cmd)) continue;
        auto num = [&]() { std::string s; in >> s; return std::strtoull(s.c_str(), nullptr, 0); };
        if (cmd == "load") {
            uint64_t a = num(); std::string path; in >> path;
            std::ifstream f(path, std::ios::binary);
            std::vector<char> buf((std::istreambuf_iterator<char>(f)), {});
            for (size_t i = 0; i < buf.size(); i++) mem(a + i) = buf[i];
        } else if (cmd == "dump") {
            uint64_t a = num(), n = num(); std::string path; in >> path;
            std::ofstream f(path, std::ios::binary);
            for (uint64_t i = 0; i < n; i++) f.put((char)mem(a + i));
        } else if (cmd == "fill") {
            uint64_t a = num(), n = num(), v = num();
            for (uint64_t i = 0; i < n; i++) mem(a + i) = v;
        } else if (cmd == "w") {
            uint32_t off = num(), v = num();
            wb(true, off, v);
        } else if (cmd == "r") {
            uint32_t off = num();
            std::printf("r 0x%x 0x%08x\n", off, wb(false, off, 0));
        } else if (cmd == "run") {
            uint64_t max = num(), start = cycle_count;
            unsigned irq0 = irqs;
            tick();
            while (top->busy || !pending.empty() || cur_pos < cur.size()) {
                if (cycle_count - start > max) fail("the command did not end");
                tick();
            }
            std::printf("run %llu %u\n", (unsigned long long)(cycle_count - start), irqs - irq0);
        } else if (cmd == "cplerr") {
            cpl_error_mode = num() != 0;
        } else if (cmd == "counters") {
            std::printf("counters %u %u %u %u %u\n", top->dma_reads, top->dma_writes, top->dma_read_bytes,
                        top->dma_write_bytes, top->dma_errors);
        } else {
            fail("unknown command " + cmd);
        }
        std::fflush(stdout);
    }
    top->final();
    delete top;
    return 0;
}
