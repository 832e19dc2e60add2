//! `tlpx spy convert`: a trace file (or stdin) written again as text, JSON lines, pcapng or
//! VCD, stopping cleanly on a signal.

use super::*;

/// Writes a converter's output `out` (given with `flag`) from the trace `input`: checked as a
/// capture checks its outputs (folder created, not a folder or a special file), refused when it
/// is the input itself (which it would destroy), written into a temporary file beside it and
/// renamed over it only when the conversion succeeded, so a trace that fails half-way leaves
/// no partial output behind (and an older file of that name whole).
pub(super) fn write_converted<T>(
    flag: &str,
    input: &std::path::Path,
    out: &std::path::Path,
    write: impl FnOnce(BufWriter<File>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    check_output_file(flag, out)?;
    if crate::args::same_file(input, out) {
        bail!("{flag} {}: that is the trace being converted ({}); give the output another name", out.display(), input.display());
    }
    let name = out.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let tmp = out.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let file =
        File::create(&tmp).map(BufWriter::new).with_context(|| format!("{flag} {}: cannot create {}", out.display(), tmp.display()))?;
    // A second Ctrl-C (or SIGTERM) quits at once: it removes the temporary file first.
    progress::partial_output(&tmp);
    let result = write(file).and_then(|v| {
        std::fs::rename(&tmp, out).with_context(|| format!("{flag} {}: cannot rename {} to it", out.display(), tmp.display()))?;
        Ok(v)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    progress::forget_partial(&tmp);
    result
}

/// A trace file's bytes for a conversion that a signal (Ctrl-C, SIGTERM, SIGHUP) coming after
/// it began ends: the next read fails, the conversion stops, its partial output is removed.
pub(super) struct StopOnSignal {
    pub(super) file: File,
    pub(super) signals_at_start: u32,
}

impl std::io::Read for StopOnSignal {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if progress::signals() > self.signals_at_start {
            // Not ErrorKind::Interrupted: read_exact would retry that.
            return Err(std::io::Error::other("stopped by a signal (Ctrl-C, SIGTERM or SIGHUP)"));
        }
        self.file.read(buf)
    }
}

impl std::io::Seek for StopOnSignal {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

/// Opens the trace at `path` for a conversion: a regular file (a trace is read with seeks,
/// from its end too: /dev/zero or a FIFO are refused, not read or waited for without end),
/// read through [`StopOnSignal`].
pub(super) fn open_trace(path: &std::path::Path) -> anyhow::Result<TraceReader<std::io::BufReader<StopOnSignal>>> {
    crate::input::regular_file(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    progress::install_stop_handler();
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let inner = std::io::BufReader::with_capacity(1 << 16, StopOnSignal { file, signals_at_start: progress::signals() });
    TraceReader::new(inner).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// The exit of a conversion that failed: 130 when a signal stopped it (said, no output),
/// else the error.
pub(super) fn conversion_failed(e: anyhow::Error, signals_at_start: u32) -> anyhow::Result<ExitCode> {
    if progress::signals() > signals_at_start {
        eprintln!("tlpx: conversion stopped by a signal; no output was written ({e:#})");
        return Ok(ExitCode::from(progress::INTERRUPTED_EXIT));
    }
    Err(e)
}

/// Converts the trace at `trace` to pcapng at `out`; returns the packets written.
pub(super) fn write_pcapng(trace: &std::path::Path, out: &std::path::Path) -> anyhow::Result<u64> {
    let reader = open_trace(trace)?;
    write_converted("--pcapng", trace, out, |file| {
        tlpx_trace::pcapng::trace_to_pcapng(reader, file).map_err(|e| anyhow!("writing {} from {}: {e}", out.display(), trace.display()))
    })
}

pub(super) fn convert(a: &ConvertArgs, json: bool) -> anyhow::Result<ExitCode> {
    if a.csv.is_none() && a.vcd.is_none() && a.pcapng.is_none() && !a.log {
        bail!("say what to write: --csv OUT, --vcd OUT, --pcapng OUT or --log");
    }
    let signals_at_start = progress::signals();
    match convert_trace(a, json) {
        Ok(code) => Ok(code),
        Err(e) => conversion_failed(e, signals_at_start),
    }
}

pub(super) fn convert_trace(a: &ConvertArgs, json: bool) -> anyhow::Result<ExitCode> {
    let reader = open_trace(&a.file)?;
    let input = &a.file;
    let failed = |e: tlpx_trace::TraceError| anyhow!("{}: {e}", input.display());
    let (what, rows) = if let Some(out) = &a.csv {
        ("CSV", write_converted("--csv", input, out, |f| tlpx_trace::csv::trace_to_csv(reader, f).map_err(failed))?)
    } else if let Some(out) = &a.vcd {
        ("VCD", write_converted("--vcd", input, out, |f| tlpx_trace::vcd::trace_to_vcd(reader, f).map_err(failed))?)
    } else if let Some(out) = &a.pcapng {
        ("pcapng", write_converted("--pcapng", input, out, |f| tlpx_trace::pcapng::trace_to_pcapng(reader, f).map_err(failed))?)
    } else if a.log {
        let clock = reader.clock_hz();
        let footer = reader.footer_record().copied();
        let names = tlpx_trace::Bar0Names::from_header(reader.header());
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", tlpx_trace::log_title())?;
        // In time order across directions, within the bounded window of TimeSorter.
        let mut entries = tlpx_trace::EntryBuilder::new();
        let mut sorter = tlpx_trace::log::TimeSorter::new();
        let mut previous: Option<Record> = None;
        let mut rows = 0;
        for record in reader {
            let record = record.map_err(|e| anyhow!("{}: {e}", a.file.display()))?;
            if let Some(info) = entries.push(record) {
                rows += 1;
                tlpx_trace::log::write_sorted(&mut out, sorter.push(info), &mut previous, clock, names.as_ref())?;
            }
        }
        if let Some(info) = entries.finish(footer.map(|f| f.sequence)) {
            rows += 1;
            tlpx_trace::log::write_sorted(&mut out, sorter.push(info), &mut previous, clock, names.as_ref())?;
        }
        tlpx_trace::log::write_sorted(&mut out, sorter.finish(), &mut previous, clock, names.as_ref())?;
        if let Some(f) = footer {
            let lost = entries.end_gap(f.sequence);
            if lost > 0 {
                writeln!(out, "{:>12}  *** {lost} record{} lost at the end of the capture", "", if lost == 1 { "" } else { "s" })?;
            }
            writeln!(out, "{}", tlpx_trace::log_line(&f, previous.as_ref(), clock))?;
        } else {
            writeln!(out, "{:>12}  (no footer: the capture did not end cleanly)", "")?;
        }
        ("log", rows)
    } else {
        bail!("say what to write: --csv OUT, --vcd OUT, --pcapng OUT or --log");
    };
    if json {
        print_json(&serde_json::json!({ "format": what, "rows": rows }))?;
    } else if !a.log {
        let unit = match what {
            "pcapng" => "pcapng packets",
            "VCD" => "VCD records",
            _ => "CSV rows",
        };
        eprintln!("{rows} {unit} written");
    }
    Ok(ExitCode::SUCCESS)
}
