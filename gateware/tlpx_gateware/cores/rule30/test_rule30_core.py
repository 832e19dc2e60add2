"""Rule-30 accelerator in Amaranth's simulator, checked against the seed's char-based model.

    testbench (register reads/writes, one per cycle) ──addr/wdata/we/re──► Rule30Accelerator
         ▲                                                 rdata, irq, busy ◄──┘
         └── reference.step_chars (the seed's Figure 4) and OEIS A051023 decide what is right

The reference models are checked first, against each other, against Wolfram's definition of
the rule number and against the published centre column of rule 30. Then the core runs the
seed's experiment shapes (packet lengths 8..1024, random packets and rules) through its
register port, chains generations in hwo mode and in multi-generation mode, and must refuse,
ignore and count bad starts, raise its interrupt only when enabled, and complete in exactly the
documented number of cycles.
"""

import random

import pytest
from amaranth.sim import Simulator

from tlpx_gateware.cores.rule30 import reference as ref
from tlpx_gateware.cores.rule30.convert import main as convert_main, verilog
from tlpx_gateware.cores.rule30.core import (
    CONTROL_HWO, CONTROL_IRQ_ENABLE, ERROR_BAD_GENERATIONS, ERROR_BAD_LINE_LENGTH,
    ERROR_START_WHILE_BUSY, MIN_CYCLES_PER_GENERATION, OVERHEAD_CYCLES, STATUS_BUSY,
    STATUS_COMPLETE, STATUS_ERROR, VERSION, Register, Rule30Accelerator, operation_cycles,
)
from tlpx_gateware.testing.rule30 import A051023, random_line

IRQ_NUM = 7


# Reference models ------------------------------------------------------------------------------

def test_reference_figure4_rules_array_is_rule_30():
    assert ref.rules_array(30) == ref.FIGURE4_RULES_ARRAY
    assert ref.rules_array(30) == (0, 1, 1, 1, 1, 0, 0, 0)
    with pytest.raises(ValueError, match="rule must be 0..255"):
        ref.rules_array(256)


def test_reference_rule_number_is_wolfram_convention():
    rng = random.Random(30)
    for _ in range(50):
        line = random_line(rng, rng.randint(3, 80))
        n = len(line)
        cell = lambda s, i: int(s[i % n])
        # Wolfram: rule 30 = left XOR (centre OR right); rule 90 = left XOR right; 204 = identity;
        # 170 = right neighbour (rotate left); rule 86 is the mirror image of rule 30.
        for rule, f in ((30, lambda l, c, r: l ^ (c | r)), (90, lambda l, c, r: l ^ r),
                        (204, lambda l, c, r: c), (170, lambda l, c, r: r),
                        (0, lambda l, c, r: 0), (255, lambda l, c, r: 1)):
            expect = "".join(str(f(cell(line, i - 1), cell(line, i), cell(line, i + 1))) for i in range(n))
            assert ref.step_chars(line, rule) == expect, rule
        assert ref.step_chars(line[::-1], 86)[::-1] == ref.step_chars(line, 30)


def test_reference_char_model_wraps_like_figure4():
    # A lone 1 at cell 0 spreads to the last cell (left of cell 0 is the last cell) ...
    assert ref.step_chars("10000") == "11001"
    # ... and a lone 1 in the last cell reaches cell 0.
    assert ref.step_chars("00001") == "10011"
    assert ref.step_chars("1") == "0"   # 111 -> 0 under rule 30: a one-cell ring is its own neighbours
    assert ref.step_chars("0") == "0"


def test_reference_bit_order_cell_i_is_bit_i_mod_32_of_word_i_div_32():
    line = ["0"] * 1024
    for i in (0, 31, 32, 33, 1023):
        line[i] = "1"
    words = ref.chars_to_words("".join(line))
    assert words[0] == 1 | (1 << 31)
    assert words[1] == 0b11
    assert words[31] == 1 << 31
    assert sum(bin(w).count("1") for w in words) == 5
    assert ref.words_to_chars(words, 1024) == "".join(line)
    assert ref.chars_to_words("101") == [0b101] + [0] * 31
    assert ref.words_to_chars([0xFFFFFFFF] * 32, 3) == "111"


