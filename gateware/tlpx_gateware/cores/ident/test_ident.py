"""Identification block and timebase, on the Verilated card (all data widths).

    host model ──TLP──► card: ident (magic, version, features, map hash, scratch) + timebase

The host decides whether it knows a card from the first four registers only, so these
tests pin their offsets and values; the map hash must equal the one recomputed from the
exported csr.json, and the cycle counter must never tear or go backwards.
"""

from tlpx_gateware.conftest import csr_json, reg
from tlpx_gateware.cores.ident.core import FEATURES, MAGIC
from tlpx_gateware.soc import map_hash


def test_ident_first_registers_fixed_offsets(card):
    assert card.read32(0x0) == MAGIC
    version = card.read32(0x4)
    assert version >> 16 == 0 and version & 0xFFFF == 1
    features = card.read32(0x8)
    names = [n for n, _ in FEATURES]
    # Every block this card carries (since the rule-30 accelerator, all of FEATURES but the
    # optional soft CPU, which this card is built without).
    for name in ("request_path", "msi", "dma_loopback", "generator", "spy", "irq_timer", "rt_loop", "rule30"):
        assert features & (1 << names.index(name)), name
    assert features == (1 << len(FEATURES)) - 1 - (1 << names.index("cpu"))


def test_ident_map_hash_matches_exported_csr_json(card):
    exported = csr_json(card.data_width)
    assert card.read32(0xC) == int(exported["map_hash"], 16) == map_hash(exported)
    assert exported["data_width"] == card.data_width


def test_ident_datapath_and_clock(card):
    assert card.read32(reg("ident.data_width")) == card.data_width
    assert card.read32(reg("ident.clock_hz")) == card.build_info["clock_hz"]


def test_scratch_reads_back_patterns(card):
    scratch = reg("ident.scratch")
    assert card.read32(scratch) == 0x12345678  # reset value
    for pattern in (0x00000000, 0xFFFFFFFF, 0xA5A5A5A5, 0x5A5A5A5A, 0xDEADBEEF):
        card.write32(scratch, pattern)
        assert card.read32(scratch) == pattern


def test_cycle_counter_monotonic_and_latched(card):
    lo, hi = reg("timebase.cycles_lo"), reg("timebase.cycles_hi")
    values = []
    for _ in range(5):
        low = card.read32(lo)
        high = card.read32(hi)
        values.append((high << 32) | low)
        card.run(50)
    assert all(b > a for a, b in zip(values, values[1:]))
    # A 2-DW read returns low and high from the same instant.
    cpl = card.mrd32(lo, length=2)
    value = cpl[3] | (cpl[4] << 32)
    assert values[-1] < value <= card.cycles


def test_software_irq_sends_msi(card):
    from tlpx_gateware.soc import MSI_SOURCES
    bit = MSI_SOURCES.index("software")
    card.write32(reg("pcie_msi.enable"), 1 << bit)
    card.write32(reg("ident.software_irq"), 1)
    card.run_until(lambda: card.msis, timeout=200)
    assert card.read32(reg("pcie_msi.vector")) & (1 << bit)
    card.write32(reg("pcie_msi.clear"), 1 << bit)
    assert not card.read32(reg("pcie_msi.vector")) & (1 << bit)
