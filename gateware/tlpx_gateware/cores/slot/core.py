"""The accelerator slot: a device under test (DUT) plugged into the card through one interface.

```
                  BAR0 window (Wishbone, 32 bits) ─────────────►┐
 request path ──► SLOT_WINDOW_BASE (placement window)           │
                  BAR0 0 (placement bar0, request_path's        │      slot user
                  translation; tlpx's map at RELOCATED_TLPX_BASE)│  (rule 30, a Verilog DUT, ...)
 completions with tags SLOT_TAG_BASE.. ──dispatcher route slot─►│ cpl
 transmit arbiter ◄──────────────────────────────────── tx ─────┤ (its TLPs, tags of the slot)
 MSI source `slot` (index 6, enabled at reset) ◄──────── irq ───┤
 core clock / isolation, slot.status.busy ◄──────────── busy ───┤
 slot.status.fenced (the lease ended while busy) ────── fence ──►┘ (the DMA mover refuses)
 CSR block `slot`: who is in the slot, its interface, its DMA and interrupt counts, its lease
```

The slot's lease (``slot.lease_*``, cores/lease.py) is claimed by a host session that drives
the DUT (``tlpx slot run``, a ``tlpx reg write`` into its window). When it ends (released, or
expired: its owner is gone) while the DUT is still working, the slot is *fenced* until the DUT
and its DMA are quiet (``busy`` low): the DMA mover refuses every request and cuts the one it
serves short (cores/slot/dma.py), so nothing more reaches the buffers of the session that
started the command. A stock host driver of the DUT (Linux's pci_endpoint_test) never claims
the lease: without a claim nothing is fenced, and the DUT works as a plain PCIe function.

A slot user is what soc.TlpxCard takes (``slot_user=`` a factory). The contract between the
card and a user is `SlotUser` below (a documented base class; a duck type with the same
attributes works as well, see cores/rule30/slot_user.py). It is version
SLOT_INTERFACE_VERSION of the interface; the Verilog form of the same interface (a module with
fixed port names, a manifest) is cores/slot/verilog.py's.

The user's register window is LiteX Wishbone (``adr`` in DWs, 32-bit data) at the card's
internal offset SLOT_WINDOW_BASE. With placement ``window`` the host finds it at that BAR0
offset; with placement ``bar0`` the request path makes BAR0 offsets ``[0, window_bytes)`` the
window and ``[RELOCATED_TLPX_BASE, 0x100000)`` tlpx's map (cores/request_path: the
relocation), for a host driver that expects the DUT's registers at BAR0 offset 0.
"""

from migen import *

from litex.gen import *
from litex.soc.integration.doc import ModuleDoc
from litex.soc.interconnect.csr import CSRField, CSRStatus

from tlpx_gateware.cores.lease import Lease

# The interface (constants exported into csr.json by soc.py) --------------------------------------
SLOT_INTERFACE_VERSION = 1
SLOT_WINDOW_BASE = 0x20000     # the window's internal offset (= its BAR0 offset with placement window)
SLOT_WINDOW_MAX  = 0x20000     # at most 128 KiB: 0x20000..0x3ffff
SLOT_TAG_BASE    = 56          # tags SLOT_TAG_BASE..SLOT_TAG_BASE+SLOT_TAGS-1 belong to the slot
SLOT_TAGS        = 8
RELOCATED_TLPX_BASE = 0x80000  # placement bar0: tlpx's map at this BAR0 offset
PLACEMENTS = ("window", "bar0")
# The slot's MSI source: its index in soc.MSI_SOURCES (checked there), here for a user that
# reports it (rule 30's irq_num register).
SLOT_MSI_INDEX = 6
DUT_NAME_BYTES = 16            # slot.dut_name: 128 bits
# The counters a user may give (SlotUser.counters), in slot's register order.
DMA_COUNTERS = (
    ("dma_reads",       "DMA read requests the slot's mover accepted (0 when the user sends its own TLPs)."),
    ("dma_writes",      "DMA write requests the slot's mover accepted (0 when the user sends its own TLPs)."),
    ("dma_read_bytes",  "Bytes the slot's DMA reads moved from host memory."),
    ("dma_write_bytes", "Bytes the slot's DMA writes moved to host memory."),
    ("dma_errors",      "DMA reads answered with an error or timed out, and writes refused."),
    ("dma_fenced",      "DMA requests the slot's mover refused or cut short because the slot's lease had ended while the DUT worked (``status.fenced``); also in dma_errors."),
)


