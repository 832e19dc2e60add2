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
//! and `--metrics-listen HOST:PORT` ([`bind`], [`Exporter::serve`]) serves it at
//! `http://HOST:PORT/metrics` in the text exposition format 0.0.4: families sorted by name,
//! series by labels, labels by name, so two scrapes of the same values are byte-identical. The
//! text is written by the `prometheus-client` crate's encoder ([`Snapshot`] says why the store
//! is still this file's); the HTTP side, with its bounds, is this file's (docs/dashboards.md
//! says why neither tiny_http nor hyper took it).
//!
//! Names follow Prometheus's conventions, checked when a family is described: the `tlpx_`
//! prefix, base units in the name (`_seconds`, `_bytes`), counters end in `_total`.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The default listen address: loopback only, on 9464 (the port of OpenTelemetry's
/// Prometheus exporter; free next to node_exporter's 9100).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// Content type of the text exposition format 0.0.4 (the encoder's own constant).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

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

#[derive(Debug, Clone)]
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

    /// The text exposition format 0.0.4 of every family that has series, written by the
    /// `prometheus-client` crate's encoder (escaping, number and `le` formatting, histogram
    /// lines) from a snapshot of this registry taken under its lock.
    pub fn render(&self) -> String {
        let snapshot = Snapshot(self.lock().iter().filter(|(_, f)| !f.series.is_empty()).map(|(n, f)| (n.clone(), f.clone())).collect());
        let mut encoding = prometheus_client::registry::Registry::default();
        encoding.register_collector(Box::new(snapshot));
        let mut out = String::new();
        // Writing to a String fails only if a value refuses to format, which none of ours does.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &encoding);
        out
    }
}

