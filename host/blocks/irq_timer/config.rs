//! The interrupt latency timer's configuration: the schedule of fires ([`TimerConfig`]), its
//! checks ([`TimerConfig::validate`], [`ValidTimerConfig::new`]), the sample ring's size
//! ([`ring_records`]) and the register writes that program them.

use std::fmt;

use serde::{Deserialize, Serialize};
use tlpx_regs::irq_timer as regs;

use crate::RegWrite;

/// Smallest ring (records).
pub const MIN_RING_RECORDS: u32 = 16;
/// Largest ring (records).
pub const MAX_RING_RECORDS: u32 = 1 << 24;
/// Idle cycles after which the timer writes a partial batch of records to the ring.
pub const FLUSH_CYCLES: u32 = 256;
/// log2 of the timer's ring writes: 128 bytes, PCIe's smallest Max Payload Size, valid on
/// every link.
const RING_PAYLOAD_SIZE_LOG2: u64 = 7;

/// How the interval between two fires is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Uniform in [min, max] (an LFSR on the card), so samples cover the host's activity.
    Random,
    /// Always `min`.
    Periodic,
}

impl Mode {
    /// The `config.mode` field's value (generated from the register map).
    pub fn value(self) -> u32 {
        match self {
            Mode::Random => regs::config::Mode::Random,
            Mode::Periodic => regs::config::Mode::Periodic,
        }
        .value()
    }
}

/// What the timer is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerConfig {
    pub mode: Mode,
    /// Shortest interval between fires (card cycles, >= 1).
    pub min_interval_cycles: u32,
    /// Longest interval (card cycles, >= min); equal to min when periodic.
    pub max_interval_cycles: u32,
    /// Fires to make; 0: until stopped.
    pub count: u32,
    /// Seed of the interval LFSR (0 is taken as 1 by the card).
    pub seed: u32,
}

/// Why a timer schedule or ring cannot be programmed; the messages name the value.
#[derive(Debug, Clone, PartialEq)]
pub enum TimerConfigError {
    /// A time that is not 1..=u32::MAX cycles of the card's clock.
    Cycles {
        what: String,
        ns: f64,
        cycles: f64,
        clock_hz: u32,
    },
    InvertedNs {
        min_ns: f64,
        max_ns: f64,
    },
    MinZero,
    Inverted {
        min: u32,
        max: u32,
    },
    PeriodicTwoIntervals {
        min: u32,
        max: u32,
    },
    RingRecords {
        records: u32,
    },
}

impl fmt::Display for TimerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerConfigError::Cycles { what, ns, cycles, clock_hz } => write!(
                f,
                "{what} of {ns} ns is {cycles} cycles of the card's {:.0} MHz clock: it must be 1..={} cycles",
                f64::from(*clock_hz) / 1e6,
                u32::MAX
            ),
            TimerConfigError::InvertedNs { min_ns, max_ns } => {
                write!(f, "the interval is inverted: minimum {min_ns} ns is above maximum {max_ns} ns; give min <= max")
            }
            TimerConfigError::MinZero => write!(f, "the minimum interval must be at least 1 card cycle, not 0"),
            TimerConfigError::Inverted { min, max } => {
                write!(f, "the interval is inverted: minimum {min} cycles is above maximum {max} cycles; give min <= max")
            }
            TimerConfigError::PeriodicTwoIntervals { min, max } => {
                write!(f, "a periodic timer has one interval, but min is {min} and max {max} cycles")
            }
            TimerConfigError::RingRecords { records } => {
                write!(f, "ring size must be a power of two in {MIN_RING_RECORDS}..={MAX_RING_RECORDS} records, not {records}")
            }
        }
    }
}

impl std::error::Error for TimerConfigError {}

/// Converts a time in ns to card cycles at `clock_hz`, rounding to the nearest cycle.
pub fn ns_to_cycles(what: &str, ns: f64, clock_hz: u32) -> Result<u32, TimerConfigError> {
    let cycles = (ns * f64::from(clock_hz) / 1e9).round();
    if !cycles.is_finite() || cycles < 1.0 || cycles > f64::from(u32::MAX) {
        return Err(TimerConfigError::Cycles { what: what.to_string(), ns, cycles, clock_hz });
    }
    Ok(cycles as u32)
}

/// `records` as the size of a sample ring: a power of two in 16..=2^24.
pub fn ring_records(records: u32) -> Result<u32, TimerConfigError> {
    if !records.is_power_of_two() || !(MIN_RING_RECORDS..=MAX_RING_RECORDS).contains(&records) {
        return Err(TimerConfigError::RingRecords { records });
    }
    Ok(records)
}

impl TimerConfig {
    /// Random intervals in [min_ns, max_ns].
    pub fn random_ns(min_ns: f64, max_ns: f64, count: u32, seed: u32, clock_hz: u32) -> Result<TimerConfig, TimerConfigError> {
        if max_ns < min_ns {
            return Err(TimerConfigError::InvertedNs { min_ns, max_ns });
        }
        let c = TimerConfig {
            mode: Mode::Random,
            min_interval_cycles: ns_to_cycles("the minimum interval", min_ns, clock_hz)?,
            max_interval_cycles: ns_to_cycles("the maximum interval", max_ns, clock_hz)?,
            count,
            seed,
        };
        c.validate()?;
        Ok(c)
    }

