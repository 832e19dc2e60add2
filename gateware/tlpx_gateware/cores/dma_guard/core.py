"""DMA guard: LitePCIe's DMA recovers from a lost or erroneous completion without a restart.

LitePCIe 2024.12's DMA reader and its tag controller wait for every completion of every read
they issued, for ever: a completion the root complex never sends (a dropped TLP, a completion
timeout on the host side) or one that ends the read early (UR, CA: no data, so the last
completion never comes) leaves the reader stuck and the tag taken until the card is reset.
A PCIe requester must instead time out (PCIe Base spec 2.8, completion timeout), as tlpx's
own generator does. The guard watches LitePCIe's requester side and does that for it:

```
 crossbar.phy_master.source ──MRd──► outstanding += 1        completions ──► EP, status counted
 crossbar.phy_master.sink   ◄─Cpl/CplD (end)── outstanding -= 1 (read complete), idle = 0
 outstanding != 0 and idle >= timeout ──► reset the crossbar (tag controller, reorder buffers)
                                          and the DMA engines, between packets; resets += 1
```

The reset happens only between packets on both streams, so the link never sees a cut TLP.
After it, the host programs the DMA again (its tables are reset too); a completion that
arrives after its read was given up would be taken for a new read's (as with any requester
after a completion timeout): the timeout is long (1 ms by default) against the host's ~1 µs.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect.csr import CSRField, CSRStatus, CSRStorage
from litex.soc.integration.doc import ModuleDoc

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware import tlp


class DmaGuard(LiteXModule):
    """``requests``: the crossbar's request stream out (request_layout: ``we``, first/last);
    ``completions``: its completion stream in (completion_layout: ``end``); ``phy_completions``:
    the same completions as TLPs (phy_layout) before LitePCIe's depacketizer, for the header
    bits LitePCIe drops (EP, status). ``reset`` is the synchronous reset of the crossbar and
    the DMA engines (their clock domain ``dma``, soc.py)."""
    def __init__(self, requests, completions, phy_completions, clock_hz):
        self.intro = ModuleDoc(__doc__.split("\n\n")[0])
        self.reset = Signal()  # out: one cycle, resets LitePCIe's crossbar and DMA

        self.control = ActionStorage(fields=[
            CSRField("reset", size=1, pulse=True, description="Write 1 to reset LitePCIe's DMA engines and tag controller now (between packets), as a timeout does."),
        ], description="DMA guard control.")
        self.timeout = CSRStorage(32, reset=int(clock_hz // 1000), description="Cycles LitePCIe may wait for a completion of an outstanding read before its DMA is reset (default 1 ms of card time).")
        self.outstanding = CSRStatus(8, description="Reads LitePCIe has outstanding now.")
        self.resets = CSRStatus(32, description="Resets of LitePCIe's DMA and tag controller: timeouts and control.reset.")
        self.timeouts = CSRStatus(32, description="Reads given up: outstanding reads at each timeout reset.")
        self.cpl_errors = CSRStatus(32, description="Completions to LitePCIe with a status other than Successful Completion (UR, CA, CRS).")
        self.cpl_poisoned = CSRStatus(32, description="Completions to LitePCIe with EP set (poisoned data: LitePCIe passes the data on as good).")

        # # #

        req, cpl, raw = requests, completions, phy_completions
        outstanding = self.outstanding.status
        issued = Signal()
        finished = Signal()
        self.comb += [
            issued.eq(req.valid & req.ready & req.first & ~req.we),
            finished.eq(cpl.valid & cpl.ready & cpl.last & cpl.end),
        ]
        # In-packet state of both streams: the reset waits for a boundary on each.
        req_in = Signal()
        cpl_in = Signal()
        self.sync += [
            If(req.valid & req.ready, req_in.eq(~req.last)),
            If(cpl.valid & cpl.ready, cpl_in.eq(~cpl.last)),
        ]
        idle = Signal(32)
        want = Signal()
        self.sync += [
            If(self.reset,
                idle.eq(0),
            ).Elif(issued | (cpl.valid & cpl.ready) | (outstanding == 0),
                idle.eq(0),
            ).Elif(idle != 0xFFFFFFFF,
                idle.eq(idle + 1),
            ),
        ]
        timed_out = Signal()
        self.comb += timed_out.eq((outstanding != 0) & (idle >= self.timeout.storage))
        self.sync += If(self.reset, want.eq(0)).Elif(timed_out | self.control.fields.reset, want.eq(1))
        self.comb += self.reset.eq(want & ~req_in & ~cpl_in & ~(req.valid & req.ready) & ~(cpl.valid & cpl.ready))
        self.sync += [
            If(self.reset,
                outstanding.eq(0),
                self.resets.status.eq(self.resets.status + 1),
                self.timeouts.status.eq(self.timeouts.status + outstanding),
            ).Else(
                outstanding.eq(outstanding + issued - finished),
            ),
        ]

        # Header bits LitePCIe drops: EP (DW0 bit 14) and the status (DW1 bits 15:13), both in
        # the first beat at every width (64 bits = DW0 and DW1).
        first = Signal()
        self.comb += first.eq(raw.valid & raw.ready & raw.first)
        self.sync += [
            If(first & raw.dat[14], self.cpl_poisoned.status.eq(self.cpl_poisoned.status + 1)),
            If(first & (raw.dat[32 + 13:32 + 16] != tlp.CPL_SC), self.cpl_errors.status.eq(self.cpl_errors.status + 1)),
        ]
