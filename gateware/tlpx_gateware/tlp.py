"""TLP header facts shared by the card's blocks (PCI Express Base spec, 2.2).

Header DWs are handled as native 32-bit values, numbered as in the spec: DW0 bits 31:29 are
Fmt, 28:24 Type, 9:0 Length. Payload DWs hold payload bytes little-endian. This is LitePCIe's
PHY layout with endianness "little" (see sim/tlpx_card.h).
"""

from migen import Case, Cat, If, Signal

# Fmt (2.2.1, Table 2-2) ---------------------------------------------------------------------------

FMT_3DW_NO_DATA = 0b000
FMT_4DW_NO_DATA = 0b001
FMT_3DW_DATA    = 0b010
FMT_4DW_DATA    = 0b011

# Type (2.2.1, Table 2-3) --------------------------------------------------------------------------

TYPE_MEM     = 0b00000  # MRd / MWr
TYPE_MEM_LK  = 0b00001  # MRdLk
TYPE_IO      = 0b00010
TYPE_CFG0    = 0b00100
TYPE_CFG1    = 0b00101
TYPE_CPL     = 0b01010  # Cpl / CplD
TYPE_CPL_LK  = 0b01011
TYPE_FETCHADD = 0b01100
TYPE_SWAP    = 0b01101
TYPE_CAS     = 0b01110
MSG_TYPE_MASK = 0b11000  # Msg/MsgD: Type = 10rrr
MSG_TYPE      = 0b10000

# Tags (2.2.6.2) ------------------------------------------------------------------------------------
# Every tag the card puts on a non-posted request is below this: the UltraScale hard IP keeps
# its outstanding requests in a 64-entry Split Completion Table matched by 6-bit tags, with the
# Extended Tag Field enabled (PG156, "Tag Management for Non-Posted Transactions"; 32 tags
# without it). pcie_7x and the simulator take 8-bit tags; one plan serves every board.
NONPOSTED_TAG_LIMIT = 64

# Completion status (2.2.9, Table 2-34) ------------------------------------------------------------

CPL_SC = 0b000
CPL_UR = 0b001
CPL_CRS = 0b010
CPL_CA = 0b100

CPL_STATUS_NAMES = {CPL_SC: "SC", CPL_UR: "UR", CPL_CRS: "CRS", CPL_CA: "CA"}


def dw0(fmt, type_, length, tc=0, td=0, ep=0, attr=0):
    """Header DW0 as an integer (for tests and models)."""
    return ((fmt & 0b111) << 29) | ((type_ & 0x1f) << 24) | ((tc & 7) << 20) | ((td & 1) << 15) \
        | ((ep & 1) << 14) | ((attr & 3) << 12) | (length & 0x3ff)


def read_byte_count(length, first_be, last_be):
    """Byte Count of the first completion of a memory read (2.3.1.1, Table 2-37), in Python."""
    if length == 1:
        if first_be == 0:
            return 1
        low = (first_be & -first_be).bit_length() - 1
        high = first_be.bit_length() - 1
        return high - low + 1
    lead = (first_be & -first_be).bit_length() - 1 if first_be else 4
    trail = 4 - last_be.bit_length() if last_be else 4
    return length * 4 - lead - trail


def lower_address(address, first_be):
    """Lower Address field of a memory read completion (2.3.1.1): byte address of the
    first enabled byte, 7 bits."""
    low = (first_be & -first_be).bit_length() - 1 if first_be else 0
    return ((address & 0x7c) | low) & 0x7f


def byte_count_logic(length, first_be, last_be, byte_count):
    """Migen statements computing `byte_count` as read_byte_count() does."""
    lead = Signal(3)
    trail = Signal(3)
    single = Signal(12)
    lead_cases = {}
    trail_cases = {}
    single_cases = {}
    for be in range(16):
        lead_cases[be] = lead.eq((be & -be).bit_length() - 1 if be else 4)
        trail_cases[be] = trail.eq(4 - be.bit_length() if be else 4)
        single_cases[be] = single.eq(read_byte_count(1, be, 0))
    return [
        Case(first_be, lead_cases),
        Case(last_be, trail_cases),
        Case(first_be, single_cases),
        If(length == 1,
            byte_count.eq(single)
        ).Else(
            byte_count.eq(Cat(Signal(2), length) - lead - trail)
        ),
    ]


def lower_address_logic(address, first_be, lower):
    """Migen statements computing `lower` (7 bits) as lower_address() does."""
    low = Signal(2)
    cases = {be: low.eq((be & -be).bit_length() - 1 if be else 0) for be in range(16)}
    return [Case(first_be, cases), lower.eq(Cat(low, address[2:7]))]
