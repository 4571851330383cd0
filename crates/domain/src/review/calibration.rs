//! How far an LLM judge can be trusted: its agreement with human labels (accuracy and Cohen's
//! κ, each with an interval), and its biases in pairwise mode — toward the answer shown first
//! (the same pair judged in both orders) and toward the longer answer.
use serde::Serialize;

use super::pairwise::{CONFIDENCE, Choice, Preference, clopper_pearson};
use crate::stats::{Interval, wilson, z_for};

/// Below this κ a judge is flagged on every scorecard that uses it ("fair" agreement at best,
/// Landis & Koch).
pub const MIN_KAPPA: f64 = 0.4;
/// Fewer human labels than this say nothing of a judge's agreement (it is not flagged for it).
pub const MIN_LABELS: u64 = 10;

/// A judge's agreement with human labels on pass/fail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    pub n: u64,
    /// Counts by (human, judge): both pass, human pass judge fail, human fail judge pass, both fail.
    pub both_pass: u64,
    pub only_human_pass: u64,
    pub only_judge_pass: u64,
    pub both_fail: u64,
    pub accuracy: Option<f64>,
    pub accuracy_interval: Option<Interval>,
    /// Cohen's κ; None with no labels or when chance agreement is total (one class only).
    pub kappa: Option<f64>,
    /// κ ± z·SE with Cohen's (1960) large-sample standard error √(pₒ(1−pₒ) / (n(1−pₑ)²)),
    /// clamped to [−1, 1].
    pub kappa_interval: Option<Interval>,
}

/// Agreement over (human passed, judge passed) pairs, one per labelled answer.
pub fn agreement(pairs: &[(bool, bool)]) -> Agreement {
    let count = |h: bool, j: bool| pairs.iter().filter(|p| **p == (h, j)).count() as u64;
    let (pp, pf, fp, ff) = (
        count(true, true),
        count(true, false),
        count(false, true),
        count(false, false),
    );
    let n = pairs.len() as u64;
    let agree = pp + ff;
    let nf = n as f64;
    let (kappa, kappa_interval) = if n == 0 {
        (None, None)
    } else {
        // κ = (n·agree − S) / (n² − S), S = Σ marginal products, in integers: one rounding,
        // so a known label set gives its κ exactly.
        let (n_i, human_pass, judge_pass) = (i128::from(n), i128::from(pp + pf), i128::from(pp + fp));
        let chance = human_pass * judge_pass + (n_i - human_pass) * (n_i - judge_pass);
        if chance == n_i * n_i {
            (None, None)
        } else {
            let kappa = (i128::from(agree) * n_i - chance) as f64 / (n_i * n_i - chance) as f64;
            let po = agree as f64 / nf;
            let pe = chance as f64 / (nf * nf);
            let se = (po * (1.0 - po) / (nf * (1.0 - pe).powi(2))).sqrt();
            let z = z_for(CONFIDENCE);
            let interval = Interval {
                lo: (kappa - z * se).max(-1.0),
                hi: (kappa + z * se).min(1.0),
                confidence: CONFIDENCE,
            };
            (Some(kappa), Some(interval))
        }
    };
    Agreement {
        n,
        both_pass: pp,
        only_human_pass: pf,
        only_judge_pass: fp,
        both_fail: ff,
        accuracy: (n > 0).then(|| agree as f64 / nf),
        accuracy_interval: wilson(agree, n, CONFIDENCE),
        kappa,
        kappa_interval,
    }
}

/// A lean of the judge's choices, as the share of decided comparisons that went one way, with
/// its exact interval: a lean is shown when the interval leaves out an even split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lean {
    /// Decided comparisons counted.
    pub n: u64,
    /// Of them, those that went the way looked for (first shown; longer).
    pub toward: u64,
    pub share: Option<f64>,
    pub interval: Option<Interval>,
    /// The interval leaves out 0.5.
    pub biased: bool,
}

