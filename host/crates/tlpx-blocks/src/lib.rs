//! Each block's host-visible contract, once: its configuration types, their validation against
//! the card's limits and the link, and their encoding into register writes and descriptors.
//!
//! ```text
//!   CLI flags ──parse──► GenConfig ──validate(link)──► ValidGenConfig ──register_writes()──► [RegWrite]
//!                        (a request,                   (exists only                          executed in
//!                         plain data)                   validated)                           order by tlpx-device
//! ```
//!
//! The crate is pure (no `Device`, no files, no clocks): what it encodes, the device drivers
//! execute (tlpx-device) and the script compiler embeds (tlpx-script). Field positions, value
//! codes and limits come from the generated register map (`tlpx_regs`); none is written here.
//! A configuration that passed its checks is a distinct type that cannot be built otherwise
//! ("parse, don't validate"), so a driver never checks again.

#[path = "../../../blocks/generator/config.rs"]
pub mod generator;
#[path = "../../../blocks/irq_timer/config.rs"]
pub mod irq_timer;
#[path = "../../../blocks/rt_loop/config.rs"]
pub mod rt_loop;
#[path = "../../../blocks/rule30/config.rs"]
pub mod rule30;
#[path = "../../../blocks/generator/run_descriptor.rs"]
pub mod run_descriptor;
#[path = "../../../blocks/spy/config.rs"]
pub mod spy;

use tlpx_regs::Register;

/// One register write of an encoded configuration; a block's writes are executed in the order
/// given (the gateware latches some registers on others, e.g. `control.clear` first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegWrite {
    pub register: Register,
    pub value: u64,
}

impl RegWrite {
    pub const fn new(register: Register, value: u64) -> RegWrite {
        RegWrite { register, value }
    }
}

/// What a configuration is checked against on the link: its Max_Payload_Size and
/// Max_Read_Request_Size in bytes (PCIe Base spec, 7.5.3.4), as the host reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLimits {
    pub mps: u32,
    pub mrrs: u32,
}

impl LinkLimits {
    /// The largest MPS and MRRS the PCIe spec allows (4096 bytes each): what a configuration is
    /// checked against before the link is known (everything but the link's own limits), and
    /// what a driver that does not know the link accepts.
    pub const LARGEST: LinkLimits = LinkLimits { mps: 4096, mrrs: 4096 };
}
