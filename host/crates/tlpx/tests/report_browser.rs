//! `tlpx report` opened in a real browser: Debian's Chromium, headless.
//!
//!   real results (simulator) ──tlpx report──► report.html ──+ probe script──► chromium --headless
//!        --dump-dom: the probe's verdict per figure        --enable-logging: the console
//!
//! The report itself has no script; the test appends a small probe to a copy that measures every
//! SVG figure after layout (a drawn figure has a non-empty bounding box and visible marks) and
//! writes its verdict into the DOM, which `--dump-dom` prints. Console errors (failed loads,
//! parse errors, uncaught exceptions) come on stderr with `--enable-logging=stderr`. A
//! screenshot of the page is kept as a test artefact in the target folder, not in the repo.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tlpx_testkit::SimProcess as Sim;

mod common;
use common::text;

fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

fn chromium() -> PathBuf {
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(c).exists() {
            return PathBuf::from(c);
        }
    }
    panic!("Chromium is not installed: `make setup` installs Debian's chromium package for this test");
}

const PROBE: &str = r#"<script>
window.addEventListener('load', () => {
  const out = [];
  document.querySelectorAll('svg').forEach((svg, i) => {
    const box = svg.getBoundingClientRect();
    const marks = svg.querySelectorAll('path, polyline, circle, rect, line').length;
    const ok = box.width > 50 && box.height > 50 && marks > 0;
    out.push((ok ? 'OK' : 'BAD') + ' ' + i + ' ' + Math.round(box.width) + 'x' + Math.round(box.height) + ' marks ' + marks);
  });
  const pre = document.createElement('pre');
  pre.id = 'tlpx-probe';
  pre.textContent = 'TLPX' + '-FIGURES ' + out.length + '\n' + out.join('\n');
  document.body.appendChild(pre);
});
</script>"#;

#[test]
fn every_figure_renders_in_chromium_with_a_clean_console() {
    let browser = chromium();
    let sim = Sim::start(&[]);
    let dir = sim.path("report");
    std::fs::create_dir_all(&dir).expect("dir");
    let results = [
        ("bw.json", vec!["bw", "--sizes", "64,1024", "--count", "100"]),
        ("lat.json", vec!["lat", "--count", "100"]),
        ("irq.json", vec!["irq", "--samples", "50", "--min", "10us", "--max", "30us"]),
        ("loop.json", vec!["loop", "--size", "64,1K", "--iterations", "10"]),
        ("spy.json", vec!["spy", "stats"]),
    ];
    let mut files = Vec::new();
    for (name, args) in &results {
        let path = dir.join(name);
        let mut a: Vec<&str> = args.clone();
        a.extend(["--output", path.to_str().expect("path")]);
        let out = tlpx(&sim.selector(), &a);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        files.push(path);
    }
    let r30 = dir.join("r30");
    let out = tlpx(
        &sim.selector(),
        &[
            "rule30",
            "sweep",
            "--packets",
            "2",
            "--generations",
            "3",
            "--lengths",
            "8,256",
            "--latencies",
            "10ns",
            "--out-dir",
            r30.to_str().expect("path"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    files.push(r30.join("rule30-sweep.json"));
    let html = dir.join("report.html");
    let mut args = vec!["report".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["--output".to_string(), html.display().to_string()]);
    let out = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).args(&args).output().expect("report");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).expect("report");
    let figures_in_page = page.matches("<svg").count();
    assert!(figures_in_page >= 5, "{figures_in_page} figures");

    // The probe copy, opened headless; its DOM after load carries the verdict.
    let probed = dir.join("probed.html");
    std::fs::write(&probed, page.replacen("</body>", &format!("{PROBE}</body>"), 1)).expect("probe copy");
    let profile = dir.join("chromium-profile");
    let common = [
        "--headless".to_string(),
        "--no-sandbox".to_string(),
        "--disable-gpu".to_string(),
        "--no-first-run".to_string(),
        format!("--user-data-dir={}", profile.display()),
        "--window-size=1280,4000".to_string(),
        "--enable-logging=stderr".to_string(),
        "--v=0".to_string(),
    ];
    let dom =
        Command::new(&browser).args(&common).arg("--dump-dom").arg(format!("file://{}", probed.display())).output().expect("chromium");
    assert!(dom.status.success(), "chromium failed: {}", text(&dom.stderr));
    let dom_text = text(&dom.stdout);
    let verdict = dom_text.split("TLPX-FIGURES ").nth(1).expect("the probe ran and wrote its verdict");
    let mut lines = verdict.lines();
    let count: usize = lines.next().and_then(|l| l.trim().parse().ok()).expect("figure count");
    assert_eq!(count, figures_in_page, "every figure of the page is in the DOM");
    let rows: Vec<&str> = lines.take(count).collect();
    assert!(rows.iter().all(|r| r.starts_with("OK ")), "figures that did not render: {rows:?}");
    // The console: Chromium logs console messages and page errors as CONSOLE lines.
    let console: Vec<String> = text(&dom.stderr)
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load"))
        .map(str::to_string)
        .collect();
    assert!(console.is_empty(), "the console is not clean: {console:?}");

    // The report as it is (without the probe), kept as a screenshot artefact.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
    let out = Command::new(&browser)
        .args(&common)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium screenshot");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"), "{} bytes", png.len());
    eprintln!("screenshot: {}", shot.display());
}
