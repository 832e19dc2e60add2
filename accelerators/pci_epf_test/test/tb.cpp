// Testbench of a slot accelerator alone (interface v1): a Wishbone master for its register
// window and a host-memory model behind its DMA port, as the slot's DMA mover presents it
// (gateware/tlpx_gateware/cores/slot/dma.py): one read and one write request at a time, exactly
// ceil(len/4) DWs per request, rd_error on the last DW, wr_done after the last DW. Valid/ready
// on the model's side are random (probability `p`), so the module sees back-pressure.
//
// A script on stdin, one command per line (numbers in C syntax: 0x.. or decimal):
//   load ADDR FILE        host memory at ADDR <- the bytes of FILE
//   dump ADDR LEN FILE    host memory [ADDR, ADDR+LEN) -> FILE
//   fill ADDR LEN BYTE    host memory [ADDR, ADDR+LEN) <- BYTE
//   w OFF VALUE           register write (byte offset in the window, all byte lanes)
//   r OFF                 register read: prints "r OFF VALUE"
//   run MAXCYCLES         clock until `busy` is low: prints "run CYCLES IRQS" (IRQS: pulses)
//   rderror 0|1           answer every read request with rd_error on its last DW
//   p PERCENT             valid/ready probability of the model, 1..100
// Protocol violations of the module (an unaligned address, a length of 0 or >= 2^24) print
// "ERROR ..." and exit 1; so does a run that does not end within MAXCYCLES.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "verilated.h"
#include "Vtop.h"  // verilator --prefix Vtop

static Vtop *top;
static uint64_t cycle_count;
static unsigned irqs;
static unsigned last_vector;  // irq_vector of the last irq pulse
static unsigned prob = 70;
static bool rd_error_mode;
static uint32_t rng = 12345;

static bool coin() {
    rng = rng * 1103515245u + 12345u;
    return ((rng >> 16) % 100) < prob;
}

// Host memory: 4 KiB pages, created on first touch (zero).
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

// DMA port state.
struct Req { bool active = false; uint64_t addr = 0; uint32_t len = 0, dws = 0, done = 0; };
static Req rd, wr;
static int wr_done_in = -1;  // cycles until wr_done

static void check_req(const char *what, uint64_t addr, uint32_t len) {
    if (addr & 3) fail(std::string(what) + " request at an unaligned address");
    if (len == 0) fail(std::string(what) + " request of length 0");
}

static uint32_t word_at(uint64_t a) {
    return mem(a) | mem(a + 1) << 8 | mem(a + 2) << 16 | (uint32_t)mem(a + 3) << 24;
}

// One clock cycle: drive the model's inputs, settle, sample handshakes, clock.
static void tick() {
    top->rd_req_ready = !rd.active && coin();
    top->rd_valid = rd.active && coin();
    top->rd_data = rd.active ? word_at(rd.addr + 4ull * rd.done) : 0;
    top->rd_last = rd.active && rd.done + 1 == rd.dws;
    top->rd_error = top->rd_last && rd_error_mode;
    top->wr_req_ready = !wr.active && wr_done_in < 0 && coin();
    top->wr_ready = wr.active && coin();
    top->wr_done = wr_done_in == 0;
    top->wr_error = 0;
    top->eval();
    bool rd_req_hs = top->rd_req_valid && top->rd_req_ready;
    bool rd_hs = top->rd_valid && top->rd_ready;
    bool wr_req_hs = top->wr_req_valid && top->wr_req_ready;
    bool wr_hs = top->wr_valid && top->wr_ready;
    uint32_t wdata = top->wr_data;
    uint64_t rq_addr = top->rd_req_addr, wq_addr = top->wr_req_addr;
    uint32_t rq_len = top->rd_req_len, wq_len = top->wr_req_len;
    top->clk = 1;
    top->eval();
    top->clk = 0;
    top->eval();
    cycle_count++;
    if (top->irq) {
        irqs++;
        last_vector = top->irq_vector;
    }
    if (wr_done_in >= 0) wr_done_in--;
    if (rd_hs) {
        if (++rd.done == rd.dws) rd.active = false;
    }
    if (rd_req_hs) {
        check_req("read", rq_addr, rq_len);
        rd = Req{true, rq_addr, rq_len, (rq_len + 3) / 4, 0};
    }
    if (wr_hs) {
        uint64_t a = wr.addr + 4ull * wr.done;
        for (unsigned b = 0; b < 4; b++)
            if (4ull * wr.done + b < wr.len) mem(a + b) = wdata >> (8 * b);
        if (++wr.done == wr.dws) { wr.active = false; wr_done_in = 3; }
    }
    if (wr_req_hs) {
        check_req("write", wq_addr, wq_len);
        wr = Req{true, wq_addr, wq_len, (wq_len + 3) / 4, 0};
    }
}

static uint32_t wb(bool we, uint32_t off, uint32_t value) {
    top->wb_adr = off; top->wb_dat_w = value; top->wb_sel = 0xf; top->wb_we = we;
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
    // What the card hands the module: one MSI vector granted, MSI-X off (a stock driver's
    // start); `vectors N X` changes both.
    top->msi_vectors = 1;
    top->msix_enabled = 0;
    top->rst = 1;
    for (int i = 0; i < 4; i++) tick();
    top->rst = 0;
    tick();
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        if (!(in >> cmd) || cmd[0] == '#') continue;
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
            tick();  // the command is taken a cycle after its write
            while (top->busy || rd.active || wr.active || wr_done_in >= 0) {
                if (cycle_count - start > max) fail("the command did not end");
                tick();
            }
            std::printf("run %llu %u %u\n", (unsigned long long)(cycle_count - start), irqs - irq0, last_vector);
        } else if (cmd == "vectors") {
            uint64_t n = num(), x = num();
            if (n < 1 || n > 32) fail("vectors must be 1..32");
            top->msi_vectors = n;
            top->msix_enabled = x != 0;
        } else if (cmd == "rderror") {
            rd_error_mode = num() != 0;
        } else if (cmd == "p") {
            prob = num();
            if (prob < 1 || prob > 100) fail("p must be 1..100");
        } else {
            fail("unknown command " + cmd);
        }
        std::fflush(stdout);
    }
    top->final();
    delete top;
    return 0;
}
