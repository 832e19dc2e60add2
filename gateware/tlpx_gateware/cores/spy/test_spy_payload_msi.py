"""Spy record format 2 on the Verilated card: payload records, MSI records, trigger sequence,
own-traffic counters, and zero loss for back-to-back bursts.

    host model ─MWr/CplD (known data)─► card ─MWr (generator pattern)─► host memory
                  └── spy: TLP record + payload records (fmt 7 type 5) ──► ring
    MSI block ─msi stream─► hard IP (harness)  └── spy: MSI record (fmt 7 type 4)

The payload the spy records must be the bytes of the TLP in address order: for the card's
writes, the bytes the host model stored in memory; for the host's writes and completions, the
bytes the host model sent. Every width (64, 128, 256 bits) puts a TLP's data DWs in other
lanes and beats, so each test runs on all three cards.
"""

import pytest

from tlpx_gateware import tlp
from tlpx_gateware.conftest import csr_map, reg
from tlpx_gateware.cores.generator.core import OP_READ, OP_WRITE, TAG_BASE, TAGS
from tlpx_gateware.cores.spy.core import (CLASSES, EVENT_MSI, EVENT_PAYLOAD, PAYLOAD_DWS_MAX, PAYLOAD_RECORD_DWS,
                                          RECORD_FIFO_DEPTH, TRIGGER_START, summary_fifo_depth)
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import MSI_SOURCES, PIO_WINDOW_BASE
from tlpx_gateware.testing.generator import GeneratorDriver
from tlpx_gateware.testing.memory import BASE, SIZE, fill
from tlpx_gateware.testing.spy import RING, RING_LOG2, decode, enable, setup, spy_r, spy_w
from tlpx_gateware.testing.spy_burst import burst


def payload_word(dws, classes=0xFF, directions=0b11):
    """spy.payload: dws, class_mask, direction_mask (fields by name from the card's map)."""
    return csr_map().encode("spy.payload", dws=dws, class_mask=classes, direction_mask=directions)


def records(card, ring_log2=RING_LOG2):
    card.run(400)  # the flush timer writes the last partial batch
    n = spy_r(card, "wr_index")
    cap = 1 << ring_log2
    assert n <= cap, "the ring wrapped: the test would miss records"
    return [decode(bytes(card.memory.data[RING - BASE + 32 * i:RING - BASE + 32 * (i + 1)])) for i in range(n)]


def payload_of(rec):
    w3 = rec["w"][3]
    return {"first_dw": (w3 >> 9) & 0x1F, "count": (w3 >> 14) & 7, "final": (w3 >> 17) & 1,
            "dws": [rec["w"][i] for i in (1, 2, 4, 5, 6, 7)]}


def entries(recs):
    """TLP records with the payload DWs of the payload records that follow them (checked:
    numbered right after their TLP, first_dw in order, the last one final)."""
    out = []
    for r in recs:
        if r["fmt"] == 7 and r["type"] == EVENT_PAYLOAD:
            tlp_rec, dws = out[-1]
            p = payload_of(r)
            assert r["seq"] == tlp_rec["seq"] + 1 + len(dws) // PAYLOAD_RECORD_DWS, "payload record out of place"
            assert p["first_dw"] == len(dws) and 1 <= p["count"] <= PAYLOAD_RECORD_DWS
            assert r["dir"] == tlp_rec["dir"]
            assert all(d == 0 for d in p["dws"][p["count"]:]), "unused payload words are 0"
            dws.extend(p["dws"][:p["count"]])
            tlp_rec["final_seen"] = p["final"]
        else:
            out.append((r, []))
    for r, dws in out:
        assert not dws or r.get("final_seen") == 1
    return out


def as_bytes(dws):
    return b"".join(d.to_bytes(4, "little") for d in dws)


def pio_write(card, offset, data):
    card.send([tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_MEM, len(data)),
               (card.HOST_ID << 16) | ((0xF if len(data) > 1 else 0) << 4) | 0xF,
               PIO_WINDOW_BASE + offset] + list(data))
    card.run_until(lambda: not card.tx_queue)


# Bytes 00 01 02 03 | 04 05 06 07 | ...: a DW's bytes in address order, little-endian words.
def known(n, start=0):
    return [int.from_bytes(bytes((4 * i + b) & 0xFF for b in range(4)), "little") for i in range(start, start + n)]


