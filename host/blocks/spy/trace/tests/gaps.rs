//! Sequence gaps: lost-record counts, wrap-around, and the footer revealing a trailing loss.
#![allow(clippy::unwrap_used)]

use crate::common;

use tlpx_trace::{gaps, Gap, GapDetector, TraceReader};

#[test]
fn no_gap_in_a_contiguous_run() {
    assert_eq!(gaps(0..1000u32).count(), 0);
    assert_eq!(gaps(std::iter::empty()).count(), 0);
    assert_eq!(gaps([7]).count(), 0);
}

#[test]
fn reports_lost_counts_between_sequences() {
    let found: Vec<Gap> = gaps([10, 11, 17, 18, 20]).collect();
    assert_eq!(found.len(), 2);
    assert_eq!((found[0].after, found[0].next, found[0].lost, found[0].index), (11, 17, 5, 2));
    assert_eq!((found[1].after, found[1].next, found[1].lost, found[1].index), (18, 20, 1, 4));
    assert_eq!(found[0].to_string(), "5 records lost between seq 11 and 17");
    assert_eq!(found[1].to_string(), "1 record lost between seq 18 and 20");
}

#[test]
fn wrap_around_is_not_a_gap_and_gaps_across_it_count_right() {
    assert_eq!(gaps([0xffff_fffe, 0xffff_ffff, 0, 1]).count(), 0);
    let found: Vec<Gap> = gaps([0xffff_fffd, 2]).collect();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].lost, 4); // fffffffe, ffffffff, 0, 1
    assert!(!found[0].is_backwards());
}

#[test]
fn repeats_and_backward_steps_are_flagged_not_counted() {
    let mut d = GapDetector::new();
    assert!(d.push(100).is_none());
    let g = d.push(100).unwrap();
    assert!(g.is_backwards());
    assert!(g.to_string().contains("back to 100"), "{g}");
    let g = d.push(90).unwrap();
    assert!(g.is_backwards());
    assert!(d.push(95).is_some());
    assert_eq!(d.total_lost(), 4);
    assert_eq!(d.gap_count(), 3);
    assert_eq!(d.seen(), 4);
}

#[test]
fn scenario_loss_is_found_in_the_file_and_matches_the_footer() {
    let records = common::scenario();
    let (next, footer) = common::scenario_footer(&records);
    let reader = TraceReader::from_bytes(common::trace_bytes(&records, Some((next, footer)))).unwrap();
    let footer_record = *reader.footer_record().unwrap();
    let read = reader.read_all().unwrap();
    let found: Vec<Gap> = gaps(read.iter().chain([&footer_record]).map(|r| r.sequence)).collect();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].after, found[0].next, found[0].lost), (8, 12, 3));
    assert_eq!(u64::from(found[0].lost), footer.records_lost);
}

#[test]
fn the_footer_sequence_reveals_a_loss_at_the_end() {
    let records = common::scenario();
    let last = records.last().unwrap().sequence;
    // The spy created two more records that the ring could not take.
    let footer_seq = last + 3;
    let all = records.iter().map(|r| r.sequence).chain([footer_seq]);
    let found: Vec<Gap> = gaps(all).collect();
    assert_eq!(found.last().unwrap().lost, 2);
}
