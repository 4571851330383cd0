//! `GET /metrics`: Prometheus text exposition of the mock's counters and gauges. The server
//! keeps the counters and reads the gauges; this module only words them.
use std::collections::BTreeMap;
use std::fmt::Write;

/// Counters reported by `/metrics`, updated once per request.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// (model, HTTP status) → requests finished.
    pub requests: BTreeMap<(String, u16), u64>,
    /// (model, fault kind) → faults injected.
    pub faults: BTreeMap<(String, &'static str), u64>,
}

/// One model profile's gauges at the time of the scrape.
pub(crate) struct ProfileGauges {
    pub model: String,
    pub in_flight: u64,
    pub queued: u64,
    /// Generation slots (0: unlimited).
    pub slots: u64,
    pub tokens_generated: u64,
    pub prompt_tokens: u64,
    /// The simulated engine (`server::simulated`): KV-cache use 0–1, its counters, the
    /// server-side TTFT histogram (cumulative counts for `TTFT_BUCKETS_S` then +Inf, and the sum
    /// in seconds), and the simulated GPU.
    pub kv_usage: f64,
    pub kv_tokens: u64,
    pub preemptions: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub ttft_cumulative: Vec<u64>,
    pub ttft_sum_s: f64,
    pub gpu_utilisation: f64,
    pub gpu_power_watts: f64,
}

/// The exposition text (format 0.0.4).
pub(crate) fn render(counters: &Counters, profiles: &[ProfileGauges]) -> String {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    let mut out = String::with_capacity(2048);
    family(&mut out, "bakeoff_mock_info", "gauge", "The mock server's version.");
    let _ = writeln!(out, "bakeoff_mock_info{{version=\"{}\"}} 1", escape(crate::VERSION));

    family(
        &mut out,
        "bakeoff_mock_requests_total",
        "counter",
        "Completion requests finished, by model and HTTP status.",
    );
    for ((model, status), n) in &counters.requests {
        let _ = writeln!(
            out,
            "bakeoff_mock_requests_total{{model=\"{}\",status=\"{status}\"}} {n}",
            escape(model)
        );
    }
    family(
        &mut out,
        "bakeoff_mock_faults_injected_total",
        "counter",
        "Faults injected by profile settings, by model and kind.",
    );
    for ((model, kind), n) in &counters.faults {
        let _ = writeln!(
            out,
            "bakeoff_mock_faults_injected_total{{model=\"{}\",kind=\"{kind}\"}} {n}",
            escape(model)
        );
    }

    let gauges: [(&str, &str, &str); 5] = [
        (
            "bakeoff_mock_requests_in_flight",
            "gauge",
            "Requests holding a generation slot.",
        ),
        (
            "bakeoff_mock_queue_depth",
            "gauge",
            "Requests waiting for a generation slot.",
        ),
        ("bakeoff_mock_slots", "gauge", "Generation slots (0: unlimited)."),
        (
            "bakeoff_mock_generated_tokens_total",
            "counter",
            "Completion tokens sent, reasoning included.",
        ),
        (
            "bakeoff_mock_prompt_tokens_total",
            "counter",
            "Prompt tokens of admitted requests.",
        ),
    ];
    for (i, (name, kind, help)) in gauges.iter().enumerate() {
        family(&mut out, name, kind, help);
        for p in profiles {
            let value = match i {
                0 => p.in_flight,
                1 => p.queued,
                2 => p.slots,
                3 => p.tokens_generated,
                _ => p.prompt_tokens,
            };
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {value}", escape(&p.model));
        }
    }
    render_engine_names(&mut out, profiles);
    out
}

