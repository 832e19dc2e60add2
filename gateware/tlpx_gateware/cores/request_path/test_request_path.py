"""Request path: every host request executed with its byte enables, or answered and counted.

    host model ──TLP──► RequestRouter ─► DWSerializer ─► RequestProcessor ─► Wishbone (CSRs)
                                                              └─► DWGatherer ─► completion

On the Verilated card (all data widths): requests LitePCIe would drop silently (MRd64/MWr64,
configuration, I/O, messages, poisoned writes) must be answered as the PCIe Base spec says
(UR completion for non-posted, drop for posted) and counted, and the card must keep
answering afterwards. Multi-DW accesses are checked against a byte-level reference model.
In Migen's simulator the request path alone is checked against a reference memory.
"""

import random

import pytest
from migen import Module, Signal, run_simulation
from litex.soc.interconnect import stream, wishbone
from litepcie.common import get_bar_mask, phy_layout

from tlpx_gateware import tlp
from tlpx_gateware.conftest import reg
from tlpx_gateware.cores.request_path.core import RequestPath
from tlpx_gateware.sim.card import completion_fields
from tlpx_gateware.sim.stream import put_beat, tlp_beats

HOST = 0x0000


def counter(card, name):
    return card.read32(reg(f"request_path.{name}"))


def header(type_, fmt, length, tag, first_be=0xF, last_be=0):
    return [tlp.dw0(fmt, type_, length), (HOST << 16) | (tag << 8) | (last_be << 4) | first_be]


def assert_ur(cpl, tag):
    f = completion_fields(cpl)
    assert f["type"] == tlp.TYPE_CPL and f["fmt"] == tlp.FMT_3DW_NO_DATA
    assert f["status"] == tlp.CPL_UR
    assert f["tag"] == tag and f["requester_id"] == HOST
    assert f["completer_id"] == card_id()
    return f


def card_id():
    from tlpx_gateware.sim.card import Card
    return Card.CARD_ID


# Unsupported requests --------------------------------------------------------------------------

def test_mrd64_to_bar0_gets_ur_and_is_counted(card):
    before_ur, before_64 = counter(card, "ur_sent"), counter(card, "mem64_requests")
    cpl = card.request(header(tlp.TYPE_MEM, tlp.FMT_4DW_NO_DATA, 1, tag=0x42) + [0x0, 0x18])
    f = assert_ur(cpl, 0x42)
    assert f["byte_count"] == 4 and f["lower_address"] == 0x18
    assert counter(card, "ur_sent") == before_ur + 1
    assert counter(card, "mem64_requests") == before_64 + 1
    assert counter(card, "last_rejected") >> 29 == tlp.FMT_4DW_NO_DATA


def test_config_read_and_write_get_ur(card):
    before = counter(card, "cfg_requests")
    for tag, fmt in ((0x10, tlp.FMT_3DW_NO_DATA), (0x11, tlp.FMT_3DW_DATA)):
        dws = header(tlp.TYPE_CFG0, fmt, 1, tag) + [(1 << 24) | 0x10]
        if fmt == tlp.FMT_3DW_DATA:
            dws.append(0xFFFFFFFF)
        f = assert_ur(card.request(dws), tag)
        assert f["byte_count"] == 4 and f["lower_address"] == 0
    assert counter(card, "cfg_requests") == before + 2


@pytest.mark.parametrize("type_,fmt,extra", [
    (tlp.TYPE_IO, tlp.FMT_3DW_NO_DATA, [0x100]),
    (tlp.TYPE_MEM_LK, tlp.FMT_3DW_NO_DATA, [0x0]),
    (tlp.TYPE_FETCHADD, tlp.FMT_3DW_DATA, [0x0, 0x1]),
    (tlp.TYPE_CAS, tlp.FMT_4DW_DATA, [0x0, 0x0, 0x1, 0x2]),
], ids=["io_read", "mrdlk", "fetchadd32", "cas64"])
def test_other_nonposted_requests_get_ur(card, type_, fmt, extra):
    before = counter(card, "ur_sent")
    assert_ur(card.request(header(type_, fmt, 1, 0x77) + extra), 0x77)
    assert counter(card, "ur_sent") == before + 1


