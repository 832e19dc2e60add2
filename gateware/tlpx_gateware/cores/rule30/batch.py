"""Rule-30 DMA batch mode: packets from a descriptor list in host memory, results back by DMA.

The seed found the per-operation driver overhead dominant; a batch removes it: the host
writes a list of packets into its memory, programs four registers and sleeps until one
interrupt says the whole batch is done.

```
 host memory: descriptor list ──MRd (tag BATCH_TAG, <= 512 B, one outstanding)──┐
                                                                                │ CplD, split at RCB
      ┌──────────────────────────── descriptor FIFO (256 DWs) ◄── DWSerializer ◄┘
      ▼
 engine FSM ── rule_set, line_length, generations, input[], start_compute ──► core register port
      │   ◄── busy ... output[] ──────────────────────────────────────────────────┘
      ▼
 result FIFO (64 DWs) ──► writer ──MWr (<= 128 B, never across 128 B)──► host memory: results
                                                                 └─► one MSI at the end of the batch
```

Descriptor list (DWs, little-endian, at ``descriptor_base``, ``descriptor_bytes`` long): one
descriptor per packet, back to back:

    header DW:  bits 10:0  line_length   cells, 1..1024
                bit  11    chain         no input words follow: the packet starts from the
                                         previous packet's output (hwo); the first packet of a
                                         batch starts from the core's input[] as it is
                bits 19:12 rule          elementary rule, bit-encoded (30 = rule 30)
                bits 31:20 generations   1..4095 generations for this packet
    input DWs:  ceil(line_length / 32) words, cell i in bit i % 32 of word i // 32 (the
                window's input[] order); none with ``chain``

A header with line_length 0 or > 1024 or generations 0 ends the batch with ``bad_descriptor``
(the rest of the list cannot be parsed); a list that ends before ``count`` packets ends it with
``list_short``. The core's ``latency_cycles`` applies to every packet.

Results (DWs at ``result_base``, back to back, one record per packet in list order):

    output DWs: ceil(line_length / 32) words, as the window's output[] (cells beyond 0)
    status DW:  bits 15:0  packet index in the batch (mod 65536)
                bits 23:16 batch sequence (``sequence``, +1 at every start; mod 256)
                bit  24    1: this record is complete
    so record k starts at result_base + 4 * sum over j < k of (ceil(line_length_j / 32) + 1).

Posted writes stay in order, and each record's status DW is written after its output DWs, so
a host that sees the status DW of record k (with this batch's sequence) sees its outputs. The
writer cuts the result stream at 128-byte boundaries (payload <= 128 bytes, the smallest MPS,
never across 4 KiB) and writes as many finished records as it has in one TLP, so records of
short packets share TLPs when the link is busy.

Descriptor reads: at most one MRd (tag BATCH_TAG) is outstanding, of at most
2^``read_request_log2`` bytes (32..512, within MRRS), ending on a boundary of that size (so
never across 4 KiB), and only when the descriptor FIFO has room for all of its data; the
completions' payload DWs are consumed in arrival order (one request's completions arrive in
address order, possibly split at RCB boundaries). An error completion (UR, CA, CRS), poisoned
data (EP) or no completion within ``read_timeout`` cycles is counted in ``errors`` and ends the
batch with ``status.error``: the engine never waits for data that will not come. Packets
already written stay valid. A completion with the batch tag while no read is outstanding (a
late answer to a timed-out read) is dropped and counted in ``unexpected``.

While a batch runs the engine owns the core: it sets ``control`` to hwo only (no per-packet
interrupt; hwo makes ``chain`` work) and restores the host's ``control`` at the end; host
writes to the window are refused and counted in ``refused_writes``, host reads still work.
The batch leaves ``rule_set``, ``line_length``, ``generations``, input[] and output[] as the
last packet left them. A batch starts once the core is idle (a host operation finishes first).

Per packet the engine spends, in card cycles: 1 (header) + one per parameter that differs
from the previous packet's (rule, line_length, generations: 0..3) + input words (none with
chain) + 3 (start, the window's input register, check) + latency_cycles + generations + output
words + 3 (the last read's data through the port, the status DW), so a packet of n words and g
generations with the same parameters as the previous one takes 2n + g + latency_cycles + 7
cycles when the descriptors and the link keep up: the core's 32-bit register port (n words in,
n out) is the bound, as it is for the host. Measured figures: test_batch_throughput.

Limits: one tag, so a completion that arrives after its read timed out (which ended that
batch) at a time when the next batch's first read is outstanding would be taken for that
read's; the default timeout, 1 ms, is far beyond any real completion time. The core's ``irq`` is not used per packet (one MSI per batch instead).
"""

from types import SimpleNamespace

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.interconnect.packet import Arbiter
from litex.soc.integration.doc import ModuleDoc

from litepcie.common import phy_layout

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware import tlp
from tlpx_gateware.cores.request_path.core import DWGatherer, dw_layout
from tlpx_gateware.cores.rule30.block import PORT_LATENCY
from tlpx_gateware.cores.rule30.core import CONTROL_HWO, Register
from tlpx_gateware.cores.rule30.reference import MAX_LINE_LENGTH, RULE30, WORD_BITS, chars_to_words
from tlpx_gateware.cores.lease import Lease

