//! The script language end to end: exact bytes, round trips, every error class with its
//! line:col, corrupt images refused, the example scripts, and no panic on any input.

use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tlpx_script::image::{self, crc32, CmpOp, Insn, SlotKind, HEADER_LEN};
use tlpx_script::{compile, decode, disassemble, Diagnostic, Options, Program};

const HASH: u32 = tlpx_regs::MAP_HASH;

fn ok(src: &str) -> Program {
    match compile(src, &Options::default()) {
        Ok(p) => p,
        Err(e) => panic!("script should compile:\n{src}\nerrors: {e:?}"),
    }
}

fn errors(src: &str) -> Vec<Diagnostic> {
    match compile(src, &Options::default()) {
        Ok(p) => panic!("script should fail:\n{src}\nprogram: {p:?}"),
        Err(e) => e,
    }
}

/// The only error of `src`: (line, col, message).
fn one_error(src: &str) -> (usize, usize, String) {
    let e = errors(src);
    assert_eq!(e.len(), 1, "one error expected for {src:?}: {e:?}");
    (e[0].line, e[0].col, e[0].message.clone())
}

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../../firmware/scripts");
    let mut out = Vec::new();
    for name in ["pamette.tlpxs", "burst_torture.tlpxs"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name.to_string(), text));
    }
    out
}

#[test]
fn crc32_is_zlibs() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn exact_image_of_a_small_program() {
    let p = ok("mark a   # a comment\n\nwait 8 cycles\n");
    let image = p.encode();
    #[rustfmt::skip]
    let body: Vec<u8> = vec![
        // mark slot 0
        0x08, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        // wait 8 cycles (no slot: 0xffff)
        0x04, 0x00, 0xff, 0xff, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        // end
        0x00, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        // slot 0: kind mark, pad, line 1, name at 0
        0x01, 0x00, 0x01, 0x00, 0, 0, 0, 0,
        // strings: "a\0" padded to 4
        b'a', 0, 0, 0,
    ];
    let mut header = Vec::new();
    header.extend_from_slice(b"TLXS");
    header.extend_from_slice(&[1, 0, 48, 0]); // version 1, header 48 bytes
    header.extend_from_slice(&HASH.to_le_bytes());
    header.extend_from_slice(&[0x40, 0x59, 0x73, 0x07]); // 125 000 000 Hz
    header.extend_from_slice(&[3, 0, 0, 0]); // 3 instructions
    header.extend_from_slice(&[0, 0, 0, 0]); // 0 DMA descriptors, 0 events
    header.extend_from_slice(&[1, 0, 0, 0]); // 1 slot, loop depth 0
    header.extend_from_slice(&[2, 0, 0, 0]); // 2 string bytes
    header.extend_from_slice(&[84, 0, 0, 0]); // body length
    header.extend_from_slice(&crc32(&body).to_le_bytes());
    header.extend_from_slice(&[0; 8]); // buffer 0, reserved
    assert_eq!(header.len(), HEADER_LEN);
    assert_eq!(image[..HEADER_LEN], header[..], "header");
    assert_eq!(image[HEADER_LEN..], body[..], "body");
}

