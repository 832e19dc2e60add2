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

use crate::common;
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
        ("irq.json", vec!["irq", "--samples", "50", "--min", "10us", "--max", "30us", "--svg", "IRQ_SVG"]),
        ("loop.json", vec!["loop", "--size", "8,64", "--iterations", "10", "--svg", "LOOP_SVG"]),
        ("spy.json", vec!["spy", "stats"]),
    ];
    let mut files = Vec::new();
    for (name, args) in &results {
        let path = dir.join(name);
        let (irq_svg, loop_svg) = (dir.join("irq.svg"), dir.join("loop.svg"));
        let mut a: Vec<&str> = args
            .iter()
            .map(|x| match *x {
                "IRQ_SVG" => irq_svg.to_str().expect("path"),
                "LOOP_SVG" => loop_svg.to_str().expect("path"),
                other => other,
            })
            .collect();
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
    // No colour twice in any figure: the report's, and the SVG files irq, loop and rule30 wrote
    // (the loop histogram of 8 B and 64 B, the rule-30 landscape of every mode).
    let mut svgs: Vec<String> = page.split("<svg").skip(1).map(|f| format!("<svg{}", f.split("</svg>").next().expect("svg"))).collect();
    for f in [dir.join("irq.svg"), dir.join("loop.svg")] {
        svgs.push(std::fs::read_to_string(&f).expect("svg file"));
    }
    for e in std::fs::read_dir(&r30).expect("rule30 figures") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "svg") {
            svgs.push(std::fs::read_to_string(&p).expect("svg"));
        }
    }
    assert!(svgs.len() >= figures_in_page + 4, "{} figures", svgs.len());
    no_colour_twice(&svgs);
    let loop_svg = std::fs::read_to_string(dir.join("loop.svg")).expect("loop.svg");
    let irq_svg = std::fs::read_to_string(dir.join("irq.svg")).expect("irq.svg");
    assert!(!loop_svg.contains("log2(ns)") && !irq_svg.contains("log2(ns)"), "histogram axes in time units");
    assert!(irq_svg.contains(" µs</text>") || irq_svg.contains(" ns</text>"), "the irq histogram's ticks in ns or µs");
    // The report's loop histogram has the 8 B and the 64 B loops side by side, each in the legend.
    assert!(page.contains("<title>8 B</title>") && page.contains("<title>64 B</title>"), "both sizes in the loop histogram");
    // Legends beside the plots: checked on the rasterised figures.
    legends_clear_of_the_plots(&browser, &page, &dir);

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

/// Rasterises every figure in the browser without its legend and counts the dark pixels
/// inside the legend's box: a legend outside the data has none under it. A copy of the first
/// figure with its legend moved onto the plot (data, grid) is checked the same way and must
/// fail, so the check is known to see an overlap. Writes "TLPX-LEGENDS n" and a line per figure.
const LEGEND_PROBE: &str = r#"<script>
window.addEventListener('load', async () => {
  const figures = [...document.querySelectorAll('svg')].filter(s => s.querySelector('g.legend'));
  if (figures.length > 0) {
    // The deliberate overlap: the first figure's legend moved to the middle of its plot.
    const bad = figures[0].cloneNode(true);
    bad.setAttribute('data-deliberate', '1');
    document.body.appendChild(bad);
    const g = bad.querySelector('g.legend');
    const bb = g.getBBox();
    const vb = bad.viewBox.baseVal;
    g.setAttribute('transform', `translate(${vb.width * 0.35 - bb.x - bb.width / 2}, ${vb.height * 0.5 - bb.y - bb.height / 2})`);
    figures.push(bad);
  }
  const out = [];
  for (const [i, svg] of figures.entries()) {
    const vb = svg.viewBox.baseVal;
    const legend = svg.querySelector('g.legend');
    // The legend's box in the figure's own units, through any transform it has.
    const bb = legend.getBBox();
    const m = legend.transform.baseVal.consolidate();
    const dx = m ? m.matrix.e : 0, dy = m ? m.matrix.f : 0;
    const box = { x: Math.floor(bb.x + dx), y: Math.floor(bb.y + dy), w: Math.ceil(bb.width), h: Math.ceil(bb.height) };
    const copy = svg.cloneNode(true);
    copy.querySelector('g.legend').remove();
    copy.setAttribute('width', vb.width);
    copy.setAttribute('height', vb.height);
    const img = new Image();
    img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(new XMLSerializer().serializeToString(copy));
    await img.decode();
    const canvas = document.createElement('canvas');
    canvas.width = vb.width;
    canvas.height = vb.height;
    const ctx = canvas.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(box.x, box.y, Math.max(box.w, 1), Math.max(box.h, 1)).data;
    let ink = 0;
    for (let k = 0; k < px.length; k += 4) {
      if (px[k + 3] > 0 && (px[k] < 235 || px[k + 1] < 235 || px[k + 2] < 235)) ink++;
    }
    const ok = ink === 0 && box.w > 10 && box.h > 10;
    const tag = svg.getAttribute('data-deliberate') ? 'DELIBERATE' : 'FIGURE';
    out.push(`${ok ? 'OK' : 'BAD'} ${tag} ${i} box ${box.x},${box.y} ${box.w}x${box.h} ink ${ink}`);
  }
  const pre = document.createElement('pre');
  pre.textContent = 'TLPX' + '-LEGENDS ' + out.length + '\n' + out.join('\n');
  document.body.appendChild(pre);
});
</script>"#;

