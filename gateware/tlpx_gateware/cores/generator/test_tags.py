"""The tag table and the timeout scan alone, in Migen's simulator, against Python references.

    random issues ──► TagTable ◄── random releases / advances (cpl port)
    random `sent`  ──►         ◄── random expiries (scan port)       compared every cycle
    (the link taking requests late)                                  with TagModel

    TagMemory (behavioural table) ──► TimeoutScan ──expire──► TagMemory   compared every
    (random reads issued with random stamps, idle stretches with none)    cycle with the
                                                                          reference scan

Every output of each module is compared with its reference in every cycle, under random
idle stretches (no request, no tag in flight) and random back-pressure from the link (a
request's `sent` comes any number of cycles after its issue). The references are written
from the modules' documented contracts, not from their code.
"""

import random
from collections import deque

import pytest
from migen import Module, run_simulation

from tlpx_gateware.cores.generator.tags import TagTable, TimeoutScan
from tlpx_gateware.testing.tag_memory import TagMemory


# Tag table ----------------------------------------------------------------------------------------

class TagModel:
    """The tag table's contract, cycle by cycle (TagTable's docstring)."""
    def __init__(self, tags, fifo_depth=16):
        self.tags, self.fifo_depth = tags, fifo_depth
        self.busy = set()
        self.time = [0] * tags
        self.dw = [0] * tags
        self.bytes = [0] * tags
        self.outstanding = 0
        self.waiting = deque()

    def free_tag(self):
        return min((t for t in range(self.tags) if t not in self.busy), default=0)

    def outputs(self, i):
        return {
            "busy": sum(1 << t for t in self.busy),
            "outstanding": self.outstanding,
            "free_tag": self.free_tag(),
            "can_issue": int(len(self.busy) < self.tags and self.outstanding < i["max_outstanding"]),
            "waiting": int(bool(self.waiting)),
            "cpl_busy": int(i["cpl_tag"] in self.busy), "cpl_time": self.time[i["cpl_tag"]],
            "cpl_dw": self.dw[i["cpl_tag"]], "cpl_bytes": self.bytes[i["cpl_tag"]],
            "scan_busy": int(i["scan_tag"] in self.busy), "scan_time": self.time[i["scan_tag"]],
        }

    def step(self, i):
        """One clock edge with inputs `i`."""
        if i["sent"] and self.waiting:
            head = self.waiting.popleft()
            if head in self.busy:  # a tag freed meanwhile keeps its stamp
                self.time[head] = i["now"]
        if i["issue"]:
            t = i["issue_tag"]
            self.time[t], self.dw[t], self.bytes[t] = i["issue_time"], i["issue_dw"], i["issue_bytes"]
            if i["issue_waits_for_link"]:
                assert len(self.waiting) < self.fifo_depth, "the test keeps the link's backlog in bounds"
                self.waiting.append(t)
        if i["restart"]:
            self.waiting.clear()
        if i["advance"]:
            t = i["cpl_tag"]
            self.dw[t] = (self.dw[t] + i["advance_dws"]) & 0xFFFFFFFF
        freed = ({i["cpl_tag"]} if i["release"] else set()) | ({i["scan_tag"]} if i["expire"] else set())
        self.outstanding = (self.outstanding + i["issue"] - i["release"] - i["expire"]) & 0xFF
        if i["issue"]:
            self.busy.add(i["issue_tag"])
        self.busy -= freed


