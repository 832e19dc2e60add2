//! Results are documents: every measurement writes one schema-versioned JSON object.
//!
//! ```text
//! {
//!   "schema": "tlpx-result", "schema_version": 1,
//!   "kind": "bw" | "lat" | "pio" | "characterize" | "model",
//!   "created": "2026-11-22T10:15:30Z",            UTC, when the run ended
//!   "command": ["tlpx", "bw", "--sizes", "64..4096"],
//!   "parameters": { ... },                          what was asked, after defaults
//!   "environment": { tlpx_version, host_name, kernel, cpu_model, cpus, backend, device,
//!                    pci_address, card, simulated, sim: { socket, link, seed, ... } | null },
//!   "time_mode": "virtual" | "live" | "real_host_time" | "hardware" | null,  the clock that produced the figures
//!   "link": { source: "libpci", generation, lanes, mps, mrrs, rcb, ... } | null,
//!   "model": { link, completion_split } | null,     the pcie-bench model configuration used
//!   "points": [ ... ]  (or "table" + "points" for characterize)
//!   "interrupted": false, "wall_seconds": 1.2, "notes": [ ... ],
//!   "partial": { state, points_done, points_planned }   only when interrupted (absent otherwise)
//!   "simulator_limits": [ { id, concerns, statement } ]   simulator only (absent otherwise)
//! }
//! ```
//!
//! Every set of samples is a [`tlpx_model::stats::Summary`]: count, min, median, mean, p99,
//! p999 (p99.9) and max. Throughputs are payload bytes per second; latencies nanoseconds.
//! **Efficiencies are fractions** (`efficiency`: achieved / model, 1.0 = the model's limit;
//! the text output and the report show them as %), and each one has an `efficiency_meaning`
//! beside it; on the simulator it cannot exceed 1.0 (tlpx-sim paces its link with the model).
//! `simulator_limits` lists what the simulator fixes by construction or cannot model for the
//! figures and knobs of this result (docs/simulator-limits.md); each statement is also in
//! `notes`.
//! `time_mode` says which clock produced the figures: `virtual` (the simulator's
//! deterministic time), `live` (the simulator ran in live time during the run, because this or
//! another client held it: card-time figures are still exact in card cycles, the run is not
//! reproducible; a `LIVE TIME:` note says so too), `real_host_time` (a simulator started with
//! `--host-time real` or `--free-run`: this machine's wall time became card time) or
//! `hardware`; null when no card was opened
//! (`tlpx model` without a device, software-only runs).
//! A document that holds less than its run planned has `"interrupted": true` and `partial`:
//! `state` "interrupted" (stopped by Ctrl-C, SIGTERM or SIGHUP, written at the end with every
//! finished point) or "checkpoint" (written after a finished point while the run went on: a
//! file left so was killed mid-run, or is still being written), and how many points it holds
//! of how many planned.
//! Version 1 may gain fields; a field changing meaning or disappearing bumps the version.
//!
//! The plain-data parts of the envelope (schema, kinds, [`SimLimit`], [`Partial`], the card,
//! link and model records) and the typed reader's deserializer live in the tlpx-results
//! crate; this module adds what needs the running tlpx (the environment's clock, writing).
//!
//! Documents are read back into the types that wrote them ([`AnyResult`], `read.rs`): every
//! body type derives `Deserialize` too. Names the writers pick from fixed tables are
//! `&'static str`, which serde reads only from input that lives as long: `read.rs`'s
//! deserializer interns them. serde sees a `&'static str` field by itself; a struct that holds
//! one only inside a list or another struct says so with
//! `#[serde(bound(deserialize = "'de: 'static"))]`.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, TimeMark, TimeMode};
use tlpx_model::link::LinkConfig;

pub mod diff;
mod kinds;
mod read;
pub use kinds::AnyResult;
pub use read::{check_version, read_value};
pub use tlpx_results::{CardEnvironment, LinkReport, ModelConfig, Partial, SimLimit, KINDS, PARTIAL_STATES, SCHEMA, SCHEMA_VERSION};

