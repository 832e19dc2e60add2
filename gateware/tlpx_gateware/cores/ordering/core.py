"""Ordering between the card's requests, its MSIs and its completions, across the hard IP.

PCIe orders posted requests, completions and MSIs on the link (Base spec 2.4: a completion or
an MSI must not pass an earlier posted write). Inside a hard IP they travel apart: an MSI is
asked for on the IP's interrupt interface and the IP sends it at once, while the write it
announces may still be in the PHY's clock-domain crossing, LitePCIe's adapter FIFO or the
IP's request pipeline; on the UltraScale IP completions (CC) and requests (RQ) are separate
interfaces merged inside it. The independent model of the UltraScale IP (targets/hardip)
showed it: LitePCIe's DMA writer's MSI reached the root complex before its last write.

`RequestLedger` counts the card's requests where they enter its transmit path (every
requester's port) and where they leave it (the PHY's `requests_done`: the last beat handed
to the link by SimPHY, or the IP's pcie_rq_seq_num on UltraScale, which the IP reports once
a request has passed the point where nothing from the user can overtake it, PG156).
`MsiFence` holds an MSI until every request that entered before it has left: the source's
data is on the link before its interrupt. An MSI with nothing in flight passes in the same
cycle. A request lost inside the card (a requester reset mid-TLP) would hold the fence for
ever: after `timeout` cycles it lets the MSI go, counts it and forgets the missing requests.
"""

from migen import *

from litex.soc.interconnect import stream

from litepcie.common import msi_layout

COUNT_BITS = 16


def popcount(bits):
    return sum(bits[i] for i in range(len(bits)))


class RequestLedger(Module):
    """Requests in flight in the card's transmit path: `issued` pulses (one signal per port,
    any number per cycle) against the PHY's `requests_done` count (COUNT_BITS, wrapping).
    `issued_count` includes this cycle's pulses."""
    def __init__(self, issued, requests_done):
        self.issued_count = Signal(COUNT_BITS)
        self.done_count   = Signal(COUNT_BITS)
        self.forget       = Signal()             # count the requests in flight as done (lost)

        # # #

        issued_reg = Signal(COUNT_BITS)
        skew       = Signal(COUNT_BITS)          # requests forgotten, as done
        self.comb += [
            self.issued_count.eq(issued_reg + popcount(Cat(*issued))),
            self.done_count.eq(requests_done + skew),
        ]
        self.sync += [
            issued_reg.eq(self.issued_count),
            If(self.forget, skew.eq(self.issued_count - requests_done)),
        ]

    def all_done_up_to(self, target):
        """True once every request counted up to `target` has left (the counters wrap)."""
        return (self.done_count - target)[COUNT_BITS - 1] == 0


def last_beats(endpoint):
    """A pulse per packet leaving `endpoint` (its last beat taken)."""
    return endpoint.valid & endpoint.ready & endpoint.last


class MsiFence(Module):
    """sink (LitePCIe's MSI) -> source (the PHY's MSI), each MSI held until the requests
    issued before it have left the transmit path (RequestLedger)."""
    def __init__(self, ledger, timeout=1024):
        self.sink     = sink   = stream.Endpoint(msi_layout())
        self.source   = source = stream.Endpoint(msi_layout())
        self.holding  = Signal()                  # an MSI waits (keeps a gated core clock running)
        self.timeouts = Signal(32)                # MSIs let go by the timeout

        # # #

        target  = Signal(COUNT_BITS)
        waited  = Signal(max=timeout + 1)
        clear_now = Signal()
        self.comb += [
            clear_now.eq(ledger.all_done_up_to(ledger.issued_count)),
            sink.connect(source, omit={"valid", "ready"}),
            If(~self.holding,
                # Nothing in flight: the MSI goes on in this cycle.
                source.valid.eq(sink.valid & clear_now),
                sink.ready.eq(source.ready & clear_now),
            ).Else(
                source.valid.eq(sink.valid & (ledger.all_done_up_to(target) | (waited == timeout))),
                sink.ready.eq(source.ready & (ledger.all_done_up_to(target) | (waited == timeout))),
            ),
            ledger.forget.eq(self.holding & (waited == timeout)),
        ]
        self.sync += [
            If(~self.holding,
                If(sink.valid & ~clear_now,
                    self.holding.eq(1),
                    target.eq(ledger.issued_count),
                    waited.eq(0),
                )
            ).Else(
                If(waited != timeout, waited.eq(waited + 1)),
                If(waited == timeout - 1, self.timeouts.eq(self.timeouts + 1)),
                If(source.valid & source.ready, self.holding.eq(0)),
            ),
        ]
