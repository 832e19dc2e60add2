//! perf's records in the ring of a TIME | CPU | RAW sampling event, and the walk from the
//! tail to the head that reassembles a record wrapping past the end of the ring. Pure: the
//! ring's bytes come from `perf::MappedRing::read`, or from a test.

use perf_event_open_sys::bindings as sys;

use super::error::IsrTraceError;
use crate::DeviceError;

/// PERF_RECORD_LOST: the kernel dropped records (the ring was full).
pub const PERF_RECORD_LOST: u32 = sys::PERF_RECORD_LOST;
/// PERF_RECORD_SAMPLE.
pub const PERF_RECORD_SAMPLE: u32 = sys::PERF_RECORD_SAMPLE;
/// PERF_RECORD_LOST_SAMPLES: samples dropped before they reached the ring.
pub const PERF_RECORD_LOST_SAMPLES: u32 = sys::PERF_RECORD_LOST_SAMPLES;

/// One record of a perf ring whose events sample TIME | CPU | RAW (and nothing else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PerfRecord {
    Sample {
        /// The event's time in the event's clock (ns).
        time_ns: u64,
        cpu: u32,
        /// The tracepoint's raw record.
        raw: Vec<u8>,
    },
    /// Records the kernel could not write (PERF_RECORD_LOST / PERF_RECORD_LOST_SAMPLES).
    Lost { lost: u64 },
    /// Another record type, skipped.
    Other { kind: u32 },
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses one whole record (header included) of a TIME | CPU | RAW sampling event.
pub fn parse_record(record: &[u8]) -> Result<PerfRecord, DeviceError> {
    let bad = |why: String| DeviceError::from(IsrTraceError::MalformedRecord { len: record.len(), why });
    if record.len() < 8 {
        return Err(bad("shorter than its 8-byte header".into()));
    }
    let kind = u32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
    let size = usize::from(u16::from_ne_bytes([record[6], record[7]]));
    if size != record.len() {
        return Err(bad(format!("its header says {size} bytes")));
    }
    match kind {
        PERF_RECORD_SAMPLE => {
            // header, u64 time, u32 cpu, u32 res, u32 raw size, raw bytes (perf_event.h order).
            let time_ns = u64_at(record, 8).ok_or_else(|| bad("no time".into()))?;
            let cpu = u32_at(record, 16).ok_or_else(|| bad("no cpu".into()))?;
            let raw_size = u32_at(record, 24).ok_or_else(|| bad("no raw size".into()))? as usize;
            let raw = record.get(28..28 + raw_size).ok_or_else(|| bad(format!("raw data of {raw_size} bytes past its end")))?;
            Ok(PerfRecord::Sample { time_ns, cpu, raw: raw.to_vec() })
        }
        PERF_RECORD_LOST => Ok(PerfRecord::Lost { lost: u64_at(record, 16).ok_or_else(|| bad("no lost count".into()))? }),
        PERF_RECORD_LOST_SAMPLES => Ok(PerfRecord::Lost { lost: u64_at(record, 8).ok_or_else(|| bad("no lost count".into()))? }),
        other => Ok(PerfRecord::Other { kind: other }),
    }
}

