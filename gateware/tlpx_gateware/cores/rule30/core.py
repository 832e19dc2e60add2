"""Rule-30 accelerator: the device under test, behind the register map of the Simics paper (seed 000).

```
 host ─► input[32] ──start──► line ──step (all cells at once, wrap at line_length)──► line ─► output[32]
            ▲                   └──────────── N generations, 1 per cycle ─────────┘  │
            └───────────────── hwo: output copied to input at completion ◄──────────┘
 start ─► wait latency_cycles ─► N generations ─► status.complete, irq pulse (control.irq_enable)
```

Program ``rule_set``, ``line_length`` (and ``generations``, ``latency_cycles``), write the line
into ``input[]``, write ``start_compute``; then wait for the interrupt or poll ``status`` and
read ``output[]``. With ``control.hwo`` the result is also copied to ``input[]``, so the next
start continues the sequence without the host copying it back.

Register map (byte offsets in the 512-byte window; 32-bit registers). 0x00..0x11c are the
seed's Figure 5, at the same offsets; 0x120.. are tlpx extensions.

| offset | name | access | reset | description |
|---|---|---|---|---|
| 0x00 | version | RO | 0x00010000 | Register map version: major (bits 31:16) = 1, minor (15:0) = 0. |
| 0x04 | control | RW | 0 | bit 0 ``irq_enable``: pulse ``irq`` at completion (and at a refused start). bit 1 ``hwo``: at completion, copy output to input. Other bits read 0. Sampled at completion. |
| 0x08 | status | RW1C | 0 | bit 0 ``complete``: an operation completed (write 1 to clear; an accepted start clears it too). bit 1 ``error``: some bit of ``errors`` is set (write 1 to clear all of ``errors``). bit 2 ``busy`` (RO). |
| 0x0c | reset | WO | - | Any write resets the core: every register to its reset value, input/output to 0, counters to 0; aborts a running operation. Reads 0. |
| 0x10 | irq_num | RO | param | The MSI source index this core's ``irq`` is wired to (constructor parameter). |
| 0x14 | rule_set | RW | 30 | Elementary rule, bit-encoded (Wolfram): bit k is the new cell for neighbourhood k = left*4 + centre*2 + right. Bits 7:0. |
| 0x18 | line_length | RW | 0 | Cells in the line, 1..1024 (all 32 bits stored; a start with any other value is refused). |
| 0x1c | start_compute | WO | - | Any write starts an operation (refused if parameters are bad, ignored if busy). Reads 0. |
| 0x20 + 4i | input[i] | RW | 0 | Cells 32i..32i+31: cell c is bit c % 32 of input[c // 32]. The seed has these write-only; reading back is an extension. |
| 0xa0 + 4i | output[i] | RO | 0 | The result, same bit order; cells >= line_length read 0. Undefined while busy. |
| 0x120 | latency_cycles | RW | 0 | Extra cycles before the computation (0..2^32-1): emulates slower hardware. |
| 0x124 | generations | RW | 1 | Generations per start, 1..65535 (all 32 bits stored; a start with any other value is refused). |
| 0x128 | errors | RW1C | 0 | Sticky causes of refused/ignored starts: bit 0 ``bad_line_length``, bit 1 ``bad_generations``, bit 2 ``start_while_busy``. Write 1 to clear a bit. |
| 0x12c | refused_starts | RO | 0 | Starts refused for bad ``line_length`` or ``generations`` (nothing computed). |
| 0x130 | ignored_starts | RO | 0 | Starts ignored because the core was busy. |
| 0x134 | operations | RO | 0 | Operations completed. |
| 0x138 | busy_cycles_lo | RO | 0 | Cycles with ``busy`` high, bits 31:0. Reading it latches bits 63:32 for busy_cycles_hi. |
| 0x13c | busy_cycles_hi | RO | 0 | Bits 63:32 of busy_cycles, as latched by the last read of busy_cycles_lo. |
| 0x140 | min_cycles_per_generation | RO | 1 | Cycles one generation really takes in this core (all cells in parallel). |
| 0x144 | overhead_cycles | RO | 1 | Fixed cycles of an operation beyond generations and latency (the start write itself). |
| 0x148..0x1fc | - | - | - | Reserved: read 0, writes ignored. |

Timing, in cycles of the core's clock, counted from the cycle in which ``we`` carries the
write to ``start_compute`` (cycle 0):

    completion cycle = latency_cycles + generations * min_cycles_per_generation + overhead_cycles
                     = latency_cycles + generations + 1

In the completion cycle ``busy`` is low, ``status.complete`` reads 1 (a read strobed in that
cycle returns it), ``output[]`` (and ``input[]`` with ``hwo``) holds the result and ``irq`` is
high for that one cycle. ``busy`` is high in cycles 1 .. ``latency_cycles + generations``
(the latency first, then one generation per cycle), which is also what ``busy_cycles`` gains
per operation. A start accepted in the
completion cycle is the earliest possible next start; a start while ``busy`` is high, including
in the last busy cycle, is ignored.

Refused start (``line_length`` not 1..1024 or ``generations`` not 1..65535): nothing is
computed and output is untouched; the cause is set in ``errors`` (so ``status.error``),
``refused_starts`` counts it, and ``irq`` pulses in the next cycle if ``control.irq_enable``,
so a driver sleeping on the interrupt wakes and sees the error. A start while busy is
counted in ``ignored_starts`` and sets ``errors.start_while_busy``; the running operation
goes on and will interrupt as usual.

Hardware cost: one generation is 1024 copies of next = rule[left, centre, right]: an 8:1 mux
of the rule's bits per cell, since the rule is a register (two LUT6 and a MUXF7; a fixed rule
30 would be one LUT3). The variable line length adds per cell a live mask and the right
neighbour's wrap mux, but no 1024-wide comparator: ``line_length - 1`` is split in word (5
bits) and bit (5 bits) and predecoded, so cell 32w + b is live when ``w < word or (w == word
and b <= bit)`` (one LUT3) and is the last cell when ``w == word and b == bit`` (one LUT2).
The left neighbour of cell 0 (the last cell) is the design's one 1024:1 mux (about 340 LUT6,
on the critical path together with the rule mux of cell 0: about six LUT levels). ``line``
doubles as output and working register, so the state is 2 x 1024 flip-flops. Measured with
Yosys 0.70 ``synth_xilinx -flatten -family xc7`` (a pessimistic mapper for this logic): about
8,300 LUTs and 2,450 flip-flops. A hand count gives about 6,000 LUTs (five per cell, plus the
tap and the read mux), which a vendor tool should approach.

Ports (the integration contract; the Verilog module also has ``clk`` and ``rst``): ``addr``
(9 bits, byte address, word aligned: bits 1:0 ignored), ``wdata`` (32), ``we`` and ``re``
(one-cycle strobes; both may be high in one cycle), ``rdata`` (32, valid the cycle after
``re``, held until the next read), ``irq`` (one-cycle pulse), ``busy``.
"""

