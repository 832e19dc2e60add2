"""Traffic generator and PIO window on the Verilated card, against a behavioural host memory.

    GeneratorDriver (CSRs) ──MWr/MRd──► card ──TLPs──► HostMemory (absorbs MWr, answers MRd
                                        ◄─CplD/Cpl/UR/CA/poisoned/dropped── with faults)

The generator's counters must agree exactly with what the host memory saw; data must land
(writes) and be checked (reads) against the address-keyed pattern; error completions,
poisoned data and lost completions must be counted while the engine finishes and stays
usable. Widths 64, 128 and 256 bits.
"""

import pytest

from tlpx_gateware import tlp
from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.common import pattern_word_py, PATTERN_COUNTER, PATTERN_PRBS
from tlpx_gateware.cores.generator.core import (ADDR_FIXED, ADDR_RANDOM, OP_READ, OP_READ_WRITE, OP_WRITE,
                                                OP_WRITE_READ, TAG_BASE, TAGS)
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.testing.generator import GeneratorDriver, csr
from tlpx_gateware.testing.memory import BASE, SIZE, fill


def ended_by(status, name):
    return csr().get("generator.status.ended_by", status) == csr().value("generator.status.ended_by", name)


@pytest.fixture
def gen(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    return GeneratorDriver(card)


def test_write_lands_pattern_and_counts_match_host(gen):
    mem = gen.card.memory
    c = gen.run(OP_WRITE, transfer_size=1024, count=8, payload_log2=8, data=PATTERN_PRBS)
    writes = [e for e in mem.log if e["kind"] == "write"]
    assert c["write_requests"] == len(writes) == 32
    assert c["write_bytes"] == sum(e["bytes"] for e in writes) == 8 * 1024
    assert all(e["bytes"] <= 256 and e["hdr_dws"] == 3 for e in writes)
    assert c["transfers"] == 8 and ended_by(c["status"], "count")
    for t in range(8):
        for off in range(0, 1024, 4):
            addr = BASE + t * 4096 + off
            assert mem.word(addr) == pattern_word_py(PATTERN_PRBS, 7, addr >> 2), hex(addr)
    assert mem.word(BASE + 1024) == 0  # beyond each transfer: untouched


def test_read_checks_data_and_measures_latency(gen):
    mem = gen.card.memory
    fill(mem)
    c = gen.run(OP_READ, transfer_size=1024, count=8, request_log2=9)
    reads = [e for e in mem.log if e["kind"] == "read"]
    assert c["read_requests"] == len(reads) == 16
    assert c["read_bytes"] == 8 * 1024
    assert c["completions"] == 8 * 1024 // 64  # split at the 64-byte RCB
    assert c["err_mismatches"] == 0 and c["err_timeouts"] == 0 and c["err_unexpected"] == 0
    assert c["lat_count"] == 16 and len(c["samples"]) == 16 and sum(c["hist"]) == 16
    assert c["lat_min"] == min(c["samples"]) and c["lat_max"] == max(c["samples"])
    assert c["lat_sum"] == sum(c["samples"])
    assert c["lat_min"] >= mem.latency
    assert all(TAG_BASE <= e["tag"] < TAG_BASE + TAGS for e in reads)


def test_read_counts_corrupted_dws(gen):
    mem = gen.card.memory
    fill(mem, PATTERN_PRBS)
    for off in (8, 4096 + 100):
        mem.data[off] ^= 0xFF
    c = gen.run(OP_READ, transfer_size=512, count=2, data=PATTERN_PRBS)
    assert c["err_mismatches"] == 2


def test_error_completions_are_counted_and_engine_recovers(gen):
    mem = gen.card.memory
    fill(mem)
    mem.faults = {1: "ur", 3: "ca", 4: "poison", 6: "drop"}
    c = gen.run(OP_READ, transfer_size=512, count=8, timeout=3000)
    # Poisoned: every completion of that read (512 B in 64-byte RCB pieces) carries EP.
    assert (c["err_ur"], c["err_ca"], c["err_poisoned"], c["err_timeouts"]) == (1, 1, 512 // 64, 1)
    assert csr().get("generator.status.done", c["status"]) and csr().get("generator.status.outstanding", c["status"]) == 0
    assert c["lat_count"] == 8 - 3  # UR, CA and the dropped read are not measured
    # A late completion for the dropped read would be "unexpected"; the next run is clean.
    mem.faults = {}
    c = gen.run(OP_READ, transfer_size=512, count=4)
    assert c["err_ur"] == c["err_timeouts"] == c["err_mismatches"] == 0 and c["lat_count"] == 4


def test_counters_restart_with_every_run(gen):
    mem = gen.card.memory
    fill(mem)
    gen.run(OP_WRITE, transfer_size=256, count=4)
    c = gen.run(OP_READ, transfer_size=256, count=2)
    assert (c["write_requests"], c["write_bytes"]) == (0, 0)
    assert (c["read_requests"], c["read_bytes"]) == (2, 512)


def test_forced_64bit_headers_and_attributes(gen):
    mem = gen.card.memory
    fill(mem)
    gen.run(OP_READ_WRITE, transfer_size=256, count=2, addr64=1, ro=1, ns=1)
    assert {e["hdr_dws"] for e in mem.log} == {4}
    assert {e["attr"] for e in mem.log} == {0b11}
    assert {e["kind"] for e in mem.log} == {"read", "write"}


@pytest.mark.parametrize("offset,size", [(3, 10), (1, 2), (62, 70)])
def test_unaligned_write_touches_exactly_its_bytes(gen, offset, size):
    mem = gen.card.memory
    mem.data[:] = b"\xAA" * SIZE
    gen.run(OP_WRITE, transfer_size=size, count=1, offset=offset, stride_log2=7, window=128)
    changed = [i for i in range(256) if mem.data[i] != 0xAA]
    pattern = b"".join(pattern_word_py(PATTERN_COUNTER, 7, (BASE >> 2) + i).to_bytes(4, "little") for i in range(64))
    expected = [i for i in range(offset, offset + size) if pattern[i] != 0xAA]
    assert changed == expected
    assert all(mem.data[i] == pattern[i] for i in range(offset, offset + size))


def test_outstanding_reads_never_exceed_the_limit(gen):
    mem = gen.card.memory
    mem.latency = 300
    fill(mem)
    c = gen.run(OP_READ, transfer_size=4096, count=4, request_log2=7, outstanding=3)
    assert mem.max_outstanding_seen == 3
    assert c["read_requests"] == 4 * 4096 // 128


def test_write_then_read_alternates_and_measures_each_transfer(gen):
    mem = gen.card.memory
    c = gen.run(OP_WRITE_READ, transfer_size=256, count=5)
    kinds = [e["kind"] for e in mem.log]
    assert kinds == ["write", "read"] * 5
    assert c["lat_count"] == 5 and c["err_mismatches"] == 0
    # Measured from the write's first beat: at least the host's read latency.
    assert c["lat_min"] >= mem.latency


def test_random_addresses_stay_in_window(gen):
    mem = gen.card.memory
    gen.run(OP_WRITE, transfer_size=64, count=32, pattern=ADDR_RANDOM, stride_log2=6, window=4096)
    addrs = [e["addr"] for e in mem.log]
    assert all(BASE <= a < BASE + 4096 and (a - BASE) % 64 == 0 for a in addrs)
    assert len(set(addrs)) > 8


def test_fixed_address_and_duration(gen):
    mem = gen.card.memory
    c = gen.run(OP_WRITE, transfer_size=64, count=0, duration=3000, pattern=ADDR_FIXED)
    assert ended_by(c["status"], "duration")
    assert {e["addr"] for e in mem.log} == {BASE}
    assert c["write_requests"] == len(mem.log) > 10


# PIO window --------------------------------------------------------------------------------------

PIO = 0x10000


def pio(card, name):
    return card.read32(reg(f"pio.{name}"))


def test_pio_multi_dw_writes_with_byte_enables_land_exactly(card):
    card.write32(reg("pio.control"), 1)
    card.mwr32(PIO + 0x40, [0x11111111, 0x22222222, 0x33333333, 0x44444444])
    card.mwr32(PIO + 0x40, [0xAAAAAAAA, 0xBBBBBBBB, 0xCCCCCCCC, 0xDDDDDDDD], first_be=0b1110, last_be=0b0001)
    cpl = card.mrd32(PIO + 0x40, length=4)
    assert cpl[3:] == [0xAAAAAA11, 0xBBBBBBBB, 0xCCCCCCCC, 0x444444DD]
    assert pio(card, "write_tlps") == 2
    assert pio(card, "write_bytes") == 16 + (3 + 4 + 4 + 1)
    assert pio(card, "read_tlps") == 1 and pio(card, "read_bytes") == 16
    card.write32(reg("pio.write_size_select"), 4)  # 16..31 bytes
    assert pio(card, "write_size_count") == 1
    card.write32(reg("pio.write_size_select"), 3)  # 8..15 bytes
    assert pio(card, "write_size_count") == 1
    first, last = pio(card, "first_write"), pio(card, "last_write")
    assert 0 < first < last <= card.cycles


def test_pio_read_delay_adds_latency(card):
    def read_cycles():
        start = card.cycles
        card.read32(PIO)
        return card.cycles - start
    took = {}
    for delay in (0, 100, 200):
        card.write32(reg("pio.read_delay"), delay)
        card.read32(PIO)  # settle the posted write
        took[delay] = read_cycles()
    # Each cycle of delay costs one cycle; the first comparison allows the one-cycle
    # variation of the TX arbiter's round-robin state.
    assert took[200] - took[100] == 100
    assert abs(took[100] - took[0] - 100) <= 1, took
    card.write32(reg("pio.read_delay"), 0)


@pytest.mark.parametrize("size", [64, 256, 1024])
def test_writes_leave_back_to_back(gen, size):
    # With the link always ready, consecutive MWr TLPs are separated by exactly their own
    # beats: no idle beat between requests or between transfers (what the bandwidth
    # figures rely on).
    mem = gen.card.memory
    gen.run(OP_WRITE, transfer_size=size, count=6, payload_log2=8)
    n = gen.card.dwords_per_beat
    beats = -(-(3 + min(size, 256) // 4) // n)
    gaps = {b["cycle"] - a["cycle"] for a, b in zip(mem.log, mem.log[1:])}
    assert gaps == {beats}, gaps


def test_flushing_read_ends_a_write_run_after_every_write(gen):
    mem = gen.card.memory
    mem.latency = 100
    c = gen.run(OP_WRITE, transfer_size=512, count=4, flush=1)
    writes = [e for e in mem.log if e["kind"] == "write"]
    reads = [e for e in mem.log if e["kind"] == "read"]
    assert len(writes) == 8 and len(reads) == 1
    flush = reads[0]
    assert flush["tag"] == TAG_BASE + TAGS and flush["dws"] == 1 and flush["addr"] == BASE
    assert mem.log[-1] is flush  # after every write
    # The run's cycles cover the flush's round trip; no read is counted, nothing unexpected.
    assert c["cycles"] >= flush["cycle"] - writes[0]["cycle"] + mem.latency
    assert (c["read_requests"], c["read_bytes"], c["err_unexpected"]) == (0, 0, 0)
    assert c["write_bytes"] == 4 * 512
