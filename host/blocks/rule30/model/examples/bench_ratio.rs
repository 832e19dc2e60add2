//! `cargo run --release -p tlpx-rule30 --example bench_ratio [--json] [LEN_BITS [PACKETS [GENERATIONS]]]`:
//! sw-fast against sw-char, the seed's default shape (1024 bits, 1000 packets x 99 generations).
//! With --json the result is printed as one JSON document (for scripts/bench_rule30.sh).

use std::process::ExitCode;

fn main() -> ExitCode {
    let json = std::env::args().nth(1).as_deref() == Some("--json");
    let args: Vec<usize> = match std::env::args().skip(1 + usize::from(json)).map(|a| a.parse::<usize>()).collect() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: arguments are LEN_BITS PACKETS GENERATIONS, whole numbers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    match tlpx_rule30::bench_ratio(arg(0, 1024), arg(1, 1000), arg(2, 99)) {
        Ok(result) => {
            if json {
                match serde_json::to_string(&result) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                println!("{}", result.summary());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