impl Lean {
    fn of(toward: u64, n: u64) -> Lean {
        let interval = clopper_pearson(toward, n, CONFIDENCE);
        Lean {
            n,
            toward,
            share: (n > 0).then(|| toward as f64 / n as f64),
            biased: interval.is_some_and(|i| !i.contains(0.5)),
            interval,
        }
    }
}

/// Whether the same two answers were shown in both orders.
fn same_pair_swapped(a: &Preference, b: &Preference) -> bool {
    a.case_id == b.case_id && a.left_candidate == b.right_candidate && a.right_candidate == b.left_candidate
}

/// The judge's lean toward the answer shown first (left), over the comparisons it made of a
/// pair in both orders: a judge that prefers one answer for what it says picks it once on each
/// side, so without a position bias the first-shown share is one half whatever the answers are.
pub fn position_bias(judged: &[Preference]) -> Lean {
    let mut toward = 0;
    let mut n = 0;
    for (i, p) in judged.iter().enumerate() {
        let swapped = judged
            .iter()
            .enumerate()
            .any(|(j, q)| i != j && q.picker == p.picker && same_pair_swapped(p, q));
        if !swapped || p.choice == Choice::Tie {
            continue;
        }
        n += 1;
        if p.choice == Choice::Left {
            toward += 1;
        }
    }
    Lean::of(toward, n)
}

/// The judge's lean toward the longer answer (by characters), over decided comparisons of
/// answers of different lengths. Longer answers may be better, so this is shown beside the
/// humans' own lean on the same comparisons, not flagged on its own.
pub fn length_bias(judged: &[Preference]) -> Lean {
    let decided: Vec<&Preference> = judged
        .iter()
        .filter(|p| p.choice != Choice::Tie && p.left_chars != p.right_chars)
        .collect();
    let toward = decided
        .iter()
        .filter(|p| (p.choice == Choice::Left) == (p.left_chars > p.right_chars))
        .count() as u64;
    Lean::of(toward, decided.len() as u64)
}

/// A judge flagged on a scorecard that uses it: its name and why, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct JudgeFlag {
    pub judge: String,
    /// The calibration's flags joined (e.g. "agrees with human labels at κ = 0.12 (< 0.4) over 20 labels").
    pub why: String,
}

/// What the calibration page and every scorecard say of one judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub judge: String,
    pub agreement: Agreement,
    pub position: Lean,
    pub length: Lean,
    /// Why the judge is flagged, in words; empty when it is not.
    pub flags: Vec<String>,
}

impl Calibration {
    pub fn new(judge: &str, labelled: &[(bool, bool)], judged: &[Preference]) -> Calibration {
        let agreement = agreement(labelled);
        let position = position_bias(judged);
        let length = length_bias(judged);
        let mut flags = Vec::new();
        if agreement.n >= MIN_LABELS
            && let Some(kappa) = agreement.kappa.filter(|k| *k < MIN_KAPPA)
        {
            flags.push(format!(
                "agrees with human labels at κ = {kappa:.2} (< {MIN_KAPPA}) over {} labels",
                agreement.n
            ));
        }
        if position.biased
            && let Some(share) = position.share
        {
            flags.push(format!(
                "picks the answer shown first {:.0} % of the time over {} comparisons shown in both orders",
                share * 100.0,
                position.n
            ));
        }
        Calibration {
            judge: judge.to_string(),
            agreement,
            position,
            length,
            flags,
        }
    }

    pub fn flagged(&self) -> bool {
        !self.flags.is_empty()
    }

