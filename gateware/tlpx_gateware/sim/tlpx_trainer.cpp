// tlpx_trainer: drives a card library (libtlpxcard.so) through the C ABI of tlpx_card.h with a
// representative, deterministic workload, without tlpx-sim or the host tools:
//
//   idle cycles, MMIO reads and writes of the register map (3DW MRd/MWr from a root complex),
//   LitePCIe's DMA loopback (the card's reads answered from a modelled host memory, its writes
//   taken), and, on a card that has it, the traffic generator (reads and writes), then idle again.
//
// Uses:
//   - the training run of the profile-guided build (tlpx_gateware.build): the profile is made
//     from the simulated card itself, with the mix the simulator spends its time on (mostly idle
//     cycles, then MMIO and DMA);
//   - exactness checks of the harness: with --compare LIB2 the same stimulus drives two card
//     libraries side by side and every output of every cycle must be equal (exit 2 otherwise).
//
// Usage: tlpx_trainer LIB [--compare LIB2] [--scale N] [--quiet] region.register=OFFSET ...
//        tlpx_trainer LIB --idle N      only N idle cycles after the reset, timed (for callgrind:
//                                       instructions per idle card cycle, scripts/bench_sim.sh)
// The register offsets come from the card's csr.json (tlpx_gateware.build passes them); a card
// without a generator has no generator.* offsets and skips that phase. Exit 0 when the workload
// did what it should (the DMA loopback completed, the magic read back, ...), 1 otherwise.

#include <dlfcn.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "tlpx_card.h"

namespace {

struct Lib {
    void *handle = nullptr;
    uint32_t (*abi_version)(void);
    uint32_t (*data_width)(void);
    const char *(*build_info)(void);
    void *(*card_new)(void);
    void (*card_free)(void *);
    void (*card_reset)(void *, uint32_t);
    void (*card_cycle)(void *, const tlpx_card_inputs *, tlpx_card_outputs *);
    uint64_t (*card_cycles)(void *);
    void *card = nullptr;
};

template <typename F>
void sym(Lib &l, F &f, const char *name, const char *path) {
    f = reinterpret_cast<F>(dlsym(l.handle, name));
    if (!f) {
        std::fprintf(stderr, "tlpx_trainer: %s has no %s\n", path, name);
        std::exit(1);
    }
}

Lib open_lib(const char *path) {
    Lib l;
    l.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
        std::fprintf(stderr, "tlpx_trainer: cannot load %s: %s\n", path, dlerror());
        std::exit(1);
    }
    sym(l, l.abi_version, "tlpx_card_abi_version", path);
    sym(l, l.data_width, "tlpx_card_data_width", path);
    sym(l, l.build_info, "tlpx_card_build_info", path);
    sym(l, l.card_new, "tlpx_card_new", path);
    sym(l, l.card_free, "tlpx_card_free", path);
    sym(l, l.card_reset, "tlpx_card_reset", path);
    sym(l, l.card_cycle, "tlpx_card_cycle", path);
    sym(l, l.card_cycles, "tlpx_card_cycles", path);
    if (l.abi_version() != TLPX_CARD_ABI_VERSION) {
        std::fprintf(stderr, "tlpx_trainer: %s has ABI %u, not %u\n", path, l.abi_version(), TLPX_CARD_ABI_VERSION);
        std::exit(1);
    }
    return l;
}

constexpr uint32_t kBar0 = 0xF0000000u;       // BAR0's bus address (as tlpx-sim's)
constexpr uint16_t kRcId = 0x0000;            // root complex requester ID
constexpr uint16_t kCardId = 0x0100;          // the card: bus 1, device 0, function 0
constexpr uint32_t kHostLatency = 60;         // card cycles from a card's read to its first completion
constexpr uint32_t kDmaSrc = 0x40000000u;     // host buffers of the DMA loopback
constexpr uint32_t kDmaDst = 0x40400000u;
constexpr uint32_t kGenBase = 0x40800000u;    // the generator's window

struct Tlp {
    std::vector<uint32_t> dw;
};

