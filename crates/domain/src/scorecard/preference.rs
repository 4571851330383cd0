//! Blind win rates against the incumbent as threshold rules (issue 50): `blind_win_rate` from
//! people's comparisons, `judge_win_rate` from an LLM judge's comparisons made in both orders.
//! "Challenger not worse than incumbent at 95 %" is the rule `≥ 40 %` on either: the exact
//! two-sided 90 % interval of the win rate (one-sided 95 % bounds) is assessed like any other,
//! so it passes when the lower bound clears the bar, fails when the upper bound is below it, and
//! is inconclusive otherwise with the comparisons that would likely settle it.
use std::collections::BTreeMap;

use super::intervals::CONFIDENCE;
use super::measurement::{Measurement, SampleUnit};
use crate::candidate::Candidate;
use crate::review::pairwise::{JUDGE_PICKER, Preference, clopper_pearson};
use crate::thresholds::key::MetricKey;
use crate::thresholds::units::Uncertainty;

/// Whether a metric is measured from the run's blind comparisons.
pub fn is_preference_metric(base: &str) -> bool {
    matches!(base, "blind_win_rate" | "judge_win_rate")
}

/// A candidate's win rate against the incumbent, or that it is the incumbent itself.
#[derive(Debug, Clone, PartialEq)]
pub enum AgainstIncumbent {
    Measured {
        measurement: Measurement,
        tally: Tally,
    },
    /// The candidate is the incumbent the rule measures against: it holds trivially.
    IsIncumbent {
        name: String,
    },
}

/// Wins, losses and ties of the candidate against the incumbent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub wins: u64,
    pub losses: u64,
    pub ties: u64,
}

impl Tally {
    /// The evidence in words: `12 wins, 8 losses, 3 ties against gpt-4o (people's comparisons)`.
    pub fn describe(&self, incumbent: &str, judge: bool) -> String {
        format!(
            "{} wins, {} losses, {} ties against {incumbent} ({})",
            self.wins,
            self.losses,
            self.ties,
            if judge {
                "cases an LLM judge compared in both orders"
            } else {
                "people's blind comparisons"
            }
        )
    }
}

/// Measures `key` (a [`is_preference_metric`] key) for `candidate`: against the incumbent the
/// rule names, else the scorecard's `incumbent`.
pub fn measure(
    key: &MetricKey,
    candidate: &Candidate,
    candidates: &[Candidate],
    incumbent: Option<i64>,
    preferences: &[Preference],
) -> AgainstIncumbent {
    let unmeasured = |why: String| missing(why, Tally::default());
    let against = match &key.param {
        Some(name) => match candidates.iter().find(|c| &c.spec.name == name) {
            Some(c) => c,
            None => {
                return unmeasured(format!(
                    "the incumbent {name:?} the rule names is not a candidate of this run"
                ));
            }
        },
        None => match incumbent.and_then(|id| candidates.iter().find(|c| c.id == id)) {
            Some(c) => c,
            None => {
                return unmeasured(
                    "no incumbent to compare with: choose one on the scorecard, or name it in the rule".to_string(),
                );
            }
        },
    };
    if against.id == candidate.id {
        return AgainstIncumbent::IsIncumbent {
            name: against.spec.name.clone(),
        };
    }
    let judge = key.base == "judge_win_rate";
    let tally = if judge {
        judge_tally(preferences, candidate.id, against.id)
    } else {
        human_tally(preferences, candidate.id, against.id)
    };
    let decided = tally.wins + tally.losses;
    let Some(interval) = clopper_pearson(tally.wins, decided, CONFIDENCE) else {
        let why = format!(
            "no decided blind comparison with {} yet ({} ties)",
            against.spec.name, tally.ties
        );
        return missing(why, tally);
    };
    AgainstIncumbent::Measured {
        measurement: Measurement {
            value: Some(tally.wins as f64 / decided as f64),
            interval: Some((interval.lo, interval.hi)),
            uncertainty: Uncertainty::ClopperPearson,
            n: decided as f64,
            unit: if judge {
                SampleUnit::JudgedCases
            } else {
                SampleUnit::Comparisons
            },
            concurrency: None,
            missing: None,
        },
        tally,
    }
}