    /// The flag a scorecard shows; None when the judge is not flagged.
    pub fn flag(&self) -> Option<JudgeFlag> {
        self.flagged().then(|| JudgeFlag {
            judge: self.judge.clone(),
            why: self.flags.join("; "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::SplitMix64;

    #[test]
    fn kappa_is_exact_against_a_known_label_set() {
        // 50 answers: 20 both pass, 5 human-only, 10 judge-only, 15 both fail.
        // pₒ = 0.7, pₑ = 0.5·0.6 + 0.5·0.4 = 0.5, κ = 0.4 exactly.
        let mut pairs = vec![(true, true); 20];
        pairs.extend(vec![(true, false); 5]);
        pairs.extend(vec![(false, true); 10]);
        pairs.extend(vec![(false, false); 15]);
        let a = agreement(&pairs);
        assert_eq!(a.kappa, Some(0.4));
        assert_eq!(a.accuracy, Some(0.7));
        // SE = √(0.7·0.3 / (50·0.25)) = √0.0168
        let se = 0.0168f64.sqrt();
        let i = a.kappa_interval.unwrap();
        assert!((i.lo - (0.4 - 1.959_964 * se)).abs() < 1e-5, "{i:?}");
        assert!((i.hi - (0.4 + 1.959_964 * se)).abs() < 1e-5, "{i:?}");
        let perfect = agreement(&[(true, true), (false, false), (true, true)]);
        assert_eq!(perfect.kappa, Some(1.0));
        assert_eq!(agreement(&[(true, true), (true, true)]).kappa, None, "one class only");
    }

    /// A scripted judge over `pairs` pairs, each shown in both orders; the answers are equally
    /// good, and the judge picks the one shown first with probability `first`.
    fn scripted(seed: u64, pairs: usize, first: f64) -> Vec<Preference> {
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::new();
        for i in 0..pairs {
            for (left, right) in [(1, 2), (2, 1)] {
                let choice = if rng.next_f64() < first {
                    Choice::Left
                } else {
                    Choice::Right
                };
                out.push(Preference {
                    case_id: format!("case-{i}"),
                    left_candidate: left,
                    right_candidate: right,
                    choice,
                    picker: "judge:sage".into(),
                    left_chars: if left == 1 { 100 } else { 140 },
                    right_chars: if right == 1 { 100 } else { 140 },
                });
            }
        }
        out
    }

    #[test]
    fn a_judge_with_a_70_30_position_bias_is_flagged_within_50_pairs() {
        let c = Calibration::new("sage", &[], &scripted(1, 50, 0.7));
        assert!(c.flagged(), "{c:?}");
        assert!(c.flags[0].contains("shown first"), "{:?}", c.flags);
        // And it is no accident of one seed: flagged in ≥ 95 % of 200 scripted judges.
        let flagged = (0..200)
            .filter(|s| Calibration::new("j", &[], &scripted(*s, 50, 0.7)).flagged())
            .count();
        assert!(flagged >= 190, "flagged {flagged} of 200");
        // A judge without a position bias is flagged about as rarely as a 95 % interval allows
        // (at most 5 % expected; 8 % leaves room for sampling).
        let unbiased = (0..200)
            .filter(|s| Calibration::new("j", &[], &scripted(*s, 50, 0.5)).flagged())
            .count();
        assert!(unbiased <= 16, "unbiased judge flagged {unbiased} of 200");
    }

    #[test]
    fn a_judge_that_follows_the_content_has_no_position_lean_and_its_length_lean_is_measured() {
        // Prefers candidate 2 (the longer) whatever the side.
        let judged: Vec<Preference> = scripted(3, 30, 0.5)
            .into_iter()
            .map(|mut p| {
                p.choice = if p.left_candidate == 2 {
                    Choice::Left
                } else {
                    Choice::Right
                };
                p
            })
            .collect();
        let position = position_bias(&judged);
        assert_eq!((position.n, position.toward, position.biased), (60, 30, false));
        let length = length_bias(&judged);
        assert_eq!((length.n, length.toward, length.biased), (60, 60, true));
        let c = Calibration::new("j", &[], &judged);
        assert!(!c.flagged(), "length alone does not flag: {:?}", c.flags);
    }

    #[test]
    fn low_agreement_flags_the_judge_only_with_enough_labels() {
        let poor: Vec<(bool, bool)> = (0..20).map(|i| (i % 2 == 0, i % 3 == 0)).collect();
        let c = Calibration::new("j", &poor, &[]);
        assert!(c.flagged() && c.flags[0].contains("κ"), "{c:?}");
        assert!(!Calibration::new("j", &poor[..5], &[]).flagged());
    }
}
