"""The completion checker alone, in Migen's simulator, against a Python reference.

    reads in flight ──► TagMemory (behavioural tag table) ◄──release / advance──┐
    completions (split at the RCB, interleaved, faults) ──beats, random idle──► CompletionChecker
                                                                 compared with the reference

Random reads are answered by completions split at the read completion boundary, those of
different reads interleaved, with random idle cycles between and inside TLPs (as
verilog-pcie's idle inserter makes them); some completions carry UR, CA or CRS, the EP bit,
a corrupted DW, a tag with no read in flight, or the flushing read's tag. At the end of each
completion the checker's events (release or advance of the tag, latency measured) must be
the reference's, and at the end every counter. The checker never back-pressures the link.
Widths 64, 128 and 256 bits.
"""

import random

import pytest
from migen import Module, run_simulation

from tlpx_gateware import tlp
from tlpx_gateware.cores.common import PATTERN_COUNTER, PATTERN_PRBS, pattern_word_py
from tlpx_gateware.cores.generator.checker import COUNTERS, CompletionChecker
from tlpx_gateware.sim.stream import put_beat, tlp_beats
from tlpx_gateware.testing.tag_memory import TagMemory

TAG_BASE, TAGS = 128, 64
FLUSH_TAG = TAG_BASE + TAGS
MASK64 = (1 << 64) - 1


