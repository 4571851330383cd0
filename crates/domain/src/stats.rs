//! Generic statistics shared by the metrics and the scorecard: confidence intervals for a
//! proportion (Wilson) and for any statistic of a small sample (percentile bootstrap), with a
//! deterministic, portable random generator so the same data always gives the same interval.

/// A two-sided confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
    /// Nominal coverage, e.g. 0.95.
    pub confidence: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
    pub fn width(&self) -> f64 {
        self.hi - self.lo
    }
}

/// Seed of every bootstrap bakeoff reports, so a figure can be recomputed exactly.
pub const BOOTSTRAP_SEED: u64 = 0x0B0B_5EED;
/// Resamples of every bootstrap bakeoff reports.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// SplitMix64: tiny, fast, and the same sequence on every platform and Rust version (unlike
/// `rand`'s small generators, whose algorithm may change between releases).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0), without modulo bias worth mentioning for n ≪ 2^64.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// The standard normal quantile (inverse CDF), Acklam's rational approximation (relative
/// error < 1.2e-9). `p` in (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let low = 0.02425;
    if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -normal_quantile(1.0 - p)
    }
}

/// The z value of a two-sided interval of `confidence` (0.95 → 1.96).
pub fn z_for(confidence: f64) -> f64 {
    normal_quantile(0.5 + confidence.clamp(0.0, 0.999_999) / 2.0)
}

/// Wilson score interval for `successes` out of `n` (None when n = 0). Unlike the normal
/// approximation it stays inside [0, 1] and behaves at 0 % and 100 %.
pub fn wilson(successes: u64, n: u64, confidence: f64) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let n_f = n as f64;
    let p = successes.min(n) as f64 / n_f;
    let z = z_for(confidence);
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z * (p * (1.0 - p) / n_f + z2 / (4.0 * n_f * n_f)).sqrt() / denom;
    Some(Interval {
        lo: (centre - half).max(0.0),
        hi: (centre + half).min(1.0),
        confidence,
    })
}

/// Student's t quantile for `df` degrees of freedom (Hill's Cornish–Fisher expansion about the
/// normal quantile: within 0.01 of the exact value from 3 degrees of freedom on). `p` in (0, 1).
pub fn student_t_quantile(p: f64, df: u32) -> f64 {
    let z = normal_quantile(p);
    let n = f64::from(df.max(1));
    let (z3, z5, z7, z9) = (z.powi(3), z.powi(5), z.powi(7), z.powi(9));
    z + (z3 + z) / (4.0 * n)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * n * n)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * n.powi(3))
        + (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / (92160.0 * n.powi(4))
}

/// Batches an attainment interval is taken over ([`batch_means`]).
pub const ATTAINMENT_BATCHES: usize = 10;

/// One contiguous stretch of a level's requests in send order: how many, how many met.
pub type Batch = (u64, u64);

/// Cuts outcomes given in send order as (requests, met) runs into `k` contiguous batches of
/// about equal count (fewer when there are fewer runs than `k`).
pub fn batches_of(runs: impl IntoIterator<Item = Batch>, k: usize) -> Vec<Batch> {
    let runs: Vec<Batch> = runs.into_iter().filter(|r| r.0 > 0).collect();
    let total: u64 = runs.iter().map(|r| r.0).sum();
    let k = k.max(1) as u64;
    let mut out: Vec<Batch> = Vec::new();
    let (mut n, mut met, mut seen) = (0u64, 0u64, 0u64);
    for (rn, rmet) in runs {
        n += rn;
        met += rmet;
        seen += rn;
        // Cut where the running count passes the next k-th of the total.
        if seen * k >= (out.len() as u64 + 1) * total {
            out.push((n, met));
            (n, met) = (0, 0);
        }
    }
    if n > 0 {
        out.push((n, met));
    }
    out
}

