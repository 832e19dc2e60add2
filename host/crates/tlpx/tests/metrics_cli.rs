//! `tlpx serve` end to end: the real binary exporting the real tlpx-sim, scraped over TCP.
//!
//!   tlpx bw (traffic) ──► tlpx-sim ◄── tlpx serve (reads registers, sim stats) ──► GET /metrics ◄── test
//!
//! The scrape must be valid text exposition 0.0.4 (HELP and TYPE for every family, names by
//! Prometheus's conventions), counters must only grow and count at least the traffic sent,
//! histograms must be cumulative with +Inf equal to _count, every series must name the card
//! (its sim socket), other paths must be 404, and a bad listen address must be refused with
//! exit status 2 and a message that names it. `promtool` (installed by make setup) checks the
//! scrape too.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::text;

fn tlpx_command(device: &str, args: &[&str]) -> Command {
    let mut c = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")));
    c.arg("--device").arg(device).args(args);
    c
}

/// The lines of a child's output, read by a thread (so a test can wait for one with a timeout).
fn lines_of(output: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// A running `tlpx serve` and the address it printed.
struct Serve {
    child: Child,
    address: String,
}

impl Serve {
    fn start(device: &str, args: &[&str]) -> Serve {
        let mut child = tlpx_command(device, &[&["serve", "--metrics-listen", "127.0.0.1:0"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tlpx serve");
        let rx = lines_of(child.stdout.take().expect("stdout"));
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("tlpx serve prints its URL");
        let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("no URL in {line:?}"));
        let address = url.trim_start_matches("http://").trim_end_matches("/metrics").to_string();
        assert!(!address.ends_with(":0"), "the bound port is printed, not 0: {line}");
        Serve { child, address }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A long-running command exporting its card (`--metrics-listen 127.0.0.1:0`: a port of its
/// own, printed on stderr. A port found free here and handed to the command raced with the
/// other tests' exporters: one of them could bind it first, the command then failed to
/// listen, and the scrape reached the other exporter.) Its stderr is read line by line by a
/// thread: to learn the address, and to show what it said when anything fails.
struct Exporting {
    child: Child,
    address: String,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Exporting {
    fn start(device: &str, args: &[&str]) -> Exporting {
        let mut child = tlpx_command(device, &[&["--metrics-listen", "127.0.0.1:0"], args].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the command");
        let lines = lines_of(child.stderr.take().expect("stderr"));
        let mut seen = Vec::new();
        let address = loop {
            let line = lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("the command printed no metrics URL ({e}); its stderr: {seen:?}"));
            seen.push(line.clone());
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                break url.trim_start_matches("http://").trim_end_matches("/metrics").to_string();
            }
        };
        assert!(!address.ends_with(":0"), "the bound port is printed, not 0: {seen:?}");
        Exporting { child, address, lines, seen }
    }

    fn connect(&self) -> TcpStream {
        TcpStream::connect(&self.address).unwrap_or_else(|e| panic!("connect to {}: {e}; stderr: {:?}", self.address, self.seen))
    }

    /// Waits for the command to end: (its exit status, all it wrote on stderr).
    fn wait(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("the command ends");
        self.seen.extend(self.lines.iter());
        (status, self.seen.join("\n"))
    }
}

/// One HTTP/1.0 request: (status line, headers, body).
fn get(address: &str, path: &str) -> (String, String, String) {
    let s = TcpStream::connect(address).expect("connect to the exporter");
    request(s, address, path)
}

/// One HTTP/1.0 request on a connected stream.
fn request(mut s: TcpStream, address: &str, path: &str) -> (String, String, String) {
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("request");
    let mut response = String::new();
    s.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("head and body");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// A sample: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

impl Sample {
    fn key(&self) -> String {
        format!("{}{:?}", self.name, self.labels)
    }
}

/// Parses a label set `{a="x",b="y\"z"}` (with the exposition format's escapes).
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'), "label {name} opens with a quote in {s}");
        let mut value = String::new();
        loop {
            match chars.next().expect("closing quote") {
                '\\' => match chars.next().expect("escape") {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => panic!("bad escape \\{c} in {s}"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        assert!(!out.contains_key(&name), "label {name} twice in {s}");
        out.insert(name.trim_start_matches(',').to_string(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    out
}

/// Checks the exposition's structure and returns (family → type, samples).
fn parse_exposition(body: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut help = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut last_family = String::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or_else(|| panic!("HELP without text: {line}"));
            assert!(!text.trim().is_empty(), "empty HELP: {line}");
            assert!(help.insert(name.to_string(), text.to_string()).is_none(), "HELP twice for {name}");
            assert!(name > last_family.as_str(), "families sorted: {name} after {last_family}");
            last_family = name.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("TYPE without type: {line}"));
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(help.contains_key(name), "HELP before TYPE for {name}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "TYPE twice for {name}");
        } else {
            assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("sample without value: {line}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}")))),
                None => (series, BTreeMap::new()),
            };
            assert!(name.starts_with("tlpx_"), "{name}: the tlpx_ prefix");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{name}");
            let family = [name, name.trim_end_matches("_bucket"), name.trim_end_matches("_sum"), name.trim_end_matches("_count")]
                .into_iter()
                .find(|f| types.contains_key(*f))
                .unwrap_or_else(|| panic!("sample {name} has no TYPE line before it"));
            assert_eq!(family, last_family, "samples of {family} follow its own HELP/TYPE lines");
            match types[family].as_str() {
                "counter" => assert!(name.ends_with("_total") && value >= 0.0, "counter {line}"),
                "histogram" => assert!(name != family, "histogram samples are _bucket, _sum or _count: {line}"),
                _ => {}
            }
            samples.push(Sample { name: name.to_string(), labels, value });
        }
    }
    assert!(!samples.is_empty(), "an empty scrape");
    (types, samples)
}

/// Buckets cumulative, `le` increasing, +Inf equal to _count, for every histogram series.
fn check_histograms(types: &BTreeMap<String, String>, samples: &[Sample]) -> usize {
    let mut series = 0;
    for (family, _) in types.iter().filter(|(_, t)| t.as_str() == "histogram") {
        let counts: Vec<&Sample> = samples.iter().filter(|s| s.name == format!("{family}_count")).collect();
        assert!(!counts.is_empty(), "{family} has series");
        for count in counts {
            let buckets: Vec<&Sample> = samples
                .iter()
                .filter(|s| {
                    s.name == format!("{family}_bucket") && {
                        let mut l = s.labels.clone();
                        l.remove("le");
                        l == count.labels
                    }
                })
                .collect();
            assert!(buckets.len() > 1, "{family} {:?} has buckets", count.labels);
            let mut previous = (f64::NEG_INFINITY, 0.0);
            for b in &buckets {
                let le: f64 = match b.labels["le"].as_str() {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().unwrap_or_else(|_| panic!("le {v}")),
                };
                assert!(le > previous.0, "{family}: le increasing");
                assert!(b.value >= previous.1, "{family}: buckets cumulative");
                previous = (le, b.value);
            }
            assert_eq!(previous.0, f64::INFINITY, "{family}: the last bucket is +Inf");
            assert_eq!(previous.1, count.value, "{family}: +Inf equals _count");
            let sum = samples.iter().find(|s| s.name == format!("{family}_sum") && s.labels == count.labels);
            assert!(sum.is_some_and(|s| s.value >= 0.0), "{family} has a _sum");
            series += 1;
        }
    }
    series
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .unwrap_or_else(|| panic!("no {name} {labels:?}"))
        .value
}

fn promtool_check(body: &str) {
    // make setup installs Debian's prometheus package, which brings promtool: a missing one
    // is a broken set-up, not a reason to check less.
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (apt-get install prometheus; make setup does)");
    child.stdin.take().expect("stdin").write_all(body.as_bytes()).expect("feed promtool");
    let out: Output = child.wait_with_output().expect("promtool");
    assert!(out.status.success(), "promtool check metrics:\n{}{}", text(&out.stdout), text(&out.stderr));
}

#[test]
fn serve_exports_well_formed_monotonic_metrics_of_generator_traffic() {
    let sim = Sim::start(&[]);
    let device = sim.selector();
    let mut serve = Serve::start(&device, &["--interval", "200ms", "--duration", "8s"]);

    let (status, headers, before) = get(&serve.address, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(headers.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{headers}");
    let (types, first) = parse_exposition(&before);

    // Traffic from a second process: 100 writes of 256 B, then 100 reads of 256 B. The card
    // restarts its generator counters at each run, so the exporter sees a run only if it
    // reads the card while the run's counters are there: runs are spaced by more than two
    // intervals (the histogram of a run is added once it stayed put for an interval).
    for op in ["write", "read"] {
        let out = tlpx_command(&device, &["bw", "--op", op, "--sizes", "256", "--count", "100"]).output().expect("tlpx bw");
        assert!(out.status.success(), "bw {op}: {}{}", text(&out.stdout), text(&out.stderr));
        std::thread::sleep(Duration::from_millis(700));
    }
    let (_, _, after) = get(&serve.address, "/metrics");
    let (types_after, second) = parse_exposition(&after);
    // The second scrape adds at most the rates that need two readings (sim speed).
    assert!(types.iter().all(|(k, t)| types_after.get(k) == Some(t)), "no family lost or changed");
    assert_eq!(types_after.get("tlpx_sim_speed_cycles_per_second").map(String::as_str), Some("gauge"));
    let types = types_after;

    // Counters only grow.
    let later: BTreeMap<String, f64> = second.iter().map(|s| (s.key(), s.value)).collect();
    let mut counters = 0;
    for s in first.iter().filter(|s| types.get(&s.name).is_some_and(|t| t == "counter")) {
        let v = later.get(&s.key()).unwrap_or_else(|| panic!("{} vanished", s.key()));
        assert!(*v >= s.value, "{} went from {} to {v}", s.key(), s.value);
        counters += 1;
    }
    assert!(counters > 50, "spy, generator and sim counters: {counters}");
    let grew = |name: &str, labels: &[(&str, &str)]| value(&second, name, labels) - value(&first, name, labels);
    assert!(grew("tlpx_generator_bytes_total", &[("operation", "write")]) >= 25600.0, "{after}");
    assert!(grew("tlpx_generator_bytes_total", &[("operation", "read")]) >= 25600.0, "{after}");
    assert!(grew("tlpx_generator_tlps_total", &[("type", "mwr")]) >= 100.0);
    assert!(grew("tlpx_generator_runs_total", &[]) >= 2.0, "{after}");
    assert!(grew("tlpx_spy_tlps_total", &[("direction", "up"), ("type", "mwr")]) >= 100.0, "the spy saw the writes");
    assert!(grew("tlpx_sim_dma_bytes_total", &[("operation", "write")]) >= 25600.0);
    assert!(grew("tlpx_generator_read_latency_seconds_count", &[]) >= 100.0, "every read's latency: {after}");
    assert_eq!(value(&second, "tlpx_card_up", &[]), 1.0);

    // Histograms: cumulative, +Inf = _count; in seconds, so a read takes well under 1 s.
    assert_eq!(check_histograms(&types, &second), 3, "read latency, isr and user latency");
    let mean =
        value(&second, "tlpx_generator_read_latency_seconds_sum", &[]) / value(&second, "tlpx_generator_read_latency_seconds_count", &[]);
    assert!(mean > 1e-8 && mean < 1e-3, "mean read latency {mean} s");

    // Every series names the card and its link.
    let socket = format!("sim:{}", sim.socket().display());
    for s in &second {
        assert_eq!(s.labels.get("card"), Some(&socket), "{}", s.key());
        assert!(s.labels.contains_key("gen") && s.labels.contains_key("lanes"), "{}", s.key());
    }
    let info = second.iter().find(|s| s.name == "tlpx_card_info").expect("card info");
    assert_eq!(info.labels["simulated"], "true");
    assert!(info.labels["features"].contains("generator"), "{:?}", info.labels);

    let (status, _, _) = get(&serve.address, "/");
    assert!(status.contains("404"), "{status}");
    let (status, _, _) = get(&serve.address, "/metricsx");
    assert!(status.contains("404"), "{status}");
    promtool_check(&after);

    let status = serve.child.wait().expect("serve ends after --duration");
    assert!(status.success(), "{status}");
}

#[test]
fn on_the_simulator_serve_holds_live_time_so_scrapes_see_time_move() {
    // Nothing but tlpx serve runs: in virtual time the card would stand still between its
    // readings; serve holds live time, so card cycles grow from scrape to scrape.
    let sim = Sim::start(&[]);
    let serve = Serve::start(&sim.selector(), &["--interval", "100ms"]);
    let scrape = || {
        let (status, _, body) = get(&serve.address, "/metrics");
        assert!(status.contains("200"), "{status}");
        parse_exposition(&body).1
    };
    let first = scrape();
    assert_eq!(value(&first, "tlpx_sim_live_clients", &[]), 1.0, "serve itself holds live time");
    let (cycles, live) = (value(&first, "tlpx_sim_card_cycles_total", &[]), value(&first, "tlpx_sim_live_cycles_total", &[]));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = scrape();
        if value(&now, "tlpx_sim_card_cycles_total", &[]) > cycles && value(&now, "tlpx_sim_live_cycles_total", &[]) > live {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "card time did not move between scrapes");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its claim ends with it.
    drop(serve);
    let mut probe = tlpx_device::backends::sim::SimDevice::connect(sim.socket()).expect("probe");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while probe.stats().expect("stats").live_clients != 0 {
        assert!(std::time::Instant::now() < deadline, "serve's claim on live time outlived it");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn serve_refuses_a_bad_listen_address_with_exit_2() {
    let sim = Sim::start(&[]);
    for bad in ["nope", "127.0.0.1:99999", "9464"] {
        for args in [vec!["serve", "--metrics-listen", bad, "--duration", "1s"], vec!["--metrics-listen", bad, "info"]] {
            let out = tlpx_command(&sim.selector(), &args).output().expect("tlpx");
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(&format!("--metrics-listen \"{bad}\"")) && err.contains("HOST:PORT"), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    let out = tlpx_command(&sim.selector(), &["serve", "--interval", "1"]).output().expect("tlpx");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--interval: \"1\""), "{}", text(&out.stderr));
}

#[test]
fn a_long_running_command_exports_the_card_while_it_runs() {
    let sim = Sim::start(&[]);
    // Far longer than the test: the command is killed once scraped (a run that ended by
    // itself before the first scrape lost the race on a loaded machine).
    let mut command = Exporting::start(&sim.selector(), &["loop", "--iterations", "1000000", "--size", "1K"]);
    // The exporter answers only once it has a first reading, so the card is there from the
    // first scrape on.
    let (status, _, body) = request(command.connect(), &command.address, "/metrics");
    assert!(status.contains("200"), "{status}");
    let (_, samples) = parse_exposition(&body);
    assert_eq!(value(&samples, "tlpx_card_up", &[]), 1.0, "{body}");
    assert!(body.contains("tlpx_card_info{") && body.contains(&format!("card=\"sim:{}\"", sim.socket().display())), "{body}");
    // Scraped while it ran: what it does afterwards is not this test's (SIGKILL: a Ctrl-C can
    // arrive before the command's handler is installed).
    command.child.kill().expect("kill");
    command.wait();
    // A quick command has nothing to export over time: refused, naming what applies.
    let out = tlpx_command(&sim.selector(), &["--metrics-listen", "127.0.0.1:0", "info"]).output().expect("run tlpx");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("applies to the long-running commands"), "{}", text(&out.stderr));
}

#[test]
fn rule30_exports_lines_per_mode_while_it_runs() {
    let sim = Sim::start(&[]);
    // sw-char first (fast), then a long hw-poll point during which the exporter is scraped.
    let command = Exporting::start(
        &sim.selector(),
        &["rule30", "run", "--mode", "sw-char,hw-poll", "--packets", "100", "--generations", "20", "--length", "512"],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let samples = loop {
        let (_, _, body) = request(command.connect(), &command.address, "/metrics");
        let (_, samples) = parse_exposition(&body);
        if samples.iter().any(|s| s.name == "tlpx_rule30_mode_lines_total") {
            break samples;
        }
        assert!(std::time::Instant::now() < deadline, "no per-mode rule-30 metrics while the command ran");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(value(&samples, "tlpx_rule30_mode_lines_total", &[("mode", "sw-char")]), 2000.0, "100 packets x 20 lines");
    assert!(value(&samples, "tlpx_rule30_mode_line_seconds", &[("mode", "sw-char")]) > 0.0);
    let (status, stderr) = command.wait();
    assert!(status.success(), "{stderr}");
}

// The exporter's bounds ("Unbounded inputs"): request head, connections, slow clients, exposure.

/// A field of /proc/PID/status in kB (VmHWM: the peak resident memory).
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {status}"));
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task").count()
}

/// Sends `line_len` bytes of request line (without its end) from a thread, and reads the
/// answer: (status line, bytes sent).
fn long_request_line(address: &str, line_len: usize) -> (String, usize) {
    let s = TcpStream::connect(address).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'a'; 1 << 16];
        let mut sent = 0;
        // the exporter may close before all is sent: that is its answer, not an error here
        if w.write_all(b"GET /").is_ok() {
            while sent < line_len && w.write_all(&chunk[..chunk.len().min(line_len - sent)]).is_ok() {
                sent += chunk.len().min(line_len - sent);
            }
        }
        sent
    });
    let mut response = Vec::new();
    let _ = (&s).read_to_end(&mut response);
    let sent = writer.join().expect("writer");
    let response = text(&response);
    (response.lines().next().unwrap_or("").to_string(), sent)
}

#[test]
fn an_oversized_request_line_is_refused_431_and_memory_stays_bounded() {
    let sim = Sim::start(&[]);
    let serve = Serve::start(&sim.selector(), &["--interval", "200ms", "--duration", "60s"]);
    let pid = serve.child.id();
    let (status, _, _) = get(&serve.address, "/metrics");
    assert!(status.contains("200"), "{status}");
    let peak_before = status_kb(pid, "VmHWM:");

    let (status, _) = long_request_line(&serve.address, 1 << 20);
    assert!(status.contains("431"), "a 1 MiB request line: {status:?}");
    // 64 MiB: the old exporter buffered the whole line (its peak memory grew by as much)
    let (_, sent) = long_request_line(&serve.address, 64 << 20);
    assert!(sent > 0);
    let grew = status_kb(pid, "VmHWM:").saturating_sub(peak_before);
    assert!(grew < 16 * 1024, "the exporter's peak memory grew by {grew} kB for long request lines");

    let (status, _, body) = get(&serve.address, "/metrics");
    assert!(status.contains("200") && body.contains("tlpx_card_up"), "a scrape after the refusals: {status}");
}

#[test]
fn idle_connections_take_a_bounded_number_of_threads_and_scrapes_work_after_them() {
    let sim = Sim::start(&[]);
    let serve = Serve::start(&sim.selector(), &["--interval", "200ms", "--duration", "60s"]);
    let pid = serve.child.id();
    let (status, _, _) = get(&serve.address, "/metrics");
    assert!(status.contains("200"), "{status}");
    let before = threads(pid);

    let idle: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(&serve.address).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = threads(pid);
    assert!(during <= before + 8, "200 idle connections took {} threads ({before} before)", during - before);
    // the last ones were refused at once: 503, closed
    let mut last = &idle[idle.len() - 1];
    last.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut answer = String::new();
    let _ = last.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "a connection over the limit: {answer:?}");

    // The idle ones hold their slots for the request timeout at most, even if never closed.
    // Meanwhile a scrape is refused: 503, or closed before its request is read.
    let scrape = || {
        let mut s = TcpStream::connect(&serve.address).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let _ = write!(s, "GET /metrics HTTP/1.0\r\n\r\n");
        let mut response = String::new();
        let _ = s.read_to_string(&mut response);
        response
    };
    let began = std::time::Instant::now();
    loop {
        let response = scrape();
        if response.starts_with("HTTP/1.1 200") {
            assert!(response.contains("tlpx_card_up"), "{response}");
            break;
        }
        assert!(response.is_empty() || response.starts_with("HTTP/1.1 503"), "{response}");
        assert!(began.elapsed() < Duration::from_secs(10), "still refused after {:?} (the request timeout is 5 s)", began.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(idle);
}

#[test]
fn a_client_trickling_its_request_is_cut_off_at_the_request_timeout() {
    let sim = Sim::start(&[]);
    let serve = Serve::start(&sim.selector(), &["--interval", "200ms", "--duration", "60s"]);
    let s = TcpStream::connect(&serve.address).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let began = std::time::Instant::now();
    // one byte every 300 ms, never the blank line: each read succeeds, only a deadline for
    // the whole head ends it
    std::thread::spawn(move || {
        let _ = w.write_all(b"GET /metrics HTTP/1.0\r\nX-Slow: ");
        while began.elapsed() < Duration::from_secs(15) && w.write_all(b"a").is_ok() {
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let mut answer = Vec::new();
    let _ = (&s).read_to_end(&mut answer);
    let took = began.elapsed();
    assert!(text(&answer).starts_with("HTTP/1.1 408"), "after {took:?}: {:?}", text(&answer));
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(8), "cut off after {took:?}");
}

#[test]
fn a_non_loopback_listen_address_is_warned_about() {
    let sim = Sim::start(&[]);
    let out = tlpx_command(&sim.selector(), &["serve", "--metrics-listen", "0.0.0.0:0", "--duration", "1s"]).output().expect("tlpx");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning") && err.contains("not on a loopback address") && err.contains("no authentication"), "{err}");
    let out = tlpx_command(&sim.selector(), &["serve", "--metrics-listen", "127.0.0.1:0", "--duration", "1s"]).output().expect("tlpx");
    assert!(out.status.success() && !text(&out.stderr).contains("warning"), "{}", text(&out.stderr));
}
