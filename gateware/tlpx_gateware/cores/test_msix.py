"""The MSI-X table (cores/msix.py) in Migen's simulator: the host programs entries through the
window, a vector's message is the MWr its entry says, masked vectors wait in the PBA and go
when unmasked, at each datapath width."""

import pytest
from migen import *
from migen.sim import run_simulation

from tlpx_gateware.cores.msix import MSIX_PBA_OFFSET, MSIX_TAG, MsiXTable
from tlpx_gateware.tlp import FMT_3DW_DATA, FMT_4DW_DATA

REQUESTER_ID = 0x0100


def _wb_write(bus, dw, value):
    yield bus.adr.eq(dw)
    yield bus.dat_w.eq(value)
    yield bus.sel.eq(0xF)
    yield bus.we.eq(1)
    yield bus.cyc.eq(1)
    yield bus.stb.eq(1)
    yield
    while not (yield bus.ack):
        yield
    yield bus.cyc.eq(0)
    yield bus.stb.eq(0)
    yield bus.we.eq(0)
    yield


def _wb_read(bus, dw):
    yield bus.adr.eq(dw)
    yield bus.we.eq(0)
    yield bus.cyc.eq(1)
    yield bus.stb.eq(1)
    yield
    while not (yield bus.ack):
        yield
    value = yield bus.dat_r
    yield bus.cyc.eq(0)
    yield bus.stb.eq(0)
    yield
    return value


def _program(bus, vector, address, data, masked=False):
    yield from _wb_write(bus, vector * 4 + 0, address & 0xFFFFFFFF)
    yield from _wb_write(bus, vector * 4 + 1, address >> 32)
    yield from _wb_write(bus, vector * 4 + 2, data)
    yield from _wb_write(bus, vector * 4 + 3, int(masked))


def _wait(cycles):
    for _ in range(cycles):
        yield


def _collect(dut, n, out, cycles=600):
    """Beats of the TLPs the table sends, as DW lists, into `out` (runs beside the host)."""
    tlp = []
    for _ in range(cycles):
        if (yield dut.source.valid) and (yield dut.source.ready):
            dat = yield dut.source.dat
            be = yield dut.source.be
            dws = [(dat >> (32 * i)) & 0xFFFFFFFF for i in range(n) if (be >> (4 * i)) & 0xF]
            tlp += dws
            if (yield dut.source.last):
                out.append(tlp)
                tlp = []
        yield


def _send(dut, vector):
    yield dut.sink.valid.eq(1)
    yield dut.sink.dat.eq(vector)
    yield
    while not (yield dut.sink.ready):
        yield
    yield dut.sink.valid.eq(0)


@pytest.mark.parametrize("data_width", [64, 128, 256])
def test_a_vector_sends_its_entry_as_a_one_dw_write(data_width):
    dut = MsiXTable(data_width, Constant(REQUESTER_ID, 16))
    n = data_width // 32
    tlps = []

    def host():
        yield dut.source.ready.eq(1)
        yield from _program(dut.bus, 5, 0xFEE0_1004, 0x4025)
        yield from _program(dut.bus, 9, 0x1_2345_6780, 0x77)
        assert (yield from _wb_read(dut.bus, 5 * 4 + 2)) == 0x4025
        yield from _send(dut, 5)
        yield from _wait(20)
        yield from _send(dut, 9)
        yield from _wait(20)
    run_simulation(dut, [host(), _collect(dut, n, tlps)])
    assert len(tlps) == 2
    lo, hi = tlps
    assert lo[0] >> 29 == FMT_3DW_DATA and lo[0] & 0x3FF == 1
    assert lo[1] == (REQUESTER_ID << 16) | (MSIX_TAG << 8) | 0x0F
    assert lo[2:] == [0xFEE0_1004, 0x4025]
    assert hi[0] >> 29 == FMT_4DW_DATA
    assert hi[2:] == [0x1, 0x2345_6780, 0x77]


def test_a_masked_vector_waits_in_the_pba_and_goes_when_unmasked():
    dut = MsiXTable(64, Constant(REQUESTER_ID, 16))
    tlps = []
    pba = []

    def host():
        yield dut.source.ready.eq(1)
        yield from _program(dut.bus, 3, 0xFEE0_0000, 3, masked=True)
        yield from _send(dut, 3)
        yield from _wait(30)
        pba.append((yield from _wb_read(dut.bus, MSIX_PBA_OFFSET // 4)))
        pba.append(len(tlps))
        yield from _wb_write(dut.bus, 3 * 4 + 3, 0)       # unmask
        yield from _wait(120)
        pba.append((yield from _wb_read(dut.bus, MSIX_PBA_OFFSET // 4)))
    run_simulation(dut, [host(), _collect(dut, 2, tlps)])
    assert pba == [1 << 3, 0, 0]
    assert [t[2:] for t in tlps] == [[0xFEE0_0000, 3]]


def test_entries_are_masked_at_reset_and_the_function_mask_holds_every_vector():
    dut = MsiXTable(64, Constant(REQUESTER_ID, 16))
    tlps = []
    seen = []

    def host():
        yield dut.source.ready.eq(1)
        seen.append((yield from _wb_read(dut.bus, 7 * 4 + 3)))
        yield dut.function_mask.eq(1)
        yield from _program(dut.bus, 7, 0xFEE0_0000, 7)
        yield from _send(dut, 7)
        yield from _wait(30)
        seen.append(len(tlps))
        yield dut.function_mask.eq(0)
        yield from _wait(120)
    run_simulation(dut, [host(), _collect(dut, 2, tlps)])
    assert seen == [1, 0]
    assert [t[3] for t in tlps] == [7]
