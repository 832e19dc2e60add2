//! The HTML page around the sections: its style, title and contents.

use super::*;

const CSS: &str = "
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 1em 2em; color: #222; }
h1 { border-bottom: 2px solid #444; }
section { border-top: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; vertical-align: top; }
td:first-child, th:first-child { text-align: left; }
.cols { display: flex; flex-wrap: wrap; gap: 2em; }
.cols td { text-align: left; max-width: 40em; word-break: break-word; }
.badge { display: inline-block; padding: 0.3em 0.8em; border-radius: 4px; font-weight: bold; }
.badge.sim { background: #fff3cd; border: 2px solid #d39e00; color: #6b4f00; }
.badge.hw { background: #d4edda; border: 2px solid #28a745; }
.badge.warn { background: #f8d7da; border: 2px solid #dc3545; }
figure { margin: 1em 0; }
svg.chart { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption, .note, .nodata { color: #555; font-size: 0.9em; }
ul.notes { color: #6b4f00; }
.limits { background: #fff8e1; border-left: 4px solid #d39e00; padding: 0.2em 1em; margin: 0.8em 0; }
.limits h3 { margin: 0.4em 0; font-size: 1em; }
.limits .concerns { color: #777; font-size: 0.85em; }
";

pub(super) fn page(title: &str, sections: &[Section], documents: usize, compared: &[String]) -> String {
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(h, "<meta name=\"generator\" content=\"tlpx {}\">", esc(env!("CARGO_PKG_VERSION")));
    let _ = writeln!(h, "<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>", esc(title));
    let _ = writeln!(h, "<h1>{}</h1>", esc(title));
    let (created, _) = results::utc_now();
    let _ =
        writeln!(h, "<p>Written by tlpx {} at {} from {} result documents.</p>", esc(env!("CARGO_PKG_VERSION")), esc(&created), documents);
    if compared.is_empty() {
        h.push_str(
            "<p>Nothing compared: no two results of the same kind that can be overlaid (bw, lat, pio, characterize, irq, loop).</p>",
        );
    } else {
        h.push_str("<p class=\"compared\">Compared: ");
        h.push_str(&compared.iter().map(|c| esc(c)).collect::<Vec<_>>().join("; "));
        h.push_str(". Their figures are overlaid, one colour per result, with a table of differences against the first.</p>");
    }
    h.push_str("<nav><ol>");
    for s in sections {
        let _ = write!(h, "<li><a href=\"#{}\">{}</a></li>", esc(&s.anchor), esc(&s.heading));
    }
    h.push_str("</ol></nav>\n");
    for s in sections {
        let _ = write!(h, "<section id=\"{}\">\n<h2>{}</h2>\n{}\n</section>\n", esc(&s.anchor), esc(&s.heading), s.body);
    }
    h.push_str("</body>\n</html>\n");
    h
}
