//! The intervals a verdict is decided by, at one confidence level for every rule: a rule passes
//! only when the one-sided 95 % bound clears the threshold, i.e. the two-sided 90 % interval
//! lies on the passing side. Built on `domain::stats` (Wilson, seeded percentile bootstrap).
use crate::stats::{self, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};

/// Two-sided coverage of every interval a scorecard shows (one-sided 95 % bounds).
pub const CONFIDENCE: f64 = 0.90;
/// Bound on resamples × sample size per interval, so a page over many requests stays fast.
const WORK_BUDGET: usize = 4_000_000;
/// Fewest resamples used, however large the sample.
const MIN_RESAMPLES: usize = 200;
/// Fewest observations a bootstrap interval is computed from.
pub const MIN_BOOTSTRAP_N: usize = 5;

/// Wilson interval for a possibly weighted proportion: `share` of `n` effective observations.
///
/// Weighted accuracy has a fractional effective sample size; it is rounded *down* (a wider,
/// more cautious interval) and the successes to the nearest whole number of that.
pub fn wilson(share: f64, n: f64) -> Option<(f64, f64)> {
    if !(n.is_finite() && n >= 1.0 && share.is_finite()) {
        return None;
    }
    let whole_n = n.floor() as u64;
    let successes = (share.clamp(0.0, 1.0) * whole_n as f64).round() as u64;
    stats::wilson(successes, whole_n, CONFIDENCE).map(|i| (i.lo, i.hi))
}

fn resamples_for(n: usize) -> usize {
    BOOTSTRAP_RESAMPLES.min(WORK_BUDGET / n.max(1)).max(MIN_RESAMPLES)
}

/// Percentile bootstrap interval of `statistic` over `sample`, with bakeoff's fixed seed.
/// None below [`MIN_BOOTSTRAP_N`] observations.
pub fn bootstrap(sample: &[f64], statistic: impl Fn(&mut [f64]) -> f64) -> Option<(f64, f64)> {
    if sample.len() < MIN_BOOTSTRAP_N {
        return None;
    }
    stats::bootstrap(
        sample,
        statistic,
        resamples_for(sample.len()),
        CONFIDENCE,
        BOOTSTRAP_SEED,
    )
    .map(|i| (i.lo, i.hi))
}

/// Bootstrap over items that are not single numbers (e.g. (tokens, busy time) pairs): the
/// resampled values are item indices, which `statistic` maps back to the items.
pub fn bootstrap_items<T>(items: &[T], statistic: impl Fn(&mut dyn Iterator<Item = &T>) -> f64) -> Option<(f64, f64)> {
    if items.len() < MIN_BOOTSTRAP_N {
        return None;
    }
    stats::bootstrap_drawn(
        items.len(),
        |draws| statistic(&mut draws.map(|i| &items[i])),
        resamples_for(items.len()),
        CONFIDENCE,
        BOOTSTRAP_SEED,
    )
    .map(|i| (i.lo, i.hi))
}

pub use crate::stats::quantile;

/// The same as [`quantile`], None instead of NaN.
pub fn quantile_of(values: &mut [f64], q: f64) -> Option<f64> {
    Some(quantile(values, q)).filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_hand_computed_bounds() {
        // 19 / 20, z = 1.645 (z² = 2.7055): centre (0.95 + 2.7055 / 40) / (1 + 2.7055 / 20)
        // = 1.01764 / 1.13528 = 0.89637; half 1.645 · √(0.95 · 0.05 / 20 + 2.7055 / 1600) / 1.13528
        // = 1.645 · 0.063766 / 1.13528 = 0.09240 → [0.8040, 0.9888].
        let (lo, hi) = wilson(0.95, 20.0).unwrap();
        assert!((lo - 0.8040).abs() < 5e-4, "{lo}");
        assert!((hi - 0.9888).abs() < 5e-4, "{hi}");
        // 0 / 20: lower bound 0, upper z² / (n + z²) = 2.7055 / 22.7055 = 0.1192.
        let (lo, hi) = wilson(0.0, 20.0).unwrap();
        assert_eq!(lo, 0.0);
        assert!((hi - 0.1192).abs() < 5e-4, "{hi}");
        // 20 / 20: n / (n + z²) = 0.8808.
        let (lo, hi) = wilson(1.0, 20.0).unwrap();
        assert!((lo - 0.8808).abs() < 5e-4, "{lo}");
        assert_eq!(hi, 1.0);
        assert_eq!(wilson(0.5, 0.0), None);
        // A fractional effective n rounds down: 10.7 cases are treated as 10.
        assert_eq!(wilson(0.9, 10.7), wilson(0.9, 10.0));
    }

    #[test]
    fn bootstrap_is_deterministic_and_brackets_the_statistic() {
        let values: Vec<f64> = (1..=50).map(f64::from).collect();
        let median = |v: &mut [f64]| quantile(v, 0.5);
        let a = bootstrap(&values, median).unwrap();
        assert_eq!(Some(a), bootstrap(&values, median));
        assert!(a.0 < 25.5 && 25.5 < a.1, "{a:?}");
        assert!(a.1 - a.0 < 20.0, "{a:?}");
        assert_eq!(bootstrap(&values[..4], median), None);
        assert_eq!(bootstrap(&[3.0; 10], median), Some((3.0, 3.0)));
        // Pairs: the ratio of sums of a constant-ratio sample is that ratio.
        let pairs: Vec<(f64, f64)> = (1..=10).map(|i| (2.0 * f64::from(i), f64::from(i))).collect();
        let ratio = bootstrap_items(&pairs, |it| {
            let (a, b) = it.fold((0.0, 0.0), |acc, p| (acc.0 + p.0, acc.1 + p.1));
            a / b
        });
        assert_eq!(ratio, Some((2.0, 2.0)));
    }

    #[test]
    fn items_are_resampled_as_a_copied_sample_of_their_indices_would_be() {
        let items: Vec<(f64, f64)> = (0..300u32)
            .map(|i| (f64::from(i * 7 % 13), 1.0 + f64::from(i % 5)))
            .collect();
        let ratio = |it: &mut dyn Iterator<Item = &(f64, f64)>| {
            let (a, b) = it.fold((0.0, 0.0), |acc, p| (acc.0 + p.0, acc.1 + p.1));
            a / b
        };
        let indices: Vec<f64> = (0..300u32).map(f64::from).collect();
        let copied = bootstrap(&indices, |resample| {
            ratio(&mut resample.iter().map(|&i| &items[i as usize]))
        });
        assert!(copied.is_some());
        assert_eq!(bootstrap_items(&items, ratio), copied);
        // A statistic that reads part of each resample leaves the next resample's draws as
        // they were: its interval is that of the same part of the copied resamples.
        let first = |it: &mut dyn Iterator<Item = &(f64, f64)>| it.next().map_or(f64::NAN, |p| p.0);
        let copied_first = bootstrap(&indices, |resample| items[resample[0] as usize].0);
        assert_eq!(bootstrap_items(&items, first), copied_first);
    }
}