#[test]
fn a_dma_descriptor_is_the_generators_registers() {
    let p = ok("dma read size=4KiB count=16 outstanding=8 request=256 payload=128 window=64KiB offset=4 base=0x10000 pattern=prbs seed=9 relaxed idle=80ns timeout=1us limit=2ms -> r\n");
    assert_eq!(p.dmas.len(), 1);
    let d = p.dmas[0];
    use tlpx_regs::generator::config as c;
    let cfg = u64::from(d.config);
    assert_eq!(c::OPERATION.get(cfg), 0);
    assert_eq!(c::DATA_PATTERN.get(cfg), 1);
    assert_eq!(c::RELAXED_ORDERING.get(cfg), 1);
    assert_eq!(c::CHECK_DATA.get(cfg), 1);
    assert_eq!(c::FLUSH.get(cfg), 1);
    assert_eq!((d.transfer_size, d.count, d.duration), (4096, 16, 0));
    assert_eq!((d.request_size_log2, d.payload_size_log2, d.max_outstanding), (8, 7, 8));
    // offset + size = 4100 -> stride 8 KiB
    assert_eq!((d.window_mask, d.stride_log2, d.offset, d.base_offset), (0xFFFF, 13, 4, 0x10000));
    assert_eq!((d.seed, d.idle_cycles, d.timeout), (9, 10, 125)); // 80 ns = 10 cycles, 1 us = 125
    assert_eq!(p.insns[0], Insn::Dma { desc: 0, slot: Some(0), nowait: false, limit_cycles: 250_000 });
    assert_eq!(p.buffer_len, 0x10000 + 0x10000);
    // writeread never flushes (as generator.rs)
    let p = ok("dma writeread size=64 count=1 flush=on\n");
    assert_eq!(c::FLUSH.get(u64::from(p.dmas[0].config)), 0);
    assert_eq!(c::OPERATION.get(u64::from(p.dmas[0].config)), 3);
}

#[test]
fn every_statement_compiles_to_its_instructions() {
    let p = ok("\
let N = 3
poke spy.control 0x3
poke 0x3800 1
poke generator.count 0x1_0000_0000
peek generator.cycles -> cyc
wait 1us
wait 10 cycles
loop N {
  loop 2 {
    mark m
  }
}
wait event generator.done | spy.status[1] timeout 2ms -> ev
assert cyc & 0xff != 7
compare ev <= 1ms -> quick
");
    let i = &p.insns;
    assert_eq!(i[0], Insn::Poke { offset: 0x3800, words: 1, value: 3 });
    assert_eq!(i[1], Insn::Poke { offset: 0x3800, words: 1, value: 1 });
    assert_eq!(i[2], Insn::Poke { offset: 0x280c, words: 2, value: 1 << 32 });
    assert_eq!(i[3], Insn::Peek { offset: 0x284c, words: 2, slot: 0 });
    assert_eq!(i[4], Insn::Wait { cycles: 125 });
    assert_eq!(i[5], Insn::Wait { cycles: 10 });
    assert_eq!(i[6], Insn::Loop { count: 3 });
    assert_eq!(i[7], Insn::Loop { count: 2 });
    assert_eq!(i[8], Insn::Mark { slot: 1 });
    assert_eq!(i[9], Insn::EndLoop { target: 8 });
    assert_eq!(i[10], Insn::EndLoop { target: 7 });
    assert_eq!(i[11], Insn::WaitEvent { mask: 0b11, timeout_cycles: 250_000, slot: Some(2) });
    assert_eq!(i[12], Insn::Check { op: CmpOp::Ne, stop: true, slot: 3, source: 0, constant: 7, mask: 0xff });
    assert_eq!(i[13], Insn::Check { op: CmpOp::Le, stop: false, slot: 4, source: 2, constant: 125_000, mask: u64::MAX });
    assert_eq!(i[14], Insn::End);
    assert_eq!(p.max_loop_depth, 2);
    assert_eq!(p.events, vec![image::Event { offset: 0x2848, bit: 1 }, image::Event { offset: 0x3868, bit: 1 }]);
    let kinds: Vec<SlotKind> = p.slots.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [SlotKind::Peek, SlotKind::Mark, SlotKind::Event, SlotKind::Check, SlotKind::Check]);
    assert_eq!(p.slots[3].name, "cyc & 0xff != 7");
    assert_eq!(p.slots[1].line, 10);
    // an assert on a register peeks it first
    let p = ok("assert generator.err_ur == 0\n");
    assert_eq!(p.insns[0], Insn::Peek { offset: 0x289c, words: 1, slot: 0 });
    assert!(matches!(p.insns[1], Insn::Check { source: 0, slot: 1, stop: true, .. }));
    // the clock option converts times
    let p = compile("wait 1us\n", &Options { clock_hz: 250_000_000 }).expect("compiles");
    assert_eq!(p.insns[0], Insn::Wait { cycles: 250 });
    assert_eq!(p.clock_hz, 250_000_000);
}

