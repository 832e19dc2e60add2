//! Prints `PATH: OK` or `PATH: BAD reason` for each script image given, as
//! `tlpx_script::image::decode` judges it (for the register map without the CPU, which the
//! compiler writes).
fn main() {
    for path in std::env::args().skip(1) {
        let image = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        match tlpx_script::image::decode(&image, tlpx_regs_hash()) {
            Ok(_) => println!("{path}: OK"),
            Err(e) => println!("{path}: BAD {e}"),
        }
    }
}

fn tlpx_regs_hash() -> u32 {
    0xa2e6_1fdd // tlpx_regs::MAP_HASH (the compiler's); the firmware also accepts it on the CPU card
}
