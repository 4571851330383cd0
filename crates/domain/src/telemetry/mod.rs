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

#[cfg(test)]
mod tests {
    #[test]
    fn joules_per_token() {
        assert_eq!(super::joules_per_output_token(Some(500.0), 1000), Some(0.5));
        assert_eq!(super::joules_per_output_token(Some(500.0), 0), None);
        assert_eq!(super::joules_per_output_token(None, 10), None);
    }
}
