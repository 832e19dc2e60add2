//! `cargo run --release -p tlpx-rule30 --example bench_ratio [LEN_BITS [PACKETS [GENERATIONS]]]`:
//! sw-fast against sw-char, the seed's default shape (1024 bits, 1000 packets x 99 generations).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<usize> = match std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>())
        .collect()
    {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: arguments are LEN_BITS PACKETS GENERATIONS, whole numbers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    match tlpx_rule30::bench_ratio(arg(0, 1024), arg(1, 1000), arg(2, 99)) {
        Ok(result) => {
            println!("{}", result.summary());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
