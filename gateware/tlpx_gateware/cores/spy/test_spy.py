"""Passive spy on the Verilated card: one record per TLP, filters, trigger, ring, loss.

    host model ─TLPs─► card ─TLPs─► host model          (every TLP logged by the harness)
                  └── spy taps both directions ──► ring in HostMemory (MWr, own traffic)

The records the spy writes to its ring are compared with the harness's own log of the link:
count, direction, type, order. Latency is checked against the generator's own counters,
filters and trigger against hand-picked traffic, and a small ring that the host never
empties must give counted loss and a sequence gap.
"""

import pytest

from tlpx_gateware import tlp
from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.generator.core import FLUSH_TAG, OP_READ, OP_WRITE, TAG_BASE
from tlpx_gateware.cores.spy.core import CLASSES, RECORD_FIFO_DEPTH, TRIGGER_START
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.testing.generator import GeneratorDriver
from tlpx_gateware.testing.memory import BASE, SIZE, fill
from tlpx_gateware.testing.spy import RING, RING_LOG2, decode, enable, setup, spy_r, spy_w, write_reg


def ring_records(card):
    card.run(400)  # let the flush timer write partial batches
    n = spy_r(card, "wr_index")
    cap = 1 << RING_LOG2
    out = []
    for i in range(max(0, n - cap), n):
        off = RING - BASE + 32 * (i % cap)
        out.append(decode(bytes(card.memory.data[off:off + 32])))
    return out


def link_between(card, start, stop):
    """The harness's log of TLPs in (start, stop], without the spy's own ring writes. The
    write that enables capture is not recorded (it is summarised before it takes effect);
    the one that disables it is."""
    ring_end = RING + 32 * (1 << RING_LOG2)
    own = {e["cycle"] for e in card.memory.log if e["kind"] == "write" and RING <= e["addr"] < ring_end}
    return [(d, dw0) for (c, d, dw0) in card.link_log if start < c <= stop and not (d == 1 and c in own)]


def test_every_tlp_of_mmio_traffic_gets_one_record(card):
    card.memory = HostMemory(BASE, SIZE)
    setup(card)
    enable(card)
    start = card.cycles
    for i in range(10):
        card.write32(reg("ident.scratch"), i)
        card.read32(reg("ident.scratch"))
    enable(card, False)
    stop = card.cycles
    recs = ring_records(card)
    link = link_between(card, start, stop)
    # Per direction, the records follow the link TLP by TLP (the two directions are merged
    # into one record stream, so only each direction's own order is defined).
    for d in (0, 1):
        got = [r["dw0"] & 0xFF0003FF for r in recs if r["dir"] == d]
        want = [dw0 & 0xFF0003FF for dd, dw0 in link if dd == d]
        assert got == want, d
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert spy_r(card, "lost") == 0
    # Reads are matched with their completions: latency = completion start - request start.
    reqs = {r["tag"]: r for r in recs if r["dir"] == 0 and r["type"] == tlp.TYPE_MEM and not r["fmt"] & 2}
    cpls = [r for r in recs if r["is_cpl"]]
    assert cpls and all(c["matched"] and c["last"] and c["split"] == 1 for c in cpls)
    for c in cpls:
        assert c["latency"] == (c["time"] - reqs[c["tag"]]["time"]) & 0xFFFFFFFF


def test_generator_traffic_records_and_latency_agree(card):
    card.memory = HostMemory(BASE, SIZE, latency=60)
    fill(card.memory)
    setup(card)
    g = GeneratorDriver(card)
    enable(card)
    start = card.cycles
    c = g.run(OP_READ, transfer_size=256, count=12, outstanding=1, window=0x8000)
    enable(card, False)
    stop = card.cycles
    recs = ring_records(card)
    link = link_between(card, start, stop)
    # The generator's MSI at the end of its run is on no PHY stream: an MSI record of its own.
    msis = [r for r in recs if r["fmt"] == 7 and r["type"] == 4]
    assert len(msis) == len(card.msis) == 1
    recs = [r for r in recs if r not in msis]
    assert len(recs) == len(link)
    mrd = [r for r in recs if r["dir"] == 1 and r["type"] == tlp.TYPE_MEM and r["own"] == 0]
    assert len(mrd) == c["read_requests"] == 12
    cpl = [r for r in recs if r["dir"] == 0 and r["is_cpl"]]
    assert len(cpl) == c["completions"] and all(r["matched"] for r in cpl)
    # The generator measures request's last beat -> last completion's last beat at its own
    # input; the spy request's first beat -> last completion's first beat at the PHY. They
    # differ by the two durations and, on the 64-bit datapath, by the one beat the completion
    # dispatcher holds back to see the tag.
    lasts = [r for r in cpl if r["last"]]
    spy = sorted(r["latency"] + r["duration"] - next(m for m in mrd if m["tag"] == r["tag"] and m["time"] < r["time"])["duration"]
                 for r in lasts)
    assert len(lasts) == 12 and max(r["split"] for r in lasts) == 256 // 64
    lookahead = 1 if card.data_width == 64 else 0
    assert sorted(c["samples"]) == [x + lookahead for x in spy]