// A root complex and host memory in front of one or two cards, one card cycle per step().
class Host {
public:
    Host(std::vector<Lib> &libs, bool quiet) : libs_(libs), quiet_(quiet) {
        dwords_ = static_cast<int>(libs_[0].data_width() / 32);
        std::memset(&in_, 0, sizeof in_);
        in_.cfg_bus_master_enable = 1;
        in_.cfg_msi_enable = 1;
        in_.cfg_requester_id = kCardId;
        in_.cfg_max_payload_size = 256;
        in_.cfg_max_request_size = 512;
        for (auto &l : libs_) {
            l.card = l.card_new();
            l.card_reset(l.card, 16);
        }
    }
    ~Host() {
        for (auto &l : libs_) l.card_free(l.card);
    }

    // One card cycle: the next RX beat (if any) offered, TX always accepted except one cycle
    // in eight (back-pressure), MSIs accepted.
    void step() {
        uint64_t now = cycle_;
        // Completions whose host latency has passed join the RX queue.
        while (!pending_.empty() && pending_.front().first <= now) {
            rx_.push_back(std::move(pending_.front().second));
            pending_.pop_front();
        }
        in_.rx_valid = 0;
        in_.rx_first = in_.rx_last = 0;
        in_.rx_be = 0;
        std::memset(in_.rx_dat, 0, sizeof in_.rx_dat);
        if (!rx_.empty()) {
            const auto &t = rx_.front().dw;
            size_t n = t.size() - rx_pos_;
            size_t take = n < static_cast<size_t>(dwords_) ? n : static_cast<size_t>(dwords_);
            for (size_t i = 0; i < take; i++) {
                in_.rx_dat[i] = t[rx_pos_ + i];
                in_.rx_be |= 0xFu << (4 * i);
            }
            in_.rx_valid = 1;
            in_.rx_first = rx_pos_ == 0;
            in_.rx_last = rx_pos_ + take == t.size();
        }
        in_.tx_ready = (now & 7) != 7;
        in_.msi_ready = 1;
        tlpx_card_outputs out;
        for (size_t i = 0; i < libs_.size(); i++) {
            tlpx_card_outputs &o = i == 0 ? out : other_;
            std::memset(&o, 0, sizeof o);
            libs_[i].card_cycle(libs_[i].card, &in_, &o);
        }
        if (libs_.size() > 1) compare(out);
        cycle_++;
        if (in_.rx_valid && out.rx_ready) {
            size_t take = rx_.front().dw.size() - rx_pos_;
            rx_pos_ += take < static_cast<size_t>(dwords_) ? take : static_cast<size_t>(dwords_);
            if (rx_pos_ == rx_.front().dw.size()) {
                rx_.pop_front();
                rx_pos_ = 0;
            }
        }
        if (out.msi_valid && in_.msi_ready) msis_++;
        if (out.tx_valid && in_.tx_ready) {
            if (out.tx_first) tx_.clear();
            for (int i = 0; i < dwords_; i++)
                if ((out.tx_be >> (4 * i)) & 0xF) tx_.push_back(out.tx_dat[i]);
            if (out.tx_last) take_tlp(tx_);
        }
    }

    void idle(uint64_t n) {
        for (uint64_t i = 0; i < n; i++) step();
    }

    void write32(uint32_t offset, uint32_t value) {
        Tlp t;
        t.dw = {0x40000001u, (uint32_t(kRcId) << 16) | 0x0F, kBar0 + offset, value};
        send(std::move(t));
        // The next request goes out when this one has left, as a CPU's posted writes do.
        while (!rx_.empty()) step();
    }

    void write64(uint32_t offset, uint64_t value) {
        write32(offset, static_cast<uint32_t>(value));
        write32(offset + 4, static_cast<uint32_t>(value >> 32));
    }

    uint32_t read32(uint32_t offset) {
        uint8_t tag = next_tag_;
        next_tag_ = static_cast<uint8_t>((next_tag_ + 1) & 31);
        Tlp t;
        t.dw = {0x00000001u, (uint32_t(kRcId) << 16) | (uint32_t(tag) << 8) | 0x0F, kBar0 + offset};
        send(std::move(t));
        read_done_ = false;
        for (uint64_t i = 0; i < 100000 && !read_done_; i++) step();
        if (!read_done_) {
            std::fprintf(stderr, "tlpx_trainer: no completion for the read of 0x%x\n", offset);
            failures_++;
            return 0xFFFFFFFFu;
        }
        mmio_reads_++;
        return read_value_;
    }

