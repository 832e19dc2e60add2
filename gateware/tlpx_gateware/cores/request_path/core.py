"""The card's request path: every TLP the host sends to the card, answered as the spec says.

LitePCIe's endpoint drops what it does not understand (MRd64/MWr64, configuration and I/O
requests, atomics, messages) without a completion, and its BAR0 Wishbone bridge serves only
the first DW of a multi-DW access and ignores byte enables. tlpx answers every request:

```
 PHY source ─► RequestRouter ─┬─ Cpl/CplD (full width) ─────────────► LitePCIe endpoint (DMA)
                              └─ requests ─► DWSerializer ─► RequestProcessor
                                                              ├─ MRd32/MWr32: Wishbone, byte enables
                                                              └─ anything else: UR / drop, counted
 PHY sink   ◄─ Arbiter ◄─┬─ LitePCIe endpoint (DMA requests, its completions)
                         └─ DWGatherer ◄─ RequestProcessor completions (CplD, UR/CA Cpl)
```

Requests are handled one DW per cycle, which is plenty for MMIO; completions for the card's
own DMA reads keep the full datapath width.

BAR0 relocation (the accelerator slot's placement ``bar0``, cores/slot/core.py): a DUT whose
host driver expects its registers at BAR0 offset 0 gets them there, and tlpx's own map moves:

```
 BAR0 offset                        internal offset (the card's bus, csr.json)
 [0, window_bytes)             ──►  window_base + offset        (the slot window)
 [tlpx_base, BAR0 size)        ──►  offset - tlpx_base          (ident at tlpx_base + 0, ...)
 anything else                 ──►  unmapped (reads return zero, writes are skipped, counted)
```

Each request is translated once, from its first DW's offset: a memory request never crosses
a 4 KiB boundary (PCIe Base spec 2.2.7), and both boundaries are 4 KiB aligned (a window
smaller than 4 KiB ends inside a page: the DWs past it reach an internal offset outside
every mapped window and are unmapped as well). Without relocation the processor is the same
logic as before it existed.
"""

from functools import reduce
from operator import or_

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream, wishbone
from litex.soc.interconnect.csr import CSRStatus, CSRField
from litex.soc.interconnect.packet import Arbiter
from litex.soc.integration.doc import ModuleDoc

from litepcie.common import phy_layout

from tlpx_gateware import tlp

# Layouts ------------------------------------------------------------------------------------------

def dw_layout():
    return [("dat", 32)]

# DW serializer ------------------------------------------------------------------------------------

class DWSerializer(LiteXModule):
    """Turns PHY beats (`data_width` bits, 4 `be` bits per DW) into one DW per cycle.

    DWs whose byte enables are all zero (the unused tail of a last beat) are skipped, any
    enabled byte makes a DW count (a PHY may pass on a TLP's byte enables: an UltraScale
    adapter gives a 1-DW write with First BE 0010 the `be` 0010); `last` marks the final
    valid DW of the packet.
    """
    def __init__(self, data_width):
        assert data_width in (64, 128, 256, 512), f"data width must be 64..512 bits, not {data_width!r}"
        n = data_width // 32
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(dw_layout())

        # # #

        shreg     = Signal(data_width)
        valid_dws = Signal(n)  # one bit per DW still to output
        beat_last = Signal()
        first     = Signal()

        dw_valid_bits = Cat(*[sink.be[4*i:4*(i+1)] != 0 for i in range(n)])
        self.comb += [
            source.valid.eq(valid_dws[0]),
            source.dat.eq(shreg[:32]),
            source.first.eq(first),
            source.last.eq(beat_last & ~valid_dws[1] if n > 1 else beat_last),
            sink.ready.eq((valid_dws == 0) | ((valid_dws[1:] == 0) & source.ready)),
        ]
        self.sync += [
            If(source.valid & source.ready,
                shreg.eq(shreg[32:]),
                valid_dws.eq(valid_dws[1:]),
                first.eq(0),
            ),
            If(sink.valid & sink.ready,
                shreg.eq(sink.dat),
                valid_dws.eq(dw_valid_bits),
                beat_last.eq(sink.last),
                first.eq(sink.first),
            ),
        ]