def test_mwr64_and_messages_are_dropped_and_counted(card):
    scratch = reg("ident.scratch")
    card.write32(scratch, 0x11111111)
    before = counter(card, "posted_dropped")
    card.send(header(tlp.TYPE_MEM, tlp.FMT_4DW_DATA, 1, 0) + [0x0, scratch, 0x22222222])
    card.send([tlp.dw0(tlp.FMT_4DW_NO_DATA, tlp.MSG_TYPE | 0b100, 0), (HOST << 16) | 0x7F, 0, 0])  # Msg
    card.send([tlp.dw0(tlp.FMT_4DW_DATA, tlp.MSG_TYPE, 1), (HOST << 16) | 0x7F, 0, 0, 0xABCD])       # MsgD
    card.run(200)
    assert not card.received, "posted requests must not be answered"
    assert counter(card, "posted_dropped") == before + 3
    assert card.read32(scratch) == 0x11111111


def test_poisoned_write_is_dropped_and_counted(card):
    scratch = reg("ident.scratch")
    card.write32(scratch, 0x33333333)
    before = counter(card, "poisoned")
    card.mwr32(scratch, [0x44444444], ep=1)
    assert card.read32(scratch) == 0x33333333
    assert counter(card, "poisoned") == before + 1


def test_card_keeps_answering_after_a_burst_of_bad_requests(card):
    for tag in range(32):
        card.send(header(tlp.TYPE_CFG0, tlp.FMT_3DW_NO_DATA, 1, tag) + [0])
        card.send(header(tlp.TYPE_MEM, tlp.FMT_4DW_DATA, 2, 0) + [0, 0, 1, 2])
    card.run_until(lambda: len(card.received) == 32, timeout=5000)
    assert sorted(completion_fields(c)["tag"] for c in card.received) == list(range(32))
    card.received.clear()
    assert card.read32(0) == 0x544C5058


# Multi-DW accesses -----------------------------------------------------------------------------

def test_multi_dw_read_returns_every_dw(card):
    cpl = completion_fields(card.mrd32(0x0, length=6))
    assert cpl["status"] == tlp.CPL_SC and cpl["length"] == 6 and cpl["byte_count"] == 24
    assert cpl["data"][0] == 0x544C5058
    assert cpl["data"][4] == card.data_width


def test_read_with_byte_enables_reports_byte_count_and_lower_address(card):
    # 1-DW read of bytes 1..2: Byte Count 2, Lower Address = offset + 1 (2.3.1.1).
    f = completion_fields(card.mrd32(0x4, length=1, first_be=0b0110))
    assert f["byte_count"] == 2 and f["lower_address"] == 0x5
    # 3-DW read missing the first byte and the last two: 12 - 1 - 2 = 9 bytes.
    f = completion_fields(card.mrd32(0x0, length=3, first_be=0b1110, last_be=0b0011))
    assert f["byte_count"] == 9 and f["lower_address"] == 0x1


def test_read_longer_than_limit_gets_completer_abort(card):
    before = counter(card, "reads_too_long")
    f = completion_fields(card.mrd32(0x0, length=64))
    assert f["status"] == tlp.CPL_CA and f["length"] == 0
    assert counter(card, "reads_too_long") == before + 1


def test_multi_dw_write_honours_first_and_last_byte_enables(card):
    # writer_table_value is a 64-bit read/write register: two DWs to play with.
    base = reg("pcie_dma0.writer_table_value")
    card.mwr32(base, [0x11111111, 0x22222222])
    card.mwr32(base, [0xAAAAAAAA, 0xBBBBBBBB], first_be=0b1100, last_be=0b0011)
    assert card.read32(base) == 0xAAAA1111
    # The upper DW implements 26 bits (length[23:0], irq_disable, last_disable).
    assert card.read32(base + 4) == 0x2222BBBB & 0x03FFFFFF


