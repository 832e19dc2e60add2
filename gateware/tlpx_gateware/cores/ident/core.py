"""Identification block: BAR0 offset 0 tells the host what card this is.

The first four registers never move between versions, so any host tool can read them to
decide whether it knows this card: magic, version, feature bits and a hash of the register
map. A host refuses a card whose map hash it does not know (see host/crates/tlpx-device).
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.integration.doc import ModuleDoc

from tlpx_gateware.cores.csr import ActionStorage

MAGIC = 0x544C5058  # "TLPX"
VERSION_MAJOR = 0
VERSION_MINOR = 1

# Feature bits: one per block the card carries. Order is part of the register map.
FEATURES = [
    ("request_path", "Every host request answered (UR for unsupported ones) and counted."),
    ("msi",          "MSI interrupts (LitePCIe MSI block)."),
    ("dma_loopback", "LitePCIe scatter-gather DMA reader and writer with internal loopback."),
    ("generator",    "Traffic generator (DMA/PIO)."),
    ("spy",          "Passive transaction spy."),
    ("irq_timer",    "Interrupt latency timer."),
    ("rule30",       "Rule-30 accelerator."),
    ("rt_loop",      "Real-time loop (DataMover): card-to-host buffer, host result, loop time."),
    # Only in the map of the card built with it (the card without keeps its 8-bit field and
    # its map hash; bit 8 reads 0 there).
    ("cpu",          "Soft CPU (VexRiscv) running card firmware: cpu_ctrl, uart, SRAM at 0x40000."),
    ("slot",         "Accelerator slot with its lease (slot): a device under test, its window, DMA and interrupt."),
]
OPTIONAL_FEATURES = {"cpu"}


class Identification(LiteXModule):
    def __init__(self, features, data_width, clock_hz, map_hash=0):
        unknown = set(features) - {name for name, _ in FEATURES}
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)!r}; known: {[n for n, _ in FEATURES]}")
        if not 0 <= map_hash < 2**32:
            raise ValueError(f"map hash must be a 32-bit value, not {map_hash!r}")
        self.intro = ModuleDoc("""Identification block.

        Always at BAR0 offset 0. ``magic``, ``version``, ``features`` and ``map_hash`` keep
        their offsets in every version of the card.
        """)
        self.magic = CSRStatus(32, description=f"Identifies a tlpx card: always 0x{MAGIC:08X} (\"TLPX\").")
        self.version = CSRStatus(fields=[
            CSRField("minor", size=16, description="Minor version of the register map."),
            CSRField("major", size=16, description="Major version of the register map."),
        ], description="Register map version.")
        carried = [(i, name, desc) for i, (name, desc) in enumerate(FEATURES)
                   if name not in OPTIONAL_FEATURES or name in features]
        self.features = CSRStatus(fields=[
            CSRField(name, size=1, offset=i, description=desc) for i, name, desc in carried
        ], description="Blocks this card carries: one bit each.")
        self.map_hash = CSRStatus(32, description="FNV-1a hash of the register map (names, addresses, sizes, fields) this card was built with.")
        self.data_width = CSRStatus(16, description="TLP datapath width in bits (64, 128 or 256).")
        self.clock_hz = CSRStatus(32, description="Card clock frequency in Hz: the unit of every cycle count.")
        self.scratch = CSRStorage(32, reset=0x12345678, description="Scratch register: reads back what was written.")
        self.software_irq = ActionStorage(fields=[
            CSRField("trigger", size=1, pulse=True, description="Write 1 to raise the software interrupt (MSI source ``software``)."),
        ], description="Software-triggered interrupt, for interrupt round-trip tests.")
        self.trigger_cycle = CSRStatus(64, description="Card cycle (timebase) at which ``software_irq.trigger`` last acted: with ``pcie_msi.msi_cycle`` the card's part of the software interrupt's latency.")

        self.irq = Signal()
        self.cycles = Signal(64)  # in: the card's timebase (trigger_cycle's stamp)

        # # #

        for _, name, _ in carried:
            self.comb += getattr(self.features.fields, name).eq(int(name in features))
        self.comb += [
            self.magic.status.eq(MAGIC),
            self.version.fields.major.eq(VERSION_MAJOR),
            self.version.fields.minor.eq(VERSION_MINOR),
            self.map_hash.status.eq(map_hash),
            self.data_width.status.eq(data_width),
            self.clock_hz.status.eq(int(clock_hz)),
            self.irq.eq(self.software_irq.fields.trigger),
        ]
        self.sync += If(self.software_irq.fields.trigger, self.trigger_cycle.status.eq(self.cycles))
