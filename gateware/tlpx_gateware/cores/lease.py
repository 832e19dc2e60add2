"""Lease: one owner at a time for a block that acts on its own, and a job that ends with it.

A block that DMAs into host memory by itself (the spy's ring, the interrupt timer's samples,
the real-time loop's buffer, the generator, the rule-30 batch engine) or runs code (the soft
CPU) must not outlive the process that started it: when that process dies, the host frees or
unmaps its buffers, and a block that kept writing would write into memory that is no longer
its owner's (on a real host, an IOVA that was unmapped or reused).

```
 host: claim(token) ──► free? ──yes──► owner = token, left = length ─┐ every cycle left -= 1
       claim(token) ──► owner == token? ──► left = length (refresh)  │
       release(token) ─► owner == token? ──► free, stop ─────────────┤
                                              left == 0 ──► free, stop, expiries += 1
```

The owner writes its token (any non-zero 32-bit value it chose) to ``claim``; the card
accepts it when the block is free (or already the token's), else counts a refusal. The owner
then reads ``owner`` back: the read also flushes its posted write, so the value tells whether
the claim won. Writing ``claim`` again refreshes the lease; when ``length`` cycles pass without
a refresh the lease expires and the block stops its job by itself (``stop``), as when the
owner writes its token to ``release``. ``pid``, ``host`` and ``time`` are the owner's identity,
written by the owner after a successful claim, so that a second user can be told who holds
the block and since when. Tokens are not secrets: any host program can read ``owner`` and
release the block (``tlpx stop``); the lease guards against accidents and dead owners, not
against malice.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect.csr import CSRStatus, CSRStorage


class Lease(LiteXModule):
    """``stop`` pulses when the lease ends (expired or released): the block ends its job.
    ``held`` is high while the block has an owner. Added to a block as ``self.lease``, its
    registers appear in the block's page as ``lease_*``."""
    def __init__(self, cycles, clock_hz):
        self.stop    = Signal()  # out: the lease ended (expired or released): the block stops its job
        self.expired = Signal()  # out: the lease expired without a refresh (its owner is gone)
        self.held    = Signal()  # out: the block has an owner

        self.claim = CSRStorage(32, description="Write the owner's token (non-zero) to claim the block while it is free, or to refresh the lease while the token owns it. Any other claim is refused and counted in ``lease_refusals``; read ``lease_owner`` to learn whether the claim won.")
        self.release = CSRStorage(32, description="Write the owner's token to free the block: the block ends its job (as when the lease expires) and counts no expiry.")
        self.owner = CSRStatus(32, description="Token of the block's owner; 0: the block is free.")
        self.length = CSRStorage(32, reset=int(clock_hz), description="Cycles a claim or refresh keeps the lease (0 counts as 1). When they pass without a refresh the lease expires: the block is freed and ends its job by itself.")
        self.left = CSRStatus(32, description="Cycles left before the lease expires; 0 while the block is free.")
        self.since = CSRStatus(64, description="Card cycle at which the present owner claimed the block.")
        self.pid = CSRStorage(32, description="The owner's process ID (written by the owner after its claim won; for messages only).")
        self.host = CSRStorage(32, description="An identifier of the owner's host and PID namespace (written by the owner; for messages only).")
        self.time = CSRStorage(32, description="The owner's clock (Unix seconds) when it claimed the block (written by the owner; for messages only).")
        self.expiries = CSRStatus(32, description="Leases that expired without a refresh (the block then stopped its job by itself).")
        self.refusals = CSRStatus(32, description="Claims refused because another token owned the block (or the token was 0), and releases with a token that did not own it.")

        # # #

        owner = self.owner.status
        left = self.left.status
        token = self.claim.storage
        claimed = Signal()
        released = Signal()
        expired = Signal()
        self.comb += [
            claimed.eq(self.claim.re & (token != 0) & ((owner == 0) | (owner == token))),
            released.eq(self.release.re & (owner != 0) & (self.release.storage == owner)),
            expired.eq((owner != 0) & (left == 0) & ~claimed & ~released),
            self.stop.eq(released | expired),
            self.expired.eq(expired),
            self.held.eq(owner != 0),
        ]
        self.sync += [
            If(claimed,
                owner.eq(token),
                left.eq(Mux(self.length.storage == 0, 1, self.length.storage)),
                If(owner == 0, self.since.status.eq(cycles)),
            ).Elif(released | expired,
                owner.eq(0),
                left.eq(0),
            ).Elif(owner != 0,
                left.eq(left - 1),
            ),
            If(expired, self.expiries.status.eq(self.expiries.status + 1)),
            If((self.claim.re & ~claimed) | (self.release.re & ~released),
                self.refusals.status.eq(self.refusals.status + 1)),
        ]
