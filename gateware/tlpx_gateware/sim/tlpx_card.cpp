// tlpx card simulation ABI (tlpx_card.h) over the Verilated model of tlpx_gateware.soc.
// Built by tlpx_gateware.build with -DTLPX_DW=<64|128|256> and a generated build_info.h.

#include "tlpx_card.h"

#include <cstring>
#include <memory>

#include "Vtlpx_card.h"
#include "build_info.h"
#include "verilated.h"

#ifdef TLPX_TRACE
#include <cstdlib>
#include "verilated_vcd_c.h"
#endif

#ifndef TLPX_DW
#error "TLPX_DW must be defined (64, 128 or 256)"
#endif

static_assert(TLPX_DW == 64 || TLPX_DW == 128 || TLPX_DW == 256, "TLPX_DW must be 64, 128 or 256");

namespace {

constexpr int kDwords = TLPX_DW / 32;

struct Card {
    std::unique_ptr<VerilatedContext> context;
    std::unique_ptr<Vtlpx_card> model;
    uint64_t cycles = 0;
#ifdef TLPX_TRACE
    // Debug builds (tlpx_gateware.build --trace): a VCD of every signal when the
    // environment variable TLPX_TRACE names a file.
    std::unique_ptr<VerilatedVcdC> vcd;
#endif
};

inline void set_rx_dat(Vtlpx_card *m, const uint32_t *d) {
#if TLPX_DW == 64
    m->pcie_rx_dat = static_cast<uint64_t>(d[0]) | (static_cast<uint64_t>(d[1]) << 32);
#else
    for (int i = 0; i < kDwords; i++) m->pcie_rx_dat[i] = d[i];
#endif
}

inline void get_tx_dat(const Vtlpx_card *m, uint32_t *d) {
#if TLPX_DW == 64
    d[0] = static_cast<uint32_t>(m->pcie_tx_dat);
    d[1] = static_cast<uint32_t>(m->pcie_tx_dat >> 32);
#else
    for (int i = 0; i < kDwords; i++) d[i] = m->pcie_tx_dat[i];
#endif
}

void apply_inputs(Vtlpx_card *m, const tlpx_card_inputs *in) {
    set_rx_dat(m, in->rx_dat);
    m->pcie_rx_be = in->rx_be;
    m->pcie_rx_valid = in->rx_valid;
    m->pcie_rx_first = in->rx_first;
    m->pcie_rx_last = in->rx_last;
    m->pcie_tx_ready = in->tx_ready;
    m->pcie_msi_ready = in->msi_ready;
    m->pcie_cfg_bus_master_enable = in->cfg_bus_master_enable;
    m->pcie_cfg_msi_enable = in->cfg_msi_enable;
    m->pcie_cfg_msi_multiple_enable = in->cfg_msi_multiple_enable > 5 ? 5 : in->cfg_msi_multiple_enable;
    m->pcie_cfg_msix_enable = in->cfg_msix_enable != 0;
    m->pcie_cfg_msix_function_mask = in->cfg_msix_function_mask != 0;
    m->pcie_cfg_requester_id = in->cfg_requester_id;
    m->pcie_cfg_max_payload_size = in->cfg_max_payload_size;
    m->pcie_cfg_max_request_size = in->cfg_max_request_size;
}

// Rising edge. The clock is lowered again without an eval: the next cycle's eval (with its
// new inputs) settles the falling edge too, as the design has no negative-edge logic. Two
// evals per cycle instead of three.
void edge(Card *card) {
#ifdef TLPX_TRACE
    if (card->vcd) card->vcd->dump(2 * card->cycles);
#endif
    card->model->sys_clk = 1;
    card->model->eval();
#ifdef TLPX_TRACE
    if (card->vcd) card->vcd->dump(2 * card->cycles + 1);
#endif
    card->model->sys_clk = 0;
    card->cycles++;
}

}  // namespace

#define TLPX_EXPORT __attribute__((visibility("default")))

extern "C" {

TLPX_EXPORT uint32_t tlpx_card_abi_version(void) { return TLPX_CARD_ABI_VERSION; }

TLPX_EXPORT uint32_t tlpx_card_data_width(void) { return TLPX_DW; }

TLPX_EXPORT const char *tlpx_card_build_info(void) { return TLPX_CARD_BUILD_INFO; }

TLPX_EXPORT void *tlpx_card_new(void) {
    auto *card = new Card;
    card->context = std::make_unique<VerilatedContext>();
    card->context->threads(1);
    card->model = std::make_unique<Vtlpx_card>(card->context.get(), "tlpx_card");
    card->model->sys_clk = 0;
    card->model->sys_rst = 0;
#ifdef TLPX_TRACE
    if (const char *path = std::getenv("TLPX_TRACE")) {
        card->context->traceEverOn(true);
        card->vcd = std::make_unique<VerilatedVcdC>();
        card->model->trace(card->vcd.get(), 99);
        card->vcd->open(path);
    }
#endif
    card->model->eval();
    return card;
}

TLPX_EXPORT void tlpx_card_free(void *handle) {
    auto *card = static_cast<Card *>(handle);
    if (card == nullptr) return;
#ifdef TLPX_TRACE
    if (card->vcd) card->vcd->close();
#endif
    card->model->final();
    delete card;
}

TLPX_EXPORT void tlpx_card_reset(void *handle, uint32_t cycles) {
    auto *card = static_cast<Card *>(handle);
    tlpx_card_inputs idle;
    std::memset(&idle, 0, sizeof idle);
    apply_inputs(card->model.get(), &idle);
    card->model->sys_rst = 1;
    for (uint32_t i = 0; i < (cycles ? cycles : 1); i++) {
        card->model->eval();
        edge(card);
    }
    card->model->sys_rst = 0;
    // The card registers its reset input (LiteX CRG): let the release reach every flop
    // before the first TLP arrives.
    for (int i = 0; i < 4; i++) {
        card->model->eval();
        edge(card);
    }
}

TLPX_EXPORT void tlpx_card_cycle(void *handle, const tlpx_card_inputs *in, tlpx_card_outputs *out) {
    auto *card = static_cast<Card *>(handle);
    Vtlpx_card *m = card->model.get();
    apply_inputs(m, in);
    m->eval();  // settle combinational paths from the new inputs (clock low)
    std::memset(out->tx_dat, 0, sizeof out->tx_dat);
    get_tx_dat(m, out->tx_dat);
    out->tx_be = m->pcie_tx_be;
    out->tx_valid = m->pcie_tx_valid;
    out->tx_first = m->pcie_tx_first;
    out->tx_last = m->pcie_tx_last;
    out->rx_ready = m->pcie_rx_ready;
    out->msi_valid = m->pcie_msi_valid;
    out->msi_vector = m->pcie_msi_vector;
    out->reserved0 = 0;
    edge(card);
}

TLPX_EXPORT uint64_t tlpx_card_cycles(void *handle) { return static_cast<Card *>(handle)->cycles; }

}  // extern "C"
