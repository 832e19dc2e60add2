"""The traffic generator driven through its CSRs, as the host driver does: GeneratorDriver.run
programs a run, waits for the generator's MSI and returns every counter."""

import functools

from tlpx_gateware.conftest import csr_map, reg
from tlpx_gateware.cores.common import PATTERN_COUNTER
from tlpx_gateware.cores.generator.core import ADDR_SEQUENTIAL, HISTOGRAM_BUCKETS
from tlpx_gateware.testing.memory import BASE, SIZE


# Register values are encoded and decoded with the card's fields (csr.json), by name.
@functools.cache
def csr():
    return csr_map()


class GeneratorDriver:
    def __init__(self, card):
        self.card = card

    def w(self, name, value):
        off = reg(f"generator.{name}")
        self.card.write32(off, value & 0xFFFFFFFF)
        if name in ("count", "duration", "base"):
            self.card.write32(off + 4, value >> 32)

    def r(self, name, words=1):
        off = reg(f"generator.{name}")
        v = 0
        for i in range(words):
            v |= self.card.read32(off + 4 * i) << (32 * i)
        return v

    def run(self, op, transfer_size=1024, count=4, request_log2=9, payload_log2=8, outstanding=32,
            pattern=ADDR_SEQUENTIAL, window=SIZE, stride_log2=12, offset=0, data=PATTERN_COUNTER, check=1,
            addr64=0, ro=0, ns=0, seed=7, idle=0, timeout=5000, duration=0, max_cycles=200000, flush=0):
        self.w("control", csr().encode("generator.control", clear=1))
        config = csr().encode("generator.config", operation=op, address_pattern=pattern, data_pattern=data, check_data=check,
                            addr64=addr64, relaxed_ordering=ro, no_snoop=ns, flush=flush)
        for name, value in [("config", config), ("transfer_size", transfer_size), ("count", count),
                            ("duration", duration), ("request_size_log2", request_log2),
                            ("payload_size_log2", payload_log2), ("idle_cycles", idle),
                            ("max_outstanding", outstanding), ("base", BASE), ("window_mask", window - 1),
                            ("stride_log2", stride_log2), ("offset", offset), ("seed", seed), ("timeout", timeout)]:
            self.w(name, value)
        # Wait for the generator's MSI rather than polling: polls would add MMIO completions
        # to the card's transmit stream.
        from tlpx_gateware.soc import MSI_SOURCES
        self.card.write32(reg("pcie_msi.enable"), 1 << MSI_SOURCES.index("generator"))
        self.card.msis.clear()
        self.w("control", csr().encode("generator.control", start=1))
        self.card.run_until(lambda: self.card.msis, timeout=max_cycles)
        self.card.write32(reg("pcie_msi.clear"), 1 << MSI_SOURCES.index("generator"))
        c = self.counters()
        assert csr().get("generator.status.done", c["status"]), "the MSI came before status.done"
        return c

    def counters(self):
        names64 = ["cycles", "transfers", "read_requests", "read_bytes", "completions", "write_requests",
                   "write_bytes", "lat_count", "lat_sum"]
        names32 = ["lat_min", "lat_max", "err_ur", "err_ca", "err_other", "err_poisoned", "err_timeouts",
                   "err_unexpected", "err_mismatches", "lat_samples_dropped"]
        c = {n: self.r(n, 2) for n in names64}
        c.update({n: self.r(n) for n in names32})
        c["status"] = self.r("status")
        level = csr().get("generator.lat_samples.level", self.r("lat_samples"))
        c["samples"] = [self.r("lat_sample") for _ in range(level)]
        hist = []
        for i in range(HISTOGRAM_BUCKETS):
            self.w("lat_hist_select", i)
            hist.append(self.r("lat_hist_count"))
        c["hist"] = hist
        return c