class SlotUserError(ValueError):
    pass


# The slot user's contract ---------------------------------------------------------------------

class SlotUser(LiteXModule):
    """What the card needs from an accelerator in the slot (interface version 1).

    Built by a factory ``make(data_width, requester_id, cycles, clock_hz, base_domain)``
    (``requester_id``: the card's Signal(16) for request headers; ``cycles``: the 64-bit
    timebase; ``base_domain``: the free-running clock domain, for a user that gates a clock of
    its own). Attributes:

    - ``dut_name``: str, 1..16 ASCII characters, a Python identifier (the window's region name
      in csr.json and its Wishbone slave name); ``slot.dut_name``.
    - ``dut_version``: (major, minor), each 0..65535; ``slot.dut_version``.
    - ``window_bytes``: the window's size, a power of two, 4..SLOT_WINDOW_MAX.
    - ``placement``: ``"window"`` or ``"bar0"`` (see the module docstring).
    - ``bus``: wishbone.Interface(data_width=32), the window (slave), classic cycles; ``adr``
      is in DWs as LiteX's Wishbone has it: the card's decoder selects the window, its low
      log2(window_bytes / 4) bits are the DW's offset in the window (the upper ones the base's).
    - ``tx``: stream.Endpoint(phy_layout(data_width)) or None: TLPs for the card's transmit
      arbiter, with tags SLOT_TAG_BASE..SLOT_TAG_BASE+SLOT_TAGS-1 on requests that expect
      completions and the card's requester ID.
    - ``cpl``: stream.Endpoint(phy_layout(data_width)) or None: completions with the slot's
      tags (dropped by the card when None).
    - ``irq``: Signal(), a one-cycle pulse per interrupt: MSI source ``slot``.
    - ``busy``: Signal(), high whenever the user's state can change without an input (a bus
      access, a completion): the simulated card's core clock runs while it is high, and
      ``slot.status.busy`` shows it (the host waits on it before it frees buffers).
    - ``fence`` (optional): Signal(), an input the card drives high while the slot is fenced
      (see the module docstring); a user with DMA of its own stops sending requests to host
      memory while it is high. The Verilog user's DMA mover takes it; rule 30's batch engine
      has a lease of its own (``rule30_batch``) and does not look at it.
    - ``counters``: {name: Signal} for some of DMA_COUNTERS: a 1-bit Signal is an event counted
      by the slot block, a wider one the count itself (the user's own counter).
    - ``verilog_sources``: {file name: text} verilated with the card.
    - ``regions()``: the DUT-owned regions of csr.json (absolute internal offsets, the keys of
      soc.register_map's regions), for the register map and ``slot.dut_map_hash``.

    Optional hooks (a user without them runs in the card's core clock domain and its ``tx``
    goes to the arbiter as it is):

    - ``card_modules()``: {name: module} the card adds as its own submodules under those names
      (so a user's CSR banks keep names of the card's map: rule 30's ``rule30_batch``);
      without it the card adds the user itself as ``slot_user``.
    - ``attach(card, isolated)``: called once the card has its timebase, dispatcher and
      isolation helper (``isolated(name, block, events, tx, direct=())``, see
      cores/isolate.py); returns the user's transmit streams for the arbiter.
    - ``core_activity()``: the signals that keep the card's core clock running for the user
      (default ``busy``, ``irq``, ``tx.valid``).
    """
    dut_name     = None
    dut_version  = (0, 0)
    window_bytes = None
    placement    = "window"

    def __init__(self):
        self.tx = None
        self.cpl = None
        self.irq = Signal()
        self.busy = Signal()
        self.fence = Signal()
        self.counters = {}
        self.verilog_sources = {}

    def regions(self):
        return []


