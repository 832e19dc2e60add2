//! Errors of the device layer. Messages say what went wrong and what to do about it.

use thiserror::Error;

use crate::card::Feature;
use crate::generator::GeneratorError;
use crate::irq_timer::IrqTimerError;
use crate::isr_trace::IsrTraceError;
use crate::lease::{Block, LeaseError};
use crate::litepcie_dma::LitepcieDmaError;
use crate::pio::PioError;
use crate::rt_loop::RtLoopError;
use crate::rule30::Rule30BlockError;
use crate::spy::SpyError;

#[derive(Debug, Error)]
pub enum DeviceError {
    /// A parameter of the core's accesses or of a backend out of range (the blocks' own are
    /// in their typed errors below).
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
    /// A backend's failure that has no variant of its own (the blocks have typed errors).
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
    // The blocks' own errors, typed so that a caller can match a failure ("overrun", "no
    // interrupt") rather than parse a message; each displays as its block's message.
    #[error(transparent)]
    Spy(#[from] SpyError),
    #[error(transparent)]
    Generator(#[from] GeneratorError),
    #[error(transparent)]
    IrqTimer(#[from] IrqTimerError),
    #[error(transparent)]
    RtLoop(#[from] RtLoopError),
    #[error(transparent)]
    Rule30(#[from] Rule30BlockError),
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(transparent)]
    Pio(#[from] PioError),
    #[error(transparent)]
    LitepcieDma(#[from] LitepcieDmaError),
    #[error(transparent)]
    IsrTrace(#[from] IsrTraceError),
}

/// A block configuration that cannot be programmed (tlpx-blocks' errors) is a bad argument of
/// that block: its message names the value and what is accepted. `?` on one gives the
/// block's typed error (`DeviceError::Spy(SpyError::Config(..))`), not its text.
macro_rules! block_config_error_from {
    ($($error:ty => $block:ident :: $variant:ident),* $(,)?) => {
        $(impl From<$error> for DeviceError {
            fn from(e: $error) -> DeviceError {
                DeviceError::$block(e.into())
            }
        })*
    };
}

block_config_error_from!(
    tlpx_blocks::generator::GenConfigError => Generator::Config,
    tlpx_blocks::spy::SpyConfigError => Spy::Config,
    tlpx_blocks::irq_timer::TimerConfigError => IrqTimer::Config,
    tlpx_blocks::rt_loop::LoopConfigError => RtLoop::Config,
    tlpx_blocks::rule30::Rule30Error => Rule30::Config,
);

impl DeviceError {
    /// The caller's input was refused (a parameter out of range, a name that is no block's),
    /// not the card or its backend: a command line maps it to "bad input".
    pub fn is_invalid_argument(&self) -> bool {
        match self {
            DeviceError::InvalidArgument(_) => true,
            DeviceError::Spy(e) => e.is_invalid_argument(),
            DeviceError::Generator(e) => e.is_invalid_argument(),
            DeviceError::IrqTimer(e) => e.is_invalid_argument(),
            DeviceError::RtLoop(e) => e.is_invalid_argument(),
            DeviceError::Rule30(e) => e.is_invalid_argument(),
            DeviceError::Lease(e) => e.is_invalid_argument(),
            DeviceError::Pio(_) | DeviceError::LitepcieDma(_) => true,
            DeviceError::IsrTrace(e) => e.is_invalid_argument(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain `{:#}` prints (anyhow's alternate form, how the CLI shows an error): every
    /// source's text after the error's own.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text += &format!(": {s}");
            source = s.source();
        }
        text
    }

    #[test]
    fn a_block_s_configuration_error_is_printed_once() {
        let config = tlpx_blocks::spy::SpyConfigError::TriggerPostZero;
        let message = config.to_string();
        let e = DeviceError::from(crate::spy::SpyError::from(config));
        assert_eq!(chain(&e), format!("invalid argument: {message}"));
        assert!(e.is_invalid_argument());
        let rule30 = tlpx_blocks::rule30::Rule30Error::LineLength(0);
        let e = DeviceError::from(Rule30BlockError::from(rule30.clone()));
        assert_eq!(chain(&e), format!("invalid argument: {rule30}"));
    }
}