/// The machine and card a result was measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Environment {
    pub tlpx_version: String,
    pub host_name: Option<String>,
    /// Kernel name and release, e.g. "Linux 6.1.0-18-amd64".
    pub kernel: Option<String>,
    pub cpu_model: Option<String>,
    pub cpus: usize,
    /// "sim", "vfio", "litepcie"; null when no card was opened (tlpx model without a device).
    pub backend: Option<String>,
    /// The socket path or PCI address of the card.
    pub device: Option<String>,
    pub pci_address: Option<String>,
    pub card: Option<CardEnvironment>,
    /// True when the card is the simulated one: every card-time figure is then simulated.
    pub simulated: bool,
    pub sim: Option<SimEnvironment>,
    /// Other processes' jobs running on the card when the measurement started (a spy capture,
    /// the generator, ...): they share the link, so figures may be lower than the card's own.
    pub perturbed_by: Vec<String>,
    /// What the host reported about its memory: NUMA nodes, the card's node, the IOMMU's
    /// mode, the last-level cache (null in documents older than it, and without a card).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<tlpx_device::host_memory::HostReport>,
    /// Where the kernel put the pages of each DMA buffer the measurement used (move_pages);
    /// absent when it used none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dma_buffers: Vec<tlpx_device::host_memory::BufferPlacement>,
    /// How time ran when the card was opened, and how to tell at the end how it ran during
    /// the measurement (`ResultDoc::time_mode`); None when no card was opened.
    #[serde(skip)]
    pub clock: Option<TimeWatch>,
}

/// The card's time mode at the start of a command, and what reads it again at the end.
#[derive(Debug, Clone)]
pub struct TimeWatch {
    /// The mark when the card was opened.
    pub start: TimeMark,
    /// The simulator's socket (None on hardware): the end's mark is read on a short-lived
    /// connection of its own, so that any command's result can say it.
    pub sim_socket: Option<String>,
    /// This command asked for live time itself (`spy capture`, `top`, `serve`).
    pub holds_live: bool,
    /// The simulator charges the host's wall time as card time (`--host-time real`) or lets
    /// traffic run with nobody waiting (`--free-run`): what would be virtual is not.
    pub real_host_time: bool,
}

impl TimeWatch {
    /// A watch over a real card: time is always the hardware's.
    pub fn hardware() -> TimeWatch {
        TimeWatch { start: TimeMark::Hardware, sim_socket: None, holds_live: false, real_host_time: false }
    }

    /// The mode time ran in from the start until now: `live` when the simulator ran any card
    /// cycle in live time meanwhile. When the simulator cannot be asked any more, the mode
    /// at the start is the best answer there is.
    pub fn mode_until_now(&self) -> TimeMode {
        if self.holds_live {
            return TimeMode::Live;
        }
        let Some(socket) = &self.sim_socket else { return TimeMode::Hardware };
        let mode = match SimDevice::connect_as(socket, "tlpx (time mode)").and_then(|mut s| s.time_mark()) {
            Ok(end) => end.mode_since(&self.start),
            Err(_) => self.start.mode_now(),
        };
        self.not_virtual_if_real(mode)
    }

    /// Virtual time on a simulator that charges real host time is real host time.
    fn not_virtual_if_real(&self, mode: TimeMode) -> TimeMode {
        if mode == TimeMode::Virtual && self.real_host_time {
            TimeMode::RealHostTime
        } else {
            mode
        }
    }

    /// The mode time runs in now, as far as the start knows (for headers printed before the
    /// measurement).
    pub fn mode_at_start(&self) -> TimeMode {
        if self.holds_live {
            TimeMode::Live
        } else {
            self.not_virtual_if_real(self.start.mode_now())
        }
    }
}

