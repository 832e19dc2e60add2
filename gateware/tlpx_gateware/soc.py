"""The tlpx card: a PCIe PHY, the LitePCIe endpoint, and tlpx's blocks behind BAR0.

BAR0 (1 MiB, 32-bit) holds the CSRs; each block has a 2 KiB page, at fixed places:

| offset  | block         | what                                                       |
|---------|---------------|------------------------------------------------------------|
| 0x0000  | ident         | magic, version, features, map hash, scratch, software IRQ  |
| 0x0800  | timebase      | 64-bit cycle counter                                       |
| 0x1000  | request_path  | counters of what the host sent and how it was answered     |
| 0x1800  | pcie_msi      | LitePCIe MSI: enable, clear, vector                        |
| 0x2000  | pcie_dma0     | LitePCIe DMA reader/writer/loopback                        |
| 0x2800  | generator     | traffic generator: configuration, counters, latency        |
| 0x3000  | pio           | PIO window counters and read delay                         |
| 0x3800  | spy           | passive transaction spy: filters, trigger, ring, counters  |
| 0x4000  | irq_timer     | interrupt latency timer: fires, stage statistics, ring     |
| 0x4800  | rt_loop       | real-time loop: buffer to host, result back, loop time      |
| 0x5000  | rule30_batch  | rule-30 DMA batch mode: descriptor list, results, counters |
| 0x5800  | cpu_ctrl      | (CPU card only) the soft CPU: run/stop, image check, status |
| 0x6000  | uart          | (CPU card only) the firmware's console (LiteX crossover UART) |
| 0x6800  | dma_guard     | LitePCIe DMA: completion timeout and recovery, error counts |
| 0x7000  | slot          | accelerator slot: the DUT's name, version, interface, counts |
| 0x10000 | (pio memory)  | 64 KiB PIO target window                                   |
| 0x20000 | (slot window) | the DUT's register window (rule 30: the seed's, 512 bytes)  |
| 0x40000 | (cpu sram)    | (CPU card only) the CPU's 64 KiB SRAM: firmware, scripts, results |
| 0x50000 | (msi-x)       | MSI-X table (32 vectors × 16 bytes) and, at +0x800, its pending bits |

The card with the soft CPU (``with_cpu=True``) is a superset: the CPU sees this same map
(CPU address == BAR0 offset), see cores/cpu/core.py.

The accelerator slot (cores/slot/core.py) holds the device under test: rule 30 by default
(cores/rule30/slot_user.py), or another SlotUser (``slot_user=`` a factory; a Verilog DUT
through cores/slot/verilog.py). Its regions (window, CSR banks) are marked ``owner: dut`` in
csr.json; ``ident.map_hash`` covers the card's regions, ``slot.dut_map_hash`` the DUT's.
With placement ``bar0`` the request path puts the window at BAR0 0 and this map at
RELOCATED_TLPX_BASE (the card's internal bus keeps the offsets above).

The register map has one source: this file (and, for the DUT's window, the slot user's
register table: rule 30's in cores/rule30/block.py). `csr.json` (with fields and descriptions) is exported from it
and everything else (Rust crate tlpx-regs, docs/registers.md) is generated from that; the
ident block carries a hash of the map so a host knows what it talks to.
"""

import json

from migen import *

from litex.gen import *
from litex.build.generic_platform import GenericPlatform
from litex.soc.integration.soc import SoCRegion
from litex.soc.integration.soc_core import SoCMini
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, _CompoundCSR

from litepcie.common import phy_layout
from litepcie.core import LitePCIeEndpoint
from litepcie.frontend.dma import LitePCIeDMA

from tlpx_gateware.cores.cpu.core import SRAM_BASE as CPU_SRAM_BASE, SRAM_SIZE as CPU_SRAM_SIZE
from tlpx_gateware.cores.cpu.core import CpuControl, CpuSram, SoftCpu, console
from tlpx_gateware.cores.dma_guard.core import DmaGuard
from tlpx_gateware.cores.msi import MSI_VECTORS, TlpxMSI
from tlpx_gateware.cores.msix import MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, MSIX_TAG, MSIX_WINDOW_SIZE, MsiXTable
from tlpx_gateware.cores.ordering.core import MsiFence, RequestLedger, last_beats
from tlpx_gateware.cores.isolate import csr_access, drive_isolated_clocks, isolate
from tlpx_gateware.cores.irq_timer import core as irq_timer_core
from tlpx_gateware.cores.irq_timer.core import IrqTimer
from tlpx_gateware.cores.rt_loop import core as rt_loop_core
from tlpx_gateware.cores.rt_loop.core import LOOP_TAG, RealTimeLoop
from tlpx_gateware.cores.ident.core import MAGIC, VERSION_MAJOR, VERSION_MINOR, Identification
from tlpx_gateware.cores.generator import core as generator_core
from tlpx_gateware.cores.generator.core import FLUSH_TAG, TAG_BASE, TAGS, CompletionDispatcher, Generator
from tlpx_gateware.cores.pio import core as pio_core
from tlpx_gateware.cores.pio.core import PIOWindow
from tlpx_gateware.cores.request_path.core import DWSerializer, RequestPath
from tlpx_gateware.cores.rule30 import slot_user as rule30_slot_user
from tlpx_gateware.cores.rule30.batch import BATCH_TAG
from tlpx_gateware.cores.rule30.core import WINDOW_BYTES as RULE30_WINDOW_SIZE
from tlpx_gateware.cores.slot.core import (RELOCATED_TLPX_BASE, SLOT_INTERFACE_VERSION, SLOT_MSI_INDEX, SLOT_TAG_BASE,
    SLOT_TAGS, SLOT_WINDOW_BASE, SLOT_WINDOW_MAX, SlotBlock, check_user)