def test_reference_packed_model_matches_char_model():
    rng = random.Random(1)
    lengths = [1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 511, 512, 777, 1000, 1023, 1024]
    lengths += [rng.randint(1, 1024) for _ in range(40)]
    for length in lengths:
        for rule in (30, rng.randrange(256), rng.randrange(256)):
            line = random_line(rng, length)
            garbage = [rng.getrandbits(32) for _ in range(32)]
            words = [w | (g & ~m) for w, g, m in zip(ref.chars_to_words(line), garbage,
                                                      ref.chars_to_words("1" * length))]
            out = ref.step_words(words, length, rule)
            assert ref.words_to_chars(out, length) == ref.step_chars(line, rule), (length, rule)
            assert out == ref.chars_to_words(ref.words_to_chars(out, length)), "cells >= length not zero"
            assert ref.run_words(words, length, 3, rule) == ref.chars_to_words(ref.run_chars(line, 3, rule))


def test_reference_centre_column_is_oeis_a051023():
    assert len(A051023) >= 64
    assert ref.centre_column(len(A051023)) == list(A051023)
    # Rule 86, the mirror image of rule 30, has the same centre column (OEIS comment).
    assert ref.centre_column(len(A051023), rule=86) == list(A051023)


def test_reference_rejects_bad_lines():
    with pytest.raises(ValueError, match="at least 1 cell"):
        ref.step_chars("")
    with pytest.raises(ValueError, match="line length must be 1..1024"):
        ref.chars_to_words("0" * 1025)
    with pytest.raises(ValueError, match="cells must be the characters"):
        ref.step_chars("012")
    with pytest.raises(ValueError, match="line length must be 1..1024 bits"):
        ref.step_words([0] * 32, 0)


# Simulation harness ----------------------------------------------------------------------------

class Bus:
    """Register port driver: one access per cycle; counts cycles and records irq pulses.

    ``cycle`` is the cycle whose inputs the testbench is driving; ``write`` and ``read`` return
    or use the cycle in which their strobe was high.
    """

    def __init__(self, ctx, dut):
        self.ctx = ctx
        self.dut = dut
        self.cycle = 0
        self.irq_cycles = []
        self.busy_cycles = 0

    async def tick(self, n=1):
        for _ in range(n):
            if self.ctx.get(self.dut.busy):
                self.busy_cycles += 1
            await self.ctx.tick()
            self.cycle += 1
            if self.ctx.get(self.dut.irq):
                self.irq_cycles.append(self.cycle)

    async def write(self, addr, data):
        start = self.cycle
        self.ctx.set(self.dut.addr, addr)
        self.ctx.set(self.dut.wdata, data)
        self.ctx.set(self.dut.we, 1)
        await self.tick()
        self.ctx.set(self.dut.we, 0)
        return start

    async def read(self, addr):
        self.ctx.set(self.dut.addr, addr)
        self.ctx.set(self.dut.re, 1)
        await self.tick()
        self.ctx.set(self.dut.re, 0)
        return self.ctx.get(self.dut.rdata)

    async def read64(self, addr_lo):
        lo = await self.read(addr_lo)
        return lo | (await self.read(addr_lo + 4)) << 32

    async def write_line(self, words):
        for i, w in enumerate(words):
            await self.write(Register.INPUT + 4 * i, w)

    async def read_output(self):
        return [await self.read(Register.OUTPUT + 4 * i) for i in range(ref.WORDS)]

    async def configure(self, line_length, rule=30, generations=1, latency=0, control=0):
        await self.write(Register.RULE_SET, rule)
        await self.write(Register.LINE_LENGTH, line_length)
        await self.write(Register.GENERATIONS, generations)
        await self.write(Register.LATENCY_CYCLES, latency)
        await self.write(Register.CONTROL, control)

    async def run(self, limit=200_000):
        """Start an operation and wait for busy to fall: (start cycle, completion cycle)."""
        start = await self.write(Register.START_COMPUTE, 1)
        while self.ctx.get(self.dut.busy):
            await self.tick()
            assert self.cycle - start < limit, "operation never completed"
        return start, self.cycle


