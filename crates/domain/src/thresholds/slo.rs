//! A profile's SLO block: per-request limits (TTFT, TTFA, TPOT, E2E), optional later-turn limits
//! for conversation cases, and the share of requests that must meet all of them. Where the
//! profile judging a run has one, it judges the run's SLO-based rules (`slo_attainment`, capacity
//! @ SLO, goodput, cost at capacity) in place of the run's own SLO (`run::RunConfig::judging_slo`).
use crate::format;
use crate::run::{Slo, TurnLimits};
use crate::validation::{FieldErrors, optional_number};

/// Longest limit an SLO may set: one hour.
pub const MAX_LIMIT_MS: f64 = 3_600_000.0;
/// Highest turn number later-turn limits may start from.
pub const MAX_FROM_TURN: u32 = 64;

/// The SLO fields of the profile form as typed (milliseconds; the target in percent). All blank:
/// the profile has no SLO.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SloDraft {
    pub ttft_ms: String,
    pub ttfa_ms: String,
    pub tpot_ms: String,
    pub e2e_ms: String,
    pub target_percent: String,
    /// The turn (1-based, at least 2) the later-turn limits start from.
    pub from_turn: String,
    pub later_ttft_ms: String,
    pub later_ttfa_ms: String,
    pub later_tpot_ms: String,
    pub later_e2e_ms: String,
}

/// The form field of each SLO part, as the form and its errors name it.
pub const FIELDS: [&str; 10] = [
    "slo_ttft_ms",
    "slo_ttfa_ms",
    "slo_tpot_ms",
    "slo_e2e_ms",
    "slo_target",
    "slo_from_turn",
    "slo_later_ttft_ms",
    "slo_later_ttfa_ms",
    "slo_later_tpot_ms",
    "slo_later_e2e_ms",
];

fn shown(v: Option<f64>) -> String {
    v.map(|v| format::at_most_decimals(v, 6)).unwrap_or_default()
}

impl SloDraft {
    pub fn from_slo(slo: Option<&Slo>) -> SloDraft {
        let Some(s) = slo else {
            return SloDraft::default();
        };
        let later = s.later_turns.unwrap_or_default();
        SloDraft {
            ttft_ms: shown(s.ttft_ms),
            ttfa_ms: shown(s.ttfa_ms),
            tpot_ms: shown(s.tpot_ms),
            e2e_ms: shown(s.e2e_ms),
            target_percent: shown(s.target_attainment.map(|t| t * 100.0)),
            from_turn: s.later_turns.map(|t| t.from_turn.to_string()).unwrap_or_default(),
            later_ttft_ms: shown(later.ttft_ms),
            later_ttfa_ms: shown(later.ttfa_ms),
            later_tpot_ms: shown(later.tpot_ms),
            later_e2e_ms: shown(later.e2e_ms),
        }
    }

    fn parts(&self) -> [&String; 10] {
        [
            &self.ttft_ms,
            &self.ttfa_ms,
            &self.tpot_ms,
            &self.e2e_ms,
            &self.target_percent,
            &self.from_turn,
            &self.later_ttft_ms,
            &self.later_ttfa_ms,
            &self.later_tpot_ms,
            &self.later_e2e_ms,
        ]
    }

    pub fn is_blank(&self) -> bool {
        self.parts().iter().all(|p| p.trim().is_empty())
    }

    /// The SLO typed (None when every field is blank), each problem named by its field.
    pub fn validate(&self, e: &mut FieldErrors) -> Option<Slo> {
        if self.is_blank() {
            return None;
        }
        let limit = |e: &mut FieldErrors, field: &str, raw: &str| optional_number(e, field, raw, 0.001, MAX_LIMIT_MS);
        let later = TurnLimits {
            from_turn: 0,
            ttft_ms: limit(e, "slo_later_ttft_ms", &self.later_ttft_ms),
            ttfa_ms: limit(e, "slo_later_ttfa_ms", &self.later_ttfa_ms),
            tpot_ms: limit(e, "slo_later_tpot_ms", &self.later_tpot_ms),
            e2e_ms: limit(e, "slo_later_e2e_ms", &self.later_e2e_ms),
        };
        let from_turn: Option<u32> = optional_number(e, "slo_from_turn", &self.from_turn, 2, MAX_FROM_TURN);
        let later_typed = [
            &self.later_ttft_ms,
            &self.later_ttfa_ms,
            &self.later_tpot_ms,
            &self.later_e2e_ms,
        ]
        .iter()
        .any(|p| !p.trim().is_empty());
        if later_typed && self.from_turn.trim().is_empty() {
            e.add(
                "slo_from_turn",
                "is required with later-turn limits: the turn they start from (2 to 64)",
            );
        }
        if !later_typed && !self.from_turn.trim().is_empty() {
            e.add(
                "slo_from_turn",
                "set at least one later-turn limit, or leave the turn blank",
            );
        }
        let slo = Slo {
            ttft_ms: limit(e, "slo_ttft_ms", &self.ttft_ms),
            ttfa_ms: limit(e, "slo_ttfa_ms", &self.ttfa_ms),
            tpot_ms: limit(e, "slo_tpot_ms", &self.tpot_ms),
            e2e_ms: limit(e, "slo_e2e_ms", &self.e2e_ms),
            target_attainment: optional_number(e, "slo_target", &self.target_percent, 0.1, 100.0).map(|p| p / 100.0),
            later_turns: from_turn
                .filter(|_| later.is_set())
                .map(|from_turn| TurnLimits { from_turn, ..later }),
        };
        let any_limit = [&self.ttft_ms, &self.ttfa_ms, &self.tpot_ms, &self.e2e_ms]
            .iter()
            .any(|p| !p.trim().is_empty())
            || later_typed;
        if !any_limit {
            e.add(
                "slo_ttft_ms",
                "an SLO needs at least one limit (TTFT, TTFA, TPOT or E2E), or clear the SLO's fields",
            );
        }
        if self.target_percent.trim().is_empty() {
            e.add(
                "slo_target",
                "is required with an SLO: the share of requests that must meet every limit, e.g. 95 (percent)",
            );
        }
        Some(slo)
    }
}

