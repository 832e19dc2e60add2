"""Real-time loop (DataMover) on the Verilated card, with a behavioural host.

    card ──MWr data, then the token──► HostMemory ──host model polls the token, checksums the
    data, writes `result` after a known delay──► card stamps the loop time

The host model checks the token and the data (the PRBS pattern seeded with the token)
end to end; the card must count exactly the iterations, measure at least the host's delay,
and count a wrong checksum.
"""

import pytest

from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.common import PATTERN_PRBS, pattern_word_py
from tlpx_gateware.cores.generator.test_generator import BASE, SIZE
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES


def w(card, name, value, words=1):
    off = reg(f"rt_loop.{name}")
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def r(card, name, words=1):
    off = reg(f"rt_loop.{name}")
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def run_loop(card, size, iterations, seed=100, delay=80, use_irq=False, corrupt=None):
    card.memory = HostMemory(BASE, SIZE)
    w(card, "control", 0b100)
    w(card, "buffer_base", BASE, 2)
    w(card, "size", size)
    w(card, "payload_size_log2", 7)
    w(card, "iterations", iterations)
    w(card, "seed", seed)
    w(card, "config", int(use_irq))
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
        w(card, "result", checksum)
    card.run(50)


@pytest.mark.parametrize("size", [8, 64, 1024, 4096])
def test_loop_round_trips_with_verified_checksums(card, size):
    run_loop(card, size, iterations=3)
    assert r(card, "status") & 0b100  # done
    assert r(card, "count") == 3 and r(card, "mismatches") == 0
    lo, hi, total = r(card, "loop_min"), r(card, "loop_max"), r(card, "loop_sum", 2)
    assert 80 < lo <= hi and total >= 3 * lo
    samples = [r(card, "sample") for _ in range(r(card, "samples"))]
    assert len(samples) == 3 and sum(samples) == total and min(samples) == lo
    # The last DW the card wrote before waiting is the token, after all the data.
    writes = [e for e in card.memory.log if e["kind"] == "write"]
    assert writes[-1]["addr"] == BASE and writes[-1]["bytes"] == 4


def test_interrupt_detection_and_wrong_checksum(card):
    run_loop(card, 256, iterations=4, use_irq=True, corrupt=2)
    assert r(card, "count") == 4 and r(card, "mismatches") == 1
    w(card, "loop_hist_select", 0)
    counts = []
    for i in range(32):
        w(card, "loop_hist_select", i)
        counts.append(r(card, "loop_hist_count"))
    assert sum(counts) == 4
