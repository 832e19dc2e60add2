"""PIO target window: host-driven reads and writes, answered and measured by the card.

A memory in BAR0 that honours multi-DW accesses with their byte enables (through the request
path), delays read data by a programmable number of cycles, and counts what the host sends:
TLPs, bytes, a log2 histogram of TLP payload sizes, and the card cycles of the first and
last write. From those the card itself measures PIO write bandwidth and how the host
aggregated its stores into TLPs.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect import wishbone
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.integration.doc import ModuleDoc

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware.cores.common import Log2Histogram

MAX_READ_DELAY = 4000  # cycles; below the request path's bus timeout
SIZE_BUCKETS = 13      # log2 buckets of the size histograms: 1 B .. 4 KiB


class PIOWindow(LiteXModule):
    def __init__(self, base, size, processor, bar0_mask, cycles):
        if size & (size - 1) or size < 4096:
            raise ValueError(f"PIO window size must be a power of two >= 4096 bytes, not {size!r}")
        self.intro = ModuleDoc(f"""PIO target window.

        {size // 1024} KiB of memory at BAR0 offset 0x{base:x}. Reads wait ``read_delay``
        cycles before the data leaves. Counters cover host accesses to the window since the
        last ``control.clear``.
        """)
        self.bus = bus = wishbone.Interface(data_width=32)
        self.control = ActionStorage(fields=[
            CSRField("clear", size=1, pulse=True, description="Write 1 to zero the counters and histograms."),
        ], description="Counter control.")
        self.read_delay = CSRStorage(12, description=f"Cycles each read DW waits before it is returned (0..{MAX_READ_DELAY}).")
        self.write_tlps  = CSRStatus(64, description="Write TLPs that hit the window.")
        self.write_bytes = CSRStatus(64, description="Bytes written (enabled bytes of those TLPs).")
        self.first_write = CSRStatus(64, description="Card cycle at which the first counted write completed.")
        self.last_write  = CSRStatus(64, description="Card cycle at which the last counted write completed.")
        self.read_tlps   = CSRStatus(64, description="Read TLPs that hit the window.")
        self.read_bytes  = CSRStatus(64, description="Bytes read (enabled bytes).")
        self.write_size = Log2Histogram("write_size", 13, SIZE_BUCKETS, "write TLP payload bytes")
        self.read_size  = Log2Histogram("read_size", 13, SIZE_BUCKETS, "read TLP bytes")

        # # #

        # Memory, with the read delay in front of it.
        self.sram = sram = wishbone.SRAM(size, bus=wishbone.Interface(data_width=32))
        delay = Signal(12)
        waiting = Signal()
        setting = Signal(12)
        go = Signal()
        self.comb += [
            setting.eq(Mux(self.read_delay.storage > MAX_READ_DELAY, MAX_READ_DELAY, self.read_delay.storage)),
            # A read goes to memory at once with no delay, else after exactly `setting` cycles.
            go.eq(bus.we | Mux(waiting, delay == 0, setting == 0)),
        ]
        self.comb += [
            sram.bus.adr.eq(bus.adr), sram.bus.dat_w.eq(bus.dat_w), sram.bus.sel.eq(bus.sel),
            sram.bus.we.eq(bus.we), bus.dat_r.eq(sram.bus.dat_r), bus.ack.eq(sram.bus.ack),
            # Writes go straight in; reads once the delay has run out.
            sram.bus.cyc.eq(bus.cyc & go),
            sram.bus.stb.eq(bus.stb & go),
        ]
        self.sync += [
            If(bus.cyc & bus.stb & ~bus.we & ~go,
                If(~waiting,
                    waiting.eq(1),
                    delay.eq(setting - 1),
                ).Else(
                    delay.eq(delay - 1),
                )
            ),
            If(bus.ack, waiting.eq(0)),
        ]

        # Counters, from the request path's per-TLP events.
        offset = Signal(32)
        hit = Signal()
        self.comb += [
            offset.eq(processor.ev_addr & (~bar0_mask & 0xFFFFFFFF)),
            hit.eq((offset >= base) & (offset < base + size)),
        ]
        clear = self.control.fields.clear
        write = Signal()
        read = Signal()
        self.comb += [
            write.eq(processor.ev_write & hit),
            read.eq(processor.ev_read & hit),
            self.write_size.add.eq(write), self.write_size.value.eq(processor.ev_bytes), self.write_size.clear.eq(clear),
            self.read_size.add.eq(read), self.read_size.value.eq(processor.ev_bytes), self.read_size.clear.eq(clear),
        ]
        counters = [self.write_tlps, self.write_bytes, self.first_write, self.last_write, self.read_tlps, self.read_bytes]
        self.sync += [
            If(clear,
                *[c.status.eq(0) for c in counters],
            ).Else(
                If(write,
                    self.write_tlps.status.eq(self.write_tlps.status + 1),
                    self.write_bytes.status.eq(self.write_bytes.status + processor.ev_bytes),
                    If(self.write_tlps.status == 0, self.first_write.status.eq(cycles)),
                    self.last_write.status.eq(cycles),
                ),
                If(read,
                    self.read_tlps.status.eq(self.read_tlps.status + 1),
                    self.read_bytes.status.eq(self.read_bytes.status + processor.ev_bytes),
                ),
            )
        ]