def test_filters_pick_exactly_the_matching_records(card):
    card.memory = HostMemory(BASE, SIZE)
    scratch = reg("ident.scratch")
    setup(card, direction_mask=0b01, class_mask=1 << CLASSES.index("mwr"),
          address_base=scratch, address_mask=0xFFFFC)
    enable(card)
    for i in range(5):
        card.write32(scratch, i)
        card.write32(reg("ident.scratch") + 4 - 4, i)  # same register
        card.write32(reg("pio.read_delay"), 0)         # another address: filtered out
        card.read32(scratch)                           # a read: filtered out
    enable(card, False)
    recs = ring_records(card)
    assert len(recs) == 10
    assert all(r["dir"] == 0 and r["fmt"] & 2 and r["address"] & 0xFFFFC == scratch for r in recs)


def test_trigger_start_keeps_pre_and_post_records(card):
    card.memory = HostMemory(BASE, SIZE)
    scratch = reg("ident.scratch")
    target = reg("pio.read_delay")
    setup(card, trigger=TRIGGER_START | (0xFF << 8) | (0b11 << 16), trigger_address_base=target,
          trigger_address_mask=0xFFFFC, trigger_pre=2, trigger_post=3, direction_mask=0b01)
    enable(card)
    for i in range(6):
        card.write32(scratch, i)
    card.write32(target, 7)  # the trigger
    for i in range(6):
        card.write32(scratch, 100 + i)
    enable(card, False)
    recs = ring_records(card)
    values = [r["address"] & 0xFFFFC for r in recs]
    assert values == [scratch, scratch, target, scratch, scratch]
    assert spy_r(card, "status") & 0b11 == 0b11  # triggered, stopped
    assert spy_r(card, "lost") == 0


def test_full_ring_gives_counted_loss_and_a_sequence_gap(card):
    card.memory = HostMemory(BASE, SIZE)
    setup(card, ring_log2=4)  # 16 records; the host never consumes them
    enable(card)
    for i in range(RECORD_FIFO_DEPTH + 300):  # more than the ring (16) and the record FIFO hold
        card.write32(reg("ident.scratch"), i)
    card.run(200)
    enable(card, False)
    written = spy_r(card, "wr_index")
    numbered = spy_r(card, "sequence")
    lost = spy_r(card, "lost")
    waiting = (spy_r(card, "status") >> 8) & 0xFFFF
    assert written == 16
    assert lost > 0
    assert numbered == written + waiting + lost + 0  # every numbered record is accounted for
    # After the host consumes the ring, the next records show the gap in their sequence.
    spy_w(card, "rd_index", 16)
    card.run(2000)
    assert spy_r(card, "wr_index") > 16
    # The ring's first slot now holds the oldest record the FIFO kept: its sequence number
    # jumps past the lost ones.
    first_new = decode(bytes(card.memory.data[RING - BASE:RING - BASE + 32]))
    assert first_new["seq"] == 16


