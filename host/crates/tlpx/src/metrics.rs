//! Prometheus metrics of tlpx (issue 7): the registry, the text exposition and the HTTP
//! listener behind `--metrics-listen` and `tlpx serve`.
//!
//! The registry holds families (one name, one type, one HELP text) of series (one label
//! set each). Commands update it by name and labels through [`global`]:
//!
//! ```ignore
//! let m = metrics::global();
//! m.describe_counter("tlpx_bw_runs_total", "Generator runs of tlpx bw.");
//! m.counter_inc("tlpx_bw_runs_total", &[("op", "write")], 1.0);
//! m.gauge_set("tlpx_bw_last_bytes_per_second", &[("op", "write")], 3.1e9);
//! m.describe_histogram("tlpx_pio_read_seconds", "PIO read latency.", &[1e-7, 1e-6, 1e-5]);
//! m.observe("tlpx_pio_read_seconds", &[], 4.2e-7);
//! ```
//!
//! and `--metrics-listen HOST:PORT` ([`start`]) serves it at `http://HOST:PORT/metrics` in
//! the text exposition format 0.0.4: families sorted by name, series by labels, labels by
//! name, so two scrapes of the same values are byte-identical.
//!
//! Names follow Prometheus's conventions, checked when a family is described: the `tlpx_`
//! prefix, base units in the name (`_seconds`, `_bytes`), counters end in `_total`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context};

/// The default listen address: loopback only, on 9464 (the port of OpenTelemetry's
/// Prometheus exporter; free next to node_exporter's 9100).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// Content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

// Registry -----------------------------------------------------------------------------------

/// A metric type, as the `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// The state of one histogram series: counts per bucket (not cumulative; one more than the
/// bounds, the last for values above every bound), the sum of observations.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    pub counts: Vec<u64>,
    pub sum: f64,
}

impl HistogramValue {
    #[allow(dead_code)] // for commands that export as they run (issue 7, later)
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[derive(Debug, Clone)]
enum Value {
    Scalar(f64),
    Histogram(HistogramValue),
}

type Labels = Vec<(String, String)>;

#[derive(Debug)]
struct Family {
    kind: Kind,
    help: String,
    /// Upper bounds of a histogram's buckets, increasing (without +Inf).
    bounds: Vec<f64>,
    series: BTreeMap<Labels, Value>,
}

/// A set of metric families, safe to update from any thread.
#[derive(Debug, Default)]
pub struct Registry {
    families: Mutex<BTreeMap<String, Family>>,
}

/// The process-wide registry that `--metrics-listen` serves.
pub fn global() -> &'static Registry {
    static GLOBAL: OnceLock<Registry> = OnceLock::new();
    GLOBAL.get_or_init(Registry::default)
}

/// Why a metric name is not acceptable, or `None`.
pub fn check_name(name: &str, kind: Kind) -> Option<String> {
    let valid = name.chars().enumerate().all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit()));
    if !valid || name.is_empty() {
        return Some(format!("metric name {name:?} must match [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    if !name.starts_with("tlpx_") {
        return Some(format!("metric name {name:?} must start with tlpx_"));
    }
    let total = name.ends_with("_total");
    match kind {
        Kind::Counter if !total => Some(format!("counter {name:?} must end in _total")),
        Kind::Gauge | Kind::Histogram if total => Some(format!("{} {name:?} must not end in _total", kind.name())),
        Kind::Histogram if ["_bucket", "_sum", "_count"].iter().any(|s| name.ends_with(s)) => {
            Some(format!("histogram {name:?} must not end in _bucket, _sum or _count"))
        }
        _ => None,
    }
}

fn check_label_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with("__")
        && name != "le"
        && name.chars().enumerate().all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit()))
}

fn owned(labels: &[(&str, &str)]) -> Labels {
    let mut v: Labels = labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}

impl Registry {
    fn describe(&self, name: &str, kind: Kind, help: &str, bounds: &[f64]) -> anyhow::Result<()> {
        if let Some(why) = check_name(name, kind) {
            bail!(why);
        }
        if kind == Kind::Histogram
            && (bounds.is_empty() || bounds.windows(2).any(|w| w[0] >= w[1]) || bounds.iter().any(|b| !b.is_finite()))
        {
            bail!("histogram {name:?}: bucket bounds must be finite and strictly increasing, not {bounds:?}");
        }
        let mut families = self.lock();
        match families.get_mut(name) {
            Some(f) if f.kind != kind => bail!("metric {name:?} is already a {}, not a {}", f.kind.name(), kind.name()),
            Some(f) => {
                f.help = help.to_string();
                if f.bounds != bounds {
                    f.bounds = bounds.to_vec();
                    f.series.clear();
                }
            }
            None => {
                families
                    .insert(name.to_string(), Family { kind, help: help.to_string(), bounds: bounds.to_vec(), series: BTreeMap::new() });
            }
        }
        Ok(())
    }

