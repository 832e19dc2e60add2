"""The rule-30 accelerator driven as a host would: its BAR0 window (one operation at a time) and
its DMA batch mode (a descriptor list in the tests' host memory, results back there, one MSI);
and the published rule-30 centre column the results are judged against."""

from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.rule30 import reference as ref
from tlpx_gateware.cores.rule30.core import Register
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES, RULE30_WINDOW_BASE
from tlpx_gateware.testing.memory import BASE, SIZE

# OEIS A051023, "Middle column of rule-30 1-D cellular automaton, from a lone 1 cell",
# a(0)..a(101) as published in the sequence's data section (https://oeis.org/A051023).
A051023 = (
    1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 1,
    1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0,
    1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0,
    0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1,
)


MSI_BIT = 1 << MSI_SOURCES.index("slot")
DESCRIPTORS = BASE          # descriptor list
RESULTS = BASE + 0x8000     # result records


def random_line(rng, length):
    return "".join(rng.choice("01") for _ in range(length))


# Window -------------------------------------------------------------------------------------------

def wr(card, register, value):
    card.write32(RULE30_WINDOW_BASE + int(register), value & 0xFFFFFFFF)


def rd(card, register):
    return card.read32(RULE30_WINDOW_BASE + int(register))


def load(card, line, rule=30, generations=1):
    """Programs one operation through the window (the input line in one multi-DW write)."""
    wr(card, Register.RULE_SET, rule)
    wr(card, Register.LINE_LENGTH, len(line))
    wr(card, Register.GENERATIONS, generations)
    card.mwr32(RULE30_WINDOW_BASE + Register.INPUT, ref.chars_to_words(line))


def enable_msi(card):
    card.write32(reg("pcie_msi.enable"), MSI_BIT)
    card.msis.clear()


# Batch --------------------------------------------------------------------------------------------

def bw(card, name, value, words=1):
    off = reg(f"rule30_batch.{name}", card.data_width)
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def br(card, name, words=1):
    off = reg(f"rule30_batch.{name}", card.data_width)
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def put_dws(mem, addr, dws):
    for i, d in enumerate(dws):
        mem.data[addr - mem.base + 4 * i:addr - mem.base + 4 * i + 4] = d.to_bytes(4, "little")


def run_batch(card, descriptors, count=None, read_log2=None, timeout=200000, faults=None, read_timeout=None,
              base=BASE):
    """Writes the list at ``base``, starts the batch (results at base + 0x8000), waits for its MSI."""
    card.memory = HostMemory(base, SIZE)
    card.memory.faults = dict(faults or {})
    dws = [d for desc in descriptors for d in desc]
    put_dws(card.memory, base + DESCRIPTORS - BASE, dws)
    enable_msi(card)
    bw(card, "descriptor_base", base + DESCRIPTORS - BASE, 2)
    bw(card, "descriptor_bytes", 4 * len(dws))
    bw(card, "count", len(descriptors) if count is None else count)
    bw(card, "result_base", base + RESULTS - BASE, 2)
    if read_log2 is not None:
        bw(card, "read_request_log2", read_log2)
    if read_timeout is not None:
        bw(card, "read_timeout", read_timeout)
    bw(card, "control", 1)
    card.run_until(lambda: card.msis, timeout=timeout)
    card.run(300)   # nothing more may come