@pytest.mark.parametrize("dws,length", [(0, 8), (4, 8), (16, 20), (16, 3), (6, 6), (7, 12)])
def test_payload_of_host_writes_is_the_written_bytes_in_address_order(card, dws, length):
    card.memory = HostMemory(BASE, SIZE)
    setup(card, payload=payload_word(dws), direction_mask=0b01, class_mask=1 << CLASSES.index("mwr"))
    enable(card)
    data = known(length)
    pio_write(card, 0x100, data)
    enable(card, False)
    got = entries(records(card))
    writes = [(r, p) for r, p in got if r["address"] == PIO_WINDOW_BASE + 0x100]
    assert len(writes) == 1
    r, payload = writes[0]
    assert r["length"] == length
    assert payload == data[:min(dws, length)]
    assert as_bytes(payload) == bytes(range(4 * min(dws, length)))
    # Numbered records: the TLP's, then 1..3 payload records; nothing lost.
    assert [x["seq"] for x in records(card)] == list(range(spy_r(card, "sequence")))
    assert spy_r(card, "lost") == 0


def test_payload_of_generator_writes_is_what_reached_host_memory(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    setup(card, payload=payload_word(16), direction_mask=0b10, class_mask=1 << CLASSES.index("mwr"))
    enable(card)
    GeneratorDriver(card).run(OP_WRITE, transfer_size=1024, count=2, payload_log2=6, request_log2=9, window=0x8000)
    enable(card, False)
    writes = [(r, p) for r, p in entries(records(card)) if r["fmt"] & 2 and r["own"] == 0]
    assert len(writes) == 2 * 1024 // 64
    for r, payload in writes:
        assert r["length"] == 16 and len(payload) == 16
        off = r["address"] - BASE
        assert as_bytes(payload) == bytes(card.memory.data[off:off + 64])


@pytest.mark.parametrize("dws", [4, 16])
def test_payload_of_completions_is_host_memory_from_the_lower_address(card, dws):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    fill(card.memory)
    setup(card, payload=payload_word(dws), direction_mask=0b11, class_mask=(1 << CLASSES.index("cpld")) | (1 << CLASSES.index("mrd")))
    enable(card)
    GeneratorDriver(card).run(OP_READ, transfer_size=256, count=3, outstanding=1, window=0x8000)
    enable(card, False)
    got = entries(records(card))
    reads = {}
    checked = 0
    for r, payload in got:
        if r["dir"] == 1 and r["type"] == tlp.TYPE_MEM and not r["fmt"] & 2:
            reads[r["tag"]] = [r["address"], 0]
            assert payload == [], "no payload for a read"
        elif r["is_cpl"] and r["dir"] == 0:
            address, done = reads[r["tag"]]
            at = address + done - BASE
            reads[r["tag"]][1] += 4 * r["length"]
            assert len(payload) == min(dws, r["length"])
            assert as_bytes(payload) == bytes(card.memory.data[at:at + 4 * len(payload)])
            checked += 1
    assert checked == 3 * 256 // 64


def test_payload_masks_pick_classes_and_directions(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    fill(card.memory)
    # Payload of completions only, and of the down direction only: the host's MWr and the
    # card's MWr get none; CplD (down) get theirs.
    setup(card)
    spy_w(card, "payload", payload_word(16, classes=1 << CLASSES.index("cpld"), directions=0b01))
    enable(card)
    pio_write(card, 0x200, known(4))
    g = GeneratorDriver(card)
    g.run(OP_READ, transfer_size=64, count=2, outstanding=1, window=0x8000)
    g.run(OP_WRITE, transfer_size=64, count=2, window=0x8000)
    enable(card, False)
    got = entries(records(card))
    cplds = [p for r, p in got if r["is_cpl"] and r["fmt"] & 2 and r["dir"] == 0]
    mwrs = [p for r, p in got if not r["is_cpl"] and r["fmt"] & 2 and r["type"] == tlp.TYPE_MEM]
    assert len(cplds) >= 2 and all(len(p) == 16 for p in cplds)
    assert len(mwrs) >= 3 and all(p == [] for p in mwrs)
    # Direction mask: up only -> the down CplD carry nothing either.
    setup(card)
    spy_w(card, "payload", payload_word(16, directions=0b10))
    enable(card)
    g.run(OP_READ, transfer_size=64, count=1, outstanding=1, window=0x8000)
    enable(card, False)
    got = entries(records(card))
    assert all(p == [] for r, p in got if r["dir"] == 0)
    assert any(p for r, p in got if r["dir"] == 1 and r["fmt"] & 2 and r["own"] == 0) or \
        not any(r["dir"] == 1 and r["fmt"] & 2 and r["own"] == 0 for r, _ in got)


def test_msi_record_carries_vector_sources_time_and_wait(card):
    card.memory = HostMemory(BASE, SIZE)
    setup(card)
    sources = (1 << MSI_SOURCES.index("software")) | (1 << MSI_SOURCES.index("slot"))
    card.write32(reg("pcie_msi.enable"), sources)
    enable(card)
    card.msis.clear()
    # The hard IP holds the MSI off for 25 cycles: the record says how long it waited.
    card.inputs.msi_ready = 0
    card.write32(reg("ident.software_irq"), 1)
    card.run_until(lambda: card.outputs.msi_valid)
    card.run(25)
    card.inputs.msi_ready = 1
    card.run_until(lambda: card.msis)
    card.write32(reg("pcie_msi.clear"), 1 << MSI_SOURCES.index("software"))
    enable(card, False)
    msis = [r for r in records(card) if r["fmt"] == 7 and r["type"] == EVENT_MSI]
    assert len(msis) == len(card.msis) == 1
    m = msis[0]
    assert m["dir"] == 1 and m["w"][7] == 0
    assert m["w"][4] == card.msis[0][1]                         # the vector the hard IP got
    assert m["w"][5] == 1 << MSI_SOURCES.index("software")       # the source that fired (enabled, pending)
    assert m["time"] == card.msis[0][0] - 1                      # the cycle of the handshake
    assert 24 <= m["w"][6] <= 26                                 # cycles held off
    assert card.read32(reg("spy.msi_count")) == 1


def test_msi_class_off_records_no_msi_but_counts_it(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    setup(card, class_mask=((1 << len(CLASSES)) - 1) & ~(1 << CLASSES.index("msi")))
    enable(card)
    GeneratorDriver(card).run(OP_WRITE, transfer_size=64, count=1, window=0x8000)
    enable(card, False)
    recs = records(card)
    assert recs and not any(r["fmt"] == 7 and r["type"] == EVENT_MSI for r in recs)
    assert card.read32(reg("spy.msi_count")) == 1
    # With the class on, the same run gives one MSI record with the generator's source.
    setup(card, class_mask=(1 << len(CLASSES)) - 1)
    enable(card)
    GeneratorDriver(card).run(OP_WRITE, transfer_size=64, count=1, window=0x8000)
    enable(card, False)
    msis = [r for r in records(card) if r["fmt"] == 7 and r["type"] == EVENT_MSI]
    assert len(msis) == 1 and msis[0]["w"][5] >> MSI_SOURCES.index("generator") & 1


def test_trigger_sequence_is_the_matching_records_number(card):
    card.memory = HostMemory(BASE, SIZE)
    scratch = reg("ident.scratch")
    target = reg("pio.read_delay")
    setup(card, trigger=TRIGGER_START | (0xFF << 8) | (0b11 << 16), trigger_address_base=target,
          trigger_address_mask=0xFFFFC, trigger_pre=2, trigger_post=3, direction_mask=0b01)
    enable(card)
    for i in range(6):
        card.write32(scratch, i)
    card.write32(target, 7)
    for i in range(3):
        card.write32(scratch, 100 + i)
    enable(card, False)
    recs = records(card)
    hit = [r for r in recs if r["address"] is not None and r["address"] & 0xFFFFC == target]
    assert len(hit) == 1 and hit[0]["seq"] >= 6
    assert spy_r(card, "status") & 1
    assert spy_r(card, "trigger_sequence") == hit[0]["seq"]
    spy_w(card, "control", 0b10)
    assert spy_r(card, "trigger_sequence") == 0 and spy_r(card, "status") & 1 == 0


def test_own_counters_are_the_ring_writes_on_the_link(card):
    card.memory = HostMemory(BASE, SIZE)
    setup(card)
    enable(card)
    for i in range(40):
        card.write32(reg("ident.scratch"), i)
    enable(card, False)
    card.run(400)
    ring_end = RING + 32 * (1 << RING_LOG2)
    own = [e for e in card.memory.log if e["kind"] == "write" and RING <= e["addr"] < ring_end]
    assert own
    lo = card.read32(reg("spy.own_tlps"))
    assert lo == len(own)
    assert card.read32(reg("spy.own_bytes")) == sum(4 * (e["hdr_dws"] + e["dws"]) for e in own)
    spy_w(card, "control", 0b10)
    assert card.read32(reg("spy.own_tlps")) == 0


def test_ring_above_4gib_uses_4dw_headers(card):
    """The ring writer packs records behind a 4-DW header too (another lane offset)."""
    high = 0x1_0000_0000
    card.memory = HostMemory(high, 1 << 16)
    spy_w(card, "control", 0b10)
    spy_w(card, "ring_base", high, 2)
    spy_w(card, "ring_size_log2", 10)
    spy_w(card, "payload_size_log2", 8)
    spy_w(card, "flush_cycles", 64)
    spy_w(card, "rd_index", 0)
    enable(card)
    for i in range(20):
        card.write32(reg("ident.scratch"), i)
    enable(card, False)
    card.run(400)
    n = spy_r(card, "wr_index")
    recs = [decode(bytes(card.memory.data[32 * i:32 * (i + 1)])) for i in range(n)]
    assert n >= 20 and [r["seq"] for r in recs] == list(range(n))
    assert all(e["hdr_dws"] == 4 for e in card.memory.log if e["kind"] == "write")
    assert sum(1 for r in recs if r["dir"] == 0 and r["fmt"] & 2) >= 20


# Zero loss ----------------------------------------------------------------------------------------
# The buffers a burst fills when the ring writer cannot keep up: the record FIFO, and on 128
# and 256 bits (where both directions bring up to one summary per cycle each, two together,
# and the builder takes one) each direction's summary FIFO.
def buffered_records(width):
    return RECORD_FIFO_DEPTH + (2 * summary_fifo_depth(width) if width > 64 else 0)


def test_back_to_back_burst_both_directions_loses_nothing(card):
    # Bursts as long as the buffers alone hold (the ring writer also drains them meanwhile).
    n = buffered_records(card.data_width) // 2
    r = burst(card, n)
    assert r["lost"] == 0
    # Every TLP of the burst and every other record (set-up writes, the generator's MSI)
    # numbered and written: the ring holds all of them.
    assert r["sequence"] == r["wr_index"] >= 2 * n
    assert r["own_tlps"] > 0


def test_burst_beyond_the_buffers_counts_its_loss(card):
    # Payload capture makes two records of every TLP of this burst (the builder takes two
    # cycles for each): far beyond what the buffers hold.
    n = buffered_records(card.data_width)
    r = burst(card, n, payload_dws=1)
    assert r["lost"] > 0
    # Every numbered record is written or counted lost: nothing disappears.
    assert r["sequence"] == r["wr_index"] + r["lost"]


def test_lease_ending_mid_ring_write_finishes_the_tlp(card):
    """The lease ends while the ring writer is sending (records waiting, the writer busy every
    cycle): the spy empties its FIFO, the TLP on its way is finished, and the link carries the
    card's other TLPs again (a half-sent TLP would hold the transmit arbiter)."""
    card.memory = HostMemory(BASE, 1 << 20)
    setup(card, ring_log2=14)  # 16384 records: the ring never fills here
    spy_w(card, "lease_length", 200)
    spy_w(card, "lease_claim", 7)
    enable(card)
    for i in range(1500):  # 1-DW CplD back to back: records faster than the writer sends them
        card.send([tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_CPL, 1), 4, (card.CARD_ID << 16) | ((TAG_BASE + TAGS - 1) << 8), i])
    card.run(3000)
    assert spy_r(card, "status") >> 2 & 1, "halted: the lease expired"
    # The card still answers: its completions are not stuck behind a half-sent ring write.
    card.write32(reg("ident.scratch"), 0x5A5A)
    assert card.read32(reg("ident.scratch")) == 0x5A5A
    ring_end = RING + 32 * (1 << 14)
    writes = [e for e in card.memory.log if e["kind"] == "write" and RING <= e["addr"] < ring_end]
    assert writes and all(e["dws"] % 8 == 0 for e in writes), "whole records in every ring write"
    assert spy_r(card, "wr_index") == sum(e["dws"] // 8 for e in writes)