fn missing(why: String, tally: Tally) -> AgainstIncumbent {
    AgainstIncumbent::Measured {
        measurement: Measurement {
            value: None,
            interval: None,
            uncertainty: Uncertainty::ClopperPearson,
            n: 0.0,
            unit: SampleUnit::Comparisons,
            concurrency: None,
            missing: Some(why),
        },
        tally,
    }
}

/// People's comparisons of the two, each counted once.
fn human_tally(preferences: &[Preference], candidate: i64, incumbent: i64) -> Tally {
    let mut t = Tally::default();
    for p in preferences
        .iter()
        .filter(|p| !p.picker.starts_with(JUDGE_PICKER) && p.involves(candidate, incumbent))
    {
        match p.winner() {
            Some(w) if w == candidate => t.wins += 1,
            Some(_) => t.losses += 1,
            None => t.ties += 1,
        }
    }
    t
}

/// One judge's verdicts on one case: with the candidate on the left, and on the right; +1 for
/// the candidate, −1 for the incumbent, 0 for a tie.
type BothOrders = (Option<i8>, Option<i8>);

/// An LLM judge's comparisons, per judge and case, counted only when made in both orders (the
/// latest of each order): the two verdicts' balance decides, so position bias cancels.
fn judge_tally(preferences: &[Preference], candidate: i64, incumbent: i64) -> Tally {
    let mut both: BTreeMap<(&str, &str), BothOrders> = BTreeMap::new();
    for p in preferences
        .iter()
        .filter(|p| p.picker.starts_with(JUDGE_PICKER) && p.involves(candidate, incumbent))
    {
        let score = match p.winner() {
            Some(w) if w == candidate => 1,
            Some(_) => -1,
            None => 0,
        };
        let entry = both.entry((p.picker.as_str(), p.case_id.as_str())).or_default();
        if p.left_candidate == candidate {
            entry.0 = Some(score);
        } else {
            entry.1 = Some(score);
        }
    }
    let mut t = Tally::default();
    for (left, right) in both.into_values() {
        let (Some(left), Some(right)) = (left, right) else {
            continue;
        };
        match (left + right).signum() {
            1 => t.wins += 1,
            -1 => t.losses += 1,
            _ => t.ties += 1,
        }
    }
    t
}

/// Used by the tests of this module and of the scorecard: one comparison.
#[cfg(test)]
pub(crate) fn comparison(
    case: &str,
    left: i64,
    right: i64,
    choice: crate::review::pairwise::Choice,
    picker: &str,
) -> Preference {
    Preference {
        case_id: case.into(),
        left_candidate: left,
        right_candidate: right,
        choice,
        picker: picker.into(),
        left_chars: 10,
        right_chars: 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::pairwise::Choice;

    #[test]
    fn a_judge_counts_a_case_only_in_both_orders_and_a_side_picker_decides_nothing() {
        let j = "judge:grader";
        let prefs = vec![
            // case a: the candidate (1) wins in both orders → a win
            comparison("a", 1, 2, Choice::Left, j),
            comparison("a", 2, 1, Choice::Right, j),
            // case b: always the left side → a tie
            comparison("b", 1, 2, Choice::Left, j),
            comparison("b", 2, 1, Choice::Left, j),
            // case c: the incumbent wins once, tie once → a loss
            comparison("c", 1, 2, Choice::Right, j),
            comparison("c", 2, 1, Choice::Tie, j),
            // case d: one order only → left out
            comparison("d", 1, 2, Choice::Left, j),
            // a person's comparison is not the judge's
            comparison("e", 1, 2, Choice::Left, "ana"),
        ];
        assert_eq!(
            judge_tally(&prefs, 1, 2),
            Tally {
                wins: 1,
                losses: 1,
                ties: 1
            }
        );
        assert_eq!(
            human_tally(&prefs, 1, 2),
            Tally {
                wins: 1,
                losses: 0,
                ties: 0
            }
        );
    }
}
