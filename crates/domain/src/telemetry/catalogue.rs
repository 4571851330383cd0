//! The series bakeoff recognises, by engine, and what each means in one unit. Names are the
//! engines' own (vLLM `vllm/v1/metrics/loggers.py` and its v0 names, SGLang
//! `srt/metrics/collector.py`, TGI's `docs/source/reference/metrics.md`, llama.cpp's
//! `tools/server` `/metrics`, NVIDIA dcgm-exporter's `default-counters.csv`); Python's Prometheus
//! client exposes a counter `x` as `x_total`, so counters are listed under that name. Any other
//! series is kept by its own name and shown as written.
use serde::{Deserialize, Serialize};

/// How a signal's samples are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// A value at the time of the scrape (averaged and maximised over a window).
    Gauge,
    /// A running total (its increase over a window, resets handled).
    Counter,
    /// A cumulative histogram (`_bucket{le}`, `_sum`, `_count`).
    Histogram,
}

/// How a signal combines several series of one scrape (several models, engines or GPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    Sum,
    Mean,
    Max,
}

/// What a recognised series measures, in bakeoff's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Requests waiting in the server's queue.
    QueueLength,
    /// Requests the server is generating for.
    RunningRequests,
    /// Share of the KV cache in use, 0–1.
    KvCacheUsage,
    /// Requests preempted (evicted from the KV cache and recomputed), a count.
    Preemptions,
    /// Prefix-cache hits and lookups, in tokens (vLLM v1 counts tokens).
    PrefixCacheHits,
    PrefixCacheQueries,
    /// The server's own prefix-cache hit rate, 0–1 (vLLM v0, SGLang).
    PrefixCacheHitRate,
    /// Speculative decoding: draft tokens proposed and accepted.
    SpecDraftTokens,
    SpecAcceptedTokens,
    /// The server's own time to first token, seconds (a histogram).
    ServerTtft,
    /// Time requests waited in the server's queue, seconds (a histogram).
    ServerQueueTime,
    /// Output and prompt tokens the server processed.
    GenerationTokens,
    PromptTokens,
    /// GPU utilisation, 0–1 (DCGM reports percent).
    GpuUtilisation,
    /// GPU memory in use, bytes (DCGM reports MiB).
    GpuMemoryUsed,
    /// GPU power draw, watts (summed over GPUs).
    GpuPower,
    /// GPU energy since boot, joules (DCGM reports millijoules).
    GpuEnergy,
}

impl Signal {
    pub const ALL: [Signal; 17] = [
        Signal::QueueLength,
        Signal::RunningRequests,
        Signal::KvCacheUsage,
        Signal::Preemptions,
        Signal::PrefixCacheHits,
        Signal::PrefixCacheQueries,
        Signal::PrefixCacheHitRate,
        Signal::SpecDraftTokens,
        Signal::SpecAcceptedTokens,
        Signal::ServerTtft,
        Signal::ServerQueueTime,
        Signal::GenerationTokens,
        Signal::PromptTokens,
        Signal::GpuUtilisation,
        Signal::GpuMemoryUsed,
        Signal::GpuPower,
        Signal::GpuEnergy,
    ];

    pub fn kind(self) -> SignalKind {
        match self {
            Signal::QueueLength
            | Signal::RunningRequests
            | Signal::KvCacheUsage
            | Signal::PrefixCacheHitRate
            | Signal::GpuUtilisation
            | Signal::GpuMemoryUsed
            | Signal::GpuPower => SignalKind::Gauge,
            Signal::ServerTtft | Signal::ServerQueueTime => SignalKind::Histogram,
            _ => SignalKind::Counter,
        }
    }

    pub fn combine(self) -> Combine {
        match self {
            Signal::KvCacheUsage => Combine::Max,
            Signal::PrefixCacheHitRate | Signal::GpuUtilisation => Combine::Mean,
            _ => Combine::Sum,
        }
    }

