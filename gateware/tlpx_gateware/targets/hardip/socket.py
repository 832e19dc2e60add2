"""The UltraScale card with its hard IP left out: the IP's user-side ports as the top's ports.

On the board, LitePCIe's USPCIEPHY instantiates `pcie_support` (litepcie/phy/xilinx_us/
pcie_us_support.v): LitePCIe's adapters between its TLP streams and Xilinx's CQ/CC/RQ/RC
descriptors, the MSI vector encoding, the FLR handshake, and inside it the hard IP `pcie_us`
(`pcie3_ultrascale`). Here the same file is kept but for that one instance: `socketed_support`
rewrites each of the instance's connections `.port(expr)` into an `assign` between `expr` and
a new port `hip_<port>` of `pcie_support` (input where the IP drives, output where it reads),
so every signal LitePCIe exchanges with the IP reaches the top, where cocotbext-pcie's model of
the IP drives and reads it. Nothing else of LitePCIe's file changes; a connection this module
does not know (another LitePCIe release) is refused, not guessed.

`SocketBoard(board)` is the board with a test platform (the card's clock and reset, the PCIe
pads and the `hip_*` ports as plain top-level ports) and a plain clock instead of the board's
MMCM; everything from the PHY inwards is the board's card.
"""

import re
from dataclasses import asdict

from migen import *

from litex.build.generic_platform import GenericPlatform, Pins, Subsignal
from litex.gen import LiteXModule

from tlpx_gateware.targets.board import Board
from tlpx_gateware.targets.litepcie_us import FixedUSPCIEPHY, litepcie_us_dir

