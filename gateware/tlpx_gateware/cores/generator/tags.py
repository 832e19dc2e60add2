"""The generator's read tags: which are in flight, what each one's completions are checked
against, and the scan that times them out.

```
 RequestEngine ──issue──► TagTable ◄──cpl port── CompletionChecker (lookup by the completion's
 TX boundary ───sent───►   │  ▲                                    tag; release / advance)
                           │  └──scan port── TimeoutScan (one tag per cycle; expire)
                           └──► free_tag, can_issue, outstanding, busy
```
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream

from tlpx_gateware.cores.common import lowest_set


def cpl_port_layout(tags):
    """The completion checker's port into the tag table (the checker is the master)."""
    return [
        ("tag",         bits_for(tags - 1), DIR_M_TO_S),  # tag of the completion on the sink
        ("busy",        1,                  DIR_S_TO_M),  # that tag has a read in flight
        ("time",        64,                 DIR_S_TO_M),  # its stamp (card cycle), latency origin
        ("dw",          32,                 DIR_S_TO_M),  # DW address its next completion starts at
        ("bytes",       13,                 DIR_S_TO_M),  # bytes its request asked for
        ("release",     1,                  DIR_M_TO_S),  # pulse: the request's last completion ended
        ("advance",     1,                  DIR_M_TO_S),  # pulse: one of its completions ended, more follow
        ("advance_dws", 11,                 DIR_M_TO_S),  # the DWs that completion carried
    ]


def scan_port_layout(tags):
    """The timeout scan's port into the tag table (the scan is the master)."""
    return [
        ("tag",    bits_for(tags - 1), DIR_M_TO_S),  # the tag looked at this cycle
        ("busy",   1,                  DIR_S_TO_M),  # it has a read in flight
        ("time",   64,                 DIR_S_TO_M),  # its stamp (card cycle)
        ("expire", 1,                  DIR_M_TO_S),  # pulse: it timed out, free it
    ]

# Tag table ----------------------------------------------------------------------------------------

