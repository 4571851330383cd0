//! How a figure is written on the pages (significant digits, its unit, "—" when not measured).
use crate::domain::format;

/// Shown for a figure that was not measured (never 0, never blank).
pub const NOT_MEASURED: &str = "—";

/// `123 ms` or "—".
pub fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{} ms", format::significant(v)))
        .unwrap_or_else(|| NOT_MEASURED.into())
}

/// `1234 tok/s` or "—".
pub fn tok_s(v: Option<f64>) -> String {
    v.map(|v| format!("{} tok/s", format::significant(v)))
        .unwrap_or_else(|| NOT_MEASURED.into())
}

/// A share as a percentage with its sample size: `95.0 % (n=20)` or "—".
pub fn pct_n(v: Option<f64>, n: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{} (n={n})", format::percent(v, 1)),
        _ => NOT_MEASURED.into(),
    }
}

/// Optional value or "—".
pub fn or_dash<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| NOT_MEASURED.into())
}
