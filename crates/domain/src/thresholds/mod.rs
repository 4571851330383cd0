//! Threshold profiles: the team's minimum acceptable values, one rule per metric.
//!
//! A rule names its metric with a key from the [catalog](catalog::CATALOG): a base name, an optional
//! parameter after `:` (a grader name, an error class) and an optional load condition after `@`
//! (`@c=8`), e.g. `aggregate_tok_s@c=8`, `ttft_p95_ms`, `grader_score:json_fields`,
//! `failure_rate:rate_limited`. Without `@c=N` a rule is assessed at the run's own concurrency.
//!
//! Proportions (accuracy, failure rates, shares) are stored as fractions and shown as percent.
pub mod catalog;
pub mod form;
pub mod history;
pub mod key;
pub mod slo;
pub mod templates;
pub mod units;

use serde::{Deserialize, Serialize};

use key::MetricKey;

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

impl Comparator {
    pub const ALL: [Comparator; 4] = [
        Comparator::AtLeast,
        Comparator::Above,
        Comparator::AtMost,
        Comparator::Below,
    ];

    /// `≥`, `>`, `≤`, `<` as shown on pages.
    pub fn symbol(&self) -> &'static str {
        match self {
            Comparator::AtLeast => "≥",
            Comparator::AtMost => "≤",
            Comparator::Below => "<",
            Comparator::Above => ">",
        }
    }

    /// `>=`, `>`, `<=`, `<`: the form value and the stored JSON value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Comparator::AtLeast => ">=",
            Comparator::AtMost => "<=",
            Comparator::Below => "<",
            Comparator::Above => ">",
        }
    }

    pub fn parse(s: &str) -> Option<Comparator> {
        Comparator::ALL
            .into_iter()
            .find(|c| c.as_str() == s.trim() || c.symbol() == s.trim())
    }

    /// Whether `measured` satisfies `measured <cmp> threshold`.
    pub fn holds(&self, measured: f64, threshold: f64) -> bool {
        match self {
            Comparator::AtLeast => measured >= threshold,
            Comparator::Above => measured > threshold,
            Comparator::AtMost => measured <= threshold,
            Comparator::Below => measured < threshold,
        }
    }

    /// True for `≥` and `>`: a larger value is on the passing side.
    pub fn wants_high(&self) -> bool {
        matches!(self, Comparator::AtLeast | Comparator::Above)
    }
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

impl ThresholdRule {
    /// The rule in words, e.g. `accuracy ≥ 95 %`, `TTFT p95 ≤ 1000 ms @c=8`.
    pub fn describe(&self) -> String {
        match MetricKey::parse(&self.metric) {
            Ok(key) => format!(
                "{} {} {}",
                key.label(),
                self.comparator.symbol(),
                key.def().unit.format(self.value)
            ),
            Err(_) => format!(
                "{} {} {} {}",
                self.metric,
                self.comparator.symbol(),
                self.value,
                self.unit
            ),
        }
    }
}

/// A named profile at one version.
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdProfile {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: u32,
    pub rules: Vec<ThresholdRule>,
    /// The profile's SLO block (`slo`): where set, it judges the SLO-based rules of the runs
    /// this profile judges, in place of each run's own SLO.
    pub slo: Option<crate::run::Slo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparators_hold_at_the_boundary_as_written() {
        assert!(Comparator::AtLeast.holds(0.95, 0.95));
        assert!(!Comparator::Above.holds(0.95, 0.95));
        assert!(Comparator::AtMost.holds(1000.0, 1000.0));
        assert!(!Comparator::Below.holds(0.02, 0.02));
        assert_eq!(Comparator::parse("≥"), Some(Comparator::AtLeast));
        assert_eq!(Comparator::parse("<"), Some(Comparator::Below));
    }
}