from tlpx_gateware.cores.spy import core as spy_core
from tlpx_gateware.cores.spy.core import Spy
from tlpx_gateware.cores.timebase.core import Timebase
from tlpx_gateware.sim.clocking import SimClocking, changed, core_enable_logic
from tlpx_gateware.sim.simphy import SimPHY, simphy_ios
from tlpx_gateware.tlp import NONPOSTED_TAG_LIMIT

DATA_WIDTHS = (64, 128, 256)
DEFAULT_CLOCK_HZ = {64: 125e6, 128: 125e6, 256: 250e6}

CSR_MAP = {
    "ident":        0,
    "timebase":     1,
    "request_path": 2,
    "pcie_msi":     3,
    "pcie_dma0":    4,
    "generator":    5,
    "pio":          6,
    "spy":          7,
    "irq_timer":    8,
    "rt_loop":      9,
    "rule30_batch": 10,
    "cpu_ctrl":     11,  # the card with the CPU only
    "uart":         12,  # the card with the CPU only
    "dma_guard":    13,
    "slot":         14,
}


# Memory windows of BAR0 beside the CSRs.
PIO_WINDOW_BASE = 0x10000
PIO_WINDOW_SIZE = 0x10000
# The MSI-X table and PBA (cores/msix.py), after the CPU's SRAM (0x40000..0x4ffff).
MSIX_WINDOW_BASE = 0x50000
# Rule 30's window is the slot's (the name stays, an alias, for rule 30's users).
RULE30_WINDOW_BASE = SLOT_WINDOW_BASE

# MSI sources, bit = index in pcie_msi's enable/vector registers.
MSI_SOURCES = ["pcie_dma0_writer", "pcie_dma0_reader", "software", "generator", "irq_timer", "rt_loop", "slot"]
assert MSI_SOURCES.index("slot") == SLOT_MSI_INDEX
# MSI sources enabled at reset: the slot's (a stock driver of the DUT knows nothing of tlpx's
# MSI mask).
MSI_ENABLED_AT_RESET = ["slot"]

# The card's requester tags: every block that sends requests stamps its own tags into them,
# posted writes included (whose tag PCIe leaves unused), so that the spy names the block of
# every TLP the card sends, and the completion dispatcher routes completions by them.
# LitePCIe's DMA takes tags 0..LITEPCIE_TAGS-1 for its reads (its tag queue, one per pending
# request); its writer's requests go to a write-only crossbar port that stamps tag 0
# (litepcie/frontend/dma.py, `port.source.tag.eq(0)`): inside the same range. Every tag, the
# posted writes' too, is below tlp.NONPOSTED_TAG_LIMIT: the UltraScale hard IP tracks 64
# (PG156), and one plan for both kinds keeps a block's tag one range.
LITEPCIE_TAGS = 8           # = LitePCIeEndpoint's max_pending_requests below
LITEPCIE_WRITE_TAG = 0
assert LITEPCIE_WRITE_TAG < LITEPCIE_TAGS
# The requesters whose completions come back to tlpx's blocks (CompletionDispatcher's routes).
NONPOSTED_TAGS = {
    "generator": (TAG_BASE, FLUSH_TAG),
    "rt_loop":   (LOOP_TAG, LOOP_TAG),
    "slot":      (SLOT_TAG_BASE, SLOT_TAG_BASE + SLOT_TAGS - 1),
}
CARD_TAGS = {               # block: (first, last), inclusive
    "litepcie":       (0, LITEPCIE_TAGS - 1),
    **NONPOSTED_TAGS,
    "spy":            (spy_core.RING_TAG, spy_core.RING_TAG),
    "irq_timer":      (irq_timer_core.RING_TAG, irq_timer_core.RING_TAG),
    "msix":           (MSIX_TAG, MSIX_TAG),
}


def check_tag_plan(ranges, limit=NONPOSTED_TAG_LIMIT):
    """The blocks' tag ranges (name: (first, last)) are disjoint and below `limit`."""
    taken = sorted(((name, lo, hi) for name, (lo, hi) in ranges.items()), key=lambda t: t[1])
    for name, lo, hi in taken:
        if not 0 <= lo <= hi:
            raise ValueError(f"{name}'s tags {lo}..{hi} are not a range")
    for (a, _, a_hi), (b, b_lo, _) in zip(taken, taken[1:]):
        if b_lo <= a_hi:
            raise ValueError(f"the tags of {a} (..{a_hi}) and {b} ({b_lo}..) overlap")
    name, _, hi = max(taken, key=lambda t: t[2])
    if hi >= limit:
        raise ValueError(f"{name}'s tags reach {hi}: every tag must be below {limit} "
                         f"(the UltraScale hard IP's 6-bit tags, PG156)")


check_tag_plan(CARD_TAGS)

