"""Leases on the Verilated card: one owner per block, and a job that ends with its owner.

    host model ──claim(token)──► block.lease_* ──owner, left──► (no refresh for `length` cycles)
                                      └── stop ──► the block's job ends: no further DMA, no MSI

The first test pins the lease's rules on one block (claims, refusals, refresh, release,
expiry, the counters); the others give each block that acts on its own a running job, let
its lease expire and check on the host memory's log that nothing more was written to the
host after the expiry (allowing the TLP already on its way), and that the block says so.
Widths 64, 128 and 256 bits.
"""

from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.generator.core import OP_WRITE
from tlpx_gateware.cores.irq_timer.core import MODE_PERIODIC
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES
from tlpx_gateware.testing.generator import GeneratorDriver
from tlpx_gateware.testing.memory import BASE, SIZE

RING = BASE + 0x8000


def lw(card, block, name, value, words=1):
    off = reg(f"{block}.lease_{name}")
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def lr(card, block, name, words=1):
    off = reg(f"{block}.lease_{name}")
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def w(card, name, value, words=1):
    off = reg(name)
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def r(card, name):
    return card.read32(reg(name))


def claim(card, block, token, length):
    lw(card, block, "length", length)
    lw(card, block, "claim", token)
    return lr(card, block, "owner")


def writes_after(card, cycle):
    """Host memory writes by the card that began after `cycle`."""
    return [e for e in card.memory.log if e["kind"] == "write" and e["cycle"] > cycle]


def test_claims_refusals_refresh_release_and_expiry(card):
    card.memory = HostMemory(BASE, SIZE)
    block = "spy"
    assert lr(card, block, "owner") == 0 and lr(card, block, "left") == 0
    assert claim(card, block, 0xA1, 5000) == 0xA1          # free: the claim wins
    since = lr(card, block, "since", 2)
    assert 0 < since <= card.cycles
    assert claim(card, block, 0xB2, 5000) == 0xA1          # owned: refused
    lw(card, block, "claim", 0)                            # token 0 is never an owner
    lw(card, block, "release", 0xB2)                       # not the owner's token
    assert lr(card, block, "owner") == 0xA1 and lr(card, block, "refusals") == 3
    card.run(3000)
    left = lr(card, block, "left")
    assert 1000 < left < 2100
    lw(card, block, "claim", 0xA1)                         # refresh
    assert lr(card, block, "left") > 4900 and lr(card, block, "since", 2) == since
    lw(card, block, "release", 0xA1)
    assert lr(card, block, "owner") == 0 and lr(card, block, "expiries") == 0
    assert claim(card, block, 0xB2, 300) == 0xB2           # free again
    card.run(400)
    assert lr(card, block, "owner") == 0 and lr(card, block, "expiries") == 1 and lr(card, block, "left") == 0
    # The identity registers are the owner's to write; the card keeps them.
    assert claim(card, block, 0xC3, 10000) == 0xC3
    lw(card, block, "pid", 4321)
    assert lr(card, block, "pid") == 4321


