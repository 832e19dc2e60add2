"""DMA guard on the Verilated card: LitePCIe's DMA survives lost and erroneous completions.

    host model ──LitePCIe DMA loopback (reader → loopback → writer)──► HostMemory with faults:
        the reader's first read is dropped / answered UR / poisoned
    guard: outstanding read, no completion for `timeout` cycles ──► reset crossbar + DMA

Without the guard LitePCIe's reader waits for ever after a dropped completion or an error
completion (no data: its read never ends), and the next loopback never completes. With it,
the stuck transfer is given up, counted, and the next loopback moves the right bytes.
"""

from tlpx_gateware.conftest import reg
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES
from tlpx_gateware.testing.memory import BASE, SIZE

SRC = BASE
DST = BASE + 0x4000
LENGTH = 1024


def w(card, name, value, words=1):
    off = reg(name)
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def r(card, name):
    return card.read32(reg(name))


def loopback(card, timeout=30000):
    """One LitePCIe loopback of LENGTH bytes SRC → DST; True if the writer's MSI came."""
    for name in ("reader_enable", "writer_enable"):
        w(card, f"pcie_dma0.{name}", 0)
    w(card, "pcie_dma0.reader_table_reset", 1)
    w(card, "pcie_dma0.writer_table_reset", 1)
    w(card, "pcie_dma0.reader_table_loop_prog_n", 0)
    w(card, "pcie_dma0.writer_table_loop_prog_n", 0)
    w(card, "pcie_dma0.loopback_enable", 1)
    w(card, "pcie_dma0.writer_table_value", DST | (LENGTH << 32), 2)
    w(card, "pcie_dma0.writer_table_we", 0)
    w(card, "pcie_dma0.reader_table_value", SRC | (LENGTH << 32), 2)
    w(card, "pcie_dma0.reader_table_we", 0)
    bit = 1 << MSI_SOURCES.index("pcie_dma0_writer")
    w(card, "pcie_msi.clear", bit)
    w(card, "pcie_msi.enable", bit)
    card.msis.clear()
    w(card, "pcie_dma0.writer_enable", 1)
    w(card, "pcie_dma0.reader_enable", 1)
    try:
        card.run_until(lambda: card.msis, timeout=timeout)
        done = True
    except Exception:
        done = False
    w(card, "pcie_msi.clear", bit)
    for name in ("reader_enable", "writer_enable", "loopback_enable"):
        w(card, f"pcie_dma0.{name}", 0)
    return done


def fresh(card, faults):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    for i in range(LENGTH):
        card.memory.data[i] = (i * 7 + 3) & 0xFF
    card.memory.faults = dict(faults)
    w(card, "dma_guard.timeout", 2000)


def copied(card):
    return card.memory.data[DST - BASE:DST - BASE + LENGTH] == card.memory.data[:LENGTH]


def recovers_after(card, fault):
    fresh(card, {0: fault})
    resets = r(card, "dma_guard.resets")
    assert not loopback(card, timeout=6000), f"the loopback completed although its first read was {fault}"
    card.run(3000)  # the guard's timeout (2000 cycles) passes: it resets LitePCIe's requester side
    assert r(card, "dma_guard.resets") == resets + 1
    assert r(card, "dma_guard.outstanding") == 0
    card.memory.faults = {}
    card.memory.data[DST - BASE:DST - BASE + LENGTH] = bytes(LENGTH)
    assert loopback(card), "the loopback after the reset did not complete"
    assert copied(card)


def test_loopback_moves_the_bytes(card):
    fresh(card, {})
    assert loopback(card) and copied(card)
    assert r(card, "dma_guard.resets") == 0 and r(card, "dma_guard.cpl_errors") == 0


def test_a_dropped_completion_is_timed_out_and_the_dma_recovers(card):
    recovers_after(card, "drop")
    assert r(card, "dma_guard.timeouts") >= 1


def test_an_error_completion_is_counted_and_the_dma_recovers(card):
    errors = r(card, "dma_guard.cpl_errors")
    recovers_after(card, "ur")
    assert r(card, "dma_guard.cpl_errors") == errors + 1


def test_poisoned_completions_are_counted(card):
    fresh(card, {i: "poison" for i in range(8)})
    poisoned = r(card, "dma_guard.cpl_poisoned")
    loopback(card)
    assert r(card, "dma_guard.cpl_poisoned") > poisoned


def test_a_host_reset_leaves_a_working_dma(card):
    fresh(card, {})
    w(card, "dma_guard.control", 1)
    card.run(10)
    assert loopback(card) and copied(card)


def test_the_writer_s_msi_leaves_after_its_last_write(card):
    """The MSI of LitePCIe's DMA writer reaches the PHY only after the writer's last MWr has
    left it (cores/ordering): the independent model of the UltraScale hard IP saw the MSI
    first, the last 256 bytes not yet in host memory."""
    fresh(card, {})
    assert loopback(card)
    writes = [e["cycle"] for e in card.memory.log if e["kind"] == "write" and e["addr"] >= DST]
    msi_cycle = card.msis[0][0]
    assert writes and msi_cycle >= max(writes), f"MSI at cycle {msi_cycle}, last write at {max(writes)}"
    assert copied(card)
