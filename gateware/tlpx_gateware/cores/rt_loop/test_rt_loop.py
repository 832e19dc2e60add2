"""Real-time loop (DataMover) on the Verilated card, with a behavioural host.

    card ──MWr data, then the token──► HostMemory ──host model polls the token, checksums the
    data, writes `result` after a known delay──► card stamps the loop time

The host model checks the token and the data (the PRBS pattern seeded with the token)
end to end; the card must count exactly the iterations, measure at least the host's delay,
and count a wrong checksum. With DMA return the host stores the checksum in its memory and
rings the doorbell; the card reads it back (tag LOOP_TAG) and must survive error
completions, poisoned data and a read that is never answered.
"""

import pytest

from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.cores.rt_loop.core import LOOP_TAG
from tlpx_gateware.testing.memory import BASE, SIZE
from tlpx_gateware.testing.rt_loop import RESULT, r, run_loop, w


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


def reads_of_loop(card):
    return [e for e in card.memory.log if e["kind"] == "read" and e["tag"] == LOOP_TAG]


@pytest.mark.parametrize("size", [8, 1024])
def test_dma_return_reads_the_checksum_back(card, size):
    run_loop(card, size, iterations=3, dma=True, corrupt=1)
    assert r(card, "count") == 3 and r(card, "mismatches") == 1
    assert r(card, "return_errors") == 0 and r(card, "unexpected") == 0
    reads = reads_of_loop(card)
    assert len(reads) == 3 and all(e["addr"] == RESULT and e["bytes"] == 4 for e in reads)
    # The loop ends at the completion: every loop covers the host's delay and the read.
    lo, total = r(card, "loop_min"), r(card, "loop_sum", 2)
    assert lo > 80 + card.memory.latency
    assert 0 < r(card, "read_last") and r(card, "read_sum", 2) >= 3 * card.memory.latency
    assert r(card, "read_sum", 2) < total


def test_dma_return_survives_error_completions_and_a_lost_read(card):
    # Reads 0..2 of the run: UR, poisoned, never answered; the fourth doorbell succeeds.
    run_loop(card, 64, iterations=2, dma=True, faults={0: "ur", 1: "poison", 2: "drop"}, read_timeout=500)
    assert r(card, "count") == 2 and r(card, "mismatches") == 0
    assert r(card, "return_errors") == 3
    assert r(card, "status") & 0b100  # done, not stuck waiting
    assert len(reads_of_loop(card)) == 5


def test_register_return_ignores_the_doorbell(card):
    card.memory = HostMemory(BASE, SIZE)
    w(card, "control", 0b100)
    w(card, "buffer_base", BASE, 2)
    w(card, "size", 64)
    w(card, "iterations", 1)
    w(card, "config", 0)
    w(card, "control", 0b001)
    card.run_until(lambda: r(card, "status") & 0b010, timeout=20000)
    w(card, "doorbell", 1)
    card.run(200)
    assert not reads_of_loop(card) and r(card, "count") == 0
