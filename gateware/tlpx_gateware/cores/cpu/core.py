"""The card's optional soft CPU: VexRiscv, its SRAM, the host's loader and a console.

The CPU sees the card's bus as the host sees BAR0 (CPU address == BAR0 offset): the CSR pages
at 0x0 (the generator, spy, irq_timer, rt_loop, rule30_batch and timebase registers), the PIO
window at 0x10000, the rule-30 window at 0x20000 and its own SRAM at SRAM_BASE. One address
space for both masters means one generated register header serves the host and the firmware.

The host loads a firmware image into the SRAM through BAR0 while the CPU is held in reset,
writes the length and CRC-32 it claims into ``cpu_ctrl`` and sets ``control.run``. The card
then reads the image back through a second port of the SRAM, computes its CRC-32 itself and
releases the CPU only if the length is sane and the CRC matches; otherwise it stays in reset
and ``status`` says why (``reason``). So a transfer that went wrong is refused on the card too,
not only by the host's checks of the image file.

Console: LiteX's UART in crossover mode (CSR page ``uart``): the firmware writes ``uart.rxtx``,
the host reads ``uart.xover_rxtx`` (what LitePCIe's liteuart driver exposes as a tty).

Clock gate (``gate_clock``, simulation only, as for the rule-30 core): the CPU runs on a clock
that is on while it runs and for a few cycles after every start or stop (so that its reset is
clocked in); a stopped CPU then costs the simulation nothing.
"""

from migen import *

from litex.gen import *
from litex.soc.cores.uart import UARTCrossover
from litex.soc.interconnect import wishbone
from litex.soc.interconnect.csr import CSRField, CSRStatus, CSRStorage

from tlpx_gateware.cores.rule30.block import drive_clock
from tlpx_gateware.cores.lease import Lease

SRAM_BASE = 0x40000
SRAM_SIZE = 0x10000
CPU_VARIANT = "lite"  # rv32im, instruction cache only: data accesses go straight to the bus
# Console FIFO of the firmware's side: what the console keeps while nobody reads it.
CONSOLE_FIFO_DEPTH = 512
# Cycles the CPU's clock runs in reset after a start or a stop (and at power-on).
RESET_CYCLES = 16

STATES  = ["stopped", "checking", "running", "refused"]
REASONS = ["none", "empty", "too_long", "unaligned", "crc"]

CRC32_POLY_REFLECTED = 0xEDB88320


def crc32_word_equations():
    """CRC-32 (IEEE/zlib, reflected) over one little-endian 32-bit word, as GF(2) equations.

    Returns, per bit of the next state, the set of terms ("c", j) (state bit j) and ("d", i)
    (data bit i) whose XOR it is. The word's bits are taken in the order a byte-wise CRC takes
    them: byte 0 first, each byte's bit 0 first, i.e. data bits 0..31 in order.
    """
    state = [{("c", j)} for j in range(32)]
    for i in range(32):
        feedback = state[0] ^ {("d", i)}
        state = [state[j + 1] if j < 31 else set() for j in range(32)]
        for j in range(32):
            if (CRC32_POLY_REFLECTED >> j) & 1:
                state[j] = state[j] ^ feedback
    return state


