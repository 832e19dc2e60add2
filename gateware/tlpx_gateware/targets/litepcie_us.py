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
"""

from pathlib import Path

from litepcie.phy.uspciephy import USPCIEPHY

CC_DESCRIPTOR_LINE = ("2'b0, s_axis_cc_poison, s_axis_cc_cmpstatus, s_axis_cc_dwordcnt,",
                      "1'b0, s_axis_cc_poison, s_axis_cc_cmpstatus, 1'b0, s_axis_cc_dwordcnt,")


class LitePCIeFixError(Exception):
    pass


def litepcie_us_dir():
    import litepcie.phy.uspciephy as uspciephy
    return Path(uspciephy.__file__).resolve().parent / "xilinx_us"


def cc_adapter_name(width):
    return f"s_axis_cc_adapt_{width}b.v"


def fixed_cc_adapter(width, folder=None):
    """LitePCIe's CC adapter at `width` bits (from `folder`, default LitePCIe's installed
    xilinx_us) with PG156's descriptor layout."""
    path = Path(folder or litepcie_us_dir()) / cc_adapter_name(width)
    text = path.read_text()
    old, new = CC_DESCRIPTOR_LINE
    if text.count(old) != 1:
        raise LitePCIeFixError(f"{path}: the CC descriptor line to correct is not there once "
                               f"(another LitePCIe release?): check PG156's layout and this fix")
    return f"// {cc_adapter_name(width)} of LitePCIe, CC descriptor corrected by tlpx (targets/litepcie_us.py)\n" + \
        text.replace(old, new)


class FixedUSPCIEPHY(USPCIEPHY):
    """USPCIEPHY with the corrected CC adapter: LitePCIe's file is left out of the sources and
    the corrected text is in `verilog_sources` (name -> text), which the card writes beside
    its own Verilog."""
    def __init__(self, *args, **kwargs):
        USPCIEPHY.__init__(self, *args, **kwargs)
        self.verilog_sources = {cc_adapter_name(self.pcie_data_width): fixed_cc_adapter(self.pcie_data_width)}

    def add_sources(self, platform, phy_path=None, phy_filename=None):
        USPCIEPHY.add_sources(self, platform, phy_path, phy_filename)
        drop = str(litepcie_us_dir() / cc_adapter_name(self.pcie_data_width))
        platform.sources = [s for s in platform.sources if s[0] != drop]