def tag_table_bench(dut, tags, cycles, seed):
    rng = random.Random(seed)
    model = TagModel(tags)
    seen = {"sent_stamps": 0, "full": 0, "at_max": 0, "release": 0, "advance": 0, "expire": 0, "restart": 0}
    max_outstanding = rng.randint(1, tags)
    # Idle and back-pressure come in stretches, as verilog-pcie's inserters make them: a run of
    # cycles with no issue, and a run in which the link takes nothing.
    issue_off = link_off = 0

    def choose(now):
        nonlocal max_outstanding, issue_off, link_off
        if rng.random() < 0.01:
            max_outstanding = rng.randint(1, tags)
        if issue_off == 0 and rng.random() < 0.05:
            issue_off = rng.randint(1, 3 * tags)
        if link_off == 0 and rng.random() < 0.05:
            link_off = rng.randint(1, 20)
        issue_off, link_off = max(issue_off - 1, 0), max(link_off - 1, 0)
        can = len(model.busy) < tags and model.outstanding < max_outstanding
        issue = int(can and issue_off == 0 and len(model.waiting) < model.fifo_depth and rng.random() < 0.6)
        busy = sorted(model.busy)
        cpl_tag = rng.choice(busy) if busy and rng.random() < 0.8 else rng.randrange(tags)
        scan_tag = rng.randrange(tags)
        cpl_busy = cpl_tag in model.busy
        release = int(cpl_busy and rng.random() < 0.15)
        advance = int(cpl_busy and not release and rng.random() < 0.3)
        # The scan never expires the tag whose completion ends in the same cycle.
        expire = int(scan_tag in model.busy and scan_tag != cpl_tag and rng.random() < 0.1)
        return {
            "now": now, "max_outstanding": max_outstanding,
            "issue": issue, "issue_tag": model.free_tag(), "issue_time": rng.getrandbits(64),
            "issue_dw": rng.getrandbits(32), "issue_bytes": rng.getrandbits(13),
            "issue_waits_for_link": int(rng.random() < 0.85),
            "sent": int(link_off == 0 and rng.random() < 0.5), "restart": int(rng.random() < 0.005),
            "cpl_tag": cpl_tag, "release": release, "advance": advance, "advance_dws": rng.getrandbits(11),
            "scan_tag": scan_tag, "expire": expire,
        }

    def drive(i):
        for name in ("issue", "issue_tag", "issue_time", "issue_dw", "issue_bytes", "issue_waits_for_link",
                     "sent", "restart", "now", "max_outstanding"):
            yield getattr(dut, name).eq(i[name])
        for name in ("tag", "release", "advance", "advance_dws"):
            yield getattr(dut.cpl, name).eq(i[f"cpl_{name}" if name == "tag" else name])
        yield dut.scan.tag.eq(i["scan_tag"])
        yield dut.scan.expire.eq(i["expire"])

    now = rng.getrandbits(40)
    i = choose(now)
    yield from drive(i)
    yield
    for cycle in range(cycles):
        got = {
            "busy": (yield dut.busy), "outstanding": (yield dut.outstanding), "free_tag": (yield dut.free_tag),
            "can_issue": (yield dut.can_issue), "waiting": (yield dut.waiting),
            "cpl_busy": (yield dut.cpl.busy), "cpl_time": (yield dut.cpl.time), "cpl_dw": (yield dut.cpl.dw),
            "cpl_bytes": (yield dut.cpl.bytes), "scan_busy": (yield dut.scan.busy), "scan_time": (yield dut.scan.time),
        }
        want = model.outputs(i)
        assert got == want, f"cycle {cycle}: {[(k, got[k], want[k]) for k in got if got[k] != want[k]]}"
        seen["full"] += len(model.busy) == tags
        seen["at_max"] += model.outstanding >= max_outstanding and len(model.busy) < tags
        seen["sent_stamps"] += bool(i["sent"] and model.waiting and model.waiting[0] in model.busy)
        for k in ("release", "advance", "expire", "restart"):
            seen[k] += i[k]
        model.step(i)
        now += 1
        i = choose(now)
        yield from drive(i)
        yield
    return seen


@pytest.mark.parametrize("tags,cycles", [(8, 6000), (64, 3000)], ids=["tags8", "tags64"])
def test_tag_table_matches_its_model_under_idle_and_link_backpressure(tags, cycles):
    dut = TagTable(tags)
    seen = {}

    def bench():
        seen.update((yield from tag_table_bench(dut, tags, cycles, seed=tags)))
    run_simulation(dut, bench())
    # The run reached every case the comparison is meant to cover.
    assert all(v > 0 for k, v in seen.items() if k != "full" or tags == 8), seen


