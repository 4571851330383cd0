//! Whether repeated cases give the same answer: identical outputs, grade agreement, flip rate,
//! pass@1 and pass^k.
use std::collections::BTreeMap;

use serde::Serialize;

use super::failures::Rate;
use crate::grading::case_passed;
use crate::run::RequestRecord;

/// Whether the same case, asked k times at the run's temperature, gets the same answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consistency {
    /// Cases asked at least twice.
    pub cases: usize,
    /// The fewest times such a case was asked (the k of pass^k).
    pub k: usize,
    /// Share of cases (with ≥ 2 successful answers) whose answers are all identical.
    pub identical_output: Option<Rate>,
    /// Share of pairs of repetitions of a case that got the same verdict (a failed request is a
    /// fail), over graded cases.
    pub grade_agreement: Option<f64>,
    /// Share of graded cases that passed in some repetitions and failed in others.
    pub flip_rate: Option<Rate>,
    /// Cases that flipped, by id.
    pub flipping_cases: Vec<String>,
    /// Mean per-repetition pass rate over graded cases.
    pub pass_at_1: Option<f64>,
    /// Probability that k repetitions of a case all pass: mean over cases of C(c, k) / C(n, k)
    /// (c passes of n), the unbiased estimator.
    pub pass_hat_k: Option<f64>,
}

/// C(n, k) / C(m, k) for k ≤ n ≤ m, without overflow.
pub(super) fn binomial_ratio(n: usize, m: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k).map(|i| (n - i) as f64 / (m - i) as f64).product()
}

/// Repeat consistency over `finals`; None when no case was asked twice.
pub fn consistency(finals: &[&RequestRecord], confidence: f64) -> Option<Consistency> {
    let mut by_case: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for r in finals {
        by_case.entry(r.case_id.as_ref()).or_default().push(r);
    }
    by_case.retain(|_, v| v.len() >= 2);
    if by_case.is_empty() {
        return None;
    }
    let k = by_case.values().map(Vec::len).min().unwrap_or(2);
    let (mut same_cases, mut output_cases) = (0u64, 0u64);
    let (mut agree_pairs, mut pairs) = (0u64, 0u64);
    let (mut flipped, mut graded_cases) = (0u64, 0u64);
    let mut flipping_cases = Vec::new();
    let (mut pass_share_sum, mut pass_k_sum) = (0.0, 0.0);
    for (case, records) in &by_case {
        let answered: Vec<&RequestRecord> = records.iter().copied().filter(|r| r.succeeded()).collect();
        if answered.len() >= 2 {
            output_cases += 1;
            if answered.iter().all(|r| r.same_answer(answered[0])) {
                same_cases += 1;
            }
        }
        let verdicts: Vec<bool> = records
            .iter()
            .filter_map(|r| {
                if r.succeeded() {
                    case_passed(&r.grades)
                } else {
                    Some(false)
                }
            })
            .collect();
        // A case counts as graded only if every repetition has a verdict.
        if verdicts.len() < 2 || verdicts.len() != records.len() {
            continue;
        }
        graded_cases += 1;
        let n = verdicts.len();
        let c = verdicts.iter().filter(|v| **v).count();
        agree_pairs += (c * c.saturating_sub(1) / 2 + (n - c) * (n - c).saturating_sub(1) / 2) as u64;
        pairs += (n * (n - 1) / 2) as u64;
        if c > 0 && c < n {
            flipped += 1;
            flipping_cases.push(case.to_string());
        }
        pass_share_sum += c as f64 / n as f64;
        pass_k_sum += binomial_ratio(c, n, k);
    }
    let graded = graded_cases > 0;
    Some(Consistency {
        cases: by_case.len(),
        k,
        identical_output: (output_cases > 0).then(|| {
            Rate::new(
                "identical_output_rate",
                "identical answers",
                same_cases,
                output_cases,
                confidence,
            )
        }),
        grade_agreement: (pairs > 0).then(|| agree_pairs as f64 / pairs as f64),
        flip_rate: graded.then(|| Rate::new("flip_rate", "cases that flip", flipped, graded_cases, confidence)),
        flipping_cases,
        pass_at_1: graded.then(|| pass_share_sum / graded_cases as f64),
        pass_hat_k: graded.then(|| pass_k_sum / graded_cases as f64),
    })
}
