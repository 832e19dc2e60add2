//! Entries: a TLP record with its payload records folded in (record format 2).
//!
//! The spy writes a TLP's captured payload as 1..3 payload records right after the TLP's own
//! record, each with a sequence number of its own (the TLP's + 1, + 2, ...) and the index of
//! its first DW (0, 6, 12). An [`Entry`] is what the converters show as one line, row or
//! packet: the TLP and its payload bytes. A payload record whose TLP record is not right
//! before it (lost, or the chain broken by a gap) is an orphan: it stays an entry of its own,
//! so that nothing the spy delivered disappears.

use crate::gaps::GapDetector;
use crate::record::{Body, PayloadChunk, Record};

/// One TLP (or event) with the payload bytes its payload records carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The TLP or event record (for an orphan, the payload record itself).
    pub record: Record,
    /// Captured payload bytes, in address (wire) order: whole DWs as the spy captured them.
    pub payload: Vec<u8>,
    /// Every payload record of this TLP arrived: the chunks run from DW 0 without a hole
    /// to one marked final, or there were none and no record is missing right after the TLP
    /// (a loss there might have been its payload). False for an orphan.
    pub payload_complete: bool,
}

impl Entry {
    /// A payload record that could not be attached to its TLP.
    pub fn is_orphan(&self) -> bool {
        matches!(self.record.body, Body::Payload(_))
    }
}

/// An entry and what the reader learnt about the records around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    pub entry: Entry,
    /// Records lost (sequence gaps) right before this entry's first record.
    pub lost_before: u64,
    /// Payload records folded into the entry.
    pub payload_records: u8,
}

/// Builds entries from records in file order, one record at a time (a trace of any length
/// streams through it: it holds one entry at most).
#[derive(Debug, Default)]
pub struct EntryBuilder {
    open: Option<Open>,
    gaps: GapDetector,
}

#[derive(Debug)]
struct Open {
    info: EntryInfo,
    /// DW index the next payload record of this TLP must start at.
    next_dw: u32,
    /// A final payload record arrived (nothing more can attach).
    closed: bool,
    /// Sequence the next payload record must carry.
    next_sequence: u32,
    /// A payload record of it was missing or out of place.
    broken: bool,
    /// The record is a TLP (payload can attach).
    attachable: bool,
}

impl EntryBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next record (not the footer: use [`EntryBuilder::finish`] with its sequence);
    /// returns the entry it completed, if any.
    pub fn push(&mut self, record: Record) -> Option<EntryInfo> {
        let lost = match self.gaps.push(record.sequence) {
            Some(g) if !g.is_backwards() => u64::from(g.lost),
            _ => 0,
        };
        if let Body::Payload(chunk) = &record.body {
            if lost == 0 {
                if let Some(open) = self.open.as_mut().filter(|o| o.accepts(&record, chunk)) {
                    open.take(chunk);
                    return None;
                }
            }
        }
        let done = self.open.take().map(|o| o.finish(lost != 0));
        let attachable = matches!(record.body, Body::Request(_) | Body::Completion(_));
        let payload = match &record.body {
            Body::Payload(chunk) => chunk.bytes(),
            _ => Vec::new(),
        };
        let orphan = matches!(record.body, Body::Payload(_));
        self.open = Some(Open {
            info: EntryInfo { entry: Entry { record, payload, payload_complete: !orphan }, lost_before: lost, payload_records: 0 },
            next_dw: 0,
            closed: orphan,
            next_sequence: record.sequence.wrapping_add(1),
            broken: orphan,
            attachable,
        });
        done
    }

    /// Ends the stream; `next_sequence` is the footer's (the spy's next sequence), so that a
    /// payload record lost at the very end marks its TLP incomplete. Returns the last entry.
    pub fn finish(&mut self, next_sequence: Option<u32>) -> Option<EntryInfo> {
        let missing_after = next_sequence.is_some_and(|n| self.open.as_ref().is_some_and(|o| n != o.next_sequence));
        self.open.take().map(|o| o.finish(missing_after))
    }

    /// The footer's sequence (the spy's next) after the last record: the records lost at the
    /// very end of the capture. Call after [`EntryBuilder::finish`].
    pub fn end_gap(&mut self, next_sequence: u32) -> u64 {
        match self.gaps.push(next_sequence) {
            Some(g) if !g.is_backwards() => u64::from(g.lost),
            _ => 0,
        }
    }

    /// Records lost in all sequence gaps so far.
    pub fn total_lost(&self) -> u64 {
        self.gaps.total_lost()
    }
}

impl Open {
    fn accepts(&self, record: &Record, chunk: &PayloadChunk) -> bool {
        self.attachable
            && !self.closed
            && record.sequence == self.next_sequence
            && u32::from(chunk.first_dw) == self.next_dw
            && Some(chunk.direction) == self.info.entry.record.direction()
            && (1..=6).contains(&chunk.count)
    }