# Timeout scan -------------------------------------------------------------------------------------

def timeout_scan_bench(dut, mem, tags, timeout, cycles, seed):
    rng = random.Random(seed)
    busy, time = set(), [0] * tags
    due = [0] * tags  # first cycle a tag is both in the table and past its timeout
    scan_tag = 0
    expired_late = []  # cycles each expiry came after its tag passed the timeout
    expiries = exclusions = idle_cycles = 0
    idle = 0
    yield dut.timeout.eq(timeout)
    yield
    for cycle in range(cycles):
        now = (yield mem.now)
        completing = (yield dut.completing)
        completing_tag = (yield dut.completing_tag)
        got_tag, got_out = (yield dut.port.tag), (yield dut.timed_out)
        assert (yield dut.port.expire) == got_out
        assert got_tag == scan_tag, f"cycle {cycle}: scan at tag {got_tag}, reference {scan_tag}"
        late = scan_tag in busy and now - time[scan_tag] > timeout
        excluded = bool(completing) and completing_tag == scan_tag
        want = int(late and not excluded)
        assert got_out == want, f"cycle {cycle}: tag {scan_tag} timed_out {got_out}, reference {want}"
        exclusions += late and excluded
        idle_cycles += not busy
        active = bool(busy)
        if want:
            expiries += 1
            expired_late.append(now - due[scan_tag])
        if late:  # expired, or freed by the completion that won over the timeout
            busy.discard(scan_tag)
        # The scan moves while some tag is in flight (at this cycle), and stands still otherwise.
        if active:
            scan_tag = (scan_tag + 1) % tags
        # Stimulus for the next cycle: reads issued with stamps up to 2x the timeout in the past
        # (some long overdue), completions of in-flight tags, idle stretches with nothing in flight.
        if idle == 0 and rng.random() < 0.01:
            idle = rng.randint(1, 4 * tags)
        if idle:
            idle -= 1
            busy.clear()
        elif rng.random() < 0.2:
            t = rng.randrange(tags)
            if t not in busy:
                busy.add(t)
                time[t] = now - rng.randint(0, 2 * timeout) + 1
                due[t] = max(now + 1, time[t] + timeout + 1)
                yield mem.time[t].eq(time[t])
        yield mem.busy.eq(sum(1 << t for t in busy))
        # A completion ending: often on the tag the scan looks at next, to hit the exclusion.
        c_tag = scan_tag if busy and rng.random() < 0.5 else rng.randrange(tags)
        c = int(rng.random() < 0.3)
        yield dut.completing.eq(c)
        yield dut.completing_tag.eq(c_tag)
        yield
    return {"expiries": expiries, "exclusions": exclusions, "idle": idle_cycles, "worst": max(expired_late, default=None)}


@pytest.mark.parametrize("tags,timeout", [(8, 20), (64, 100)], ids=["tags8_timeout20", "tags64_timeout100"])
def test_timeout_scan_matches_reference_and_expires_within_one_sweep(tags, timeout):
    dut = TimeoutScan(tags)
    mem = TagMemory(dut.port, tags)
    top = Module()
    top.submodules += dut, mem
    top.comb += [dut.now.eq(mem.now), dut.active.eq(mem.busy != 0)]
    result = {}

    def bench():
        result.update((yield from timeout_scan_bench(dut, mem, tags, timeout, 8000, seed=tags + timeout)))
    run_simulation(top, bench())
    assert result["expiries"] > 20 and result["exclusions"] > 0 and result["idle"] > 100, result
    # Its contract: a lost completion is noticed within one sweep of the tags.
    assert result["worst"] is not None and 0 <= result["worst"] < tags, result
