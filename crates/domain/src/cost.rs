//! Cost from stated prices per million tokens: the run's measured spend, per 1,000 cases, per
//! 1,000 requests and per *correct* answer (a cheap model that is wrong half the time is not
//! cheap per right answer).
//!
//! Caliber of "per 1,000 cases": what answering 1,000 of the eval set's cases once costs. Each
//! measured case answer (one per case, repetition and load level) carries the cost of all its
//! attempts, so retries raise it; repetitions do not (each repetition is another answer).
//! "Per 1,000 requests" divides by the attempts sent instead, retries counted one by one.
//!
//! Prompt tokens the server read from its prompt cache cost the candidate's cached-input price,
//! and tokens it wrote to the cache (Anthropic) its cache-write price, where declared; the rest
//! of the prompt (and every prompt token when no such price is declared) costs the input price.
//! Token counts are bakeoff's (`prompt_cache`): `input_tokens` is the whole prompt.
use serde::{Deserialize, Serialize};

use super::candidate::Pricing;
use super::run::RequestRecord;

/// Token totals of the measured attempts of one candidate (warm-ups excluded, retries included:
/// a retried request is paid for twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenTotals {
    pub attempts: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from and written to the server's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
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
            if let (Some(c), Some(_)) = (r.prompt_cache, r.input_tokens) {
                t.cached_input_tokens += u64::from(c.read_tokens);
                t.cache_write_tokens += u64::from(c.creation_tokens.unwrap_or(0));
            }
            if r.succeeded() && (r.input_tokens.is_none() || r.output_tokens.is_none()) {
                t.attempts_without_usage += 1;
            }
        }
        t
    }
}

/// Dollars for `input` and `output` tokens at the stated prices; None unless both prices are stated.
pub fn token_cost(pricing: &Pricing, input: u64, output: u64) -> Option<f64> {
    prompt_cost(pricing, input, 0, 0, output)
}

/// Dollars for a whole prompt of `input` tokens, `cached` of them read from the prompt cache and
/// `written` written to it, and `output` tokens: cached and written tokens at their own prices
/// where declared, else at the input price. None unless input and output prices are stated.
pub fn prompt_cost(pricing: &Pricing, input: u64, cached: u64, written: u64, output: u64) -> Option<f64> {
    let (pi, po) = (pricing.input_per_mtok?, pricing.output_per_mtok?);
    let (cached, written) = (cached.min(input), written.min(input.saturating_sub(cached)));
    let plain = input - cached - written;
    let pc = pricing.cached_input_per_mtok.unwrap_or(pi);
    let pw = pricing.cache_write_per_mtok.unwrap_or(pi);
    Some((plain as f64 * pi + cached as f64 * pc + written as f64 * pw + output as f64 * po) / 1e6)
}

/// A candidate's cost figures for one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostSummary {
    /// Spend of the measured attempts.
    pub total_usd: f64,
    /// total / case answers × 1,000: answering 1,000 cases once, retries included.
    pub per_1k_cases: Option<f64>,
    /// total / attempts sent × 1,000 (a retry is another request).
    pub per_1k_requests: Option<f64>,
    /// total / correct answers; None when nothing was correct or nothing was graded.
    pub per_correct: Option<f64>,
    /// Case answers measured: one per case, repetition and load level (final attempts).
    pub answers: usize,
    /// Distinct eval-set cases among them.
    pub cases: usize,
    pub correct: usize,
    pub totals: TokenTotals,
}

/// What was answered: case answers (final attempts), the distinct cases among them, and how
/// many answers were correct.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub answers: usize,
    pub cases: usize,
    pub correct: usize,
}

