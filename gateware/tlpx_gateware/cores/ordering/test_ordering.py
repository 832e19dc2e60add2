"""MsiFence and RequestLedger alone (Migen simulation).

    issued pulses (2 ports) ──► RequestLedger ◄── requests_done (the PHY's count, set by the test)
    MSI in ──► MsiFence ──► MSI out (ready always)

An MSI leaves only when every request issued before it has left; requests issued after it do
not hold it; with nothing in flight it passes in the cycle it comes; a request that never
leaves holds it `timeout` cycles, is counted and forgotten.
"""

from migen import Module, Signal, run_simulation

from tlpx_gateware.cores.ordering.core import COUNT_BITS, MsiFence, RequestLedger


class Bench(Module):
    def __init__(self, timeout=64):
        self.issued = [Signal(), Signal()]
        self.done = Signal(COUNT_BITS)
        self.submodules.ledger = RequestLedger(self.issued, self.done)
        self.submodules.fence = MsiFence(self.ledger, timeout=timeout)


def run(bench, script):
    log = {}

    def process():
        f = bench.fence
        yield f.source.ready.eq(1)
        yield from script(bench, log)

    run_simulation(bench, process())
    return log


def msi_out_cycle(bench, limit=400):
    """Simulator statements: raise an MSI, return the cycles until it left."""
    f = bench.fence
    yield f.sink.valid.eq(1)
    for cycle in range(limit):
        yield
        if (yield f.source.valid):
            yield f.sink.valid.eq(0)
            yield
            return cycle
    raise AssertionError("the MSI never left")


def pulse(signal):
    yield signal.eq(1)
    yield
    yield signal.eq(0)


def test_msi_with_nothing_in_flight_passes_at_once():
    def script(b, log):
        log["wait"] = yield from msi_out_cycle(b)
    assert run(Bench(), script)["wait"] == 0


def test_msi_waits_for_the_requests_issued_before_it_and_not_for_later_ones():
    def script(b, log):
        for _ in range(3):
            yield from pulse(b.issued[0])
        yield b.issued[1].eq(1)                     # issued in the cycle the MSI comes: counted
        f = b.fence
        yield f.sink.valid.eq(1)
        yield
        yield b.issued[1].eq(0)
        for i in range(5):                          # later requests: must not hold the MSI
            yield from pulse(b.issued[0])
        seen = []
        for done in range(1, 5):
            yield b.done.eq(done)
            for _ in range(3):
                yield
                seen.append((done, (yield f.source.valid)))
        log["seen"] = seen
    seen = run(Bench(), script)["seen"]
    assert not any(v for d, v in seen if d < 4), "the MSI left before the fourth request"
    assert any(v for d, v in seen if d == 4), "the MSI did not leave once the four requests had"


def test_a_request_that_never_leaves_holds_the_msi_only_until_the_timeout():
    def script(b, log):
        yield from pulse(b.issued[0])
        log["first"] = yield from msi_out_cycle(b)
        log["timeouts"] = (yield b.fence.timeouts)
        log["second"] = yield from msi_out_cycle(b)  # the lost request is forgotten
    log = run(Bench(timeout=64), script)
    assert 64 <= log["first"] <= 66 and log["timeouts"] == 1 and log["second"] == 0


def test_counts_wrap_without_losing_order():
    """65,540 requests (both ports at once) wrap the 16-bit counts; the MSI after them still
    waits for the last one."""
    def script(b, log):
        yield b.issued[0].eq(1)
        yield b.issued[1].eq(1)
        for _ in range(32770):
            yield
        yield b.issued[0].eq(0)
        yield b.issued[1].eq(0)
        total = 2 * 32770
        yield b.done.eq((total - 1) & 0xFFFF)
        f = b.fence
        yield f.sink.valid.eq(1)
        for _ in range(10):
            yield
        log["held"] = not (yield f.source.valid)
        yield b.done.eq(total & 0xFFFF)
        for _ in range(3):
            yield
        log["left"] = (yield f.source.valid)
    assert run(Bench(timeout=1 << 20), script) == {"held": True, "left": 1}
