//! Retiring what a team no longer uses, and the team's settings chosen in the browser.
//!
//! A retired candidate, eval set or threshold profile leaves the lists and the new-run form but
//! stays whole: every run that measured it keeps its snapshot, its pages still open, and it can
//! be restored. Deleting is for what nothing refers to (see `app::retirement`).

/// What can be retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    Candidate,
    EvalSet,
    ThresholdProfile,
}

impl ItemKind {
    pub const ALL: [ItemKind; 3] = [ItemKind::Candidate, ItemKind::EvalSet, ItemKind::ThresholdProfile];

    /// The stored name (and the route segment's meaning).
    pub fn as_str(&self) -> &'static str {
        match self {
            ItemKind::Candidate => "candidate",
            ItemKind::EvalSet => "evalset",
            ItemKind::ThresholdProfile => "threshold_profile",
        }
    }

    pub fn parse(s: &str) -> Option<ItemKind> {
        ItemKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// How a page names one.
    pub fn label(&self) -> &'static str {
        match self {
            ItemKind::Candidate => "candidate",
            ItemKind::EvalSet => "eval set",
            ItemKind::ThresholdProfile => "threshold profile",
        }
    }
}

/// The setting naming the threshold profile that judges the archive, the runs list and a
/// scorecard opened without a choice.
pub const DEFAULT_PROFILE_SETTING: &str = "default_threshold_profile";

/// The default profile among `profiles` (each `(id, name)`, retired ones left out by the
/// caller): the one the team chose, else the one named `fallback_name` (the shipped default),
/// else the first.
pub fn default_profile(profiles: &[(i64, &str)], chosen: Option<i64>, fallback_name: &str) -> Option<i64> {
    chosen
        .filter(|id| profiles.iter().any(|(p, _)| p == id))
        .or_else(|| profiles.iter().find(|(_, n)| *n == fallback_name).map(|(id, _)| *id))
        .or_else(|| profiles.first().map(|(id, _)| *id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_stored_names() {
        for k in ItemKind::ALL {
            assert_eq!(ItemKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(ItemKind::parse("run"), None);
    }

    #[test]
    fn the_chosen_profile_wins_while_it_is_listed_then_the_shipped_default_then_the_first() {
        let profiles = [(3, "Batch"), (5, "Demo default"), (9, "Strict")];
        assert_eq!(default_profile(&profiles, Some(9), "Demo default"), Some(9));
        // Chosen, then retired (no longer listed): back to the shipped default.
        assert_eq!(default_profile(&profiles[..2], Some(9), "Demo default"), Some(5));
        assert_eq!(default_profile(&profiles, None, "Demo default"), Some(5));
        assert_eq!(default_profile(&profiles, None, "gone"), Some(3));
        assert_eq!(default_profile(&[], Some(1), "gone"), None);
    }
}
