"""The UltraScale PHY view's parts alone (Migen simulation), each found necessary by the
independent model of the hard IP (targets/hardip):

    RequestWidener   3DW memory requests -> 4DW (LitePCIe's 256-bit RQ adapter takes 4DW only)
    WholeDwEnables   the adapters' byte enables -> the card's whole-DW `be`
    IpTagGuard       no tag the IP still holds is sent again; its late completion is dropped

Streams are driven with random idle stretches and back-pressure, as verilog-pcie's tests do.
"""

import random

import pytest
from migen import Module, run_simulation

from tlpx_gateware import tlp
from tlpx_gateware.sim.stream import put_beat, stretches, tlp_beats
from tlpx_gateware.targets.phy import IpTagGuard, RequestWidener, WholeDwEnables


def drive(ep, tlps, n, rng, payload_be=None):
    """Simulator process: sends each TLP's beats on `ep` with random idle cycles between beats."""
    idle = stretches(rng, 0.2, 3)
    for dws in tlps:
        for beat in tlp_beats(dws, n, payload_be.get(id(dws)) if payload_be else None):
            while next(idle):
                yield ep.valid.eq(0)
                yield
            yield from put_beat(ep, beat)
            yield
            while not (yield ep.ready):
                yield
        yield ep.valid.eq(0)


def collect(ep, n, out, rng, cycles=3000):
    """Simulator process: takes beats under random back-pressure into TLPs of (dws, be-per-DW)."""
    stall = stretches(rng, 0.2, 3)
    dws, bes = [], []
    for _ in range(cycles):
        ready = not next(stall)
        yield ep.ready.eq(ready)
        yield
        if ready and (yield ep.valid):
            dat, be = (yield ep.dat), (yield ep.be)
            for j in range(n):
                e = (be >> (4 * j)) & 0xF
                if e:
                    dws.append((dat >> (32 * j)) & 0xFFFFFFFF)
                    bes.append(e)
            if (yield ep.last):
                out.append((dws, bes))
                dws, bes = [], []


def mrd(tag, addr, length=8):
    return [tlp.dw0(tlp.FMT_3DW_NO_DATA, tlp.TYPE_MEM, length), (0x0100 << 16) | (tag << 8) | 0xFF, addr]


def mwr(addr, data, fmt=tlp.FMT_3DW_DATA):
    header = [tlp.dw0(fmt, tlp.TYPE_MEM, len(data)), (0x0100 << 16) | 0xFF]
    return header + ([0, addr] if fmt == tlp.FMT_4DW_DATA else [addr]) + data


def cpl(tag, data, byte_count=None, status=tlp.CPL_SC):
    fmt = tlp.FMT_3DW_DATA if data else tlp.FMT_3DW_NO_DATA
    bc = 4 * len(data) if byte_count is None else byte_count
    return [tlp.dw0(fmt, tlp.TYPE_CPL, len(data)), (status << 13) | (bc & 0xFFF), (0x0100 << 16) | (tag << 8)] + data


@pytest.mark.parametrize("data_width", [128, 256])
def test_widener_makes_every_3dw_memory_request_4dw_and_moves_the_payload(data_width):
    n, rng = data_width // 32, random.Random(data_width)
    tlps = []
    for i in range(24):
        length = rng.choice([1, 2, 5, n - 3, n - 2, n - 1, n, 2 * n - 3, 17])
        kind = rng.choice(["mrd", "mwr", "mwr4", "cpl"])
        if kind == "mrd":
            tlps.append(mrd(i, 0x1000 * i, length))
        elif kind == "mwr":
            tlps.append(mwr(0x40000 + 64 * i, [rng.getrandbits(32) for _ in range(length)]))
        elif kind == "mwr4":
            tlps.append(mwr(0x80000 + 64 * i, [rng.getrandbits(32) for _ in range(length)], tlp.FMT_4DW_DATA))
        else:
            tlps.append(cpl(i, [rng.getrandbits(32) for _ in range(length)]))

    def want(dws):
        fmt, type_ = dws[0] >> 29, (dws[0] >> 24) & 0x1F
        if type_ == tlp.TYPE_MEM and not fmt & 1:
            return [dws[0] | (1 << 29), dws[1], 0, *dws[2:]]
        return dws

    dut = RequestWidener(data_width)
    out = []
    run_simulation(dut, [drive(dut.sink, tlps, n, rng), collect(dut.source, n, out, rng)])
    assert [dws for dws, _ in out] == [want(t) for t in tlps]
    assert all(be == [0xF] * len(dws) for dws, be in out)


def test_widener_refuses_a_datapath_without_the_header_in_one_beat():
    with pytest.raises(ValueError, match="128 bits or more, not 64"):
        RequestWidener(64)


@pytest.mark.parametrize("data_width", [128, 256])
def test_whole_dw_enables_replace_the_adapters_byte_enables(data_width):
    """A 1-DW write with First BE 0010 (byte_en 0010 from the adapter), a zero-length write (be
    0000 on its DW) and a completion whose last DW has two bytes: every DW of the TLP gets 0xF,
    nothing else."""
    n, rng = data_width // 32, random.Random(7)
    one = mwr(0x18, [0x0000_5500])
    zero = mwr(0x1C, [0])
    zero[1] = (0x0100 << 16)                         # First BE 0000
    long = mwr(0x100, [rng.getrandbits(32) for _ in range(11)])
    completion = cpl(3, [0x11111111, 0x00002222], byte_count=6)
    tlps = [one, zero, long, completion]
    enables = {id(one): [0b0010], id(zero): [0b0000], id(long): [0xF] * 10 + [0b0011], id(completion): [0xF, 0b0011]}
    dut = WholeDwEnables(data_width)
    out = []
    run_simulation(dut, [drive(dut.sink, tlps, n, rng, enables), collect(dut.source, n, out, rng)])
    assert [dws for dws, _ in out] == tlps
    assert all(be == [0xF] * len(dws) for dws, be in out)