/// How a profile's SLO changed between two versions, in words (None: unchanged).
pub fn diff_slo(old: Option<&Slo>, new: Option<&Slo>) -> Option<String> {
    let text = |s: Option<&Slo>| s.and_then(Slo::describe);
    match (text(old), text(new)) {
        (a, b) if a == b => None,
        (None, Some(b)) => Some(format!("added SLO: {b}")),
        (Some(a), None) => Some(format!("removed SLO: {a}")),
        (Some(a), Some(b)) => Some(format!("SLO: {a} → {b}")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft() -> SloDraft {
        SloDraft {
            ttft_ms: "800".into(),
            e2e_ms: "5000".into(),
            target_percent: "95".into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_slo_block_reads_describes_and_round_trips() {
        let mut e = FieldErrors::default();
        let slo = draft().validate(&mut e).unwrap();
        assert!(e.is_empty(), "{e}");
        assert_eq!(slo.ttft_ms, Some(800.0));
        assert_eq!(slo.target_attainment, Some(0.95));
        assert_eq!(slo.describe().unwrap(), "TTFT ≤ 800 ms, E2E ≤ 5 s; 95 % must meet all");
        assert_eq!(SloDraft::from_slo(Some(&slo)), draft());
        let mut blank = FieldErrors::default();
        assert_eq!(SloDraft::default().validate(&mut blank), None);
        assert!(blank.is_empty());
    }

    #[test]
    fn later_turn_limits_replace_the_base_from_their_turn_on() {
        let mut e = FieldErrors::default();
        let slo = SloDraft {
            from_turn: "3".into(),
            later_ttft_ms: "1500".into(),
            ..draft()
        }
        .validate(&mut e)
        .unwrap();
        assert!(e.is_empty(), "{e}");
        assert_eq!(slo.limits_for_turn(None).ttft_ms, Some(800.0));
        assert_eq!(slo.limits_for_turn(Some(2)).ttft_ms, Some(800.0));
        assert_eq!(slo.limits_for_turn(Some(3)).ttft_ms, Some(1500.0));
        // Limits the later turns do not set stay the base's.
        assert_eq!(slo.limits_for_turn(Some(7)).e2e_ms, Some(5000.0));
        assert_eq!(
            slo.describe().unwrap(),
            "TTFT ≤ 800 ms, E2E ≤ 5 s; from turn 3: TTFT ≤ 1.5 s; 95 % must meet all"
        );
    }

    #[test]
    fn every_bad_slo_field_is_named() {
        let mut e = FieldErrors::default();
        SloDraft {
            ttft_ms: "fast".into(),
            tpot_ms: "-1".into(),
            target_percent: "120".into(),
            later_e2e_ms: "9000".into(),
            ..Default::default()
        }
        .validate(&mut e);
        for field in ["slo_ttft_ms", "slo_tpot_ms", "slo_target", "slo_from_turn"] {
            assert!(e.get(field).is_some(), "no error for {field}: {e}");
        }
        let mut e = FieldErrors::default();
        SloDraft {
            target_percent: "95".into(),
            from_turn: "1".into(),
            ..Default::default()
        }
        .validate(&mut e);
        assert!(e.get("slo_ttft_ms").unwrap().contains("at least one limit"), "{e}");
        assert!(e.get("slo_from_turn").is_some(), "{e}");
        let mut e = FieldErrors::default();
        SloDraft {
            target_percent: String::new(),
            ..draft()
        }
        .validate(&mut e);
        assert!(e.get("slo_target").unwrap().contains("required"), "{e}");
    }

    #[test]
    fn slo_changes_read_as_one_line() {
        let mut e = FieldErrors::default();
        let a = draft().validate(&mut e).unwrap();
        let b = Slo {
            ttft_ms: Some(600.0),
            ..a
        };
        assert_eq!(diff_slo(Some(&a), Some(&a)), None);
        assert_eq!(
            diff_slo(Some(&a), Some(&b)).unwrap(),
            "SLO: TTFT ≤ 800 ms, E2E ≤ 5 s; 95 % must meet all → TTFT ≤ 600 ms, E2E ≤ 5 s; 95 % must meet all"
        );
        assert!(
            diff_slo(None, Some(&a))
                .unwrap()
                .starts_with("added SLO: TTFT ≤ 800 ms")
        );
        assert!(diff_slo(Some(&a), None).unwrap().starts_with("removed SLO"));
    }
}