    /// A fire every `period_ns`.
    pub fn periodic_ns(period_ns: f64, count: u32, seed: u32, clock_hz: u32) -> Result<TimerConfig, TimerConfigError> {
        let p = ns_to_cycles("the period", period_ns, clock_hz)?;
        let c = TimerConfig { mode: Mode::Periodic, min_interval_cycles: p, max_interval_cycles: p, count, seed };
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), TimerConfigError> {
        let (min, max) = (self.min_interval_cycles, self.max_interval_cycles);
        if min == 0 {
            return Err(TimerConfigError::MinZero);
        }
        if max < min {
            return Err(TimerConfigError::Inverted { min, max });
        }
        if self.mode == Mode::Periodic && max != min {
            return Err(TimerConfigError::PeriodicTwoIntervals { min, max });
        }
        Ok(())
    }
}

/// A [`TimerConfig`] that passed its checks: the only thing the timer is programmed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidTimerConfig(TimerConfig);

impl ValidTimerConfig {
    pub fn new(config: &TimerConfig) -> Result<ValidTimerConfig, TimerConfigError> {
        config.validate()?;
        Ok(ValidTimerConfig(config.clone()))
    }

    pub fn config(&self) -> &TimerConfig {
        &self.0
    }

    /// A clear, then the schedule: mode, intervals, count, seed (the ring and the start are
    /// the driver's, after).
    pub fn config_writes(&self) -> Vec<RegWrite> {
        let c = &self.0;
        vec![
            RegWrite::new(regs::CONTROL, regs::control::CLEAR.set(1)),
            RegWrite::new(regs::CONFIG, regs::config::MODE.set(u64::from(c.mode.value()))),
            RegWrite::new(regs::MIN_INTERVAL, u64::from(c.min_interval_cycles)),
            RegWrite::new(regs::MAX_INTERVAL, u64::from(c.max_interval_cycles)),
            RegWrite::new(regs::COUNT, u64::from(c.count)),
            RegWrite::new(regs::SEED, u64::from(c.seed)),
        ]
    }
}

/// The sample ring at `bus_addr` of `records` records (from [`ring_records`]), with empty
/// indices.
pub fn ring_writes(bus_addr: u64, records: u32) -> Vec<RegWrite> {
    vec![
        RegWrite::new(regs::RING_BASE, bus_addr),
        RegWrite::new(regs::RING_SIZE_LOG2, u64::from(records.trailing_zeros())),
        RegWrite::new(regs::PAYLOAD_SIZE_LOG2, RING_PAYLOAD_SIZE_LOG2),
        RegWrite::new(regs::FLUSH_CYCLES, u64::from(FLUSH_CYCLES)),
        RegWrite::new(regs::RD_INDEX, 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_edges() {
        let c = |mode, min, max| TimerConfig { mode, min_interval_cycles: min, max_interval_cycles: max, count: 1, seed: 1 };
        assert!(c(Mode::Random, 1, 1).validate().is_ok());
        assert_eq!(c(Mode::Random, 0, 5).validate(), Err(TimerConfigError::MinZero));
        assert_eq!(c(Mode::Random, 6, 5).validate(), Err(TimerConfigError::Inverted { min: 6, max: 5 }));
        assert_eq!(c(Mode::Periodic, 5, 6).validate(), Err(TimerConfigError::PeriodicTwoIntervals { min: 5, max: 6 }));
        assert!(ValidTimerConfig::new(&c(Mode::Random, 6, 5)).is_err());
        // Half a cycle rounds to one; a third rounds to none.
        assert_eq!(ns_to_cycles("t", 4.0, 125_000_000), Ok(1));
        let e = ns_to_cycles("the period", 2.0, 125_000_000).expect_err("0 cycles").to_string();
        assert_eq!(e, "the period of 2 ns is 0 cycles of the card's 125 MHz clock: it must be 1..=4294967295 cycles");
        assert!(ns_to_cycles("t", f64::NAN, 125_000_000).is_err());
        assert!(ns_to_cycles("t", 1e12, 125_000_000).is_err());
        assert!(matches!(TimerConfig::random_ns(2.0, 1.0, 1, 1, 125_000_000), Err(TimerConfigError::InvertedNs { .. })));
    }

    #[test]
    fn ring_edges() {
        assert_eq!(ring_records(MIN_RING_RECORDS), Ok(16));
        assert_eq!(ring_records(MAX_RING_RECORDS), Ok(1 << 24));
        assert_eq!(ring_records(8), Err(TimerConfigError::RingRecords { records: 8 }));
        assert!(ring_records(100).expect_err("not a power of two").to_string().ends_with("not 100"));
        let w = ring_writes(0x1000, 1024);
        let names: Vec<&str> = w.iter().map(|w| w.register.name).collect();
        assert_eq!(names, ["ring_base", "ring_size_log2", "payload_size_log2", "flush_cycles", "rd_index"]);
        assert_eq!((w[1].value, w[2].value), (10, 7));
    }

    #[test]
    fn config_writes_use_the_generated_mode_field() {
        let p = TimerConfig { mode: Mode::Periodic, min_interval_cycles: 9, max_interval_cycles: 9, count: 3, seed: 4 };
        let w = ValidTimerConfig::new(&p).expect("valid").config_writes();
        assert_eq!(w[0].value, regs::control::CLEAR.mask());
        assert_eq!(regs::config::MODE.get(w[1].value), 1);
        assert_eq!(w.iter().skip(2).map(|w| w.value).collect::<Vec<_>>(), [9, 9, 3, 4]);
        assert_eq!([Mode::Random, Mode::Periodic].map(Mode::value), [0, 1]);
    }
}