def test_dropped_completion_gives_a_timeout_event(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    fill(card.memory)
    card.memory.faults = {0: "drop"}
    setup(card, timeout=500)
    enable(card)
    GeneratorDriver(card).run(OP_READ, transfer_size=64, count=2, timeout=3000, window=0x8000)
    card.run(1500)
    enable(card, False)
    recs = ring_records(card)
    events = [r for r in recs if r["fmt"] == 7 and r["type"] != 4]  # not the run's MSI
    assert len(events) == 1 and events[0]["type"] == 1 and events[0]["dir"] == 1
    assert TAG_BASE <= events[0]["tag"] <= FLUSH_TAG and events[0]["w"][6] > 500
    assert events[0]["w"][4] & 0xFFFF == card.CARD_ID  # the read's requester: the card
    # The event carries the timestamp of the read it gave up on (64-bit, as the read's record).
    read = next(r for r in recs if r["dir"] == 1 and r["type"] == tlp.TYPE_MEM and r["tag"] == events[0]["tag"])
    assert events[0]["time"] == read["time"]


def test_live_counters_count_every_tlp(card):
    card.memory = HostMemory(BASE, SIZE)
    setup(card)
    for i in range(7):
        card.write32(reg("ident.scratch"), i)
    spy_w(card, "counter_select", CLASSES.index("mwr"))  # down, MWr
    counts = {name: card.read32(reg(f"spy.count_{name}")) for name in ("tlps", "payload", "bytes")}
    # Counters run even with capture off: the 7 writes, the set-up writes and the select.
    assert counts["tlps"] >= 8
    assert counts["payload"] == 4 * counts["tlps"] and counts["bytes"] == 16 * counts["tlps"]


# The records through LitePCIe's DMA writer (control.to_dma_writer), as with LitePCIe's stock
# driver: four 1 KiB buffers (32 records each) in loop mode, as the driver's 256 of 8 KiB.
WRITER_BUF = BASE + 0x4000
WRITER_BUFS, WRITER_BUF_RECORDS = 4, 32


def start_writer(card):
    for name, value in (("writer_enable", 0), ("loopback_enable", 0), ("writer_table_reset", 1),
                        ("writer_table_loop_prog_n", 0)):
        write_reg(card, f"pcie_dma0.{name}", value)
    for k in range(WRITER_BUFS):
        write_reg(card, "pcie_dma0.writer_table_value", (WRITER_BUF + 32 * WRITER_BUF_RECORDS * k) | ((32 * WRITER_BUF_RECORDS) << 32), 2)
        write_reg(card, "pcie_dma0.writer_table_we", 0)
    write_reg(card, "pcie_dma0.writer_table_loop_prog_n", 1)
    write_reg(card, "pcie_dma0.writer_enable", 1)


def writer_slots(card, first, n):
    slots = WRITER_BUFS * WRITER_BUF_RECORDS
    out = []
    for i in range(first, first + n):
        off = WRITER_BUF - BASE + 32 * (i % slots)
        out.append(bytes(card.memory.data[off:off + 32]))
    return out


def test_records_through_litepcie_dma_writer_are_the_links_tlps_without_their_transport(card):
    card.memory = HostMemory(BASE, SIZE)
    setup(card)
    start_writer(card)
    spy_w(card, "control", 0b1001)  # enable, to_dma_writer
    start = card.cycles
    for i in range(30):  # 60 TLPs down, 30 up: more than the four buffers hold before the last pad
        card.write32(reg("ident.scratch"), i)
        card.read32(reg("ident.scratch"))
    spy_w(card, "control", 0b1000)  # capture off, records still to the writer
    stop = card.cycles
    card.run(400)
    n = spy_r(card, "wr_index")
    pad = (WRITER_BUF_RECORDS - n % WRITER_BUF_RECORDS) % WRITER_BUF_RECORDS
    spy_w(card, "pad", pad)
    card.run(3000)
    assert spy_r(card, "wr_index") == n + pad
    # The ring went round: only the last WRITER_BUFS buffers' worth is still there, in order.
    kept = min(n, WRITER_BUFS * WRITER_BUF_RECORDS - pad)
    recs = [decode(raw) for raw in writer_slots(card, n - kept, kept)]
    assert [r["seq"] for r in recs] == list(range(n - kept, n))
    assert all(raw == bytes(32) for raw in writer_slots(card, n, pad)), "pad records are zero"
    # The writer's MWr that carry the records are not recorded (they are the capture's own).
    writes = {e["cycle"] for e in card.memory.log if e["kind"] == "write"
              and WRITER_BUF <= e["addr"] < WRITER_BUF + 32 * WRITER_BUF_RECORDS * WRITER_BUFS}
    assert writes, "the DMA writer wrote no buffer"
    link = [(d, dw0) for (c, d, dw0) in card.link_log if start < c <= stop and not (d == 1 and c in writes)]
    assert n == len(link) and spy_r(card, "lost") == 0
    for d in (0, 1):
        got = [r["dw0"] & 0xFF0003FF for r in recs if r["dir"] == d]
        want = [dw0 & 0xFF0003FF for dd, dw0 in link if dd == d]
        assert got == want[len(want) - len(got):], d
    assert not any(r["dir"] == 1 and r["fmt"] & 2 and WRITER_BUF <= (r["address"] or 0) < WRITER_BUF + 0x1000 for r in recs)
    write_reg(card, "pcie_dma0.writer_enable", 0)
    spy_w(card, "control", 0b10)


def test_ring_mode_sends_nothing_to_the_dma_writer(card):
    """Without to_dma_writer, pad does nothing and the records go to the ring only."""
    card.memory = HostMemory(BASE, SIZE)
    setup(card)
    start_writer(card)
    enable(card)
    for i in range(5):
        card.write32(reg("ident.scratch"), i)
    enable(card, False)
    spy_w(card, "pad", 7)
    recs = ring_records(card)
    # The five writes and the one that disabled capture (recorded: see link_between).
    assert len(recs) == 6 and spy_r(card, "wr_index") == 6
    assert all(raw == bytes(32) for raw in writer_slots(card, 0, WRITER_BUF_RECORDS))
    write_reg(card, "pcie_dma0.writer_enable", 0)
    spy_w(card, "control", 0b10)