/// Batch-means interval of a proportion whose outcomes are correlated in time (a queue's waits:
/// one burst makes many neighbours miss together). The outcomes, cut into contiguous batches in
/// send order, are clusters: the proportion's variance is estimated from the spread of the
/// batches' proportions (the ratio estimator's, k/(k−1) Σ (nᵢ/n)² (pᵢ − p)²), with Student's
/// t on k − 1 degrees of freedom. Why batch means rather than a moving-block bootstrap of the
/// outcomes: the same variance estimate in one deterministic pass, nothing resampled, and it
/// needs only each batch's two counts, which a level keeps without holding its requests. None
/// with fewer than 3 batches.
pub fn batch_means(batches: &[Batch], confidence: f64) -> Option<Interval> {
    let k = batches.len();
    let n: u64 = batches.iter().map(|b| b.0).sum();
    if k < 3 || n == 0 {
        return None;
    }
    let met: u64 = batches.iter().map(|b| b.1).sum();
    let p = met as f64 / n as f64;
    let n = n as f64;
    let sum: f64 = batches
        .iter()
        .map(|&(bn, bmet)| {
            let share = bn as f64 / n;
            let pi = bmet as f64 / bn.max(1) as f64;
            share * share * (pi - p) * (pi - p)
        })
        .sum();
    let var = sum * k as f64 / (k as f64 - 1.0);
    let t = student_t_quantile(0.5 + confidence.clamp(0.0, 0.999_999) / 2.0, k as u32 - 1);
    let half = t * var.sqrt();
    Some(Interval {
        lo: (p - half).max(0.0),
        hi: (p + half).min(1.0),
        confidence,
    })
}

/// The interval of an attainment (`met` of `requests`, batched in send order as `batches`): the
/// hull of the Wilson interval (which holds when requests are independent and behaves at 0 %
/// and 100 %, where every batch agrees and batch means has no spread to go by) and the batch-means
/// interval (which holds when they are not). Wilson alone when there are too few batches.
pub fn attainment_interval(met: u64, requests: u64, batches: &[Batch], confidence: f64) -> Option<Interval> {
    let w = wilson(met, requests, confidence)?;
    Some(match batch_means(batches, confidence) {
        Some(b) => Interval {
            lo: w.lo.min(b.lo),
            hi: w.hi.max(b.hi),
            confidence,
        },
        None => w,
    })
}

/// ln C(n, k).
fn ln_choose(n: u64, k: u64) -> f64 {
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error ~1e-15).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = G[0]
        + G.iter()
            .enumerate()
            .skip(1)
            .map(|(i, g)| g / (x + i as f64))
            .sum::<f64>();
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// P(X ≥ k) for X ~ Binomial(n, p), summed in log space (no term underflows to nothing while
/// the ones after it matter).
pub fn binomial_upper_tail(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let odds = (p / (1.0 - p)).ln();
    let mut term = ln_choose(n, k) + k as f64 * p.ln() + (n - k) as f64 * (1.0 - p).ln();
    let mut logs = Vec::with_capacity((n - k + 1) as usize);
    logs.push(term);
    for i in k..n {
        // pmf(i + 1) = pmf(i) · (n − i) / (i + 1) · p / (1 − p)
        term += ((n - i) as f64 / (i + 1) as f64).ln() + odds;
        logs.push(term);
    }
    let max = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = logs.iter().map(|l| (l - max).exp()).sum();
    (max + sum.ln()).exp().min(1.0)
}

/// The exact (Clopper–Pearson) interval for a proportion: `successes` of `n`. Its coverage is
/// at least `confidence` for every true proportion (it is conservative), which is what a
/// threshold rule needs. None when n = 0.
pub fn clopper_pearson(successes: u64, n: u64, confidence: f64) -> Option<Interval> {
    if n == 0 || successes > n {
        return None;
    }
    let alpha = (1.0 - confidence) / 2.0;
    // P(X ≥ k | p) grows with p: bisect for the p where it crosses the bound.
    let solve = |k: u64, target: f64| {
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if binomial_upper_tail(k, n, mid) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    };
    let lo = if successes == 0 { 0.0 } else { solve(successes, alpha) };
    // The upper bound: P(X ≤ k | p) = α, i.e. P(X ≥ k+1 | p) = 1 − α.
    let hi = if successes == n {
        1.0
    } else {
        solve(successes + 1, 1.0 - alpha)
    };
    Some(Interval { lo, hi, confidence })
}