/// The families of a [`Registry`] at one instant, sorted by name, for the encoder. The store
/// stays tlpx's own (not the crate's `Family`/`Counter`): the collector sets counters to running
/// totals it keeps and histograms to bucket counts the card kept, which the crate's metric types
/// (increment and observe only) cannot hold, and its families iterate a `HashMap`, where two
/// scrapes of the same values must be byte-identical. A `Collector` is the crate's way for
/// exporters of values kept elsewhere.
#[derive(Debug)]
struct Snapshot(Vec<(String, Family)>);

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::NoLabelSet;
        use prometheus_client::metrics::MetricType;
        for (name, f) in &self.0 {
            let help = if f.help.is_empty() { "(no description)" } else { &f.help };
            // The encoder appends `_total` to a counter's name on every line (HELP, TYPE and
            // samples), so the name given is the family's without it: the names written are
            // tlpx's own, byte for byte (check_name made every counter end in `_total`).
            let (base, kind) = match f.kind {
                Kind::Counter => (name.strip_suffix("_total").unwrap_or(name), MetricType::Counter),
                Kind::Gauge => (name.as_str(), MetricType::Gauge),
                Kind::Histogram => (name.as_str(), MetricType::Histogram),
            };
            let mut family = encoder.encode_descriptor(base, help, None, kind)?;
            for (labels, value) in &f.series {
                let mut series = family.encode_family(labels)?;
                match value {
                    Value::Scalar(x) if f.kind == Kind::Counter => series.encode_counter::<NoLabelSet, f64, f64>(x, None)?,
                    Value::Scalar(x) => series.encode_gauge(x)?,
                    Value::Histogram(h) => {
                        // Per-bucket counts (not cumulative: the encoder sums them), the +Inf one
                        // given too: the 0.0.4 encoder would add it, but the crate's OpenMetrics
                        // encoder writes only the buckets it is given, and Prometheus 2.42 takes
                        // a histogram without it (histogram_quantile is then NaN): checked by hand.
                        let bounds = f.bounds.iter().copied().chain([f64::INFINITY]);
                        let buckets: Vec<(f64, u64)> = bounds.zip(h.counts.iter().copied()).collect();
                        series.encode_histogram::<NoLabelSet>(h.sum, h.count(), &buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
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

/// Bytes of a request's head (request line and headers) read at most. A scrape's head is a
/// few hundred bytes (Prometheus sends five headers); 8 KiB is the usual bound of HTTP servers
/// (nginx's header buffer, Apache's LimitRequestLine). A longer head is answered 431 unread.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Connections answered at once. Scrapers are few (Prometheus asks a target one request at a
/// time), so more than this is a flood: further connections are answered 503 and closed at
/// once, by the listener itself, without a thread.
pub const MAX_CONNECTIONS: usize = 8;
/// How long a connection may take to send its request head, in all: an idle or slow client
/// holds its slot no longer than this (answered 408).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing an answer may take, in all (a client that does not read is dropped).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// After a refused request head, how long what the client still sends is read and dropped, so
/// that it sees the answer rather than a reset connection (TCP resets a connection closed with
/// unread data).
const LINGER: Duration = Duration::from_secs(2);

/// Connections being answered right now (see [`finish`]); only the listener thread adds.
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
                for stream in listener.incoming() {
                    let Ok(stream) = stream else {
                        // e.g. out of file descriptors: give the process a moment, not a busy loop
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    if IN_FLIGHT.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                        busy(stream);
                        continue;
                    }
                    // A thread per connection, at most MAX_CONNECTIONS of them, each for at most
                    // REQUEST_TIMEOUT + RESPONSE_TIMEOUT (+ LINGER): a slow client never blocks
                    // the next, and a flood of them never takes more.
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

/// Binds `text` (see [`parse_listen`]); nothing is answered until [`Exporter::serve`]. An
/// address other than loopback is bound as asked, with a warning on stderr: the metrics are
/// served to whoever reaches it.
pub fn bind(text: &str) -> anyhow::Result<Exporter> {
    let addr = parse_listen(text)?;
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics-listen {text:?}: cannot listen on {addr}"))?;
    let address = listener.local_addr().context("the exporter's address")?;
    if let Some(warning) = exposure_warning(address) {
        eprintln!("tlpx: warning: {warning}");
    }
    Ok(Exporter { address, listener: Some(listener) })
}

/// What to say when the exporter listens where others can reach it; `None` on loopback.
pub fn exposure_warning(address: SocketAddr) -> Option<String> {
    if address.ip().to_canonical().is_loopback() {
        return None;
    }
    Some(format!(
        "the metrics exporter listens on {address}, not on a loopback address: anyone who can reach it can read \
         the card's metrics (plain HTTP, no authentication); listen on 127.0.0.1 (the default) or put it behind a proxy \
         that authenticates"
    ))
}

/// Before the process exits: lets scrapes already being answered finish (up to `limit`), so
/// a scrape that lands as a command ends gets its whole answer, not a reset connection.
pub fn finish(limit: Duration) {
    let deadline = Instant::now() + limit;
    while IN_FLIGHT.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A connection over [`MAX_CONNECTIONS`]: 503 and closed, without waiting for anything (the
/// listener thread must not block: the socket is non-blocking, and its send buffer, empty,
/// takes the short answer whole).
fn busy(stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let body = format!("tlpx: the exporter answers {MAX_CONNECTIONS} connections at once; try again\n");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = &stream;
    let _ = s.write_all(response.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    // what the client sent already, dropped, so that closing does not reset the answer away
    let mut sink = [0u8; 4096];
    let _ = s.read(&mut sink);
}

/// How reading a request head ended.
enum Head {
    /// The head (up to its blank line, or all the client sent before it closed its side).
    Complete(Vec<u8>),
    /// More than [`MAX_REQUEST_HEAD`] bytes without the blank line that ends a head.
    TooLarge,
    /// The head did not come within [`REQUEST_TIMEOUT`].
    TimedOut,
    /// Nothing came, or the connection failed.
    Gone,
}

/// Reads a request head: at most [`MAX_REQUEST_HEAD`] bytes, within `deadline` in all.
fn read_head(stream: &TcpStream, deadline: Instant) -> Head {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let mut s = stream;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Head::TimedOut;
        }
        // never more than one byte past the cap, which is enough to know it is passed
        let want = chunk.len().min(MAX_REQUEST_HEAD + 1 - head.len());
        match s.read(&mut chunk[..want]) {
            Ok(0) if head.is_empty() => return Head::Gone,
            Ok(0) => return Head::Complete(head),
            Ok(n) => {
                // the blank line may straddle two reads
                let from = head.len().saturating_sub(3);
                head.extend_from_slice(&chunk[..n]);
                if let Some(end) = head_end(&head, from) {
                    if end > MAX_REQUEST_HEAD {
                        return Head::TooLarge;
                    }
                    head.truncate(end);
                    return Head::Complete(head);
                }
                if head.len() > MAX_REQUEST_HEAD {
                    return Head::TooLarge;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return Head::TimedOut,
            Err(_) => return Head::Gone,
        }
    }
}

/// Where the head in `bytes` ends (just after its blank line, CRLF or bare LF), looking from
/// `from` on.
fn head_end(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len()).find_map(|i| match &bytes[i..] {
        [b'\r', b'\n', b'\r', b'\n', ..] => Some(i + 4),
        [b'\n', b'\n', ..] => Some(i + 2),
        _ => None,
    })
}

/// Writes `bytes` within `deadline` in all.
fn write_within(stream: &TcpStream, bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    let mut s = stream;
    for piece in bytes.chunks(16 * 1024) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        s.write_all(piece)?;
    }
    s.flush()
}

/// Answers one HTTP request on `stream`: the exposition of `registry` at /metrics.
fn answer(stream: TcpStream, registry: &Registry) {
    let plain = "text/plain; charset=utf-8";
    let head = read_head(&stream, Instant::now() + REQUEST_TIMEOUT);
    // A client refused for a head too long may still be sending it.
    let linger = matches!(head, Head::TooLarge);
    let (request, refused) = match head {
        Head::Complete(head) => (head, None),
        Head::TooLarge => (
            Vec::new(),
            Some(("431 Request Header Fields Too Large", format!("the request line and headers are more than {MAX_REQUEST_HEAD} bytes\n"))),
        ),
        Head::TimedOut => {
            (Vec::new(), Some(("408 Request Timeout", format!("the request did not come within {} s\n", REQUEST_TIMEOUT.as_secs()))))
        }
        Head::Gone => return,
    };
    let request_line = request.split(|&b| b == b'\n').next().map(String::from_utf8_lossy).unwrap_or_default();
    let mut words = request_line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (refused, method, path) {
        (Some((status, body)), _, _) => (status, plain, body),
        (None, "GET" | "HEAD", "/metrics") => ("200 OK", CONTENT_TYPE, registry.render()),
        (None, _, "/metrics") => ("405 Method Not Allowed", plain, "only GET and HEAD\n".to_string()),
        _ => ("404 Not Found", plain, "tlpx serves its metrics at /metrics\n".to_string()),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" }
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    if write_within(&stream, response.as_bytes(), Instant::now() + RESPONSE_TIMEOUT).is_err() {
        return;
    }
    if linger {
        // Read and drop what it still sends for a while (a fixed buffer), so that it reads
        // the answer instead of a reset.
        let _ = stream.shutdown(Shutdown::Write);
        let until = Instant::now() + LINGER;
        let mut sink = [0u8; 8192];
        let mut s = &stream;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match s.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
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
        // Values and `le` bounds as prometheus-client writes them (bounds as Go's client does:
        // 0.001, 2e-08); names, HELP texts, label escapes and order as tlpx wrote them before.
        let expected = "# HELP tlpx_a_total A.\n# TYPE tlpx_a_total counter\n\
            tlpx_a_total{dir=\"down\"} 1.0\ntlpx_a_total{dir=\"up\"} 5.0\n\
            # HELP tlpx_b_bytes B.\\nSecond \\\\ line.\n# TYPE tlpx_b_bytes gauge\n\
            tlpx_b_bytes{card=\"sim:/a\\\"b\\\\c\\nd\",z=\"1\"} 4096.0\n\
            # HELP tlpx_c_seconds C.\n# TYPE tlpx_c_seconds histogram\n\
            tlpx_c_seconds_bucket{le=\"0.001\"} 1\ntlpx_c_seconds_bucket{le=\"0.01\"} 2\n\
            tlpx_c_seconds_bucket{le=\"+Inf\"} 3\ntlpx_c_seconds_sum 5.0055\ntlpx_c_seconds_count 3\n";
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
        assert!(text.contains("tlpx_l_seconds_bucket{le=\"8e-08\"} 3\n"), "{text}");
        assert!(text.contains("tlpx_l_seconds_count 4\n") && !text.contains("bad length"), "{text}");
    }

    #[test]
    fn metrics_exposure_is_warned_about_off_loopback_only() {
        for quiet in ["127.0.0.1:9464", "[::1]:9464", "[::ffff:127.0.0.1]:9464", "127.0.0.2:1"] {
            assert_eq!(exposure_warning(quiet.parse().unwrap()), None, "{quiet}");
        }
        for open in ["0.0.0.0:9464", "[::]:9464", "192.168.1.2:9464"] {
            let w = exposure_warning(open.parse().unwrap()).unwrap_or_else(|| panic!("{open}: no warning"));
            assert!(w.contains(open) && w.contains("no authentication"), "{w}");
        }
    }

    /// What `read_head` makes of `sent` (then the client's side closed, or not).
    fn head_of(sent: &[u8], close: bool) -> Head {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let sent = sent.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = client.write_all(&sent);
            if close {
                let _ = client.shutdown(Shutdown::Write);
            }
            client
        });
        let head = read_head(&server, Instant::now() + Duration::from_millis(500));
        drop(writer.join().unwrap());
        head
    }

    #[test]
    fn metrics_request_heads_end_at_their_blank_line_within_the_cap() {
        // (a long head by its length only: a failure message stays readable)
        let complete = |sent: &[u8], close: bool| match head_of(sent, close) {
            Head::Complete(h) if h.len() > 100 => format!("{} bytes", h.len()),
            Head::Complete(h) => String::from_utf8(h).unwrap(),
            Head::TooLarge => "too large".into(),
            Head::TimedOut => "timed out".into(),
            Head::Gone => "gone".into(),
        };
        assert_eq!(complete(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\nbody", false), "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
        assert_eq!(complete(b"GET / HTTP/1.0\n\n", false), "GET / HTTP/1.0\n\n");
        // no blank line: what came before the client closed its side, or a timeout
        assert_eq!(complete(b"GET /metrics", true), "GET /metrics");
        assert_eq!(complete(b"GET /metrics HTTP/1.0\r\n", false), "timed out");
        assert_eq!(complete(b"", true), "gone");
        // the cap: a head of exactly MAX_REQUEST_HEAD bytes is read, one more byte is not
        let mut head = vec![b'a'; MAX_REQUEST_HEAD - 4];
        head.extend_from_slice(b"\r\n\r\n");
        assert_eq!(complete(&head, false), format!("{MAX_REQUEST_HEAD} bytes"));
        head.insert(0, b'a');
        assert_eq!(complete(&head, false), "too large");
        assert_eq!(complete(&vec![b'a'; 1 << 20], false), "too large");
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
