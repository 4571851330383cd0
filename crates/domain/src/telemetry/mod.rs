//! Telemetry sources: what a candidate's server (its Prometheus `/metrics`) and GPU exporter said
//! during a run, read on the client's timeline. `exposition` parses the text format, `catalogue`
//! knows the engines' series, `window` turns scrapes into figures over a measured window (its
//! methods are stated there), `diagnosis` names what held a level back, and `energy` gives
//! joules per output token.
pub mod catalogue;
pub mod diagnosis;
pub mod exposition;
pub mod source;
pub mod window;

pub use catalogue::{Engine, Signal};
pub use diagnosis::{Bottleneck, Diagnosis, LevelEvidence, diagnose};
pub use exposition::{Exposition, ExpositionError, MetricType, Sample, parse};
pub use window::{Boundary, EnergyMethod, Scrape, SignalSummary, Source, Window, energy_joules, summarise};

/// The default time between scrapes during a run, seconds.
pub const DEFAULT_SCRAPE_INTERVAL_S: f64 = 1.0;
/// The shortest interval a run may ask for: a scrape of a large vLLM exposition takes a few
/// milliseconds of the client's CPU, so ten a second is already a measurable load.
pub const MIN_SCRAPE_INTERVAL_S: f64 = 0.1;
/// The longest: beyond a minute a level of ordinary length has no periodic scrape at all, and
/// its gauges rest on the boundary scrapes alone.
pub const MAX_SCRAPE_INTERVAL_S: f64 = 60.0;

/// Joules per output token over a window: the GPUs' energy over the output tokens the client
/// received in it. None without energy or tokens.
pub fn joules_per_output_token(joules: Option<f64>, output_tokens: u64) -> Option<f64> {
    joules
        .filter(|j| j.is_finite() && *j >= 0.0)
        .filter(|_| output_tokens > 0)
        .map(|j| j / output_tokens as f64)
}

/// What the GPUs cost per million output tokens over a window: `gpu_count` GPUs at
/// `gpu_hour_price` USD an hour each, for the window's length, over the output tokens the
/// client received in it (the caliber: GPU time paid for, busy or idle, at the level's load —
/// read it beside the GPUs' utilisation and energy). None without a price, count or tokens.
pub fn gpu_cost_per_million_output_tokens(
    gpu_count: Option<u32>,
    gpu_hour_price: Option<f64>,
    window_s: f64,
    output_tokens: u64,
) -> Option<f64> {
    let usd_per_hour = f64::from(gpu_count?) * gpu_hour_price?;
    (output_tokens > 0 && window_s.is_finite() && window_s > 0.0 && usd_per_hour.is_finite())
        .then(|| usd_per_hour * window_s / 3600.0 / output_tokens as f64 * 1e6)
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpu_cost_per_million_output_tokens_is_gpu_time_over_tokens() {
        // 2 GPUs at $3/h for 60 s: $0.10, over 50,000 tokens: $2 per million.
        let cost = super::gpu_cost_per_million_output_tokens(Some(2), Some(3.0), 60.0, 50_000).unwrap();
        assert!((cost - 2.0).abs() < 1e-9, "{cost}");
        assert_eq!(
            super::gpu_cost_per_million_output_tokens(None, Some(3.0), 60.0, 1),
            None
        );
        assert_eq!(super::gpu_cost_per_million_output_tokens(Some(1), None, 60.0, 1), None);
        assert_eq!(
            super::gpu_cost_per_million_output_tokens(Some(1), Some(3.0), 60.0, 0),
            None
        );
    }

    #[test]
    fn joules_per_token() {
        assert_eq!(super::joules_per_output_token(Some(500.0), 1000), Some(0.5));
        assert_eq!(super::joules_per_output_token(Some(500.0), 0), None);
        assert_eq!(super::joules_per_output_token(None, 10), None);
    }
}