import enum

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tlpx_gateware.cores.rule30.reference import MAX_LINE_LENGTH, RULE30, WORD_BITS, WORDS

VERSION_MAJOR = 1
VERSION_MINOR = 0
VERSION = (VERSION_MAJOR << 16) | VERSION_MINOR
MIN_CYCLES_PER_GENERATION = 1
OVERHEAD_CYCLES = 1
MAX_GENERATIONS = 2**16 - 1
WINDOW_BYTES = 0x200


class Register(enum.IntEnum):
    """Byte offsets of the registers in the core's window."""
    VERSION = 0x00                    #: RO: register map version
    CONTROL = 0x04                    #: RW: irq_enable, hwo
    STATUS = 0x08                     #: RW1C: complete, error; RO: busy
    RESET = 0x0C                      #: WO: any write resets the core
    IRQ_NUM = 0x10                    #: RO: MSI source index
    RULE_SET = 0x14                   #: RW: bit-encoded elementary rule
    LINE_LENGTH = 0x18                #: RW: cells, 1..1024
    START_COMPUTE = 0x1C              #: WO: any write starts
    INPUT = 0x20                      #: RW: input[0..31]
    OUTPUT = 0xA0                     #: RO: output[0..31]
    LATENCY_CYCLES = 0x120            #: RW: extra cycles per operation
    GENERATIONS = 0x124               #: RW: generations per start, 1..65535
    ERRORS = 0x128                    #: RW1C: causes of refused / ignored starts
    REFUSED_STARTS = 0x12C            #: RO: starts refused for bad parameters
    IGNORED_STARTS = 0x130            #: RO: starts ignored while busy
    OPERATIONS = 0x134                #: RO: operations completed
    BUSY_CYCLES_LO = 0x138            #: RO: busy cycles 31:0 (latches 63:32)
    BUSY_CYCLES_HI = 0x13C            #: RO: busy cycles 63:32 as latched
    MIN_CYCLES_PER_GENERATION = 0x140  #: RO: cycles per generation
    OVERHEAD_CYCLES = 0x144           #: RO: fixed cycles per operation