def crc32_reference(data, crc=0):
    """Byte-wise CRC-32 (zlib's), the model the test checks the equations against."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (CRC32_POLY_REFLECTED if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class CpuSram(Module):
    """The CPU's SRAM: a Wishbone slave on the card's bus and a read port for the image check.

    A plain Module (not AutoCSR): LiteX would otherwise offer the memory as a CSR memory too."""
    def __init__(self, size=SRAM_SIZE):
        self.mem = Memory(32, size // 4, name="cpu_sram")
        self.submodules.sram = wishbone.SRAM(self.mem)  # the bus port (bursts, byte enables)
        self.bus = self.sram.bus
        self.check_port = self.mem.get_port()  # synchronous read, one cycle
        self.specials += self.check_port


class CpuControl(LiteXModule):
    """``cpu_ctrl``: run/stop, the image check, status and the CPU's reset and clock enable."""
    def __init__(self, check_port, sram_base=SRAM_BASE, sram_size=SRAM_SIZE, cycles=None, clock_hz=125e6):
        self.control = CSRStorage(fields=[
            CSRField("run", size=1, offset=0, description=(
                "Write 1: check the image at ``sram_base`` (``image_length`` bytes against "
                "``image_crc``) and, if it passes, release the CPU from reset (a running CPU is "
                "reset and the image checked again). Write 0: hold the CPU in reset.")),
        ], description="CPU run control.")
        self.image_length = CSRStorage(32, description=(
            "Bytes of the firmware image at ``sram_base`` (a multiple of 4, 4..``sram_size``)."))
        self.image_crc = CSRStorage(32, description=(
            "CRC-32 (IEEE/zlib) of the image the host claims; the card computes its own before "
            "it starts the CPU."))
        self.status = CSRStatus(fields=[
            CSRField("state", size=2, offset=0, description="CPU state.", values=[
                ("0", "stopped",  "held in reset"),
                ("1", "checking", "the card reads the image back and computes its CRC"),
                ("2", "running",  "the CPU runs the image"),
                ("3", "refused",  "the image was refused (see reason); the CPU is in reset"),
            ]),
            CSRField("reason", size=3, offset=2, description="Why the last image was refused.", values=[
                ("0", "none",      "not refused"),
                ("1", "empty",     "image_length is 0"),
                ("2", "too_long",  "image_length is larger than sram_size"),
                ("3", "unaligned", "image_length is not a multiple of 4"),
                ("4", "crc",       "the CRC the card computed differs from image_crc"),
            ]),
        ], description="CPU status.")
        self.computed_crc = CSRStatus(32, description="CRC-32 the card computed over the last image it checked.")
        self.sram_base = CSRStatus(32, reset=sram_base, description="Address of the CPU's SRAM (BAR0 offset and CPU address).")
        self.sram_size = CSRStatus(32, reset=sram_size, description="Bytes of the CPU's SRAM.")
        self.starts = CSRStatus(32, description="Images that passed the check and started the CPU.")
        self.refusals = CSRStatus(32, description="Images the card refused.")

        # A script run is a lease (``lease_*``, cores/lease.py): the host that started a script
        # holds it; when it expires (the host is gone) the CPU is held in reset, so that a
        # script cannot go on driving the card's DMA blocks for a dead owner. A release (the
        # script ended) leaves the firmware running.
        self.lease = Lease(cycles if cycles is not None else Signal(64), clock_hz)

        self.cpu_reset  = Signal(reset=1)  # out: hold the CPU in reset
        self.clock_on   = Signal()         # out: the CPU's clock must run (the gate's enable)

        # # #

        state    = Signal(2)
        reason   = Signal(3)
        words    = Signal(max=sram_size // 4 + 1)
        address  = Signal(max=sram_size // 4 + 1)
        valid    = Signal()  # check_port.dat_r holds the word read the cycle before
        crc      = Signal(32)
        settle   = Signal(max=RESET_CYCLES + 1, reset=RESET_CYCLES)
        start    = Signal()
        stop     = Signal()
        length   = self.image_length.storage
        self.comb += [
            start.eq(self.control.re & self.control.fields.run),
            stop.eq((self.control.re & ~self.control.fields.run) | self.lease.expired),
            self.status.fields.state.eq(state),
            self.status.fields.reason.eq(reason),
            check_port.adr.eq(address),
            self.cpu_reset.eq(state != 2),
            self.clock_on.eq((state == 2) | (settle != 0)),
        ]

        # CRC-32 of one word, combinational (equations from crc32_word_equations).
        data = check_port.dat_r
        next_crc = Signal(32)
        for j, terms in enumerate(crc32_word_equations()):
            bits = [crc[t] if k == "c" else data[t] for k, t in sorted(terms)]
            expr = bits[0]
            for b in bits[1:]:
                expr = expr ^ b
            self.comb += next_crc[j].eq(expr)

        self.sync += [
            If(settle != 0, settle.eq(settle - 1)),
            If(start,
                settle.eq(RESET_CYCLES),
                address.eq(0),
                valid.eq(0),
                crc.eq(0xFFFFFFFF),
                words.eq(length[2:]),
                If(length == 0,
                    state.eq(3), reason.eq(1), self.refusals.status.eq(self.refusals.status + 1),
                ).Elif(length > sram_size,
                    state.eq(3), reason.eq(2), self.refusals.status.eq(self.refusals.status + 1),
                ).Elif(length[:2] != 0,
                    state.eq(3), reason.eq(3), self.refusals.status.eq(self.refusals.status + 1),
                ).Else(
                    state.eq(1), reason.eq(0),
                ),
            ).Elif(stop,
                settle.eq(RESET_CYCLES),
                state.eq(0),
            ).Elif(state == 1,
                # Read word `address`; the word read the cycle before is in dat_r.
                If(address != words, address.eq(address + 1)),
                valid.eq(address != words),
                If(valid, crc.eq(next_crc)),
            ),
        ]
        # The check ends the cycle after the last word was folded in.
        final = Signal(32)
        self.comb += final.eq(~crc)
        done = Signal()
        self.comb += done.eq((state == 1) & ~valid & (address == words) & (address != 0))
        self.sync += If(done & ~start & ~stop,
            self.computed_crc.status.eq(final),
            If(final == self.image_crc.storage,
                state.eq(2),
                self.starts.status.eq(self.starts.status + 1),
            ).Else(
                state.eq(3), reason.eq(4),
                self.refusals.status.eq(self.refusals.status + 1),
            ),
        )


class SoftCpu(LiteXModule):
    """VexRiscv with its reset and (in simulation) its clock under ``CpuControl``.

    ``ibus`` and ``dbus`` are the CPU's Wishbone masters, to add to the card's bus.
    """
    def __init__(self, platform, reset_address=SRAM_BASE, gate_clock=False, variant=CPU_VARIANT, base="sys"):
        from litex.soc.cores.cpu.vexriscv.core import VexRiscv
        self.hold_reset = Signal()  # in: CpuControl.cpu_reset
        self.clock_on   = Signal()  # in: CpuControl.clock_on
        self.cd_cpu = ClockDomain("cpu")
        self.vexriscv = cpu = VexRiscv(platform, variant=variant)
        cpu.set_reset_address(reset_address)
        cpu.cpu_params.update(
            i_clk   = ClockSignal("cpu"),
            i_reset = ResetSignal("sys") | self.hold_reset,
        )
        self.ibus, self.dbus = cpu.ibus, cpu.dbus
        self.comb += ResetSignal("cpu").eq(ResetSignal("sys"))
        self.verilog_sources = drive_clock(self, "cpu", self.clock_on | ResetSignal("sys"), gate_clock, base)


def console(fifo_depth=CONSOLE_FIFO_DEPTH):
    """LiteX's crossover UART (the CSR page ``uart``), the firmware's console."""
    return UARTCrossover(tx_fifo_depth=fifo_depth, rx_fifo_depth=16)