/// The note a result carries when it ran in live time (and the text output prints).
pub fn live_time_note(holds_live: bool) -> String {
    let who = if holds_live { "this command asked for it" } else { "another client asked for it" };
    format!(
        "LIVE TIME: the simulator ran in live time during this run ({who}): card time ran continuously, never ahead of wall \
         time, not only while a client waited; card-time figures are still exact in card cycles, but the run is not \
         reproducible (docs/simulator-limits.md)"
    )
}

impl Environment {
    /// The name of the card's clock in text output, so no figure leaves its clock unsaid:
    /// "card time (simulated)" on the simulator ("card time (simulated, live)" when it runs
    /// in live time as the command starts), "card time" on a card.
    pub fn card_clock(&self) -> &'static str {
        match (self.simulated, self.time_mode_at_start()) {
            (true, Some(TimeMode::Live)) => "card time (simulated, live)",
            (true, Some(TimeMode::RealHostTime)) => "card time (simulated, with this host's real time charged)",
            (true, _) => "card time (simulated)",
            (false, _) => "card time",
        }
    }

    /// The time mode as the command starts (None when no card was opened).
    pub fn time_mode_at_start(&self) -> Option<TimeMode> {
        self.clock.as_ref().map(TimeWatch::mode_at_start)
    }

    /// How time runs on the simulator, for headers: "virtual time (deterministic)" or "live
    /// time (...)"; None on hardware and without a card.
    pub fn time_text(&self) -> Option<String> {
        let clock = self.clock.as_ref()?;
        match clock.mode_at_start() {
            TimeMode::Hardware => None,
            TimeMode::Virtual => Some("virtual time (deterministic)".to_string()),
            TimeMode::RealHostTime => Some(
                "real host time (tlpx-sim --host-time real or --free-run: this machine's wall time between messages becomes card time; not reproducible)"
                    .into(),
            ),
            TimeMode::Live if clock.holds_live => {
                Some("live time (this command asks for it: card time runs on its own, never ahead of wall time; not reproducible)".into())
            }
            TimeMode::Live => Some("live time (another client holds it: card time runs on its own; not reproducible)".into()),
        }
    }
}

/// The simulator's own description of what it models.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimEnvironment {
    pub socket: String,
    /// The link model the simulator applies (its own configuration, next to what libpci reads).
    pub link_model: LinkConfig,
    pub seed: u64,
    pub data_width: u32,
    pub clock_hz: u64,
    /// Root-complex latency of a card read and its uniform jitter, ns of card time.
    pub dma_latency_ns: u64,
    pub dma_jitter_ns: u64,
    /// Time also runs with no client waiting (not deterministic).
    pub free_run: bool,
    /// "virtual" (a client's own time costs no card time) or "real" (it is charged as card
    /// time, capped per gap at `host_time_cap_ns`): what host latencies in the figures mean.
    pub host_time: String,
    pub host_time_cap_ns: u64,
    pub sim_version: String,
    /// The board whose hard IP the simulator's config space presented (tlpx-sim --board), and
    /// that IP ("pcie3_ultrascale", "pcie_7x", "generic"); empty in results from before.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub board: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hard_ip: String,
}

impl SimEnvironment {
    /// What a simulator's Hello says, for the result.
    pub fn from_hello(socket: String, hello: &tlpx_device::backends::sim::SimInfo) -> SimEnvironment {
        SimEnvironment {
            socket,
            link_model: hello.link,
            seed: hello.seed,
            data_width: hello.data_width,
            clock_hz: hello.card_clock_hz,
            dma_latency_ns: hello.dma_latency_ns,
            dma_jitter_ns: hello.dma_jitter_ns,
            free_run: hello.free_run,
            host_time: format!("{:?}", hello.host_time).to_lowercase(),
            host_time_cap_ns: hello.host_time_cap_ns,
            sim_version: hello.sim_version.clone(),
            board: hello.board.clone(),
            hard_ip: hello.hard_ip.clone(),
        }
    }
}

