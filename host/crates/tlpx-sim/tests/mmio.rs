//! MMIO, config space and raw TLPs against the real card in a real tlpx-sim process.
//!
//!   test ──SimDevice──► socket ──► tlpx-sim (root complex + link) ──TLPs──► libtlpxcard.so
//!
//! Each test starts its own sim on a temporary socket, so tests run in parallel.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{Sim, MAGIC};
use tlpx_device::{Device, DeviceError, Width};
use tlpx_sim_protocol::tlp;

const SCRATCH: u64 = tlpx_regs::ident::SCRATCH.offset;

#[test]
fn ident_magic_reads_over_mmio() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    let hello = dev.hello().clone();
    assert_eq!(hello.data_width, 64);
    assert_eq!(hello.bar_sizes[0], Some(1 << 20));
    assert!(hello.card_build_info.contains("map_hash"), "{}", hello.card_build_info);
    let hash = dev.bar_read(0, tlpx_regs::ident::MAP_HASH.offset, Width::W32).unwrap();
    assert_eq!(hash, u64::from(tlpx_regs::MAP_HASH));
    sim.shutdown();
}

#[test]
fn reads_of_every_width_see_the_magic() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let bytes = MAGIC.to_le_bytes();
    for (i, b) in bytes.iter().enumerate() {
        assert_eq!(dev.bar_read(0, i as u64, Width::W8).unwrap(), u64::from(*b), "byte {i}");
    }
    assert_eq!(dev.bar_read(0, 0, Width::W16).unwrap(), u64::from(MAGIC & 0xFFFF));
    assert_eq!(dev.bar_read(0, 2, Width::W16).unwrap(), u64::from(MAGIC >> 16));
    let version = dev.bar_read(0, 4, Width::W32).unwrap();
    assert_eq!(dev.bar_read(0, 0, Width::W64).unwrap(), u64::from(MAGIC) | (version << 32));
}

#[test]
fn writes_of_every_width_round_trip_through_scratch() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    dev.bar_write(0, SCRATCH, Width::W32, 0x1122_3344).unwrap();
    assert_eq!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0x1122_3344);
    dev.bar_write(0, SCRATCH + 1, Width::W8, 0xAB).unwrap();
    assert_eq!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0x1122_AB44);
    dev.bar_write(0, SCRATCH + 2, Width::W16, 0xCDEF).unwrap();
    assert_eq!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0xCDEF_AB44);
    assert_eq!(dev.bar_read(0, SCRATCH + 3, Width::W8).unwrap(), 0xCD);
    // A 64-bit write covers scratch and the next register (software_irq): write 0 there.
    dev.bar_write(0, SCRATCH, Width::W64, 0x0000_0000_5A5A_A5A5).unwrap();
    assert_eq!(dev.bar_read(0, SCRATCH, Width::W64).unwrap() & 0xFFFF_FFFF, 0x5A5A_A5A5);
}

#[test]
fn bad_mmio_is_refused_before_reaching_the_card() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let e = dev.bar_read(0, 2, Width::W32).unwrap_err();
    assert!(matches!(e, DeviceError::InvalidArgument(_)) && e.to_string().contains("aligned"), "{e}");
    let e = dev.bar_read(0, 1 << 20, Width::W32).unwrap_err();
    assert!(e.to_string().contains("outside BAR0"), "{e}");
    let e = dev.bar_write(2, 0, Width::W32, 0).unwrap_err();
    assert!(e.to_string().contains("BAR2"), "{e}");
    assert_eq!(dev.stats().unwrap().host_to_card.tlps, 0);
}

#[test]
fn injected_mrd64_and_cfgrd0_get_unsupported_request() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let inj = dev.try_as_tlp_injector().unwrap();
    let mrd64 = tlp::mem_read(0x0000, 0x17, 0xF000_0000, 1, 0xF, 0, true);
    let cpl = inj.inject_tlp(&mrd64, Duration::from_micros(100)).unwrap().expect("a completion");
    assert_eq!(tlp::kind(cpl[0]), tlp::Kind::Cpl, "{cpl:x?}");
    assert_eq!(tlp::cpl_status(cpl[1]), tlp::CPL_UR, "{cpl:x?}");
    assert_eq!(tlp::cpl_tag(cpl[2]), 0x17, "the client's tag comes back");
    let cfg = tlp::cfg_read0(0x0000, 0x21, 0x0100, 0);
    let cpl = inj.inject_tlp(&cfg, Duration::from_micros(100)).unwrap().expect("a completion");
    assert_eq!(tlp::cpl_status(cpl[1]), tlp::CPL_UR, "{cpl:x?}");
    assert_eq!(tlp::cpl_tag(cpl[2]), 0x21);
    // The card is still fine.
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    let ur = dev.bar_read(0, tlpx_regs::request_path::UR_SENT.offset, Width::W32).unwrap();
    assert!(ur >= 2, "ur_sent = {ur}");
}