#[test]
fn round_trip_compile_decode_same_program() {
    let mut sources: Vec<String> = examples().into_iter().map(|(_, t)| t).collect();
    sources.push("mark only\n".to_string());
    sources.push("loop 2 {\n loop 3 {\n  loop 4 {\n   wait 1 cycles\n  }\n }\n}\n".to_string());
    for src in sources {
        let p = ok(&src);
        let image = p.encode();
        let back = decode(&image, HASH).unwrap_or_else(|e| panic!("decode: {e}"));
        assert_eq!(back, p);
        assert_eq!(back.encode(), image);
        assert!(!disassemble(&back).is_empty());
    }
}

#[test]
fn examples_compile_and_do_what_they_say() {
    for (name, text) in examples() {
        let p = compile(&text, &Options::default()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let dma_runs = p.insns.iter().filter(|i| matches!(i, Insn::Dma { .. })).count();
        let asserts = p.insns.iter().filter(|i| matches!(i, Insn::Check { stop: true, .. })).count();
        match name.as_str() {
            "pamette.tlpxs" => {
                // 11 sizes 4 B .. 4 KiB, write and read, plus two latency points
                assert_eq!(dma_runs, 24, "{name}");
                let sizes: Vec<u32> = p.dmas.iter().map(|d| d.transfer_size).collect();
                for s in [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096] {
                    assert_eq!(sizes.iter().filter(|&&x| x == s).count(), if s == 64 || s == 4096 { 3 } else { 2 }, "size {s}");
                }
                // a mark before and after every sized burst
                assert_eq!(p.slots.iter().filter(|s| s.kind == SlotKind::Mark).count(), 2 * 24 + 2);
                assert!(asserts >= 4);
            }
            _ => {
                assert!(p.max_loop_depth >= 1);
                assert!(p.dmas.iter().any(|d| u64::from(d.max_outstanding) == tlpx_regs::constants::GENERATOR_TAGS), "every tag in flight");
                assert!(p.dmas.iter().any(|d| d.offset % 2 == 1 && d.transfer_size % 2 == 1), "odd sizes at odd offsets");
                assert!(p.dmas.iter().any(|d| d.config & 3 == 2), "interleaved reads and writes");
                let err_ur = tlpx_regs::generator::ERR_UR.offset as u32;
                assert!(p.insns.iter().any(|i| matches!(i, Insn::Peek { offset, .. } if *offset == err_ur)));
                assert!(asserts >= 10);
            }
        }
    }
}

#[test]
fn each_error_class_has_its_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("mark a\npoke spy.contrl 1\n", 2, 6, "unknown register \"spy.contrl\": did you mean \"spy.control\"?"),
        ("peek nope.nothing\n", 1, 6, "unknown register \"nope.nothing\""),
        ("poke ident.magic 1\n", 1, 6, "read-only"),
        ("poke rule30.input 1\n", 1, 6, "1024 bits wide"),
        ("poke pio.read_delay 4096\n", 1, 21, "does not fit pio.read_delay (12 bits"),
        ("poke 0x3802 1\n", 1, 6, "not a multiple of 4"),
        ("poke 0x100000 1\n", 1, 6, "a BAR0 offset must be 0..=1048572"),
        ("wait 100\n", 1, 6, "needs a unit"),
        ("wait 4KB\n", 1, 6, "unknown unit \"KB\""),
        ("wait event generator.dne\n", 1, 12, "did you mean \"generator.done\""),
        ("wait event generator.done timeout 0 cycles\n", 1, 35, "at least one cycle"),
        ("wait event spy.status[40]\n", 1, 23, "must be 0..=23"),
        ("loop 0 {\n}\n", 1, 6, "loop count must be 1..=4294967295"),
        ("loop 2\n", 1, 7, "expected \"{\""),
        ("}\n", 1, 1, "without an open loop"),
        ("\n\nloop 2 {\n", 3, 1, "never closed"),
        ("mark a\nmark a\n", 2, 6, "already defined (line 1)"),
        ("mark spy.x\n", 1, 6, "no dots"),
        ("wat 3\n", 1, 1, "did you mean \"wait\""),
        ("mark a extra\n", 1, 8, "unexpected \"extra\""),
        ("  @\n", 1, 3, "unexpected character '@'"),
        ("dma write count=1\n", 1, 1, "needs size="),
        ("dma write size=4K\n", 1, 1, "count= (transfers) or duration="),
        ("dma wrte size=4\n", 1, 5, "did you mean \"write\""),
        ("dma write size=70000 count=1\n", 1, 16, "1..=65536, not 70000"),
        ("dma read size=64 count=1 outstanding=33\n", 1, 38, "1..=32, not 33"),
        ("dma read size=64 count=1 request=48\n", 1, 34, "power of two"),
        ("dma read size=64 count=1 pattern=prbz\n", 1, 34, "did you mean \"prbs\""),
        ("dma read size=64 count=1 sise=3\n", 1, 26, "unknown DMA parameter \"sise\": did you mean \"size\"?"),
        ("dma read size=64 count=1 count=2\n", 1, 26, "given twice"),
        ("dma read size=4K count=1 window=1K\n", 1, 33, "smaller than one transfer slot"),
        ("dma read size=64 count=1 offset=64\n", 1, 33, "0..=63"),
        ("dma read size=64 count=1 idle=5\n", 1, 31, "needs a unit"),
        ("dma read size=64 count=1 nowait -> r\n", 1, 1, "nowait dma records no cycles"),
        ("assert nothere == 3\n", 1, 8, "unknown result or register \"nothere\""),
        ("let N = 1\nassert N == 3\n", 2, 8, "is a constant"),
        ("mark m\nassert m = 3\n", 2, 10, "expected a comparison"),
        ("compare generator.err_ur == x\n", 1, 29, "not a number nor a let constant"),
        ("compare generator.err_ur == 1 -> c\nassert c == 1\n", 2, 8, "outcome of a check"),
        ("let N = 1\nlet N = 2\n", 2, 5, "already defined"),
        ("wait 99999999999999999999999 s\n", 1, 6, "more than the 18446744073709551615 allowed"),
        ("wait 999999999999999999999999999999999999999 s\n", 1, 6, "too large"),
    ];
    for (src, line, col, needle) in cases {
        let (l, c, m) = one_error(src);
        assert_eq!((l, c), (*line, *col), "{src:?}: {m}");
        assert!(m.contains(needle), "{src:?}: {m:?} should contain {needle:?}");
    }
}

