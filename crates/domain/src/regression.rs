//! A scheduled run's "changes since baseline": per candidate, its verdict if it changed, each
//! threshold rule whose outcome changed (both runs judged by the same profile version), and
//! each key figure that moved beyond its interval — compared like with like by the compare
//! view's rules (`compare::Conditions::differences`, `compare::regressed_beyond_noise`): a
//! figure measured under other conditions is not compared, and the change says why.
use serde::{Deserialize, Serialize};

use crate::compare::{Better, Conditions, Figures, Scope, improved_beyond_noise, regressed_beyond_noise};
use crate::scorecard::Scorecard;
use crate::stats::Interval;

/// What kind of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// GO / NO-GO / INCONCLUSIVE differs from the baseline's.
    Verdict,
    /// A threshold rule's outcome (pass, fail, inconclusive, not measured) differs.
    RuleFlipped,
    /// A figure is worse beyond the noise (the intervals do not overlap).
    Regressed,
    /// A figure is better beyond the noise.
    Improved,
    /// Figures not compared: measured under other conditions, or the candidate is new.
    NotCompared,
}

impl ChangeKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ChangeKind::Verdict => "verdict",
            ChangeKind::RuleFlipped => "rule-flipped",
            ChangeKind::Regressed => "regressed",
            ChangeKind::Improved => "improved",
            ChangeKind::NotCompared => "not-compared",
        }
    }

    /// Whether a team wants to be told: a verdict or a rule that changed, a figure that got worse.
    pub fn worth_telling(&self) -> bool {
        matches!(
            self,
            ChangeKind::Verdict | ChangeKind::RuleFlipped | ChangeKind::Regressed
        )
    }
}

/// One change of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub candidate_id: i64,
    pub candidate: String,
    pub kind: ChangeKind,
    /// In words: "verdict GO → NO-GO", "accuracy ≥ 80 %: pass → fail (accuracy 55.0 % < 80 %)",
    /// "TTFT p50 worse beyond the noise: 120 ms [110, 130] → 480 ms [450, 510]".
    pub text: String,
}

/// A run's changes since its baseline, as stored with the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangesSinceBaseline {
    pub baseline_run_id: Option<i64>,
    /// Why there is no baseline, when there is none (the first run, none passed yet…).
    pub no_baseline: Option<String>,
    pub changes: Vec<Change>,
}

impl ChangesSinceBaseline {
    /// The changes a notification is about.
    pub fn worth_telling(&self) -> Vec<&Change> {
        self.changes.iter().filter(|c| c.kind.worth_telling()).collect()
    }
}

/// One side of a comparison: a run's scorecard and, per column of it, the figures and the
/// conditions they were measured under.
pub struct Side<'a> {
    pub card: &'a Scorecard,
    /// In the scorecard's column order.
    pub figures: &'a [Figures],
    pub conditions: &'a [Conditions],
}