#[test]
fn injected_mwr64_gets_no_completion_and_the_sim_stays_healthy() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let mwr64 = tlp::mem_write(0, 0, 0xF000_0018, 0xF, 0, &[0xDEAD_BEEF], true);
    let r = dev.try_as_tlp_injector().unwrap().inject_tlp(&mwr64, Duration::from_micros(100)).unwrap();
    assert_eq!(r, None);
    assert_ne!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0xDEAD_BEEF, "MWr64 must not execute");
    let dropped = dev.bar_read(0, tlpx_regs::request_path::POSTED_DROPPED.offset, Width::W32).unwrap();
    assert_eq!(dropped, 1);
    let s = dev.stats().unwrap();
    assert_eq!(s.unexpected_completions, 0);
    assert_eq!(s.host_to_card.by_type.get("MWr64"), Some(&1));
}

#[test]
fn malformed_injected_tlps_are_clear_errors() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let mut mwr = tlp::mem_write(0, 0, 0xF000_0018, 0xF, 0, &[1, 2], false);
    mwr.pop();
    let e = dev.try_as_tlp_injector().unwrap().inject_tlp(&mwr, Duration::from_micros(10)).unwrap_err();
    assert!(e.to_string().contains("4 DWs were given"), "{e}");
}

#[test]
fn corrupt_read_flips_the_map_hash() {
    let sim = Sim::start(&["--corrupt-read", "0xc:0xffffffff"]);
    let mut dev = sim.connect();
    let hash = dev.bar_read(0, 0xc, Width::W32).unwrap();
    assert_eq!(hash, u64::from(!tlpx_regs::MAP_HASH));
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
}

#[test]
fn config_space_reads_writes_and_dump() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let id = dev.config_read(0, 4).unwrap();
    assert_eq!(id, vec![0xEE, 0x10, 0x01, 0x7C]);
    let dump_path = dev.hello().config_dump_path.clone();
    let dump = std::fs::read_to_string(&dump_path).unwrap();
    assert!(dump.starts_with("0000:01:00.0"), "{dump}");
    // Memory space off: MMIO is refused with a clear message; back on: works.
    dev.config_write(4, &[0x04, 0x00]).unwrap();
    let e = dev.bar_read(0, 0, Width::W32).unwrap_err();
    assert!(e.to_string().contains("memory space"), "{e}");
    let dump = std::fs::read_to_string(&dump_path).unwrap();
    assert!(dump.contains("\n00: ee 10 01 7c 04 00"), "{dump}");
    dev.config_write(4, &[0x06, 0x00]).unwrap();
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    let e = dev.config_read(4095, 4).unwrap_err();
    assert!(e.to_string().contains("0xfff"), "{e}");
}

#[test]
fn idle_advances_card_time_and_the_cycle_counter() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let lo = tlpx_regs::timebase::CYCLES_LO.offset;
    let c0 = dev.bar_read(0, lo, Width::W32).unwrap();
    let n0 = dev.card_cycle().unwrap();
    dev.idle(Duration::from_micros(100)).unwrap();
    let n1 = dev.card_cycle().unwrap();
    assert_eq!(n1 - n0, 12_500);
    let c1 = dev.bar_read(0, lo, Width::W32).unwrap();
    let d = c1.wrapping_sub(c0) & 0xFFFF_FFFF;
    assert!((12_500..12_700).contains(&d), "card counter advanced {d}");
    // Without waiting, no time passes: two stamps of the same read sequence differ only by
    // the round trips.
    std::thread::sleep(Duration::from_millis(50));
    let (_, t0) = dev.bar_read_stamped(0, 0, Width::W32).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let (_, t1) = dev.bar_read_stamped(0, 0, Width::W32).unwrap();
    assert!(t1 - t0 < 100, "{t0} -> {t1}");
}
