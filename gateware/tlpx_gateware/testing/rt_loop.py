"""The real-time loop driven through its CSRs, with the host model of a loop: it polls the
token (or takes the MSI), checks the data, and returns the checksum by register or by DMA."""

from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.common import PATTERN_PRBS, pattern_word_py
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES
from tlpx_gateware.testing.memory import BASE, SIZE

RESULT = BASE + 0x8000  # where the host stores the checksum for a DMA return


def w(card, name, value, words=1):
    off = reg(f"rt_loop.{name}")
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def r(card, name, words=1):
    off = reg(f"rt_loop.{name}")
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def run_loop(card, size, iterations, seed=100, delay=80, use_irq=False, corrupt=None, dma=False, faults=None,
             read_timeout=None):
    card.memory = HostMemory(BASE, SIZE)
    card.memory.faults = dict(faults or {})
    w(card, "control", 0b100)
    w(card, "buffer_base", BASE, 2)
    w(card, "size", size)
    w(card, "payload_size_log2", 7)
    w(card, "iterations", iterations)
    w(card, "seed", seed)
    w(card, "config", int(use_irq) | (int(dma) << 1))
    w(card, "result_address", RESULT, 2)
    if read_timeout is not None:
        w(card, "read_timeout", read_timeout)
    card.write32(reg("pcie_msi.enable"), 1 << MSI_SOURCES.index("rt_loop"))
    w(card, "control", 0b001)
    mem = card.memory
    for it in range(iterations):
        token = seed + it
        if use_irq:
            card.msis.clear()
            card.run_until(lambda: card.msis, timeout=20000)
        else:
            card.run_until(lambda: mem.word(BASE) == token, timeout=20000)
        assert mem.word(BASE) == token
        data = [mem.word(BASE + 4 * i) for i in range(1, size // 4)]
        expected = [pattern_word_py(PATTERN_PRBS, token, (BASE >> 2) + i) for i in range(1, size // 4)]
        assert data == expected, f"iteration {it}: the data is not the token's pattern"
        checksum = sum(data) & 0xFFFFFFFF
        if corrupt == it:
            checksum ^= 1
        card.run(delay)
        if not dma:
            w(card, "result", checksum)
            continue
        mem.data[RESULT - BASE:RESULT - BASE + 4] = checksum.to_bytes(4, "little")
        # Ring until the card has the result: a failed read (error completion, poisoned
        # data, no answer) is counted and the card waits for the next doorbell.
        for _ in range(4):
            count, errors = r(card, "count"), r(card, "return_errors")
            w(card, "doorbell", 1)
            card.run_until(lambda: r(card, "count") > count or r(card, "return_errors") > errors, timeout=20000)
            if r(card, "count") > count:
                break
    card.run(50)