    /// Declares a counter (monotonic; the name ends in `_total`).
    pub fn describe_counter(&self, name: &str, help: &str) -> anyhow::Result<()> {
        self.describe(name, Kind::Counter, help, &[])
    }

    /// Declares a gauge.
    pub fn describe_gauge(&self, name: &str, help: &str) -> anyhow::Result<()> {
        self.describe(name, Kind::Gauge, help, &[])
    }

    /// Declares a histogram with these bucket upper bounds (increasing; +Inf is implied).
    /// Describing it again with other bounds drops its series.
    pub fn describe_histogram(&self, name: &str, help: &str, bounds: &[f64]) -> anyhow::Result<()> {
        self.describe(name, Kind::Histogram, help, bounds)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Family>> {
        // A panic elsewhere while holding the lock leaves consistent data (every update is
        // one assignment): keep serving.
        self.families.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the series of a family of `kind`, creating the family (with no help
    /// text) when it was not described. Updates of a family of another type, or with an
    /// invalid label name, are ignored: metrics never stop a measurement.
    fn with_series(&self, name: &str, kind: Kind, labels: &[(&str, &str)], f: impl FnOnce(&mut Value, &[f64])) {
        if labels.iter().any(|(k, _)| !check_label_name(k)) || check_name(name, kind).is_some() {
            debug_assert!(false, "bad metric {name} {labels:?}");
            return;
        }
        let mut families = self.lock();
        let family = families.entry(name.to_string()).or_insert_with(|| Family {
            kind,
            help: String::new(),
            bounds: Vec::new(),
            series: BTreeMap::new(),
        });
        if family.kind != kind || (kind == Kind::Histogram && family.bounds.is_empty()) {
            debug_assert!(false, "metric {name} used as a {} but is a {}", kind.name(), family.kind.name());
            return;
        }
        let bounds = family.bounds.clone();
        let empty = match kind {
            Kind::Histogram => Value::Histogram(HistogramValue { counts: vec![0; bounds.len() + 1], sum: 0.0 }),
            _ => Value::Scalar(0.0),
        };
        f(family.series.entry(owned(labels)).or_insert(empty), &bounds);
    }

    /// Adds `by` (>= 0) to a counter.
    #[allow(dead_code)] // for commands that export as they run (issue 7, later)
    pub fn counter_inc(&self, name: &str, labels: &[(&str, &str)], by: f64) {
        self.with_series(name, Kind::Counter, labels, |v, _| {
            if let Value::Scalar(x) = v {
                *x += by.max(0.0);
            }
        });
    }

    /// Sets a counter to a running total kept by the caller (which keeps it monotonic, e.g.
    /// across resets of the card's own counters).
    pub fn counter_set(&self, name: &str, labels: &[(&str, &str)], total: f64) {
        self.with_series(name, Kind::Counter, labels, |v, _| *v = Value::Scalar(total));
    }

    pub fn gauge_set(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.with_series(name, Kind::Gauge, labels, |v, _| *v = Value::Scalar(value));
    }

    /// Records one observation in a histogram.
    #[allow(dead_code)] // for commands that export as they run (issue 7, later)
    pub fn observe(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.with_series(name, Kind::Histogram, labels, |v, bounds| {
            if let Value::Histogram(h) = v {
                let i = bounds.iter().position(|b| value <= *b).unwrap_or(bounds.len());
                h.counts[i] += 1;
                h.sum += value;
            }
        });
    }

    /// Replaces a histogram series with counts kept by the caller (one per bound, plus one
    /// for +Inf); a count vector of another length is ignored.
    pub fn histogram_set(&self, name: &str, labels: &[(&str, &str)], value: HistogramValue) {
        let fits = self.lock().get(name).is_some_and(|f| f.bounds.len() + 1 == value.counts.len());
        if !fits {
            debug_assert!(false, "histogram {name}: {} counts do not fit its bounds", value.counts.len());
            return;
        }
        self.with_series(name, Kind::Histogram, labels, |v, bounds| {
            if value.counts.len() == bounds.len() + 1 {
                *v = Value::Histogram(value);
            }
        });
    }

    /// The current value of a counter or gauge series (tests, and commands reading back).
    #[allow(dead_code)] // for commands that export as they run (issue 7, later)
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        match self.lock().get(name)?.series.get(&owned(labels))? {
            Value::Scalar(x) => Some(*x),
            Value::Histogram(_) => None,
        }
    }

    /// The text exposition format 0.0.4 of every family that has series.
    pub fn render(&self) -> String {
        let families = self.lock();
        let mut out = String::new();
        for (name, f) in families.iter().filter(|(_, f)| !f.series.is_empty()) {
            let help = if f.help.is_empty() { "(no description)" } else { &f.help };
            let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.name());
            for (labels, value) in &f.series {
                match value {
                    Value::Scalar(x) => {
                        let _ = writeln!(out, "{name}{} {}", label_text(labels, None), number(*x));
                    }
                    Value::Histogram(h) => {
                        let mut cumulative = 0u64;
                        for (i, c) in h.counts.iter().enumerate() {
                            cumulative += c;
                            let le = f.bounds.get(i).map_or("+Inf".to_string(), |b| number(*b));
                            let _ = writeln!(out, "{name}_bucket{} {cumulative}", label_text(labels, Some(&le)));
                        }
                        let _ = writeln!(out, "{name}_sum{} {}", label_text(labels, None), number(h.sum));
                        let _ = writeln!(out, "{name}_count{} {cumulative}", label_text(labels, None));
                    }
                }
            }
        }
        out
    }
}

/// A sample value: integers without a decimal point, others in Rust's shortest exact form.
fn number(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x:e}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Escapes a label value (exposition format: backslash, double quote, line feed).
pub fn escape_label_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn label_text(labels: &Labels, le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v))).collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

