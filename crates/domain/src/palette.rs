//! One colour per candidate, the same on every page (run page, scorecard, compare, history,
//! the interactive charts' JavaScript): a colour follows the candidate, never its place in a
//! run or a table.
//!
//! The rule, in full:
//! 1. A candidate's *own* colour is slot `(id − 1) mod 6` of the Okabe–Ito palette
//!    ([`PALETTE`]: distinguishable with the common colour-vision deficiencies). Ids are handed
//!    out in order, so a team's first six candidates each own a different colour.
//! 2. Where two candidates on one page own the same slot (ids 1 and 7), the lower id keeps it
//!    and the higher one takes the next slot no candidate of the page owns or has taken,
//!    going round the palette; candidates are settled in ascending id order, so the outcome
//!    does not depend on the order a run, a table or a query lists them.
//! 3. Only a page with more candidates than the palette has colours repeats a colour (the
//!    least-used slot from the candidate's own, round the palette); every chart also names
//!    each line and point, so colour is never the only cue.
//!
//! Consequence: the same set of candidates gets the same colours on every page that shows
//! them; a candidate's colour changes only on a page that also shows another candidate owning
//! the same slot.

/// Okabe–Ito colours (hex, lower case), in slot order.
pub const PALETTE: [&str; 6] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"];

/// The same colours as (red, green, blue), in slot order (for the server-drawn charts).
pub const PALETTE_RGB: [(u8, u8, u8); 6] = [
    (0, 114, 178),
    (213, 94, 0),
    (0, 158, 115),
    (204, 121, 167),
    (230, 159, 0),
    (86, 180, 233),
];

/// A candidate's own slot, before collisions on a page are settled.
pub fn own_slot(candidate_id: i64) -> usize {
    (candidate_id - 1).rem_euclid(PALETTE.len() as i64) as usize
}

/// The colours of the candidates one page shows, settled by the module's rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateColours {
    /// (candidate id, slot), ascending by id.
    slots: Vec<(i64, usize)>,
}

impl CandidateColours {
    /// The colours of `ids` (any order, repeats ignored).
    pub fn of(ids: impl IntoIterator<Item = i64>) -> CandidateColours {
        let mut ids: Vec<i64> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let n = PALETTE.len();
        let mut uses = vec![0usize; n];
        let mut slots = Vec::with_capacity(ids.len());
        for id in ids {
            let own = own_slot(id);
            // The least-used slot, searching from the candidate's own round the palette: its own
            // when free, else the next free one, else (more candidates than colours) the next
            // least-used.
            let slot = (0..n).map(|k| (own + k) % n).min_by_key(|&s| uses[s]).unwrap_or(own);
            uses[slot] += 1;
            slots.push((id, slot));
        }
        CandidateColours { slots }
    }

    /// The candidate's slot on this page; a candidate the page did not list gets its own.
    pub fn slot(&self, candidate_id: i64) -> usize {
        self.slots
            .binary_search_by_key(&candidate_id, |(id, _)| *id)
            .map_or(own_slot(candidate_id), |i| self.slots[i].1)
    }

    /// `#0072b2`: the candidate's colour as CSS and SVG write it.
    pub fn hex(&self, candidate_id: i64) -> &'static str {
        PALETTE[self.slot(candidate_id)]
    }

    pub fn rgb(&self, candidate_id: i64) -> (u8, u8, u8) {
        PALETTE_RGB[self.slot(candidate_id)]
    }
}

/// The colour of a candidate's `variant`-th series on one chart (several prompt sizes of one
/// run, each its own curve): variant 0 is the candidate's colour itself; later ones are darker,
/// then lighter shades of it (mixed with black or white, so the hue stays the candidate's),
/// repeating after [`SHADES`] variants. [`dash`] gives each variant its own line pattern too,
/// so the curves are told apart without telling shades apart.
pub fn shade(rgb: (u8, u8, u8), variant: usize) -> (u8, u8, u8) {
    // (towards white?, how far): 0 = the colour itself.
    const MIX: [(bool, f64); SHADES] = [(false, 0.0), (false, 0.45), (true, 0.45), (false, 0.7), (true, 0.7)];
    let (white, t) = MIX[variant % SHADES];
    let mix = |c: u8| {
        let target = if white { 255.0 } else { 0.0 };
        (f64::from(c) + (target - f64::from(c)) * t).round() as u8
    };
    (mix(rgb.0), mix(rgb.1), mix(rgb.2))
}

/// How many shades [`shade`] has before it repeats.
pub const SHADES: usize = 5;