def simulate(body, irq_num=IRQ_NUM):
    """Run ``body(bus)`` (an async function) against a fresh core."""
    dut = Rule30Accelerator(irq_num=irq_num)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def testbench(ctx):
        await body(Bus(ctx, dut))

    sim.add_testbench(testbench)
    sim.run()


def with_garbage(rng, line):
    """Input words holding ``line``, with random bits in every cell beyond its length."""
    live = ref.chars_to_words("1" * len(line))
    return [w | (rng.getrandbits(32) & ~m) for w, m in zip(ref.chars_to_words(line), live)]


# Register port ---------------------------------------------------------------------------------

def test_core_rejects_bad_irq_num():
    with pytest.raises(ValueError, match="irq_num must be an integer"):
        Rule30Accelerator(irq_num=-1)
    with pytest.raises(ValueError, match="irq_num must be an integer"):
        Rule30Accelerator(irq_num=2**32)


def test_core_registers_reset_values_and_readback():
    async def body(bus):
        # rdata is registered: it changes the cycle after re, not in the re cycle.
        bus.ctx.set(bus.dut.addr, Register.VERSION)
        bus.ctx.set(bus.dut.re, 1)
        assert bus.ctx.get(bus.dut.rdata) == 0
        await bus.tick()
        bus.ctx.set(bus.dut.re, 0)
        assert bus.ctx.get(bus.dut.rdata) == VERSION == 0x00010000
        await bus.tick()
        assert bus.ctx.get(bus.dut.rdata) == VERSION, "rdata is held until the next read"

        reset_values = {
            Register.CONTROL: 0, Register.STATUS: 0, Register.IRQ_NUM: IRQ_NUM,
            Register.RULE_SET: 30, Register.LINE_LENGTH: 0, Register.START_COMPUTE: 0,
            Register.RESET: 0, Register.LATENCY_CYCLES: 0, Register.GENERATIONS: 1,
            Register.ERRORS: 0, Register.REFUSED_STARTS: 0, Register.IGNORED_STARTS: 0,
            Register.OPERATIONS: 0, Register.BUSY_CYCLES_LO: 0, Register.BUSY_CYCLES_HI: 0,
            Register.MIN_CYCLES_PER_GENERATION: 1, Register.OVERHEAD_CYCLES: 1,
            0x148: 0, 0x1FC: 0,
        }
        for addr, value in reset_values.items():
            assert await bus.read(addr) == value, hex(addr)

        await bus.write(Register.CONTROL, 0xFFFFFFFF)
        assert await bus.read(Register.CONTROL) == CONTROL_IRQ_ENABLE | CONTROL_HWO
        await bus.write(Register.RULE_SET, 0x1234_5678)
        assert await bus.read(Register.RULE_SET) == 0x78
        for register in (Register.LINE_LENGTH, Register.GENERATIONS, Register.LATENCY_CYCLES):
            for value in (0xFFFFFFFF, 2**20, 1025):
                await bus.write(register, value)
                assert await bus.read(register) == value, register
        for register in (Register.VERSION, Register.IRQ_NUM, Register.MIN_CYCLES_PER_GENERATION,
                         Register.OPERATIONS, Register.OUTPUT):
            before = await bus.read(register)
            await bus.write(register, 0xA5A5A5A5)
            assert await bus.read(register) == before, f"{register!r} is read-only"

        # input[] reads back (extension); bits 1:0 of the address are ignored.
        for i in range(ref.WORDS):
            await bus.write(Register.INPUT + 4 * i, 0x01010101 * i ^ 0xDEADBEEF)
        for i in range(ref.WORDS):
            assert await bus.read(Register.INPUT + 4 * i + 3) == 0x01010101 * i ^ 0xDEADBEEF
        assert await bus.read_output() == [0] * ref.WORDS
        assert bus.irq_cycles == []

    simulate(body)


# Computation against the reference ---------------------------------------------------------------