/// Runs LEGEND_PROBE over `page` in headless Chromium and asserts its verdict: every figure
/// clear, the deliberate overlap caught.
fn legends_clear_of_the_plots(browser: &Path, page: &str, dir: &Path) {
    let probed = dir.join("legend-probed.html");
    std::fs::write(&probed, page.replacen("</body>", &format!("{LEGEND_PROBE}</body>"), 1)).expect("probe copy");
    let dom = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--virtual-time-budget=20000", "--window-size=1280,4000"])
        .arg(format!("--user-data-dir={}", dir.join("chromium-legend-profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", probed.display()))
        .output()
        .expect("chromium");
    assert!(dom.status.success(), "chromium failed: {}", text(&dom.stderr));
    let dom_text = text(&dom.stdout);
    let verdict =
        dom_text.split("TLPX-LEGENDS ").nth(1).and_then(|v| v.split("</pre>").next()).expect("the legend probe ran and wrote its verdict");
    let mut lines = verdict.lines();
    let count: usize = lines.next().and_then(|l| l.trim().parse().ok()).expect("count");
    let rows: Vec<&str> = lines.take(count).collect();
    let in_page = page.matches("<g class=\"legend\">").count();
    assert!(in_page > 0, "no figure with a legend");
    assert_eq!(count, in_page + 1, "every figure with a legend, and the deliberate overlap: {rows:?}");
    let figures: Vec<&&str> = rows.iter().filter(|r| r.contains(" FIGURE ")).collect();
    assert_eq!(figures.len(), in_page);
    assert!(figures.iter().all(|r| r.starts_with("OK ")), "legends over the plot: {figures:?}");
    let deliberate = rows.iter().find(|r| r.contains(" DELIBERATE ")).expect("the deliberate overlap");
    assert!(deliberate.starts_with("BAD ") && !deliberate.ends_with(" ink 0"), "a legend moved onto the plot must fail: {deliberate}");
    eprintln!("legend check: {} figures clear; deliberate overlap: {deliberate}", figures.len());
}

/// Asserts that no figure in `svgs` uses a colour twice (each has a legend with a colour per series).
fn no_colour_twice(svgs: &[String]) {
    for svg in svgs {
        assert!(!common::legend_colours(svg).is_empty(), "a figure without a legend: {}", &svg[..200.min(svg.len())]);
        assert_eq!(common::repeated_colours(svg), Vec::<String>::new(), "a colour reused in a figure");
    }
}

fn characterize(sim: &Sim, dir: &Path) -> PathBuf {
    let out = tlpx(
        &sim.selector(),
        &[
            "characterize",
            "--sizes",
            "64,256,1024",
            "--count",
            "50",
            "--lat-count",
            "50",
            "--widths",
            "4,8",
            "--pio-count",
            "10",
            "--out-dir",
            dir.to_str().expect("path"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    dir.join("characterize.json")
}

#[test]
fn two_characterisations_are_overlaid_and_no_legend_covers_a_plot() {
    let browser = chromium();
    let (x1, x4) = (Sim::start(&["--gen", "2", "--lanes", "1"]), Sim::start(&["--gen", "2", "--lanes", "4"]));
    let dir = x1.path("overlay");
    let (a, b) = (characterize(&x1, &dir.join("x1")), characterize(&x4, &dir.join("x4")));
    let html = dir.join("report.html");
    let out = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")))
        .args(["--json", "report", "--output"])
        .arg(&html)
        .arg(&a)
        .arg(&b)
        .output()
        .expect("report");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let sections = summary["sections"].as_array().expect("sections");
    // The comparison first: three bandwidth overlays, two CDFs, PIO; then each result.
    assert_eq!(sections[0]["kind"], "comparison of characterize");
    assert_eq!(sections[0]["figures"], 6, "{summary}");
    assert_eq!(sections.len(), 3);
    let page = std::fs::read_to_string(&html).expect("report");
    // The index says what was compared; each overlay has both results in its legend.
    let index = page.split("<nav>").next().expect("head");
    assert!(index.contains("Compared: 2 characterize results: #1 ") && index.contains("#2 "), "{index}");
    let comparison = page.split("<section id=\"r1\">").nth(1).and_then(|s| s.split("</section>").next()).expect("comparison");
    let overlays: Vec<&str> = comparison.split("<svg").skip(1).collect();
    assert_eq!(overlays.len(), 6);
    for f in &overlays {
        assert!(f.contains("#1, Gen2 x1, MPS 256") && f.contains("#2, Gen2 x4, MPS 256"), "an overlay without both results");
    }
    // The difference table, by tlpx diff's rules: the bandwidths changed with the lanes.
    assert!(comparison.contains("Differences: #2, Gen2 x4, MPS 256 against #1, Gen2 x1, MPS 256"), "difference table");
    assert!(comparison.contains("<td>DMA read: best sustained bandwidth</td>") && comparison.contains("<td>CHANGED</td>"));
    // No colour twice in one figure (the report's and the figures characterize wrote).
    let mut svgs: Vec<String> = page.split("<svg").skip(1).map(|f| format!("<svg{}", f.split("</svg>").next().expect("svg"))).collect();
    for d in [dir.join("x1"), dir.join("x4")] {
        for e in std::fs::read_dir(&d).expect("figures") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "svg") {
                svgs.push(std::fs::read_to_string(&p).expect("svg"));
            }
        }
    }
    assert!(svgs.len() >= 6 + 10 + 10, "{} figures", svgs.len());
    no_colour_twice(&svgs);

    // In the browser: every figure rasterised without its legend has no ink under the legend.
    let profile = dir.join("chromium-profile");
    legends_clear_of_the_plots(&browser, &page, &dir);
    let shot_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));

    // The report as it is, kept as a screenshot artefact.
    let shot = shot_dir.join("report-overlay-screenshot.png");
    let out = Command::new(&browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1280,6000"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium screenshot");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"), "{} bytes", png.len());
    eprintln!("screenshot: {}", shot.display());
}

#[test]
fn the_colour_check_sees_a_repeated_colour() {
    let good = "<svg><g class=\"legend\"><line stroke=\"#0072B2\"/><text>a</text><line stroke=\"#D55E00\"/><text>b</text></g></svg>";
    let bad = "<svg><g class=\"legend\"><line stroke=\"#0072B2\"/><text>a</text><rect fill=\"#0072b2\"/><text>b</text></g></svg>";
    assert_eq!(common::legend_colours(good), vec![vec!["#0072B2".to_string(), "#D55E00".to_string()]]);
    assert!(common::repeated_colours(good).is_empty());
    assert_eq!(common::repeated_colours(bad), vec!["#0072B2".to_string()]);
}
