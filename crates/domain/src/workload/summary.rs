//! What a workload's page shows: arrivals over time, the length distributions, and how much of
//! it shares a prefix.
use serde::Serialize;

use super::WorkloadFile;
use crate::metrics::Distribution;

/// Bars of the arrival histogram, at most.
pub const ARRIVAL_BARS: usize = 60;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadSummary {
    pub requests: usize,
    pub duration_s: f64,
    /// Requests per second over the whole workload (None for a single instant).
    pub mean_rate: Option<f64>,
    /// Width of one arrival bar, seconds.
    pub bar_s: f64,
    /// Requests arriving in each bar, from the first arrival.
    pub arrivals: Vec<u64>,
    pub input_tokens: Option<Distribution>,
    pub output_tokens: Option<Distribution>,
    /// Requests whose first block also begins another request, as a share of all.
    pub shared_prefix_share: f64,
    /// Prompt tokens in blocks an earlier request already sent (what an unbounded prefix cache
    /// could reuse), as a share of all prompt tokens.
    pub repeated_token_share: f64,
    pub distinct_blocks: usize,
}

impl WorkloadSummary {
    pub fn of(w: &WorkloadFile) -> WorkloadSummary {
        let duration_ms = w.duration_ms();
        let bar_ms = nice_bar_ms(duration_ms);
        let bars = ((duration_ms / bar_ms).floor() as usize + 1).min(ARRIVAL_BARS + 1);
        let mut arrivals = vec![0u64; bars];
        for r in &w.requests {
            arrivals[((r.at_ms / bar_ms) as usize).min(bars - 1)] += 1;
        }
        let mut first_blocks: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        for r in &w.requests {
            if let Some(&b) = r.blocks.first() {
                *first_blocks.entry(b).or_default() += 1;
            }
        }
        let shared = w
            .requests
            .iter()
            .filter(|r| r.blocks.first().is_some_and(|b| first_blocks[b] > 1))
            .count();
        let block = u64::from(w.header.block_tokens);
        let mut seen = std::collections::HashSet::new();
        let (mut repeated, mut total) = (0u64, 0u64);
        for r in &w.requests {
            total += u64::from(r.input_tokens);
            for (j, &b) in r.blocks.iter().enumerate() {
                let tokens = block.min(u64::from(r.input_tokens).saturating_sub(j as u64 * block));
                if !seen.insert(b) {
                    repeated += tokens;
                }
            }
        }
        let n = w.requests.len();
        WorkloadSummary {
            requests: n,
            duration_s: duration_ms / 1000.0,
            mean_rate: (duration_ms > 0.0 && n > 1).then(|| (n - 1) as f64 / (duration_ms / 1000.0)),
            bar_s: bar_ms / 1000.0,
            arrivals,
            input_tokens: Distribution::of(w.requests.iter().map(|r| f64::from(r.input_tokens))),
            output_tokens: Distribution::of(w.requests.iter().map(|r| f64::from(r.output_tokens))),
            shared_prefix_share: if n == 0 { 0.0 } else { shared as f64 / n as f64 },
            repeated_token_share: if total == 0 {
                0.0
            } else {
                repeated as f64 / total as f64
            },
            distinct_blocks: seen.len(),
        }
    }
}

/// A bar width of 1, 2 or 5 × a power of ten milliseconds giving at most `ARRIVAL_BARS` bars.
fn nice_bar_ms(duration_ms: f64) -> f64 {
    let raw = (duration_ms / ARRIVAL_BARS as f64).max(1.0);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|w| *w >= raw)
        .unwrap_or(10.0 * power)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_arrivals_and_shared_prefixes() {
        let w = WorkloadFile::parse(
            "w.jsonl",
            r#"{"bakeoff_workload":1,"name":"w","source":"mooncake","block_tokens":4}
{"at_ms":0,"input_tokens":8,"output_tokens":3,"blocks":[0,1]}
{"at_ms":1000,"input_tokens":6,"output_tokens":5,"blocks":[0,2]}
{"at_ms":6000,"input_tokens":2,"output_tokens":1,"blocks":[3]}
"#,
        )
        .unwrap();
        let s = WorkloadSummary::of(&w);
        assert_eq!(s.bar_s, 0.1);
        assert_eq!((s.arrivals.len(), s.arrivals.iter().sum::<u64>()), (61, 3));
        assert!((s.shared_prefix_share - 2.0 / 3.0).abs() < 1e-12);
        // Block 0 (4 tokens) repeats once, out of 16 prompt tokens.
        assert!((s.repeated_token_share - 0.25).abs() < 1e-12);
        assert_eq!(s.mean_rate, Some(1.0 / 3.0));
        assert_eq!(s.input_tokens.unwrap().max, 8.0);
    }
}
