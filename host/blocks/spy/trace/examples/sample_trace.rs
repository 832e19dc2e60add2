//! Writes the library's sample scenario as a trace file, then prints it as a log.
//!
//!     cargo run --release -p tlpx-trace --example sample_trace -- /tmp/sample.tlpx
//!
//! Used to seed the fuzzer's corpus and to try the converters without a card.

use std::process::ExitCode;

use tlpx_trace::{log_line, log_title, sample, TraceReader};

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: sample_trace OUTPUT.tlpx");
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::write(&path, sample::scenario_bytes()) {
        eprintln!("writing {}: {e}", path.to_string_lossy());
        return ExitCode::FAILURE;
    }
    let reader = match TraceReader::open(&path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: {e}", path.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    let hz = reader.clock_hz();
    let footer = reader.footer_record().copied();
    println!("{}", log_title());
    let mut previous = None;
    for record in reader {
        match record {
            Ok(r) => {
                println!("{}", log_line(&r, previous.as_ref(), hz));
                previous = Some(r);
            }
            Err(e) => {
                eprintln!("{}: {e}", path.to_string_lossy());
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(f) = footer {
        println!("{}", log_line(&f, previous.as_ref(), hz));
    }
    ExitCode::SUCCESS
}