    uint64_t cycle() const { return cycle_; }
    uint64_t msis() const { return msis_; }
    uint64_t card_read_bytes() const { return card_read_bytes_; }
    uint64_t card_write_bytes() const { return card_write_bytes_; }
    uint64_t mmio_reads() const { return mmio_reads_; }
    int failures() const { return failures_; }
    void fail() { failures_++; }
    bool mismatch() const { return mismatch_; }

private:
    void send(Tlp t) { rx_.push_back(std::move(t)); }

    void compare(const tlpx_card_outputs &a) {
        const tlpx_card_outputs &b = other_;
        bool same = a.tx_be == b.tx_be && a.tx_valid == b.tx_valid && a.tx_first == b.tx_first &&
                    a.tx_last == b.tx_last && a.rx_ready == b.rx_ready && a.msi_valid == b.msi_valid &&
                    a.msi_vector == b.msi_vector && std::memcmp(a.tx_dat, b.tx_dat, sizeof a.tx_dat) == 0 &&
                    libs_[0].card_cycles(libs_[0].card) == libs_[1].card_cycles(libs_[1].card);
        if (!same && !mismatch_) {
            mismatch_ = true;
            std::fprintf(stderr,
                         "tlpx_trainer: the two cards differ at cycle %" PRIu64
                         ": tx_valid %u/%u tx_first %u/%u tx_last %u/%u tx_be %x/%x tx_dat[0] %08x/%08x "
                         "rx_ready %u/%u msi_valid %u/%u\n",
                         cycle_, a.tx_valid, b.tx_valid, a.tx_first, b.tx_first, a.tx_last, b.tx_last, a.tx_be,
                         b.tx_be, a.tx_dat[0], b.tx_dat[0], a.rx_ready, b.rx_ready, a.msi_valid, b.msi_valid);
        }
        if (!same) mismatches_++;
    }

    // A TLP from the card: the completion of our MMIO read, a DMA read of host memory (answered
    // after kHostLatency cycles, cut at 64-byte RCB boundaries into completions of up to 256
    // bytes) or a DMA write (taken).
    void take_tlp(const std::vector<uint32_t> &t) {
        if (t.empty()) return;
        uint32_t dw0 = t[0];
        uint32_t fmt = dw0 >> 29, type = (dw0 >> 24) & 0x1F;
        uint32_t len = dw0 & 0x3FF;
        if (len == 0) len = 1024;
        if (type == 0x0A && t.size() >= 3) {  // Cpl / CplD
            if (fmt == 2 && t.size() >= 4) read_value_ = t[3];
            else read_value_ = 0xFFFFFFFFu;
            read_done_ = true;
            return;
        }
        if (type != 0 || t.size() < 3) return;
        bool four = fmt & 1;
        uint64_t addr = four ? (uint64_t(t[2]) << 32 | (t[3] & ~3u)) : (t[2] & ~3u);
        if (fmt & 2) {  // MWr
            card_write_bytes_ += 4ull * len;
            return;
        }
        // MRd: completions for len DWs (first/last BE taken as whole DWs, as the card's
        // requesters read whole DWs).
        uint32_t rid_tag = t[1] >> 8;  // requester id [31:16] and tag [15:8] of DW1
        uint16_t rid = static_cast<uint16_t>(rid_tag >> 8);
        uint8_t tag = static_cast<uint8_t>(rid_tag & 0xFF);
        uint32_t bytes = 4 * len;
        card_read_bytes_ += bytes;
        uint64_t a = addr;
        uint32_t left = bytes;
        uint64_t when = cycle_ + kHostLatency;
        if (!pending_.empty() && pending_.back().first > when) when = pending_.back().first;
        while (left) {
            uint32_t to_rcb = 64 - static_cast<uint32_t>(a & 63);
            uint32_t chunk = left < 256 ? left : 256;
            if (a & 63) chunk = chunk < to_rcb ? chunk : to_rcb;
            Tlp c;
            uint32_t n = chunk / 4;
            c.dw.push_back(0x4A000000u | (n & 0x3FF));
            c.dw.push_back((uint32_t(kRcId) << 16) | (left & 0xFFF));
            c.dw.push_back((uint32_t(rid) << 16) | (uint32_t(tag) << 8) | static_cast<uint32_t>(a & 0x7F));
            for (uint32_t i = 0; i < n; i++) c.dw.push_back(static_cast<uint32_t>((a >> 2) + i));  // counter data
            pending_.emplace_back(when, std::move(c));
            a += chunk;
            left -= chunk;
        }
    }