/// The line pattern of a candidate's `variant`-th series, as (dash, gap) in px: None is a
/// solid line (variant 0), then dashed, dotted, long dashes, dash-dot-like short dashes,
/// repeating with the shades.
pub fn dash(variant: usize) -> Option<(u32, u32)> {
    const DASHES: [Option<(u32, u32)>; SHADES] = [None, Some((8, 4)), Some((2, 3)), Some((14, 5)), Some((4, 6))];
    DASHES[variant % SHADES]
}

/// `#0072b2`: a colour as CSS and SVG write it.
pub fn hex_of(rgb: (u8, u8, u8)) -> String {
    format!("#{:02x}{:02x}{:02x}", rgb.0, rgb.1, rgb.2)
}

/// The hue of a colour in degrees (0–360; 0 for a grey), as HSL names it.
pub fn hue(rgb: (u8, u8, u8)) -> f64 {
    let (r, g, b) = (
        f64::from(rgb.0) / 255.0,
        f64::from(rgb.1) / 255.0,
        f64::from(rgb.2) / 255.0,
    );
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let d = max - min;
    if d == 0.0 {
        return 0.0;
    }
    let h = if max == r {
        ((g - b) / d).rem_euclid(6.0)
    } else if max == g {
        (b - r) / d + 2.0
    } else {
        (r - g) / d + 4.0
    };
    h * 60.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_keeps_its_colour_whatever_the_order() {
        let a = CandidateColours::of([3, 1, 2]);
        let b = CandidateColours::of([2, 3, 1]);
        for id in 1..=3 {
            assert_eq!(a.hex(id), b.hex(id));
        }
        assert_eq!(a.hex(1), "#0072b2");
        assert_eq!(a.hex(2), "#d55e00");
        assert_eq!(a.hex(3), "#009e73");
    }

    #[test]
    fn ids_that_collide_are_settled_by_id_order_and_never_share() {
        // 1 and 7 own slot 0; 2 owns slot 1: 7 moves to the next slot nobody holds (2).
        for order in [[1, 7, 2], [7, 2, 1], [2, 1, 7]] {
            let c = CandidateColours::of(order);
            assert_eq!((c.slot(1), c.slot(2), c.slot(7)), (0, 1, 2), "{order:?}");
        }
        // Alone, 7 has its own colour.
        assert_eq!(CandidateColours::of([7]).slot(7), 0);
    }

    #[test]
    fn six_candidates_never_share_and_a_seventh_repeats_the_least_used() {
        let ids = [6, 12, 18, 24, 30, 36];
        let c = CandidateColours::of(ids);
        let mut slots: Vec<usize> = ids.iter().map(|&i| c.slot(i)).collect();
        slots.sort_unstable();
        assert_eq!(slots, vec![0, 1, 2, 3, 4, 5]);
        let c = CandidateColours::of(1..=7);
        assert_eq!(c.slot(7), 0, "the seventh repeats from its own slot");
        assert_eq!(
            CandidateColours::default().slot(8),
            1,
            "an unlisted id gets its own slot"
        );
        assert_eq!(own_slot(0), 5, "ids below 1 still map into the palette");
    }

    #[test]
    fn a_candidates_series_keep_its_hue_and_differ_in_shade_and_dash() {
        for rgb in PALETTE_RGB {
            assert_eq!(shade(rgb, 0), rgb, "the first series is the candidate's colour");
            let shades: Vec<(u8, u8, u8)> = (0..SHADES).map(|v| shade(rgb, v)).collect();
            for (i, a) in shades.iter().enumerate() {
                // Mixing with black or white keeps the hue (to the rounding of 8-bit channels).
                let dh = (hue(*a) - hue(rgb)).abs();
                assert!(dh.min(360.0 - dh) < 4.0, "{rgb:?} variant {i}: {a:?}");
                for b in &shades[i + 1..] {
                    assert_ne!(a, b, "{rgb:?}: two variants share a shade");
                }
            }
            assert_eq!(shade(rgb, SHADES), rgb, "the shades repeat");
        }
        let dashes: Vec<Option<(u32, u32)>> = (0..SHADES).map(dash).collect();
        assert_eq!(dashes[0], None, "the first series is solid");
        for (i, a) in dashes.iter().enumerate() {
            assert!(!dashes[i + 1..].contains(a), "two variants share a dash");
        }
        assert_eq!(hex_of(shade(PALETTE_RGB[0], 0)), PALETTE[0]);
    }
}
