"""The slot's DMA mover against a host-memory model, on every datapath width.

```
 user model ──rd_req/wr_req, wr_data──► DmaMover ──tx (MRd, MWr)──► host model: memory
 user model ◄──rd_data/last/error────── DmaMover ◄──cpl (CplD)────── (latency, RCB splits,
                                                                     UR/CA/CRS/EP, no answer)
```

The host model checks every TLP the mover sends against the rules it promises (MRd within
max_read_bytes and 4 KiB, MWr <= 128 bytes within a 128-byte boundary, byte enables, tags in the
slot's range) and writes memory through the byte enables; the tests compare every byte read and
written (bytes beside a write must stay untouched), with random back-pressure on every stream.
"""

import random

import pytest
from migen import *
from migen.sim import passive

from tlpx_gateware import tlp
from tlpx_gateware.cores.slot.core import SLOT_TAG_BASE as TAG_BASE, SLOT_TAGS as TAGS
from tlpx_gateware.cores.slot.dma import MAX_WRITE_BYTES, DmaMover

WIDTHS = (64, 128, 256)
SIZES = (1, 4, 5, 1024, 1025, 4097)
BASE = 0x1_2340_0000      # host memory: a 64-bit bus address (4-DW headers)
LOW_BASE = 0x0010_0000    # and one below 4 GiB (3-DW headers)
MEM_BYTES = 4 * 4096


