"""BAR0 relocation (the accelerator slot's placement bar0): the request path alone, in Migen.

    host model ──MRd32/MWr32──► RequestPath(relocation=(window, window_base, tlpx_base))
                                      └─► Wishbone: a slave that answers every read with the
                                          internal byte address it was given (| 1) and logs writes

BAR0 offsets [0, window) must reach the slot window at its internal offset, offsets from
RELOCATED_TLPX_BASE must reach tlpx's map at internal 0 (ident), and an offset in between must
be unmapped as an unmapped offset is without relocation: read as zero, write skipped, both
counted in bus_errors. The same requests without relocation reach their own offsets.
"""

import pytest
from migen import Module, Signal, run_simulation
from litex.soc.interconnect import stream, wishbone
from litepcie.common import get_bar_mask, phy_layout

from tlpx_gateware import tlp
from tlpx_gateware.cores.request_path.core import RequestPath, RequestProcessor
from tlpx_gateware.cores.slot.core import RELOCATED_TLPX_BASE, SLOT_WINDOW_BASE
from tlpx_gateware.sim.card import completion_fields
from tlpx_gateware.sim.stream import put_beat, tlp_beats

BAR0_SIZE = 0x100000
WINDOW = 0x1000
CSR_SPACE = 0x8000   # what the card maps at internal 0 (its CSR pages)


class _PHY:
    pass


class AddressEcho(Module):
    """A Wishbone slave: a read returns the internal byte address | 1 (the bench logs writes)."""
    def __init__(self, bus):
        self.sync += [
            bus.ack.eq(bus.cyc & bus.stb & ~bus.ack),
            bus.dat_r.eq((bus.adr << 2) | 1),
        ]


class Bench(Module):
    def __init__(self, relocation, data_width=64):
        phy = _PHY()
        phy.data_width = data_width
        phy.id = Signal(16, reset=0x0100)
        phy.source = stream.Endpoint(phy_layout(data_width))
        phy.sink = stream.Endpoint(phy_layout(data_width))
        ep = _PHY()
        ep.source = stream.Endpoint(phy_layout(data_width))
        ep.sink = stream.Endpoint(phy_layout(data_width))
        self.phy = phy
        self.submodules.dut = RequestPath(phy, ep, bar0_mask=get_bar_mask(BAR0_SIZE),
            mapped=[(0, CSR_SPACE), (SLOT_WINDOW_BASE, WINDOW)], relocation=relocation)
        self.submodules.echo = AddressEcho(self.dut.bus)


def run(relocation, requests, data_width=64):
    """Sends `requests` (lists of DWs); returns (completions in tag order, bus writes as
    (internal byte address, data), bus_errors)."""
    bench = Bench(relocation, data_width)
    completions, writes, errors = [], [], []

    def host():
        for dws in requests:
            for beat in tlp_beats(dws, data_width // 32):
                yield from put_beat(bench.phy.source, beat)
                yield
                while not (yield bench.phy.source.ready):
                    yield
            yield bench.phy.source.valid.eq(0)

    def collector():
        phy, bus = bench.phy, bench.dut.bus
        yield phy.sink.ready.eq(1)
        current = []
        for _ in range(200 * len(requests)):
            if (yield bus.cyc) and (yield bus.stb) and (yield bus.we) and (yield bus.ack):
                writes.append((4 * (yield bus.adr), (yield bus.dat_w)))
            if (yield phy.sink.valid):
                dat, be = (yield phy.sink.dat), (yield phy.sink.be)
                for j in range(data_width // 32):
                    if (be >> (4 * j)) & 0xF:
                        current.append((dat >> (32 * j)) & 0xFFFFFFFF)
                if (yield phy.sink.last):
                    completions.append(current)
                    current = []
            yield
        errors.append((yield bench.dut.bus_errors.status))

    run_simulation(bench, [host(), collector()])
    return sorted(completions, key=lambda c: completion_fields(c)["tag"]), writes, errors[0]


def mrd(tag, offset, length=1):
    return [tlp.dw0(tlp.FMT_3DW_NO_DATA, tlp.TYPE_MEM, length), (tag << 8) | (0xFF if length > 1 else 0x0F), offset]


def mwr(offset, value):
    return [tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_MEM, 1), 0x0F, offset, value]


RELOCATION = (WINDOW, SLOT_WINDOW_BASE, RELOCATED_TLPX_BASE)


@pytest.mark.parametrize("data_width", [64, 128, 256])
def test_bar0_placement_translates_window_tlpx_map_and_gap(data_width):
    reads = {
        0x0:                          SLOT_WINDOW_BASE | 1,             # the window's first DW
        WINDOW - 4:                   SLOT_WINDOW_BASE + WINDOW - 4 | 1,  # its last
        RELOCATED_TLPX_BASE:          0x0 | 1,                          # ident.magic's offset
        RELOCATED_TLPX_BASE + 0x1008: 0x1008 | 1,                       # a register of another block
        WINDOW:                       0,                                # the gap's first DW: unmapped
        RELOCATED_TLPX_BASE - 4:      0,                                # its last
        SLOT_WINDOW_BASE:             0,                                # the window's internal offset is not BAR0's
    }
    requests = [mrd(tag, offset) for tag, offset in enumerate(reads)]
    requests += [mwr(0x8, 0xA5A5A5A5), mwr(RELOCATED_TLPX_BASE + 0x1c, 0x5A5A5A5A), mwr(0x2000, 0xDEAD)]
    completions, writes, errors = run(RELOCATION, requests, data_width)
    assert [c[3] for c in completions] == list(reads.values())
    assert all(completion_fields(c)["status"] == tlp.CPL_SC for c in completions)
    assert writes == [(SLOT_WINDOW_BASE + 0x8, 0xA5A5A5A5), (0x1c, 0x5A5A5A5A)], "the gap's write is skipped"
    assert errors == 4, "three unmapped reads and one unmapped write, counted as without relocation"


def test_bar0_placement_multi_dw_read_stays_in_the_window():
    completions, _, errors = run(RELOCATION, [mrd(1, WINDOW - 8, length=4)])
    # Two DWs of the window, then two past its end: an internal offset outside every window.
    assert completions[0][3:] == [SLOT_WINDOW_BASE + WINDOW - 8 | 1, SLOT_WINDOW_BASE + WINDOW - 4 | 1, 0, 0]
    assert errors == 2


def test_window_placement_is_untranslated():
    completions, writes, errors = run(None, [mrd(0, 0x0), mrd(1, SLOT_WINDOW_BASE), mrd(2, RELOCATED_TLPX_BASE),
                                             mwr(0x10, 7)])
    assert [c[3] for c in completions] == [0x1, SLOT_WINDOW_BASE | 1, 0]
    assert writes == [(0x10, 7)]
    assert errors == 1


def test_relocation_parameters_are_checked():
    with pytest.raises(ValueError, match="tlpx_base"):
        RequestProcessor(0, get_bar_mask(BAR0_SIZE), relocation=(0x1000, SLOT_WINDOW_BASE, BAR0_SIZE))
    with pytest.raises(ValueError, match="window_bytes"):
        RequestProcessor(0, get_bar_mask(BAR0_SIZE), relocation=(0x100000, SLOT_WINDOW_BASE, RELOCATED_TLPX_BASE))