/// Percentile bootstrap interval of `statistic` over `sample` (None for an empty sample): the
/// sample is resampled with replacement `resamples` times with a generator seeded by `seed`.
/// A one-value sample gives a zero-width interval (there is no spread to resample).
pub fn bootstrap(
    sample: &[f64],
    statistic: impl Fn(&mut [f64]) -> f64,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<Interval> {
    if sample.is_empty() {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let mut scratch = vec![0.0; sample.len()];
    let mut stats = Vec::with_capacity(resamples.max(1));
    for _ in 0..resamples.max(1) {
        for slot in scratch.iter_mut() {
            *slot = sample[rng.below(sample.len())];
        }
        stats.push(statistic(&mut scratch));
    }
    percentile_interval(stats, confidence)
}

/// [`bootstrap`] of items that are not single numbers, none copied: each resample is `n`
/// indices into the items, handed to `statistic` as they are drawn. The same draws as
/// [`bootstrap`] of the sample 0, 1, …, n − 1 (every resample draws all n, whatever
/// `statistic` reads of them).
pub fn bootstrap_drawn(
    n: usize,
    statistic: impl Fn(&mut dyn Iterator<Item = usize>) -> f64,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let mut stats = Vec::with_capacity(resamples.max(1));
    for _ in 0..resamples.max(1) {
        let mut draws = (0..n).map(|_| rng.below(n));
        stats.push(statistic(&mut draws));
        draws.for_each(drop);
    }
    percentile_interval(stats, confidence)
}

/// The two-sided percentile interval of the finite resampled statistics.
fn percentile_interval(mut stats: Vec<f64>, confidence: f64) -> Option<Interval> {
    stats.retain(|s| s.is_finite());
    if stats.is_empty() {
        return None;
    }
    stats.sort_by(|a, b| a.total_cmp(b));
    let alpha = (1.0 - confidence.clamp(0.0, 1.0)) / 2.0;
    Some(Interval {
        lo: quantile_sorted(&stats, alpha),
        hi: quantile_sorted(&stats, 1.0 - alpha),
        confidence,
    })
}

/// Bootstrap interval of the median with bakeoff's fixed seed and resample count.
pub fn median_ci(sample: &[f64], confidence: f64) -> Option<Interval> {
    bootstrap(sample, median, BOOTSTRAP_RESAMPLES, confidence, BOOTSTRAP_SEED)
}

/// Median (reorders `values`); NaN for an empty slice.
pub fn median(values: &mut [f64]) -> f64 {
    quantile(values, 0.5)
}

/// Interpolated quantile `q` of unsorted values (reorders them); NaN when empty.
///
/// The same number as sorting and reading [`quantile_sorted`], by selecting the two order
/// statistics it interpolates between: linear rather than n·log n per call, which is what a
/// bootstrap of a percentile over a big run spends its time on.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let (_, at_lo, above) = values.select_nth_unstable_by(lo, |a, b| a.total_cmp(b));
    let at_lo = *at_lo;
    // The next order statistic is the least of those above, when the position falls between.
    let at_hi = if pos.ceil() as usize > lo {
        above.iter().copied().min_by(|a, b| a.total_cmp(b)).unwrap_or(at_lo)
    } else {
        at_lo
    };
    at_lo + (at_hi - at_lo) * (pos - lo as f64)
}

/// Mean; NaN for an empty slice.
pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Linear-interpolation quantile (numpy's default) of an ascending slice; NaN when empty.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn t_quantiles_match_the_tables() {
        for (p, df, want) in [
            (0.975, 9, 2.262),
            (0.995, 9, 3.250),
            (0.975, 4, 2.776),
            (0.975, 30, 2.042),
        ] {
            let t = student_t_quantile(p, df);
            assert!((t - want).abs() < 0.01, "t({p}, {df}) = {t}, table {want}");
        }
    }

    #[test]
    fn batch_means_widens_with_bursts_and_batches_cut_evenly() {
        let b = batches_of((0..100).map(|_| (3, 3)), 10);
        assert_eq!((b.len(), b[0]), (10, (30, 30)));
        // Same 90 % either way: spread evenly, or as a burst of misses in one batch.
        let even: Vec<Batch> = (0..10).map(|_| (100, 90)).collect();
        let mut burst: Vec<Batch> = (0..9).map(|_| (100, 100)).collect();
        burst.push((100, 0));
        let e = attainment_interval(900, 1000, &even, 0.95).unwrap();
        let w = wilson(900, 1000, 0.95).unwrap();
        assert_eq!(e, w, "no spread between batches: Wilson");
        let b = attainment_interval(900, 1000, &burst, 0.95).unwrap();
        assert!(b.lo < w.lo - 0.1 && b.contains(0.9), "{b:?}");
    }

    use super::*;

    #[test]
    fn normal_quantile_matches_tables() {
        assert!((z_for(0.95) - 1.959_964).abs() < 1e-5);
        assert!((z_for(0.90) - 1.644_854).abs() < 1e-5);
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.001) + 3.090_232).abs() < 1e-5);
    }

    #[test]
    fn wilson_matches_hand_computed_values() {
        // 8/10 at 95 %: centre 0.7167, half-width 0.2265 (Wilson 1927; also R's prop.test
        // without continuity correction).
        let i = wilson(8, 10, 0.95).unwrap();
        assert!((i.lo - 0.4902).abs() < 1e-3, "{i:?}");
        assert!((i.hi - 0.9433).abs() < 1e-3, "{i:?}");
        let all = wilson(20, 20, 0.95).unwrap();
        assert_eq!(all.hi, 1.0);
        assert!((all.lo - 0.8389).abs() < 1e-3, "{all:?}");
        let none = wilson(0, 20, 0.95).unwrap();
        assert_eq!(none.lo, 0.0);
        assert!(wilson(0, 0, 0.95).is_none());
    }

    #[test]
    fn bootstrap_is_deterministic_and_covers_the_median() {
        let sample = [10.0, 11.0, 9.5, 10.2, 10.8, 9.9, 10.1];
        let a = median_ci(&sample, 0.95).unwrap();
        let b = median_ci(&sample, 0.95).unwrap();
        assert_eq!(a, b);
        assert!(a.contains(10.1) && a.lo >= 9.5 && a.hi <= 11.0, "{a:?}");
        let one = median_ci(&[5.0], 0.95).unwrap();
        assert_eq!((one.lo, one.hi), (5.0, 5.0));
        assert!(median_ci(&[], 0.95).is_none());
    }

    #[test]
    fn splitmix_is_the_reference_sequence() {
        // First outputs for seed 1234567 (from the reference C implementation by Vigna).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        for _ in 0..1000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert!(r.below(7) < 7);
        }
    }

    #[test]
    fn medians_and_quantiles() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
        assert_eq!(mean(&[1.0, 2.0, 3.0]), 2.0);
        assert!((quantile_sorted(&[1.0, 2.0, 3.0, 4.0], 0.95) - 3.85).abs() < 1e-12);
    }

    #[test]
    fn quantile_by_selection_is_the_sorted_quantile_to_the_bit() {
        // Ties, negatives, a NaN (ordered as `total_cmp` orders it) and every size up to 40.
        let mut rng = SplitMix64::new(7);
        for n in 1..=40 {
            let values: Vec<f64> = (0..n)
                .map(|i| match rng.below(6) {
                    0 => 3.0,
                    1 if i == 5 => f64::NAN,
                    _ => rng.below(1000) as f64 / 7.0 - 50.0,
                })
                .collect();
            let mut sorted = values.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            for q in [0.0, 0.05, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0] {
                let want = quantile_sorted(&sorted, q);
                let got = quantile(&mut values.clone(), q);
                assert_eq!(want.to_bits(), got.to_bits(), "n {n}, q {q}: {values:?}");
            }
        }
        assert!(quantile(&mut [], 0.5).is_nan());
    }
}
