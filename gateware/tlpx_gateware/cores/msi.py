"""The card's MSI block: LitePCIe's, with an enable bit per source that no driver writes whole.

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

``msi_cycle`` is the card's own stamp of the last MSI it handed to the PCIe core: with the
software interrupt's ``ident.trigger_cycle`` it gives the card's part of an MSI's latency
(trigger write at the card to MSI request) apart from the host's (``tlpx selftest``).
"""

from migen import *

from litex.soc.interconnect.csr import CSRStatus, CSRStorage

from litepcie.core import LitePCIeMSI


class TlpxMSI(LitePCIeMSI):
    """``cycles``: the card's 64-bit timebase (``msi_cycle``'s stamp)."""
    def __init__(self, cycles, width=32, enabled_at_reset=0):
        LitePCIeMSI.__init__(self, width=width)
        self.enable.storage.reset = Constant(enabled_at_reset, width)
        self.enable_set = CSRStorage(width, description="Write a mask to enable those MSI sources (bit = source, as ``enable``); the other sources' bits are left as they are. Each driver sets only its own source's bit. Reads back the last mask written.")
        self.enable_clear = CSRStorage(width, description="Write a mask to disable those MSI sources; the other sources' bits are left as they are. Reads back the last mask written.")
        self.msi_cycle = CSRStatus(64, description="Card cycle (timebase) at which the last MSI was handed to the PCIe core; 0 before the first.")

        # # #

        enable = self.enable.storage
        self.sync += [
            If(self.enable_set.re,
                enable.eq(enable | self.enable_set.storage),
            ).Elif(self.enable_clear.re,
                enable.eq(enable & ~self.enable_clear.storage),
            ),
            If(self.source.valid & self.source.ready, self.msi_cycle.status.eq(cycles)),
        ]
