//! Pure logic: no I/O, no HTTP, no SQL. Everything here is testable with plain values.
pub mod accounts;
pub mod admission;
pub mod audit;
pub mod calibers;
pub mod candidate;
pub mod capacity;
pub mod case_index;
pub mod chunks;
pub mod compare;
pub mod conversation;
pub mod cost;
pub mod credentials;
pub mod decide;
pub mod estimate;
pub mod evalset;
pub mod format;
pub mod grading;
pub mod histogram;
pub mod load;
pub mod metrics;
pub mod neutralize;
pub mod notify;
pub mod oidc;
pub mod operability;
pub mod paired;
pub mod palette;
pub mod pipeline;
pub mod presets;
pub mod prompt_cache;
pub mod rate_limit;
pub mod reasoning;
pub mod redact;
pub mod regression;
pub mod retirement;
pub mod retry;
pub mod review;
pub mod run;
pub mod schedule;
pub mod scorecard;
pub mod sealed;
pub mod self_check;
pub mod stability;
pub mod stats;
pub mod telemetry;
pub mod thresholds;
pub mod timeline;
pub mod tool_calls;
pub mod validation;
pub mod workers;
pub mod workload;

/// Wall-clock instant as milliseconds since the Unix epoch (UTC); what the store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn now() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(now.as_millis() as i64)
    }

    /// `2026-11-30 08:48 UTC`: the form every page shows.
    pub fn display(&self) -> String {
        let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
        time::OffsetDateTime::from_unix_timestamp_nanos(self.0 as i128 * 1_000_000)
            .ok()
            .and_then(|t| t.format(&format).ok())
            .unwrap_or_else(|| "—".to_string())
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

/// bakeoff's own version, recorded in every run's provenance.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
