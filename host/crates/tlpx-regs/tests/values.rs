//! The generated field values and the script descriptor's layout, as their users rely on them.

use tlpx_regs::generator::{config, run_descriptor, status};

#[test]
fn every_value_converts_both_ways() {
    for op in config::Operation::ALL {
        assert_eq!(config::Operation::try_from(op.value()), Ok(op));
    }
    for p in config::AddressPattern::ALL {
        assert_eq!(config::AddressPattern::try_from(p.value()), Ok(p));
    }
    assert_eq!(config::AddressPattern::try_from(3), Err(3));
    assert_eq!(status::EndedBy::try_from(0), Err(0));
    assert_eq!(status::EndedBy::Stop.name(), "stop");
}

#[test]
fn values_fit_their_fields() {
    let fits = |v: u32, f: tlpx_regs::Field| u64::from(v) == f.get(f.set(u64::from(v)));
    assert!(config::Operation::ALL.iter().all(|o| fits(o.value(), config::OPERATION)));
    assert!(config::AddressPattern::ALL.iter().all(|p| fits(p.value(), config::ADDRESS_PATTERN)));
    assert!(config::DataPattern::ALL.iter().all(|p| fits(p.value(), config::DATA_PATTERN)));
    assert!(status::EndedBy::ALL.iter().all(|e| fits(e.value(), status::ENDED_BY)));
}

#[test]
fn the_run_descriptor_holds_each_register_in_its_words() {
    use tlpx_regs::generator as g;
    let words = |r: tlpx_regs::Register| (r.size_bits as usize).div_ceil(32) * 4;
    assert_eq!(run_descriptor::TRANSFER_SIZE, run_descriptor::CONFIG + words(g::CONFIG));
    assert_eq!(run_descriptor::DURATION, run_descriptor::COUNT + words(g::COUNT));
    assert_eq!(run_descriptor::LEN, run_descriptor::BASE_OFFSET + 4);
    assert_eq!(run_descriptor::LEN % 4, 0);
}
