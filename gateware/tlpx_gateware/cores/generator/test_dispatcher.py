"""The completion dispatcher alone, in Migen's simulator, with idle and back-pressure.

    random TLPs ──idle inserter──► CompletionDispatcher ──► generator ──backpressure──► collector
    (tags of every route and none)                      ──► rt_loop   ──backpressure──► collector
                                                        ──► other     ──backpressure──► collector

Each TLP must leave, beat for beat, on the output its tag routes it to, in the order it came,
whatever the idle cycles on the input (valid low, also inside a TLP) and the back-pressure
on each output (ready low, independently per output), as verilog-pcie's testbenches insert
them. Widths 64, 128 and 256 bits (the 64-bit path holds a beat back to see the tag).
"""

import random

import pytest
from migen import run_simulation

from tlpx_gateware import tlp
from tlpx_gateware.cores.generator.core import FLUSH_TAG, TAG_BASE, CompletionDispatcher
from tlpx_gateware.sim.stream import put_beat, stretches, tlp_beats

ROUTES = {"generator": (TAG_BASE, FLUSH_TAG), "rt_loop": (0x38, 0x3B)}


def route_of(tag):
    return next((name for name, (lo, hi) in ROUTES.items() if lo <= tag <= hi), "other")


def random_tlp(rng, n):
    """A completion's beats (dat, be, first, last) with a random tag; its data DWs random."""
    tag = rng.choice([rng.randrange(256), rng.randint(*ROUTES["generator"]), rng.randint(*ROUTES["rt_loop"]),
                      TAG_BASE - 1, FLUSH_TAG + 1, FLUSH_TAG, 0x37, 0x3C])
    length = rng.choice([0, 1, 2, 3, 5, 16, 33])  # 0: a completion without data
    dws = [tlp.dw0(tlp.FMT_3DW_DATA if length else tlp.FMT_3DW_NO_DATA, tlp.TYPE_CPL, length),
           rng.getrandbits(32), (rng.getrandbits(16) << 16) | (tag << 8) | rng.getrandbits(7)]
    dws += [rng.getrandbits(32) for _ in range(length)]
    return tag, tlp_beats(dws, n)


@pytest.mark.parametrize("data_width", [64, 128, 256], ids=["dw64", "dw128", "dw256"])
def test_dispatcher_routes_every_tlp_intact_under_idle_and_backpressure(data_width):
    n = data_width // 32
    rng = random.Random(data_width)
    dut = CompletionDispatcher(data_width, routes=ROUTES)
    outputs = {name: getattr(dut, name) for name in [*ROUTES, "other"]}
    tlps = [random_tlp(rng, n) for _ in range(400)]
    expected = {name: [beats for tag, beats in tlps if route_of(tag) == name] for name in outputs}
    received = {name: [] for name in outputs}
    waited = {name: 0 for name in outputs}
    idle_inside = [0]

    def source():
        idle = stretches(rng, 0.1, 6)
        for _, beats in tlps:
            for beat in beats:
                while next(idle):
                    yield dut.sink.valid.eq(0)
                    yield
                    idle_inside[0] += not beat[2]
                yield from put_beat(dut.sink, beat)
                yield
                for stalled in range(10_000):
                    if (yield dut.sink.ready):
                        break
                    yield
                else:
                    raise AssertionError("the dispatcher stalled (a TLP went to an output that takes no more)")
        yield dut.sink.valid.eq(0)

    def collector(name):
        ep = outputs[name]
        pressure = stretches(random.Random(f"{data_width}{name}"), 0.15, 10)
        current = []
        for _ in range(100_000):  # bounded: a lost TLP fails the comparison, not the test run
            if len(received[name]) == len(expected[name]):
                break
            held = next(pressure)
            yield ep.ready.eq(int(not held))
            yield
            if (yield ep.valid):
                if held:
                    waited[name] += 1
                else:
                    current.append(((yield ep.dat), (yield ep.be), (yield ep.first), (yield ep.last)))
                    if current[-1][3]:
                        received[name].append(current)
                        current = []
        yield ep.ready.eq(0)

    run_simulation(dut, [source(), *[collector(name) for name in outputs]])
    for name in outputs:
        assert received[name] == expected[name], f"{name}: TLPs differ"
        assert len(expected[name]) > 20 and waited[name] > 0, (name, len(expected[name]), waited[name])
    assert idle_inside[0] > 0