#[test]
fn several_errors_are_reported_at_once() {
    let e = errors("poke spy.contrl 1\nmark ok\nwait 5\ndma read size=0 count=1 outstanding=0\n");
    let at: Vec<(usize, usize)> = e.iter().map(|d| (d.line, d.col)).collect();
    assert_eq!(at, [(1, 6), (3, 6), (4, 15), (4, 37)], "{e:?}");
    assert_eq!(e[0].render("s.tlpxs"), "s.tlpxs:1:6: unknown register \"spy.contrl\": did you mean \"spy.control\"?");
}

#[test]
fn limits_are_errors_not_panics() {
    let deep: String = (0..9).map(|_| "loop 2 {\n").collect::<String>() + &"}\n".repeat(9);
    let e = errors(&deep);
    assert!(e.iter().any(|d| d.line == 9 && d.message.contains("at most 8 deep")), "{e:?}");
    let most: String = (0..image::MAX_SLOTS).map(|i| format!("mark m{i}\n")).collect();
    assert!(compile(&most, &Options::default()).is_ok());
    let too_many: String = (0..image::MAX_SLOTS + 1).map(|i| format!("mark m{i}\n")).collect();
    let e = errors(&too_many);
    assert!(e.iter().any(|d| d.message.contains("more than 4096 results")), "{e:?}");
    let events: String = (0..33).map(|i| format!("wait event pio.read_delay[{}] | generator.seed[{}]\n", i % 12, i % 32)).collect();
    assert!(compile(&events, &Options::default()).is_err());
}