/// The key figures compared, with which way is better and the scope of conditions they need.
/// (name, value, interval, which way is better, the conditions it needs, unit).
type KeyFigure = (&'static str, Option<f64>, Option<Interval>, Better, Scope, Unit);

fn key_figures(f: &Figures) -> [KeyFigure; 5] {
    [
        (
            "accuracy",
            f.accuracy,
            f.accuracy_ci,
            Better::Higher,
            Scope::Quality,
            Unit::Percent,
        ),
        (
            "failure rate",
            f.failure_rate,
            f.failure_ci,
            Better::Lower,
            Scope::Speed,
            Unit::Percent,
        ),
        (
            "TTFT p50",
            f.ttft_p50_ms,
            f.ttft_ci,
            Better::Lower,
            Scope::Speed,
            Unit::Ms,
        ),
        ("E2E p50", f.e2e_p50_ms, f.e2e_ci, Better::Lower, Scope::Speed, Unit::Ms),
        (
            "decode tok/s/stream p50",
            f.decode_p50_tok_s,
            f.decode_ci,
            Better::Higher,
            Scope::Speed,
            Unit::TokS,
        ),
    ]
}

#[derive(Clone, Copy)]
enum Unit {
    Percent,
    Ms,
    TokS,
}

fn figure_text(value: Option<f64>, ci: Option<Interval>, unit: Unit) -> String {
    let one = |v: f64| match unit {
        Unit::Percent => format!("{:.1} %", v * 100.0),
        Unit::Ms => format!("{v:.0} ms"),
        Unit::TokS => format!("{v:.1} tok/s"),
    };
    let bare = |v: f64| match unit {
        Unit::Percent => format!("{:.1}", v * 100.0),
        Unit::Ms => format!("{v:.0}"),
        Unit::TokS => format!("{v:.1}"),
    };
    match (value, ci) {
        (Some(v), Some(i)) => format!("{} [{}, {}]", one(v), bare(i.lo), bare(i.hi)),
        (Some(v), None) => one(v),
        (None, _) => "not measured".into(),
    }
}

/// The changes of `current` since `baseline`; see the module comment.
pub fn changes_since(baseline: &Side<'_>, current: &Side<'_>) -> Vec<Change> {
    let mut out = Vec::new();
    for (ci, column) in current.card.columns.iter().enumerate() {
        let change = |kind, text: String| Change {
            candidate_id: column.candidate_id,
            candidate: column.name.clone(),
            kind,
            text,
        };
        let Some(bi) = baseline
            .card
            .columns
            .iter()
            .position(|b| b.candidate_id == column.candidate_id)
        else {
            out.push(change(ChangeKind::NotCompared, "not in the baseline run".into()));
            continue;
        };
        let base = &baseline.card.columns[bi];
        if base.verdict != column.verdict {
            out.push(change(
                ChangeKind::Verdict,
                format!("verdict {} → {}", base.verdict.as_str(), column.verdict.as_str()),
            ));
        }
        for row in &current.card.rows {
            let Some(base_row) =
                baseline.card.rows.iter().find(|b| {
                    b.rule.metric == row.rule.metric && b.label == row.label && b.rule.value == row.rule.value
                })
            else {
                continue;
            };
            let (Some(now), Some(then)) = (row.cells.get(ci), base_row.cells.get(bi)) else {
                continue;
            };
            let (a, b) = (then.assessment.state, now.assessment.state);
            if a != b {
                out.push(change(
                    ChangeKind::RuleFlipped,
                    format!(
                        "{} {}: {} → {} ({})",
                        row.label,
                        row.threshold_text(),
                        a.as_str(),
                        b.as_str(),
                        now.assessment.reason
                    ),
                ));
            }
        }
        let (Some(bf), Some(cf), Some(bc), Some(cc)) = (
            baseline.figures.get(bi),
            current.figures.get(ci),
            baseline.conditions.get(bi),
            current.conditions.get(ci),
        ) else {
            continue;
        };
        let mut not_compared: Vec<String> = Vec::new();
        for ((name, bv, bi_, better, scope, unit), (_, cv, ci_, _, _, _)) in
            key_figures(bf).into_iter().zip(key_figures(cf))
        {
            let mut why = cc.differences(bc, scope);
            if scope == Scope::Speed && bc.levels != cc.levels {
                why.insert(0, format!("load: {} vs {}", bc.load_text(), cc.load_text()));
            }
            if !why.is_empty() {
                for w in why {
                    if !not_compared.contains(&w) {
                        not_compared.push(w);
                    }
                }
                continue;
            }
            let moved = if regressed_beyond_noise(bi_.as_ref(), ci_.as_ref(), better) {
                Some((ChangeKind::Regressed, "worse"))
            } else if improved_beyond_noise(bi_.as_ref(), ci_.as_ref(), better) {
                Some((ChangeKind::Improved, "better"))
            } else {
                None
            };
            if let Some((kind, word)) = moved {
                out.push(change(
                    kind,
                    format!(
                        "{name} {word} beyond the noise: {} → {}",
                        figure_text(bv, bi_, unit),
                        figure_text(cv, ci_, unit)
                    ),
                ));
            }
        }
        if !not_compared.is_empty() {
            out.push(change(
                ChangeKind::NotCompared,
                format!("some figures not compared: {}", not_compared.join("; ")),
            ));
        }
    }
    out
}

/// Whether every candidate of a scorecard passed (the "last run that passed" baseline).
pub fn all_go(card: &Scorecard) -> bool {
    !card.columns.is_empty() && card.columns.iter().all(|c| c.verdict == crate::scorecard::Verdict::Go)
}