class TagTable(LiteXModule):
    """Per tag: in flight or not, the card cycle it is timed from, the DW its next completion
    starts at (so completions can be checked in any order), and the bytes its request asked for.

    A read request takes the lowest free tag when it leaves the engine (``issue``) and is
    stamped then; its TLPs reach the link later, in the order they were issued, so the tag
    waits in a FIFO until ``sent`` and is stamped again then (the latency counts from the
    link; the completion timeout from the issue until then). A write-then-read's read keeps
    the stamp it was issued with (the write's first TLP on the link). A tag is freed by its
    request's last completion (``cpl.release``) or by the timeout scan (``scan.expire``);
    a tag is never issued and freed in the same cycle (only a busy tag is freed, only a free
    one issued).
    """
    def __init__(self, tags, sent_fifo_depth=16):
        assert tags & (tags - 1) == 0, f"tags must be a power of two, not {tags!r}"
        # Issue: a read request left the engine with the lowest free tag.
        self.issue       = Signal()           # pulse
        self.issue_tag   = Signal(max=tags)
        self.issue_time  = Signal(64)         # its stamp
        self.issue_dw    = Signal(32)         # DW address of its first byte
        self.issue_bytes = Signal(13)
        self.issue_waits_for_link = Signal()  # stamp it again when `sent` (not for write-then-read)
        self.sent        = Signal()           # pulse: the oldest waiting request's last beat went to the link
        self.restart     = Signal()           # pulse: a run starts, no request waits for the link
        self.now         = Signal(64)         # card cycle
        self.max_outstanding = Signal(8)

        self.cpl  = Record(cpl_port_layout(tags))
        self.scan = Record(scan_port_layout(tags))

        self.busy        = Signal(tags)       # bit per tag: a read in flight
        self.outstanding = Signal(8)          # reads in flight
        self.free_tag    = Signal(max=tags)   # the lowest free tag
        self.can_issue   = Signal()           # a tag is free and fewer than max_outstanding in flight
        self.waiting     = Signal()           # a request waits for the link

        # # #

        busy, cpl, scan = self.busy, self.cpl, self.scan
        issue_time = Array(Signal(64, name=f"issue_time{i}") for i in range(tags))
        next_dw    = Array(Signal(32, name=f"next_dw{i}") for i in range(tags))
        req_bytes  = Array(Signal(13, name=f"req_bytes{i}") for i in range(tags))

        any_free = Signal(name="any_free")
        # The lowest free tag by a balanced tree (cores/common.py lowest_set), not a chain of
        # `tags` priority Ifs: the same tag, log2(tags) muxes deep (docs/resources.md).
        (lowest_free, found), statements = lowest_set(~busy, tags)
        self.comb += statements
        self.comb += [
            self.free_tag.eq(lowest_free), any_free.eq(found),
            self.can_issue.eq(any_free & (self.outstanding < self.max_outstanding)),
        ]
        self.comb += [
            cpl.busy.eq((busy >> cpl.tag)[0]),
            cpl.time.eq(issue_time[cpl.tag]),
            cpl.dw.eq(next_dw[cpl.tag]),
            cpl.bytes.eq(req_bytes[cpl.tag]),
            scan.busy.eq((busy >> scan.tag)[0]),
            scan.time.eq(issue_time[scan.tag]),
        ]

        # Requests waiting for the link, oldest first.
        self.sent_tags = sent_tags = stream.SyncFIFO([("tag", len(self.issue_tag))], sent_fifo_depth)
        sent_tags = ResetInserter()(sent_tags)
        self.comb += [
            sent_tags.reset.eq(self.restart),
            sent_tags.sink.valid.eq(self.issue & self.issue_waits_for_link),
            sent_tags.sink.tag.eq(self.issue_tag),
            sent_tags.source.ready.eq(self.sent),
            self.waiting.eq(sent_tags.source.valid),
        ]
        # Statement order matters where two hit one tag (the later wins): an issue after a
        # stale `sent` stamp, an advance after an issue.
        self.sync += [
            If(self.sent & sent_tags.source.valid & (busy >> sent_tags.source.tag)[0],
                issue_time[sent_tags.source.tag].eq(self.now),
            ),
            If(self.issue,
                issue_time[self.issue_tag].eq(self.issue_time),
                next_dw[self.issue_tag].eq(self.issue_dw),
                req_bytes[self.issue_tag].eq(self.issue_bytes),
            ),
            If(cpl.advance,
                next_dw[cpl.tag].eq(next_dw[cpl.tag] + cpl.advance_dws),
            ),
        ]
        # busy is a vector: clear bits by mask (issue and free never hit the same tag).
        free_mask = Signal(tags)
        self.comb += free_mask.eq(Mux(cpl.release, 1 << cpl.tag, 0) | Mux(scan.expire, 1 << scan.tag, 0))
        set_mask = Signal(tags)
        self.comb += set_mask.eq(Mux(self.issue, 1 << self.issue_tag, 0))
        self.sync += busy.eq((busy | set_mask) & ~free_mask)
        self.sync += self.outstanding.eq(self.outstanding + self.issue - cpl.release - scan.expire)

# Timeout scan -------------------------------------------------------------------------------------

class TimeoutScan(LiteXModule):
    """Looks at one tag per cycle, round robin, and expires it when it has been in flight
    longer than ``timeout`` cycles: a lost completion is noticed within ``timeout`` + ``tags``
    cycles, with one comparator instead of one per tag.

    A completion of the same tag that ends in the same cycle wins (the tag is the checker's
    to free or advance). The scan stands still while no tag is in flight: nothing in an idle
    generator runs (cores/isolate.py).
    """
    def __init__(self, tags):
        assert tags & (tags - 1) == 0, f"tags must be a power of two (the scan wraps), not {tags!r}"
        self.port           = Record(scan_port_layout(tags))
        self.active         = Signal()          # some tag is in flight
        self.now            = Signal(64)        # card cycle
        self.timeout        = Signal(32)        # cycles
        self.completing     = Signal()          # a completion of one of our reads ends this cycle
        self.completing_tag = Signal(max=tags)  # its tag
        self.timed_out      = Signal()          # pulse: port.tag expired (same as port.expire)

        # # #

        port = self.port
        self.comb += [
            self.timed_out.eq(port.busy & ((self.now - port.time) > self.timeout) &
                              ~(self.completing & (self.completing_tag == port.tag))),
            port.expire.eq(self.timed_out),
        ]
        self.sync += If(self.active, port.tag.eq(port.tag + 1))