def split_read(addr, nbytes, rcb, data_at):
    """The successful completions of a read of `nbytes` at byte address `addr`, split at `rcb`
    boundaries (PCIe Base spec 2.3.1.1): (length DWs, byte count, lower address, data DWs)."""
    at, remaining, cpls = addr, nbytes, []
    while remaining > 0:
        end = min((at // rcb + 1) * rcb, at + remaining)
        first_dw, last_dw = at & ~3, (end - 1) & ~3
        data = [data_at(a >> 2) for a in range(first_dw, last_dw + 4, 4)]
        cpls.append((len(data), remaining, at & 0x7F, data))
        remaining -= end - at
        at = end
    return cpls


def completion_dws(tag, status, byte_count, lower, data, ep=0, length=None):
    length = len(data) if length is None else length
    fmt = tlp.FMT_3DW_DATA if data else tlp.FMT_3DW_NO_DATA
    return [tlp.dw0(fmt, tlp.TYPE_CPL, length & 0x3FF, ep=ep),
            (0x0000 << 16) | (status << 13) | (byte_count & 0xFFF),
            (0x0100 << 16) | (tag << 8) | (lower & 0x7F)] + data


class Reference:
    """The checker's contract (CompletionChecker's docstring), per completion and in counters."""
    def __init__(self, check, pattern, seed):
        self.check, self.pattern, self.seed = check, pattern, seed
        self.busy, self.time, self.dw, self.bytes = set(), [0] * TAGS, [0] * TAGS, [0] * TAGS
        self.count = {name: 0 for name, _ in COUNTERS}
        self.count["lat_min"] = 0xFFFFFFFF

    def completion(self, dws, now, flush_expected):
        """Events of the completion `dws` whose last beat is at card cycle `now`."""
        length = (dws[0] & 0x3FF) or 1024
        ep, status = (dws[0] >> 14) & 1, (dws[1] >> 13) & 7
        bc, tag, lower = (dws[1] & 0xFFF) or 4096, (dws[2] >> 8) & 0xFF, dws[2] & 0x7F
        t = (tag - TAG_BASE) % TAGS
        flush = tag == FLUSH_TAG
        ours = t in self.busy and not flush
        last = status != tlp.CPL_SC or bc + (lower & 3) <= 4 * length
        measured = ours and last and status == tlp.CPL_SC
        latency = (now - self.time[t]) & MASK64
        c = self.count
        c["completions"] += 1
        c["err_unexpected"] += not ours and not (flush and flush_expected)
        if ours:
            c["err_ur"] += status == tlp.CPL_UR
            c["err_ca"] += status == tlp.CPL_CA
            c["err_other"] += status not in (tlp.CPL_SC, tlp.CPL_UR, tlp.CPL_CA)
            c["err_poisoned"] += ep
            if self.check and not ep and status == tlp.CPL_SC:
                c["err_mismatches"] += sum(d != pattern_word_py(self.pattern, self.seed, self.dw[t] + p)
                                           for p, d in enumerate(dws[3:]))
        if measured:
            c["read_bytes"] += self.bytes[t]
            c["lat_count"] += 1
            c["lat_sum"] = (c["lat_sum"] + latency) & MASK64
            c["lat_min"] = min(c["lat_min"], latency)
            c["lat_max"] = max(c["lat_max"], latency)
        events = {"ours": int(ours), "release": int(ours and last), "advance": int(ours and not last),
                  "measured": int(measured), "flush_returned": int(flush)}
        if measured:
            events["latency"] = latency
        if ours and last:
            self.busy.discard(t)
        elif ours:
            self.dw[t] = (self.dw[t] + length) & 0xFFFFFFFF
        return t, events


def checker_bench(dut, mem, n, rng, check, reads):
    pattern, seed = rng.choice([PATTERN_COUNTER, PATTERN_PRBS]), rng.getrandbits(32)
    ref = Reference(check, pattern, seed)
    yield dut.check.eq(check)
    yield dut.data_pattern.eq(pattern)
    yield dut.seed.eq(seed)
    yield dut.clear.eq(1)
    yield
    yield dut.clear.eq(0)
    seen = {k: 0 for k in ("release", "advance", "measured", "unexpected", "flush", "mismatch", "idle_in_tlp")}

    def idle(p):
        # A stretch of idle cycles, as an idle inserter makes them (valid low).
        k = 0
        while rng.random() < p:
            k += 1
        return k

    def issue(t):
        addr = rng.randrange(1 << 20) * 4 if check else rng.randrange(1 << 22)
        nbytes = rng.choice([4, 8, 64, 128, 200, 256, 512, 4096]) if check else rng.randint(1, 512)
        now = (yield mem.now)
        stamp = now - rng.randint(1, 5000)
        ref.busy.add(t)
        ref.time[t], ref.dw[t], ref.bytes[t] = stamp, addr >> 2, nbytes & 0x1FFF
        for sig, v in ((mem.time[t], stamp), (mem.dw[t], addr >> 2), (mem.bytes[t], nbytes & 0x1FFF)):
            yield sig.eq(v)
        yield mem.busy.eq(sum(1 << x for x in ref.busy))
        rcb = rng.choice([64, 128, 4096])
        data_at = lambda dw: pattern_word_py(pattern, seed, dw)
        cpls = split_read(addr, nbytes, rcb, data_at)
        tag = TAG_BASE + t
        fault = rng.choices(["none", "ur", "ca", "crs", "poison", "corrupt"], [70, 5, 5, 3, 7, 10])[0]
        if fault in ("ur", "ca", "crs"):
            status = {"ur": tlp.CPL_UR, "ca": tlp.CPL_CA, "crs": tlp.CPL_CRS}[fault]
            return [completion_dws(tag, status, nbytes, addr, [], length=0)]
        out = []
        for length, bc, lower, data in cpls:
            data = list(data)
            if fault == "corrupt" and rng.random() < 0.5:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(32)
            out.append(completion_dws(tag, tlp.CPL_SC, bc, lower, data, ep=int(fault == "poison")))
        return out

    in_flight = {}  # tag -> its completions still to come, in order
    sent = 0
    flush_expected = 0
    while sent < reads or in_flight:
        if sent < reads and (not in_flight or rng.random() < 0.3):
            free = [t for t in range(TAGS) if t not in ref.busy and t not in in_flight]
            t = rng.choice(free[:8] if rng.random() < 0.5 else free)  # low tags come back often
            in_flight[t] = yield from issue(t)
            sent += 1
        # The next TLP: a completion of a read in flight (its own order kept, reads
        # interleaved), now and then one for a tag with nothing in flight, or the flush.
        r = rng.random()
        if r < 0.04:
            t = rng.choice([x for x in range(TAGS) if x not in ref.busy])
            dws = completion_dws(TAG_BASE + t, tlp.CPL_SC, 4, 0, [rng.getrandbits(32)])
        elif r < 0.07:
            flush_expected = rng.randint(0, 1)
            yield dut.flush_expected.eq(flush_expected)
            dws = completion_dws(FLUSH_TAG, tlp.CPL_SC, 4, 0, [rng.getrandbits(32)])
        else:
            t = rng.choice(list(in_flight))
            dws = in_flight[t].pop(0)
            if not in_flight[t]:
                del in_flight[t]
        for _ in range(idle(0.5)):
            yield dut.sink.valid.eq(0)
            yield
        for beat in tlp_beats(dws, n):
            last = beat[3]
            yield from put_beat(dut.sink, beat)
            yield
            assert (yield dut.sink.ready), "the checker back-pressured the link"
            if not last:
                gap = idle(0.2)
                seen["idle_in_tlp"] += gap
                for _ in range(gap):
                    yield dut.sink.valid.eq(0)
                    yield
                    assert (yield dut.sink.ready)
                    assert not (yield dut.end), "a completion ended during an idle cycle"
        # Now the last beat is on the sink: compare the checker's events with the reference.
        assert (yield dut.end)
        before = dict(ref.count)
        t, want = ref.completion(dws, (yield mem.now), flush_expected)
        got = {}
        for k, sig in (("ours", dut.ours), ("release", dut.cpl.release), ("advance", dut.cpl.advance),
                       ("measured", dut.measured), ("flush_returned", dut.flush_returned)):
            got[k] = (yield sig)
        if want["measured"]:
            got["latency"] = (yield dut.latency)
        assert (yield dut.cpl.tag) == t
        assert got == want, f"completion {[hex(d) for d in dws[:3]]}: checker {got}, reference {want}"
        if want["advance"]:
            assert (yield dut.cpl.advance_dws) == ((dws[0] & 0x3FF) or 1024)
        for k in ("release", "advance", "measured"):
            seen[k] += want[k]
        seen["unexpected"] += ref.count["err_unexpected"] - before["err_unexpected"]
        seen["flush"] += want["flush_returned"]
        seen["mismatch"] += ref.count["err_mismatches"] - before["err_mismatches"]
        # The tag table's side: what the checker released or advanced shows from the next cycle.
        yield mem.busy.eq(sum(1 << x for x in ref.busy))
        yield mem.dw[t].eq(ref.dw[t])
    yield dut.sink.valid.eq(0)
    yield
    yield
    got = {}
    for name, _ in COUNTERS:
        got[name] = (yield getattr(dut, name))
    assert got == ref.count, {k: (got[k], ref.count[k]) for k in got if got[k] != ref.count[k]}
    return seen, ref.count


@pytest.mark.parametrize("data_width", [64, 128, 256], ids=["dw64", "dw128", "dw256"])
@pytest.mark.parametrize("check", [1, 0], ids=["checked_aligned", "unchecked_unaligned"])
def test_checker_matches_reference_with_idle_and_faults(data_width, check):
    dut = CompletionChecker(data_width, TAG_BASE, TAGS, FLUSH_TAG)
    mem = TagMemory(dut.cpl, TAGS)
    top = Module()
    top.submodules += dut, mem
    top.comb += dut.now.eq(mem.now)
    rng = random.Random(data_width * 2 + check)
    result = []

    def bench():
        result.append((yield from checker_bench(dut, mem, data_width // 32, rng, check, reads=150)))
    run_simulation(top, bench())
    seen, count = result[0]
    # The run reached what it is meant to check.
    assert all(seen[k] > 0 for k in ("release", "advance", "measured", "unexpected", "flush", "idle_in_tlp")), seen
    assert all(count[k] > 0 for k in ("err_ur", "err_ca", "err_other", "err_poisoned")), count
    assert (seen["mismatch"] > 0) == bool(check), seen