# Tag of the descriptor reads: the slot's first (rule 30 is the slot's user).
BATCH_TAG = 56
DESCRIPTOR_FIFO_DWS = 256
RESULT_FIFO_DWS = 64
MAX_WRITE_BYTES = 128
MIN_READ_REQUEST_LOG2 = 5
MAX_READ_REQUEST_LOG2 = 9

# Descriptor header fields.
LINE_LENGTH_BITS = 11
CHAIN_BIT = 11
RULE_SHIFT = 12
GENERATIONS_SHIFT = 20
MAX_BATCH_GENERATIONS = 2**12 - 1
# Result status DW.
STATUS_SEQUENCE_SHIFT = 16
STATUS_COMPLETE = 1 << 24

# status register: cause bits from bit 8.
CAUSES = [
    ("cpl_status",     "A descriptor read was answered with UR, CA or CRS."),
    ("poisoned",       "A descriptor read returned poisoned data (EP)."),
    ("timeout",        "A descriptor read was not (fully) answered within ``read_timeout`` cycles."),
    ("bad_descriptor", "A descriptor header had line_length 0 or > 1024, or generations 0."),
    ("list_short",     "The descriptor list ended before ``count`` packets."),
    ("refused",        "The core did not start a packet (cannot happen with valid descriptors)."),
    ("aborted",        "``control.abort`` ended the batch."),
]
CAUSE = {name: 1 << i for i, (name, _) in enumerate(CAUSES)}


# Formats, for the host side and the tests ---------------------------------------------------------

def words_of(line_length):
    """Input or output words of a line: ceil(line_length / 32)."""
    return (line_length + WORD_BITS - 1) // WORD_BITS


def descriptor_header(line_length, rule=RULE30, generations=1, chain=False):
    """The header DW of a descriptor (no range checks: tests also build bad ones)."""
    return ((line_length & (2**LINE_LENGTH_BITS - 1)) | (int(bool(chain)) << CHAIN_BIT)
            | ((rule & 0xFF) << RULE_SHIFT) | ((generations & MAX_BATCH_GENERATIONS) << GENERATIONS_SHIFT))


def descriptor(line, rule=RULE30, generations=1):
    """The DWs of a descriptor for ``line`` (a '0'/'1' string, one char per cell)."""
    if not 1 <= generations <= MAX_BATCH_GENERATIONS:
        raise ValueError(f"generations must be 1..{MAX_BATCH_GENERATIONS} in a batch, not {generations!r}")
    words = chars_to_words(line)[:words_of(len(line))]
    return [descriptor_header(len(line), rule, generations)] + words


def chained_descriptor(line_length, rule=RULE30, generations=1):
    """The one DW of a descriptor that continues from the previous packet's output."""
    return [descriptor_header(line_length, rule, generations, chain=True)]


def result_status(index, sequence):
    """The status DW that ends the result record of packet ``index`` of batch ``sequence``."""
    return STATUS_COMPLETE | ((sequence & 0xFF) << STATUS_SEQUENCE_SHIFT) | (index & 0xFFFF)


def record_dws(line_length):
    """DWs of one result record: the output words and the status DW."""
    return words_of(line_length) + 1


# Batch engine ---------------------------------------------------------------------------------------