CONTROL_IRQ_ENABLE = 1 << 0  # pulse irq at completion (and at a refused start)
CONTROL_HWO = 1 << 1         # copy output to input at completion

STATUS_COMPLETE = 1 << 0     # an operation completed; write 1 to clear
STATUS_ERROR = 1 << 1        # errors != 0; write 1 to clear all errors
STATUS_BUSY = 1 << 2         # an operation is running (read only)

ERROR_BAD_LINE_LENGTH = 1 << 0   # start refused: line_length not 1..1024
ERROR_BAD_GENERATIONS = 1 << 1   # start refused: generations not 1..65535
ERROR_START_WHILE_BUSY = 1 << 2  # start ignored: an operation was running


def operation_cycles(generations, latency_cycles):
    """Cycles from the start write (cycle 0) to the completion cycle (status, irq, not busy)."""
    return latency_cycles + generations * MIN_CYCLES_PER_GENERATION + OVERHEAD_CYCLES


# Datapath ----------------------------------------------------------------------------------------
# Separate fragments so that Amaranth's simulator re-evaluates the masks only when a new operation
# starts, not every cycle. Whole-line operators (no per-cell replicate) keep the simulation fast.

class _LineMasks(wiring.Component):
    """Live and last-cell masks of a line whose last cell is ``last_cell`` (= line_length - 1).

    Predecoded by word and bit instead of 1024-wide comparators: cell 32w + b is live when
    ``w < word or (w == word and b <= bit)`` and is the last cell when ``w == word and b == bit``.
    """
    last_cell: In(10)
    live: Out(MAX_LINE_LENGTH)   # cell i < line_length
    last: Out(MAX_LINE_LENGTH)   # cell i == line_length - 1

    def elaborate(self, platform):
        m = Module()
        last_word, last_bit = self.last_cell[5:], self.last_cell[:5]
        bit_le = Signal(WORD_BITS)
        bit_eq = Signal(WORD_BITS)
        m.d.comb += [
            bit_le.eq((Const(2, WORD_BITS + 1) << last_bit) - 1),
            bit_eq.eq(Const(1, WORD_BITS) << last_bit),
            # (The last word cannot lie below another: no constant compare for Verilator to flag.)
            self.live.eq(Cat(*(Mux(last_word > w, 2**WORD_BITS - 1, Mux(last_word == w, bit_le, 0))
                               for w in range(WORDS - 1)), Mux(last_word == WORDS - 1, bit_le, 0))),
            self.last.eq(Cat(Mux(last_word == w, bit_eq, 0) for w in range(WORDS))),
        ]
        return m