def test_unmapped_bar0_offset_completes_and_counts_bus_error(card):
    before = counter(card, "bus_errors")
    f = completion_fields(card.mrd32(0x80000))
    assert f["status"] == tlp.CPL_SC and f["data"] == [0]
    card.write32(0x80004, 1)
    assert counter(card, "bus_errors") == before + 2
    assert card.read32(0) == 0x544C5058


# Request path alone, against a reference memory (Migen simulator) -------------------------------

class _PHY:
    pass


class RequestPathBench(Module):
    def __init__(self, data_width, words=64):
        phy = _PHY()
        phy.data_width = data_width
        phy.id = Signal(16, reset=0x0100)
        phy.source = stream.Endpoint(phy_layout(data_width))
        phy.sink = stream.Endpoint(phy_layout(data_width))
        ep = _PHY()
        ep.source = stream.Endpoint(phy_layout(data_width))
        ep.sink = stream.Endpoint(phy_layout(data_width))
        self.phy = phy
        self.submodules.dut = RequestPath(phy, ep, bar0_mask=get_bar_mask(0x100000))
        self.submodules.mem = wishbone.SRAM(4 * words, bus=self.dut.bus, init=[0] * words)


@pytest.mark.parametrize("data_width", [64, 128, 256])
@pytest.mark.parametrize("enables", ["whole_dws", "byte_enables"])
def test_random_writes_and_reads_match_reference_memory(data_width, enables):
    """`byte_enables`: payload DWs carry the TLP's First/Last BE in `be`, as LitePCIe's
    UltraScale adapters deliver them (found by the hard-IP model: a 1-DW write with First BE
    0010 was dropped as malformed); `whole_dws`: 0xF per DW, as SimPHY and pcie_7x do."""
    rng = random.Random(data_width)
    bench = RequestPathBench(data_width)
    words = 64
    reference = bytearray(4 * words)
    requests = []
    for _ in range(12):
        length = rng.randint(1, 8)
        start = rng.randrange(0, words - length)
        first_be = rng.randint(1, 15)
        last_be = rng.randint(1, 15) if length > 1 else 0
        data = [rng.getrandbits(32) for _ in range(length)]
        for i, d in enumerate(data):
            be = first_be if i == 0 else (last_be if i == length - 1 else 0xF)
            for b in range(4):
                if be & (1 << b):
                    reference[4 * (start + i) + b] = (d >> (8 * b)) & 0xFF
        payload_be = [first_be] + [0xF] * (length - 2) + ([last_be] if length > 1 else [])
        requests.append(([tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_MEM, length), (last_be << 4) | first_be, 4 * start] + data,
                         payload_be if enables == "byte_enables" else None))
    # Read the whole memory back in 8-DW reads.
    for i, start in enumerate(range(0, words, 8)):
        requests.append(([tlp.dw0(tlp.FMT_3DW_NO_DATA, tlp.TYPE_MEM, 8), (i << 8) | 0xFF, 4 * start], None))
    completions = []

    def host():
        phy = bench.phy
        for dws, payload_be in requests:
            for beat in tlp_beats(dws, data_width // 32, payload_be):
                yield from put_beat(phy.source, beat)
                yield
                while not (yield phy.source.ready):
                    yield
            yield phy.source.valid.eq(0)

    def collector():
        phy = bench.phy
        yield phy.sink.ready.eq(1)
        current = []
        for _ in range(4000):
            if (yield phy.sink.valid):
                dat, be = (yield phy.sink.dat), (yield phy.sink.be)
                for j in range(data_width // 32):
                    if (be >> (4 * j)) & 0xF:
                        current.append((dat >> (32 * j)) & 0xFFFFFFFF)
                if (yield phy.sink.last):
                    completions.append(current)
                    current = []
            yield

    run_simulation(bench, [host(), collector()])
    assert len(completions) == words // 8
    readback = bytearray()
    for cpl in sorted(completions, key=lambda c: (c[2] >> 8) & 0xFF):
        assert completion_fields(cpl)["status"] == tlp.CPL_SC
        for d in cpl[3:]:
            readback += d.to_bytes(4, "little")
    assert readback == reference