def test_core_random_packets_and_rules_match_char_reference():
    rng = random.Random(2010)
    # The seed's sweeps (8..256 step 8, 10..1020 step 30) plus word-boundary cases.
    lengths = sorted(set(range(8, 257, 8)) | set(range(10, 1021, 30)) |
                     {1, 2, 31, 33, 63, 65, 127, 129, 511, 513, 1000, 1023, 1024})
    cases = []
    for length in lengths:
        rule = 30 if length % 3 == 0 else rng.randrange(256)
        cases.append((length, rule, rng.choice((1, 1, 2, 3)), random_line(rng, length)))

    async def body(bus):
        for length, rule, generations, line in cases:
            await bus.write_line(with_garbage(rng, line))
            await bus.configure(length, rule=rule, generations=generations)
            await bus.run()
            out = await bus.read_output()
            expect = ref.run_chars(line, generations, rule)
            assert ref.words_to_chars(out, length) == expect, (length, rule, generations)
            assert out == ref.chars_to_words(expect), f"cells >= {length} must read 0"
        assert await bus.read(Register.OPERATIONS) == len(cases)
        assert await bus.read(Register.ERRORS) == 0

    simulate(body)


def centre_seed(length):
    centre = length // 2
    return centre, "0" * centre + "1" + "0" * (length - centre - 1)


