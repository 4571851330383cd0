//! Least-squares trends with a t-interval on the slope, and when a trend counts as movement.
use serde::Serialize;

use crate::stats::{Interval, normal_quantile};

/// The `p` quantile of Student's t with `df` degrees of freedom: exact for 1 and 2, else the
/// Cornish–Fisher expansion (Abramowitz & Stegun 26.7.5; within 0.1 % from df = 3 at 97.5 %).
pub fn t_quantile(p: f64, df: usize) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    match df {
        0 => f64::NAN,
        1 => (std::f64::consts::PI * (p - 0.5)).tan(),
        2 => (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt(),
        _ => {
            let z = normal_quantile(p);
            let v = df as f64;
            let (z3, z5, z7, z9) = (z.powi(3), z.powi(5), z.powi(7), z.powi(9));
            let g1 = (z3 + z) / 4.0;
            let g2 = (5.0 * z5 + 16.0 * z3 + 3.0 * z) / 96.0;
            let g3 = (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / 384.0;
            let g4 = (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / 92160.0;
            z + g1 / v + g2 / v.powi(2) + g3 / v.powi(3) + g4 / v.powi(4)
        }
    }
}

/// A least-squares line through (x, y) points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinearFit {
    pub slope: f64,
    pub intercept: f64,
    /// t-interval of the slope (needs ≥ 3 points).
    pub slope_interval: Option<Interval>,
    /// Standard deviation of the residuals (n − 2 denominator).
    pub residual_sd: Option<f64>,
}

/// Ordinary least squares; None below two points or when every x is the same.
pub fn linear_fit(points: &[(f64, f64)], confidence: f64) -> Option<LinearFit> {
    let n = points.len();
    if n < 2 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let (slope_interval, residual_sd) = if n >= 3 {
        let ssr: f64 = points.iter().map(|p| (p.1 - intercept - slope * p.0).powi(2)).sum();
        let s2 = ssr / (nf - 2.0);
        let half = t_quantile(0.5 + confidence / 2.0, n - 2) * (s2 / sxx).sqrt();
        (
            Some(Interval {
                lo: slope - half,
                hi: slope + half,
                confidence,
            }),
            Some(s2.sqrt()),
        )
    } else {
        (None, None)
    };
    Some(LinearFit {
        slope,
        intercept,
        slope_interval,
        residual_sd,
    })
}

/// The trend of one soak figure over its windows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    /// Change per minute (units of the figure per minute), with its t-interval.
    pub fit: Option<LinearFit>,
    /// (last window − first window) / first window.
    pub drift: Option<f64>,
    /// Window-to-window noise: residual standard deviation around the trend / mean.
    pub noise: Option<f64>,
    /// Windows the trend is computed from.
    pub windows: usize,
}

impl Trend {
    pub(super) fn of(points: &[(f64, f64)], confidence: f64) -> Trend {
        let fit = linear_fit(points, confidence);
        let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len().max(1) as f64;
        let drift = match (points.first(), points.last()) {
            (Some(a), Some(b)) if points.len() >= 2 && a.1.abs() > f64::EPSILON => Some((b.1 - a.1) / a.1),
            _ => None,
        };
        let noise = fit
            .as_ref()
            .and_then(|f| f.residual_sd)
            .filter(|_| mean.abs() > f64::EPSILON)
            .map(|sd| sd / mean.abs());
        Trend {
            fit,
            drift,
            noise,
            windows: points.len(),
        }
    }

    /// Whether the figure moved in direction `sign` (+1 up, −1 down) beyond noise: the slope's
    /// interval excludes zero on that side, and the drift exceeds both `min_drift` and twice the
    /// noise of a difference of two windows (√2 × noise).
    pub(super) fn moved(&self, sign: f64, min_drift: f64) -> bool {
        let (Some(fit), Some(drift)) = (&self.fit, self.drift) else {
            return false;
        };
        let Some(ci) = fit.slope_interval else {
            return false;
        };
        let excludes_zero = if sign > 0.0 { ci.lo > 0.0 } else { ci.hi < 0.0 };
        let noise_bound = 2.0 * std::f64::consts::SQRT_2 * self.noise.unwrap_or(0.0);
        excludes_zero && sign * drift > min_drift.max(noise_bound)
    }
}
