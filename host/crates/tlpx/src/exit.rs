//! Exit statuses of tlpx, and which one an error gets.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done; every check of the run passed |
//! | 1 | ran to the end, but what it measured failed a check (card error counters, bad data, lost records, a selftest FAIL, a script that failed) |
//! | 2 | bad input: arguments, input files, output paths that cannot be written, the host's set-up; clap's usage errors too |
//! | 3 | the card, its backend or the simulator failed or refused: not running or not found, lost, timed out, an error completion, a card without the block the command needs or with another register map, a block another process owns ("busy") or that was taken back |
//! | 130 | interrupted by Ctrl-C, SIGTERM or SIGHUP (the partial result is kept) |
//! | 141 | standard output was closed (`tlpx ... \| head`): the command stopped what it ran on the card and ended as a process killed by SIGPIPE would |
//!
//! 3 keeps the sense `make bitstream` gives it (the hardware side is missing, not the
//! user's input wrong), so a script can tell "fix the command" (2) from "look at the card" (3).

use tlpx_device::card::CardError;
use tlpx_device::cpu::CpuError;
use tlpx_device::selector::OpenError;
use tlpx_device::DeviceError;

/// Measured, but a check of the run failed.
pub const CHECK_FAILED: u8 = 1;
/// Bad input, or any error that is not the card's.
pub const BAD_INPUT: u8 = 2;
/// The card, its backend or the simulator failed or refused.
pub const DEVICE: u8 = 3;

/// The table above, for `tlpx --help`.
pub const HELP: &str = "Exit status:
  0    done; every check of the run passed
  1    ran, but what it measured failed a check (error counters, bad data, lost records, FAIL)
  2    bad input: arguments, input files, output paths that cannot be written
  3    the card, its backend or the simulator failed or refused (not running, lost, timed out,
       error completion, a card without the block the command needs, a block another
       process owns: busy)
  130  interrupted by Ctrl-C, SIGTERM or SIGHUP (the partial result is kept)
  141  standard output closed under tlpx (| head): what it ran on the card was stopped";

/// An error of the card that no `tlpx_device` error type carries: an interrupt that never
/// came, a reading that failed in the middle of a command. Exit status 3.
#[derive(Debug)]
pub struct CardFailure(pub String);

impl std::fmt::Display for CardFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CardFailure {}

/// `bail!` for [`CardFailure`].
pub fn card_failure(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(CardFailure(message.into()))
}

/// Interrupted by a signal (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

fn device_status(e: &DeviceError) -> u8 {
    match e {
        // The device crate checks the parameters it is given; they come from the command line
        // (its own InvalidArgument, or a block's typed error of the caller's input).
        e if e.is_invalid_argument() => BAD_INPUT,
        // A wait ended by Ctrl-C / SIGTERM / SIGHUP (a command that keeps partial results
        // returns 130 itself; one that has none to keep ends here).
        DeviceError::Interrupted => INTERRUPTED,
        _ => DEVICE,
    }
}

