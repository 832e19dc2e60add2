//! A figure's legend, drawn in the strip beside the plot (never on the data), as one
//! `<g class="legend">` so that a reader (and the browser check of tests/report_browser.rs)
//! can find its box.

use std::fmt::Write as _;

use crate::output::{truncate, xml_escape};

/// How an entry's swatch looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swatch {
    /// A line (the model, CDFs).
    Line,
    /// A line with a point on it (measured series).
    LinePoint,
    /// A filled box (histogram bars).
    Bar,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub label: String,
    pub colour: String,
    pub mark: Swatch,
    /// Dashed (software modes of rule 30).
    pub dashed: bool,
}

/// Height of one entry.
pub const ROW: f64 = 18.0;

/// The legend's SVG: entries from (x, top), `width` wide (labels cut to fit, the full label in
/// a tooltip).
pub fn svg(entries: &[Entry], x: f64, top: f64, width: f64) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let chars = ((width - 30.0) / 6.6).max(8.0) as usize;
    let mut s = String::from("<g class=\"legend\">");
    for (i, e) in entries.iter().enumerate() {
        let y = top + 12.0 + ROW * i as f64;
        let c = &e.colour;
        let dash = if e.dashed { " stroke-dasharray=\"5 3\"" } else { "" };
        match e.mark {
            Swatch::Line => {
                let _ = write!(
                    s,
                    "<line x1=\"{x}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"{c}\" stroke-width=\"2\"{dash}/>",
                    y - 4.0,
                    x + 20.0
                );
            }
            Swatch::LinePoint => {
                let _ = write!(
                    s,
                    "<line x1=\"{x}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"{c}\" stroke-width=\"1.5\"{dash}/>",
                    y - 4.0,
                    x + 20.0
                );
                let _ = write!(s, "<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{c}\"/>", x + 10.0, y - 4.0);
            }
            Swatch::Bar => {
                let _ = write!(
                    s,
                    "<rect x=\"{x}\" y=\"{}\" width=\"20\" height=\"10\" fill=\"{c}\" fill-opacity=\"0.6\" stroke=\"{c}\"/>",
                    y - 9.0
                );
            }
        }
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{y}\" font-size=\"12\" font-family=\"sans-serif\"><title>{}</title>{}</text>",
            x + 26.0,
            xml_escape(&e.label),
            xml_escape(&truncate(&e.label, chars))
        );
    }
    s.push_str("</g>");
    s
}
