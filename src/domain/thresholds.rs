//! Threshold profiles: the team's minimum acceptable values, one rule per metric.
//! The scorecard issue adds the metric catalog and verdicts; the shape is fixed here.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparator {
    #[serde(rename = ">=")]
    AtLeast,
    #[serde(rename = "<=")]
    AtMost,
    #[serde(rename = "<")]
    Below,
    #[serde(rename = ">")]
    Above,
}

/// One rule: `metric comparator value`, with why the team chose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdRule {
    /// Metric key from the catalog, e.g. `aggregate_tok_s`, `accuracy`, `failure_rate`, `ttft_p95_ms`.
    pub metric: String,
    pub comparator: Comparator,
    pub value: f64,
    pub unit: String,
    #[serde(default)]
    pub rationale: String,
}

/// A named profile at one version.
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdProfile {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: u32,
    pub rules: Vec<ThresholdRule>,
}

/// The demo's default profile: the article's batch-summarisation example.
pub fn batch_default_rules() -> Vec<ThresholdRule> {
    vec![
        ThresholdRule {
            metric: "aggregate_tok_s".into(),
            comparator: Comparator::AtLeast,
            value: 500.0,
            unit: "tok/s".into(),
            rationale: "batch jobs must finish overnight".into(),
        },
        ThresholdRule {
            metric: "accuracy".into(),
            comparator: Comparator::AtLeast,
            value: 0.95,
            unit: "fraction".into(),
            rationale: "rework costs more than compute".into(),
        },
        ThresholdRule {
            metric: "failure_rate".into(),
            comparator: Comparator::Below,
            value: 0.02,
            unit: "fraction".into(),
            rationale: "retries must stay rare".into(),
        },
    ]
}