def test_core_centre_column_rule30_hwo_chain_matches_oeis():
    length = 255   # not a multiple of 32; wide enough that the wrap never reaches the centre
    centre, line = centre_seed(length)

    async def body(bus):
        await bus.write_line(ref.chars_to_words(line))
        await bus.configure(length, control=CONTROL_HWO)
        column = [int(line[centre])]
        for _ in range(len(A051023) - 1):
            await bus.run()
            word = await bus.read(Register.OUTPUT + 4 * (centre // 32))
            column.append((word >> (centre % 32)) & 1)
            await bus.write(Register.STATUS, STATUS_COMPLETE)
        assert column == list(A051023)
        # hwo left the last output in input[], and both are the reference's generation 101.
        expect = ref.chars_to_words(ref.run_chars(line, len(A051023) - 1))
        assert await bus.read_output() == expect
        assert [await bus.read(Register.INPUT + 4 * i) for i in range(ref.WORDS)] == expect

    simulate(body)


def test_core_centre_column_rule30_multi_generation_matches_oeis():
    length = 1024
    centre, line = centre_seed(length)

    async def body(bus):
        await bus.write_line(ref.chars_to_words(line))
        await bus.configure(length)
        column = [int(line[centre])]
        for generations in range(1, len(A051023)):
            await bus.write(Register.GENERATIONS, generations)
            start, done = await bus.run()
            assert done - start == operation_cycles(generations, 0)
            word = await bus.read(Register.OUTPUT + 4 * (centre // 32))
            column.append((word >> (centre % 32)) & 1)
        assert column == list(A051023)
        # Without hwo, input[] is untouched.
        assert [await bus.read(Register.INPUT + 4 * i) for i in range(ref.WORDS)] == ref.chars_to_words(line)

    simulate(body)


def test_core_hwo_chain_equals_multi_generation_and_reference():
    rng = random.Random(99)
    length, rule = 700, 110
    line = random_line(rng, length)
    expect = ref.chars_to_words(ref.run_chars(line, 35, rule))

    async def body(bus):
        # 5 chained starts of 7 generations each, the output latched back to the input ...
        await bus.write_line(with_garbage(rng, line))
        await bus.configure(length, rule=rule, generations=7, control=CONTROL_HWO)
        for i in range(5):
            await bus.run()
            assert await bus.read_output() == ref.chars_to_words(ref.run_chars(line, 7 * (i + 1), rule))
        assert [await bus.read(Register.INPUT + 4 * i) for i in range(ref.WORDS)] == expect
        # ... equal one start of 35 generations.
        await bus.write_line(ref.chars_to_words(line))
        await bus.configure(length, rule=rule, generations=35)
        start, done = await bus.run()
        assert done - start == operation_cycles(35, 0)
        assert await bus.read_output() == expect
        assert await bus.read(Register.OPERATIONS) == 6

    simulate(body)


# Bad starts ------------------------------------------------------------------------------------

@pytest.mark.parametrize("irq_enable", [False, True], ids=["polled", "irq"])
def test_core_bad_line_length_and_generations_refused_and_counted(irq_enable):
    control = CONTROL_IRQ_ENABLE if irq_enable else 0

    async def body(bus):
        line = "1101" * 16
        await bus.write_line(ref.chars_to_words(line))
        await bus.configure(64, control=control)
        await bus.run()
        good = await bus.read_output()
        assert good == ref.chars_to_words(ref.step_chars(line))
        await bus.write(Register.STATUS, STATUS_COMPLETE)
        bus.irq_cycles.clear()

        refused = 0
        for line_length, generations, cause in ((0, 1, ERROR_BAD_LINE_LENGTH),
                                                (1025, 1, ERROR_BAD_LINE_LENGTH),
                                                (0xFFFFFFFF, 1, ERROR_BAD_LINE_LENGTH),
                                                (64, 0, ERROR_BAD_GENERATIONS),
                                                (64, 65536, ERROR_BAD_GENERATIONS),
                                                (0, 0, ERROR_BAD_LINE_LENGTH | ERROR_BAD_GENERATIONS)):
            await bus.write(Register.LINE_LENGTH, line_length)
            await bus.write(Register.GENERATIONS, generations)
            start = await bus.write(Register.START_COMPUTE, 1)
            refused += 1
            assert not bus.ctx.get(bus.dut.busy)
            await bus.tick(3)
            assert await bus.read(Register.STATUS) == STATUS_ERROR, "refused: error, not complete"
            assert await bus.read(Register.ERRORS) == cause
            assert await bus.read(Register.REFUSED_STARTS) == refused
            assert bus.irq_cycles == ([start + 1] if irq_enable else [])
            bus.irq_cycles.clear()
            await bus.write(Register.ERRORS, cause)     # write 1 to clear, per bit
            assert await bus.read(Register.STATUS) == 0
        assert await bus.read_output() == good, "a refused start computes nothing"
        assert await bus.read(Register.OPERATIONS) == 1
        assert await bus.read64(Register.BUSY_CYCLES_LO) == 1
        assert bus.busy_cycles == 1

        # Clearing through status.error clears every cause at once.
        await bus.write(Register.LINE_LENGTH, 0)
        await bus.write(Register.GENERATIONS, 0)
        await bus.write(Register.START_COMPUTE, 1)
        assert await bus.read(Register.ERRORS) == ERROR_BAD_LINE_LENGTH | ERROR_BAD_GENERATIONS
        await bus.write(Register.STATUS, STATUS_COMPLETE)
        assert await bus.read(Register.ERRORS) != 0, "bit 0 does not clear errors"
        await bus.write(Register.STATUS, STATUS_ERROR)
        assert await bus.read(Register.ERRORS) == 0
        assert await bus.read(Register.REFUSED_STARTS) == refused + 1, "counters are not cleared"

    simulate(body)


def test_core_start_while_busy_ignored_and_counted():
    rng = random.Random(5)
    line = random_line(rng, 300)

    async def body(bus):
        await bus.write_line(ref.chars_to_words(line))
        await bus.configure(300, generations=3, latency=40, control=CONTROL_IRQ_ENABLE)
        start = await bus.write(Register.START_COMPUTE, 1)
        done = start + operation_cycles(3, 40)
        # Program another operation meanwhile and try to start it: ignored, the first goes on.
        await bus.write(Register.GENERATIONS, 9)
        await bus.write(Register.RULE_SET, 90)
        await bus.write(Register.START_COMPUTE, 1)
        await bus.tick(done - 1 - bus.cycle)
        assert bus.ctx.get(bus.dut.busy)
        await bus.write(Register.START_COMPUTE, 1)      # in the last busy cycle: still ignored
        assert bus.cycle == done and not bus.ctx.get(bus.dut.busy)
        assert bus.irq_cycles == [done]
        assert await bus.read_output() == ref.chars_to_words(ref.run_chars(line, 3))
        assert await bus.read(Register.IGNORED_STARTS) == 2
        assert await bus.read(Register.ERRORS) == ERROR_START_WHILE_BUSY
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE | STATUS_ERROR
        assert await bus.read(Register.OPERATIONS) == 1
        assert await bus.read(Register.REFUSED_STARTS) == 0

        # The parameters written while busy apply to the next start, which clears complete.
        await bus.write(Register.LATENCY_CYCLES, 0)
        await bus.write(Register.CONTROL, 0)
        start = await bus.write(Register.START_COMPUTE, 1)
        assert bus.ctx.get(bus.dut.busy)
        assert await bus.read(Register.STATUS) == STATUS_BUSY | STATUS_ERROR
        while bus.ctx.get(bus.dut.busy):
            await bus.tick()
        assert bus.cycle == start + operation_cycles(9, 0)
        await bus.write(Register.START_COMPUTE, 1)      # in the completion cycle: accepted
        assert bus.ctx.get(bus.dut.busy)
        while bus.ctx.get(bus.dut.busy):
            await bus.tick()
        assert await bus.read_output() == ref.chars_to_words(ref.run_chars(line, 9, 90))
        assert await bus.read(Register.IGNORED_STARTS) == 2
        assert await bus.read(Register.OPERATIONS) == 3

    simulate(body)


# Status, interrupt, timing, reset ----------------------------------------------------------------

def test_core_status_complete_write_one_to_clear():
    async def body(bus):
        await bus.write_line(ref.chars_to_words("1" + "0" * 99))
        await bus.configure(100)
        await bus.run()
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE
        await bus.write(Register.STATUS, 0)
        await bus.write(Register.STATUS, STATUS_ERROR | STATUS_BUSY)
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE, "only a 1 in bit 0 clears it"
        await bus.write(Register.STATUS, STATUS_COMPLETE)
        assert await bus.read(Register.STATUS) == 0
        # Set again by the next completion; an accepted start clears it.
        await bus.run()
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE
        await bus.write(Register.LATENCY_CYCLES, 10)
        await bus.write(Register.START_COMPUTE, 1)
        assert await bus.read(Register.STATUS) == STATUS_BUSY
        await bus.tick(20)
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE

    simulate(body)


def test_core_irq_pulses_only_when_enabled():
    async def body(bus):
        await bus.write_line(ref.chars_to_words("1" * 40))
        await bus.configure(40, generations=4, latency=3)
        _, done = await bus.run()
        await bus.tick(5)
        assert bus.irq_cycles == [], "no interrupt with control.irq_enable = 0"
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE, "polled completion still works"
        await bus.write(Register.STATUS, STATUS_COMPLETE)

        await bus.write(Register.CONTROL, CONTROL_IRQ_ENABLE)
        start, done = await bus.run()
        await bus.tick(5)
        assert bus.irq_cycles == [done] == [start + operation_cycles(4, 3)], "one pulse, one cycle"

        await bus.write(Register.CONTROL, CONTROL_HWO)   # disabled again (and hwo on)
        bus.irq_cycles.clear()
        await bus.run()
        await bus.tick(5)
        assert bus.irq_cycles == []

    simulate(body)


@pytest.mark.parametrize("generations,latency", [(1, 0), (1, 1), (2, 0), (3, 5), (10, 0), (4, 100),
                                                 (1, 1000), (64, 64)])
def test_core_completion_cycles_formula(generations, latency):
    cycles = operation_cycles(generations, latency)
    assert cycles == latency + generations + 1

    async def body(bus):
        await bus.write_line(ref.chars_to_words("0110" * 8))
        await bus.configure(32, generations=generations, latency=latency, control=CONTROL_IRQ_ENABLE)
        before = bus.busy_cycles
        start = await bus.write(Register.START_COMPUTE, 1)
        # A read strobed in the cycle before completion still sees busy; in the completion
        # cycle it sees complete, busy is low and irq is high.
        await bus.tick(start + cycles - 1 - bus.cycle)
        assert await bus.read(Register.STATUS) == STATUS_BUSY
        assert bus.cycle == start + cycles and bus.irq_cycles == [bus.cycle]
        assert not bus.ctx.get(bus.dut.busy)
        assert await bus.read(Register.STATUS) == STATUS_COMPLETE
        assert bus.busy_cycles - before == latency + generations
        assert await bus.read64(Register.BUSY_CYCLES_LO) == latency + generations
        assert await bus.read_output() == ref.chars_to_words(ref.run_chars("0110" * 8, generations))

    simulate(body)


def test_core_busy_cycles_accumulate_and_hi_word_is_latched():
    dut = Rule30Accelerator(irq_num=IRQ_NUM)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def testbench(ctx):
        bus = Bus(ctx, dut)
        await bus.write_line(ref.chars_to_words("1" * 8))
        await bus.configure(8, generations=5, latency=20)
        for _ in range(3):
            await bus.run()
        assert await bus.read(Register.BUSY_CYCLES_LO) == 3 * 25 == bus.busy_cycles
        assert await bus.read(Register.BUSY_CYCLES_HI) == 0
        # White box: preset the counter just below 2**32 (reaching it would take 43 s at
        # 100 MHz) to check the carry and that reading lo latches hi.
        ctx.set(dut._busy_cycles, 2**32 - 1)
        assert await bus.read(Register.BUSY_CYCLES_LO) == 2**32 - 1     # latches hi = 0
        await bus.run()                                                 # + 25: 2**32 + 24
        assert await bus.read(Register.BUSY_CYCLES_HI) == 0, "hi is the value latched with lo"
        assert await bus.read64(Register.BUSY_CYCLES_LO) == 2**32 + 24

    sim.add_testbench(testbench)
    sim.run()


def test_core_reset_register_aborts_and_restores_reset_values():
    async def body(bus):
        rng = random.Random(7)
        await bus.write_line([rng.getrandbits(32) for _ in range(ref.WORDS)])
        await bus.configure(1024, rule=90, generations=2, latency=1000,
                            control=CONTROL_IRQ_ENABLE | CONTROL_HWO)
        await bus.run()
        await bus.write(Register.LINE_LENGTH, 0)
        await bus.write(Register.START_COMPUTE, 1)       # refused: an error and a count
        await bus.write(Register.LINE_LENGTH, 1024)
        await bus.write(Register.START_COMPUTE, 1)       # accepted: running for 1000+ cycles
        await bus.tick(10)
        await bus.write(Register.START_COMPUTE, 1)       # ignored: another error and count
        assert bus.ctx.get(bus.dut.busy)
        bus.irq_cycles.clear()
        await bus.write(Register.RESET, 0)
        assert not bus.ctx.get(bus.dut.busy), "reset aborts the running operation"
        await bus.tick(1100)
        assert bus.irq_cycles == [], "the aborted operation never completes"
        expect = {
            Register.VERSION: VERSION, Register.CONTROL: 0, Register.STATUS: 0,
            Register.IRQ_NUM: IRQ_NUM, Register.RULE_SET: 30, Register.LINE_LENGTH: 0,
            Register.LATENCY_CYCLES: 0, Register.GENERATIONS: 1, Register.ERRORS: 0,
            Register.REFUSED_STARTS: 0, Register.IGNORED_STARTS: 0, Register.OPERATIONS: 0,
            Register.BUSY_CYCLES_LO: 0, Register.BUSY_CYCLES_HI: 0,
        }
        for addr, value in expect.items():
            assert await bus.read(addr) == value, repr(addr)
        assert [await bus.read(Register.INPUT + 4 * i) for i in range(ref.WORDS)] == [0] * ref.WORDS
        assert await bus.read_output() == [0] * ref.WORDS
        # And the core works normally afterwards.
        await bus.write_line(ref.chars_to_words("0" * 10 + "1" + "0" * 10))
        await bus.write(Register.LINE_LENGTH, 21)
        await bus.run()
        assert await bus.read_output() == ref.chars_to_words(ref.step_chars("0" * 10 + "1" + "0" * 10))

    simulate(body)


# Verilog ---------------------------------------------------------------------------------------

def test_verilog_conversion_has_module_and_ports(tmp_path, capsys):
    out = tmp_path / "rule30.v"
    assert convert_main([str(out), "--irq-num", "5", "--name", "tlpx_rule30"]) == 0
    text = out.read_text()
    assert text.startswith("/* Generated by Amaranth")
    assert "module tlpx_rule30(" in text
    for port in ("input [8:0] addr;", "input [31:0] wdata;", "input we;", "input re;",
                 "output [31:0] rdata;", "output irq;", "output busy;", "input clk;", "input rst;"):
        assert port in text, port
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(ValueError, match="module name must be a Verilog identifier"):
        verilog(name="bad name")
    assert convert_main([str(out), "--name", "1bad"]) == 2