class Host:
    """Host memory at `base`; answers MRds (after `latency` cycles, split at `rcb` bytes when
    given, or with an error chosen by `fault(addr)`) and applies MWrs, checking each TLP."""
    def __init__(self, dut, width, base, max_read_bytes, latency=20, rcb=None, fault=None, seed=1, tx_ready_p=0.8,
                 reorder=False):
        self.dut, self.n, self.base = dut, width // 32, base
        self.mem = bytearray(random.Random(seed).randbytes(MEM_BYTES))
        self.max_read_bytes, self.latency, self.rcb = max_read_bytes, latency, rcb
        self.fault = fault or (lambda addr: None)
        self.rng = random.Random(seed + 1)
        self.tx_ready_p = tx_ready_p
        # reorder: an MRd's completions wait for the next MRd's, which go first (or 60 cycles).
        self.reorder, self.held, self.reordered = reorder, None, 0
        self.pending = []     # (due cycle, [DWs]) completions to send
        self.cycle = 0
        self.mrds = []        # (addr, dws, tag)
        self.mwrs = []        # (addr, dws)
        self.mwr_cycles = []  # the cycle each MWr's last beat was taken

    def offset(self, addr, nbytes):
        off = addr - self.base
        assert 0 <= off and off + nbytes <= MEM_BYTES, f"access at {addr:#x}+{nbytes} outside host memory"
        return off

    def handle(self, dws):
        h0, h1 = dws[0], dws[1]
        fmt, typ, length = h0 >> 29, (h0 >> 24) & 0x1F, (h0 & 0x3FF) or 1024
        assert typ == tlp.TYPE_MEM, f"unexpected TLP type {typ:#x}"
        four = fmt & 1
        addr = ((dws[2] << 32) | dws[3]) if four else dws[2]
        assert four == (addr >= 1 << 32), "a 4-DW header only above 4 GiB"
        assert addr & 3 == 0
        first_be, last_be, tag = h1 & 0xF, (h1 >> 4) & 0xF, (h1 >> 8) & 0xFF
        if length == 1:
            assert last_be == 0
        else:
            assert first_be == 0xF and last_be != 0
        hdr = 4 if four else 3
        if fmt & 2:   # MWr
            assert tag == TAG_BASE, f"MWr tag {tag}: the slot's first tag, so the spy attributes it"
            payload = dws[hdr:]
            assert len(payload) == length
            assert length * 4 <= MAX_WRITE_BYTES and addr // MAX_WRITE_BYTES == (addr + 4 * length - 1) // MAX_WRITE_BYTES, \
                f"MWr at {addr:#x} of {length} DWs crosses a 128-byte boundary"
            self.mwrs.append((addr, length))
            self.mwr_cycles.append(self.cycle)
            for i, dw in enumerate(payload):
                be = first_be if i == 0 else (last_be if i == length - 1 else 0xF)
                for b in range(4):
                    if be >> b & 1:
                        self.mem[self.offset(addr + 4 * i + b, 1)] = (dw >> 8 * b) & 0xFF
        else:         # MRd
            assert len(dws) == hdr
            assert TAG_BASE <= tag < TAG_BASE + TAGS, f"tag {tag} outside the slot's"
            assert length * 4 <= self.max_read_bytes
            assert addr // 4096 == (addr + 4 * length - 1) // 4096, f"MRd at {addr:#x} of {length} DWs crosses 4 KiB"
            assert addr % self.max_read_bytes + 4 * length <= self.max_read_bytes, "an MRd ends by its size's boundary"
            self.mrds.append((addr, length, tag))
            nbytes = tlp.read_byte_count(length, first_be, last_be)
            fault = self.fault(addr)
            due = self.cycle + self.latency
            req = (tag << 8)
            if fault == "drop":
                return
            if fault in ("UR", "CA", "CRS"):
                status = {"UR": tlp.CPL_UR, "CA": tlp.CPL_CA, "CRS": tlp.CPL_CRS}[fault]
                self.pending.append((due, [tlp.dw0(tlp.FMT_3DW_NO_DATA, tlp.TYPE_CPL, 0),
                                           (status << 13) | nbytes, req]))
                return
            cpls = []
            # Successful (or poisoned) data, split at RCB boundaries when asked.
            off = self.offset(addr, 4 * length)
            data = [int.from_bytes(self.mem[off + 4 * i: off + 4 * i + 4], "little") for i in range(length)]
            pos, left = 0, nbytes
            while pos < length:
                step = length - pos
                if self.rcb:
                    step = min(step, (self.rcb - (addr + 4 * pos) % self.rcb) // 4)
                ep = 1 if fault == "EP" else 0
                cpls.append((due, [tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_CPL, step, ep=ep),
                                   (tlp.CPL_SC << 13) | (left & 0xFFF),
                                   req | ((addr + 4 * pos) & 0x7F)] + data[pos:pos + step]))
                left -= 4 * step
                pos += step
                due += 2
            if not self.reorder:
                self.pending += cpls
            elif self.held is None:
                self.held = (self.cycle, cpls)
            else:
                self.pending += cpls + self.held[1]
                self.held = None
                self.reordered += 1

    @passive
    def tx_gen(self):
        tx, dws = self.dut.tx, []
        while True:
            yield tx.ready.eq(self.rng.random() < self.tx_ready_p)
            yield
            self.cycle += 1
            if (yield tx.valid) and (yield tx.ready):
                dat, be = (yield tx.dat), (yield tx.be)
                if (yield tx.first):
                    assert not dws, "a TLP started before the previous one ended"
                for i in range(self.n):
                    if be >> (4 * i) & 1:
                        dws.append(dat >> (32 * i) & 0xFFFFFFFF)
                if (yield tx.last):
                    self.handle(dws)
                    dws = []

    @passive
    def cpl_gen(self):
        cpl = self.dut.cpl
        while True:
            if self.held and self.cycle - self.held[0] > 60:
                self.pending += self.held[1]
                self.held = None
            if not self.pending or self.pending[0][0] > self.cycle:
                yield
                continue
            _, dws = self.pending.pop(0)
            beats = [dws[i:i + self.n] for i in range(0, len(dws), self.n)]
            for k, beat in enumerate(beats):
                yield cpl.valid.eq(1)
                yield cpl.first.eq(k == 0)
                yield cpl.last.eq(k == len(beats) - 1)
                yield cpl.dat.eq(sum(dw << (32 * i) for i, dw in enumerate(beat)))
                yield cpl.be.eq(sum(0xF << (4 * i) for i in range(len(beat))))
                yield
                while not (yield cpl.ready):
                    yield
            yield cpl.valid.eq(0)


