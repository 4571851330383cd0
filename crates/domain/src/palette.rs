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
}
