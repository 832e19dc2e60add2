//! `tlpx script`: the exerciser script language (docs/firmware.md).
//!
//! ```text
//!  check FILE              compile, print the program's summary or every error (file:line:col: reason)
//!  compile FILE -o OUT     write the binary image the card's soft CPU runs (--disassemble: the listing too)
//! ```
//!
//! Both work without a card: the register names come from the map this tlpx was built with.
//! Exit status 0 when the script compiles, 2 when it does not (or the file cannot be read).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use tlpx_script::{lex::parse_clock, Diagnostic, Options, Program};

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Compile a script and print its summary, or its errors (exit 2).
    Check(Source),
    /// Compile a script into the binary image the card's soft CPU interprets.
    Compile {
        #[command(flatten)]
        source: Source,
        /// Where to write the image.
        #[arg(short = 'o', long = "output", value_name = "OUT.bin")]
        output: PathBuf,
        /// Also print the image's listing (instructions, DMA descriptors, events, result slots).
        #[arg(long)]
        disassemble: bool,
    },
}

#[derive(Debug, Args)]
struct Source {
    /// The script (.tlpxs).
    file: PathBuf,
    /// Card clock the script's times (ns, us, ms, s) are converted with, e.g. 125MHz, 250MHz.
    #[arg(long, default_value = "125MHz")]
    clock: String,
}

#[derive(Serialize)]
struct CheckDoc<'a> {
    file: String,
    ok: bool,
    errors: Vec<ErrorDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<&'a Program>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_bytes: Option<usize>,
}

#[derive(Serialize)]
struct ErrorDoc {
    line: usize,
    col: usize,
    message: String,
}

fn load(source: &Source) -> anyhow::Result<(String, Result<Program, Vec<Diagnostic>>)> {
    let clock_hz = parse_clock(&source.clock).map_err(|e| anyhow::anyhow!("--clock: {e}"))?;
    let text = std::fs::read(&source.file).with_context(|| format!("cannot read script {}", source.file.display()))?;
    let text = String::from_utf8(text).map_err(|e| anyhow::anyhow!("script {} is not UTF-8 text (byte {})", source.file.display(), e.utf8_error().valid_up_to()))?;
    Ok((source.file.display().to_string(), tlpx_script::compile(&text, &Options { clock_hz })))
}

fn print_errors(file: &str, errors: &[Diagnostic]) {
    for d in errors {
        eprintln!("{}", d.render(file));
    }
    eprintln!("{file}: {} error(s); the script was not compiled", errors.len());
}

pub fn run(cmd: &Cmd, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Check(source) => {
            let (file, result) = load(source)?;
            if json {
                let (errors, program) = match &result {
                    Ok(p) => (Vec::new(), Some(p)),
                    Err(ds) => (ds.iter().map(|d| ErrorDoc { line: d.line, col: d.col, message: d.message.clone() }).collect(), None),
                };
                let doc = CheckDoc { file, ok: program.is_some(), errors, image_bytes: program.map(|p| p.encode().len()), program };
                println!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(2) });
            }
            match result {
                Ok(p) => {
                    println!("{file}: ok: {}", tlpx_script::summary(&p));
                    Ok(ExitCode::SUCCESS)
                }
                Err(errors) => {
                    print_errors(&file, &errors);
                    Ok(ExitCode::from(2))
                }
            }
        }
        Action::Compile { source, output, disassemble } => {
            let (file, result) = load(source)?;
            let program = match result {
                Ok(p) => p,
                Err(errors) => {
                    print_errors(&file, &errors);
                    return Ok(ExitCode::from(2));
                }
            };
            let image = program.encode();
            // the image must read back as the same program, as the card will read it
            let back = tlpx_script::decode(&image, tlpx_regs::MAP_HASH).map_err(|e| anyhow::anyhow!("internal: the image does not decode: {e}"))?;
            anyhow::ensure!(back == program, "internal: the image decodes to another program");
            write_file(output, &image)?;
            if *disassemble {
                print!("{}", tlpx_script::disassemble(&program));
            }
            if json {
                println!("{}", serde_json::json!({ "file": file, "output": output.display().to_string(), "image_bytes": image.len() }));
            } else {
                println!("{file}: wrote {} ({} bytes): {}", output.display(), image.len(), tlpx_script::summary(&program));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}
