//! The Pareto view: quality vs speed vs cost. A candidate is dominated when another is at least
//! as good on every axis and strictly better on one — it should never be chosen on these three.
use serde::Serialize;

use super::SummaryInput;
use super::measurement::Extras;
use crate::cost::CostSummary;
use crate::thresholds::key::MetricKey;

/// One candidate on the three axes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParetoPoint {
    pub index: usize,
    pub name: String,
    /// Accuracy (fraction).
    pub quality: Option<f64>,
    /// Request throughput at the run's load, req/s.
    pub speed: Option<f64>,
    /// Cost per 1,000 cases, USD.
    pub cost: Option<f64>,
    /// Columns that dominate this one.
    pub dominated_by: Vec<usize>,
}

impl ParetoPoint {
    pub fn dominated(&self) -> bool {
        !self.dominated_by.is_empty()
    }
}

/// (higher is better, value) per axis used.
fn axes_of(p: &ParetoPoint, use_q: bool, use_s: bool, use_c: bool) -> Vec<f64> {
    let mut v = Vec::new();
    if use_q {
        v.extend(p.quality);
    }
    if use_s {
        v.extend(p.speed);
    }
    if use_c {
        // Lower cost is better: negate so every axis reads "higher is better".
        v.extend(p.cost.map(|c| -c));
    }
    v
}

/// Whether `a` dominates `b` on the given (higher-is-better) axis values.
pub fn dominates(a: &[f64], b: &[f64]) -> bool {
    !a.is_empty() && a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x >= y) && a.iter().zip(b).any(|(x, y)| x > y)
}

/// The points, the axes used, and the axes left out (with why).
pub fn points(input: &SummaryInput<'_>, costs: &[Option<CostSummary>]) -> (Vec<ParetoPoint>, Vec<String>, Vec<String>) {
    let accuracy = MetricKey::parse("accuracy").expect("catalog metric");
    let speed = MetricKey::parse("request_throughput").expect("catalog metric");
    let mut points: Vec<ParetoPoint> = input
        .summaries
        .iter()
        .enumerate()
        .map(|(i, d)| ParetoPoint {
            index: i,
            name: input.candidates[i].spec.name.clone(),
            quality: d.measure(&accuracy, input.run_concurrency, &Extras::default()).value,
            speed: d.measure(&speed, input.run_concurrency, &Extras::default()).value,
            cost: costs[i].as_ref().and_then(|c| c.per_1k_cases),
            dominated_by: Vec::new(),
        })
        .collect();
    let all = |f: fn(&ParetoPoint) -> Option<f64>| !points.is_empty() && points.iter().all(|p| f(p).is_some());
    let (use_q, use_s, use_c) = (all(|p| p.quality), all(|p| p.speed), all(|p| p.cost));
    let mut used = Vec::new();
    let mut left_out = Vec::new();
    for (on, name, why) in [
        (use_q, "quality (accuracy)", "not every candidate has graded cases"),
        (
            use_s,
            "speed (request throughput at the run's load)",
            "not every candidate completed requests",
        ),
        (use_c, "cost (per 1,000 cases)", "not every candidate states prices"),
    ] {
        if on {
            used.push(name.to_string());
        } else {
            left_out.push(format!("{name}: {why}"));
        }
    }
    let values: Vec<Vec<f64>> = points.iter().map(|p| axes_of(p, use_q, use_s, use_c)).collect();
    for (i, p) in points.iter_mut().enumerate() {
        p.dominated_by = (0..values.len())
            .filter(|&j| j != i && dominates(&values[j], &values[i]))
            .collect();
    }
    (points, used, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domination_needs_every_axis_and_one_strictly() {
        assert!(dominates(&[0.9, 10.0, -1.0], &[0.8, 10.0, -1.0]));
        assert!(!dominates(&[0.9, 10.0, -1.0], &[0.9, 10.0, -1.0]));
        assert!(!dominates(&[0.9, 5.0, -1.0], &[0.8, 10.0, -1.0]));
        // Cheaper at equal quality and speed dominates (cost is negated).
        assert!(dominates(&[0.9, 10.0, -0.5], &[0.9, 10.0, -1.0]));
        assert!(!dominates(&[], &[]));
    }
}