/// The card's script area (0x48000..0x4C000: firmware/src/hw.h, tlpx_device::cpu).
const AREA: usize = 16384;

#[test]
fn a_program_must_fit_the_script_area_with_its_value_table() {
    let small = ok("mark a\nmark b\n");
    let image = small.encode();
    assert_eq!(small.encode_for_area(AREA).expect("fits"), image);
    // exactly: the image padded to 8, then 8 bytes a slot
    let needed = image.len().next_multiple_of(8) + 16;
    assert_eq!(image::area_bytes(image.len(), 2), needed);
    assert!(small.encode_for_area(needed).is_ok());
    let e = small.encode_for_area(needed - 1).expect_err("one byte short");
    assert_eq!(e, tlpx_script::AreaError { image_len: image.len(), slots: 2, needed, area_len: needed - 1 });
    let text = e.to_string();
    assert!(text.contains(&format!("{}-byte image", image.len())) && text.contains(&format!("need {needed} bytes")), "{text}");

    // An image that fits the area alone, but not with its value table: the firmware would
    // refuse it (script.c), so the host does.
    let marks = |n: usize| ok(&(0..n).map(|i| format!("mark m{i}\n")).collect::<String>());
    let p = (1..2000).map(marks).find(|p| p.encode_for_area(AREA).is_err()).expect("a program too large");
    let e = p.encode_for_area(AREA).expect_err("too large");
    assert!(e.image_len <= AREA && e.needed > AREA, "{e}");
    assert!(e.to_string().contains("holds 16384 bytes"), "{e}");
    // the largest program of the compiler's own limits is far beyond the area
    let most: String = (0..image::MAX_SLOTS).map(|i| format!("mark m{i}\n")).collect();
    assert!(ok(&most).encode_for_area(AREA).is_err());
}

fn image_of(src: &str) -> Vec<u8> {
    ok(src).encode()
}

fn refused(image: &[u8], needle: &str) {
    match decode(image, HASH) {
        Ok(_) => panic!("image should be refused ({needle})"),
        Err(e) => assert!(e.0.contains(needle), "{:?} should contain {needle:?}", e.0),
    }
}