/// The exit status of a command that failed with `e`: the first error in its chain (outermost
/// first) whose type says whose fault it is; anything else is bad input.
pub fn status_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(d) = cause.downcast_ref::<DeviceError>() {
            return device_status(d);
        }
        if let Some(c) = cause.downcast_ref::<CardError>() {
            return match c {
                CardError::Device(d) => device_status(d),
                _ => DEVICE,
            };
        }
        if let Some(c) = cause.downcast_ref::<CpuError>() {
            return match c {
                CpuError::Device(d) => device_status(d),
                // A payload or script of the wrong size: what the user gave.
                CpuError::Invalid(_) => BAD_INPUT,
                _ => DEVICE,
            };
        }
        if let Some(o) = cause.downcast_ref::<OpenError>() {
            return match o {
                // A `--device` text that names nothing: what the user typed.
                OpenError::Selector(_) => BAD_INPUT,
                // No backend reaches the function: the device side, as when a backend itself
                // cannot open it.
                OpenError::UnusableDriver { .. } | OpenError::NoDriver { .. } => DEVICE,
                OpenError::Device(d) | OpenError::ConfigSpace { source: d, .. } => device_status(d),
            };
        }
        if cause.is::<CardFailure>() {
            return DEVICE;
        }
    }
    BAD_INPUT
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use tlpx_device::card::Feature;

    #[test]
    fn device_errors_are_3_wherever_they_are_in_the_chain() {
        let timeout = anyhow::Error::new(DeviceError::Timeout(std::time::Duration::from_millis(5)));
        assert_eq!(status_of(&timeout), DEVICE);
        let wrapped: anyhow::Result<()> = Err(DeviceError::Backend("gone".into())).context("freeing a DMA buffer");
        assert_eq!(status_of(&wrapped.expect_err("error")), DEVICE);
        let card = anyhow::Error::new(CardError::NotATlpxCard { location: "x".into(), found: 0, expected: 1 });
        assert_eq!(status_of(&card), DEVICE);
        assert_eq!(status_of(&card_failure("this card has no spy").context("tlpx top")), DEVICE);
        let no_cpu = anyhow::Error::new(CpuError::NoCpu { features: 0, map_hash: 0 });
        assert_eq!(status_of(&no_cpu), DEVICE);
        let no_block = DeviceError::MissingBlock { block: "spy".into(), feature: Feature::Spy, features: "msi".into() };
        assert_eq!(status_of(&anyhow::Error::new(no_block).context("tlpx top")), DEVICE, "a card without the block: 3, not 2");
        let no_driver = OpenError::NoDriver { address: "0000:03:00.0".into(), ids: "10ee:7c01".into() };
        assert_eq!(status_of(&anyhow::Error::new(no_driver)), DEVICE);
        let sim = OpenError::Device(DeviceError::SimNotRunning { path: "x".into(), reason: "absent".into() });
        assert_eq!(status_of(&anyhow::Error::new(sim)), DEVICE);
        let dump = OpenError::ConfigSpace { context: "reading".into(), source: DeviceError::Pci("gone".into()) };
        assert_eq!(status_of(&anyhow::Error::new(dump)), DEVICE);
        let overrun = DeviceError::from(tlpx_device::spy::SpyError::Overrun { wr: 40, ahead: 40, rd_index: 0, ring_records: 16 });
        assert_eq!(status_of(&anyhow::Error::new(overrun).context("tlpx spy")), DEVICE, "a block's failure on the card: 3");
    }

    #[test]
    fn everything_else_is_bad_input() {
        assert_eq!(status_of(&anyhow::anyhow!("--count must be 1..=1000, not 0")), BAD_INPUT);
        assert_eq!(status_of(&anyhow::Error::new(DeviceError::InvalidArgument("PIO read delay".into()))), BAD_INPUT);
        let card_arg = anyhow::Error::new(CardError::Device(DeviceError::InvalidArgument("width".into())));
        assert_eq!(status_of(&card_arg), BAD_INPUT);
        // A block's typed error of the caller's input is bad input, as its InvalidArgument was.
        let delay = DeviceError::from(tlpx_device::pio::PioError::ReadDelay { cycles: 1 << 20 });
        assert_eq!(status_of(&anyhow::Error::new(delay)), BAD_INPUT);
        let direction = tlpx_device::spy::Direction::parse("sideways").expect_err("no direction");
        assert_eq!(status_of(&anyhow::Error::new(direction)), BAD_INPUT);
        assert_eq!(status_of(&anyhow::Error::new(CpuError::Invalid("payload".into()))), BAD_INPUT);
        let selector = tlpx_device::selector::open("bogus").err().expect("not a selector");
        assert_eq!(status_of(&anyhow::Error::new(selector)), BAD_INPUT);
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        assert_eq!(status_of(&anyhow::Error::new(io).context("writing the result")), BAD_INPUT);
    }
}