def check_user(user):
    """Checks a slot user's description once, at the edge (the card's constructor)."""
    name = getattr(user, "dut_name", None)
    if not isinstance(name, str) or not 1 <= len(name) <= DUT_NAME_BYTES or not name.isascii() \
            or not name.isidentifier():
        raise SlotUserError(f"a slot user's dut_name must be 1..{DUT_NAME_BYTES} ASCII characters forming an "
                            f"identifier (it names its csr.json region), not {name!r}")
    version = getattr(user, "dut_version", None)
    if not (isinstance(version, tuple) and len(version) == 2 and all(isinstance(v, int) and 0 <= v < 2**16 for v in version)):
        raise SlotUserError(f"slot user {name}: dut_version must be (major, minor), each 0..65535, not {version!r}")
    size = getattr(user, "window_bytes", None)
    if not (isinstance(size, int) and 4 <= size <= SLOT_WINDOW_MAX and size & (size - 1) == 0):
        raise SlotUserError(f"slot user {name}: window_bytes must be a power of two 4..{SLOT_WINDOW_MAX:#x}, not {size!r}")
    if getattr(user, "placement", None) not in PLACEMENTS:
        raise SlotUserError(f"slot user {name}: placement must be one of {', '.join(PLACEMENTS)}, not {user.placement!r}")
    unknown = set(getattr(user, "counters", {})) - {n for n, _ in DMA_COUNTERS}
    if unknown:
        raise SlotUserError(f"slot user {name}: unknown counter(s) {sorted(unknown)}; known: {[n for n, _ in DMA_COUNTERS]}")
    for region in user.regions():
        offset = region["offset"]
        if not SLOT_WINDOW_BASE <= offset < SLOT_WINDOW_BASE + size:
            raise SlotUserError(f"slot user {name}: region {region['name']} at {offset:#x} is outside its window "
                                f"({SLOT_WINDOW_BASE:#x}..{SLOT_WINDOW_BASE + size - 1:#x})")


def encode_name(name):
    """slot.dut_name's value: ASCII, byte 0 in bits 7:0, NUL-padded to DUT_NAME_BYTES."""
    return int.from_bytes(name.encode("ascii").ljust(DUT_NAME_BYTES, b"\0"), "little")


# The slot's CSR block -----------------------------------------------------------------------------