/// One result document; `body` is flattened next to the common fields (its `points`, ...).
#[derive(Debug, Serialize, Deserialize)]
pub struct ResultDoc<P: Serialize, B: Serialize> {
    pub schema: &'static str,
    pub schema_version: u32,
    pub kind: &'static str,
    pub created: String,
    pub command: Vec<String>,
    pub parameters: P,
    pub environment: Environment,
    /// The clock that produced the figures: virtual, live or hardware (module documentation);
    /// null when no card was opened.
    pub time_mode: Option<TimeMode>,
    pub link: Option<LinkReport>,
    pub model: Option<ModelConfig>,
    #[serde(flatten)]
    pub body: B,
    pub interrupted: bool,
    /// With `interrupted`: how much of the run the document holds ([`Partial`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
    pub wall_seconds: f64,
    pub notes: Vec<String>,
    /// Host CPU counters of the run (`--pmc`); absent without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pmc: Vec<crate::pmc::PmcRecord>,
    /// What the simulator fixes by construction or cannot model for these figures and knobs
    /// (only on the simulator; absent otherwise). Add with [`ResultDoc::add_sim_limit`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub simulator_limits: Vec<SimLimit>,
}

impl<P: Serialize, B: Serialize> ResultDoc<P, B> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: &'static str,
        parameters: P,
        environment: Environment,
        link: Option<LinkReport>,
        model: Option<ModelConfig>,
        body: B,
        wall_seconds: f64,
        notes: Vec<String>,
    ) -> Self {
        debug_assert!(KINDS.contains(&kind));
        // The document is made when the run has ended: the mode it ran in is known now.
        let time_mode = environment.clock.as_ref().map(TimeWatch::mode_until_now);
        let mut notes = notes;
        if time_mode == Some(TimeMode::Live) {
            let holds = environment.clock.as_ref().is_some_and(|c| c.holds_live);
            let note = live_time_note(holds);
            if environment.time_mode_at_start() != Some(TimeMode::Live) {
                // Live time began after the header said virtual: the text output says it too.
                eprintln!("tlpx: note: {note}");
            }
            notes.push(note);
        }
        ResultDoc {
            schema: SCHEMA,
            schema_version: SCHEMA_VERSION,
            kind,
            created: utc_now().0,
            command: std::env::args().collect(),
            parameters,
            environment,
            time_mode,
            link,
            model,
            body,
            interrupted: false,
            partial: None,
            wall_seconds,
            notes,
            pmc: crate::pmc::records(),
            simulator_limits: Vec::new(),
        }
    }

    /// Records a simulator limit in `simulator_limits` and its statement in `notes` (once).
    pub fn add_sim_limit(&mut self, limit: SimLimit) {
        let note = limit.note();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
        if !self.simulator_limits.contains(&limit) {
            self.simulator_limits.push(limit);
        }
    }
}

impl<P: Serialize, B: Serialize> ResultDoc<P, B> {
    /// Records that the run stopped on a signal with `done` of its `planned` points finished.
    pub fn stopped_at(&mut self, done: usize, planned: usize) {
        self.interrupted = true;
        self.partial = Some(Partial { state: "interrupted", points_done: done, points_planned: planned });
    }

    /// The end of a measuring command: marks the document interrupted after Ctrl-C, writes it
    /// to `output` (if given) and to stdout (with `--json`), and gives the exit status:
    /// 130 after Ctrl-C, 1 when `failed` (a check of the run did not pass), 0 otherwise.
    pub fn emit(mut self, output: Option<&Path>, json: bool, failed: bool) -> anyhow::Result<std::process::ExitCode> {
        self.interrupted |= crate::progress::stop_requested();
        if let Some(path) = output {
            write_json(path, &self)?;
        }
        if json {
            crate::output::print_json(&self)?;
        }
        Ok(if self.interrupted {
            std::process::ExitCode::from(crate::progress::INTERRUPTED_EXIT)
        } else if failed {
            std::process::ExitCode::from(crate::exit::CHECK_FAILED)
        } else {
            std::process::ExitCode::SUCCESS
        })
    }
}

