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
        };
        let mut counters = Counters::default();
        counters.requests.insert(("a\"b".to_string(), 200), 3);
        counters.faults.insert(("c".to_string(), "stream_cut"), 1);
        let text = render(&counters, &[gauges("a\"b"), gauges("c")]);
        assert!(text.contains("bakeoff_mock_queue_depth{model=\"a\\\"b\"} 0"), "{text}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(series.starts_with("bakeoff_mock_") && series.ends_with('}'), "{line}");
        }
    }
}
