"""Python driver of the Verilated card through the C ABI of tlpx_card.h (ctypes).

Used by the gateware tests: a small behavioural root complex that sends TLPs beat by beat
and collects what the card sends back. tlpx-sim is the full root complex; this one is only
enough to test the card's blocks from Python.
"""

import ctypes
import json
from pathlib import Path

from tlpx_gateware import tlp

MAX_DWORDS = 8


class CardInputs(ctypes.Structure):
    _fields_ = [
        ("rx_dat", ctypes.c_uint32 * MAX_DWORDS),
        ("rx_be", ctypes.c_uint32),
        ("rx_valid", ctypes.c_uint8),
        ("rx_first", ctypes.c_uint8),
        ("rx_last", ctypes.c_uint8),
        ("tx_ready", ctypes.c_uint8),
        ("msi_ready", ctypes.c_uint8),
        ("cfg_bus_master_enable", ctypes.c_uint8),
        ("cfg_msi_enable", ctypes.c_uint8),
        ("cfg_msi_multiple_enable", ctypes.c_uint8),
        ("cfg_requester_id", ctypes.c_uint16),
        ("cfg_max_payload_size", ctypes.c_uint16),
        ("cfg_max_request_size", ctypes.c_uint16),
        ("cfg_msix_enable", ctypes.c_uint8),
        ("cfg_msix_function_mask", ctypes.c_uint8),
    ]


class CardOutputs(ctypes.Structure):
    _fields_ = [
        ("tx_dat", ctypes.c_uint32 * MAX_DWORDS),
        ("tx_be", ctypes.c_uint32),
        ("tx_valid", ctypes.c_uint8),
        ("tx_first", ctypes.c_uint8),
        ("tx_last", ctypes.c_uint8),
        ("rx_ready", ctypes.c_uint8),
        ("msi_valid", ctypes.c_uint8),
        ("msi_vector", ctypes.c_uint8),
        ("reserved0", ctypes.c_uint16),
    ]


class CardTimeout(Exception):
    pass