def test_spy_capture_halts_when_its_lease_expires(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    w(card, "spy.control", 0b10)  # clear
    w(card, "spy.ring_base", RING, 2)
    w(card, "spy.ring_size_log2", 8)
    w(card, "spy.payload_size_log2", 8)
    w(card, "spy.flush_cycles", 16)
    assert claim(card, "spy", 0x51, 3000) == 0x51
    w(card, "spy.control", 1)     # enable
    for i in range(8):            # traffic the spy records and writes to its ring
        w(card, "pio.read_delay", i)
    card.run(200)
    before = r(card, "spy.wr_index")
    assert before > 0
    card.run(3000)                # no refresh: the lease expires
    expired_at = card.cycles
    assert lr(card, "spy", "expiries") == 1 and lr(card, "spy", "owner") == 0
    status = r(card, "spy.status")
    assert status & 0b100         # halted
    settled = r(card, "spy.wr_index")
    for i in range(8):            # more traffic: nothing of it reaches the ring
        w(card, "pio.read_delay", i)
    card.run(500)
    assert r(card, "spy.wr_index") == settled
    assert writes_after(card, expired_at + 20) == []
    w(card, "spy.control", 0b10)  # a clear (the next capture) lifts the halt
    assert r(card, "spy.status") & 0b100 == 0


def test_generator_run_stops_when_its_lease_expires(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    gen = GeneratorDriver(card)
    gen.w("control", 0b100)
    for name, value in [("config", OP_WRITE), ("transfer_size", 4096), ("count", 0), ("duration", 10_000_000),
                        ("payload_size_log2", 7), ("base", BASE), ("window_mask", SIZE - 1), ("stride_log2", 12)]:
        gen.w(name, value)
    assert claim(card, "generator", 0x6E, 2000) == 0x6E
    gen.w("control", 0b001)       # start: writes for 10 M cycles unless stopped
    card.run(2500)
    expired_at = card.cycles
    card.run(200)
    status = gen.r("status")
    assert status & 0b10 and not status & 0b1   # done, not running
    assert (status >> 2) & 3 == 3              # ended by: stopped
    assert lr(card, "generator", "expiries") == 1
    late = writes_after(card, expired_at + 64)
    assert late == [], late[:3]
    assert gen.r("write_requests", 2) > 0


def test_irq_timer_stops_firing_and_writing_when_its_lease_expires(card):
    card.memory = HostMemory(BASE, SIZE)
    w(card, "irq_timer.control", 0b100)
    w(card, "irq_timer.config", MODE_PERIODIC)
    w(card, "irq_timer.min_interval", 200)
    w(card, "irq_timer.max_interval", 200)
    w(card, "irq_timer.count", 0)            # fire until stopped
    w(card, "irq_timer.ring_base", RING, 2)
    w(card, "irq_timer.ring_size_log2", 8)
    w(card, "irq_timer.flush_cycles", 16)
    w(card, "pcie_msi.enable", 1 << MSI_SOURCES.index("irq_timer"))
    assert claim(card, "irq_timer", 0x17, 2000) == 0x17
    w(card, "irq_timer.control", 0b001)
    card.run(2200)
    expired_at = card.cycles
    fires = r(card, "irq_timer.fires")
    assert fires > 3
    status = r(card, "irq_timer.status")
    assert not status & 0b1 and status & 0b1000  # not running, halted
    card.msis.clear()
    card.run(1000)
    assert r(card, "irq_timer.fires") == fires and card.msis == []
    assert writes_after(card, expired_at + 20) == []


def test_rt_loop_ends_when_its_lease_expires(card):
    card.memory = HostMemory(BASE, SIZE)
    w(card, "rt_loop.control", 0b100)
    w(card, "rt_loop.buffer_base", BASE, 2)
    w(card, "rt_loop.size", 256)
    w(card, "rt_loop.iterations", 1000)
    w(card, "rt_loop.seed", 5)
    w(card, "rt_loop.config", 1)             # MSI per buffer
    w(card, "pcie_msi.enable", 1 << MSI_SOURCES.index("rt_loop"))
    assert claim(card, "rt_loop", 0x2B, 1500) == 0x2B
    w(card, "rt_loop.control", 0b001)
    card.run(300)
    assert card.memory.word(BASE) == 5       # the first buffer and its token are there
    assert r(card, "rt_loop.status") & 0b10  # waiting for the host's result, which never comes
    card.run(1400)
    expired_at = card.cycles
    card.run(50)
    assert r(card, "rt_loop.status") & 0b1 == 0  # not running
    card.msis.clear()
    w(card, "rt_loop.result", 0)             # a result now ends nothing and starts nothing
    card.run(500)
    assert writes_after(card, expired_at) == [] and card.msis == []
    assert lr(card, "rt_loop", "expiries") == 1


def test_rule30_batch_aborts_when_its_lease_expires(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    # A descriptor list whose reads are never answered: the batch stays in its first read
    # until the read timeout (3000 cycles), long after the lease (1000 cycles) has expired.
    card.memory.faults = {i: "drop" for i in range(64)}
    w(card, "rule30_batch.control", 0b100)
    w(card, "rule30_batch.descriptor_base", BASE, 2)
    w(card, "rule30_batch.descriptor_bytes", 4096)
    w(card, "rule30_batch.count", 100)
    w(card, "rule30_batch.result_base", BASE + 0x4000, 2)
    w(card, "rule30_batch.read_timeout", 3000)
    assert claim(card, "rule30_batch", 0x30, 1000) == 0x30
    w(card, "rule30_batch.control", 0b001)
    card.run(200)
    assert r(card, "rule30_batch.status") & 0b1  # running
    card.run(1200)
    assert lr(card, "rule30_batch", "expiries") == 1
    status = r(card, "rule30_batch.status")
    assert status & (1 << 14)                    # aborted by the lease
    card.run(3500)                               # its outstanding read given up: the batch ends
    status = r(card, "rule30_batch.status")
    assert not status & 0b1 and status & 0b10 and status & (1 << 14)
    assert writes_after(card, 0) == []           # no result was written