/// The same ground truth under the names real engines use (vLLM's, then llama.cpp's), so a
/// scraper that knows those engines reads the mock as it would read them.
fn render_engine_names(out: &mut String, profiles: &[ProfileGauges]) {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    type Read = fn(&ProfileGauges) -> f64;
    let vllm: [(&str, &str, &str, Read); 9] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            |p| p.in_flight as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            |p| p.queued as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            |p| p.kv_usage,
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            |p| p.preemptions as f64,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            |p| p.prefix_queries as f64,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            |p| p.prefix_hits as f64,
        ),
        (
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            |p| p.prompt_tokens as f64,
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            |p| p.tokens_generated as f64,
        ),
        ("llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.", |p| {
            p.kv_tokens as f64
        }),
    ];
    for (name, kind, help, read) in vllm {
        family(out, name, kind, help);
        for p in profiles {
            let _ = writeln!(out, "{name}{{model_name=\"{}\"}} {}", escape(&p.model), read(p));
        }
    }
    let name = "vllm:time_to_first_token_seconds";
    family(out, name, "histogram", "Histogram of time to first token in seconds.");
    for p in profiles {
        let model = escape(&p.model);
        for (i, count) in p.ttft_cumulative.iter().enumerate() {
            let le = crate::server::simulated::TTFT_BUCKETS_S
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\",model_name=\"{model}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_sum{{model_name=\"{model}\"}} {}", p.ttft_sum_s);
        let _ = writeln!(
            out,
            "{name}_count{{model_name=\"{model}\"}} {}",
            p.ttft_cumulative.last().copied().unwrap_or(0)
        );
    }
    // llama.cpp's server reports one model, without labels: the sum over profiles.
    let total = |read: Read| profiles.iter().map(read).sum::<f64>();
    let llama: [(&str, &str, &str, Read); 4] = [
        (
            "llamacpp:requests_processing",
            "gauge",
            "Number of requests processing.",
            |p| p.in_flight as f64,
        ),
        (
            "llamacpp:requests_deferred",
            "gauge",
            "Number of requests deferred.",
            |p| p.queued as f64,
        ),
        (
            "llamacpp:prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            |p| p.prompt_tokens as f64,
        ),
        (
            "llamacpp:tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            |p| p.tokens_generated as f64,
        ),
    ];
    for (name, kind, help, read) in llama {
        family(out, name, kind, help);
        let _ = writeln!(out, "{name} {}", total(read));
    }
}

/// The simulated GPU in the DCGM exporter's naming (`/mock/gpu/metrics`): one GPU per profile.
pub(crate) fn render_gpu(profiles: &[ProfileGauges]) -> String {
    let mut out = String::with_capacity(512);
    let _ = writeln!(
        out,
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge"
    );
    for (i, p) in profiles.iter().enumerate() {
        let _ = writeln!(
            out,
            "DCGM_FI_DEV_GPU_UTIL{{gpu=\"{i}\",modelName=\"mock {}\"}} {}",
            escape(&p.model),
            (p.gpu_utilisation * 100.0).round()
        );
    }
    let _ = writeln!(
        out,
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge"
    );
    for (i, p) in profiles.iter().enumerate() {
        let _ = writeln!(
            out,
            "DCGM_FI_DEV_POWER_USAGE{{gpu=\"{i}\",modelName=\"mock {}\"}} {}",
            escape(&p.model),
            p.gpu_power_watts
        );
    }
    out
}

/// Label value escaping: backslash, double quote and newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_line_is_well_formed() {
        let gauges = |model: &str| ProfileGauges {
            model: model.to_string(),
            in_flight: 0,
            queued: 0,
            slots: 0,
            tokens_generated: 0,
            prompt_tokens: 0,
            kv_usage: 0.0,
            kv_tokens: 0,
            preemptions: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            ttft_cumulative: vec![0; 23],
            ttft_sum_s: 0.0,
            gpu_utilisation: 0.0,
            gpu_power_watts: 60.0,
        };
        let mut counters = Counters::default();
        counters.requests.insert(("a\"b".to_string(), 200), 3);
        counters.faults.insert(("c".to_string(), "stream_cut"), 1);
        let text = render(&counters, &[gauges("a\"b"), gauges("c")]);
        assert!(text.contains("bakeoff_mock_queue_depth{model=\"a\\\"b\"} 0"), "{text}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(
                series.starts_with("bakeoff_mock_") || series.starts_with("vllm:") || series.starts_with("llamacpp:"),
                "{line}"
            );
        }
    }
}