def user_read(dut, addr, length, result, rng, ready_p=0.7):
    """One read request; `result` gets the bytes, the error flag and the cycles it took."""
    yield dut.rd_req_valid.eq(1)
    yield dut.rd_req_addr.eq(addr)
    yield dut.rd_req_len.eq(length)
    yield
    while not (yield dut.rd_req_ready):
        yield
    start = 0
    yield dut.rd_req_valid.eq(0)
    data, n = bytearray(), 0
    while True:
        yield dut.rd_ready.eq(rng.random() < ready_p)
        yield
        n += 1
        if (yield dut.rd_valid) and (yield dut.rd_ready):
            data += (yield dut.rd_data).to_bytes(4, "little")
            last, err = (yield dut.rd_last), (yield dut.rd_error)
            assert err == 0 or last, "rd_error only on the last DW"
            if last:
                break
    yield dut.rd_ready.eq(0)
    result.update(data=bytes(data), error=err, cycles=n)


def user_write(dut, addr, payload, result, rng, valid_p=0.7):
    yield dut.wr_req_valid.eq(1)
    yield dut.wr_req_addr.eq(addr)
    yield dut.wr_req_len.eq(len(payload))
    yield
    while not (yield dut.wr_req_ready):
        yield
    yield dut.wr_req_valid.eq(0)
    padded = payload + bytes(-len(payload) % 4)
    dws = [int.from_bytes(padded[i:i + 4], "little") for i in range(0, len(padded), 4)]
    n, i, done = 0, 0, None
    while done is None:
        v = i < len(dws) and rng.random() < valid_p
        yield dut.wr_valid.eq(v)
        if v:
            yield dut.wr_data.eq(dws[i])
        yield
        n += 1
        if (yield dut.wr_done):
            done = (yield dut.wr_error)
        if v and (yield dut.wr_ready):
            i += 1
    yield dut.wr_valid.eq(0)
    result.update(error=done, taken=i, cycles=n)


def run(width, ops, base=BASE, max_read_bytes=512, timeout_cycles=None, p=0.7, read_slots=2, **host_kw):
    """Runs `ops` (("r", addr, len) / ("w", addr, bytes)) one after the other; returns the
    host model, the results and the mover's counters."""
    dut = DmaMover(width, Signal(16, reset=0x0100), TAG_BASE, TAGS, timeout_cycles=timeout_cycles or 20000,
                   max_read_bytes=max_read_bytes, read_slots=read_slots)
    host = Host(dut, width, base, max_read_bytes, **host_kw)
    rng = random.Random(width)
    results = [dict() for _ in ops]
    counters = {}

    def user():
        for op, res in zip(ops, results):
            if op[0] == "r":
                yield from user_read(dut, op[1], op[2], res, rng, p)
            else:
                yield from user_write(dut, op[1], op[2], res, rng, p)
        for _ in range(50):
            yield
        assert not (yield dut.busy), "the mover is busy after the last request"
        for name, sig in dut.counters.items():
            counters[name] = (yield sig)

    run_simulation(dut, [user(), host.tx_gen(), host.cpl_gen()])
    assert len(counters) == len(dut.counters), "the simulation ended before the user model"
    return host, results, counters


