//! The Grafana dashboards of dashboards/ against a real Prometheus scraping a real exporter.
//!
//!   tlpx bw / irq / rule30 / spy (traffic) ──► tlpx-sim ◄── tlpx serve ◄── prometheus (1 s) ◄── test
//!                                                                          every panel's expr
//!
//! Grafana cannot be installed here, so the dashboards are checked three ways: the checked-in
//! JSON is what dashboards/generate.py writes with Grafana's SDK from the project's venv (no
//! drift); every dashboard has the fields
//! Grafana requires (listed at `check_structure`: no JSON schema of Grafana dashboards is
//! published on PyPI, npm or crates.io — Grafana's own schema is CUE / TypeScript inside
//! Grafana); and every panel target's expr, run through Prometheus's HTTP API
//! (/api/v1/query) against Debian's `prometheus` scraping `tlpx serve` on the simulated
//! card, neither errors nor returns an empty result. Every metric a query names must be one
//! of docs/dashboards.md. Prometheus is required: `make setup` installs it. Grafana's
//! dashboard-linter rules, the PromQL parsers and `promtool test rules` are dashboards/tests
//! (pytest, run by `make test`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

/// The Prometheus datasource uid of dashboards/provisioning/datasources/tlpx.yaml.
const DATASOURCE_UID: &str = "tlpx-prometheus";
/// What the test puts for Grafana's `$__rate_interval`: the whole test fits in it.
const RATE_WINDOW: &str = "30s";
/// What the test puts for Grafana's `$__range` (the dashboard's time range, over which the
/// stat panels show a counter's increase): longer than the whole test.
const RANGE_WINDOW: &str = "5m";
/// The datasource variable every panel and target uses (`${datasource}`); it defaults to the
/// provisioned datasource.
const DATASOURCE_VARIABLE: &str = "${datasource}";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn dashboards() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(repo().join("dashboards")).expect("dashboards/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("read dashboard");
            let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            out.push((path.file_name().expect("a file name").to_string_lossy().into_owned(), json));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 5, "at least five dashboards in dashboards/: {}", out.len());
    out
}

