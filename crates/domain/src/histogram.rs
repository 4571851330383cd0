//! A log-bucketed histogram with bounded relative error (the DDSketch idea), so a run of a
//! million requests aggregates its latency and speed distributions in a few kilobytes.
//!
//! A positive value `x` falls in bucket `i = ceil(ln x / ln γ)` with `γ = (1 + α) / (1 − α)`;
//! the bucket reports `2γ^i / (γ + 1)`, within relative error `α` of every value in it. Negative
//! values are kept in mirrored buckets, zero on its own. Count, sum, min, max, mean and variance
//! are exact (Welford); quantiles are exact to within `α` relative error, clamped to [min, max].
use serde::{Deserialize, Serialize};

/// Relative accuracy of bakeoff's histograms: 0.5 %.
pub const DEFAULT_ALPHA: f64 = 0.005;
/// Most buckets per sign; past it the smallest buckets merge (their values are reported high),
/// which only happens for data spanning more than ~30 orders of magnitude at 0.5 %.
const MAX_BUCKETS: usize = 8192;
/// Magnitudes below this count as zero.
const MIN_MAGNITUDE: f64 = 1e-12;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogHistogram {
    alpha: f64,
    ln_gamma: f64,
    positive: Buckets,
    negative: Buckets,
    zeros: u64,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    /// Welford running mean and sum of squared deviations.
    mean: f64,
    m2: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Buckets {
    /// Bucket index of `counts[0]`.
    offset: i32,
    counts: Vec<u64>,
}

impl Buckets {
    fn add(&mut self, index: i32, n: u64) {
        if self.counts.is_empty() {
            self.offset = index;
            self.counts.push(0);
        }
        let mut index = index;
        if index < self.offset {
            let grow = (self.offset - index) as usize;
            if self.counts.len() + grow > MAX_BUCKETS {
                index = self.offset; // collapse into the lowest kept bucket
            } else {
                let mut counts = vec![0; grow];
                counts.append(&mut self.counts);
                self.counts = counts;
                self.offset = index;
            }
        }
        let at = (index - self.offset) as usize;
        if at >= self.counts.len() {
            if at + 1 > MAX_BUCKETS {
                // Keep the top: drop the lowest buckets into their new lowest neighbour.
                let shift = at + 1 - MAX_BUCKETS;
                let merged: u64 = self.counts.iter().take(shift + 1).sum();
                self.counts.drain(..shift);
                self.counts[0] = merged;
                self.offset += shift as i32;
                let at = (index - self.offset) as usize;
                self.counts.resize(at + 1, 0);
                self.counts[at] += n;
                return;
            }
            self.counts.resize(at + 1, 0);
        }
        self.counts[at] += n;
    }

    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram::new(DEFAULT_ALPHA)
    }
}