# The hard IP's ports that LitePCIe's pcie_support connects (pcie3_ultrascale at 256 bits, PG156
# "Port Descriptions"): name -> (direction seen from the IP, width). "o": the IP drives it.
# The ready signals are one bit here, as cocotbext-pcie models them: the IP's are [3:0]
# (s_axis_*_tready, copies of one ready) and [21:0] (m_axis_*_tready); LitePCIe's pcie_support
# reads bit 0 of the former and drives bit 0 of the latter (its adapters' 4-bit ready with the
# upper bits 0), so bit 0 is all that crosses.
HARD_IP_PORTS = {
    # Clock, reset, link
    "sys_clk": ("i", 1), "sys_clk_gt": ("i", 1), "sys_reset": ("i", 1),
    "user_clk": ("o", 1), "user_reset": ("o", 1), "user_lnk_up": ("o", 1), "phy_rdy_out": ("o", 1),
    "pci_exp_txn": ("o", 8), "pci_exp_txp": ("o", 8), "pci_exp_rxn": ("i", 8), "pci_exp_rxp": ("i", 8),
    "pcie_perstn1_in": ("i", 1),
    # Requester request (RQ)
    "s_axis_rq_tdata": ("i", 256), "s_axis_rq_tkeep": ("i", 8), "s_axis_rq_tlast": ("i", 1),
    "s_axis_rq_tuser": ("i", 60), "s_axis_rq_tvalid": ("i", 1), "s_axis_rq_tready": ("o", 1),
    "pcie_rq_seq_num": ("o", 4), "pcie_rq_seq_num_vld": ("o", 1), "pcie_rq_tag": ("o", 6),
    "pcie_rq_tag_vld": ("o", 1), "pcie_rq_tag_av": ("o", 2),
    "pcie_tfc_nph_av": ("o", 2), "pcie_tfc_npd_av": ("o", 2),
    # Requester completion (RC)
    "m_axis_rc_tdata": ("o", 256), "m_axis_rc_tkeep": ("o", 8), "m_axis_rc_tlast": ("o", 1),
    "m_axis_rc_tuser": ("o", 75), "m_axis_rc_tvalid": ("o", 1), "m_axis_rc_tready": ("i", 1),
    # Completer request (CQ)
    "m_axis_cq_tdata": ("o", 256), "m_axis_cq_tkeep": ("o", 8), "m_axis_cq_tlast": ("o", 1),
    "m_axis_cq_tuser": ("o", 85), "m_axis_cq_tvalid": ("o", 1), "m_axis_cq_tready": ("i", 1),
    "pcie_cq_np_req": ("i", 1), "pcie_cq_np_req_count": ("o", 6),
    # Completer completion (CC)
    "s_axis_cc_tdata": ("i", 256), "s_axis_cc_tkeep": ("i", 8), "s_axis_cc_tlast": ("i", 1),
    "s_axis_cc_tuser": ("i", 33), "s_axis_cc_tvalid": ("i", 1), "s_axis_cc_tready": ("o", 1),
    # Configuration status
    "cfg_phy_link_down": ("o", 1), "cfg_phy_link_status": ("o", 2), "cfg_negotiated_width": ("o", 4),
    "cfg_current_speed": ("o", 3), "cfg_max_payload": ("o", 3), "cfg_max_read_req": ("o", 3),
    "cfg_function_status": ("o", 16), "cfg_function_power_state": ("o", 12), "cfg_vf_status": ("o", 16),
    "cfg_vf_power_state": ("o", 24), "cfg_link_power_state": ("o", 2),
    "cfg_err_cor_out": ("o", 1), "cfg_err_nonfatal_out": ("o", 1), "cfg_err_fatal_out": ("o", 1),
    "cfg_ltr_enable": ("o", 1), "cfg_ltssm_state": ("o", 6), "cfg_rcb_status": ("o", 4),
    "cfg_dpa_substate_change": ("o", 4), "cfg_obff_enable": ("o", 2), "cfg_pl_status_change": ("o", 1),
    "cfg_tph_requester_enable": ("o", 4), "cfg_tph_st_mode": ("o", 12),
    "cfg_vf_tph_requester_enable": ("o", 8), "cfg_vf_tph_st_mode": ("o", 24),
    # Configuration management
    "cfg_mgmt_addr": ("i", 19), "cfg_mgmt_write": ("i", 1), "cfg_mgmt_write_data": ("i", 32),
    "cfg_mgmt_byte_enable": ("i", 4), "cfg_mgmt_read": ("i", 1), "cfg_mgmt_read_data": ("o", 32),
    "cfg_mgmt_read_write_done": ("o", 1), "cfg_mgmt_type1_cfg_reg_access": ("i", 1),
    # Messages
    "cfg_msg_received": ("o", 1), "cfg_msg_received_data": ("o", 8), "cfg_msg_received_type": ("o", 5),
    "cfg_msg_transmit": ("i", 1), "cfg_msg_transmit_type": ("i", 3), "cfg_msg_transmit_data": ("i", 32),
    "cfg_msg_transmit_done": ("o", 1),
    # Flow control
    "cfg_fc_ph": ("o", 8), "cfg_fc_pd": ("o", 12), "cfg_fc_nph": ("o", 8), "cfg_fc_npd": ("o", 12),
    "cfg_fc_cplh": ("o", 8), "cfg_fc_cpld": ("o", 12), "cfg_fc_sel": ("i", 3),
    # Per-function status, control
    "cfg_per_func_status_control": ("i", 3), "cfg_per_func_status_data": ("o", 16),
    "cfg_per_function_number": ("i", 4), "cfg_per_function_output_request": ("i", 1),
    "cfg_hot_reset_in": ("i", 1), "cfg_hot_reset_out": ("o", 1),
    "cfg_power_state_change_ack": ("i", 1), "cfg_power_state_change_interrupt": ("o", 1),
    "cfg_err_cor_in": ("i", 1), "cfg_err_uncor_in": ("i", 1),
    "cfg_flr_in_process": ("o", 4), "cfg_flr_done": ("i", 4),
    "cfg_vf_flr_in_process": ("o", 8), "cfg_vf_flr_done": ("i", 8),
    "cfg_link_training_enable": ("i", 1), "cfg_config_space_enable": ("i", 1),
    "cfg_req_pm_transition_l23_ready": ("i", 1),
    "cfg_dsn": ("i", 64), "cfg_ds_bus_number": ("i", 8), "cfg_ds_device_number": ("i", 5),
    "cfg_ds_function_number": ("i", 3), "cfg_ds_port_number": ("i", 8), "cfg_subsys_vend_id": ("i", 16),
    # Interrupts
    "cfg_interrupt_int": ("i", 4), "cfg_interrupt_pending": ("i", 4), "cfg_interrupt_sent": ("o", 1),
    "cfg_interrupt_msi_enable": ("o", 4), "cfg_interrupt_msi_vf_enable": ("o", 8),
    "cfg_interrupt_msi_mmenable": ("o", 12), "cfg_interrupt_msi_mask_update": ("o", 1),
    "cfg_interrupt_msi_data": ("o", 32), "cfg_interrupt_msi_select": ("i", 4),
    "cfg_interrupt_msi_int": ("i", 32), "cfg_interrupt_msi_pending_status": ("i", 32),
    "cfg_interrupt_msi_pending_status_data_enable": ("i", 1),
    "cfg_interrupt_msi_pending_status_function_num": ("i", 4),
    "cfg_interrupt_msi_sent": ("o", 1), "cfg_interrupt_msi_fail": ("o", 1),
    "cfg_interrupt_msi_attr": ("i", 3), "cfg_interrupt_msi_tph_present": ("i", 1),
    "cfg_interrupt_msi_tph_type": ("i", 2), "cfg_interrupt_msi_tph_st_tag": ("i", 9),
    "cfg_interrupt_msi_function_number": ("i", 4),
}

