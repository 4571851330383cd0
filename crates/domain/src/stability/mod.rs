//! Stability, computed from one candidate's raw request records: how often and how it fails
//! (by class, with Wilson intervals), how much repetitions of the same load disagree (CV of
//! aggregate tok/s and of p95 latency), whether repeated cases give the same answer (identical
//! outputs, grade agreement, flip rate, pass^k), and whether a soak degrades over time (per-window
//! tok/s and p95 latency, least-squares trend with a t-interval, drift, error bursts).
//!
//! Every figure here is recomputable from stored records; nothing is measured twice. Fractions
//! are stored as fractions (0.25 = 25 %), as the threshold catalog's `Percent` unit expects.
pub mod consistency;
pub mod failures;
pub mod repetitions;
pub mod soak;
pub mod trend;

use serde::Serialize;

use super::run::{Phase, RequestRecord};
use consistency::{Consistency, consistency};
use failures::{FailureSummary, failure_summary};
use repetitions::{RepetitionSpread, repetition_spread};
use soak::{SoakAnalysis, soak_analysis};

/// The failure key of a successful request that stopped at its max_tokens (`finish_reason`
/// "length"): not an error to the engine, but an answer cut short.
pub const TRUNCATED: &str = "truncated";

/// Knobs of the analysis; `Default` is what the scorecard and pages use.
#[derive(Debug, Clone, PartialEq)]
pub struct StabilityOptions {
    /// Two-sided coverage of every interval (0.90, like the scorecard's).
    pub confidence: f64,
    /// Windows a soak is cut into.
    pub soak_windows: usize,
    /// Fewest successful completions for a window's p95 latency.
    pub min_window_requests: usize,
    /// Smallest relative drift (first → last window) called degradation, however clean the trend.
    pub degrade_min_drift: f64,
    /// A window is an error burst when its error rate is at least this many times the overall.
    pub burst_factor: f64,
}

impl Default for StabilityOptions {
    fn default() -> Self {
        StabilityOptions {
            confidence: 0.90,
            soak_windows: 10,
            min_window_requests: 3,
            degrade_min_drift: 0.10,
            burst_factor: 2.0,
        }
    }
}

/// Everything the scorecard's stability section shows for one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StabilityReport {
    /// Final attempts of measured requests (warm-ups and probes excluded, soak included).
    pub measured_requests: usize,
    pub failures: FailureSummary,
    /// The quality and throughput phases, per load level.
    pub spread: Vec<RepetitionSpread>,
    pub consistency: Option<Consistency>,
    /// Records of the soak phase, when the run had one.
    pub soak: Option<SoakAnalysis>,
}

/// The final attempt of every measured request of `candidate_id` (warm-ups and probes left out),
/// in send order.
pub fn final_attempts(records: &[RequestRecord], candidate_id: i64) -> Vec<&RequestRecord> {
    let measured = records
        .iter()
        .filter(|r| r.candidate_id == candidate_id && !r.is_warmup && !matches!(r.phase, Phase::Warmup | Phase::Probe));
    crate::run::last_attempts(measured, |r| {
        (r.case_id.as_ref(), r.phase.as_str(), r.repetition, r.concurrency)
    })
}

/// The stability report of one candidate from a run's records (any candidate's records may be
/// passed; only `candidate_id`'s are used).
pub fn stability_report(records: &[RequestRecord], candidate_id: i64, options: &StabilityOptions) -> StabilityReport {
    let finals = final_attempts(records, candidate_id);
    let soak: Vec<&RequestRecord> = finals.iter().copied().filter(|r| r.phase == Phase::Soak).collect();
    // Smoke requests are a rollout check, not repetitions of the measured load.
    let other: Vec<&RequestRecord> = finals
        .iter()
        .copied()
        .filter(|r| matches!(r.phase, Phase::Quality | Phase::Throughput))
        .collect();
    StabilityReport {
        measured_requests: finals.len(),
        failures: failure_summary(&finals, options.confidence),
        spread: repetition_spread(&other),
        consistency: consistency(&other, options.confidence),
        soak: soak_analysis(&soak, options),
    }
}

impl StabilityReport {
    /// The load level with the most repetitions (ties: the most requests), whose CVs stand for
    /// the run.
    pub fn main_spread(&self) -> Option<&RepetitionSpread> {
        self.spread.iter().max_by_key(|s| {
            (
                s.repetitions.len(),
                s.repetitions.iter().map(|r| r.requests).sum::<usize>(),
            )
        })
    }

    /// One figure by its metric key, for thresholds and exports:
    /// `failure_rate`, `failure_rate:<error class | group | truncated>`,
    /// `failure_rate_with_truncation`, `tok_s_cv`, `p95_latency_cv`, `identical_output_rate`,
    /// `grade_agreement`, `flip_rate`, `pass_at_1`, `pass_hat_k`, `soak_tok_s_drift`,
    /// `soak_p95_drift`, `soak_tok_s_slope`, `soak_p95_slope`, `soak_error_bursts`,
    /// `soak_degrading` (1 or 0). None when not measured.
    pub fn metric(&self, key: &str) -> Option<f64> {
        if let Some(class) = key.strip_prefix("failure_rate:") {
            let n = self.failures.overall.n;
            return (n > 0).then(|| {
                self.failures
                    .by_class
                    .iter()
                    .chain(&self.failures.by_group)
                    .find(|r| r.key == class)
                    .map_or(0.0, |r| r.rate)
            });
        }
        let consistency = self.consistency.as_ref();
        let soak = self.soak.as_ref();
        match key {
            "failure_rate" => (self.failures.overall.n > 0).then_some(self.failures.overall.rate),
            "failure_rate_with_truncation" => {
                (self.failures.overall.n > 0).then_some(self.failures.with_truncation.rate)
            }
            "tok_s_cv" => self.main_spread().and_then(|s| s.tok_s_cv),
            "p95_latency_cv" => self.main_spread().and_then(|s| s.p95_latency_cv),
            "identical_output_rate" => consistency.and_then(|c| c.identical_output.as_ref()).map(|r| r.rate),
            "grade_agreement" => consistency.and_then(|c| c.grade_agreement),
            "flip_rate" => consistency.and_then(|c| c.flip_rate.as_ref()).map(|r| r.rate),
            "pass_at_1" => consistency.and_then(|c| c.pass_at_1),
            "pass_hat_k" => consistency.and_then(|c| c.pass_hat_k),
            "soak_tok_s_drift" => soak.and_then(|s| s.tok_s.drift),
            "soak_p95_drift" => soak.and_then(|s| s.p95_latency.drift),
            "soak_tok_s_slope" => soak.and_then(|s| s.tok_s.fit.as_ref()).map(|f| f.slope),
            "soak_p95_slope" => soak.and_then(|s| s.p95_latency.fit.as_ref()).map(|f| f.slope),
            "soak_error_bursts" => soak.map(|s| s.error_bursts as f64),
            "soak_degrading" => soak.map(|s| if s.degrading { 1.0 } else { 0.0 }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