    std::vector<Lib> &libs_;
    bool quiet_;
    int dwords_;
    tlpx_card_inputs in_;
    tlpx_card_outputs other_;
    uint64_t cycle_ = 0;
    std::deque<Tlp> rx_;
    size_t rx_pos_ = 0;
    std::deque<std::pair<uint64_t, Tlp>> pending_;
    std::vector<uint32_t> tx_;
    uint8_t next_tag_ = 0;
    bool read_done_ = false;
    uint32_t read_value_ = 0;
    uint64_t msis_ = 0, card_read_bytes_ = 0, card_write_bytes_ = 0, mmio_reads_ = 0, mismatches_ = 0;
    int failures_ = 0;
    bool mismatch_ = false;
};

struct Regs {
    std::map<std::string, uint32_t> at;
    bool has(const std::string &n) const { return at.count(n) != 0; }
    uint32_t operator[](const std::string &n) const {
        auto it = at.find(n);
        if (it == at.end()) {
            std::fprintf(stderr, "tlpx_trainer: no offset given for %s\n", n.c_str());
            std::exit(1);
        }
        return it->second;
    }
};

// LitePCIe's loopback of `bytes` from kDmaSrc to kDmaDst (tlpx-device's litepcie_dma::loopback).
bool dma_loopback(Host &h, const Regs &r, uint32_t bytes) {
    h.write32(r["pcie_dma0.reader_enable"], 0);
    h.write32(r["pcie_dma0.writer_enable"], 0);
    h.write32(r["pcie_dma0.reader_table_reset"], 1);
    h.write32(r["pcie_dma0.writer_table_reset"], 1);
    h.write32(r["pcie_dma0.reader_table_loop_prog_n"], 0);
    h.write32(r["pcie_dma0.writer_table_loop_prog_n"], 0);
    h.write32(r["pcie_dma0.loopback_enable"], 1);
    h.write64(r["pcie_dma0.writer_table_value"], uint64_t(bytes) << 32 | kDmaDst);
    h.write32(r["pcie_dma0.writer_table_we"], 0);
    h.write64(r["pcie_dma0.reader_table_value"], uint64_t(bytes) << 32 | kDmaSrc);
    h.write32(r["pcie_dma0.reader_table_we"], 0);
    h.write32(r["pcie_msi.clear"], 1);  // MSI source 0: the DMA writer
    h.write32(r["pcie_msi.enable"], 1);
    uint64_t msis = h.msis();
    h.write32(r["pcie_dma0.writer_enable"], 1);
    h.write32(r["pcie_dma0.reader_enable"], 1);
    uint64_t limit = h.cycle() + 64ull * bytes + 100000;
    while (h.msis() == msis && h.cycle() < limit) h.idle(64);
    bool done = h.msis() != msis;
    h.write32(r["pcie_msi.clear"], 1);
    h.write32(r["pcie_dma0.reader_enable"], 0);
    h.write32(r["pcie_dma0.writer_enable"], 0);
    h.write32(r["pcie_dma0.loopback_enable"], 0);
    h.write32(r["pcie_msi.enable"], 0);
    return done;
}