class HostMemory:
    """Host memory behind a behavioural root complex: absorbs the card's MWr, answers its MRd.

    Read completions are split at 64-byte (RCB) boundaries and sent `latency` cycles after
    the request. `faults` maps the index of a card MRd (0, 1, ...) to "ur", "ca", "poison"
    or "drop", to test the card's error handling. Every request is logged in `log`.
    """

    def __init__(self, base, size, latency=20, rcb=64):
        self.base = base
        self.data = bytearray(size)
        self.latency = latency
        self.rcb = rcb
        self.faults = {}
        self.log = []          # dicts: kind, addr, bytes, dws, hdr_dws, attr, tag, first_be, last_be, cycle
        self.reads_seen = 0
        self.pending = []      # (due cycle, completion DWs)
        self.outstanding = {}  # tag -> bytes still to complete
        self.max_outstanding_seen = 0

    def word(self, addr):
        off = addr - self.base
        return int.from_bytes(self.data[off:off + 4], "little")

    def handle(self, dws, cycle):
        fmt, type_ = dws[0] >> 29, (dws[0] >> 24) & 0x1F
        if type_ != tlp.TYPE_MEM:
            return False
        hdr = 4 if fmt & 1 else 3
        length = (dws[0] & 0x3FF) or 1024
        first_be, last_be = dws[1] & 0xF, (dws[1] >> 4) & 0xF
        tag = (dws[1] >> 8) & 0xFF
        addr = ((dws[2] << 32) | dws[3]) if hdr == 4 else dws[2]
        addr &= ~3
        if not self.base <= addr < self.base + len(self.data):
            # Not this memory's (an MSI-X message into the interrupt window): the test takes it
            # from Card.received.
            return False
        nbytes = tlp.read_byte_count(length, first_be, last_be)
        start = addr + ((first_be & -first_be).bit_length() - 1 if first_be else 0)
        entry = dict(kind="write" if fmt & 2 else "read", addr=start, bytes=nbytes, dws=length, hdr_dws=hdr,
                     attr=(dws[0] >> 12) & 3, tag=tag, first_be=first_be, last_be=last_be, cycle=cycle)
        self.log.append(entry)
        if fmt & 2:  # MWr: write the enabled bytes
            for i, d in enumerate(dws[hdr:hdr + length]):
                be = first_be if i == 0 else (last_be if i == length - 1 else 0xF)
                for b in range(4):
                    if be >> b & 1:
                        self.data[addr + 4 * i + b - self.base] = (d >> (8 * b)) & 0xFF
            return True
        # Every non-posted tag of the card fits the UltraScale hard IP's 6-bit tags (found by
        # its independent model, targets/hardip: the generator used 128..191).
        assert tag < tlp.NONPOSTED_TAG_LIMIT, f"card read with tag {tag}: tags must be below {tlp.NONPOSTED_TAG_LIMIT}"
        index = self.reads_seen
        self.reads_seen += 1
        fault = self.faults.get(index)
        self.outstanding[tag] = nbytes
        self.max_outstanding_seen = max(self.max_outstanding_seen, len(self.outstanding))
        due = cycle + self.latency
        requester = dws[1] >> 16
        if fault == "drop":
            del self.outstanding[tag]
            return True
        if fault in ("ur", "ca"):
            status = tlp.CPL_UR if fault == "ur" else tlp.CPL_CA
            self.pending.append((due, [tlp.dw0(tlp.FMT_3DW_NO_DATA, tlp.TYPE_CPL, 0),
                                       (status << 13) | (nbytes & 0xFFF), (requester << 16) | (tag << 8) | (start & 0x7F)], tag))
            return True
        at, remaining = start, nbytes
        while remaining > 0:
            chunk_end = min((at // self.rcb + 1) * self.rcb, at + remaining)
            first_dw, last_dw = at & ~3, (chunk_end - 1) & ~3
            data = [self.word(a) for a in range(first_dw, last_dw + 4, 4)]
            cpl = [tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_CPL, len(data), ep=int(fault == "poison")),
                   (tlp.CPL_SC << 13) | (remaining & 0xFFF), (requester << 16) | (tag << 8) | (at & 0x7F)] + data
            self.pending.append((due, cpl, tag))
            remaining -= chunk_end - at
            at = chunk_end
        return True

    def due(self, cycle):
        ready = [p for p in self.pending if p[0] <= cycle]
        self.pending = [p for p in self.pending if p[0] > cycle]
        for _, cpl, tag in ready:
            bc = cpl[1] & 0xFFF
            length = cpl[0] & 0x3FF
            if ((cpl[1] >> 13) & 7) != tlp.CPL_SC or bc + (cpl[2] & 3) <= 4 * length:
                self.outstanding.pop(tag, None)
        return [cpl for _, cpl, _ in ready]


class Card:
    """One Verilated card. `send(dwords)` queues a TLP; `run()` clocks it."""

    CARD_ID = 0x0100  # bus 1, device 0, function 0
    HOST_ID = 0x0000

    def __init__(self, library):
        library = Path(library)
        if not library.exists():
            raise FileNotFoundError(f"card library {library} not found: run `make gateware`")
        self.lib = ctypes.CDLL(str(library))
        self.lib.tlpx_card_new.restype = ctypes.c_void_p
        self.lib.tlpx_card_free.argtypes = [ctypes.c_void_p]
        self.lib.tlpx_card_reset.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self.lib.tlpx_card_cycle.argtypes = [ctypes.c_void_p, ctypes.POINTER(CardInputs), ctypes.POINTER(CardOutputs)]
        self.lib.tlpx_card_cycles.argtypes = [ctypes.c_void_p]
        self.lib.tlpx_card_cycles.restype = ctypes.c_uint64
        self.lib.tlpx_card_build_info.restype = ctypes.c_char_p
        self.data_width = self.lib.tlpx_card_data_width()
        self.dwords_per_beat = self.data_width // 32
        self.build_info = json.loads(self.lib.tlpx_card_build_info().decode())
        self.handle = ctypes.c_void_p(self.lib.tlpx_card_new())
        self.inputs = CardInputs()
        self.outputs = CardOutputs()
        self.inputs.cfg_requester_id = self.CARD_ID
        self.inputs.cfg_max_payload_size = 256
        self.inputs.cfg_max_request_size = 512
        self.inputs.cfg_bus_master_enable = 1
        self.inputs.cfg_msi_enable = 1
        self.inputs.tx_ready = 1
        self.inputs.msi_ready = 1
        self.lib.tlpx_card_reset(self.handle, 16)
        self.tx_queue = []        # beats to send: (dwords, be, first, last)
        self.received = []        # complete TLPs from the card, as DW lists
        self.msis = []            # (cycle, vector)
        self._partial = []
        self.next_tag = 0
        self.memory = None
        self.link_log = []        # (cycle, direction, DW0) of every TLP on the link: 0 down, 1 up

    def close(self):
        if self.handle:
            self.lib.tlpx_card_free(self.handle)
            self.handle = None

    @property
    def cycles(self):
        return self.lib.tlpx_card_cycles(self.handle)

    # Host -> card ---------------------------------------------------------------------------------

    def send(self, dwords):
        """Queues one TLP (header + payload DWs) for the card, cut into beats."""
        n = self.dwords_per_beat
        beats = [dwords[i:i + n] for i in range(0, len(dwords), n)]
        for i, beat in enumerate(beats):
            be = 0
            for j in range(len(beat)):
                be |= 0xF << (4 * j)
            self.tx_queue.append((beat + [0] * (n - len(beat)), be, i == 0, i == len(beats) - 1))

    def step(self):
        if self.memory and self.memory.pending:
            for cpl in self.memory.due(self.cycles):
                self.send(cpl)
        inp, out = self.inputs, self.outputs
        if self.tx_queue:
            dat, be, first, last = self.tx_queue[0]
            for j, d in enumerate(dat):
                inp.rx_dat[j] = d
            inp.rx_be, inp.rx_valid, inp.rx_first, inp.rx_last = be, 1, int(first), int(last)
        else:
            inp.rx_valid = 0
        self.lib.tlpx_card_cycle(self.handle, ctypes.byref(inp), ctypes.byref(out))
        if inp.rx_valid and out.rx_ready:
            beat = self.tx_queue.pop(0)
            if beat[2]:
                self._down_dw0 = inp.rx_dat[0]
            if beat[3]:
                self.link_log.append((self.cycles, 0, self._down_dw0))
        if out.tx_valid and inp.tx_ready:
            for j in range(self.dwords_per_beat):
                if (out.tx_be >> (4 * j)) & 0xF:
                    self._partial.append(out.tx_dat[j])
            if out.tx_last:
                self.link_log.append((self.cycles, 1, self._partial[0]))
                # Every request of the card carries its own requester ID (a header field
                # built too narrow shifted it once: the generator's tag sum).
                is_request = (self._partial[0] >> 24) & 0x1F != tlp.TYPE_CPL
                assert not is_request or self._partial[1] >> 16 == self.CARD_ID, \
                    f"card request DW1 {self._partial[1]:#010x}: requester ID is not the card's {self.CARD_ID:#06x}"
                if not (self.memory and self.memory.handle(self._partial, self.cycles)):
                    self.received.append(self._partial)
                self._partial = []
        if out.msi_valid and inp.msi_ready:
            self.msis.append((self.cycles, out.msi_vector))

    def run(self, cycles):
        for _ in range(cycles):
            self.step()

    def run_until(self, predicate, timeout=2000):
        for _ in range(timeout):
            if predicate():
                return
            self.step()
        raise CardTimeout(f"condition not met within {timeout} cycles")

    # Requests -------------------------------------------------------------------------------------

    def _tag(self):
        self.next_tag = (self.next_tag + 1) & 0xFF
        return self.next_tag

    def request(self, dwords, timeout=2000):
        """Sends a non-posted request and returns its completion's DWs."""
        tag = (dwords[1] >> 8) & 0xFF
        self.send(dwords)
        match = lambda t: ((t[0] >> 24) & 0x1F) == tlp.TYPE_CPL and ((t[2] >> 8) & 0xFF) == tag
        self.run_until(lambda: any(match(t) for t in self.received), timeout)
        for i, t in enumerate(self.received):
            if match(t):
                return self.received.pop(i)

    def mrd32(self, address, length=1, first_be=0xF, last_be=None):
        if last_be is None:
            last_be = 0 if length == 1 else 0xF
        tag = self._tag()
        return self.request([
            tlp.dw0(tlp.FMT_3DW_NO_DATA, tlp.TYPE_MEM, length),
            (self.HOST_ID << 16) | (tag << 8) | (last_be << 4) | first_be,
            address & 0xFFFFFFFC,
        ])

    def mwr32(self, address, data, first_be=0xF, last_be=None, ep=0):
        if last_be is None:
            last_be = 0 if len(data) == 1 else 0xF
        self.send([
            tlp.dw0(tlp.FMT_3DW_DATA, tlp.TYPE_MEM, len(data), ep=ep),
            (self.HOST_ID << 16) | (last_be << 4) | first_be,
            address & 0xFFFFFFFC,
        ] + list(data))
        self.run_until(lambda: not self.tx_queue)

    def read32(self, address):
        cpl = self.mrd32(address)
        status = (cpl[1] >> 13) & 7
        if status != tlp.CPL_SC:
            raise IOError(f"read of 0x{address:x} completed with status {tlp.CPL_STATUS_NAMES.get(status, status)}")
        return cpl[3]

    def write32(self, address, value):
        self.mwr32(address, [value])


def completion_fields(cpl):
    """Decodes a completion's header DWs into a dict."""
    return {
        "fmt": cpl[0] >> 29,
        "type": (cpl[0] >> 24) & 0x1F,
        "length": cpl[0] & 0x3FF,
        "completer_id": cpl[1] >> 16,
        "status": (cpl[1] >> 13) & 7,
        "byte_count": cpl[1] & 0xFFF,
        "requester_id": cpl[2] >> 16,
        "tag": (cpl[2] >> 8) & 0xFF,
        "lower_address": cpl[2] & 0x7F,
        "data": cpl[3:],
    }
