//! Prints `PATH: OK` or `PATH: BAD reason` for each script image given, as
//! `tlpx_script::image::decode` judges it (for the register map without the CPU, which the
//! compiler writes).
fn main() {
    for path in std::env::args().skip(1) {
        let image = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        match tlpx_script::image::decode(&image, tlpx_regs::MAP_HASH) {
            Ok(_) => println!("{path}: OK"),
            Err(e) => println!("{path}: BAD {e}"),
        }
    }
}