// A generator run: `count` transfers of `size` bytes, operation 0 read, 1 write, 2 read+write;
// polls the status as a host does. Returns whether the run ended by its count.
bool generator_run(Host &h, const Regs &r, uint32_t operation, uint32_t size, uint32_t count) {
    h.write32(r["generator.control"], 4);                  // clear
    h.write32(r["generator.config"], operation | 1u << 9);  // sequential, counter data, flush
    h.write32(r["generator.transfer_size"], size);
    h.write64(r["generator.count"], count);
    h.write64(r["generator.duration"], 0);
    h.write32(r["generator.request_size_log2"], 9);
    h.write32(r["generator.payload_size_log2"], 8);
    h.write32(r["generator.idle_cycles"], 0);
    h.write32(r["generator.max_outstanding"], 32);
    h.write64(r["generator.base"], kGenBase);
    h.write32(r["generator.window_mask"], 0xFFFF);
    h.write32(r["generator.stride_log2"], size >= 2 ? 31 - __builtin_clz(size) : 2);
    h.write32(r["generator.timeout"], 100000);
    h.write32(r["generator.control"], 1);  // start
    uint64_t limit = h.cycle() + 2000000;
    uint32_t status = 0;
    while (h.cycle() < limit) {
        h.idle(500);
        status = h.read32(r["generator.status"]);
        if (status & 2) break;
    }
    h.read32(r["generator.transfers"]);
    h.read32(r["generator.lat_min"]);
    return (status & 2) && ((status >> 2) & 3) == 1;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<const char *> paths;
    Regs regs;
    uint64_t scale = 1, idle_only = 0;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--compare" && i + 1 < argc) {
            paths.push_back(argv[++i]);
        } else if (a == "--scale" && i + 1 < argc) {
            scale = std::strtoull(argv[++i], nullptr, 0);
        } else if (a == "--idle" && i + 1 < argc) {
            idle_only = std::strtoull(argv[++i], nullptr, 0);
        } else if (a == "--quiet") {
            quiet = true;
        } else if (a.find('=') != std::string::npos) {
            auto eq = a.find('=');
            regs.at[a.substr(0, eq)] = static_cast<uint32_t>(std::strtoul(a.c_str() + eq + 1, nullptr, 0));
        } else if (paths.empty() || a[0] != '-') {
            paths.insert(paths.begin(), argv[i]);
        } else {
            std::fprintf(stderr, "tlpx_trainer: unknown argument %s\n", argv[i]);
            return 1;
        }
    }
    if (paths.empty() || scale == 0) {
        std::fprintf(stderr, "usage: tlpx_trainer LIB [--compare LIB2] [--scale N] [--quiet] region.register=OFFSET ...\n");
        return 1;
    }
    std::vector<Lib> libs;
    for (auto *p : paths) libs.push_back(open_lib(p));
    if (libs.size() > 1 && libs[0].data_width() != libs[1].data_width()) {
        std::fprintf(stderr, "tlpx_trainer: the two cards have different data widths\n");
        return 1;
    }
    if (idle_only) {
        Host h(libs, quiet);
        auto t0 = std::chrono::steady_clock::now();
        h.idle(idle_only);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("tlpx_trainer: %" PRIu64 " idle cycles in %.3f s: %.3f M cycles/s\n", idle_only, s, idle_only / s / 1e6);
        return h.mismatch() ? 2 : 0;
    }
    int dma_ok = 0, dma_runs = 0, gen_ok = 0, gen_runs = 0;
    uint32_t magic = 0;
    uint64_t cycles = 0;
    {
        Host h(libs, quiet);
        // Idle first and last: most of the simulator's time is idle cycles.
        h.idle(100000 * scale);
        magic = h.read32(regs["ident.magic"]);
        for (uint32_t i = 0; i < 200 * scale; i++) {
            h.write32(regs["ident.scratch"], i * 0x9E3779B9u);
            if (h.read32(regs["ident.scratch"]) != i * 0x9E3779B9u) h.fail();
            h.read32(regs["timebase.cycles_lo"]);
            h.idle(20);
        }
        uint32_t width = libs[0].data_width();
        for (uint32_t i = 0; i < 3 * scale; i++) {
            dma_runs++;
            dma_ok += dma_loopback(h, regs, 4096u * width / 16);  // 16 KiB at 64 bits, 64 KiB at 256
            h.idle(2000);
        }
        if (regs.has("generator.control")) {
            for (uint32_t op = 0; op < 3; op++) {
                gen_runs++;
                gen_ok += generator_run(h, regs, op, 256, 64 * scale * width / 64);
                h.idle(2000);
            }
        }
        h.idle(100000 * scale);
        h.read32(regs["timebase.cycles_lo"]);
        cycles = h.cycle();
        if (!quiet) {
            std::printf(
                "tlpx_trainer: %" PRIu64 " cycles, %" PRIu64 " MMIO reads, DMA loopback %d/%d, generator runs %d/%d, "
                "%" PRIu64 " bytes read and %" PRIu64 " written by the card, %" PRIu64 " MSIs%s\n",
                cycles, h.mmio_reads(), dma_ok, dma_runs, gen_ok, gen_runs, h.card_read_bytes(), h.card_write_bytes(),
                h.msis(), libs.size() > 1 ? (h.mismatch() ? ", the cards DIFFER" : ", both cards equal every cycle") : "");
        }
        if (h.mismatch()) return 2;
        if (h.failures() || magic != 0x544C5058u || dma_ok != dma_runs || gen_ok != gen_runs) {
            std::fprintf(stderr, "tlpx_trainer: the workload failed (magic 0x%08x, %d failed accesses)\n", magic,
                         h.failures());
            return 1;
        }
    }
    return 0;
}
