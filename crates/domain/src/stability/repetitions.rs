//! How much repetitions of the same load disagree: CV of aggregate tok/s and of p95 latency.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::run::{RequestRecord, split_repetition};
use crate::stats::quantile_sorted;

/// Coefficient of variation (sample standard deviation / mean); None below two values or for a
/// zero mean.
pub fn cv(values: &[f64]) -> Option<f64> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean.abs() > f64::EPSILON).then(|| var.sqrt() / mean)
}

/// One repetition of one load level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepetitionFigure {
    pub repetition: u32,
    pub requests: usize,
    /// Output tokens of the repetition / (last end − first send).
    pub tok_s: Option<f64>,
    /// p95 E2E latency of its successful requests.
    pub p95_e2e_ms: Option<f64>,
}

/// How much repetitions of the same load disagree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepetitionSpread {
    pub concurrency: u32,
    pub repetitions: Vec<RepetitionFigure>,
    /// CV of aggregate tok/s across repetitions (None below two repetitions).
    pub tok_s_cv: Option<f64>,
    /// CV of p95 E2E latency across repetitions.
    pub p95_latency_cv: Option<f64>,
}

pub(super) fn p95_ms(records: &[&RequestRecord]) -> Option<f64> {
    let mut v: Vec<f64> = records
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| r.end_us.get())
        .map(|us| us as f64 / 1000.0)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile_sorted(&v, 0.95))
}

pub(super) fn completion_us(r: &RequestRecord) -> i64 {
    r.sent_at_us + r.last_heard_us()
}

fn tok_s(records: &[&RequestRecord]) -> Option<f64> {
    let start = records.iter().map(|r| r.sent_at_us).min()?;
    let end = records.iter().map(|r| completion_us(r)).max()?;
    let tokens: u64 = records
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| r.output_tokens)
        .map(u64::from)
        .sum();
    (end > start && records.iter().any(|r| r.succeeded())).then(|| tokens as f64 / ((end - start) as f64 / 1e6))
}

/// Spread across repetitions, per load level (a level with one repetition has no CV).
pub fn repetition_spread(finals: &[&RequestRecord]) -> Vec<RepetitionSpread> {
    let mut groups: BTreeMap<(u32, u32, u32), Vec<&RequestRecord>> = BTreeMap::new();
    for r in finals {
        let (level, repetition, _cycle) = split_repetition(r.repetition);
        groups.entry((r.concurrency, level, repetition)).or_default().push(r);
    }
    let mut levels: BTreeMap<(u32, u32), Vec<RepetitionFigure>> = BTreeMap::new();
    for ((concurrency, level, repetition), records) in groups {
        levels.entry((concurrency, level)).or_default().push(RepetitionFigure {
            repetition,
            requests: records.len(),
            tok_s: tok_s(&records),
            p95_e2e_ms: p95_ms(&records),
        });
    }
    levels
        .into_iter()
        .map(|((concurrency, _), repetitions)| {
            let tok: Vec<f64> = repetitions.iter().filter_map(|r| r.tok_s).collect();
            let p95: Vec<f64> = repetitions.iter().filter_map(|r| r.p95_e2e_ms).collect();
            RepetitionSpread {
                concurrency,
                tok_s_cv: cv(&tok),
                p95_latency_cv: cv(&p95),
                repetitions,
            }
        })
        .collect()
}