/// Re-seals an image's CRC after a change of its body, to reach the checks behind it.
fn reseal(image: &mut [u8]) {
    let crc = crc32(&image[HEADER_LEN..]);
    image[36..40].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn corrupt_images_are_refused_with_a_reason() {
    let good = image_of("loop 2 {\n peek spy.status -> s\n}\nassert s & 2 == 0\n");
    assert!(decode(&good, HASH).is_ok());

    refused(&good[..10], "shorter than its 48-byte header");
    let mut i = good.clone();
    i[0] = b'X';
    refused(&i, "bad magic");
    let mut i = good.clone();
    i[4] = 2;
    refused(&i, "format version 2");
    refused(&good[..good.len() - 4], "header says the body is");
    let mut i = good.clone();
    i.extend_from_slice(&[0; 4]);
    refused(&i, "header says the body is");
    let mut i = good.clone();
    let last = i.len() - 30;
    i[last] ^= 1;
    refused(&i, "CRC-32");
    assert!(decode(&good, HASH ^ 1).is_err_and(|e| e.0.contains("recompile the script")));

    // structure errors behind a valid CRC
    let mut i = good.clone();
    i[HEADER_LEN] = 0x7F; // first opcode
    reseal(&mut i);
    refused(&i, "unknown opcode 0x7f");
    let p = ok("loop 2 {\n peek spy.status -> s\n}\nassert s & 2 == 0\n");
    let end_loop = p.insns.iter().position(|x| matches!(x, Insn::EndLoop { .. })).expect("end loop");
    let mut i = good.clone();
    i[HEADER_LEN + end_loop * 24 + 4] = 0; // jump target 0: not the body
    reseal(&mut i);
    refused(&i, "jumps to 0");
    let mut i = good.clone();
    i[HEADER_LEN + 24 + 2] = 9; // the peek's slot
    reseal(&mut i);
    refused(&i, "result slot 9");
    let mut i = good.clone();
    i[HEADER_LEN + 24 + 4] = 2; // the peek's offset 0x3868 -> 0x3802
    reseal(&mut i);
    refused(&i, "not a multiple of 4");
    let mut i = good.clone();
    let n = p.insns.len();
    i[HEADER_LEN + (n - 1) * 24] = image::op::MARK; // no END at the end
    reseal(&mut i);
    assert!(decode(&i, HASH).is_err());
    let mut i = good.clone();
    i[12] ^= 0xFF; // clock
    i[16] = 200; // instruction count
    refused(&i, "counts make a");
}

fn mutate(rng: &mut ChaCha8Rng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..6) {
        match rng.gen_range(0..4) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] = rng.gen();
            }
            1 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v.remove(i);
            }
            2 => {
                let i = rng.gen_range(0..=v.len());
                v.insert(i, rng.gen());
            }
            _ if !v.is_empty() => {
                let a = rng.gen_range(0..v.len());
                let b = rng.gen_range(a..v.len());
                let chunk = v[a..=b.min(v.len() - 1)].to_vec();
                let at = rng.gen_range(0..=v.len());
                v.splice(at..at, chunk);
            }
            _ => {}
        }
    }
    v
}

#[test]
fn no_panic_on_random_and_mutated_scripts() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x7157);
    let corpus: Vec<Vec<u8>> = examples().into_iter().map(|(_, t)| t.into_bytes()).collect();
    let alphabet: &[u8] = b"dma write read size=count 0x1K4KiBus ms ns cycles loop {}\n#->==!=<>&|[]peek poke spy.control generator.done assert compare let mark wait event timeout 1234567890_.@\t";
    for round in 0..3000 {
        let src: Vec<u8> = if round % 3 == 0 {
            (0..rng.gen_range(0..200)).map(|_| alphabet[rng.gen_range(0..alphabet.len())]).collect()
        } else {
            mutate(&mut rng, &corpus[round % corpus.len()])
        };
        let text = String::from_utf8_lossy(&src);
        match compile(&text, &Options { clock_hz: rng.gen_range(1_000..=u32::MAX) }) {
            Ok(p) => {
                let image = p.encode();
                assert_eq!(decode(&image, HASH).as_ref(), Ok(&p), "round trip of\n{text}");
                let _ = disassemble(&p);
            }
            Err(e) => {
                assert!(!e.is_empty());
                let lines = text.lines().count();
                assert!(e.iter().all(|d| d.line >= 1 && d.line <= lines.max(1) && d.col >= 1 && !d.message.is_empty()), "{e:?}");
            }
        }
    }
}

#[test]
fn no_panic_on_random_and_mutated_images() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x1A6E);
    let corpus: Vec<Vec<u8>> = examples().into_iter().map(|(_, t)| image_of(&t)).collect();
    for round in 0..3000 {
        let mut img = if round % 4 == 0 {
            let mut v = corpus[0][..HEADER_LEN].to_vec();
            v.extend((0..rng.gen_range(0..400)).map(|_| rng.gen::<u8>()));
            v
        } else {
            mutate(&mut rng, &corpus[round % corpus.len()])
        };
        if round % 2 == 0 && img.len() >= HEADER_LEN {
            // fix the length and CRC so the structural checks are reached
            let body = (img.len() - HEADER_LEN) as u32;
            img[32..36].copy_from_slice(&body.to_le_bytes());
            reseal(&mut img);
        }
        if let Ok(p) = decode(&img, HASH) {
            // what decodes re-encodes to the same bytes
            assert_eq!(p.encode(), img);
        }
    }
}