    fn take(&mut self, chunk: &PayloadChunk) {
        self.info.entry.payload.extend(chunk.bytes());
        self.info.payload_records += 1;
        self.next_dw += u32::from(chunk.count);
        self.next_sequence = self.next_sequence.wrapping_add(1);
        self.closed = chunk.last;
    }

    /// `gap_after`: records are missing right after this entry.
    fn finish(mut self, gap_after: bool) -> EntryInfo {
        let started = self.info.payload_records > 0;
        // Chunks began but no final one came, or none came and something is missing right
        // after the TLP: a payload record may be among what was lost.
        let incomplete = self.broken || (started && !self.closed) || (gap_after && !self.closed && self.attachable);
        self.info.entry.payload_complete = !incomplete;
        self.info
    }
}

/// The entries of `records` (in file order, without the footer): payload records folded into
/// their TLP's entry, orphans kept as entries of their own.
pub fn entries(records: &[Record]) -> Vec<Entry> {
    entries_with_info(records, None).into_iter().map(|i| i.entry).collect()
}

/// [`entries`] with the loss before each entry; `next_sequence` is the footer's, if any.
pub fn entries_with_info(records: &[Record], next_sequence: Option<u32>) -> Vec<EntryInfo> {
    let mut b = EntryBuilder::new();
    let mut out: Vec<EntryInfo> = records.iter().filter(|r| !r.is_footer()).filter_map(|r| b.push(*r)).collect();
    out.extend(b.finish(next_sequence));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{build, Direction, Msi};

    fn chunk(seq: u32, first_dw: u8, count: u8, last: bool, base: u32) -> Record {
        let mut dws = [0u32; 6];
        for (i, d) in dws.iter_mut().enumerate().take(usize::from(count)) {
            *d = base + i as u32;
        }
        Record { sequence: seq, body: Body::Payload(PayloadChunk { direction: Direction::Up, first_dw, count, last, dws }) }
    }

    #[test]
    fn payload_records_fold_into_their_tlp() {
        let w = build::mem_write(10, Direction::Up, 100, 1, 0, 0x1000, 8);
        let recs = [
            w,
            chunk(11, 0, 6, false, 0x0302_0100),
            chunk(12, 6, 2, true, 0x0706_0504),
            build::mem_read(13, Direction::Down, 120, 0, 1, 0x10, 1),
        ];
        let e = entries(&recs);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].record, w);
        assert_eq!(e[0].payload.len(), 32);
        assert_eq!(&e[0].payload[..4], &[0x00, 0x01, 0x02, 0x03], "w1's bytes little-endian are the first payload bytes");
        assert_eq!(&e[0].payload[24..28], &[0x04, 0x05, 0x06, 0x07]);
        assert!(e[0].payload_complete);
        assert!(e[1].payload.is_empty() && e[1].payload_complete);
    }

    #[test]
    fn a_lost_tlp_record_leaves_an_orphan_and_a_lost_chunk_an_incomplete_entry() {
        let w = build::mem_write(10, Direction::Up, 100, 1, 0, 0x1000, 16);
        // seq 11 (chunk 0) lost: chunk 6 at seq 12 cannot attach.
        let recs = [w, chunk(12, 6, 6, false, 0), chunk(13, 12, 4, true, 0)];
        let info = entries_with_info(&recs, Some(14));
        assert_eq!(info.len(), 3, "{info:?}");
        assert!(!info[0].entry.payload_complete, "its payload records went missing");
        assert!(info[1].entry.is_orphan() && info[2].entry.is_orphan());
        assert_eq!(info[1].lost_before, 1);
        // The TLP record lost: its payload record is an orphan.
        let recs = [chunk(11, 0, 1, true, 7), build::mem_read(12, Direction::Down, 1, 0, 0, 0, 1)];
        let e = entries(&recs);
        assert!(e[0].is_orphan() && !e[0].payload_complete && e[0].payload == vec![7, 0, 0, 0]);
    }

    #[test]
    fn a_loss_right_after_a_tlp_without_chunks_may_have_been_its_payload() {
        let w = build::mem_write(0, Direction::Up, 100, 1, 0, 0x1000, 1);
        let m = Record { sequence: 3, body: Body::Msi(Msi { timestamp: 5, vector: 0, sources: 8, wait_cycles: 0 }) };
        let e = entries_with_info(&[w, m], Some(4));
        assert!(!e[0].entry.payload_complete);
        assert_eq!(e[1].lost_before, 2);
        assert!(e[1].entry.payload_complete, "an MSI has no payload to miss");
        // The footer's next sequence reveals a chunk lost at the end.
        let e = entries_with_info(&[w], Some(2));
        assert!(!e[0].entry.payload_complete);
        let e = entries_with_info(&[w], Some(1));
        assert!(e[0].entry.payload_complete);
    }
}