/// (dashboard file, panel title, panel id, refId, expr) of every target of every panel.
fn queries() -> Vec<(String, String, i64, String, String)> {
    let mut out = Vec::new();
    for (file, d) in dashboards() {
        for p in d["panels"].as_array().expect("panels") {
            for t in p["targets"].as_array().expect("targets") {
                out.push((
                    file.clone(),
                    p["title"].as_str().unwrap_or("").to_string(),
                    p["id"].as_i64().unwrap_or(-1),
                    t["refId"].as_str().unwrap_or("").to_string(),
                    t["expr"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
    }
    out
}

#[test]
fn dashboards_are_what_the_generator_writes() {
    // The venv's python: it has the pinned grafana-foundation-sdk (gateware/requirements.txt),
    // which a system python3 lacks.
    let python = repo().join(".venv/bin/python");
    assert!(python.exists(), "{} is missing: `make setup` creates the venv with the dashboards' SDK", python.display());
    let out = Command::new(&python)
        .arg(repo().join("dashboards/generate.py"))
        .arg("--check")
        .output()
        .expect("the venv's python runs dashboards/generate.py");
    assert!(
        out.status.success(),
        "dashboards/*.json differ from dashboards/generate.py's output: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fields Grafana (12.x, schemaVersion 41) needs to load a provisioned dashboard and draw
/// its panels:
/// - dashboard: `uid` (1..40 of [A-Za-z0-9_-], unique across dashboards), `title` (non-empty,
///   unique), `schemaVersion` (an integer, 36 or later, so no migration rewrites the file),
///   `panels` (an array), `time.from` / `time.to`, `templating.list[]` with `name` and `type`,
///   one of them the `datasource` variable (type datasource, for prometheus) defaulting to the
///   provisioned datasource's uid;
/// - panel: `id` (an integer, unique in the dashboard), `type` (a core panel plugin), `title`
///   (non-empty), `gridPos` {x, y, w, h} integers with w, h >= 1, x >= 0, x + w <= 24 (the grid
///   is 24 columns) and no two panels overlapping, `datasource` {type: prometheus, uid:
///   `${datasource}`}, `targets` (non-empty);
/// - target: `refId` (non-empty, unique in the panel), `expr` (non-empty), `datasource` as the
///   panel's.
///
/// The provisioned datasource must carry that uid, and the dashboard provider must be a file
/// provider.
fn check_structure(file: &str, d: &Value, problems: &mut Vec<String>) {
    let mut bad = |what: String| problems.push(format!("{file}: {what}"));
    let uid = d["uid"].as_str().unwrap_or("");
    if uid.is_empty() || uid.len() > 40 || !uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bad(format!("uid {uid:?}: 1..40 of [A-Za-z0-9_-]"));
    }
    if d["title"].as_str().is_none_or(str::is_empty) {
        bad("no title".into());
    }
    if d["schemaVersion"].as_i64().is_none_or(|v| v < 36) {
        bad(format!("schemaVersion {}: an integer >= 36", d["schemaVersion"]));
    }
    if d["time"]["from"].as_str().is_none() || d["time"]["to"].as_str().is_none() {
        bad("time.from and time.to".into());
    }
    let variables = d["templating"]["list"].as_array().cloned().unwrap_or_default();
    for v in &variables {
        if v["name"].as_str().is_none() || v["type"].as_str().is_none() {
            bad(format!("template variable without name or type: {v}"));
        }
    }
    let datasource = variables.iter().find(|v| v["name"] == "datasource");
    if !datasource.is_some_and(|v| v["type"] == "datasource" && v["query"] == "prometheus" && v["current"]["value"] == DATASOURCE_UID) {
        bad(format!("no datasource variable for prometheus defaulting to {DATASOURCE_UID}: {datasource:?}"));
    }
    let Some(panels) = d["panels"].as_array() else {
        bad("no panels array".into());
        return;
    };
    let plugins = ["timeseries", "stat", "heatmap", "table", "gauge", "bargauge", "text", "row"];
    let mut ids = BTreeSet::new();
    let mut cells = BTreeMap::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or("");
        let at = format!("panel {} {title:?}", p["id"]);
        match p["id"].as_i64() {
            Some(id) if ids.insert(id) => {}
            _ => bad(format!("{at}: id missing or not unique")),
        }
        if title.is_empty() {
            bad(format!("{at}: no title"));
        }
        if !p["type"].as_str().is_some_and(|t| plugins.contains(&t)) {
            bad(format!("{at}: type {} is not one of {plugins:?}", p["type"]));
        }
        let g = &p["gridPos"];
        let (x, y, w, h) = (g["x"].as_i64(), g["y"].as_i64(), g["w"].as_i64(), g["h"].as_i64());
        match (x, y, w, h) {
            (Some(x), Some(y), Some(w), Some(h)) if x >= 0 && y >= 0 && w >= 1 && h >= 1 && x + w <= 24 => {
                for cx in x..x + w {
                    for cy in y..y + h {
                        if let Some(other) = cells.insert((cx, cy), title.to_string()) {
                            bad(format!("{at}: overlaps panel {other:?} at ({cx}, {cy})"));
                        }
                    }
                }
            }
            _ => bad(format!("{at}: gridPos {g}: integers, w, h >= 1, x + w <= 24")),
        }
        let datasource_ok = |ds: &Value| ds["type"] == "prometheus" && ds["uid"] == DATASOURCE_VARIABLE;
        if !datasource_ok(&p["datasource"]) {
            bad(format!("{at}: datasource {}", p["datasource"]));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            bad(format!("{at}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for t in &targets {
            let r = t["refId"].as_str().unwrap_or("");
            if r.is_empty() || !refs.insert(r.to_string()) {
                bad(format!("{at}: refId {r:?} missing or not unique"));
            }
            if t["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
                bad(format!("{at}: target {r} has no expr"));
            }
            if !datasource_ok(&t["datasource"]) {
                bad(format!("{at}: target {r} datasource {}", t["datasource"]));
            }
        }
    }
}

#[test]
fn dashboards_have_the_fields_grafana_requires_and_only_documented_metrics() {
    let mut problems = Vec::new();
    let mut uids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for (file, d) in dashboards() {
        check_structure(&file, &d, &mut problems);
        if !uids.insert(d["uid"].to_string()) || !titles.insert(d["title"].to_string()) {
            problems.push(format!("{file}: uid or title used by another dashboard"));
        }
    }
    let datasources = std::fs::read_to_string(repo().join("dashboards/provisioning/datasources/tlpx.yaml"))
        .expect("dashboards/provisioning/datasources/tlpx.yaml");
    assert!(datasources.contains(&format!("uid: {DATASOURCE_UID}")) && datasources.contains("type: prometheus"));
    let providers = std::fs::read_to_string(repo().join("dashboards/provisioning/dashboards/tlpx.yaml"))
        .expect("dashboards/provisioning/dashboards/tlpx.yaml");
    assert!(providers.contains("type: file") && providers.contains("path:"));

    // Every metric a query names is in the table of docs/dashboards.md.
    let docs = std::fs::read_to_string(repo().join("docs/dashboards.md")).expect("docs/dashboards.md");
    let documented: BTreeSet<String> =
        docs.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).map(str::to_string).collect();
    assert!(documented.len() > 40, "metric table of docs/dashboards.md: {documented:?}");
    for (file, title, id, r, expr) in queries() {
        for name in metric_names(&expr) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| documented.contains(*b)))
                .unwrap_or(&name);
            if !documented.contains(base) {
                problems.push(format!("{file}: panel {id} {title:?} {r}: {name} is not in docs/dashboards.md"));
            }
        }
    }
    assert!(problems.is_empty(), "dashboard problems:\n  {}", problems.join("\n  "));
}

fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("tlpx_") {
        let name: String = rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[i + name.len()..];
        out.push(name);
    }
    out
}

// A real Prometheus ------------------------------------------------------------------------------

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One HTTP/1.0 GET: (status line, body).
fn get(address: &str, path: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(address)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok((head.lines().next().unwrap_or("").to_string(), body.to_string()))
}

/// An instant query: Ok(result array) or Err(Prometheus's error).
fn query(address: &str, expr: &str) -> Result<Vec<Value>, String> {
    let (status, body) = get(address, &format!("/api/v1/query?query={}", percent_encode(expr))).map_err(|e| format!("HTTP: {e}"))?;
    let json: Value = serde_json::from_str(&body).map_err(|e| format!("{status}: {e}: {body}"))?;
    if json["status"] != "success" {
        return Err(format!("{status}: {}: {}", json["errorType"], json["error"]));
    }
    match &json["data"]["result"] {
        Value::Array(a) => Ok(a.clone()),
        scalar => Ok(vec![scalar.clone()]),
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tlpx(device: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tlpx"));
    c.arg("--device").arg(device).args(args);
    c
}

fn run(device: &str, args: &[&str]) {
    let out = tlpx(device, args).output().expect("tlpx");
    assert!(out.status.success(), "tlpx {args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Starts `tlpx serve` on a free port and returns it with its address.
fn serve(device: &str) -> (Killed, String) {
    let mut child = tlpx(device, &["serve", "--metrics-listen", "127.0.0.1:0", "--interval", "500ms", "--duration", "300s"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tlpx serve");
    let stdout = child.stdout.take().expect("stdout");
    let child = Killed(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("tlpx serve prints its URL");
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("no URL in {line:?}"));
    (child, url.trim_start_matches("http://").trim_end_matches("/metrics").to_string())
}

fn samples_of_up(prom: &str) -> f64 {
    query(prom, "count_over_time(tlpx_card_up[5m])")
        .ok()
        .and_then(|r| r.first().and_then(|s| s["value"][1].as_str()).and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

#[test]
fn every_panel_query_returns_series_from_a_real_prometheus() {
    let version = Command::new("prometheus").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "Debian's `prometheus` is not installed (or does not run): `make setup` installs it \
         (apt-get install prometheus); this test needs a real Prometheus"
    );
    let sim = Sim::start(&[]);
    let device = sim.selector();
    let (_serve, exporter) = serve(&device);

    // The checked-in scrape config, pointed at this exporter.
    let config = std::fs::read_to_string(repo().join("dashboards/prometheus.yml")).expect("dashboards/prometheus.yml");
    assert!(config.contains("127.0.0.1:9464") && config.contains("scrape_interval: 1s"), "{config}");
    let check = Command::new("promtool")
        .args(["check", "config"])
        .arg(repo().join("dashboards/prometheus.yml"))
        .output()
        .expect("promtool (Debian's prometheus package) runs");
    assert!(check.status.success(), "promtool check config: {}", String::from_utf8_lossy(&check.stdout));
    let config_path = sim.path("prometheus.yml");
    std::fs::write(&config_path, config.replace("127.0.0.1:9464", &exporter)).expect("write config");
    let prom = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(sim.path("prometheus.log")).expect("log");
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", sim.path("tsdb").display()))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let started = Instant::now();
    let prometheus_log = || std::fs::read_to_string(sim.path("prometheus.log")).unwrap_or_default();
    while !get(&prom, "/-/ready").is_ok_and(|(s, _)| s.contains("200")) {
        assert!(started.elapsed() < Duration::from_secs(30), "prometheus not ready:\n{}", prometheus_log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Two scrapes before the traffic, so that rate() sees the counters before and after it.
    while samples_of_up(&prom) < 2.0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "prometheus did not scrape tlpx serve at {exporter} twice:\n{}",
            prometheus_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Traffic from other processes, so that every block's counters move.
    let trace = sim.path("capture.tlpx");
    run(&device, &["bw", "--op", "write", "--sizes", "256", "--count", "100"]);
    std::thread::sleep(Duration::from_millis(1200));
    run(&device, &["bw", "--op", "read", "--sizes", "256", "--count", "100"]);
    run(&device, &["irq", "--samples", "50", "--min", "10us", "--max", "30us"]);
    run(&device, &["rule30", "run", "--mode", "hw-poll", "--packets", "3", "--generations", "3"]);
    run(&device, &["spy", "capture", "--duration", "1ms", "-q", "-o", trace.to_str().expect("a UTF-8 temporary path")]);

    // Three more scrapes after the traffic: the exporter adds a run's histograms once they
    // stayed put for an interval, and rate() needs two samples.
    let target = samples_of_up(&prom) + 3.0;
    while samples_of_up(&prom) < target {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "prometheus scraped tlpx serve at {exporter} {} times:\n{}",
            samples_of_up(&prom),
            prometheus_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let up = query(&prom, "up{job=\"tlpx\"}").expect("up");
    assert_eq!(up.first().and_then(|s| s["value"][1].as_str()), Some("1"), "{up:?}");

    // Grafana's $job, $instance and $card: the template variables' own queries give them
    // (label_values of tlpx_card_info), each narrowed by the ones before it.
    let cards = query(&prom, "tlpx_card_info").expect("tlpx_card_info");
    let label = |name: &str| {
        cards.first().and_then(|s| s["metric"][name].as_str()).unwrap_or_else(|| panic!("a {name} label: {cards:?}")).to_string()
    };
    let (job, instance, card) = (label("job"), label("instance"), label("card"));
    assert_eq!((job.as_str(), instance.as_str(), card.as_str()), ("tlpx", exporter.as_str(), device.as_str()));
    let concrete = |expr: &str| {
        expr.replace("$__rate_interval", RATE_WINDOW)
            .replace("$__range", RANGE_WINDOW)
            .replace("$job", &job)
            .replace("$instance", &instance)
            .replace("$card", &card)
    };
    let mut failures = Vec::new();
    for (file, d) in dashboards() {
        for v in d["templating"]["list"].as_array().into_iter().flatten().filter(|v| v["type"] == "query") {
            let q = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap_or("");
            let (selector, wanted) = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|r| r.rsplit_once(','))
                .unwrap_or_else(|| panic!("{file}: variable {}: not label_values(selector, label): {q:?}", v["name"]));
            let series = query(&prom, &concrete(selector)).unwrap_or_default();
            if !series.iter().any(|s| s["metric"][wanted.trim()].is_string()) {
                failures.push(format!("{file}: variable {} ({q}) finds no {} value: {series:?}", v["name"], wanted.trim()));
            }
        }
    }

    let all = queries();
    for (file, title, id, r, expr) in &all {
        let concrete = concrete(expr);
        match query(&prom, &concrete) {
            Err(e) => failures.push(format!("{file}: panel {id} {title:?} {r}: error {e}\n      {concrete}")),
            Ok(r0) if r0.is_empty() => failures.push(format!("{file}: panel {id} {title:?} {r}: no series\n      {concrete}")),
            Ok(_) => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures among {} panel queries and the variables:\n  {}",
        failures.len(),
        all.len(),
        failures.join("\n  ")
    );

    // Some values, not only series: the reference line is the link's raw rate per direction
    // (gen 2 x1 on the simulator: 5 GT/s x 8b/10b / 8 = 500 MB/s), the interrupt percentiles
    // and the rule-30 busy ratio are numbers.
    // The first finite value of a panel's first target (NaN when none is).
    let value_of = |title: &str| -> f64 {
        let (_, _, _, _, expr) = all.iter().find(|q| q.1 == title).unwrap_or_else(|| panic!("panel {title:?}"));
        query(&prom, &concrete(expr))
            .expect("query")
            .iter()
            .filter_map(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()))
            .find(|v| v.is_finite())
            .unwrap_or(f64::NAN)
    };
    let info = &cards[0]["metric"];
    let per_lane = match info["gen"].as_str() {
        Some("1") => 2.5e9 * 8.0 / 10.0 / 8.0,
        Some("2") => 5e9 * 8.0 / 10.0 / 8.0,
        Some("3") => 8e9 * 128.0 / 130.0 / 8.0,
        g => panic!("the simulator's gen {g:?}"),
    };
    let lanes: f64 = info["lanes"].as_str().and_then(|l| l.parse().ok()).expect("lanes");
    let raw = value_of("Link raw rate per direction");
    assert!((raw - per_lane * lanes).abs() < 1.0, "link raw rate {raw}, expected {}", per_lane * lanes);
    let p = value_of("Latency percentiles per stage");
    assert!(
        p.is_finite() && p > 0.0 && p < 1e-3,
        "an interrupt latency median {p} s; counts over the window: {:?}",
        query(&prom, "tlpx_irq_latency_seconds_count[1m]")
    );
    let busy = value_of("Busy ratio");
    assert!(busy.is_finite() && (0.0..=1.0).contains(&busy), "rule-30 busy ratio {busy}");

    eprintln!(
        "{} panel queries of {} dashboards returned series ({:.1} s)",
        all.len(),
        dashboards().len(),
        started.elapsed().as_secs_f64()
    );
}