def expected(host, addr, length):
    off = addr - host.base
    return bytes(host.mem[off:off + length])


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("size", SIZES)
def test_read_delivers_every_byte_in_order(width, size):
    addr = BASE + 4096 - 8  # starts 8 bytes before a 4 KiB boundary
    host0 = Host(None, width, BASE, 512)  # the same memory contents as the run's model
    host, (res,), k = run(width, [("r", addr, size)], rcb=64)
    assert res["error"] == 0
    assert len(res["data"]) == 4 * ((size + 3) // 4)
    assert res["data"][:size] == expected(host0, addr, size)
    assert sum(length for _, length, _ in host.mrds) == (size + 3) // 4
    assert k == {"dma_reads": 1, "dma_writes": 0, "dma_read_bytes": size, "dma_write_bytes": 0, "dma_errors": 0, "dma_fenced": 0}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("size", SIZES)
def test_write_lands_every_byte_and_nothing_else(width, size):
    addr = LOW_BASE + 4096 - 12
    payload = random.Random(size).randbytes(size)
    before = Host(None, width, LOW_BASE, 512).mem
    host, (res,), k = run(width, [("w", addr, payload)], base=LOW_BASE)
    assert res["error"] == 0 and res["taken"] == (size + 3) // 4
    off = addr - LOW_BASE
    assert host.mem[off:off + size] == payload
    assert host.mem[:off] == before[:off] and host.mem[off + size:] == before[off + size:]
    assert all(n <= MAX_WRITE_BYTES // 4 for _, n in host.mwrs)
    assert k == {"dma_reads": 0, "dma_writes": 1, "dma_read_bytes": 0, "dma_write_bytes": size, "dma_errors": 0, "dma_fenced": 0}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("max_read_bytes", [64, 4096])
def test_read_request_size_is_respected(width, max_read_bytes):
    """A read from 100 bytes before a 4 KiB boundary to 104 after the next: a whole 4 KiB
    page in the middle, so the largest MRd is max_read_bytes even at 4096 (the same page
    crossings as 8300 bytes from BASE + 100, in half the simulated cycles)."""
    addr, size = BASE + 4096 - 100, 100 + 4096 + 104
    host0 = Host(None, width, BASE, max_read_bytes)
    host, (res,), _ = run(width, [("r", addr, size)], max_read_bytes=max_read_bytes)
    assert res["error"] == 0 and res["data"] == expected(host0, addr, size)
    assert max(n for _, n, _ in host.mrds) == max_read_bytes // 4
    assert len({t for _, _, t in host.mrds}) == min(TAGS, len(host.mrds)), "tags go round"


def failing_at(page, kind):
    return lambda addr: kind if (addr - BASE) // 512 == page else None


# Every failure kind at 64 bits; the wider datapaths with one error completion and the timeout
# (the failure handling is the same at every width, the filler's beats are not): 9 simulations,
# not 15 (each a few seconds of migen; docs/performance.md, "make test's time").
@pytest.mark.parametrize("width,kind", [(64, kind) for kind in ("UR", "CA", "CRS", "EP", "drop")] +
                         [(128, "UR"), (128, "drop"), (256, "EP"), (256, "drop")])
def test_read_error_ends_request_with_rd_error_then_next_request_works(width, kind):
    """The second MRd of a 2000-byte read fails: the first 512 bytes arrive, then filler, and
    rd_error on the last of exactly 500 DWs; a following read of good memory succeeds."""
    host0 = Host(None, width, BASE, 512)
    host, (bad, good), k = run(width, [("r", BASE, 2000), ("r", BASE + 2048, 600)],
                               fault=failing_at(1, kind), timeout_cycles=300, rcb=64)
    assert bad["error"] == 1 and len(bad["data"]) == 2000
    assert bad["data"][:512] == expected(host0, BASE, 512)
    assert bad["data"][512:] == bytes(2000 - 512), "filler after the failure"
    # The failed MRd's slot stays taken: with 2 slots one more MRd (1024) may have gone out
    # before the failure was known, none after; then the second request's two.
    offsets = [a - BASE for a, _, _ in host.mrds]
    assert offsets[:2] == [0, 512] and offsets[-2:] == [2048, 2560] and len(offsets) <= 2 + 1 + 2, offsets
    assert good["error"] == 0 and good["data"] == expected(host0, BASE + 2048, 600)
    assert k["dma_errors"] == 1 and k["dma_reads"] == 2 and k["dma_read_bytes"] == 600
    if kind == "drop":
        assert bad["cycles"] >= 300, "the timeout waited"


# Each slot count at 64 bits, each wider datapath with reordering (2 and 4 slots): 5 of the 9.
@pytest.mark.parametrize("width,read_slots", [(64, 1), (64, 2), (64, 4), (128, 2), (256, 4)])
def test_reordered_completions_arrive_in_order(width, read_slots):
    """The host answers each pair of MRds in reverse order (the second MRd's completions pass
    the first's, as PCIe allows): the data still comes in address order."""
    addr, size = BASE + 4, 3000
    host0 = Host(None, width, BASE, 256)
    host, (res,), k = run(width, [("r", addr, size)], max_read_bytes=256, read_slots=read_slots, reorder=True)
    assert res["error"] == 0 and res["data"][:size] == expected(host0, addr, size)
    assert k["dma_read_bytes"] == size
    assert (host.reordered > 0) == (read_slots > 1), "pairs of MRds were answered in reverse order"


@pytest.mark.parametrize("width", WIDTHS)
def test_bad_requests_are_refused(width):
    host, res, k = run(width, [("r", BASE + 2, 8), ("r", BASE, 0), ("w", BASE + 1, b"abcd"), ("w", BASE, b""),
                               ("r", BASE, 4)])
    assert [r["error"] for r in res] == [1, 1, 1, 1, 0]
    assert len(res[0]["data"]) == 8 and len(res[1]["data"]) == 4
    assert res[2]["taken"] == 0 and res[3]["taken"] == 0
    assert len(host.mrds) == 1 and not host.mwrs
    assert k["dma_errors"] == 4 and k["dma_reads"] == 1 and k["dma_writes"] == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_throughput(width, capsys):
    """Bytes per card cycle with a user and a link that never stall and a host that answers an
    MRd after 20 cycles."""
    size = 4096  # 32 MWrs of 128 B and eight MRds of 512 B: the steady state, not the first TLP's wait
    payload = bytes(range(256)) * (size // 256)
    host, (w, r), _ = run(width, [("w", BASE, payload), ("r", BASE, size)], p=1.0, latency=20, tx_ready_p=1.0)
    assert r["data"] == payload
    wr_bpc, rd_bpc = size / w["cycles"], size / r["cycles"]
    with capsys.disabled():
        print(f"\nDmaMover dw{width}: write {wr_bpc:.2f} B/cycle, read {rd_bpc:.2f} B/cycle "
              f"({size} bytes, host latency 20 cycles, MRd 512 B)")
    assert wr_bpc > 3.0, "MWr of 32 DWs with a 4-DW header: ~3.5 bytes per cycle"
    assert rd_bpc > 2.0


def copy_user(dut, src, dst, size, result, read_after=0, each_cycle=None):
    """A user that streams rd_data into wr_data (pci_epf_test's COPY): the write requested
    first, the read `read_after` cycles later; `each_cycle(bytes moved)`, a generator, runs in
    every cycle. Ends at wr_done (the read's last DW went into the write before it); `result`
    gets rd and wr (their error flags) and the cycles taken."""
    yield dut.wr_req_valid.eq(1)
    yield dut.wr_req_addr.eq(dst)
    yield dut.wr_req_len.eq(size)
    for _ in range(read_after):
        yield
    yield dut.rd_req_valid.eq(1)
    yield dut.rd_req_addr.eq(src)
    yield dut.rd_req_len.eq(size)
    held, rd_end, wr_end, moved = None, None, None, 0
    for cycle in range(30000):
        yield dut.rd_ready.eq(held is None)
        yield dut.wr_valid.eq(held is not None)
        yield dut.wr_data.eq(held or 0)
        yield
        if each_cycle is not None:
            yield from each_cycle(moved)
        if (yield dut.rd_req_valid) and (yield dut.rd_req_ready):
            yield dut.rd_req_valid.eq(0)
        if (yield dut.wr_req_valid) and (yield dut.wr_req_ready):
            yield dut.wr_req_valid.eq(0)
        if (yield dut.wr_done):
            wr_end = (yield dut.wr_error)
            break
        if held is not None and (yield dut.wr_ready):
            held, moved = None, moved + 4
        elif held is None and (yield dut.rd_valid):
            held = (yield dut.rd_data)
            if (yield dut.rd_last):
                rd_end = (yield dut.rd_error)
    result.update(rd=rd_end, wr=wr_end, cycles=cycle)


@pytest.mark.parametrize("width", WIDTHS)
def test_copy_streams_reads_into_writes(width):
    """A user that streams rd_data into wr_data (pci_epf_test's COPY), the write requested first:
    each MWr waits for its data in the mover, not in the transmit arbiter, so the MRds that
    bring that data still leave (an MWr header sent ahead of its data deadlocked here)."""
    size, src, dst = 4097, BASE + 8, BASE + 2 * 4096 + 4
    dut = DmaMover(width, Signal(16, reset=0x0100), TAG_BASE, TAGS, timeout_cycles=20000)
    host = Host(dut, width, BASE, 512)
    original = bytes(host.mem)
    done = {}

    def user():
        # The write first: its first MWr is ready to go before the first MRd is.
        yield from copy_user(dut, src, dst, size, done, read_after=10)

    run_simulation(dut, [user(), host.tx_gen(), host.cpl_gen()])
    assert done["rd"] == 0 and done["wr"] == 0, f"copy ended with {done}"
    off = dst - BASE
    assert bytes(host.mem[off:off + size]) == original[src - BASE:src - BASE + size]


@pytest.mark.parametrize("width", WIDTHS)
def test_fence_cuts_a_copy_short_and_refuses_until_lifted(width):
    """The slot's lease ends in the middle of a COPY (cores/slot/core.py raises ``fence``):
    after the TLP on its way no MWr reaches host memory, no further MRd leaves, the copy ends
    with rd_error and wr_error (its remaining data taken and dropped, so the user does not
    stall), both cut requests are counted; a request while fenced is refused without a TLP;
    once the fence is lifted the next copy lands whole."""
    size, src, dst = 2048, BASE + 8, BASE + 2 * 4096 + 4
    dut = DmaMover(width, Signal(16, reset=0x0100), TAG_BASE, TAGS, timeout_cycles=20000)
    host = Host(dut, width, BASE, 512)
    original = bytes(host.mem)
    done = []
    fenced_at = {}

    def fence_after(limit):
        def each_cycle(moved):
            if moved >= limit and not fenced_at:
                yield dut.fence.eq(1)
                fenced_at.update(cycle=host.cycle, mwrs=len(host.mwrs), mrds=len(host.mrds))
        return each_cycle

    def copy(each_cycle=None):
        result = {}
        yield from copy_user(dut, src, dst, size, result, each_cycle=each_cycle)
        done.append({"rd": result["rd"], "wr": result["wr"]})

    def user():
        yield from copy(fence_after(512))
        # Fenced: a new read is refused (filler, rd_error) and sends nothing.
        sent = len(host.mrds) + len(host.mwrs)
        result = {}
        yield from user_read(dut, src, 64, result, random.Random(0))
        done.append({"rd": result["error"], "tlps": len(host.mrds) + len(host.mwrs) - sent})
        for _ in range(100):
            yield
        assert not (yield dut.busy), "the mover is busy after the cut copy"
        counters = {}
        for name, sig in dut.counters.items():
            counters[name] = (yield sig)
        fenced_at["counters"] = counters
        fenced_at["mwrs_fenced"], fenced_at["mrds_fenced"] = len(host.mwrs), len(host.mrds)
        yield dut.fence.eq(0)
        yield
        host.mem[dst - BASE:dst - BASE + size] = bytes(size)
        yield from copy()

    run_simulation(dut, [user(), host.tx_gen(), host.cpl_gen()])
    assert len(done) == 3, f"the simulation ended early: {done}"
    cut, refused, whole = done
    assert cut == {"rd": 1, "wr": 1}, "the cut copy ends with an error on both sides"
    # After the fence: at most the MWr whose TLP was on its way (its header leaves before the
    # cycle its last beat is taken, which the model records), and no MRd.
    late = [c for c in host.mwr_cycles[fenced_at["mwrs"]:fenced_at["mwrs_fenced"]] if c > fenced_at["cycle"]]
    assert len(late) <= 1, f"MWrs after the fence: {late}"
    assert fenced_at["mrds_fenced"] - fenced_at["mrds"] <= 1, "at most the MRd being emitted leaves after the fence"
    landed = sum(n for _, n in host.mwrs[:fenced_at["mwrs"] + len(late)])
    assert landed * 4 < size, "the copy did not land whole"
    assert refused == {"rd": 1, "tlps": 0}
    k = fenced_at["counters"]
    assert k["dma_fenced"] == 3 and k["dma_errors"] == 3, k
    assert whole == {"rd": 0, "wr": 0}
    assert bytes(host.mem[dst - BASE:dst - BASE + size]) == original[src - BASE:src - BASE + size]