/// Writes `doc` as pretty JSON to `path` (parent folders created) and says so on stderr.
/// The document is checked against the schema first ([`check_document`]).
pub fn write_json<T: Serialize>(path: &Path, doc: &T) -> anyhow::Result<()> {
    write_value(path, &serde_json::to_value(doc)?)?;
    eprintln!("tlpx: wrote {}", path.display());
    Ok(())
}

/// Writes a result document (checked first) to `path`, atomically: into a temporary file
/// beside it, then renamed over it, so that a process killed in the middle of a write (a
/// checkpoint's, crate::checkpoint) leaves the previous document whole, never half of one.
pub fn write_value(path: &Path, value: &Value) -> anyhow::Result<()> {
    if let Err(e) = check_document(value) {
        anyhow::bail!("internal error: the result document does not follow schema {SCHEMA} v{SCHEMA_VERSION}: {e}");
    }
    // Checked again here (the command checked before measuring): the path may have changed.
    crate::args::refuse_non_regular("the result file", path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    let name = path.file_name().map_or_else(|| "result".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, text + "\n").and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("writing the result to {}", path.display()))
}

/// Checks that `v` is a tlpx result document of this schema version: the common fields are
/// there with the right types, and every summary in it has min / median / p99 / p999 / max.
/// Used by the tests, and by anything that reads results back.
pub fn check_document(v: &Value) -> Result<(), String> {
    if v["schema"] != SCHEMA {
        return Err(format!("\"schema\" is {}, expected \"{SCHEMA}\"", v["schema"]));
    }
    if v["schema_version"] != SCHEMA_VERSION {
        return Err(format!("\"schema_version\" is {}, expected {SCHEMA_VERSION}", v["schema_version"]));
    }
    let kind = v["kind"].as_str().ok_or("\"kind\" is missing")?;
    if !KINDS.contains(&kind) {
        return Err(format!("unknown kind {kind:?}"));
    }
    for field in ["created", "command", "parameters", "environment", "notes"] {
        if v.get(field).is_none() {
            return Err(format!("field {field:?} is missing"));
        }
    }
    let env = &v["environment"];
    for field in ["tlpx_version", "host_name", "kernel", "cpu_model", "backend", "device", "simulated", "sim"] {
        if env.get(field).is_none() {
            return Err(format!("environment.{field} is missing"));
        }
    }
    if env["simulated"] == true && env["sim"].get("link_model").is_none() {
        return Err("a simulated result must give environment.sim.link_model".into());
    }
    if env["simulated"] == true && env["sim"].get("host_time").is_none() {
        return Err("a simulated result must give environment.sim.host_time (what host latencies in it mean)".into());
    }
    // Results written before the time mode existed have no `time_mode`; when it is there it
    // must name a clock that fits the environment.
    match v.get("time_mode").map(|m| (m, m.as_str())) {
        None | Some((Value::Null, _)) => {}
        Some((_, Some("virtual" | "live" | "real_host_time"))) if env["simulated"] == true => {}
        Some((_, Some("hardware"))) if env["simulated"] != true => {}
        Some((m, _)) => {
            return Err(format!(
                "time_mode {m} does not fit the environment (simulated: {}): it must be \"virtual\", \"live\" or \"real_host_time\" on the simulator, \"hardware\" on a card",
                env["simulated"]
            ))
        }
    }
    if let Some(limits) = v.get("simulator_limits") {
        if env["simulated"] != true {
            return Err("simulator_limits in a result that is not simulated".into());
        }
        for (i, l) in limits.as_array().ok_or("simulator_limits is not a list")?.iter().enumerate() {
            if !l["id"].is_string() || !l["statement"].is_string() || !l["concerns"].is_array() {
                return Err(format!("simulator_limits[{i}] needs id, concerns and statement"));
            }
        }
    }
    if v.get("link").is_none() {
        return Err("field \"link\" is missing (null when unknown)".into());
    }
    if let Some(p) = v.get("partial") {
        if v["interrupted"] != true {
            return Err("\"partial\" in a document that is not interrupted".into());
        }
        let state = p["state"].as_str().unwrap_or_default();
        if !PARTIAL_STATES.contains(&state) {
            return Err(format!("partial.state is {}, expected one of {PARTIAL_STATES:?}", p["state"]));
        }
        match (p["points_done"].as_u64(), p["points_planned"].as_u64()) {
            (Some(done), Some(planned)) if done <= planned => {}
            _ => return Err("partial needs points_done <= points_planned (whole numbers)".into()),
        }
    }
    if v.get("points").and_then(Value::as_array).is_none() {
        return Err("field \"points\" is missing or not an array".into());
    }
    check_summaries(v, "$")
}

