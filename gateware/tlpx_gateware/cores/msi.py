"""The card's MSI block: LitePCIe's, with an enable bit per source that no driver writes whole,
and a message per vector when the host grants more than one.

LitePCIe's ``LitePCIeMSI`` has one ``enable`` register for every source. A driver that
writes it whole (``enable = my_bit``) turns every other source off: after a ``tlpx bw`` the
slot's source, enabled at reset for a stock DUT driver that knows nothing of tlpx's mask,
stayed off until the next reset, and the DUT's driver got no interrupt. Here each driver sets
and clears its own bit:

```
 enable_set   = 1 << source ──► enable |=  mask   (the other sources' bits untouched)
 enable_clear = 1 << source ──► enable &= ~mask
 enable       = value       ──► enable  =  value  (LitePCIe's register, kept for LitePCIe's
                                                   own driver, which reads it first)
 MSI to the hard IP ──► msi_cycle = timebase cycle of its handshake
```

Vectors (issue 29): bit n of ``irqs`` raises vector n; vectors 0..6 are the card's sources
(soc.MSI_SOURCES), the others are free for the interrupt timer to fire (one per CPU it
measures). With one vector granted (the MSI capability's Multiple Message Enable 0, what stock
drivers ask for) every source sends vector 0, gathered as LitePCIe's ``LitePCIeMSI`` does, and
``vector`` names the sources. With more (MME > 0) each raised vector is a message of its own,
lowest first, as LitePCIe's ``LitePCIeMSIMultiVector``; a vector above the granted count folds
into the last granted one, so nothing is lost when the host grants fewer than asked.

``msi_cycle`` is the card's own stamp of the last MSI it handed to the PCIe core: with the
software interrupt's ``ident.trigger_cycle`` it gives the card's part of an MSI's latency
(trigger write at the card to MSI request) apart from the host's (``tlpx selftest``).
"""

from migen import *

from litex.gen import LiteXModule
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage

from litepcie.common import msi_layout

# Vectors of the MSI block: as many as multi-message MSI can carry.
MSI_VECTORS = 32


class TlpxMSI(LiteXModule):
    """LitePCIe's MSI registers and single-vector behaviour, plus a message per vector.

    ``cycles``: the card's 64-bit timebase (``msi_cycle``'s stamp). ``irqs``: a pulse per
    vector (bit n raises vector n). ``vectors_granted``: how many vectors the host enabled
    (the PHY's configuration: MSI's Multiple Message Enable as 1 << MME, or MSI-X's table
    size while MSI-X is on); 1 keeps LitePCIe's single-vector behaviour.
    """
    def __init__(self, cycles, width=32, enabled_at_reset=0, vector_of=None):
        """``vector_of``: {source: Signal} for sources whose message, with several vectors
        granted, goes on a vector that source chooses (the slot's DUT, which owns the
        function's vectors as its stock driver sees them) rather than on their own."""
        assert width == MSI_VECTORS
        self.irqs   = Signal(width)
        self.source = stream.Endpoint(msi_layout())
        self.vectors_granted = Signal(max=MSI_VECTORS + 1, reset=1)

        self.enable = CSRStorage(width, reset=enabled_at_reset, description="""MSI Enable Control.\n
           Write bit(s) to ``1`` to enable corresponding MSI IRQ(s) (LitePCIe's register: a write replaces every bit; use ``enable_set`` / ``enable_clear``).""")
        self.clear  = CSRStorage(width, description="""MSI Clear Control.\n
           Write bit(s) to ``1`` to clear corresponding bits of ``vector``.""")
        self.vector = CSRStatus(width,  description="""MSI Vector Status.\n
           Sources that raised an interrupt since their bit was last cleared (every mode).""")
        self.enable_set = CSRStorage(width, description="Write a mask to enable those MSI sources (bit = source, as ``enable``); the other sources' bits are left as they are. Each driver sets only its own source's bit. Reads back the last mask written.")
        self.enable_clear = CSRStorage(width, description="Write a mask to disable those MSI sources; the other sources' bits are left as they are. Reads back the last mask written.")
        self.msi_cycle = CSRStatus(64, description="Card cycle (timebase) at which the last MSI was handed to the PCIe core; 0 before the first.")
        self.granted = CSRStatus(6, description="Vectors the host enabled: 1 (one MSI vector: every source sends vector 0 and ``vector`` names them, LitePCIe's behaviour), 2..32 (multi-message MSI: source n sends vector min(n, granted - 1)) or the MSI-X table's size while MSI-X is on (source n sends entry n).")

        # # #

        enable = self.enable.storage
        clear = Signal(width)
        vector = self.vector.status
        self.comb += [
            If(self.clear.re, clear.eq(self.clear.storage)),
            self.granted.status.eq(self.vectors_granted),
        ]
        self.sync += [
            vector.eq(enable & ((vector & ~clear) | self.irqs)),
            If(self.enable_set.re,
                enable.eq(enable | self.enable_set.storage),
            ).Elif(self.enable_clear.re,
                enable.eq(enable & ~self.enable_clear.storage),
            ),
            If(self.source.valid & self.source.ready, self.msi_cycle.status.eq(cycles)),
        ]

        # Single vector (LitePCIe's LitePCIeMSI): raised sources gather into one message,
        # vector 0; what raised it is in ``vector``.
        single = Signal(width)
        multi = Signal()
        self.comb += multi.eq(self.vectors_granted > 1)
        # Several vectors (LitePCIe's LitePCIeMSIMultiVector, with its enable): one message
        # per raised vector, lowest first; a vector the host did not grant folds into the last
        # granted one.
        pending = Signal(width)
        raised = Signal(width)          # vectors raised this cycle (enabled sources, remapped)
        remapped = 0
        moved = 0
        for source, vector_signal in (vector_of or {}).items():
            remapped |= 1 << source
            moved = moved | Mux(self.irqs[source] & enable[source], 1 << vector_signal, 0)
        self.comb += raised.eq((self.irqs & enable & ~C(remapped, width)) | moved)
        lowest = Signal(width)          # pending's lowest set bit, one-hot
        lowest_index = Signal(max=width)
        self.comb += lowest.eq(pending & (~pending + 1))
        for i in range(width):
            self.comb += If(lowest[i], lowest_index.eq(i))
        sent = Signal()
        self.comb += sent.eq(self.source.valid & self.source.ready)
        self.sync += [
            single.eq(Mux(sent & ~multi, 0, single & enable) | (self.irqs & enable)),
            pending.eq(Mux(sent & multi, pending & ~lowest, pending) | raised),
            # A change of mode starts from nothing pending in the other.
            If(multi, single.eq(0)).Else(pending.eq(0)),
        ]
        self.comb += [
            self.source.valid.eq(Mux(multi, pending != 0, single != 0)),
            self.source.dat.eq(Mux(multi,
                Mux(lowest_index >= self.vectors_granted, self.vectors_granted - 1, lowest_index), 0)),
        ]