/// Cost figures from token totals and what was answered. None when the candidate states no
/// prices.
pub fn summarise(pricing: &Pricing, totals: TokenTotals, answered: Answered) -> Option<CostSummary> {
    let total = prompt_cost(
        pricing,
        totals.input_tokens,
        totals.cached_input_tokens,
        totals.cache_write_tokens,
        totals.output_tokens,
    )?;
    let per_1k = |n: usize| (n > 0).then(|| total / n as f64 * 1000.0);
    Some(CostSummary {
        total_usd: total,
        per_1k_cases: per_1k(answered.answers),
        per_1k_requests: per_1k(totals.attempts),
        per_correct: (answered.correct > 0).then(|| total / answered.correct as f64),
        answers: answered.answers,
        cases: answered.cases,
        correct: answered.correct,
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
            ..Default::default()
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
            ..TokenTotals::default()
        };
        let answered = |correct| Answered {
            answers: 200,
            cases: 100,
            correct,
        };
        let s = summarise(&pricing(0.90, 3.60), totals, answered(150)).unwrap();
        assert!((s.total_usd - 0.234).abs() < 1e-12);
        assert!((s.per_1k_cases.unwrap() - 1.17).abs() < 1e-12);
        assert!((s.per_correct.unwrap() - 0.00156).abs() < 1e-12);
        // A cheaper but sloppier model can cost more per correct answer:
        // half the price, 60 correct → 0.117 / 60 = $0.00195 > $0.00156.
        let sloppy = summarise(&pricing(0.45, 1.80), totals, answered(60)).unwrap();
        assert!(sloppy.per_correct.unwrap() > s.per_correct.unwrap());
        assert_eq!(
            summarise(&pricing(1.0, 1.0), totals, answered(0)).unwrap().per_correct,
            None
        );
        assert_eq!(summarise(&Pricing::default(), totals, answered(10)), None);
    }

    #[test]
    fn cached_and_written_prompt_tokens_cost_their_declared_prices() {
        // 1M-token prompt: 600k read from the cache at $0.30/M, 100k written at $3.75/M, 300k
        // plain at $3/M; 10k output at $15/M: 0.18 + 0.375 + 0.9 + 0.15 = $1.605.
        let p = Pricing {
            cached_input_per_mtok: Some(0.30),
            cache_write_per_mtok: Some(3.75),
            ..pricing(3.0, 15.0)
        };
        let cost = prompt_cost(&p, 1_000_000, 600_000, 100_000, 10_000).unwrap();
        assert!((cost - 1.605).abs() < 1e-12, "{cost}");
        // Without cache prices every prompt token is input: 3 + 0.15.
        let plain = prompt_cost(&pricing(3.0, 15.0), 1_000_000, 600_000, 100_000, 10_000).unwrap();
        assert!((plain - 3.15).abs() < 1e-12, "{plain}");
        let totals = TokenTotals {
            attempts: 1,
            input_tokens: 1_000_000,
            output_tokens: 10_000,
            cached_input_tokens: 600_000,
            cache_write_tokens: 100_000,
            attempts_without_usage: 0,
        };
        let s = summarise(&p, totals, Answered::default()).unwrap();
        assert!((s.total_usd - 1.605).abs() < 1e-12);
    }

    #[test]
    fn per_case_counts_answers_and_per_request_counts_retries() {
        // 100 cases × 2 repetitions = 200 answers; 10 retries → 210 requests. $0.234 in all:
        // $1.17 per 1,000 case answers (retries' cost included), $1.114… per 1,000 requests.
        let totals = TokenTotals {
            attempts: 210,
            input_tokens: 100_000,
            output_tokens: 40_000,
            attempts_without_usage: 0,
            ..TokenTotals::default()
        };
        let answered = Answered {
            answers: 200,
            cases: 100,
            correct: 150,
        };
        let s = summarise(&pricing(0.90, 3.60), totals, answered).unwrap();
        assert!((s.per_1k_cases.unwrap() - 1.17).abs() < 1e-12);
        assert!((s.per_1k_requests.unwrap() - 0.234 / 210.0 * 1000.0).abs() < 1e-12);
        assert_eq!((s.answers, s.cases), (200, 100));
    }
}