# Outputs of the IP that pcie_support leaves open (`.port ( )`): not brought out.
UNCONNECTED_OUTPUTS = {"int_qpll1lock_out", "int_qpll1outrefclk_out", "int_qpll1outclk_out",
                       "cfg_per_function_update_done", "cfg_local_error", "pcie_perstn0_out", "pcie_perstn1_out"}

HIP_PREFIX = "hip_"

_INSTANCE = re.compile(r"^\s*pcie_us\s+pcie_us_i\s*\((?P<body>.*?)\n\s*\);", re.MULTILINE | re.DOTALL)
_CONNECTION = re.compile(r"\.(?P<port>\w+)\s*\(\s*(?P<expr>[^()]*?)\s*\)")
_PORT_LIST_END = re.compile(r"\n\);\n")


class SocketError(Exception):
    pass


def socketed_support(text):
    """LitePCIe's pcie_us_support.v with the hard IP instance replaced by `hip_*` ports."""
    m = _INSTANCE.search(text)
    if m is None:
        raise SocketError("pcie_us_support.v: no `pcie_us pcie_us_i (...)` instance found (another LitePCIe release?)")
    body = re.sub(r"//[^\n]*", "", m.group("body"))
    connections = _CONNECTION.findall(body)
    seen = set()
    ports, assigns = [], []
    for port, expr in connections:
        if port in seen:
            raise SocketError(f"pcie_us_support.v connects hard-IP port {port!r} twice")
        seen.add(port)
        if port in UNCONNECTED_OUTPUTS:
            if expr:
                raise SocketError(f"pcie_us_support.v now connects {port!r} ({expr}): socket.py does not bring it out")
            continue
        if port not in HARD_IP_PORTS:
            raise SocketError(f"pcie_us_support.v connects hard-IP port {port!r}, unknown to socket.py's HARD_IP_PORTS")
        if not expr:
            raise SocketError(f"pcie_us_support.v leaves hard-IP port {port!r} open: socket.py expects it connected")
        direction, width = HARD_IP_PORTS[port]
        hip = HIP_PREFIX + port
        # The IP's outputs enter pcie_support; its inputs leave it.
        ports.append(f"  {'input ' if direction == 'o' else 'output'} [{width - 1}:0] {hip}")
        assigns.append(f"  assign {expr} = {hip};" if direction == "o" else f"  assign {hip} = {expr};")
    missing = set(HARD_IP_PORTS) - seen
    if missing:
        raise SocketError(f"pcie_us_support.v no longer connects {', '.join(sorted(missing))}")
    # The new ports go at the end of the module's port list (its first `\n);`).
    head, tail = text[:m.start()], text[m.end():]
    end = _PORT_LIST_END.search(head)
    if end is None:
        raise SocketError("pcie_us_support.v: the end of pcie_support's port list was not found")
    head = head[:end.start()] + ",\n  // The hard IP's ports (tlpx_gateware.targets.hardip.socket)\n" + \
        ",\n".join(ports) + head[end.start():]
    note = ("  // The hard IP `pcie_us` is left out here: its connections, as LitePCIe made them,\n"
            "  // are the hip_* ports above (tlpx_gateware.targets.hardip.socket).\n")
    return head + note + "\n".join(assigns) + "\n" + tail


# Xilinx primitives the card instantiates outside the hard IP, as simulation models.
PRIMITIVES_VERILOG = """\
// Simulation models of the Xilinx primitives the UltraScale card instantiates outside the hard
// IP (tlpx_gateware.targets.hardip.socket): the PCIe reference clock's input buffer.
module IBUFDS_GTE3 #(parameter REFCLK_EN_TX_PATH = 1'b0, parameter [1:0] REFCLK_HROW_CK_SEL = 2'b00,
                     parameter [1:0] REFCLK_ICNTL_RX = 2'b00) (
  output O, output ODIV2, input CEB, input I, input IB);
  assign O = I & ~CEB;
  assign ODIV2 = I & ~CEB;
endmodule
"""