class _Generation(wiring.Component):
    """One generation of the whole line, all cells at once, wrap-around at the line's length."""
    line: In(MAX_LINE_LENGTH)        # the current generation (cells >= line_length: don't care)
    rule: In(8)                      # bit-encoded elementary rule
    live: In(MAX_LINE_LENGTH)        # cell i < line_length
    last: In(MAX_LINE_LENGTH)        # cell i == line_length - 1
    last_cell: In(10)                # line_length - 1
    next_line: Out(MAX_LINE_LENGTH)  # the next generation, cells >= line_length zero

    def elaborate(self, platform):
        m = Module()
        line = self.line
        # The seed's Figure 4: the left neighbour of cell 0 is the last cell (the design's one
        # 1024:1 mux), the right neighbour of the last cell is cell 0.
        left = Signal(MAX_LINE_LENGTH)
        right = Signal(MAX_LINE_LENGTH)
        m.d.comb += [
            left.eq(Cat(line.bit_select(self.last_cell, 1), line[:-1])),
            right.eq((line[1:] & ~self.last) | Mux(line[0], self.last, 0)),
        ]
        # new cell = rule bit (left*4 + centre*2 + right): an 8:1 mux of the rule's bits per cell,
        # written as a tree of whole-line 2:1 muxes (selected by right, then centre, then left).
        def select(sel, when_1, when_0):
            return (sel & when_1) | (~sel & when_0)
        by_right = [Mux(self.rule[2 * j + 1], right, 0) | Mux(self.rule[2 * j], ~right, 0) for j in range(4)]
        by_centre = [select(line, by_right[2 * j + 1], by_right[2 * j]) for j in range(2)]
        new = select(left, by_centre[1], by_centre[0])
        m.d.comb += self.next_line.eq(new & self.live)
        return m