class SlotBlock(LiteXModule):
    """CSR block ``slot``: who is in the accelerator slot and what it did.

    ``irq``: the user's interrupt pulse (counted in ``irqs``); ``counters``: the user's
    (SlotUser.counters); ``busy``: the user's (its DUT's and its DMA's); ``cycles`` and
    ``clock_hz``: the timebase and the clock, for the lease. ``fenced`` (out): the lease ended
    while the user was busy, and it still is: its DMA must refuse (the user's ``fence``).
    """
    def __init__(self, user, irq, counters, busy, cycles, clock_hz, dut_map_hash=0):
        check_user(user)
        if not 0 <= dut_map_hash < 2**32:
            raise SlotUserError(f"the DUT's map hash must be a 32-bit value, not {dut_map_hash!r}")
        self.intro = ModuleDoc("""Accelerator slot.

        Identifies the device under test in the card's accelerator slot (the DUT: rule 30 by
        default, or a user's own design built with ``make gateware DUT=manifest``), the
        interface version and where its register window is in BAR0, and counts its DMA
        requests and interrupts. ``dut_map_hash`` is the hash of the DUT's own registers (its
        window and CSR banks), apart from ``ident.map_hash``, which covers the card's only.
        """)
        self.dut_name = CSRStatus(8 * DUT_NAME_BYTES, reset=encode_name(user.dut_name),
            description="ASCII name of the accelerator in the slot, NUL-padded; byte 0 in bits 7:0 of the first word.")
        self.dut_version = CSRStatus(fields=[
            CSRField("minor", size=16, reset=user.dut_version[1], description="Minor version of the DUT."),
            CSRField("major", size=16, reset=user.dut_version[0], description="Major version of the DUT."),
        ], description="Version of the DUT in the slot.")
        self.dut_map_hash = CSRStatus(32, description="FNV-1a hash (as ident.map_hash) of the DUT-owned regions of the map only.")
        self.interface = CSRStatus(fields=[
            CSRField("version", size=8, offset=0, reset=SLOT_INTERFACE_VERSION, description="Version of the slot interface the DUT was built for."),
            CSRField("placement", size=1, offset=8, reset=PLACEMENTS.index(user.placement), values=[
                ("0", "window", f"The window is at BAR0 {SLOT_WINDOW_BASE:#x}, tlpx's map at BAR0 0."),
                ("1", "bar0", f"The window is at BAR0 0, tlpx's map at BAR0 {RELOCATED_TLPX_BASE:#x}."),
            ], description="Where the DUT's register window is in BAR0."),
            CSRField("dma", size=1, offset=9, reset=int(user.tx is not None),
                description="The DUT sends TLPs of its own (DMA) with the slot's tags."),
        ], description="The slot interface.")
        self.window_bytes = CSRStatus(32, reset=user.window_bytes, description="Size of the DUT's register window in bytes.")
        for name, description in DMA_COUNTERS:
            setattr(self, name, CSRStatus(32, name=name, description=description))
        self.irqs = CSRStatus(32, description="Interrupts the DUT raised (MSI source ``slot``, counted whether enabled or not).")
        self.status = CSRStatus(fields=[
            CSRField("busy", size=1, offset=0, description="The DUT is working or its DMA is in flight (the slot user's ``busy``): a host frees the buffers of a command only once this is 0."),
            CSRField("fenced", size=1, offset=1, description="The slot's lease ended (released, or expired: its owner is gone) while the DUT was busy: its DMA mover refuses every request until the DUT is quiet."),
        ], description="What the slot is doing.")
        # The slot's owner: a host session driving the DUT (``tlpx slot run``). Optional: a
        # stock driver of the DUT never claims it, and nothing is fenced without a claim.
        self.lease = Lease(cycles, clock_hz)
        self.fenced = Signal()

        # # #

        self.sync += If(self.lease.stop & busy, self.fenced.eq(1)).Elif(~busy, self.fenced.eq(0))
        self.comb += [
            self.status.fields.busy.eq(busy),
            self.status.fields.fenced.eq(self.fenced),
        ]

        # Constants, driven (a status register's reset value is only its initial one).
        self.comb += [
            self.dut_name.status.eq(encode_name(user.dut_name)),
            self.dut_version.fields.minor.eq(user.dut_version[1]),
            self.dut_version.fields.major.eq(user.dut_version[0]),
            self.dut_map_hash.status.eq(dut_map_hash),
            self.interface.fields.version.eq(SLOT_INTERFACE_VERSION),
            self.interface.fields.placement.eq(PLACEMENTS.index(user.placement)),
            self.interface.fields.dma.eq(int(user.tx is not None)),
            self.window_bytes.status.eq(user.window_bytes),
        ]
        for name, _ in DMA_COUNTERS:
            csr = getattr(self, name)
            signal = counters.get(name)
            if signal is None:
                continue
            if len(signal) == 1:
                self.sync += If(signal, csr.status.eq(csr.status + 1))
            else:
                self.comb += csr.status.eq(signal)
        self.sync += If(irq, self.irqs.status.eq(self.irqs.status + 1))
