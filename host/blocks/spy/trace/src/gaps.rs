//! Sequence-gap detection: the spy numbers every record it creates, so a jump in
//! `sequence` is the count of records lost (ring full) between two delivered ones.

use std::fmt;

use crate::record::Record;

/// Records missing between two consecutive records of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gap {
    /// Index (in the sequence of records examined) of the record after the gap.
    pub index: u64,
    /// Sequence of the record before the gap.
    pub after: u32,
    /// Sequence of the record after the gap.
    pub next: u32,
    /// Records lost: `next - after - 1`, modulo 2^32 (the sequence wraps).
    pub lost: u32,
}

impl Gap {
    /// The sequence moved backwards (or repeated) rather than forwards: records are out of
    /// order or duplicated, which the spy never does; `lost` is then meaningless. A step of
    /// 2^31 or more is taken as backwards.
    pub fn is_backwards(&self) -> bool {
        self.next.wrapping_sub(self.after) == 0 || self.lost >= 1 << 31
    }
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_backwards() {
            write!(
                f,
                "sequence went from {} back to {} at record {} (records out of order or duplicated)",
                self.after, self.next, self.index
            )
        } else {
            write!(f, "{} record{} lost between seq {} and {}", self.lost, if self.lost == 1 { "" } else { "s" }, self.after, self.next)
        }
    }
}

/// Incremental detector: feed it sequences in file order.
#[derive(Debug, Clone, Default)]
pub struct GapDetector {
    last: Option<u32>,
    index: u64,
    lost: u64,
    gaps: u64,
}

impl GapDetector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next record's sequence; returns the gap before it, if any.
    pub fn push(&mut self, sequence: u32) -> Option<Gap> {
        let index = self.index;
        self.index += 1;
        let previous = self.last.replace(sequence)?;
        let step = sequence.wrapping_sub(previous);
        if step == 1 {
            return None;
        }
        let gap = Gap { index, after: previous, next: sequence, lost: step.wrapping_sub(1) };
        self.gaps += 1;
        if !gap.is_backwards() {
            self.lost += u64::from(gap.lost);
        }
        Some(gap)
    }

    /// Records lost in all forward gaps so far.
    pub fn total_lost(&self) -> u64 {
        self.lost
    }

    /// Gaps (forward or backward) so far.
    pub fn gap_count(&self) -> u64 {
        self.gaps
    }

    /// Sequences examined so far.
    pub fn seen(&self) -> u64 {
        self.index
    }
}

/// Iterator adaptor yielding the gaps in a stream of sequences.
pub struct Gaps<I> {
    inner: I,
    detector: GapDetector,
}

impl<I: Iterator<Item = u32>> Iterator for Gaps<I> {
    type Item = Gap;

    fn next(&mut self) -> Option<Gap> {
        for sequence in self.inner.by_ref() {
            if let Some(gap) = self.detector.push(sequence) {
                return Some(gap);
            }
        }
        None
    }
}

impl<I> Gaps<I> {
    pub fn detector(&self) -> &GapDetector {
        &self.detector
    }
}

/// The gaps in `sequences` (with wrap-around: `0xffff_ffff` then `0` is no gap).
///
/// For a whole file, chain the footer's sequence (the spy's next sequence) after the
/// records so that a loss at the end of the capture shows too:
/// `gaps(records.iter().chain(reader.footer_record()).map(|r| r.sequence))`.
pub fn gaps<I: IntoIterator<Item = u32>>(sequences: I) -> Gaps<I::IntoIter> {
    Gaps { inner: sequences.into_iter(), detector: GapDetector::new() }
}

/// The gaps in a slice of records (footer included if present).
pub fn record_gaps(records: &[Record]) -> Vec<Gap> {
    gaps(records.iter().map(|r| r.sequence)).collect()
}