# Constants of tlpx's blocks that the host and the firmware need, exported into csr.json's
# constants (gateware/tools/gen_regs.py makes them tlpx_regs::constants and TLPX_CONST_* of the
# firmware's header; it takes them from here when a card was built before one was exported).
BLOCK_CONSTANTS = {
    "GENERATOR_TAG_BASE":           TAG_BASE,
    "GENERATOR_TAGS":               TAGS,
    "GENERATOR_FLUSH_TAG":          FLUSH_TAG,
    "SPY_RING_TAG":                 spy_core.RING_TAG,
    "IRQ_TIMER_RING_TAG":           irq_timer_core.RING_TAG,
    "MSIX_TAG":                     MSIX_TAG,
    "MSIX_WINDOW_BASE":             MSIX_WINDOW_BASE,
    "MSIX_TABLE_OFFSET":            MSIX_TABLE_OFFSET,
    "MSIX_PBA_OFFSET":              MSIX_PBA_OFFSET,
    "LITEPCIE_TAGS":                LITEPCIE_TAGS,
    "LITEPCIE_WRITE_TAG":           LITEPCIE_WRITE_TAG,
    "GENERATOR_MAX_TRANSFER_BYTES": generator_core.MAX_TRANSFER_BYTES,
    "GENERATOR_HISTOGRAM_BUCKETS":  generator_core.HISTOGRAM_BUCKETS,
    "GENERATOR_SAMPLE_FIFO_DEPTH":  generator_core.SAMPLE_FIFO_DEPTH,
    "SPY_RECORD_FIFO_DEPTH":        spy_core.RECORD_FIFO_DEPTH,
    "SPY_LATENCY_BUCKETS":          spy_core.LATENCY_BUCKETS,
    "SPY_PAYLOAD_BUCKETS":          spy_core.PAYLOAD_BUCKETS,
    "SPY_PAYLOAD_DWS_MAX":          spy_core.PAYLOAD_DWS_MAX,
    "IRQ_TIMER_HISTOGRAM_BUCKETS":  irq_timer_core.HISTOGRAM_BUCKETS,
    "PIO_MAX_READ_DELAY":           pio_core.MAX_READ_DELAY,
    "PIO_SIZE_BUCKETS":             pio_core.SIZE_BUCKETS,
    "RT_LOOP_MAX_BUFFER_BYTES":     rt_loop_core.MAX_BUFFER_BYTES,
    "RT_LOOP_SAMPLE_FIFO_DEPTH":    rt_loop_core.SAMPLE_FIFO_DEPTH,
    "RT_LOOP_HISTOGRAM_BUCKETS":    rt_loop_core.HISTOGRAM_BUCKETS,
    "RT_LOOP_TAG":                  LOOP_TAG,
    "RULE30_BATCH_TAG":             BATCH_TAG,
    "SLOT_WINDOW_BASE":             SLOT_WINDOW_BASE,
    "SLOT_WINDOW_MAX":              SLOT_WINDOW_MAX,
    "SLOT_TAG_BASE":                SLOT_TAG_BASE,
    "SLOT_TAGS":                    SLOT_TAGS,
    "SLOT_INTERFACE_VERSION":       SLOT_INTERFACE_VERSION,
    "RELOCATED_TLPX_BASE":          RELOCATED_TLPX_BASE,
}

# Platform -----------------------------------------------------------------------------------------

class SimCardPlatform(GenericPlatform):
    """The card as a Verilator model: no vendor toolchain, only Verilog out."""
    default_clk_name = "sys_clk"

    def __init__(self, data_width):
        GenericPlatform.__init__(self, "sim", simphy_ios(data_width), name="tlpx_card")

    def build(self, *args, **kwargs):
        raise NotImplementedError("use tlpx_gateware.build to make the Verilator model")

# Endpoint view of the PHY -------------------------------------------------------------------------

class EndpointPHYView:
    """What the LitePCIe endpoint is built on: the PHY's parameters, but streams of our own.

    The request path feeds `source` with completions only and merges `sink` onto the PHY.
    """
    def __init__(self, phy):
        self.data_width       = phy.data_width
        self.endianness       = phy.endianness
        self.qword_aligned    = phy.qword_aligned
        self.id               = phy.id
        self.bar0_mask        = phy.bar0_mask
        self.max_request_size = phy.max_request_size
        self.max_payload_size = phy.max_payload_size
        self.msi              = phy.msi
        self.sink             = stream.Endpoint(phy_layout(phy.data_width))
        self.source           = stream.Endpoint(phy_layout(phy.data_width))

# Card ---------------------------------------------------------------------------------------------