class GuardBench(Module):
    def __init__(self, max_wait):
        self.submodules.guard = IpTagGuard(256, max_wait=max_wait)


def test_tag_guard_holds_a_request_whose_tag_the_ip_still_holds_and_drops_its_late_completion():
    """MRd tag 5 goes; the card gives up on it and sends tag 5 again: that request waits until
    the IP's completion for the first one comes (the IP's own timeout, a completion without
    data), which is dropped; then the second goes, and its own completion passes."""
    n, rng = 8, random.Random(1)
    bench = GuardBench(max_wait=10_000)
    g = bench.guard
    requests, completions = [], []
    first, again = mrd(5, 0x1000), mrd(5, 0x2000)
    timeout = cpl(5, [], byte_count=32)                 # the IP's timeout completion: no data
    answer = cpl(5, [1, 2, 3, 4, 5, 6, 7, 8])
    state = {}

    def host():
        yield from drive(g.req_sink, [first], n, rng)
        yield from drive(g.req_sink, [again], n, rng)

    def ip():
        for _ in range(60):
            yield
        state["before_timeout"] = len(requests)
        yield from drive(g.cpl_sink, [timeout], n, rng)
        for _ in range(60):
            yield
        state["after_timeout"] = len(requests)
        yield from drive(g.cpl_sink, [answer], n, rng)

    run_simulation(bench, [host(), ip(), collect(g.req_source, n, requests, rng, 600),
                           collect(g.cpl_source, n, completions, rng, 600)])
    assert state == {"before_timeout": 1, "after_timeout": 2}
    assert [d for d, _ in requests] == [first, again]
    assert [d for d, _ in completions] == [answer], "the stale completion was dropped, the new one passed"


def test_tag_guard_lets_a_request_go_after_max_wait_and_other_tags_pass():
    n, rng = 8, random.Random(2)
    bench = GuardBench(max_wait=40)
    g = bench.guard
    requests = []
    tlps = [mrd(9, 0x1000), mrd(10, 0x1000), mrd(9, 0x3000), mwr(0x40, [7])]
    run_simulation(bench, [drive(g.req_sink, tlps, n, rng), collect(g.req_source, n, requests, rng, 400)])
    assert [d for d, _ in requests] == tlps


class FakeUSPHY(Module):
    """What UltraScaleStreams uses of LitePCIe's USPCIEPHY: its four streams, its data width
    and the parameter dict of the IP instance (where the view takes pcie_rq_seq_num_vld)."""
    def __init__(self, data_width):
        from litex.soc.interconnect import stream
        from litepcie.common import phy_layout
        self.data_width = data_width
        for name in ("req_sink", "cmp_sink", "req_source", "cmp_source"):
            setattr(self, name, stream.Endpoint(phy_layout(data_width)))
        self.pcie_phy_params = {}


class StreamsBench(Module):
    def __init__(self):
        from migen import ClockDomain
        from tlpx_gateware.targets.phy import UltraScaleStreams
        self.clock_domains.cd_sys = ClockDomain()
        self.clock_domains.cd_pcie = ClockDomain()
        self.phy = FakeUSPHY(256)
        self.submodules.streams = UltraScaleStreams(self.phy, widen_requests=True, order_timeout=500)
        self.seq_num_vld = self.phy.pcie_phy_params["o_pcie_rq_seq_num_vld"]


def test_a_completion_waits_until_the_ip_has_taken_the_posted_writes_before_it():
    """MWr, MWr, then a completion: the completion reaches CC only after the IP has reported
    both writes past its ordering point (pcie_rq_seq_num_vld), as PCIe forbids a completion
    to pass an earlier posted write; with no requests before it a completion goes at once."""
    n, rng = 8, random.Random(3)
    bench = StreamsBench()
    s, phy = bench.streams, bench.phy
    tlps = [mwr(0x1000, [1, 2, 3]), mwr(0x2000, [4]), cpl(7, [9])]
    rq, cc = [], []
    state = {}

    def ip():
        # Take the writes at once, report them late: the first after 80 cycles, the second 40 after.
        for _ in range(80):
            yield
        state["cc_before"] = len(cc)
        for pause in (0, 40):
            for _ in range(pause):
                yield
            yield bench.seq_num_vld.eq(1)
            yield
            yield bench.seq_num_vld.eq(0)
            if pause == 0:
                for _ in range(20):
                    yield
                state["cc_after_one"] = len(cc)
        for _ in range(60):
            yield

    run_simulation(bench, [drive(s.sink, tlps, n, rng), collect(phy.req_sink, n, rq, rng, 400),
                           collect(phy.cmp_sink, n, cc, rng, 400), ip()],
                   clocks={"sys": 10, "pcie": 10})
    assert [d for d, _ in rq] == [[t[0] | (1 << 29), t[1], 0, *t[2:]] for t in tlps[:2]], "both writes, widened"
    assert state == {"cc_before": 0, "cc_after_one": 0}, state
    assert [d for d, _ in cc] == [tlps[2]], "the completion went once both writes had"