class Rule30Batch(LiteXModule):
    """DMA batch engine of the rule-30 accelerator; see the module docstring.

    Parameters
    ----------
    data_width : int
        TLP datapath width in bits.
    requester_id : Signal(16)
        The card's requester ID, for the MRd/MWr headers.
    port : RegisterPort
        The core's engine port (Rule30Block.engine).
    """
    def __init__(self, data_width, requester_id, port, cycles=None, clock_hz=125e6):
        self._interface(data_width)

        # # #

        assert PORT_LATENCY == 2, "the engine's wait states are written for a 2-cycle port"
        # The engine is built in steps, one per part of the diagram above, that share their
        # signals through one namespace, `b`: each step adds what the later ones use. The steps
        # run in this order because Migen writes signals and statements into the Verilog in the
        # order they are made (and a later statement on a signal overrides an earlier one).
        b = SimpleNamespace(port=port)
        self._status(b, cycles, clock_hz)
        self._descriptor_reader(b, data_width, requester_id)
        self._completions(b)
        self._result_writer(b, data_width, requester_id)
        self._engine_registers(b)
        self._engine_load(b)
        self._engine_compute(b)
        self._reader_state(b)
        self._counters(b)
        self._busy(b)

    def _interface(self, data_width):
        """The engine's ports to the card and its registers."""
        self.intro = ModuleDoc(__doc__.split("\n\n")[0] + """

        Write the descriptor list into host memory, program ``descriptor_base``,
        ``descriptor_bytes``, ``count`` and ``result_base``, write ``control.start``; wait for
        the ``slot`` MSI (with ``config.irq``) or poll ``status.done``. Each packet's result
        record (output words, then a status DW) is in host memory at ``result_base``, in list
        order. Formats: see gateware/tlpx_gateware/cores/rule30/batch.py.

        A batch is a lease (``lease_*``, cores/lease.py): when it expires or is released,
        the running batch ends as by ``control.abort``.
        """)
        self.source   = stream.Endpoint(phy_layout(data_width))  # MRd and MWr TLPs
        # Completions with BATCH_TAG, one DW per cycle (a DWSerializer in front, in the card's
        # domain): always taken, so the engine can see them a cycle late (cores/isolate.py).
        self.cpl_dws  = stream.Endpoint(dw_layout())
        self.tx_idle  = Signal(reset=1)  # in: every TLP sent has left the card (TxBoundary.idle)
        self.irq      = Signal()  # one-cycle pulse at the end of a batch (config.irq)
        self.active   = Signal()  # a batch runs: the window refuses host writes
        self.refused_write = Signal()  # in: pulse from the window, counted here

        self.control = ActionStorage(fields=[
            CSRField("start", size=1, pulse=True, description="Write 1 to start a batch (ignored while one runs)."),
            CSRField("abort", size=1, pulse=True, description="Write 1 to end the running batch early (``status.aborted``): a packet being loaded or computed is dropped (the core finishes computing it), one whose result is being queued is written."),
            CSRField("clear", size=1, pulse=True, description="Write 1 to zero ``errors``, ``batches``, ``unexpected`` and ``refused_writes``."),
        ], description="Batch control.")
        self.config = CSRStorage(fields=[
            CSRField("irq", size=1, reset=1, description="Raise the ``slot`` MSI (rule 30 is in the accelerator slot) once at the end of each batch (also one that ends in error)."),
        ], description="Batch configuration.")
        self.descriptor_base = CSRStorage(64, description="Bus address of the descriptor list (DW aligned; bits 1:0 ignored).")
        self.descriptor_bytes = CSRStorage(24, description="Bytes of the descriptor list (a multiple of 4; bits 1:0 ignored). The engine reads no further.")
        self.count = CSRStorage(32, description="Packets in the batch (0: the batch ends at once).")
        self.result_base = CSRStorage(64, description="Bus address (DW aligned) where the result records are written, back to back.")
        self.read_request_log2 = CSRStorage(4, reset=MAX_READ_REQUEST_LOG2,
            description=f"log2 of the largest descriptor read request in bytes, {MIN_READ_REQUEST_LOG2}..{MAX_READ_REQUEST_LOG2} (other values are clamped); keep it <= the link's MRRS.")
        self.read_timeout = CSRStorage(32, reset=125000, description="Cycles to wait for a descriptor read's completions before ending the batch with ``timeout``.")
        self.status = CSRStatus(fields=[
            CSRField("running", size=1, offset=0, description="A batch runs."),
            CSRField("done",    size=1, offset=1, description="The last batch has ended (its writes have left the card)."),
            CSRField("error",   size=1, offset=2, description="The last batch ended early: see the cause bits."),
        ] + [CSRField(name, size=1, offset=8 + i, description=desc) for i, (name, desc) in enumerate(CAUSES)],
            description="Batch status; the cause bits are those of the current or last batch.")
        self.sequence = CSRStatus(8, description="Sequence number of the current or last batch (bits 23:16 of its result status DWs); +1 at every start.")
        self.packets_done = CSRStatus(32, description="Packets of the current or last batch whose result record has been queued for writing.")
        self.batch_cycles = CSRStatus(64, description="Card cycles of the current or last batch, from the start write to the end (interrupt).")
        self.busy_cycles = CSRStatus(64, description="Cycles in which the core computed (``busy``) for the current or last batch (latency_cycles and generations of its packets).")
        self.errors = CSRStatus(32, description="Error events since ``control.clear``: error or poisoned completions, read timeouts, bad descriptors, short lists.")
        self.batches = CSRStatus(32, description="Batches ended since ``control.clear``.")
        self.unexpected = CSRStatus(32, description="Completions with the batch's tag while no read was outstanding (dropped).")
        self.refused_writes = CSRStatus(32, description="Host writes to the rule-30 window refused: while a batch ran, or with some bytes disabled.")

    def _status(self, b, cycles, clock_hz):
        """The lease, the control fields and the batch's status: running, done, causes."""
        start = self.control.fields.start
        self.lease = Lease(cycles if cycles is not None else Signal(64), clock_hz)
        abort = self.control.fields.abort | self.lease.stop
        clear = self.control.fields.clear

        # The Verilog names of `causes` and `add_cause` are those Migen's tracer (Python 3.11)
        # gave them when the engine was one function, where it misnamed the variables that a
        # closure captured: `name=` keeps them, so the split left the Verilog unchanged.
        causes   = Signal(len(CAUSES), name="add_cause")
        running  = Signal()
        done     = Signal()
        sequence = Signal(8)
        self.comb += [
            self.active.eq(running),
            self.status.fields.running.eq(running),
            self.status.fields.done.eq(done),
            self.status.fields.error.eq(causes != 0),
            *[getattr(self.status.fields, name).eq(causes[i]) for i, (name, _) in enumerate(CAUSES)],
            self.sequence.status.eq(sequence),
        ]
        add_cause = Signal(len(CAUSES), name="self")  # cause bits raised this cycle: by the engine ...
        rd_cause  = Signal(len(CAUSES))  # ... and by the descriptor reader
        error_event = Signal()           # one error event this cycle (counted)
        b.start, b.abort, b.clear, b.causes, b.running = start, abort, clear, causes, running
        b.done, b.sequence, b.add_cause, b.rd_cause = done, sequence, add_cause, rd_cause
        b.error_event = error_event

    def _descriptor_reader(self, b, data_width, requester_id):
        """Descriptor reads: one MRd at a time while the descriptor FIFO has room for its data."""
        self.desc_fifo = desc_fifo = ResetInserter()(stream.SyncFIFO([("data", 32)], DESCRIPTOR_FIFO_DWS))
        fetching       = Signal()     # reads may be issued
        rd_addr        = Signal(64)
        rd_left        = Signal(24)   # bytes of the list not yet requested
        rd_outstanding = Signal()
        rd_timer       = Signal(32)
        rd_fail        = Signal()     # a read failed: the batch ends
        rd_log2        = Signal(4)
        rd_max         = Signal(11)
        rd_room        = Signal(11)
        rd_bytes       = Signal(11)
        rd_dws         = Signal(9)
        rd_hdr4        = Signal()
        cfg_log2 = self.read_request_log2.storage
        self.comb += [
            rd_log2.eq(Mux(cfg_log2 < MIN_READ_REQUEST_LOG2, MIN_READ_REQUEST_LOG2,
                       Mux(cfg_log2 > MAX_READ_REQUEST_LOG2, MAX_READ_REQUEST_LOG2, cfg_log2))),
            rd_max.eq(1 << rd_log2),
            rd_room.eq(rd_max - (rd_addr[:11] & (rd_max - 1))),
            rd_bytes.eq(Mux(rd_left < rd_room, rd_left, rd_room)),
            rd_dws.eq(rd_bytes[2:]),
            rd_hdr4.eq(rd_addr[32:] != 0),
        ]
        self.rd_gatherer = rd_gatherer = DWGatherer(data_width)
        rd_len  = Signal(9)
        rd_req  = Signal(64)  # address of the request being emitted
        rd_idx  = Signal(2)
        rd_last = Signal(2)
        rd_hdr_latched = Signal()
        self.comb += rd_last.eq(Mux(rd_hdr_latched, 3, 2))
        rd_dw = Array([
            Cat(rd_len, C(0, 1), C(0, 14), C(tlp.TYPE_MEM, 5), rd_hdr_latched, C(0, 1), C(0, 1)),
            Cat(C(0xF, 4), Mux(rd_len == 1, C(0, 4), C(0xF, 4)), C(BATCH_TAG, 8), requester_id),
            Mux(rd_hdr_latched, rd_req[32:], Cat(C(0, 2), rd_req[2:32])),
            Cat(C(0, 2), rd_req[2:32]),
        ])
        list_exhausted = Signal()  # every byte of the list has arrived (or failed)
        rd_can_issue = Signal()
        rd_fill = Signal(max=2 * DESCRIPTOR_FIFO_DWS + 1)  # sized: a Verilog compare would wrap the sum
        self.comb += [
            rd_fill.eq(desc_fifo.level + rd_dws),
            rd_can_issue.eq(fetching & ~rd_outstanding & ~rd_fail & (rd_left != 0) &
                            (rd_fill <= DESCRIPTOR_FIFO_DWS)),
        ]
        self.rd_fsm = rd_fsm = FSM(reset_state="IDLE")
        rd_fsm.act("IDLE",
            If(rd_can_issue,
                NextValue(rd_len, rd_dws),
                NextValue(rd_req, rd_addr),
                NextValue(rd_hdr_latched, rd_hdr4),
                NextValue(rd_idx, 0),
                NextState("EMIT")
            )
        )
        rd_fsm.act("EMIT",
            rd_gatherer.sink.valid.eq(1),
            rd_gatherer.sink.first.eq(rd_idx == 0),
            rd_gatherer.sink.last.eq(rd_idx == rd_last),
            rd_gatherer.sink.dat.eq(rd_dw[rd_idx]),
            If(rd_gatherer.sink.ready,
                NextValue(rd_idx, rd_idx + 1),
                If(rd_idx == rd_last, NextState("IDLE"))
            )
        )
        self.comb += list_exhausted.eq((rd_left == 0) & ~rd_outstanding & rd_fsm.ongoing("IDLE"))
        b.fetching, b.rd_addr, b.rd_left = fetching, rd_addr, rd_left
        b.rd_outstanding, b.rd_timer, b.rd_fail = rd_outstanding, rd_timer, rd_fail
        b.rd_dws, b.rd_can_issue, b.list_exhausted = rd_dws, rd_can_issue, list_exhausted

    def _completions(self, b):
        """Completions: one DW per cycle, header then payload into the descriptor FIFO."""
        desc_fifo = self.desc_fifo
        cpl = self.cpl_dws
        self.comb += cpl.ready.eq(1)
        c_idx        = Signal(2)   # 0: DW0 next; 1: DW1; 2: DW2; 3: payload
        c_ep         = Signal()
        c_has_data   = Signal()
        c_len        = Signal(10)
        c_status     = Signal(3)
        c_byte_count = Signal(12)
        c_unexp_reg  = Signal()
        c_unexp      = Signal()    # this completion was not expected (no read outstanding)
        c_good       = Signal()    # successful, not poisoned, with data
        c_final      = Signal()    # the last completion of its request
        self.comb += [
            c_unexp.eq(Mux(cpl.first, ~b.rd_outstanding, c_unexp_reg)),
            c_good.eq((c_status == tlp.CPL_SC) & ~c_ep & c_has_data),
            c_final.eq((c_status != tlp.CPL_SC) | (c_byte_count <= Cat(C(0, 2), c_len))),
            desc_fifo.sink.valid.eq(cpl.valid & ~cpl.first & (c_idx == 3) & ~c_unexp & c_good & ~b.rd_fail),
            desc_fifo.sink.data.eq(cpl.dat),
        ]
        cpl_end = Signal()
        self.comb += cpl_end.eq(cpl.valid & cpl.last & ~cpl.first)
        self.sync += [
            If(cpl.valid,
                If(cpl.first,
                    c_idx.eq(1),
                    c_ep.eq(cpl.dat[14]),
                    c_has_data.eq(cpl.dat[30]),
                    c_len.eq(cpl.dat[0:10]),
                    c_unexp_reg.eq(~b.rd_outstanding),
                ).Elif(c_idx == 1,
                    c_status.eq(cpl.dat[13:16]),
                    c_byte_count.eq(cpl.dat[0:12]),
                    c_idx.eq(2),
                ).Elif(c_idx == 2,
                    c_idx.eq(3),
                )
            ),
        ]
        rd_error = Signal()     # a bad completion of the outstanding read ends now
        rd_timed_out = Signal()
        self.comb += [
            # One error per failed read (the siblings of a bad split completion are not counted).
            rd_error.eq(cpl_end & ~c_unexp & ~c_good & ~b.rd_fail),
            rd_timed_out.eq(b.rd_outstanding & (b.rd_timer >= self.read_timeout.storage)),
        ]
        b.c_status, b.c_has_data, b.c_unexp, b.c_final = c_status, c_has_data, c_unexp, c_final
        b.cpl_end, b.rd_error, b.rd_timed_out = cpl_end, rd_error, rd_timed_out

    def _result_writer(self, b, data_width, requester_id):
        """Result writer: MWrs of the finished records (``committed`` DWs) from the result FIFO."""
        self.res_fifo = res_fifo = ResetInserter()(stream.SyncFIFO([("data", 32)], RESULT_FIFO_DWS))
        self.wr_gatherer = wr_gatherer = DWGatherer(data_width)
        committed  = Signal(max=RESULT_FIFO_DWS + 1)  # DWs of finished records not yet claimed
        commit_add = Signal(max=RESULT_FIFO_DWS + 1)
        commit_sub = Signal(max=RESULT_FIFO_DWS + 1)
        wr_addr = Signal(64)
        wr_len  = Signal(6)   # 1..32 DWs
        wr_idx  = Signal(6)
        wr_hdr4 = Signal()
        wr_room = Signal(6)   # DWs to the next 128-byte boundary
        wr_take = Signal(6)
        wr_last = Signal(2)
        self.comb += [
            wr_room.eq(MAX_WRITE_BYTES // 4 - wr_addr[2:7]),
            wr_take.eq(Mux(committed < wr_room, committed, wr_room)),
            wr_last.eq(Mux(wr_hdr4, 3, 2)),
        ]
        wr_dw = Array([
            Cat(wr_len, C(0, 4), C(0, 14), C(tlp.TYPE_MEM, 5), wr_hdr4, C(1, 1), C(0, 1)),
            # The batch's tag in its posted writes too: the spy attributes the results to it.
            Cat(C(0xF, 4), Mux(wr_len == 1, C(0, 4), C(0xF, 4)), C(BATCH_TAG, 8), requester_id),
            Mux(wr_hdr4, wr_addr[32:], Cat(C(0, 2), wr_addr[2:32])),
            Cat(C(0, 2), wr_addr[2:32]),
        ])
        self.wr_fsm = wr_fsm = FSM(reset_state="IDLE")
        wr_fsm.act("IDLE",
            If(committed != 0,
                commit_sub.eq(wr_take),
                NextValue(wr_len, wr_take),
                NextValue(wr_hdr4, wr_addr[32:] != 0),
                NextValue(wr_idx, 0),
                NextState("HEADER")
            )
        )
        wr_fsm.act("HEADER",
            wr_gatherer.sink.valid.eq(1),
            wr_gatherer.sink.first.eq(wr_idx == 0),
            wr_gatherer.sink.dat.eq(wr_dw[wr_idx[:2]]),
            If(wr_gatherer.sink.ready,
                NextValue(wr_idx, wr_idx + 1),
                If(wr_idx == wr_last,
                    NextValue(wr_idx, 0),
                    NextState("DATA")
                )
            )
        )
        wr_fsm.act("DATA",
            wr_gatherer.sink.valid.eq(res_fifo.source.valid),
            wr_gatherer.sink.last.eq(wr_idx == wr_len - 1),
            wr_gatherer.sink.dat.eq(res_fifo.source.data),
            res_fifo.source.ready.eq(wr_gatherer.sink.ready),
            If(res_fifo.source.valid & wr_gatherer.sink.ready,
                NextValue(wr_idx, wr_idx + 1),
                If(wr_idx == wr_len - 1,
                    NextValue(wr_addr, wr_addr + Cat(C(0, 2), wr_len)),
                    NextState("IDLE")
                )
            )
        )
        self.sync += committed.eq(committed + commit_add - commit_sub)
        self.arbiter = Arbiter([self.rd_gatherer.source, wr_gatherer.source], self.source)
        b.committed, b.commit_add, b.wr_addr = committed, commit_add, wr_addr

    def _engine_registers(self, b):
        """The engine's registers and the decoded descriptor header at the descriptor FIFO's head."""
        pkt        = Signal(32)
        line_len   = Signal(11)
        chain      = Signal()
        rule       = Signal(8)
        gens       = Signal(12)
        nwords     = Signal(6)   # 1..32 words of the line
        widx       = Signal(6)
        dirty        = Signal(3)  # parameters to write: rule_set, line_length, generations
        params_known = Signal()   # the core holds rule, line_len and gens (written this batch)
        saved_ctl  = Signal(32)
        saved      = Signal()
        out_pend   = Signal(PORT_LATENCY)  # output reads in flight; bit -1: rdata is valid now
        out_re     = Signal()
        hdr = self.desc_fifo.source.data
        hdr_len   = hdr[0:LINE_LENGTH_BITS]
        hdr_gens  = hdr[GENERATIONS_SHIFT:32]
        hdr_chain = hdr[CHAIN_BIT]
        hdr_rule  = hdr[RULE_SHIFT:RULE_SHIFT + 8]
        hdr_bad   = Signal()
        hdr_dirty = Signal(3)
        self.comb += [
            hdr_bad.eq((hdr_len == 0) | (hdr_len > MAX_LINE_LENGTH) | (hdr_gens == 0)),
            hdr_dirty.eq(Cat(~params_known | (hdr_rule != rule),
                             ~params_known | (hdr_len != line_len),
                             ~params_known | (hdr_gens != gens))),
        ]
        # Word addresses through sized signals: inside a Verilog concatenation a sum keeps only
        # the width of its widest operand, so Cat(C(0, 2), widx + 8) would wrap at 32.
        input_addr  = Signal(9)
        output_addr = Signal(9)
        self.comb += [
            input_addr.eq(int(Register.INPUT) + Cat(C(0, 2), widx[:5])),
            output_addr.eq(int(Register.OUTPUT) + Cat(C(0, 2), widx[:5])),
        ]
        end_with = lambda cause: [b.add_cause.eq(CAUSE[cause]), NextState("END")]
        status_dw = Cat(pkt[:16], b.sequence, C(1, 1), C(0, 7))
        b.pkt, b.line_len, b.chain, b.rule, b.gens = pkt, line_len, chain, rule, gens
        b.nwords, b.widx, b.dirty, b.params_known = nwords, widx, dirty, params_known
        b.saved_ctl, b.saved, b.out_pend, b.out_re = saved_ctl, saved, out_pend, out_re
        b.hdr_len, b.hdr_gens, b.hdr_chain, b.hdr_rule = hdr_len, hdr_gens, hdr_chain, hdr_rule
        b.hdr_bad, b.hdr_dirty, b.input_addr = hdr_bad, hdr_dirty, input_addr
        b.output_addr, b.end_with, b.status_dw = output_addr, end_with, status_dw

    def _engine_load(self, b):
        """The engine's first states: start, take the core, load a packet (header, parameters, input)."""
        port, desc_fifo = b.port, self.desc_fifo
        self.fsm = fsm = FSM(reset_state="IDLE")
        fsm.act("IDLE",
            If(b.start,
                NextValue(b.pkt, 0),
                NextValue(b.sequence, b.sequence + 1),
                NextValue(b.done, 0),
                NextValue(b.saved, 0),
                NextValue(b.params_known, 0),
                NextValue(b.fetching, 1),
                NextValue(b.rd_addr, Cat(C(0, 2), self.descriptor_base.storage[2:])),
                NextValue(b.rd_left, Cat(C(0, 2), self.descriptor_bytes.storage[2:])),
                NextValue(b.rd_fail, 0),
                NextValue(b.wr_addr, Cat(C(0, 2), self.result_base.storage[2:])),
                NextState("WAIT-CORE")
            )
        )
        fsm.act("WAIT-CORE",
            If(b.abort,
                *b.end_with("aborted")
            ).Elif(~port.busy & ~port.pending,
                port.re.eq(1),
                port.addr.eq(int(Register.CONTROL)),
                NextState("SAVE-WAIT")
            )
        )
        fsm.act("SAVE-WAIT", NextState("SAVE-CONTROL"))  # rdata: PORT_LATENCY cycles after re
        fsm.act("SAVE-CONTROL",
            NextValue(b.saved_ctl, port.rdata),
            NextValue(b.saved, 1),
            port.we.eq(1),
            port.addr.eq(int(Register.CONTROL)),
            port.wdata.eq(CONTROL_HWO),
            NextState("HEADER")
        )
        fsm.act("HEADER",
            If(b.abort,
                *b.end_with("aborted")
            ).Elif(b.rd_fail,
                NextState("END")
            ).Elif(b.pkt == self.count.storage,
                NextState("END")
            ).Elif(desc_fifo.source.valid,
                desc_fifo.source.ready.eq(1),
                NextValue(b.line_len, b.hdr_len),
                NextValue(b.chain, b.hdr_chain),
                NextValue(b.rule, b.hdr_rule),
                NextValue(b.gens, b.hdr_gens),
                NextValue(b.nwords, (b.hdr_len + WORD_BITS - 1)[5:11]),
                NextValue(b.dirty, b.hdr_dirty),
                NextValue(b.widx, 0),
                If(b.hdr_bad,
                    b.error_event.eq(1),
                    *b.end_with("bad_descriptor")
                ).Elif(b.hdr_dirty != 0,
                    NextState("PARAMETERS")
                ).Elif(b.hdr_chain,
                    NextState("START")
                ).Else(
                    NextState("INPUT")
                )
            ).Elif(b.list_exhausted,
                b.error_event.eq(1),
                *b.end_with("list_short")
            )
        )
        # Only the parameters that differ from the previous packet's are written (one cycle each).
        dirty_left = Signal(3)
        self.comb += dirty_left.eq(b.dirty & (b.dirty - 1))  # the lowest dirty one is written now
        fsm.act("PARAMETERS",
            port.we.eq(1),
            If(b.dirty[0],
                port.addr.eq(int(Register.RULE_SET)), port.wdata.eq(b.rule),
            ).Elif(b.dirty[1],
                port.addr.eq(int(Register.LINE_LENGTH)), port.wdata.eq(b.line_len),
            ).Else(
                port.addr.eq(int(Register.GENERATIONS)), port.wdata.eq(b.gens),
            ),
            NextValue(b.dirty, dirty_left),
            If(dirty_left == 0,
                NextValue(b.params_known, 1),
                If(b.chain,
                    NextState("START")
                ).Else(
                    NextState("INPUT")
                )
            )
        )
        fsm.act("INPUT",
            If(b.abort,
                *b.end_with("aborted")
            ).Elif(b.rd_fail,
                NextState("END")
            ).Elif(desc_fifo.source.valid,
                desc_fifo.source.ready.eq(1),
                port.we.eq(1),
                port.addr.eq(b.input_addr),
                port.wdata.eq(desc_fifo.source.data),
                NextValue(b.widx, b.widx + 1),
                If(b.widx == b.nwords - 1,
                    NextState("START")
                )
            ).Elif(b.list_exhausted,
                b.error_event.eq(1),
                *b.end_with("list_short")
            )
        )

    def _engine_compute(self, b):
        """The engine's last states: compute, results into the result FIFO, end of the batch."""
        port, fsm, res_fifo = b.port, self.fsm, self.res_fifo
        fsm.act("START",
            port.we.eq(1),
            port.addr.eq(int(Register.START_COMPUTE)),
            NextValue(b.widx, 0),
            NextState("START-WAIT")
        )
        fsm.act("START-WAIT", NextState("CHECK"))
        fsm.act("CHECK",
            # busy rises PORT_LATENCY cycles after the write of an accepted start.
            If(~port.busy,
                b.error_event.eq(1),
                *b.end_with("refused")
            ).Else(
                NextState("COMPUTE")
            )
        )
        fsm.act("COMPUTE",
            If(b.abort,
                *b.end_with("aborted")
            ).Elif(~port.busy,
                NextState("OUTPUT")
            )
        )
        # Output words into the result FIFO: a read per cycle while the FIFO has room for it
        # and for the reads still in flight (out_pend: one bit per cycle of the port's latency).
        res_fill = Signal(max=RESULT_FIFO_DWS + PORT_LATENCY + 1)
        self.comb += res_fill.eq(res_fifo.level + b.out_pend[0] + b.out_pend[1])
        fsm.act("OUTPUT",
            If((b.widx != b.nwords) & (res_fill < RESULT_FIFO_DWS),
                b.out_re.eq(1),
                port.re.eq(1),
                port.addr.eq(b.output_addr),
                NextValue(b.widx, b.widx + 1),
            ).Elif((b.widx == b.nwords) & ~b.out_pend[0],
                # The last word's data arrives in this cycle (out_pend[-1]); the status DW follows.
                NextState("STATUS")
            )
        )
        fsm.act("STATUS",
            res_fifo.sink.valid.eq(1),
            res_fifo.sink.data.eq(b.status_dw),
            If(res_fifo.sink.ready,
                b.commit_add.eq(b.nwords + 1),
                NextValue(b.pkt, b.pkt + 1),
                NextState("HEADER")
            )
        )
        self.comb += If(b.out_pend[-1],
            res_fifo.sink.valid.eq(1),
            res_fifo.sink.data.eq(port.rdata),
        )
        self.sync += b.out_pend.eq(Cat(b.out_re, b.out_pend[:-1]))
        fsm.act("END",
            NextValue(b.fetching, 0),
            If(b.saved,
                port.we.eq(1),
                port.addr.eq(int(Register.CONTROL)),
                port.wdata.eq(b.saved_ctl),
            ),
            NextState("DRAIN")
        )
        # The batch ends when no read is outstanding (no stray completion later) and every
        # result has left the card, so the interrupt follows the last write.
        batch_end = Signal()
        fsm.act("DRAIN",
            If(~b.rd_outstanding & self.rd_fsm.ongoing("IDLE") & ~self.rd_gatherer.source.valid &
               (b.committed == 0) & self.wr_fsm.ongoing("IDLE") & ~self.wr_gatherer.source.valid & ~self.source.valid &
               self.tx_idle,
                batch_end.eq(1),
                self.irq.eq(self.config.fields.irq),
                NextValue(b.done, 1),
                NextState("IDLE")
            )
        )
        self.comb += [
            b.running.eq(~fsm.ongoing("IDLE")),
            self.desc_fifo.reset.eq(b.start & ~b.running),
            res_fifo.reset.eq(b.start & ~b.running),
        ]
        b.batch_end = batch_end

    def _reader_state(self, b):
        """The descriptor reader's state: requests, completions, failures."""
        self.sync += [
            If(self.rd_fsm.ongoing("IDLE") & b.rd_can_issue,
                b.rd_outstanding.eq(1),
                b.rd_timer.eq(0),
                b.rd_addr.eq(b.rd_addr + Cat(C(0, 2), b.rd_dws)),
                b.rd_left.eq(b.rd_left - Cat(C(0, 2), b.rd_dws)),
            ).Elif(b.rd_outstanding,
                b.rd_timer.eq(b.rd_timer + 1),
                If(b.rd_timed_out,
                    b.rd_outstanding.eq(0),
                ).Elif(b.cpl_end & ~b.c_unexp & b.c_final,
                    # Also after an error: the request's other completions (the rest of a
                    # poisoned split read) are still its own, absorbed rather than unexpected.
                    b.rd_outstanding.eq(0),
                )
            ),
            If(b.rd_timed_out | b.rd_error, b.rd_fail.eq(1)),
        ]
        self.comb += [
            If(b.rd_timed_out & ~b.rd_fail, b.rd_cause.eq(CAUSE["timeout"])),
            If(b.rd_error,
                If((b.c_status != tlp.CPL_SC) | ~b.c_has_data,
                    b.rd_cause.eq(CAUSE["cpl_status"])
                ).Else(
                    b.rd_cause.eq(CAUSE["poisoned"])
                )
            ),
        ]

    def _counters(self, b):
        """The status's cause bits and the counters."""
        read_fault = Signal()
        self.comb += read_fault.eq((b.rd_timed_out | b.rd_error) & ~b.rd_fail)
        cumulative = [self.errors, self.batches, self.unexpected, self.refused_writes]
        self.sync += [
            b.causes.eq(Mux(b.start & ~b.running, 0, b.causes | b.add_cause | b.rd_cause)),
            If(b.clear,
                *[c.status.eq(0) for c in cumulative],
            ).Else(
                If(b.error_event | read_fault, self.errors.status.eq(self.errors.status + 1)),
                If(b.batch_end, self.batches.status.eq(self.batches.status + 1)),
                If(b.cpl_end & b.c_unexp, self.unexpected.status.eq(self.unexpected.status + 1)),
                If(self.refused_write, self.refused_writes.status.eq(self.refused_writes.status + 1)),
            ),
            If(b.start & ~b.running,
                self.packets_done.status.eq(0),
                self.batch_cycles.status.eq(0),
                self.busy_cycles.status.eq(0),
            ).Elif(b.running,
                self.batch_cycles.status.eq(self.batch_cycles.status + 1),
                # From the engine's first write on (not a host operation it waited for).
                If(b.port.busy & b.saved, self.busy_cycles.status.eq(self.busy_cycles.status + 1)),
                If(b.commit_add != 0, self.packets_done.status.eq(self.packets_done.status + 1)),
            ),
        ]

    def _busy(self, b):
        """Busy: every state in which a register of the engine can change without a CSR access,
        a completion DW or a refused host write (cores/isolate.py gates the engine on it)."""
        self.busy = Signal()
        self.comb += self.busy.eq(b.running | self.lease.held | (b.out_pend != 0) | b.rd_outstanding |
            ~self.rd_fsm.ongoing("IDLE") | ~self.wr_fsm.ongoing("IDLE") | (b.committed != 0) |
            self.rd_gatherer.source.valid | self.wr_gatherer.source.valid | self.source.valid)