impl LogHistogram {
    /// `alpha` is the relative accuracy, e.g. 0.01 for 1 %.
    pub fn new(alpha: f64) -> Self {
        let alpha = alpha.clamp(1e-6, 0.5);
        let gamma = (1.0 + alpha) / (1.0 - alpha);
        LogHistogram {
            alpha,
            ln_gamma: gamma.ln(),
            positive: Buckets::default(),
            negative: Buckets::default(),
            zeros: 0,
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            m2: 0.0,
        }
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    fn index(&self, magnitude: f64) -> i32 {
        (magnitude.ln() / self.ln_gamma).ceil() as i32
    }

    fn value_of(&self, index: i32) -> f64 {
        let gamma = self.ln_gamma.exp();
        2.0 * (self.ln_gamma * f64::from(index)).exp() / (gamma + 1.0)
    }

    /// Adds one value; non-finite values are ignored.
    pub fn record(&mut self, x: f64) {
        self.record_n(x, 1);
    }

    /// Adds `n` copies of one value; non-finite values are ignored.
    pub fn record_n(&mut self, x: f64, n: u64) {
        if !x.is_finite() || n == 0 {
            return;
        }
        if x.abs() < MIN_MAGNITUDE {
            self.zeros += n;
        } else if x > 0.0 {
            let i = self.index(x);
            self.positive.add(i, n);
        } else {
            let i = self.index(-x);
            self.negative.add(i, n);
        }
        // Welford, for a group of n equal values (Chan et al.'s update with m2 = 0).
        let (n_a, n_b) = (self.count as f64, n as f64);
        let delta = x - self.mean;
        self.mean += delta * n_b / (n_a + n_b);
        self.m2 += delta * delta * n_a * n_b / (n_a + n_b);
        self.count += n;
        self.sum += x * n_b;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    /// Adds every value of `other` (which must have the same accuracy; otherwise its values are
    /// re-bucketed at their reported values).
    pub fn merge(&mut self, other: &LogHistogram) {
        if other.count == 0 {
            return;
        }
        let same = (self.alpha - other.alpha).abs() < 1e-15;
        let moved = |theirs: &Buckets| -> Vec<(i32, u64)> {
            theirs
                .counts
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(k, &n)| {
                    let index = theirs.offset + k as i32;
                    let index = if same { index } else { self.index(other.value_of(index)) };
                    (index, n)
                })
                .collect()
        };
        let (positive, negative) = (moved(&other.positive), moved(&other.negative));
        for (index, n) in positive {
            self.positive.add(index, n);
        }
        for (index, n) in negative {
            self.negative.add(index, n);
        }
        self.zeros += other.zeros;
        // Chan et al.'s parallel variance update.
        let (n_a, n_b) = (self.count as f64, other.count as f64);
        let n = n_a + n_b;
        let delta = other.mean - self.mean;
        self.mean += delta * n_b / n;
        self.m2 += other.m2 + delta * delta * n_a * n_b / n;
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    pub fn sum(&self) -> f64 {
        self.sum
    }
    pub fn min(&self) -> Option<f64> {
        (self.count > 0).then_some(self.min)
    }
    pub fn max(&self) -> Option<f64> {
        (self.count > 0).then_some(self.max)
    }
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then_some(self.mean)
    }
    /// Sample standard deviation (n − 1); None below two values.
    pub fn std_dev(&self) -> Option<f64> {
        (self.count >= 2).then(|| (self.m2 / (self.count - 1) as f64).max(0.0).sqrt())
    }

    /// The value at quantile `q` in [0, 1]: the bucket holding the value of rank
    /// `round(q · (n − 1))`, within `alpha` relative error (min and max exactly); None when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * (self.count - 1) as f64).round() as u64;
        // The extremes are known exactly.
        if rank == 0 {
            return Some(self.min);
        }
        if rank == self.count - 1 {
            return Some(self.max);
        }
        let mut seen = 0u64;
        // Negative values, most negative first (highest magnitude bucket first).
        for (k, &n) in self.negative.counts.iter().enumerate().rev() {
            seen += n;
            if seen > rank {
                let v = -self.value_of(self.negative.offset + k as i32);
                return Some(v.clamp(self.min, self.max));
            }
        }
        seen += self.zeros;
        if seen > rank {
            return Some(0.0f64.clamp(self.min, self.max));
        }
        for (k, &n) in self.positive.counts.iter().enumerate() {
            seen += n;
            if seen > rank {
                let v = self.value_of(self.positive.offset + k as i32);
                return Some(v.clamp(self.min, self.max));
            }
        }
        debug_assert_eq!(seen, self.negative.total() + self.zeros + self.positive.total());
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::quantile_sorted;

    #[test]
    fn quantiles_within_the_relative_error() {
        let mut h = LogHistogram::new(0.01);
        let mut exact = Vec::new();
        for i in 1..=10_000 {
            let x = (i as f64).powf(1.7) / 100.0; // spans 0.01 .. 6.3e4
            h.record(x);
            exact.push(x);
        }
        for q in [0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0] {
            let want = quantile_sorted(&exact, q);
            let got = h.quantile(q).unwrap();
            assert!((got - want).abs() / want <= 0.0101 + 1e-3, "q={q}: {got} vs {want}");
        }
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.min(), Some(0.01));
        let mean = exact.iter().sum::<f64>() / exact.len() as f64;
        assert!((h.mean().unwrap() - mean).abs() < 1e-6 * mean);
    }

    #[test]
    fn negatives_zero_and_merge() {
        let mut a = LogHistogram::default();
        let mut b = LogHistogram::default();
        for x in [-3.0, -1.0, 0.0] {
            a.record(x);
        }
        for x in [1.0, 2.0, f64::NAN] {
            b.record(x);
        }
        a.merge(&b);
        assert_eq!(a.count(), 5);
        assert_eq!(a.quantile(0.0), Some(-3.0));
        assert_eq!(a.quantile(0.5), Some(0.0));
        assert!((a.quantile(1.0).unwrap() - 2.0).abs() < 1e-12);
        assert!((a.mean().unwrap() - (-0.2)).abs() < 1e-12);
        // Sample std-dev of [-3, -1, 0, 1, 2] = sqrt(14.8 / 4).
        assert!((a.std_dev().unwrap() - (14.8f64 / 4.0).sqrt()).abs() < 1e-12);
        assert!(LogHistogram::default().quantile(0.5).is_none());
    }

    #[test]
    fn memory_stays_bounded_for_a_million_values() {
        let mut h = LogHistogram::default();
        for i in 0..1_000_000u64 {
            h.record(1e-3 + (i % 977) as f64 * 10.0 + (i as f64) * 1e-3);
        }
        assert!(h.positive.counts.len() < 4000, "{}", h.positive.counts.len());
        assert_eq!(h.count(), 1_000_000);
    }
}
