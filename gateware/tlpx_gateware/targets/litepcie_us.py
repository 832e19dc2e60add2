"""LitePCIe 2024.12's UltraScale PHY with the fixes its Verilog adapters need, found by the
independent model of the hard IP (targets/hardip, docs/verification.md).

- **CC descriptor (s_axis_cc_adapt_{128,256}b.v).** LitePCIe packs the completer-completion
  descriptor's second DW as {Requester ID, 2'b0, Poisoned, Status, Dword Count[9:0]}: Status
  lands in bits 44:42 and Poisoned in 45, where PG156 has Dword Count in 42:32, Status in
  45:43 and Poisoned in 46. A successful completion survives (Status 000); the card's UR
  (001) reaches the link as SC with 1024 extra DWs counted, its CA (100) as CRS (010).
  cocotbext-pcie's root complex saw CRS for the card's CA. The adapter is rebuilt from
  LitePCIe's installed file with that one line corrected (`fixed_cc_adapter`; the text it
  replaces must be there, so another LitePCIe release is noticed rather than patched
  blindly). LitePCIe's later releases rewrote these adapters; PyPI has 2024.12 only.
- **MSI vector (pcie_us_support.v).** The IP sends MSI vector n for bit n of
  cfg_interrupt_msi_int (PG156). LitePCIe's wrapper ignores the message number its PHY is
  given (`cfg_interrupt_msi_int[7:0]`, the card's msi.dat) and derives the bit from the
  Multiple Message Enable alone: vector 0 with one vector granted, but vector 1 with 2, bit 4
  with 4 (outside the grant), 8 with 8, 16 with 16, 31 with 32. The card numbers its vectors
  itself (cores/msi.py: each source its own, folded into the grant), so the wrapper is rebuilt
  (`fixed_support`) with the encoder taking that number: bit cfg_interrupt_msi_int[4:0]. With
  one vector granted the card's number is 0, as before.
"""

from pathlib import Path

from litepcie.phy.uspciephy import USPCIEPHY

CC_DESCRIPTOR_LINE = ("2'b0, s_axis_cc_poison, s_axis_cc_cmpstatus, s_axis_cc_dwordcnt,",
                      "1'b0, s_axis_cc_poison, s_axis_cc_cmpstatus, 1'b0, s_axis_cc_dwordcnt,")


# LitePCIe's MSI encoder in pcie_us_support.v, and what replaces it.
MSI_ENCODER = ("""  always @(cfg_interrupt_msi_mmenable[2:0])
      case (cfg_interrupt_msi_mmenable[2:0])
          3'd0 : cfg_interrupt_msi_int_enc <= 32'h0000_0001;
          3'd1 : cfg_interrupt_msi_int_enc <= 32'h0000_0002;
          3'd2 : cfg_interrupt_msi_int_enc <= 32'h0000_0010;
          3'd3 : cfg_interrupt_msi_int_enc <= 32'h0000_0100;
          3'd4 : cfg_interrupt_msi_int_enc <= 32'h0001_0000;
          default: cfg_interrupt_msi_int_enc <= 32'h8000_0000;
       endcase
""", """  // tlpx (targets/litepcie_us.py): the vector is the message number the card gives, which the
  // card keeps below the granted count (LitePCIe derived it from the MME alone).
  always @(*)
      cfg_interrupt_msi_int_enc = 32'h0000_0001 << cfg_interrupt_msi_int[4:0];
""")
SUPPORT = "pcie_us_support.v"


class LitePCIeFixError(Exception):
    pass


def litepcie_us_dir():
    import litepcie.phy.uspciephy as uspciephy
    return Path(uspciephy.__file__).resolve().parent / "xilinx_us"


def cc_adapter_name(width):
    return f"s_axis_cc_adapt_{width}b.v"


def _fixed(name, folder, replacement, what, check, done):
    """LitePCIe's file `name` (from `folder`, default LitePCIe's installed xilinx_us) with the
    text `replacement` = (old, new) replaced, once; refused if `old` is not there exactly once
    (another LitePCIe release: `check` says what to re-read before fixing it again)."""
    path = Path(folder or litepcie_us_dir()) / name
    text = path.read_text()
    old, new = replacement
    if text.count(old) != 1:
        raise LitePCIeFixError(f"{path}: {what} is not there once (another LitePCIe release?): check {check} and this fix")
    return f"// {name} of LitePCIe, {done} by tlpx (targets/litepcie_us.py)\n" + text.replace(old, new)


def fixed_support(folder=None):
    """LitePCIe's pcie_us_support.v with the MSI encoder taking the card's vector."""
    return _fixed(SUPPORT, folder, MSI_ENCODER, "LitePCIe's MSI encoder to replace", "PG156's cfg_interrupt_msi_int",
                  "MSI vector encoder replaced")


def fixed_cc_adapter(width, folder=None):
    """LitePCIe's CC adapter at `width` bits with PG156's descriptor layout."""
    return _fixed(cc_adapter_name(width), folder, CC_DESCRIPTOR_LINE, "the CC descriptor line to correct",
                  "PG156's layout", "CC descriptor corrected")


class FixedUSPCIEPHY(USPCIEPHY):
    """USPCIEPHY with the corrected CC adapter and MSI encoder: LitePCIe's files are left out
    of the sources and the corrected texts are in `verilog_sources` (name -> text), which the
    card writes beside its own Verilog."""
    def __init__(self, *args, **kwargs):
        USPCIEPHY.__init__(self, *args, **kwargs)
        self.verilog_sources = {cc_adapter_name(self.pcie_data_width): fixed_cc_adapter(self.pcie_data_width),
                                SUPPORT: fixed_support()}

    def add_sources(self, platform, phy_path=None, phy_filename=None):
        USPCIEPHY.add_sources(self, platform, phy_path, phy_filename)
        drop = {str(litepcie_us_dir() / name) for name in self.verilog_sources}
        platform.sources = [s for s in platform.sources if s[0] not in drop]