class TlpxCard(SoCMini):
    mem_map = {"csr": 0x00000000}
    csr_map = CSR_MAP

    def __init__(self, data_width=64, clock_hz=None, map_hash=0, bar0_size=0x100000, board=None,
                 rule30_clock_gate=None, with_cpu=False, cpu_clock_gate=None, tlpx_blocks=True, idle_gating=None,
                 slot_user=None, dut_map_hash=0):
        """``board``: None for the simulated card (SimCardPlatform, SimPHY, clock and reset from
        the simulator); or a real board (tlpx_gateware.targets.Board), which brings the
        platform, the clocking, the vendor PHY (seen as SimPHY is) and its LEDs.
        ``slot_user``: the accelerator slot's user, a factory ``make(data_width, requester_id,
        cycles, clock_hz, base_domain)`` returning a SlotUser (cores/slot/core.py); None: rule
        30 (cores/rule30/slot_user.py). ``dut_map_hash``: slot.dut_map_hash (the build's first
        pass computes it, as ``map_hash``).
        ``rule30_clock_gate`` (rule 30 in the slot): None = on the simulated card only; False
        gives the simulated card the hardware's ungated rule-30 core (resource estimates,
        targets/resources.py).
        ``with_cpu``: add the soft CPU (VexRiscv), its SRAM, loader and console (cores/cpu);
        ``cpu_clock_gate`` as ``rule30_clock_gate``, for the CPU's clock.
        ``idle_gating``: None = on the simulated card only; gates the clock of each isolated block
        while it is idle (cores/isolate.py); False gives the simulated card ungated clocks (the
        exactness test compares the two).
        ``tlpx_blocks``: False builds the card without any of tlpx's own blocks (generator,
        spy, interrupt timer, real-time loop, rule 30, PIO window, DMA guard): LitePCIe's
        endpoint, DMA and MSI behind the request path, with the identification block and the
        timebase. Only the simulator benchmark uses it (`make bench`: the card's speed against
        LitePCIe's alone); its register map is not one the host tools drive."""
        if slot_user is not None and not tlpx_blocks:
            raise ValueError("the accelerator slot is one of tlpx's blocks: a card with a slot user has them (tlpx_blocks=True)")
        if with_cpu and not tlpx_blocks:
            raise ValueError("the soft CPU drives tlpx's blocks: a card with the CPU has them (tlpx_blocks=True)")
        if data_width not in DATA_WIDTHS:
            raise ValueError(f"data width must be one of {DATA_WIDTHS} bits, not {data_width!r}")
        clock_hz = clock_hz or DEFAULT_CLOCK_HZ[data_width]
        platform = SimCardPlatform(data_width) if board is None else board.platform()
        self.data_width = data_width
        self.clock_hz   = clock_hz

        SoCMini.__init__(self, platform,
            clk_freq       = clock_hz,
            csr_data_width = 32,
            csr_ordering   = "little",
            csr_paging     = 0x800,
            ident          = "",
            with_ctrl      = False,
        )

        phy, = self._add_clocking_and_phy(data_width, clock_hz, bar0_size, board, idle_gating, platform)
        slot_user, = self._add_identification(
            data_width, clock_hz, map_hash, rule30_clock_gate, with_cpu, tlpx_blocks, slot_user, platform)
        dispatcher, endpoint, endpoint_phy, tx_sources = self._add_endpoint_and_request_path(
            data_width, clock_hz, with_cpu, tlpx_blocks, slot_user, dut_map_hash, phy, platform)
        self._add_cpu(clock_hz, with_cpu, cpu_clock_gate, platform)
        dma, msi = self._add_msi_and_dma(clock_hz, tlpx_blocks, dispatcher, endpoint, endpoint_phy)
        self._add_msi_fence_and_irqs(tlpx_blocks, dma, endpoint, msi, phy, tx_sources)

    def _add_clocking_and_phy(self, data_width, clock_hz, bar0_size, board, idle_gating, platform):
        # Idle gating (simulation speed, exact): each tlpx block and the card's core run on
        # clocks gated while they are idle (cores/isolate.py, sim/clocking.py).
        gate = (board is None) if idle_gating is None else idle_gating
        if gate and board is not None:
            raise ValueError("idle gating is a simulation device: a board's card has no gated clocks")
        self.idle_gating = gate
        # Verilog files beside the card's (file name -> text): tlpx_gateware.build writes them
        # next to tlpx_card.v, adds them to the platform's sources and verilates them together.
        self.verilog_sources = {}
        if board is None:
            # Clock / reset: driven by the simulator. ``card`` is its clock, free-running; the
            # card's core (``sys``) runs on it gated while quiescent (sim/clocking.py).
            self.crg = SimClocking(platform.request("sys_clk"), platform.request("sys_rst"), gate=gate)
            self.verilog_sources.update(self.crg.verilog_sources)
            # The domain whose clock never stops: the timebase and the base of gated clocks.
            self.base_domain = "card"

            # PHY --------------------------------------------------------------------------------
            self.pcie_phy = phy = SimPHY(platform.request("pcie"), data_width=data_width, bar0_size=bar0_size)
        else:
            # self.crg, self.pcie_phy (the vendor PHY seen as SimPHY is; its CSRs stay out of
            # the map) and the LEDs: tlpx_gateware/targets/board.py.
            board.add_clocking_and_phy(self, data_width=data_width, clock_hz=clock_hz, bar0_size=bar0_size)
            phy = self.pcie_phy
            self.base_domain = "sys"
        return phy,

    def _add_identification(self, data_width, clock_hz, map_hash, rule30_clock_gate, with_cpu, tlpx_blocks, slot_user,
                            platform):
        # The accelerator slot's user: rule 30 unless the card is given another.
        rule30_in_slot = tlpx_blocks and slot_user in (None, rule30_slot_user.make)
        self.ident_features_rule30 = rule30_in_slot
        if tlpx_blocks and slot_user is None:
            gate_rule30 = isinstance(platform, SimCardPlatform) if rule30_clock_gate is None else rule30_clock_gate
            slot_user = lambda *args, **kwargs: rule30_slot_user.make(*args, gate_clock=gate_rule30, **kwargs)

        # Identification and timebase ------------------------------------------------------------
        self.ident = Identification(
            features   = ["request_path", "msi", "dma_loopback"]
                         + (["generator", "spy", "irq_timer", "rt_loop", "slot"] if tlpx_blocks else [])
                         + (["rule30"] if rule30_in_slot else [])
                         + (["cpu"] if with_cpu else []),
            data_width = data_width,
            clock_hz   = clock_hz,
            map_hash   = map_hash,
        )
        # Free-running: on the card clock (also while the core's clock is gated).
        self.timebase = ClockDomainsRenamer(self.base_domain)(Timebase())
        self.comb += self.ident.cycles.eq(self.timebase.cycles)
        self.add_constant("IDENT_MAGIC", MAGIC)
        self.add_constant("IDENT_VERSION_MAJOR", VERSION_MAJOR)
        self.add_constant("IDENT_VERSION_MINOR", VERSION_MINOR)
        return slot_user,

    def _add_endpoint_and_request_path(self, data_width, clock_hz, with_cpu, tlpx_blocks, slot_user, dut_map_hash, phy,
                                       platform):
        # LitePCIe endpoint behind tlpx's request path -------------------------------------------
        endpoint_phy = EndpointPHYView(phy)
        self.pcie_endpoint = endpoint = LitePCIeEndpoint(endpoint_phy,
            endianness           = phy.endianness,
            address_width        = 32,
            max_pending_requests = LITEPCIE_TAGS,
        )
        if tlpx_blocks:
            dispatcher, tx_sources = self._add_blocks(platform, phy, data_width, clock_hz, slot_user, dut_map_hash)
        else:
            self.completions = dispatcher = CompletionDispatcher(data_width, routes={})
            tx_sources = []

        # MSI-X: its table and PBA are a BAR0 window, its messages posted writes into the
        # arbiter (cores/msix.py); the MSI block's messages reach it in _add_msi_fence_and_irqs.
        if tlpx_blocks:
            self.msix = MsiXTable(data_width, phy.id)
            tx_sources = tx_sources + [self.msix.source]

        # Mapped BAR0 windows: the CSR space (one 2 KiB page per block), the PIO memory, the
        # slot user's registers and the MSI-X window. With placement bar0 the BAR0 offsets are
        # translated first.
        user = getattr(self, "slot_user_in_slot", None)
        self.request_path = RequestPath(phy, endpoint_phy, bar0_mask=phy.bar0_mask,
            mapped=[(self.mem_map["csr"], self.csr.paging * self.csr.n_locs)]
                   + ([(PIO_WINDOW_BASE, PIO_WINDOW_SIZE), (SLOT_WINDOW_BASE, user.window_bytes),
                       (MSIX_WINDOW_BASE, MSIX_WINDOW_SIZE)] if tlpx_blocks else [])
                   + ([(CPU_SRAM_BASE, CPU_SRAM_SIZE)] if with_cpu else []),
            relocation=(user.window_bytes, SLOT_WINDOW_BASE, RELOCATED_TLPX_BASE)
                       if user is not None and user.placement == "bar0" else None,
            tx_sources=tx_sources,
            completion_dispatcher=dispatcher,
            cycles=self.timebase.cycles)
        self.bus.add_master(name="request_path", master=self.request_path.bus)
        if tlpx_blocks:
            # Arbiter masters: LitePCIe, request-path completions, then tx_sources in order.
            # The spy's own TLPs: its ring writes, or, while its records go through LitePCIe's DMA
            # writer, LitePCIe's DMA traffic (master 0: with loopback off the writer carries
            # nothing but the records), so that a capture does not record its own transport.
            grant = self.request_path.arbiter.grant
            self.comb += self.spy_own_tx.eq((grant == 2 + tx_sources.index(self.spy_tx_source)) |
                                            (self.spy.control.fields.to_dma_writer & (grant == 0)))
            self._add_windows(phy)
        return dispatcher, endpoint, endpoint_phy, tx_sources

    def _add_cpu(self, clock_hz, with_cpu, cpu_clock_gate, platform):
        # Soft CPU (optional) ----------------------------------------------------------------------
        # VexRiscv on the card's bus beside the host's request path, its SRAM (also a BAR0
        # window), the loader that checks an image before the CPU runs it, and the console.
        if with_cpu:
            self.cpu_sram = CpuSram()
            self.cpu_ctrl = CpuControl(self.cpu_sram.check_port, cycles=self.timebase.cycles, clock_hz=clock_hz)
            self.soft_cpu = SoftCpu(platform, reset_address=CPU_SRAM_BASE,
                gate_clock=isinstance(platform, SimCardPlatform) if cpu_clock_gate is None else cpu_clock_gate,
                base=self.base_domain)
            self.comb += [
                self.soft_cpu.hold_reset.eq(self.cpu_ctrl.cpu_reset),
                self.soft_cpu.clock_on.eq(self.cpu_ctrl.clock_on),
            ]
            self.uart = console()
            self.bus.add_slave(name="cpu_sram", slave=self.cpu_sram.bus,
                region=SoCRegion(origin=CPU_SRAM_BASE, size=CPU_SRAM_SIZE, cached=False))
            self.bus.add_master(name="cpu_ibus", master=self.soft_cpu.ibus)
            self.bus.add_master(name="cpu_dbus", master=self.soft_cpu.dbus)
            self.verilog_sources.update(self.soft_cpu.verilog_sources)
            self.add_constant("CPU_SRAM_BASE", CPU_SRAM_BASE)
            self.add_constant("CPU_SRAM_SIZE", CPU_SRAM_SIZE)

    def _add_msi_and_dma(self, clock_hz, tlpx_blocks, dispatcher, endpoint, endpoint_phy):
        # MSI ------------------------------------------------------------------------------------
        # Per-source enable set/clear (cores/msi.py): no driver turns off another's source.
        # Its messages go to the hard IP through the MSI fence (below).
        # A slot user that numbers its own vectors (a DUT whose stock driver owns the
        # function's vectors) sends the slot source's messages on them.
        user = getattr(self, "slot_user_in_slot", None)
        vector_of = {SLOT_MSI_INDEX: user.irq_vector} if hasattr(user, "irq_vector") else None
        self.pcie_msi = msi = TlpxMSI(self.timebase.cycles, width=MSI_VECTORS,
            enabled_at_reset=sum(1 << MSI_SOURCES.index(n) for n in MSI_ENABLED_AT_RESET), vector_of=vector_of)
        if hasattr(user, "msi_vectors_granted"):
            self.comb += user.msi_vectors_granted.eq(msi.vectors_granted)
            if hasattr(self.pcie_phy, "msix_enable"):
                self.comb += user.msix_enabled.eq(self.pcie_phy.msix_enable)
        if hasattr(self, "spy"):
            # The sources the spy's MSI records carry: the MSI block's vector as the MSI goes.
            self.comb += self.spy.msi_sources.eq(msi.vector.status)

        # DMA (LitePCIe) -------------------------------------------------------------------------
        self.pcie_dma0 = dma = LitePCIeDMA(endpoint_phy, endpoint,
            with_loopback = True,
            address_width = 32,
        )

        # LitePCIe's requester gets the completion timeout it lacks: a lost or erroneous
        # completion resets its tag controller and DMA engines instead of hanging them.
        if tlpx_blocks:
            self.dma_guard = DmaGuard(endpoint.crossbar.phy_master.source, endpoint.crossbar.phy_master.sink,
                dispatcher.other, clock_hz)
            # The reset is that of a clock domain of their own (the card clock; the card's reset
            # or the guard's): the same synchronous reset as a ResetInserter, but emitted after
            # the logic rather than around it, which Verilator evaluates at about half the cost.
            self.clock_domains.cd_dma = ClockDomain("dma")
            self.comb += [
                ClockSignal("dma").eq(ClockSignal("sys")),
                ResetSignal("dma").eq(ResetSignal("sys") | self.dma_guard.reset),
            ]
            ClockDomainsRenamer("dma")(endpoint.crossbar)
            ClockDomainsRenamer("dma")(dma)
            # LitePCIe's reader and writer write their own enable CSR (bit 1: "idle") from
            # their logic, now in `dma`, while LiteX's CSR bank writes the same register from
            # `sys`: two always blocks driving one register (Verilator's MULTIDRIVEN; Vivado
            # refuses a multi-driven net). The two storages' write logic joins their logic in
            # `dma` (the same clock; the guard's reset already clears them, as before).
            for enable in (dma.reader._enable, dma.writer._enable):
                ClockDomainsRenamer("dma")(enable)

        if tlpx_blocks:
            # The spy's records into the DMA writer (spy control.to_dma_writer; the writer takes
            # its sink while loopback is off): 32-byte records as datapath-wide words, lowest
            # DW first, so a record lands in the driver's buffer as it does in the spy's ring.
            self.spy_to_dma = conv = stream.Converter(256, dma.data_width)
            self.comb += [
                conv.sink.valid.eq(self.spy_records.valid),
                conv.sink.data.eq(self.spy_records.record),
                self.spy_records.ready.eq(conv.sink.ready),
                dma.sink.valid.eq(conv.source.valid),
                dma.sink.data.eq(conv.source.data),
                conv.source.ready.eq(dma.sink.ready),
            ]
        return dma, msi

    def _add_msi_fence_and_irqs(self, tlpx_blocks, dma, endpoint, msi, phy, tx_sources):
        # An MSI leaves for the hard IP only after the requests issued before it (by any
        # requester: LitePCIe's DMA, tlpx's blocks) have left the transmit path (cores/ordering).
        self.request_ledger = ledger = RequestLedger(
            # LitePCIe's internal master ports take the requesters' requests on `sink`.
            [last_beats(m.sink) for m in endpoint.crossbar.user_masters] + [last_beats(t) for t in tx_sources],
            phy.requests_done)
        self.msi_fence = fence = MsiFence(ledger)
        self.comb += msi.source.connect(fence.sink)
        msix_enable = getattr(phy, "msix_enable", None)
        if hasattr(self, "msix") and msix_enable is not None:
            # MSI-X on: each message is its table entry's write; off: the hard IP's MSI.
            self.comb += [
                If(msix_enable,
                    fence.source.connect(self.msix.sink),
                ).Else(
                    fence.source.connect(phy.msi),
                ),
                self.msix.function_mask.eq(phy.msix_function_mask),
            ]
        else:
            self.comb += fence.source.connect(phy.msi)

        irq_signals = {
            "pcie_dma0_writer": dma.writer.irq,
            "pcie_dma0_reader": dma.reader.irq,
            "software":         self.ident.irq,
        }
        if tlpx_blocks:
            irq_signals.update({
                "generator": self.generator.irq,
                "rt_loop":   self.rt_loop.irq,
                "slot":      self.slot_user_in_slot.irq,
            })
        # The interrupt timer raises the vectors its ``vectors`` register names (by default its
        # source's, MSI_IRQ_TIMER): any of the MSI_VECTORS, one per CPU it measures.
        timer_vectors = self.irq_timer.irq_vectors if tlpx_blocks else None
        for i in range(MSI_VECTORS):
            source = irq_signals.get(MSI_SOURCES[i], 0) if i < len(MSI_SOURCES) else 0
            self.comb += msi.irqs[i].eq(source | (timer_vectors[i] if tlpx_blocks else 0))
        # The vectors the host granted, from the PHY's view of the capabilities: the MSI-X
        # table's size while MSI-X is on, else MSI's 1 << MME; a PHY that gives neither keeps
        # one vector.
        if hasattr(phy, "msi_multiple_enable"):
            granted = 1 << phy.msi_multiple_enable
            if hasattr(self, "msix") and msix_enable is not None:
                granted = Mux(msix_enable, MSI_VECTORS, granted)
            self.comb += msi.vectors_granted.eq(granted)
        for i, name in enumerate(MSI_SOURCES):
            self.add_constant(f"MSI_{name.upper()}", i)
        self.add_constant("MSI_VECTORS", MSI_VECTORS)

    def do_finalize(self):
        # The isolated blocks wake on an access to their CSR bank (cores/isolate.py); LiteX
        # builds the banks in finalize, before this.
        for block in getattr(self, "isolated_blocks", []):
            name = next(n for n, m in self._submodules if m is block)
            self.comb += block.csr_access.eq(csr_access(self, name))
        if isinstance(self.crg, SimClocking):
            self.core_active = core_enable_logic(self, self.crg, self._core_activity())

    def _core_activity(self):
        """What keeps the card's core running (sim/clocking.py): every input and every
        long-running state its registers can change in without a new input."""
        phy = self.pcie_phy
        dma = self.pcie_dma0
        terms = [
            self.crg.resetting,
            phy.rx_valid_in, phy.source.valid,                  # a TLP beat from the host, one in the PHY
            changed(self, phy.cfg_in),                          # a configuration input changed
            phy.sink.valid, phy.tx_fifo.source.valid,           # a TLP beat to send (any source), one in the PHY
            phy.msi.valid, self.pcie_msi.irqs != 0,             # an MSI to send, an interrupt source firing
            self.msi_fence.holding,                             # an MSI waits for earlier requests
            self.pcie_msi.source.valid,                         # a vector's message waits to go
        ] + ([self.msix.pending] if hasattr(self, "msix") else []) + [  # an MSI-X message, pending bits
            self.request_path.bus.cyc,                          # a bus access (CSR, windows) in flight
            dma.reader.enable, dma.writer.enable, dma.loopback.enable.storage,
        ]
        if hasattr(self, "dma_guard"):
            terms.append(self.dma_guard.outstanding.status != 0)   # LitePCIe reads outstanding
        for block in getattr(self, "isolated_blocks", []):
            terms += [b.pending for b in block.tx_boundaries]     # a block's TLP for the arbiter
        user = getattr(self, "slot_user_in_slot", None)
        if user is not None:
            terms += slot_core_activity(user)                       # the slot user's
            terms.append(self.slot.lease.held)                      # the slot's lease counts down in the core
        if hasattr(self, "cpu_ctrl"):
            terms += [
                self.cpu_ctrl.clock_on,                             # the CPU runs (or settles)
                self.cpu_ctrl.status.fields.state == 1,             # the image check reads the SRAM
                self.cpu_ctrl.lease.held,                           # its lease counts down in the core
            ]
        return terms

    def _add_blocks(self, platform, phy, data_width, clock_hz, slot_user, dut_map_hash):
        """tlpx's own blocks: generator, spy, interrupt timer, real-time loop, the accelerator
        slot with its user. Returns the completion dispatcher and the blocks' transmit streams
        (arbiter order)."""
        # Traffic generator: its own TLPs, its own tags.
        self.generator = Generator(data_width, phy.id, self.timebase.cycles, clock_hz=clock_hz)
        # Completions for the card's own requesters, by tag; the rest go to LitePCIe.
        self.completions = dispatcher = CompletionDispatcher(data_width, routes=NONPOSTED_TAGS)
        self.comb += dispatcher.generator.connect(self.generator.cpl_sink)

        # Passive spy on both PHY streams; it writes its records through the same transmit
        # arbiter, and knows which up-going TLPs are its own from the arbiter's grant.
        self.spy_own_tx = spy_own_tx = Signal()
        # It also taps the MSI stream to the hard IP (its MSI records; the sources come from
        # pcie_msi, wired where that block is made).
        self.spy = Spy(data_width, rx=phy.source, tx=phy.sink, own_tx=spy_own_tx,
            requester_id=phy.id, cycles=self.timebase.cycles, msi=phy.msi, clock_hz=clock_hz)

        # Interrupt latency timer; its sample ring uses the same record writer as the spy.
        self.irq_timer = IrqTimer(data_width, requester_id=phy.id, cycles=self.timebase.cycles, clock_hz=clock_hz,
            vectors_reset=1 << MSI_SOURCES.index("irq_timer"))
        self.rt_loop = RealTimeLoop(data_width, requester_id=phy.id, cycles=self.timebase.cycles, clock_hz=clock_hz)
        self.comb += dispatcher.rt_loop.connect(self.rt_loop.cpl_sink)

        # The accelerator slot: its user (rule 30 by default) behind the slot window, its
        # completions by tag, its TLPs into the arbiter (last), its interrupt the MSI source
        # ``slot``; the CSR block ``slot`` says who it is (cores/slot/core.py).
        user = slot_user(data_width=data_width, requester_id=phy.id, cycles=self.timebase.cycles,
            clock_hz=clock_hz, base_domain=self.base_domain)
        check_user(user)
        # A plain attribute (LiteXModule would make a Module value a submodule): the user
        # joins the card once, below.
        object.__setattr__(self, "slot_user_in_slot", user)
        # A user's parts join the card under names of its choosing (rule 30's CSR banks keep
        # their names and places in the map), or the user itself as ``slot_user``.
        modules = user.card_modules() if hasattr(user, "card_modules") else {"slot_user": user}
        for name, module in modules.items():
            setattr(self, name, module)
        # Their CSR banks (if any: rule 30's rule30_batch) are the DUT's, out of ident.map_hash.
        self.slot_csr_banks = list(modules)
        if user.cpl is not None:
            self.comb += dispatcher.slot.connect(user.cpl)
        else:
            self.comb += dispatcher.slot.ready.eq(1)  # completions for a user that sends no requests
        self.slot = SlotBlock(user, irq=user.irq, counters=user.counters, busy=user.busy, cycles=self.timebase.cycles,
            clock_hz=clock_hz, dut_map_hash=dut_map_hash)
        if getattr(user, "fence", None) is not None:
            self.comb += user.fence.eq(self.slot.fenced)
        # Verilog files beside the card's (file name -> text): tlpx_gateware.build writes them
        # next to tlpx_card.v, adds them to the platform's sources and verilates them together.
        self.verilog_sources.update(user.verilog_sources)

        # Each block in a clock domain of its own, one cycle late, gated when idle on the
        # simulated card (cores/isolate.py): an idle block costs the simulator nothing.
        gate = self.idle_gating
        self.isolated_blocks = []
        def isolated(name, block, events, tx, direct=(), domain=None):
            sources = isolate(self, name, block, block.busy, events, tx=tx, direct=direct, base=self.base_domain,
                domain=domain)
            self.isolated_blocks.append(block)
            return sources
        gen = self.generator
        tx_sources = isolated("gen", gen, [gen.cpl_sink.valid, gen.wr_sent, gen.rd_sent],
            [gen.wr_source, gen.rd_source, gen.fl_source])
        wr_bound, rd_bound, _ = gen.tx_boundaries
        self.comb += [gen.wr_sent.eq(wr_bound.sent_first), gen.rd_sent.eq(rd_bound.sent_last)]
        spy_tlps, self.spy_records = isolated("spy", self.spy, [phy.source.valid, phy.sink.valid, phy.msi.valid],
            [self.spy.source, self.spy.record_source])
        tx_sources += [spy_tlps]
        tx_sources += isolated("irqtimer", self.irq_timer, [], [self.irq_timer.source])
        tx_sources += isolated("rtloop", self.rt_loop, [self.rt_loop.cpl_sink.valid, self.rt_loop.sent], [self.rt_loop.source])
        self.comb += self.rt_loop.sent.eq(self.rt_loop.tx_boundaries[0].sent_first)
        self.spy_tx_source = tx_sources[3]
        # The slot user: isolated as it says (rule 30: its batch engine), or in the core's
        # domain with its TLPs straight into the arbiter (its busy keeps the core running).
        if hasattr(user, "attach"):
            tx_sources += user.attach(self, isolated)
        elif user.tx is not None:
            tx_sources += [user.tx]
        self.verilog_sources.update(drive_isolated_clocks(self, gate, self.base_domain))
        return dispatcher, tx_sources

    def _add_windows(self, phy):
        """The BAR0 memory windows beside the CSRs: the PIO window and the slot user's."""
        # PIO window ---------------------------------------------------------------------------
        self.pio = PIOWindow(PIO_WINDOW_BASE, PIO_WINDOW_SIZE, self.request_path.processor,
            bar0_mask=phy.bar0_mask, cycles=self.timebase.cycles)
        self.bus.add_slave(name="pio", slave=self.pio.bus,
            region=SoCRegion(origin=PIO_WINDOW_BASE, size=PIO_WINDOW_SIZE, cached=False))
        self.add_constant("PIO_WINDOW_BASE", PIO_WINDOW_BASE)
        self.add_constant("PIO_WINDOW_SIZE", PIO_WINDOW_SIZE)
        for name, value in BLOCK_CONSTANTS.items():
            self.add_constant(name, value)

        # MSI-X window -----------------------------------------------------------------------------
        # Where the MSI-X capability points: BAR0, at the window's BAR0 offset (moved with
        # tlpx's map under placement bar0), exported for tlpx-sim's configuration space.
        user = self.slot_user_in_slot
        self.bus.add_slave(name="msix", slave=self.msix.bus,
            region=SoCRegion(origin=MSIX_WINDOW_BASE, size=MSIX_WINDOW_SIZE, cached=False))
        msix_bar0 = MSIX_WINDOW_BASE + (RELOCATED_TLPX_BASE if user.placement == "bar0" else 0)
        self.add_constant("MSIX_TABLE_BAR0_OFFSET", msix_bar0 + MSIX_TABLE_OFFSET)
        self.add_constant("MSIX_PBA_BAR0_OFFSET", msix_bar0 + MSIX_PBA_OFFSET)
        # A board's hard IP builds the capability itself: it must point at the same window.
        if hasattr(self.pcie_phy, "offer_msix"):
            self.pcie_phy.offer_msix(msix_bar0 + MSIX_TABLE_OFFSET, msix_bar0 + MSIX_PBA_OFFSET, MSI_VECTORS)

        # Slot window -----------------------------------------------------------------------------
        self.bus.add_slave(name=user.dut_name, slave=user.bus,
            region=SoCRegion(origin=SLOT_WINDOW_BASE, size=user.window_bytes, cached=False))
        if self.ident_features_rule30:
            self.add_constant("RULE30_WINDOW_BASE", RULE30_WINDOW_BASE)
            self.add_constant("RULE30_WINDOW_SIZE", RULE30_WINDOW_SIZE)