    /// The label shown on pages, with its unit.
    pub fn label(self) -> &'static str {
        match self {
            Signal::QueueLength => "server queue (requests)",
            Signal::RunningRequests => "running requests",
            Signal::KvCacheUsage => "KV-cache usage (0–1)",
            Signal::Preemptions => "preemptions",
            Signal::PrefixCacheHits => "prefix-cache hits (tokens)",
            Signal::PrefixCacheQueries => "prefix-cache queries (tokens)",
            Signal::PrefixCacheHitRate => "prefix-cache hit rate (0–1)",
            Signal::SpecDraftTokens => "spec-decode draft tokens",
            Signal::SpecAcceptedTokens => "spec-decode accepted tokens",
            Signal::ServerTtft => "server TTFT (s)",
            Signal::ServerQueueTime => "server queue time (s)",
            Signal::GenerationTokens => "server output tokens",
            Signal::PromptTokens => "server prompt tokens",
            Signal::GpuUtilisation => "GPU utilisation (0–1)",
            Signal::GpuMemoryUsed => "GPU memory used (bytes)",
            Signal::GpuPower => "GPU power (W)",
            Signal::GpuEnergy => "GPU energy (J)",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::QueueLength => "queue_length",
            Signal::RunningRequests => "running_requests",
            Signal::KvCacheUsage => "kv_cache_usage",
            Signal::Preemptions => "preemptions",
            Signal::PrefixCacheHits => "prefix_cache_hits",
            Signal::PrefixCacheQueries => "prefix_cache_queries",
            Signal::PrefixCacheHitRate => "prefix_cache_hit_rate",
            Signal::SpecDraftTokens => "spec_draft_tokens",
            Signal::SpecAcceptedTokens => "spec_accepted_tokens",
            Signal::ServerTtft => "server_ttft",
            Signal::ServerQueueTime => "server_queue_time",
            Signal::GenerationTokens => "generation_tokens",
            Signal::PromptTokens => "prompt_tokens",
            Signal::GpuUtilisation => "gpu_utilisation",
            Signal::GpuMemoryUsed => "gpu_memory_used",
            Signal::GpuPower => "gpu_power",
            Signal::GpuEnergy => "gpu_energy",
        }
    }

    /// The engines' series for this signal, in order of preference: a scrape is read through the
    /// first name it carries, so a server (or the mock) exposing two namings is not counted twice.
    pub fn series(self) -> &'static [KnownSeries] {
        let list: &'static [KnownSeries] = match self {
            Signal::QueueLength => {
                const S: &[KnownSeries] = &[
                    known("vllm:num_requests_waiting", Engine::Vllm, 1.0),
                    known("sglang:num_queue_reqs", Engine::Sglang, 1.0),
                    known("tgi_queue_size", Engine::Tgi, 1.0),
                    known("llamacpp:requests_deferred", Engine::LlamaCpp, 1.0),
                ];
                S
            }
            Signal::RunningRequests => {
                const S: &[KnownSeries] = &[
                    known("vllm:num_requests_running", Engine::Vllm, 1.0),
                    known("sglang:num_running_reqs", Engine::Sglang, 1.0),
                    known("tgi_batch_current_size", Engine::Tgi, 1.0),
                    known("llamacpp:requests_processing", Engine::LlamaCpp, 1.0),
                ];
                S
            }
            Signal::KvCacheUsage => {
                const S: &[KnownSeries] = &[
                    known("vllm:kv_cache_usage_perc", Engine::Vllm, 1.0),
                    known("vllm:gpu_cache_usage_perc", Engine::Vllm, 1.0),
                    known("sglang:token_usage", Engine::Sglang, 1.0),
                    known("llamacpp:kv_cache_usage_ratio", Engine::LlamaCpp, 1.0),
                ];
                S
            }
            Signal::Preemptions => {
                const S: &[KnownSeries] = &[known("vllm:num_preemptions_total", Engine::Vllm, 1.0)];
                S
            }
            Signal::PrefixCacheHits => {
                const S: &[KnownSeries] = &[known("vllm:prefix_cache_hits_total", Engine::Vllm, 1.0)];
                S
            }
            Signal::PrefixCacheQueries => {
                const S: &[KnownSeries] = &[known("vllm:prefix_cache_queries_total", Engine::Vllm, 1.0)];
                S
            }
            Signal::PrefixCacheHitRate => {
                const S: &[KnownSeries] = &[
                    known("vllm:gpu_prefix_cache_hit_rate", Engine::Vllm, 1.0),
                    known("sglang:cache_hit_rate", Engine::Sglang, 1.0),
                ];
                S
            }
            Signal::SpecDraftTokens => {
                const S: &[KnownSeries] = &[known("vllm:spec_decode_num_draft_tokens_total", Engine::Vllm, 1.0)];
                S
            }
            Signal::SpecAcceptedTokens => {
                const S: &[KnownSeries] = &[known("vllm:spec_decode_num_accepted_tokens_total", Engine::Vllm, 1.0)];
                S
            }
            Signal::ServerTtft => {
                const S: &[KnownSeries] = &[
                    known("vllm:time_to_first_token_seconds", Engine::Vllm, 1.0),
                    known("sglang:time_to_first_token_seconds", Engine::Sglang, 1.0),
                ];
                S
            }
            Signal::ServerQueueTime => {
                const S: &[KnownSeries] = &[
                    known("vllm:request_queue_time_seconds", Engine::Vllm, 1.0),
                    known("tgi_request_queue_duration", Engine::Tgi, 1.0),
                ];
                S
            }
            Signal::GenerationTokens => {
                const S: &[KnownSeries] = &[
                    known("vllm:generation_tokens_total", Engine::Vllm, 1.0),
                    known("sglang:generation_tokens_total", Engine::Sglang, 1.0),
                    known("llamacpp:tokens_predicted_total", Engine::LlamaCpp, 1.0),
                ];
                S
            }
            Signal::PromptTokens => {
                const S: &[KnownSeries] = &[
                    known("vllm:prompt_tokens_total", Engine::Vllm, 1.0),
                    known("sglang:prompt_tokens_total", Engine::Sglang, 1.0),
                    known("llamacpp:prompt_tokens_total", Engine::LlamaCpp, 1.0),
                ];
                S
            }
            Signal::GpuUtilisation => {
                const S: &[KnownSeries] = &[known("DCGM_FI_DEV_GPU_UTIL", Engine::Dcgm, 0.01)];
                S
            }
            Signal::GpuMemoryUsed => {
                const S: &[KnownSeries] = &[known("DCGM_FI_DEV_FB_USED", Engine::Dcgm, 1_048_576.0)];
                S
            }
            Signal::GpuPower => {
                const S: &[KnownSeries] = &[known("DCGM_FI_DEV_POWER_USAGE", Engine::Dcgm, 1.0)];
                S
            }
            Signal::GpuEnergy => {
                const S: &[KnownSeries] = &[known("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Engine::Dcgm, 0.001)];
                S
            }
        };
        list
    }
}