/// Walks the records of a perf ring's data area `ring` from `tail` to `head` (the
/// free-running byte counters of the mmap page: position = counter mod ring size), copying
/// a record that wraps past the end of the ring into one piece. Returns the new tail (the
/// end of the last whole record).
pub fn walk_ring(ring: &[u8], tail: u64, head: u64, out: &mut Vec<PerfRecord>) -> Result<u64, DeviceError> {
    let size = ring.len() as u64;
    if size == 0 {
        return Err(IsrTraceError::EmptyRing.into());
    }
    if head < tail || head - tail > size {
        return Err(IsrTraceError::RingPositions { tail, head, size }.into());
    }
    let copy = |from: u64, len: usize, dst: &mut Vec<u8>| {
        dst.clear();
        let start = (from % size) as usize;
        let first = len.min(ring.len() - start);
        dst.extend_from_slice(&ring[start..start + first]);
        dst.extend_from_slice(&ring[..len - first]);
    };
    let mut pos = tail;
    let mut record = Vec::with_capacity(64);
    while head - pos >= 8 {
        copy(pos, 8, &mut record);
        let len = u16::from_ne_bytes([record[6], record[7]]) as u64;
        if len < 8 || len > head - pos {
            return Err(IsrTraceError::RecordPastHead { pos, len, head }.into());
        }
        copy(pos, len as usize, &mut record);
        out.push(parse_record(&record)?);
        pos += len;
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::super::format::decode_irq_entry;
    use super::super::testdata::{layout_6_18, lost_record, put, raw_entry, sample_record, RING_CPU1, RING_CPU1_HEAD, RING_CPU1_TAIL};
    use super::*;

    #[test]
    fn perf_sample_lost_and_other_records_parse() {
        let raw = raw_entry(225, 45, "vfio-msi[0](0000:01:00.0)");
        let rec = sample_record(123_456_789, 3, &raw);
        assert_eq!(rec.len() % 8, 0);
        match parse_record(&rec).expect("sample") {
            PerfRecord::Sample { time_ns, cpu, raw: r } => {
                assert_eq!((time_ns, cpu), (123_456_789, 3));
                assert_eq!(&r[..raw.len()], &raw[..]);
                assert_eq!(decode_irq_entry(&layout_6_18(), &r).expect("decodes").irq, 45);
            }
            other => panic!("not a sample: {other:?}"),
        }
        assert_eq!(parse_record(&lost_record(17)).expect("lost"), PerfRecord::Lost { lost: 17 });
        let mut lost_samples = Vec::new();
        lost_samples.extend_from_slice(&PERF_RECORD_LOST_SAMPLES.to_ne_bytes());
        lost_samples.extend_from_slice(&0u16.to_ne_bytes());
        lost_samples.extend_from_slice(&16u16.to_ne_bytes());
        lost_samples.extend_from_slice(&5u64.to_ne_bytes());
        assert_eq!(parse_record(&lost_samples).expect("lost samples"), PerfRecord::Lost { lost: 5 });
        let mut throttle = lost_record(0);
        throttle[..4].copy_from_slice(&sys::PERF_RECORD_THROTTLE.to_ne_bytes());
        assert_eq!(parse_record(&throttle).expect("other"), PerfRecord::Other { kind: 5 });
    }

    #[test]
    fn truncated_perf_records_are_refused() {
        let rec = sample_record(1, 0, &raw_entry(225, 1, "x"));
        let e = parse_record(&rec[..20]).expect_err("cut").to_string();
        assert!(e.contains("its header says"), "{e}");
        let mut lying = rec.clone();
        lying[24..28].copy_from_slice(&1000u32.to_ne_bytes()); // raw size past the end
        let e = parse_record(&lying).expect_err("raw past end").to_string();
        assert!(e.contains("1000 bytes past its end"), "{e}");
        assert!(parse_record(&[9, 0, 0]).is_err());
        assert!(parse_record(&[9, 0, 0, 0, 0]).is_err(), "a partial header");
    }

    #[test]
    fn ring_walk_reads_records_in_order_and_reassembles_one_that_wraps() {
        let mut ring = vec![0xEEu8; 256];
        let raw = raw_entry(225, 45, "vfio-msi[0](0000:01:00.0)"); // 42 bytes: a 72-byte record
        let a = sample_record(1000, 0, &raw);
        let b = sample_record(2000, 1, &raw);
        let lost = lost_record(3);
        // Free-running positions far past 2^32: the ring position is the counter mod 256.
        let tail = (5u64 << 32) + 244;
        put(&mut ring, tail, &a); // 244..256, then 0..60: wraps inside its time field
        put(&mut ring, tail + 72, &b); // 60..132
        put(&mut ring, tail + 144, &lost); // 132..156
        let head = tail + 168;
        let mut out = Vec::new();
        let new_tail = walk_ring(&ring, tail, head, &mut out).expect("walks");
        assert_eq!(new_tail, head);
        let times: Vec<Option<(u64, u32)>> = out
            .iter()
            .map(|r| match r {
                PerfRecord::Sample { time_ns, cpu, .. } => Some((*time_ns, *cpu)),
                _ => None,
            })
            .collect();
        assert_eq!(times, vec![Some((1000, 0)), Some((2000, 1)), None]);
        assert_eq!(out[2], PerfRecord::Lost { lost: 3 });
        if let PerfRecord::Sample { raw: r, .. } = &out[1] {
            assert_eq!(
                decode_irq_entry(&layout_6_18(), r).expect("wrapped record decodes").name.as_deref(),
                Some("vfio-msi[0](0000:01:00.0)")
            );
        }
        // A header split by the end of the ring (a ring whose size is not a multiple of 8).
        let mut odd = vec![0u8; 100];
        put(&mut odd, 96, &lost);
        let mut out = Vec::new();
        assert_eq!(walk_ring(&odd, 96, 120, &mut out).expect("walks"), 120);
        assert_eq!(out, vec![PerfRecord::Lost { lost: 3 }]);
        // Nothing new, and a partial header, leave the tail where it is.
        assert_eq!(walk_ring(&ring, head, head, &mut Vec::new()).expect("empty"), head);
        assert_eq!(walk_ring(&ring, head, head + 4, &mut Vec::new()).expect("partial"), head);
    }

    /// The kernel's own bytes: its record sizes and padding, the raw record behind them, and
    /// live records that continue at the start of the ring.
    #[test]
    fn a_ring_recorded_from_the_kernel_walks_and_decodes() {
        let size = RING_CPU1.len() as u64;
        assert!(RING_CPU1_TAIL % size + (RING_CPU1_HEAD - RING_CPU1_TAIL) > size, "the recorded live records wrap");
        let mut out = Vec::new();
        assert_eq!(walk_ring(RING_CPU1, RING_CPU1_TAIL, RING_CPU1_HEAD, &mut out).expect("walks"), RING_CPU1_HEAD);
        assert_eq!(out.len(), 28, "28 samples of 64 bytes");
        let layout = layout_6_18();
        let mut times = Vec::new();
        for r in &out {
            let PerfRecord::Sample { time_ns, cpu, raw } = r else { panic!("not a sample: {r:?}") };
            assert_eq!(*cpu, 1);
            let e = decode_irq_entry(&layout, raw).expect("decodes with the recorded format");
            assert_eq!((e.irq, e.name.as_deref()), (36, Some("virtio1-req.0")));
            times.push(*time_ns);
        }
        assert_eq!(times[0], 15_382_046_735_558, "CLOCK_MONOTONIC_RAW ns of the first entry");
        assert!(times.windows(2).all(|w| w[0] < w[1]), "one CPU's records come in time order");
        // Walking from any record boundary on gives the rest of them.
        let mut rest = Vec::new();
        assert_eq!(walk_ring(RING_CPU1, RING_CPU1_TAIL + 17 * 64, RING_CPU1_HEAD, &mut rest).expect("walks"), RING_CPU1_HEAD);
        assert_eq!(rest[..], out[17..]);
    }

    #[test]
    fn ring_walk_refuses_inconsistent_positions_and_bad_sizes() {
        let ring = vec![0u8; 64];
        let e = walk_ring(&ring, 100, 50, &mut Vec::new()).expect_err("head before tail").to_string();
        assert!(e.contains("tail 100, head 50"), "{e}");
        assert!(walk_ring(&ring, 0, 65, &mut Vec::new()).is_err(), "more than the ring holds");
        assert!(walk_ring(&[], 0, 0, &mut Vec::new()).is_err());
        // A zero size would loop for ever; a size past the head is a torn record.
        let e = walk_ring(&ring, 0, 16, &mut Vec::new()).expect_err("size 0").to_string();
        assert!(e.contains("says it is 0 bytes"), "{e}");
        let mut r = vec![0u8; 64];
        put(&mut r, 8, &lost_record(1));
        let e = walk_ring(&r, 8, 24, &mut Vec::new()).expect_err("past head").to_string();
        assert!(e.contains("24 bytes") && e.contains("16 bytes are left"), "{e}");
    }
}