def slot_core_activity(user):
    """What keeps the card's core clock running for a slot user (sim/clocking.py): its own
    list (core_activity), or its busy, its interrupt and a TLP it offers the arbiter."""
    if hasattr(user, "core_activity"):
        return user.core_activity()
    return [user.busy, user.irq] + ([user.tx.valid] if user.tx is not None else [])

# Register map export ------------------------------------------------------------------------------

def _description(csr):
    """A CSR's description; LiteX's plain CSRs (the UART's rxtx) have none."""
    description = getattr(csr, "description", None)
    return description.strip() if isinstance(description, str) else ""


def _access(csr):
    if isinstance(csr, CSRStatus):
        return "ro"
    return "rw"


def register_map(soc):
    """The card's register map as plain data: regions, registers, fields (after finalize)."""
    regions = []
    for name, region in sorted(soc.csr_regions.items(), key=lambda kv: kv[1].origin):
        registers = []
        offset = region.origin
        for csr in region.obj:
            words = (csr.size + region.busword - 1) // region.busword
            fields = []
            for f in getattr(getattr(csr, "fields", None), "fields", []):
                fields.append({
                    "name":        f.name,
                    "offset":      f.offset,
                    "size":        f.size,
                    "access":      "ro" if isinstance(csr, CSRStatus) else ("wo" if f.pulse else "rw"),
                    "description": (f.description or "").strip(),
                    "values":      [list(map(str, v)) for v in (f.values or [])],
                })
            registers.append({
                "name":        csr.name,
                "offset":      offset,
                "size_bits":   csr.size,
                "words":       words,
                "access":      _access(csr),
                "reset":       getattr(csr, "storage", None) is not None and int(csr.storage.reset.value) or 0,
                "description": _description(csr),
                "fields":      fields,
            })
            offset += 4 * words
        owner = "dut" if name in getattr(soc, "slot_csr_banks", []) else "card"
        regions.append({"name": name, "offset": region.origin, "owner": owner, "registers": registers})
    # Register windows that are not LiteX CSRs but belong to the map: the slot user's.
    user = getattr(soc, "slot_user_in_slot", None)
    if user is not None:
        regions += [{**r, "owner": "dut"} for r in user.regions()]
    constants = {k: (v if isinstance(v, (int, str)) or v is None else str(v)) for k, v in sorted(soc.constants.items())}
    return {"regions": regions, "constants": constants}


def map_hash(regmap, owner="card"):
    """FNV-1a (32-bit) over the canonical JSON of the map's structure (not its prose), over the
    regions of `owner`: ``card`` (ident.map_hash: what tlpx's host tools drive, whatever sits
    in the slot) or ``dut`` (slot.dut_map_hash: the accelerator's own registers)."""
    if owner not in ("card", "dut"):
        raise ValueError(f"a map region's owner is card or dut, not {owner!r}")
    structure = [
        [r["name"], r["offset"], [
            [g["name"], g["offset"], g["size_bits"], g["access"],
             [[f["name"], f["offset"], f["size"]] for f in g["fields"]]]
            for g in r["registers"]]]
        for r in regmap["regions"] if r.get("owner", "card") == owner
    ]
    data = json.dumps(structure, sort_keys=True, separators=(",", ":")).encode()
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h
