//! Which card carries which link: a card moves `data_width / 8` bytes per cycle each way, so
//! its datapath keeps up with a link when `data_width / 8 × clock ≥ raw link bytes/s`. Without
//! `--data-width`, tlpx-sim takes the smallest built card that keeps up (a wider datapath
//! costs simulation speed), else the widest with a warning that the datapath, not the link,
//! limits.

use tlpx_model::link::LinkConfig;

/// Bytes per second one direction of a card's datapath moves.
pub fn datapath_bytes_per_second(data_width: u32, clock_hz: f64) -> f64 {
    f64::from(data_width) / 8.0 * clock_hz
}

/// The lanes tlpx-sim gives a card when `--lanes` is not given: Gen2 x1, x4, x8 on the 64,
/// 128, 256-bit cards are LitePCIe's 7-series PHY pairings.
pub fn default_lanes(data_width: u32) -> u8 {
    match data_width {
        128 => 4,
        256 => 8,
        _ => 1,
    }
}

/// A card choice: its data width and whether its datapath is slower than the link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WidthChoice {
    pub data_width: u32,
    pub clock_hz: f64,
    pub datapath_limited: bool,
}

/// Picks among `built` cards (data width, card clock in Hz) the smallest width whose
/// datapath carries `link_raw_bytes_per_second`; if none can, the widest, flagged as
/// datapath-limited. `None` when `built` is empty.
pub fn choose_data_width(link_raw_bytes_per_second: f64, built: &[(u32, f64)]) -> Option<WidthChoice> {
    let mut cards: Vec<(u32, f64)> = built.to_vec();
    cards.sort_by_key(|c| c.0);
    let fits = cards.iter().find(|(w, clk)| datapath_bytes_per_second(*w, *clk) >= link_raw_bytes_per_second);
    match fits {
        Some(&(data_width, clock_hz)) => Some(WidthChoice { data_width, clock_hz, datapath_limited: false }),
        None => cards.last().map(|&(data_width, clock_hz)| WidthChoice { data_width, clock_hz, datapath_limited: true }),
    }
}

/// The warning tlpx-sim prints when the card's datapath is slower than the link, else None.
pub fn datapath_warning(link: &LinkConfig, data_width: u32, clock_hz: f64) -> Option<String> {
    let dp = datapath_bytes_per_second(data_width, clock_hz);
    let raw = link.raw_bytes_per_second();
    if dp >= raw {
        return None;
    }
    let advice = if data_width < 256 {
        "use a wider --data-width, fewer --lanes or a lower --gen"
    } else {
        "the widest card; use fewer --lanes or a lower --gen"
    };
    Some(format!(
        "the {data_width}-bit card at {:.0} MHz moves {:.2} GB/s each way, less than the {:.2} GB/s of a Gen{} x{} link: \
         the datapath, not the link, limits throughput ({advice})",
        clock_hz / 1e6,
        dp / 1e9,
        raw / 1e9,
        link.generation,
        link.lanes
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cards `make gateware-all` builds: 64 and 128 bits at 125 MHz, 256 at 250 MHz.
    const BUILT: [(u32, f64); 3] = [(64, 125e6), (128, 125e6), (256, 250e6)];

    fn raw(generation: u8, lanes: u8) -> f64 {
        LinkConfig::new(generation, lanes, 256, 512, 64, false).expect("valid").raw_bytes_per_second()
    }

    #[test]
    fn the_smallest_card_that_keeps_up_is_chosen() {
        // (generation, lanes, expected width, datapath-limited)
        let cases = [
            (1, 1, 64, false),  // 0.25 GB/s
            (1, 4, 64, false),  // 1.00 GB/s = 64 bits × 125 MHz exactly
            (1, 8, 128, false), // 2.00 GB/s
            (1, 16, 256, false),
            (2, 1, 64, false),   // 0.50
            (2, 2, 64, false),   // 1.00
            (2, 4, 128, false),  // 2.00 = 128 bits × 125 MHz exactly
            (2, 8, 256, false),  // 4.00
            (2, 16, 256, false), // 8.00 = 256 bits × 250 MHz exactly
            (3, 1, 64, false),   // 0.98
            (3, 2, 128, false),  // 1.97
            (3, 4, 256, false),  // 3.94
            (3, 8, 256, false),  // 7.88
            (3, 16, 256, true),  // 15.75
            (4, 4, 256, false),  // 7.88
            (4, 8, 256, true),
            (5, 2, 256, false), // 7.88
            (5, 16, 256, true),
        ];
        for (g, l, width, limited) in cases {
            let c = choose_data_width(raw(g, l), &BUILT).expect("cards");
            assert_eq!((c.data_width, c.datapath_limited), (width, limited), "Gen{g} x{l}");
        }
    }

    #[test]
    fn only_built_cards_are_candidates() {
        let c = choose_data_width(raw(2, 4), &[(256, 250e6), (64, 125e6)]).expect("cards");
        assert_eq!(c.data_width, 256, "no 128-bit card built: the next wider one");
        let c = choose_data_width(raw(2, 8), &[(64, 125e6)]).expect("cards");
        assert_eq!((c.data_width, c.datapath_limited), (64, true));
        assert_eq!(choose_data_width(raw(1, 1), &[]), None);
    }

    #[test]
    fn the_warning_names_both_rates() {
        let link = LinkConfig::new(2, 4, 256, 512, 64, false).expect("valid");
        assert_eq!(datapath_warning(&link, 128, 125e6), None);
        let w = datapath_warning(&link, 64, 125e6).expect("slower");
        assert!(w.contains("64-bit") && w.contains("1.00 GB/s") && w.contains("2.00 GB/s") && w.contains("Gen2 x4"), "{w}");
        assert!(w.contains("datapath, not the link"), "{w}");
    }

    #[test]
    fn default_lanes_are_litepcie_pairings() {
        assert_eq!([default_lanes(64), default_lanes(128), default_lanes(256)], [1, 4, 8]);
    }
}
