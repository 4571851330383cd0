//! What a metric measures (its dimension), the unit its values are stored, typed and shown in,
//! and how the uncertainty of a measured value is treated.
use serde::{Deserialize, Serialize};

use crate::format;

/// The four dimensions a scorecard is organised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dimension {
    Throughput,
    Quality,
    Stability,
    Operability,
}

impl Dimension {
    pub const ALL: [Dimension; 4] = [
        Dimension::Throughput,
        Dimension::Quality,
        Dimension::Stability,
        Dimension::Operability,
    ];
    pub fn as_str(&self) -> &'static str {
        match self {
            Dimension::Throughput => "throughput",
            Dimension::Quality => "quality",
            Dimension::Stability => "stability",
            Dimension::Operability => "operability",
        }
    }
    pub fn title(&self) -> &'static str {
        match self {
            Dimension::Throughput => "Throughput and latency",
            Dimension::Quality => "Quality",
            Dimension::Stability => "Stability",
            Dimension::Operability => "Operability and cost",
        }
    }
}

/// How a metric's value is stored, typed into the form and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Stored as a fraction in [0, 1], typed and shown as percent.
    Percent,
    Ms,
    TokS,
    ReqS,
    /// US dollars.
    Usd,
    /// Joules of GPU energy per output token (telemetry).
    JoulesPerToken,
    /// Concurrent users (in-flight requests or conversations): a load over concurrency.
    Users,
}

impl Unit {
    /// The unit as shown beside a value.
    pub fn symbol(&self) -> &'static str {
        match self {
            Unit::Percent => "%",
            Unit::Ms => "ms",
            Unit::TokS => "tok/s",
            Unit::ReqS => "req/s",
            Unit::Usd => "USD",
            Unit::JoulesPerToken => "J/token",
            Unit::Users => "users",
        }
    }
    /// The name stored in `ThresholdRule::unit` (proportions stay fractions, as stored).
    pub fn stored_name(&self) -> &'static str {
        match self {
            Unit::Percent => "fraction",
            other => other.symbol(),
        }
    }
    /// Stored value → the number a person types (95 for 0.95).
    pub fn to_display(&self, stored: f64) -> f64 {
        match self {
            Unit::Percent => stored * 100.0,
            _ => stored,
        }
    }
    /// The number a person typed → stored value.
    pub fn from_display(&self, typed: f64) -> f64 {
        match self {
            Unit::Percent => typed / 100.0,
            _ => typed,
        }
    }
    /// A stored value with its unit: `95 %`, `91.2 %`, `1000 ms`, `512 tok/s`, `$0.42`.
    pub fn format(&self, stored: f64) -> String {
        if !stored.is_finite() {
            return "—".into();
        }
        match self {
            Unit::Percent => format!("{} %", format::at_most_decimals(stored * 100.0, 1)),
            Unit::Usd => format::usd(stored),
            other => format!("{} {}", format::significant_trimmed(stored), other.symbol()),
        }
    }
    /// A difference between two stored values, signed: `+3.5 pp`, `−120 ms`.
    pub fn format_delta(&self, delta: f64) -> String {
        let sign = if delta > 0.0 {
            "+"
        } else if delta < 0.0 {
            "−"
        } else {
            "±"
        };
        let a = delta.abs();
        match self {
            Unit::Percent => format!("{sign}{} pp", format::at_most_decimals(a * 100.0, 1)),
            Unit::Usd => format!("{sign}{}", format::usd(a)),
            other => format!("{sign}{} {}", format::significant_trimmed(a), other.symbol()),
        }
    }
}

/// How the uncertainty of a measured value is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Uncertainty {
    /// A share of independent trials: Wilson score interval.
    Proportion,
    /// A statistic over requests: bootstrap percentile interval.
    Bootstrap,
    /// Counted exactly (money spent): compared as is.
    Exact,
    /// A share of independent comparisons: exact (Clopper–Pearson) binomial interval.
    ClopperPearson,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thresholds::ThresholdRule;
    use crate::thresholds::templates::batch_default_rules;

    #[test]
    fn units_format_values_and_deltas() {
        assert_eq!(Unit::Percent.format(0.912), "91.2 %");
        assert_eq!(Unit::Percent.format(0.95), "95 %");
        assert_eq!(Unit::Ms.format(1000.0), "1000 ms");
        assert_eq!(Unit::TokS.format(41.23), "41.2 tok/s");
        assert_eq!(Unit::TokS.format(20.0), "20 tok/s");
        assert_eq!(Unit::Usd.format(12.3), "$12.30");
        assert_eq!(Unit::Usd.format(0.004213), "$0.00421");
        assert_eq!(Unit::Percent.format_delta(-0.035), "−3.5 pp");
        assert_eq!(Unit::Ms.format_delta(120.0), "+120 ms");
        assert_eq!(
            batch_default_rules()
                .iter()
                .map(ThresholdRule::describe)
                .collect::<Vec<_>>(),
            [
                "aggregate tok/s (steady window) ≥ 500 tok/s",
                "accuracy ≥ 95 %",
                "failure rate < 2 %"
            ]
        );
    }
}