class Rule30Accelerator(wiring.Component):
    """Rule-30 (any elementary rule) accelerator with a 32-bit register port; see the module doc.

    Parameters
    ----------
    irq_num : int
        MSI source index this core's ``irq`` is wired to; read back at ``irq_num`` (0x10).
    """

    addr: In(9)     # byte address in the 512-byte window (bits 1:0 ignored)
    wdata: In(32)   # write data, taken when we is high
    we: In(1)       # one-cycle write strobe
    re: In(1)       # one-cycle read strobe
    rdata: Out(32)  # read data, valid the cycle after re, held until the next read
    irq: Out(1)     # one-cycle pulse: operation complete (or start refused), if irq_enable
    busy: Out(1)    # an operation is running

    def __init__(self, irq_num=0):
        if not isinstance(irq_num, int) or not 0 <= irq_num < 2**32:
            raise ValueError(f"irq_num must be an integer 0..2**32-1, not {irq_num!r}")
        self.irq_num = irq_num
        super().__init__()
        # Created here, not in elaborate, so a simulation can preset it near 2**32 to check the
        # carry into the high word (no other state is visible from outside).
        self._busy_cycles = Signal(64, name="busy_cycles")

    def elaborate(self, platform):
        m = Module()

        word = self.addr[2:]            # register index, 0..127
        def written(register):
            return self.we & (word == (register >> 2))
        def read(register):
            return self.re & (word == (register >> 2))

        # Registers ---------------------------------------------------------------------------------
        irq_enable = Signal()
        hwo = Signal()
        complete = Signal()
        errors = Signal(3)
        rule_set = Signal(8, init=RULE30)
        line_length = Signal(32)
        generations = Signal(32, init=1)
        latency_cycles = Signal(32)
        line_in = Signal(MAX_LINE_LENGTH)   # input[]
        line = Signal(MAX_LINE_LENGTH)      # output[], and the working line while busy
        refused_starts = Signal(32)
        ignored_starts = Signal(32)
        operations = Signal(32)
        busy_cycles = self._busy_cycles
        busy_cycles_hi = Signal(32)         # latched by a read of busy_cycles_lo
        irq = Signal()
        busy = Signal()

        # Operation state: the parameters are latched at start, so the host can program the
        # next operation while this one runs.
        run_rule = Signal(8)
        run_last = Signal(10)               # line_length - 1 of the running operation
        wait_left = Signal(32)
        generations_left = Signal(16)

        # # #

        m.d.comb += [self.irq.eq(irq), self.busy.eq(busy)]

        next_line, = self._add_generation(line, m, run_last, run_rule)
        input_index, is_input, is_output, output_index = self._add_register_writes(
            complete, errors, generations, hwo, irq_enable, latency_cycles, line_in, line_length, m, rule_set, word,
            written)
        self._add_start_and_compute(
            busy, busy_cycles, complete, errors, generations, generations_left, hwo, ignored_starts, irq, irq_enable,
            latency_cycles, line, line_in, line_length, m, next_line, operations, refused_starts, rule_set, run_last,
            run_rule, wait_left, written)
        self._add_register_reads(
            busy, busy_cycles, busy_cycles_hi, complete, errors, generations, hwo, ignored_starts, input_index,
            irq_enable, is_input, is_output, latency_cycles, line, line_in, line_length, m, operations, output_index,
            read, refused_starts, rule_set, word)
        return self._add_soft_reset(m, written)

    def _add_generation(self, line, m, run_last, run_rule):
        # One generation -----------------------------------------------------------------------------
        m.submodules.masks = masks = _LineMasks()
        m.submodules.generation = generation = _Generation()
        m.d.comb += [
            masks.last_cell.eq(run_last),
            generation.line.eq(line),
            generation.rule.eq(run_rule),
            generation.live.eq(masks.live),
            generation.last.eq(masks.last),
            generation.last_cell.eq(run_last),
        ]
        next_line = generation.next_line
        return next_line,

    def _add_register_writes(self, complete, errors, generations, hwo, irq_enable, latency_cycles, line_in,
                             line_length, m, rule_set, word, written):
        # Register writes ----------------------------------------------------------------------------
        input_index = Signal(7)
        output_index = Signal(7)
        m.d.comb += [input_index.eq(word - (Register.INPUT >> 2)), output_index.eq(word - (Register.OUTPUT >> 2))]
        is_input = (word >= Register.INPUT >> 2) & (word < (Register.INPUT >> 2) + WORDS)
        is_output = (word >= Register.OUTPUT >> 2) & (word < (Register.OUTPUT >> 2) + WORDS)

        with m.If(written(Register.CONTROL)):
            m.d.sync += [irq_enable.eq(self.wdata[0]), hwo.eq(self.wdata[1])]
        with m.If(written(Register.STATUS)):
            with m.If(self.wdata[0]):
                m.d.sync += complete.eq(0)
            with m.If(self.wdata[1]):
                m.d.sync += errors.eq(0)
        with m.If(written(Register.ERRORS)):
            m.d.sync += errors.eq(errors & ~self.wdata[:3])
        with m.If(written(Register.RULE_SET)):
            m.d.sync += rule_set.eq(self.wdata[:8])
        with m.If(written(Register.LINE_LENGTH)):
            m.d.sync += line_length.eq(self.wdata)
        with m.If(written(Register.GENERATIONS)):
            m.d.sync += generations.eq(self.wdata)
        with m.If(written(Register.LATENCY_CYCLES)):
            m.d.sync += latency_cycles.eq(self.wdata)
        with m.If(self.we & is_input):
            m.d.sync += line_in.word_select(input_index[:5], WORD_BITS).eq(self.wdata)
        return input_index, is_input, is_output, output_index

    def _add_start_and_compute(self, busy, busy_cycles, complete, errors, generations, generations_left, hwo,
                               ignored_starts, irq, irq_enable, latency_cycles, line, line_in, line_length, m,
                               next_line, operations, refused_starts, rule_set, run_last, run_rule, wait_left, written):
        # Start, compute, complete -------------------------------------------------------------------
        bad_line_length = (line_length == 0) | (line_length > MAX_LINE_LENGTH)
        bad_generations = (generations == 0) | (generations > MAX_GENERATIONS)
        m.d.sync += irq.eq(0)
        with m.If(written(Register.START_COMPUTE)):
            with m.If(busy):
                m.d.sync += [
                    ignored_starts.eq(ignored_starts + 1),
                    errors.eq(errors | ERROR_START_WHILE_BUSY),
                ]
            with m.Elif(bad_line_length | bad_generations):
                m.d.sync += [
                    refused_starts.eq(refused_starts + 1),
                    errors.eq(errors | Cat(bad_line_length, bad_generations)),
                    irq.eq(irq_enable),
                ]
            with m.Else():
                m.d.sync += [
                    busy.eq(1),
                    complete.eq(0),
                    line.eq(line_in),
                    run_rule.eq(rule_set),
                    run_last.eq(line_length - 1),
                    wait_left.eq(latency_cycles),
                    generations_left.eq(generations),
                ]

        with m.If(busy):
            m.d.sync += busy_cycles.eq(busy_cycles + 1)
            with m.If(wait_left != 0):
                m.d.sync += wait_left.eq(wait_left - 1)
            with m.Else():
                m.d.sync += [
                    line.eq(next_line),
                    generations_left.eq(generations_left - 1),
                ]
                with m.If(generations_left == 1):
                    m.d.sync += [
                        busy.eq(0),
                        complete.eq(1),
                        operations.eq(operations + 1),
                        irq.eq(irq_enable),
                    ]
                    with m.If(hwo):
                        m.d.sync += line_in.eq(next_line)

    def _add_register_reads(self, busy, busy_cycles, busy_cycles_hi, complete, errors, generations, hwo,
                            ignored_starts, input_index, irq_enable, is_input, is_output, latency_cycles, line,
                            line_in, line_length, m, operations, output_index, read, refused_starts, rule_set, word):
        # Register reads -----------------------------------------------------------------------------
        with m.If(read(Register.BUSY_CYCLES_LO)):
            m.d.sync += busy_cycles_hi.eq(busy_cycles[32:])
        with m.If(self.re):
            with m.If(is_input):
                m.d.sync += self.rdata.eq(line_in.word_select(input_index[:5], WORD_BITS))
            with m.Elif(is_output):
                m.d.sync += self.rdata.eq(line.word_select(output_index[:5], WORD_BITS))
            with m.Else():
                registers = {
                    Register.VERSION: VERSION,
                    Register.CONTROL: Cat(irq_enable, hwo),
                    Register.STATUS: Cat(complete, errors != 0, busy),
                    Register.IRQ_NUM: self.irq_num,
                    Register.RULE_SET: rule_set,
                    Register.LINE_LENGTH: line_length,
                    Register.LATENCY_CYCLES: latency_cycles,
                    Register.GENERATIONS: generations,
                    Register.ERRORS: errors,
                    Register.REFUSED_STARTS: refused_starts,
                    Register.IGNORED_STARTS: ignored_starts,
                    Register.OPERATIONS: operations,
                    Register.BUSY_CYCLES_LO: busy_cycles[:32],
                    Register.BUSY_CYCLES_HI: busy_cycles_hi,
                    Register.MIN_CYCLES_PER_GENERATION: MIN_CYCLES_PER_GENERATION,
                    Register.OVERHEAD_CYCLES: OVERHEAD_CYCLES,
                }
                with m.Switch(word):
                    for register, value in registers.items():
                        with m.Case(register >> 2):
                            m.d.sync += self.rdata.eq(value)
                    with m.Default():
                        m.d.sync += self.rdata.eq(0)

    def _add_soft_reset(self, m, written):
        # The reset register resets everything in this core (the last write in the cycle wins).
        soft_reset = Signal()
        m.d.comb += soft_reset.eq(written(Register.RESET))
        return ResetInserter({"sync": soft_reset})(m)
