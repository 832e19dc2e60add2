"""The interrupt latency timer driven through its CSRs, and the host model that serves its
interrupts (acknowledges each fire after known delays)."""

from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.irq_timer.core import MODE_RANDOM
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES
from tlpx_gateware.testing.memory import BASE, SIZE

RING = BASE + 0x8000


def w(card, name, value, words=1):
    off = reg(f"irq_timer.{name}")
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def r(card, name, words=1):
    off = reg(f"irq_timer.{name}")
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def setup(card, mode=MODE_RANDOM, lo=400, hi=900, count=10):
    card.memory = HostMemory(BASE, SIZE)
    card.fires_seen = 0  # MSIs the host model took since the clear: fire n is the n-th
    w(card, "control", 0b100)  # clear
    w(card, "config", mode)
    w(card, "min_interval", lo)
    w(card, "max_interval", hi)
    w(card, "count", count)
    w(card, "seed", 5)
    w(card, "ring_base", RING, 2)
    w(card, "ring_size_log2", 8)
    w(card, "flush_cycles", 32)
    w(card, "rd_index", 0)
    card.write32(reg("pcie_msi.enable"), 1 << MSI_SOURCES.index("irq_timer"))


def serve(card, fires, isr_delay=50, user_delay=150, ack=True):
    """The host model: on each MSI, ack_isr after isr_delay cycles and ack_user after
    user_delay, each with the fire's number."""
    bit = 1 << MSI_SOURCES.index("irq_timer")
    seen = []
    for _ in range(fires):
        card.msis.clear()
        card.run_until(lambda: card.msis, timeout=5000)
        card.fires_seen += 1
        seen.append(card.cycles)
        card.write32(reg("pcie_msi.clear"), bit)
        if ack:
            card.run(isr_delay)
            w(card, "ack_isr", card.fires_seen)
            card.run(user_delay - isr_delay)
            w(card, "ack_user", card.fires_seen)
    return seen

