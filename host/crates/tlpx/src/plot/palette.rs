//! The colours of every figure tlpx draws: colour-blind safe, and none twice in one figure.
//!
//! The first seven are Okabe and Ito's palette ("Color Universal Design", 2002) without its
//! black, which stays for the model's line; yellow comes last of them, being the faintest on
//! white. Figures with more series go on with Paul Tol's "muted" scheme (also designed for
//! colour-blind readers), and past those with distinct greys: a colour is never reused.

/// The model's line when a figure has one.
pub const MODEL: &str = "#000000";

/// Series colours in the order series take them.
pub const PALETTE: [&str; 15] = [
    // Okabe-Ito: blue, vermillion, bluish green, reddish purple, orange, sky blue, yellow.
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
    // Paul Tol's muted: indigo, wine, teal, olive, purple, green, cyan, sand.
    "#332288", "#882255", "#44AA99", "#999933", "#AA4499", "#117733", "#88CCEE", "#DDCC77",
];

/// The colour of the `i`th series of a figure (distinct for every `i`).
pub fn colour(i: usize) -> String {
    match PALETTE.get(i) {
        Some(c) => (*c).to_string(),
        None => {
            // Past the palette: greys 0x20, 0x28, ... (and a blue step every 24, so they stay
            // distinct): seldom reached, never reused.
            let k = i - PALETTE.len();
            let g = 0x20 + (k % 24) * 8;
            format!("#{g:02X}{g:02X}{:02X}", (g + (k / 24) * 4).min(0xff))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_distinct_and_not_the_models() {
        let all: Vec<String> = (0..200).map(colour).collect();
        let mut set: Vec<String> = all.iter().map(|c| c.to_uppercase()).collect();
        set.sort();
        set.dedup();
        assert_eq!(set.len(), all.len(), "a colour repeats");
        assert!(!set.contains(&MODEL.to_string()));
        assert_eq!(colour(0), "#0072B2");
    }
}
