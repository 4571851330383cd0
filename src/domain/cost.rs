//! Cost from stated prices per million tokens: the run's measured spend, per 1,000 cases and per
//! *correct* answer (a cheap model that is wrong half the time is not cheap per right answer).
use serde::Serialize;

use super::candidate::Pricing;
use super::run::RequestRecord;

/// Token totals of the measured attempts of one candidate (warm-ups excluded, retries included:
/// a retried request is paid for twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenTotals {
    pub attempts: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Attempts that returned no input or output count (failed before usage, or no usage block);
    /// their cost is unknown and left out, so the figure is a lower bound when this is not 0.
    pub attempts_without_usage: usize,
}

impl TokenTotals {
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> TokenTotals {
        let mut t = TokenTotals::default();
        for r in records.into_iter().filter(|r| !r.is_warmup) {
            t.attempts += 1;
            t.input_tokens += u64::from(r.input_tokens.unwrap_or(0));
            t.output_tokens += u64::from(r.output_tokens.unwrap_or(0));
            if r.succeeded() && (r.input_tokens.is_none() || r.output_tokens.is_none()) {
                t.attempts_without_usage += 1;
            }
        }
        t
    }
}

/// Dollars for `input` and `output` tokens at the stated prices; None unless both prices are stated.
pub fn token_cost(pricing: &Pricing, input: u64, output: u64) -> Option<f64> {
    let (pi, po) = (pricing.input_per_mtok?, pricing.output_per_mtok?);
    Some((input as f64 * pi + output as f64 * po) / 1e6)
}

/// A candidate's cost figures for one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostSummary {
    /// Spend of the measured attempts.
    pub total_usd: f64,
    /// total / measured requests × 1,000.
    pub per_1k_cases: Option<f64>,
    /// total / correct answers; None when nothing was correct or nothing was graded.
    pub per_correct: Option<f64>,
    pub requests: usize,
    pub correct: usize,
    pub totals: TokenTotals,
}

/// Cost figures from token totals, the number of measured requests (final attempts) and how
/// many of them were correct. None when the candidate states no prices.
pub fn summarise(pricing: &Pricing, totals: TokenTotals, requests: usize, correct: usize) -> Option<CostSummary> {
    let total = token_cost(pricing, totals.input_tokens, totals.output_tokens)?;
    Some(CostSummary {
        total_usd: total,
        per_1k_cases: (requests > 0).then(|| total / requests as f64 * 1000.0),
        per_correct: (correct > 0).then(|| total / correct as f64),
        requests,
        correct,
        totals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pricing(i: f64, o: f64) -> Pricing {
        Pricing {
            input_per_mtok: Some(i),
            output_per_mtok: Some(o),
        }
    }

    #[test]
    fn cost_per_correct_answer_by_hand() {
        // 200 requests, 100 000 input tokens at $0.90/M and 40 000 output tokens at $3.60/M:
        // 0.09 + 0.144 = $0.234 → $1.17 per 1,000 cases; 150 correct → $0.00156 per correct.
        let totals = TokenTotals {
            attempts: 210,
            input_tokens: 100_000,
            output_tokens: 40_000,
            attempts_without_usage: 0,
        };
        let s = summarise(&pricing(0.90, 3.60), totals, 200, 150).unwrap();
        assert!((s.total_usd - 0.234).abs() < 1e-12);
        assert!((s.per_1k_cases.unwrap() - 1.17).abs() < 1e-12);
        assert!((s.per_correct.unwrap() - 0.00156).abs() < 1e-12);
        // A cheaper but sloppier model can cost more per correct answer:
        // half the price, 60 correct → 0.117 / 60 = $0.00195 > $0.00156.
        let sloppy = summarise(&pricing(0.45, 1.80), totals, 200, 60).unwrap();
        assert!(sloppy.per_correct.unwrap() > s.per_correct.unwrap());
        assert_eq!(summarise(&pricing(1.0, 1.0), totals, 200, 0).unwrap().per_correct, None);
        assert_eq!(summarise(&Pricing::default(), totals, 200, 10), None);
    }
}
