//! Errors of the device layer. Messages say what went wrong and what to do about it.

use thiserror::Error;

use crate::card::Feature;
use crate::lease::Block;

#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("no simulated card at {path}: {reason}. Start one with `tlpx-sim` (or `make sim`), or choose another device with --device")]
    SimNotRunning { path: String, reason: String },
    #[error("lost the connection to the simulator at {path}: {reason}")]
    SimDisconnected { path: String, reason: String },
    #[error("the simulator speaks protocol version {found}, this tlpx speaks {expected}: use the tlpx and tlpx-sim of the same build")]
    ProtocolMismatch { expected: u32, found: u32 },
    #[error("the card answered a {what} with completion status {status}")]
    CompletionError { what: String, status: String },
    #[error("timed out after {0:?} waiting for the card")]
    Timeout(std::time::Duration),
    #[error("no such device: {0}")]
    NoSuchDevice(String),
    #[error("libpci: {0}")]
    Pci(String),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("{0}")]
    Backend(String),
    /// A block another live process owns (a lease on the card, `tlpx_device::lease`).
    #[error("busy: {} is owned by {owner}; wait for it to finish, or take it back with `tlpx stop {}`", .block.title(), .block.name())]
    Busy { block: Block, owner: String },
    /// A block this process owned is no longer its own: the card stopped its job.
    #[error("{block} is no longer this process's: {detail}; the card stopped its job")]
    LeaseLost { block: String, detail: String },
    /// The user asked to stop (Ctrl-C, SIGTERM, SIGHUP, or the output went away) during a wait.
    #[error("stopped on request")]
    Interrupted,
    /// The card lacks the block an operation needs: its identification block has no bit for
    /// `feature`. (Not [`DeviceError::Unsupported`]: that is the backend's, this the card's.)
    #[error("this card has no {block} (its features: {features}); build the card with the {} block (make gateware; then restart tlpx-sim for a simulated card)", .feature.name())]
    MissingBlock { block: String, feature: Feature, features: String },
    /// A block refused to start the job it was given (its error register says why).
    #[error("{block} refused the start ({detail})")]
    StartRefused { block: String, detail: String },
    /// A capability this backend does not have: never a wrong figure instead.
    #[error("the {backend} backend cannot {what}: {instead}")]
    Unsupported { backend: String, what: String, instead: String },
}

/// A block configuration that cannot be programmed (tlpx-blocks' errors) is a bad argument:
/// its message names the value and what is accepted.
macro_rules! invalid_argument_from {
    ($($error:ty),* $(,)?) => {
        $(impl From<$error> for DeviceError {
            fn from(e: $error) -> DeviceError {
                DeviceError::InvalidArgument(e.to_string())
            }
        })*
    };
}

invalid_argument_from!(
    tlpx_blocks::generator::GenConfigError,
    tlpx_blocks::spy::SpyConfigError,
    tlpx_blocks::irq_timer::IrqTimerError,
    tlpx_blocks::rt_loop::LoopConfigError,
    tlpx_blocks::rule30::Rule30Error,
);
