/* tlpx card simulation ABI.
 *
 * A Verilated tlpx card (gateware/tlpx_gateware/soc.py) behind a plain C interface. The
 * shared library libtlpxcard-dw<N>.so is built by `make gateware` and loaded by tlpx-sim
 * with dlopen; the root-complex and link models live in tlpx-sim, this side is only the card.
 *
 * TLP beats (both directions) use LitePCIe's PHY layout with endianness "little":
 *   - dat[i] is DW i of the beat; the first beat of a TLP starts with header DW0;
 *   - header DWs are native 32-bit values as numbered in the PCIe Base spec (DW0 bits
 *     31:29 = Fmt, 28:24 = Type, 9:0 = Length);
 *   - payload DWs carry payload bytes little-endian (payload byte 0 in bits 7:0);
 *   - be has 4 bits per DW: 0xF for every DW of the beat that belongs to the TLP, 0 for
 *     unused DWs of the last beat. Header and payload are packed with no gap.
 */
#ifndef TLPX_CARD_H
#define TLPX_CARD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TLPX_CARD_ABI_VERSION 1
#define TLPX_CARD_MAX_DWORDS  8 /* 256-bit datapath */

typedef struct tlpx_card_inputs {
    /* Host -> card TLP stream (what the link delivers to the card). */
    uint32_t rx_dat[TLPX_CARD_MAX_DWORDS];
    uint32_t rx_be;
    uint8_t  rx_valid;
    uint8_t  rx_first;
    uint8_t  rx_last;
    /* Card -> host TLP stream: the link accepts a beat this cycle. */
    uint8_t  tx_ready;
    /* MSI request accepted by the (modelled) hard IP this cycle. */
    uint8_t  msi_ready;
    uint8_t  cfg_bus_master_enable; /* Command register bit 2 */
    uint8_t  cfg_msi_enable;        /* MSI capability enable bit */
    uint8_t  cfg_msi_multiple_enable; /* MSI Multiple Message Enable: 1 << this vectors granted (0..5) */
    /* What a PCIe hard IP hands the user logic from its configuration space. */
    uint16_t cfg_requester_id;      /* bus[15:8] dev[7:3] fn[2:0] */
    uint16_t cfg_max_payload_size;  /* bytes: 128..4096 */
    uint16_t cfg_max_request_size;  /* bytes: 128..4096 */
    uint8_t  cfg_msix_enable;       /* MSI-X capability: MSI-X Enable */
    uint8_t  cfg_msix_function_mask; /* MSI-X capability: Function Mask */
} tlpx_card_inputs;

typedef struct tlpx_card_outputs {
    /* Card -> host TLP stream. */
    uint32_t tx_dat[TLPX_CARD_MAX_DWORDS];
    uint32_t tx_be;
    uint8_t  tx_valid;
    uint8_t  tx_first;
    uint8_t  tx_last;
    /* Host -> card stream: the card accepts a beat this cycle. */
    uint8_t  rx_ready;
    /* MSI request (LitePCIe msi stream): vector number in msi_vector. */
    uint8_t  msi_valid;
    uint8_t  msi_vector;
    uint16_t reserved0;
} tlpx_card_outputs;

/* TLPX_CARD_ABI_VERSION of the library. */
uint32_t    tlpx_card_abi_version(void);
/* Datapath width in bits: 64, 128 or 256. */
uint32_t    tlpx_card_data_width(void);
/* JSON object describing the build: {"data_width":..,"clock_hz":..,"map_hash":"0x..",...}. */
const char *tlpx_card_build_info(void);

void       *tlpx_card_new(void);
void        tlpx_card_free(void *card);
/* Holds reset for `cycles` clock cycles (inputs idle), releases it and clocks 4 more idle
 * cycles so that the card is out of reset when this returns. */
void        tlpx_card_reset(void *card, uint32_t cycles);
/* One clock cycle. The inputs are applied, the outputs are sampled before the rising
 * edge, then the edge happens. A beat is transferred at this edge when
 * (in->rx_valid && out->rx_ready), (out->tx_valid && in->tx_ready) or
 * (out->msi_valid && in->msi_ready). The caller's inputs must not depend on this
 * cycle's outputs (they depend only on earlier cycles), so no combinational loop exists. */
void        tlpx_card_cycle(void *card, const tlpx_card_inputs *in, tlpx_card_outputs *out);
/* Rising edges since tlpx_card_new (reset cycles included). */
uint64_t    tlpx_card_cycles(void *card);

#ifdef __cplusplus
}
#endif

#endif /* TLPX_CARD_H */