/// Buckets of a card's log2 cycle histogram in seconds: bucket k counts [2^k, 2^(k+1))
/// cycles, so its upper bound is 2^(k+1) cycles (values are below it, so `le` holds).
pub fn log2_cycle_bounds(buckets: usize, clock_hz: u32) -> Vec<f64> {
    let hz = f64::from(clock_hz.max(1));
    (0..buckets).map(|k| 2f64.powi(k as i32 + 1) / hz).collect()
}

// Listener -----------------------------------------------------------------------------------

/// Parses a listen address: `HOST:PORT`, `[V6]:PORT`, or `:PORT` (loopback, 127.0.0.1).
pub fn parse_listen(text: &str) -> anyhow::Result<SocketAddr> {
    let accepted = "write HOST:PORT, e.g. 127.0.0.1:9464, :9464 (loopback), 0.0.0.0:9464 (every interface) or [::1]:9464";
    let t = text.trim();
    let full = if t.starts_with(':') { format!("127.0.0.1{t}") } else { t.to_string() };
    let Some((host, port)) = full.rsplit_once(':') else {
        bail!("--metrics-listen {text:?} has no port: {accepted}");
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        bail!("--metrics-listen {text:?} is not HOST:PORT with a port 0..65535: {accepted}");
    }
    if let Ok(a) = full.parse::<SocketAddr>() {
        return Ok(a);
    }
    match full.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().with_context(|| format!("--metrics-listen {text:?}: {host} has no address; {accepted}")),
        Err(e) => bail!("--metrics-listen {text:?}: cannot resolve {host:?} ({e}); {accepted}"),
    }
}

/// An exporter whose address is bound. Scrapes wait in the listen backlog until
/// [`Exporter::serve`] starts answering, so the caller can take a first reading in between:
/// no scrape ever sees an empty registry.
pub struct Exporter {
    pub address: SocketAddr,
    listener: Option<TcpListener>,
}

/// Scrapes being answered right now (see [`finish`]).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

impl Exporter {
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.address)
    }

    /// Answers scrapes of `registry` from a background thread for the life of the process.
    pub fn serve(&mut self, registry: &'static Registry) -> anyhow::Result<()> {
        let Some(listener) = self.listener.take() else {
            bail!("the exporter on {} is already serving", self.address);
        };
        std::thread::Builder::new()
            .name("metrics-listener".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    // One short-lived thread per scrape: a slow client never blocks the next.
                    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
                    let spawned = std::thread::Builder::new().name("metrics-scrape".into()).spawn(move || {
                        answer(stream, registry);
                        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
                    });
                    if spawned.is_err() {
                        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            })
            .context("starting the exporter thread")?;
        Ok(())
    }
}

/// Binds `text` (see [`parse_listen`]); nothing is answered until [`Exporter::serve`].
pub fn bind(text: &str) -> anyhow::Result<Exporter> {
    let addr = parse_listen(text)?;
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics-listen {text:?}: cannot listen on {addr}"))?;
    let address = listener.local_addr().context("the exporter's address")?;
    Ok(Exporter { address, listener: Some(listener) })
}