# DW gatherer --------------------------------------------------------------------------------------

class DWGatherer(LiteXModule):
    """Packs one DW per cycle back into PHY beats; `be` marks the DWs in use."""
    def __init__(self, data_width):
        n = data_width // 32
        self.sink   = sink   = stream.Endpoint(dw_layout())
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        index   = Signal(max=max(n, 2))
        dat     = Signal(data_width)
        be      = Signal(data_width // 8)
        first   = Signal()
        last    = Signal()
        pending = Signal()  # a full or final beat waits in (dat, be)

        self.comb += [
            source.valid.eq(pending),
            source.dat.eq(dat),
            source.be.eq(be),
            source.first.eq(first),
            source.last.eq(last),
            sink.ready.eq(~pending | source.ready),
        ]
        dat_cases = {i: [dat[32*i:32*(i+1)].eq(sink.dat), be[4*i:4*(i+1)].eq(0xf)] for i in range(n)}
        self.sync += [
            If(source.valid & source.ready,
                pending.eq(0),
            ),
            If(sink.valid & sink.ready,
                If((index == 0),
                    # A new beat starts: clear the enables of the previous one.
                    be.eq(0xf),
                    dat[:32].eq(sink.dat),
                    first.eq(sink.first),
                ).Else(
                    Case(index, dat_cases),
                ),
                If(sink.last | (index == n - 1),
                    pending.eq(1),
                    last.eq(sink.last),
                    index.eq(0),
                ).Else(
                    index.eq(index + 1),
                ),
            ),
        ]

# Request router -----------------------------------------------------------------------------------

class RequestRouter(LiteXModule):
    """Sends completions to LitePCIe (full width) and everything else to the request processor.

    The decision is taken on DW0 of the first beat and holds for the whole packet.
    """
    def __init__(self, data_width):
        self.sink       = sink       = stream.Endpoint(phy_layout(data_width))
        self.completions = completions = stream.Endpoint(phy_layout(data_width))
        self.requests   = requests   = stream.Endpoint(phy_layout(data_width))

        # # #

        is_cpl     = Signal()
        is_cpl_reg = Signal()
        type_      = sink.dat[24:29]
        self.comb += [
            If(sink.first,
                is_cpl.eq(type_ == tlp.TYPE_CPL),
            ).Else(
                is_cpl.eq(is_cpl_reg),
            ),
            If(is_cpl,
                sink.connect(completions),
            ).Else(
                sink.connect(requests),
            ),
        ]
        self.sync += If(sink.valid & sink.ready & sink.first, is_cpl_reg.eq(is_cpl))

# Request processor --------------------------------------------------------------------------------

class RequestProcessor(LiteXModule):
    """Executes MRd32/MWr32 on a Wishbone bus and answers every other request.

    - MWr32 of any length: one Wishbone write per DW with the DW's byte enables (first_be on
      the first DW, last_be on the last, all bytes between); DWs with no enabled byte are not
      written. A poisoned write (EP=1) is dropped and counted (2.7.2.2).
    - MRd32 of 1..`max_read_dws` DWs: one Wishbone read per DW, answered by one CplD whose Byte
      Count and Lower Address follow 2.3.1.1. Longer reads get a Completer Abort, counted.
    - A DW outside every `mapped` (base, size) window of BAR0, or whose Wishbone access fails
      or does not complete within `bus_timeout` cycles, is not performed: a read returns zero
      for it, a write skips it; both are counted as bus errors.
    - The register bus has no byte lanes, so a DW with some bytes disabled is written by
      read-modify-write.
    - Any other non-posted request (MRd64, MRdLk, IO, Cfg, atomics, ...) gets a Cpl with status
      UR (2.3.1); any other posted request (MWr64, Msg, MsgD) is dropped. Both are counted.
    - A request whose payload does not match its Length field is malformed: drained and counted.
    """
    def __init__(self, completer_id, bar0_mask, mapped=((0, 1 << 20),), max_read_dws=32, bus_timeout=4095,
                 relocation=None):
        if relocation is not None:
            window_bytes, window_base, tlpx_base = relocation
            bar0_size = (~bar0_mask & 0xffffffff) + 1
            if not (0 < window_bytes <= tlpx_base < bar0_size and tlpx_base % 4096 == 0):
                raise ValueError(f"BAR0 relocation needs 0 < window_bytes ({window_bytes:#x}) <= tlpx_base "
                                 f"({tlpx_base:#x}) < the BAR's size ({bar0_size:#x}), tlpx_base 4 KiB aligned")
        bus, sink, source = self._add_ports()
        (addr_lo, attr, bus_adr, bus_sel, byte_count, byte_mask, count, dw0, dw_sel, ended,
         ep, first_be, fmt, gap, hdr_4dw, hdr_short, in_gap, in_map, internal, is_mrd32,
         is_mwr32, is_posted, last_be, length, lower, read_dat, req_id, status, tag, tc,
         timer, type_, wdata) = self._add_header_decode(
            bar0_mask, mapped, bus_timeout, relocation, bus)
        fsm, = self._add_header_states(
            max_read_dws, relocation, addr_lo, attr, bus_adr, count, dw0, ended, ep, first_be, fmt, gap, hdr_4dw,
            hdr_short, in_gap, internal, is_mrd32, is_mwr32, is_posted, last_be, length, req_id, sink, status, tag, tc,
            type_)
        self._add_write_and_drain_states(
            bus_timeout, bus, bus_adr, bus_sel, byte_mask, count, dw_sel, ended, fsm, in_map, length, sink, timer, wdata)
        self._add_completion_states(
            completer_id, bus_timeout, attr, bus, bus_adr, bus_sel, byte_count, count, dw_sel, fsm, in_map, last_be,
            length, lower, read_dat, req_id, source, status, tag, tc, timer, type_)

    def _add_ports(self):
        self.sink   = sink   = stream.Endpoint(dw_layout())  # request DWs
        self.source = source = stream.Endpoint(dw_layout())  # completion DWs
        self.bus    = bus    = wishbone.Interface(data_width=32)

        # Event pulses, counted by RequestPathCounters.
        self.ev_read         = Signal()
        self.ev_write        = Signal()
        self.ev_ur           = Signal()
        self.ev_posted_drop  = Signal()
        self.ev_cfg          = Signal()
        self.ev_mem64        = Signal()
        self.ev_poisoned     = Signal()
        self.ev_read_too_long = Signal()
        self.ev_bus_error    = Signal()
        self.ev_malformed    = Signal()
        self.last_rejected_dw0 = Signal(32)
        # With ev_read / ev_write: the request's address and its enabled byte count.
        self.ev_addr  = Signal(32)
        self.ev_bytes = Signal(13)

        # # #
        return bus, sink, source

    def _add_header_decode(self, bar0_mask, mapped, bus_timeout, relocation, bus):
        # Header fields.
        fmt      = Signal(3)
        type_    = Signal(5)
        tc       = Signal(3)
        attr     = Signal(2)
        ep       = Signal()
        length   = Signal(11)  # 1..1024 (Length 0 means 1024)
        req_id   = Signal(16)
        tag      = Signal(8)
        first_be = Signal(4)
        last_be  = Signal(4)
        addr_lo  = Signal(32)
        dw0      = Signal(32)
        hdr_4dw  = Signal()
        ended    = Signal()  # the request's last DW has been consumed
        hdr_short = Signal()  # the packet ended inside its header

        count     = Signal(11)  # DWs done
        bus_adr   = Signal(30)
        bus_sel   = Signal(4)
        timer     = Signal(max=bus_timeout + 1)
        status    = Signal(3)
        byte_count = Signal(12)
        lower     = Signal(7)
        read_dat  = Signal(32)
        wdata     = Signal(32)
        in_map    = Signal()
        byte_mask = Signal(32)
        in_windows = reduce(or_, [(Cat(C(0, 2), bus_adr) >= base) & (Cat(C(0, 2), bus_adr) < base + size)
                                  for base, size in mapped])
        # The request's internal offset (its BAR0 offset, translated with relocation) and, with
        # relocation, whether the BAR0 offset falls between the window and tlpx's map.
        offset   = Signal(32)
        internal = Signal(32)
        in_gap   = Signal()
        self.comb += offset.eq(addr_lo & (~bar0_mask & 0xffffffff))
        if relocation is None:
            self.comb += internal.eq(offset)
            map_ok = in_windows
            gap = None  # no gap without relocation
        else:
            window_bytes, window_base, tlpx_base = relocation
            gap = Signal()  # the current request's offset is in the gap (set at DISPATCH)
            self.comb += [
                in_gap.eq((offset >= window_bytes) & (offset < tlpx_base)),
                If(offset < window_bytes,
                    internal.eq(offset + window_base)
                ).Else(
                    internal.eq(offset - tlpx_base)
                ),
            ]
            map_ok = in_windows & ~gap
        self.comb += [
            # Offsets outside every mapped window never reach the bus: the register bus does
            # not decode them and would alias them onto mapped registers.
            in_map.eq(map_ok),
            byte_mask.eq(Cat(*[Replicate(bus_sel[i], 8) for i in range(4)])),
        ]

        is_mrd32 = Signal()
        is_mwr32 = Signal()
        is_posted = Signal()
        self.comb += [
            is_mrd32.eq((fmt == tlp.FMT_3DW_NO_DATA) & (type_ == tlp.TYPE_MEM)),
            is_mwr32.eq((fmt == tlp.FMT_3DW_DATA) & (type_ == tlp.TYPE_MEM)),
            # Posted: memory writes and messages (2.4.1); everything else here is non-posted.
            # Fmt 1xx (TLP prefixes) cannot be answered: treat as posted and drop.
            is_posted.eq(
                ((type_ == tlp.TYPE_MEM) & fmt[1]) |
                ((type_ & tlp.MSG_TYPE_MASK) == tlp.MSG_TYPE) |
                fmt[2]
            ),
        ]
        self.comb += tlp.byte_count_logic(length, first_be, last_be, byte_count)
        self.comb += [self.ev_addr.eq(addr_lo if relocation is None else internal), self.ev_bytes.eq(Mux(byte_count == 0, 4096, byte_count))]
        self.comb += tlp.lower_address_logic(addr_lo, first_be, lower)

        # Byte enables of DW `count` of a request.
        dw_sel = Signal(4)
        self.comb += [
            If(count == 0,
                dw_sel.eq(first_be)
            ).Elif(count == length - 1,
                dw_sel.eq(last_be)
            ).Else(
                dw_sel.eq(0xf)
            )
        ]

        self.comb += [
            bus.adr.eq(bus_adr),
            bus.sel.eq(bus_sel),
        ]
        return addr_lo, attr, bus_adr, bus_sel, byte_count, byte_mask, count, dw0, dw_sel, ended, ep, first_be, fmt, gap, hdr_4dw, hdr_short, in_gap, in_map, internal, is_mrd32, is_mwr32, is_posted, last_be, length, lower, read_dat, req_id, status, tag, tc, timer, type_, wdata

    def _add_header_states(self, max_read_dws, relocation, addr_lo, attr, bus_adr, count, dw0, ended, ep, first_be,
                           fmt, gap, hdr_4dw, hdr_short, in_gap, internal, is_mrd32, is_mwr32, is_posted, last_be,
                           length, req_id, sink, status, tag, tc, type_):
        self.fsm = fsm = FSM(reset_state="HDR0")
        fsm.act("HDR0",
            sink.ready.eq(1),
            If(sink.valid,
                NextValue(dw0, sink.dat),
                NextValue(fmt, sink.dat[29:32]),
                NextValue(type_, sink.dat[24:29]),
                NextValue(tc, sink.dat[20:23]),
                NextValue(ep, sink.dat[14]),
                NextValue(attr, sink.dat[12:14]),
                NextValue(length, Mux(sink.dat[0:10] == 0, 1024, sink.dat[0:10])),
                NextValue(hdr_4dw, sink.dat[29]),
                NextValue(ended, sink.last),
                If(sink.last,
                    self.ev_malformed.eq(1),
                ).Else(
                    NextState("HDR1")
                )
            )
        )
        fsm.act("HDR1",
            sink.ready.eq(1),
            If(sink.valid,
                NextValue(req_id, sink.dat[16:32]),
                NextValue(tag, sink.dat[8:16]),
                NextValue(last_be, sink.dat[4:8]),
                NextValue(first_be, sink.dat[0:4]),
                NextValue(ended, sink.last),
                NextState("HDR2")
            )
        )
        fsm.act("HDR2",
            # DW2: the address (3DW) or its upper half (4DW); for Cfg/IO requests other fields,
            # captured anyway: only memory requests use it.
            If(ended,
                NextValue(hdr_short, 1),
                NextState("DISPATCH")
            ).Else(
                sink.ready.eq(1),
                If(sink.valid,
                    NextValue(addr_lo, sink.dat),
                    NextValue(ended, sink.last),
                    If(hdr_4dw,
                        NextState("HDR3")
                    ).Else(
                        NextState("DISPATCH")
                    )
                )
            )
        )
        fsm.act("HDR3",
            If(ended,
                NextValue(hdr_short, 1),
                NextState("DISPATCH")
            ).Else(
                sink.ready.eq(1),
                If(sink.valid,
                    NextValue(addr_lo, sink.dat),
                    NextValue(ended, sink.last),
                    NextState("DISPATCH")
                )
            )
        )
        fsm.act("DISPATCH",
            NextValue(count, 0),
            NextValue(hdr_short, 0),
            NextValue(bus_adr, internal[2:]),
            *([NextValue(gap, in_gap)] if relocation is not None else []),
            If(hdr_short,
                self.ev_malformed.eq(1),
                NextValue(self.last_rejected_dw0, dw0),
                NextState("HDR0")
            ).Elif(is_mwr32 & ~ended & ~ep,
                NextState("WRITE-DATA")
            ).Elif(is_mwr32 & ep,
                self.ev_poisoned.eq(1),
                NextValue(self.last_rejected_dw0, dw0),
                NextState("DRAIN")
            ).Elif(is_mrd32 & ended,
                If(length > max_read_dws,
                    self.ev_read_too_long.eq(1),
                    NextValue(self.last_rejected_dw0, dw0),
                    NextValue(status, tlp.CPL_CA),
                    NextState("CPL-DW0")
                ).Else(
                    NextValue(status, tlp.CPL_SC),
                    NextState("CPL-DW0")
                )
            ).Elif((is_mwr32 | is_mrd32),
                # MWr without payload or MRd with payload: malformed (2.3.2).
                self.ev_malformed.eq(1),
                NextValue(self.last_rejected_dw0, dw0),
                NextState("DRAIN")
            ).Else(
                NextValue(self.last_rejected_dw0, dw0),
                self.ev_cfg.eq((type_ == tlp.TYPE_CFG0) | (type_ == tlp.TYPE_CFG1)),
                self.ev_mem64.eq(type_ == tlp.TYPE_MEM),
                If(is_posted,
                    self.ev_posted_drop.eq(1),
                    NextState("DRAIN")
                ).Else(
                    self.ev_ur.eq(1),
                    NextValue(status, tlp.CPL_UR),
                    If(ended,
                        NextState("CPL-DW0")
                    ).Else(
                        NextState("DRAIN-THEN-CPL")
                    )
                )
            )
        )
        return fsm,

    def _add_write_and_drain_states(self, bus_timeout, bus, bus_adr, bus_sel, byte_mask, count, dw_sel, ended, fsm,
                                    in_map, length, sink, timer, wdata):
        # Posted write data ------------------------------------------------------------------------
        fsm.act("WRITE-DATA",
            If(sink.valid,
                If(count == length,
                    # More payload than Length says (or a TLP digest): drain the rest.
                    sink.ready.eq(1),
                    If(sink.last,
                        self.ev_write.eq(1),
                        NextState("HDR0")
                    )
                ).Elif(dw_sel == 0,
                    sink.ready.eq(1),
                    NextValue(count, count + 1),
                    NextValue(bus_adr, bus_adr + 1),
                    If(sink.last,
                        self.ev_write.eq(1),
                        self.ev_malformed.eq(count + 1 != length),
                        NextState("HDR0")
                    )
                ).Else(
                    NextValue(bus_sel, dw_sel),
                    NextValue(wdata, sink.dat),
                    NextValue(timer, 0),
                    If(dw_sel == 0xf,
                        NextState("WRITE-BUS")
                    ).Else(
                        NextState("WRITE-MERGE")
                    )
                )
            )
        )
        # The register bus has no byte lanes (LiteX CSRs ignore sel): a partial DW is written
        # as read-modify-write, so the bytes the host did not enable keep their value.
        fsm.act("WRITE-MERGE",
            If(~in_map,
                NextState("WRITE-BUS")
            ).Else(
                bus.cyc.eq(1),
                bus.stb.eq(1),
                bus.we.eq(0),
                NextValue(timer, timer + 1),
                If(bus.ack,
                    NextValue(wdata, (bus.dat_r & ~byte_mask) | (wdata & byte_mask)),
                    NextValue(timer, 0),
                    NextState("WRITE-BUS")
                ).Elif(bus.err | (timer == bus_timeout),
                    NextState("WRITE-BUS")
                )
            )
        )
        write_failed = Signal()
        self.comb += write_failed.eq(~in_map | bus.err | (timer == bus_timeout))
        fsm.act("WRITE-BUS",
            bus.cyc.eq(in_map),
            bus.stb.eq(in_map),
            bus.we.eq(1),
            bus.dat_w.eq(wdata),
            NextValue(timer, timer + 1),
            If(bus.ack | write_failed,
                sink.ready.eq(1),
                NextValue(count, count + 1),
                NextValue(bus_adr, bus_adr + 1),
                If(write_failed,
                    self.ev_bus_error.eq(1),
                    If(sink.last,
                        NextState("HDR0")
                    ).Else(
                        NextState("DRAIN")
                    )
                ).Elif(sink.last,
                    self.ev_write.eq(1),
                    self.ev_malformed.eq(count + 1 != length),
                    NextState("HDR0")
                ).Else(
                    NextState("WRITE-DATA")
                )
            )
        )
        # Drain --------------------------------------------------------------------------------
        fsm.act("DRAIN",
            If(ended,
                NextState("HDR0")
            ).Else(
                sink.ready.eq(1),
                If(sink.valid & sink.last,
                    NextState("HDR0")
                )
            )
        )
        fsm.act("DRAIN-THEN-CPL",
            sink.ready.eq(1),
            If(sink.valid & sink.last,
                NextState("CPL-DW0")
            )
        )

    def _add_completion_states(self, completer_id, bus_timeout, attr, bus, bus_adr, bus_sel, byte_count, count, dw_sel,
                               fsm, in_map, last_be, length, lower, read_dat, req_id, source, status, tag, tc, timer,
                               type_):
        # Completion -------------------------------------------------------------------------------
        with_data = Signal()
        self.comb += with_data.eq(status == tlp.CPL_SC)
        cpl_byte_count = Signal(12)
        cpl_lower      = Signal(7)
        self.comb += [
            # Byte Count / Lower Address of a memory read (also in its UR/CA completion); 4 and
            # 0 for I/O, configuration and other requests (2.2.9).
            If(type_ == tlp.TYPE_MEM,
                cpl_byte_count.eq(byte_count),
                cpl_lower.eq(lower),
            ).Else(
                cpl_byte_count.eq(4),
                cpl_lower.eq(0),
            )
        ]
        fsm.act("CPL-DW0",
            source.valid.eq(1),
            source.first.eq(1),
            source.dat.eq(Cat(
                Mux(with_data, length[:10], 0),   # Length
                C(0, 2),                          # AT
                attr,                             # Attr
                C(0, 1),                          # EP
                C(0, 1),                          # TD
                C(0, 4),                          # TH, Attr[2], LN, T8
                tc,                               # TC
                C(0, 1),                          # T9
                C(tlp.TYPE_CPL, 5),               # Type
                Mux(with_data, C(tlp.FMT_3DW_DATA, 3), C(tlp.FMT_3DW_NO_DATA, 3)),  # Fmt
            )),
            If(source.ready, NextState("CPL-DW1"))
        )
        fsm.act("CPL-DW1",
            source.valid.eq(1),
            source.dat.eq(Cat(cpl_byte_count, C(0, 1), status, completer_id)),
            If(source.ready, NextState("CPL-DW2"))
        )
        fsm.act("CPL-DW2",
            source.valid.eq(1),
            source.last.eq(~with_data),
            source.dat.eq(Cat(cpl_lower, C(0, 1), tag, req_id)),
            If(source.ready,
                If(with_data,
                    NextValue(bus_sel, dw_sel),
                    NextValue(timer, 0),
                    NextState("READ-BUS")
                ).Else(
                    NextState("HDR0")
                )
            )
        )
        # A read DW with no enabled byte is still returned (as whatever the bus gives with sel=0
        # skipped: zero); the completion length was promised in DW0.
        fsm.act("READ-BUS",
            If(bus_sel == 0,
                NextValue(read_dat, 0),
                NextState("READ-DAT")
            ).Elif(~in_map,
                self.ev_bus_error.eq(1),
                NextValue(read_dat, 0),
                NextState("READ-DAT")
            ).Else(
                bus.cyc.eq(1),
                bus.stb.eq(1),
                bus.we.eq(0),
                NextValue(timer, timer + 1),
                If(bus.ack,
                    NextValue(read_dat, bus.dat_r),
                    NextState("READ-DAT")
                ).Elif(bus.err | (timer == bus_timeout),
                    # The CplD header is already out: finish it with zeros, and count. The
                    # host sees the data as all-zero rather than a hung request.
                    self.ev_bus_error.eq(1),
                    NextValue(read_dat, 0),
                    NextState("READ-DAT")
                )
            )
        )
        fsm.act("READ-DAT",
            source.valid.eq(1),
            source.dat.eq(read_dat),
            source.last.eq(count == length - 1),
            If(source.ready,
                NextValue(count, count + 1),
                NextValue(bus_adr, bus_adr + 1),
                If(count == length - 1,
                    self.ev_read.eq(1),
                    NextState("HDR0")
                ).Else(
                    NextValue(bus_sel, Mux(count + 1 == length - 1, last_be, 0xf)),
                    NextValue(timer, 0),
                    NextState("READ-BUS")
                )
            )
        )

# Counters -----------------------------------------------------------------------------------------

def add_counters(module, processor):
    """Adds the request path's counter CSRs to `module`."""
    module.intro = ModuleDoc("""Request path counters.

    Every request the host sends to the card is either executed (MRd32/MWr32 on BAR0) or
    answered as the PCIe Base spec says and counted here. Counters are 32 bits and wrap.
    """)
    events = [
        ("mem_reads",     processor.ev_read,          "Memory reads executed (MRd32 answered with CplD)."),
        ("mem_writes",    processor.ev_write,         "Memory writes executed (MWr32)."),
        ("ur_sent",       processor.ev_ur,            "Non-posted requests answered with Unsupported Request (MRd64, Cfg, IO, MRdLk, atomics, ...)."),
        ("posted_dropped", processor.ev_posted_drop,  "Unsupported posted requests dropped (MWr64, Msg, MsgD)."),
        ("cfg_requests",  processor.ev_cfg,           "Configuration requests that reached the card (answered with UR)."),
        ("mem64_requests", processor.ev_mem64,        "MRd64/MWr64 requests (BAR0 is a 32-bit BAR): UR or dropped."),
        ("poisoned",      processor.ev_poisoned,      "Poisoned (EP=1) writes dropped."),
        ("reads_too_long", processor.ev_read_too_long, "Reads longer than the card serves in one completion, answered with Completer Abort."),
        ("bus_errors",    processor.ev_bus_error,     "Register accesses that timed out or failed on the internal bus."),
        ("malformed",     processor.ev_malformed,     "Requests whose payload did not match their Length field."),
    ]
    for name, event, description in events:
        csr = CSRStatus(32, name=name, description=description)
        setattr(module, name, csr)
        module.sync += If(event, csr.status.eq(csr.status + 1))
    module.last_rejected = CSRStatus(32, description="Header DW0 of the last request that was not executed.")
    module.comb += module.last_rejected.status.eq(processor.last_rejected_dw0)

# Request path -------------------------------------------------------------------------------------

class RequestPath(LiteXModule):
    """Sits between the PHY and the LitePCIe endpoint; see the module docstring.

    `phy` is the real PHY (its source/sink are the link); `endpoint_phy` is what the LitePCIe
    endpoint is built on: its `source` carries only completions and its `sink` is merged with
    this block's completions onto the PHY. Other requesters (the generator) add their TLP
    streams in `tx_sources`; a `completion_dispatcher` (with `sink` and `other`) takes the
    completions first and passes LitePCIe's on.
    """
    def __init__(self, phy, endpoint_phy, bar0_mask, mapped=((0, 1 << 20),), max_read_dws=32,
                 tx_sources=(), completion_dispatcher=None, relocation=None, cycles=None):
        dw = phy.data_width
        self.router     = router     = RequestRouter(dw)
        self.serializer = serializer = DWSerializer(dw)
        self.processor  = processor  = RequestProcessor(phy.id, bar0_mask, mapped=mapped, max_read_dws=max_read_dws,
            relocation=relocation)
        self.gatherer   = gatherer   = DWGatherer(dw)
        self.bus        = processor.bus

        self.comb += [
            phy.source.connect(router.sink),
            router.completions.connect(completion_dispatcher.sink if completion_dispatcher else endpoint_phy.source),
            router.requests.connect(serializer.sink),
            serializer.source.connect(processor.sink),
            processor.source.connect(gatherer.sink),
        ]
        if completion_dispatcher is not None:
            self.comb += completion_dispatcher.other.connect(endpoint_phy.source)
        self.arbiter = Arbiter([endpoint_phy.sink, gatherer.source, *tx_sources], phy.sink)
        add_counters(self, processor)

        # The card's stamp of the last memory write the host sent, as it entered the request path
        # (its first beat out of the PHY): with pcie_msi.msi_cycle, the card's part of a
        # software interrupt's latency, from the trigger write at the card to the MSI request.
        if cycles is not None:
            self.last_write_cycle = CSRStatus(64, description="Card cycle (timebase) at which the last memory write request (MWr) from the host entered the card (its first beat out of the PHY).")
            req = router.requests
            dw0 = req.dat[:32]
            self.sync += If(req.valid & req.ready & req.first & dw0[30] & (dw0[24:29] == 0),
                self.last_write_cycle.status.eq(cycles))
