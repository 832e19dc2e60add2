"""A back-to-back burst in both directions for the spy's zero-loss tests and figures.

Up: the traffic generator's 1-DW MWr, one per cycle while the transmit arbiter lets it (the
spy's own ring writes share that link). Down: 1-DW CplD, back to back, with a tag of the
generator's that no read is waiting for: the card takes one per cycle on every width (its
request path takes a host MWr only every few cycles, so host MWr cannot fill the down link;
a 1-DW CplD is the same four DWs on the link as a 1-DW MWr, and the spy records both alike).
"""

from tlpx_gateware import tlp
from tlpx_gateware.conftest import reg, csr_map
from tlpx_gateware.cores.generator.core import OP_WRITE, TAG_BASE, TAGS
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.testing.generator import GeneratorDriver
from tlpx_gateware.testing.memory import BASE
from tlpx_gateware.testing.spy import spy_r, spy_w

BURST_MEMORY = 1 << 21
BURST_RING = BASE + 0x10000
BURST_RING_LOG2 = 15   # 32768 records (1 MiB): the ring never limits a burst here


def burst(card, count, payload_dws=0):
    """`count` 1-DW TLPs each way, back to back; returns the spy's figures after the ring
    writer has written everything it kept."""
    card.memory = HostMemory(BASE, BURST_MEMORY, latency=40)
    spy_w(card, "control", 0b10)
    spy_w(card, "ring_base", BURST_RING, 2)
    spy_w(card, "ring_size_log2", BURST_RING_LOG2)
    spy_w(card, "payload_size_log2", 8)
    spy_w(card, "flush_cycles", 64)
    spy_w(card, "rd_index", 0)
    spy_w(card, "payload", csr_map(card.data_width).encode("spy.payload", dws=payload_dws, class_mask=0xFF, direction_mask=0b11))
    g = GeneratorDriver(card)
    cm = csr_map(card.data_width)
    g.w("control", cm.encode("generator.control", clear=1))
    config = cm.encode("generator.config", operation=OP_WRITE, check_data=0)
    for name, value in [("config", config), ("transfer_size", 4), ("count", count), ("duration", 0),
                        ("request_size_log2", 7), ("payload_size_log2", 7), ("idle_cycles", 0),
                        ("max_outstanding", 32), ("base", BASE), ("window_mask", 0x8000 - 1),
                        ("stride_log2", 2), ("offset", 0), ("seed", 7), ("timeout", 5000)]:
        g.w(name, value)
    from tlpx_gateware.soc import MSI_SOURCES
    card.write32(reg("pcie_msi.enable"), 1 << MSI_SOURCES.index("generator"))
    spy_w(card, "control", 1)
    card.msis.clear()
    start = card.cycles
    # The start write, then the completions right behind it: both directions run together.
    card.send([tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_MEM, 1), 0xF, reg("generator.control")]
              + [cm.encode("generator.control", start=1)])
    for i in range(count):
        card.send([tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_CPL, 1), 4,
                   (card.CARD_ID << 16) | ((TAG_BASE + TAGS - 1) << 8), 0x03020100 + 0x04040404 * (i & 0x3F)])
    # The generator's MSI says its run is over (polling would add MMIO traffic to the burst).
    card.run_until(lambda: not card.tx_queue and card.msis, 20 * count + 1000)
    end = card.cycles
    spy_w(card, "control", 0)
    card.run(3000)
    ups = [c for (c, d, dw0) in card.link_log if d == 1 and start < c <= end and (dw0 >> 24) & 0x1F == tlp.TYPE_MEM]
    return {
        "cycles": end - start,
        "sequence": spy_r(card, "sequence"),
        "lost": spy_r(card, "lost"),
        "wr_index": spy_r(card, "wr_index"),
        "own_tlps": spy_r(card, "own_tlps", 2),
        "up_rate": len(ups) / max(1, ups[-1] - ups[0]) if ups else 0,
    }