/// Before the process exits: lets scrapes already being answered finish (up to `limit`), so
/// a scrape that lands as a command ends gets its whole answer, not a reset connection.
pub fn finish(limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    while IN_FLIGHT.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Answers one HTTP request on `stream`: the exposition of `registry` at /metrics.
fn answer(stream: TcpStream, registry: &Registry) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    // Drain the headers (bounded) so the client sees an orderly close.
    let mut header_bytes = 0usize;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                header_bytes += n;
                if line == "\r\n" || line == "\n" || header_bytes > 16 * 1024 {
                    break;
                }
            }
        }
    }
    let mut words = request_line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", CONTENT_TYPE, registry.render()),
        (_, "/metrics") => ("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET and HEAD\n".to_string()),
        _ => ("404 Not Found", "text/plain; charset=utf-8", "tlpx serves its metrics at /metrics\n".to_string()),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" }
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    let mut stream = &stream;
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn metrics_names_follow_the_conventions() {
        assert!(check_name("tlpx_spy_tlps_total", Kind::Counter).is_none());
        assert!(check_name("tlpx_spy_tlps", Kind::Counter).is_some());
        assert!(check_name("spy_tlps_total", Kind::Counter).is_some());
        assert!(check_name("tlpx_x_total", Kind::Gauge).is_some());
        assert!(check_name("tlpx_lat_seconds_count", Kind::Histogram).is_some());
        assert!(check_name("tlpx-bad", Kind::Gauge).is_some());
        let r = Registry::default();
        assert!(r.describe_counter("tlpx_bytes", "x").is_err());
        assert!(r.describe_histogram("tlpx_h_seconds", "x", &[2.0, 1.0]).is_err());
    }

    #[test]
    fn metrics_render_sorted_escaped_and_cumulative() {
        let r = Registry::default();
        r.describe_gauge("tlpx_b_bytes", "B.\nSecond \\ line.").unwrap();
        r.describe_counter("tlpx_a_total", "A.").unwrap();
        r.describe_histogram("tlpx_c_seconds", "C.", &[0.001, 0.01]).unwrap();
        r.gauge_set("tlpx_b_bytes", &[("z", "1"), ("card", "sim:/a\"b\\c\nd")], 4096.0);
        r.counter_inc("tlpx_a_total", &[("dir", "up")], 2.0);
        r.counter_inc("tlpx_a_total", &[("dir", "down")], 1.0);
        r.counter_inc("tlpx_a_total", &[("dir", "up")], 3.0);
        r.observe("tlpx_c_seconds", &[], 0.0005);
        r.observe("tlpx_c_seconds", &[], 0.005);
        r.observe("tlpx_c_seconds", &[], 5.0);
        let text = r.render();
        let expected = "# HELP tlpx_a_total A.\n# TYPE tlpx_a_total counter\n\
            tlpx_a_total{dir=\"down\"} 1\ntlpx_a_total{dir=\"up\"} 5\n\
            # HELP tlpx_b_bytes B.\\nSecond \\\\ line.\n# TYPE tlpx_b_bytes gauge\n\
            tlpx_b_bytes{card=\"sim:/a\\\"b\\\\c\\nd\",z=\"1\"} 4096\n\
            # HELP tlpx_c_seconds C.\n# TYPE tlpx_c_seconds histogram\n\
            tlpx_c_seconds_bucket{le=\"1e-3\"} 1\ntlpx_c_seconds_bucket{le=\"1e-2\"} 2\n\
            tlpx_c_seconds_bucket{le=\"+Inf\"} 3\ntlpx_c_seconds_sum 5.0055e0\ntlpx_c_seconds_count 3\n";
        assert_eq!(text, expected);
        assert_eq!(r.render(), text, "stable output");
        assert_eq!(r.value("tlpx_a_total", &[("dir", "up")]), Some(5.0));
    }

    #[test]
    fn metrics_histogram_set_and_log2_bounds() {
        let r = Registry::default();
        let bounds = log2_cycle_bounds(4, 100_000_000);
        assert_eq!(bounds, vec![2e-8, 4e-8, 8e-8, 1.6e-7]);
        r.describe_histogram("tlpx_l_seconds", "L.", &bounds).unwrap();
        r.histogram_set("tlpx_l_seconds", &[], HistogramValue { counts: vec![1, 0, 2, 0, 1], sum: 1.0 });
        let text = r.render();
        assert!(text.contains("tlpx_l_seconds_bucket{le=\"8e-8\"} 3\n"), "{text}");
        assert!(text.contains("tlpx_l_seconds_count 4\n") && !text.contains("bad length"), "{text}");
    }

    #[test]
    fn metrics_listen_addresses() {
        assert_eq!(parse_listen(":9464").unwrap(), "127.0.0.1:9464".parse().unwrap());
        assert_eq!(parse_listen("0.0.0.0:1").unwrap(), "0.0.0.0:1".parse().unwrap());
        assert_eq!(parse_listen("[::1]:9464").unwrap(), "[::1]:9464".parse().unwrap());
        assert!(parse_listen("localhost:9464").is_ok());
        for bad in ["9464", "nope", "127.0.0.1:99999", "127.0.0.1:", ":x"] {
            let e = format!("{:#}", parse_listen(bad).unwrap_err());
            assert!(e.contains(bad) && e.contains("HOST:PORT"), "{e}");
        }
    }
}