fn check_summaries(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Object(map) => {
            if map.contains_key("median") && map.contains_key("count") {
                for field in ["min", "median", "p99", "p999", "max"] {
                    if !map.get(field).is_some_and(Value::is_number) {
                        return Err(format!("summary {path} has no number {field:?}"));
                    }
                }
            }
            for (k, child) in map {
                check_summaries(child, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                check_summaries(child, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

// Environment --------------------------------------------------------------------------

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// What this machine is, read from /proc (fields are null where it cannot be read).
pub fn machine_environment() -> Environment {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name") || l.starts_with("Model") || l.starts_with("cpu model"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string());
    let kernel = match (read_trimmed("/proc/sys/kernel/ostype"), read_trimmed("/proc/sys/kernel/osrelease")) {
        (Some(t), Some(r)) => Some(format!("{t} {r}")),
        (None, Some(r)) => Some(r),
        _ => None,
    };
    Environment {
        tlpx_version: env!("CARGO_PKG_VERSION").to_string(),
        host_name: read_trimmed("/proc/sys/kernel/hostname"),
        kernel,
        cpu_model,
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        backend: None,
        device: None,
        pci_address: None,
        card: None,
        simulated: false,
        sim: None,
        perturbed_by: Vec::new(),
        host_memory: None,
        dma_buffers: Vec::new(),
        clock: None,
    }
}

// Time ---------------------------------------------------------------------------------

/// Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Formats seconds since the epoch as (RFC 3339 "2026-11-22T10:15:30Z", compact "20261122T101530Z").
pub fn utc_stamp(secs: u64) -> (String, String) {
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let (h, mi, se) = (s / 3600, s / 60 % 60, s % 60);
    (format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z"), format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{se:02}Z"))
}

/// The current UTC time, as [`utc_stamp`] formats it.
pub fn utc_now() -> (String, String) {
    utc_stamp(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_model::link::CompletionSplit;
    use tlpx_model::stats::Summary;

    #[derive(Serialize)]
    struct Body {
        points: Vec<Point>,
    }
    #[derive(Serialize)]
    struct Point {
        size: u64,
        achieved: Summary,
    }

    fn sim_env() -> Environment {
        let mut env = machine_environment();
        env.backend = Some("sim".into());
        env.device = Some("/tmp/x.sock".into());
        env.simulated = true;
        env.sim = Some(SimEnvironment {
            socket: "/tmp/x.sock".into(),
            link_model: LinkConfig::PCIE_BENCH_DEFAULT,
            seed: 7,
            data_width: 256,
            clock_hz: 250_000_000,
            dma_latency_ns: 400,
            dma_jitter_ns: 50,
            free_run: false,
            host_time: "virtual".into(),
            host_time_cap_ns: 10_000_000,
            sim_version: "0.1.0".into(),
            board: "kcu105".into(),
            hard_ip: "pcie3_ultrascale".into(),
        });
        env
    }

    fn doc() -> Value {
        let env = sim_env();
        let link = LinkReport {
            source: "libpci".into(),
            generation: 3,
            lanes: 8,
            speed_gt_s: 8.0,
            mps: 256,
            mrrs: 512,
            rcb: 64,
            max_payload_supported: 512,
        };
        let model = ModelConfig { link: link.model(false).expect("valid"), completion_split: CompletionSplit::Mps };
        let body = Body { points: vec![Point { size: 64, achieved: Summary::of(&[1.0, 2.0, 3.0]).expect("samples") }] };
        let d = ResultDoc::new("bw", serde_json::json!({"sizes": [64]}), env, Some(link), Some(model), body, 0.5, vec![]);
        serde_json::to_value(&d).expect("serialises")
    }

    #[test]
    fn a_document_has_the_schema_fields() {
        let v = doc();
        assert_eq!(v["schema"], "tlpx-result");
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["kind"], "bw");
        assert_eq!(v["link"]["generation"], 3);
        assert_eq!(v["link"]["source"], "libpci");
        assert_eq!(v["model"]["link"]["mps"], 256);
        assert_eq!(v["model"]["completion_split"], "mps");
        assert_eq!(v["environment"]["simulated"], true);
        assert_eq!(v["environment"]["sim"]["seed"], 7);
        assert_eq!(v["environment"]["sim"]["link_model"]["lanes"], 8);
        assert_eq!(v["environment"]["tlpx_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["points"][0]["achieved"]["p999"], 3.0);
        assert!(v["created"].as_str().is_some_and(|s| s.ends_with('Z') && s.len() == 20));
        assert_eq!(check_document(&v), Ok(()));
    }

    #[test]
    fn check_document_finds_what_is_missing() {
        let mut v = doc();
        v["schema_version"] = 2.into();
        assert!(check_document(&v).is_err_and(|e| e.contains("schema_version")));
        let mut v = doc();
        v["points"][0]["achieved"].as_object_mut().expect("object").remove("p99");
        assert!(check_document(&v).is_err_and(|e| e.contains("p99") && e.contains("points[0]")));
        let mut v = doc();
        v["environment"]["sim"] = Value::Null;
        assert!(check_document(&v).is_err_and(|e| e.contains("link_model")));
        let mut v = doc();
        v["kind"] = "nonsense".into();
        assert!(check_document(&v).is_err());
    }

    #[test]
    fn simulator_limits_are_recorded_once_in_both_places_and_only_on_the_simulator() {
        let mut d = ResultDoc::new("bw", serde_json::json!({}), sim_env(), None, None, serde_json::json!({"points": []}), 0.0, vec![]);
        let l = SimLimit::new("x", &["points[].efficiency"], "it cannot exceed 1.0");
        d.add_sim_limit(l.clone());
        d.add_sim_limit(l);
        assert_eq!(d.simulator_limits.len(), 1);
        assert_eq!(d.notes, vec!["SIMULATED: it cannot exceed 1.0".to_string()]);
        let mut v = doc();
        v["simulator_limits"] = serde_json::json!([{ "id": "x", "concerns": [], "statement": "s" }]);
        assert_eq!(check_document(&v), Ok(()));
        v["environment"]["simulated"] = false.into();
        assert!(check_document(&v).is_err_and(|e| e.contains("not simulated")));
        // Without limits the field is absent, as on hardware.
        assert!(doc().get("simulator_limits").is_none());
    }

    #[test]
    fn a_result_records_the_clock_that_produced_it() {
        let make = |env: Environment| {
            let d = ResultDoc::new("bw", serde_json::json!({}), env, None, None, serde_json::json!({"points": []}), 0.0, vec![]);
            serde_json::to_value(&d).expect("serialises")
        };
        // No card opened: null.
        assert_eq!(make(machine_environment())["time_mode"], Value::Null);
        // A real card: hardware, no note.
        let mut hw = machine_environment();
        hw.backend = Some("vfio".into());
        hw.clock = Some(TimeWatch::hardware());
        let v = make(hw);
        assert_eq!(v["time_mode"], "hardware");
        assert_eq!(v["notes"], serde_json::json!([]));
        assert_eq!(check_document(&v), Ok(()));
        // The simulator, read again at the end: a socket nobody answers on leaves the mode at
        // the start (virtual here).
        let mut sim = sim_env();
        sim.clock = Some(TimeWatch {
            start: TimeMark::Simulator { live_cycles: 5, live_clients: 0 },
            sim_socket: Some("/nonexistent/tlpx-test.sock".into()),
            holds_live: false,
            real_host_time: false,
        });
        let v = make(sim.clone());
        assert_eq!(v["time_mode"], "virtual");
        assert_eq!(check_document(&v), Ok(()));
        // A command that holds live time itself: live, with the note, and headers say so.
        sim.clock.as_mut().expect("clock").holds_live = true;
        assert_eq!(sim.card_clock(), "card time (simulated, live)");
        assert!(sim.time_text().is_some_and(|t| t.starts_with("live time (this command asks for it")));
        let v = make(sim);
        assert_eq!(v["time_mode"], "live");
        assert!(v["notes"][0].as_str().is_some_and(|n| n.starts_with("LIVE TIME:") && n.contains("not reproducible")), "{}", v["notes"]);
        assert_eq!(check_document(&v), Ok(()));
    }

    #[test]
    fn check_document_refuses_a_time_mode_that_does_not_fit() {
        let mut v = doc();
        v["time_mode"] = "hardware".into();
        assert!(check_document(&v).is_err_and(|e| e.contains("\"hardware\"") && e.contains("virtual")));
        v["time_mode"] = "sundial".into();
        assert!(check_document(&v).is_err_and(|e| e.contains("sundial")));
        // Documents written before the field existed are still read.
        v.as_object_mut().expect("object").remove("time_mode");
        assert_eq!(check_document(&v), Ok(()));
        v["time_mode"] = "live".into();
        assert_eq!(check_document(&v), Ok(()));
    }

    #[test]
    fn a_partial_document_is_interrupted_and_says_how_much_it_holds() {
        let mut d = ResultDoc::new("bw", serde_json::json!({}), sim_env(), None, None, serde_json::json!({"points": []}), 0.0, vec![]);
        d.stopped_at(2, 5);
        let v = serde_json::to_value(&d).expect("serialises");
        assert_eq!(v["interrupted"], true);
        assert_eq!(v["partial"], serde_json::json!({"state": "interrupted", "points_done": 2, "points_planned": 5}));
        assert_eq!(check_document(&v), Ok(()));
        assert!(doc().get("partial").is_none(), "a whole run has no partial");
        let mut bad = v.clone();
        bad["interrupted"] = false.into();
        assert!(check_document(&bad).is_err_and(|e| e.contains("not interrupted")));
        let mut bad = v.clone();
        bad["partial"]["state"] = "half".into();
        assert!(check_document(&bad).is_err_and(|e| e.contains("partial.state")));
        let mut bad = v;
        bad["partial"]["points_done"] = 6.into();
        assert!(check_document(&bad).is_err_and(|e| e.contains("points_done <= points_planned")));
    }

    #[test]
    fn write_json_creates_folders() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a/b/result.json");
        write_json(&path, &doc()).expect("written");
        let back: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        assert_eq!(check_document(&back), Ok(()));
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0).0, "1970-01-01T00:00:00Z");
        // 2024-02-29T12:34:56Z (a leap day).
        assert_eq!(utc_stamp(1_709_210_096), ("2024-02-29T12:34:56Z".to_string(), "20240229T123456Z".to_string()));
        assert_eq!(utc_stamp(4_102_444_799).0, "2099-12-31T23:59:59Z");
    }
}