class SocketUSPCIEPHY(FixedUSPCIEPHY):
    """The board's USPCIEPHY (with tlpx's fixes) whose `pcie_support` is the socketed one:
    LitePCIe's adapters as Verilog sources (the corrected CC adapter among the card's
    `verilog_sources`), no IP Tcl, the `hip_*` ports connected to `hip_pads`."""
    hip_pads = None  # the platform's `hip` resource, set by SocketBoard

    def do_finalize(self):
        folder = litepcie_us_dir()
        for name in ["axis_iff.v", *(f"{a}_{self.pcie_data_width}b.v" for a in
                     ("s_axis_rq_adapt", "m_axis_rc_adapt", "m_axis_cq_adapt"))]:
            self.platform.add_source(str(folder / name))
        params = dict(self.pcie_phy_params)
        for port, (direction, _) in HARD_IP_PORTS.items():
            params[("i_" if direction == "o" else "o_") + HIP_PREFIX + port] = getattr(self.hip_pads, port)
        self.specials += Instance("pcie_support", **params)


def socket_ios(board):
    """The test platform's top-level ports."""
    return [
        ("sys_clk", 0, Pins(1)),
        ("sys_rst", 0, Pins(1)),
        (board.pcie_pads, 0,
            Subsignal("rst_n", Pins(1)),
            Subsignal("clk_p", Pins(1)), Subsignal("clk_n", Pins(1)),
            Subsignal("rx_p", Pins(board.lanes)), Subsignal("rx_n", Pins(board.lanes)),
            Subsignal("tx_p", Pins(board.lanes)), Subsignal("tx_n", Pins(board.lanes)),
        ),
        ("hip", 0, *[Subsignal(port, Pins(width)) for port, (_, width) in HARD_IP_PORTS.items()]),
    ]


class SocketPlatform(GenericPlatform):
    """The board's part (LitePCIe's packetizer chooses 4DW requests by it), no pins."""
    default_clk_name = "sys_clk"

    def __init__(self, board):
        GenericPlatform.__init__(self, board.part, socket_ios(board), name="tlpx_card")

    def get_verilog(self, *args, special_overrides=dict(), **kwargs):
        # LiteX's simulation models of the specials the vendor platform would map to primitives
        # (the asynchronous reset synchronizers of LitePCIe's clock-domain crossings).
        from litex.build.sim.common import sim_special_overrides
        return GenericPlatform.get_verilog(self, *args, special_overrides={**sim_special_overrides, **special_overrides},
                                           **kwargs)

    def add_period_constraint(self, clk, period, keep=True, name=None):
        pass  # no timing constraints in simulation (the board's project has them)

    def add_false_path_constraints(self, *clk):
        pass


class SocketCRG(LiteXModule):
    """The card's clock and reset from the testbench (the board's MMCM is not modelled)."""
    def __init__(self, platform):
        self.cd_sys = ClockDomain()
        self.comb += [
            self.cd_sys.clk.eq(platform.request("sys_clk")),
            self.cd_sys.rst.eq(platform.request("sys_rst")),
        ]


class SocketBoard(Board):
    """`board` with the socket's platform and clocking; its card as on the board from the PHY in."""

    @classmethod
    def of(cls, board):
        if board.family != "ultrascale":
            raise SocketError(f"board {board.name}: cocotbext-pcie models UltraScale hard IP only, "
                              f"not {board.family} ({board.name}'s family)")
        return cls(**asdict(board))

    def platform(self):
        return SocketPlatform(self)

    def add_clocking_and_phy(self, card, data_width, clock_hz, bar0_size):
        if data_width != self.data_width:
            raise ValueError(f"board {self.name} is built at {self.data_width} bits, not {data_width}")
        platform = card.platform
        card.crg = SocketCRG(platform)
        card.pcie_phy = phy = self.make_phy(platform, platform.request(self.pcie_pads), data_width, clock_hz,
                                            bar0_size, phy_class=SocketUSPCIEPHY)
        card.verilog_sources.update(phy.vendor.verilog_sources)
        phy.vendor.hip_pads = platform.request("hip")