/// Who publishes a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    Vllm,
    Sglang,
    Tgi,
    LlamaCpp,
    /// NVIDIA's DCGM exporter.
    Dcgm,
}

impl Engine {
    pub fn label(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
            Engine::Tgi => "TGI",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Dcgm => "DCGM exporter",
        }
    }
}

/// One engine's name for a signal, and the factor that turns its value into the signal's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownSeries {
    /// The family name (for a histogram, without `_bucket`/`_sum`/`_count`).
    pub name: &'static str,
    pub engine: Engine,
    pub scale: f64,
}

const fn known(name: &'static str, engine: Engine, scale: f64) -> KnownSeries {
    KnownSeries { name, engine, scale }
}

/// The signal a sample name belongs to (a histogram's `_bucket`, `_sum` and `_count` included).
pub fn recognise(sample_name: &str) -> Option<(Signal, &'static KnownSeries)> {
    let base = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| sample_name.strip_suffix(s))
        .unwrap_or(sample_name);
    Signal::ALL.iter().find_map(|&signal| {
        signal
            .series()
            .iter()
            .find(|k| k.name == sample_name || (signal.kind() == SignalKind::Histogram && k.name == base))
            .map(|k| (signal, k))
    })
}

/// The engines whose series a scrape's sample names show, in catalogue order.
pub fn engines_seen<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Engine> {
    let mut out: Vec<Engine> = Vec::new();
    for name in names {
        if let Some((_, k)) = recognise(name)
            && !out.contains(&k.engine)
        {
            out.push(k.engine);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_naming_is_recognised() {
        let cases = [
            ("vllm:num_requests_waiting", Signal::QueueLength, Engine::Vllm),
            ("sglang:num_queue_reqs", Signal::QueueLength, Engine::Sglang),
            ("tgi_queue_size", Signal::QueueLength, Engine::Tgi),
            ("llamacpp:requests_deferred", Signal::QueueLength, Engine::LlamaCpp),
            (
                "llamacpp:requests_processing",
                Signal::RunningRequests,
                Engine::LlamaCpp,
            ),
            ("vllm:gpu_cache_usage_perc", Signal::KvCacheUsage, Engine::Vllm),
            ("vllm:num_preemptions_total", Signal::Preemptions, Engine::Vllm),
            ("vllm:prefix_cache_hits_total", Signal::PrefixCacheHits, Engine::Vllm),
            (
                "vllm:time_to_first_token_seconds_bucket",
                Signal::ServerTtft,
                Engine::Vllm,
            ),
            (
                "sglang:time_to_first_token_seconds_sum",
                Signal::ServerTtft,
                Engine::Sglang,
            ),
            ("tgi_request_queue_duration_count", Signal::ServerQueueTime, Engine::Tgi),
            ("DCGM_FI_DEV_POWER_USAGE", Signal::GpuPower, Engine::Dcgm),
        ];
        for (name, signal, engine) in cases {
            let (s, k) = recognise(name).unwrap_or_else(|| panic!("{name} not recognised"));
            assert_eq!((s, k.engine), (signal, engine), "{name}");
        }
        // A counter's `_bucket` is not a histogram of it; unknown names are kept by name only.
        assert!(recognise("vllm:num_preemptions_total_bucket").is_none());
        assert!(recognise("process_cpu_seconds_total").is_none());
    }

    #[test]
    fn units_are_converted() {
        let (_, util) = recognise("DCGM_FI_DEV_GPU_UTIL").unwrap();
        assert_eq!(85.0 * util.scale, 0.85);
        let (_, energy) = recognise("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").unwrap();
        assert_eq!(5000.0 * energy.scale, 5.0);
    }

    #[test]
    fn engines_are_told_from_names() {
        let seen = engines_seen(["llamacpp:tokens_predicted_total", "DCGM_FI_DEV_GPU_UTIL", "other"]);
        assert_eq!(seen, vec![Engine::LlamaCpp, Engine::Dcgm]);
    }
}
