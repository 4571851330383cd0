//! `GET /metrics`: Prometheus text exposition of the mock's counters and gauges.
use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::server::MockState;

/// The exposition text (format 0.0.4).
pub(crate) fn render(state: &MockState) -> String {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    let mut out = String::with_capacity(2048);
    family(&mut out, "bakeoff_mock_info", "gauge", "The mock server's version.");
    let _ = writeln!(out, "bakeoff_mock_info{{version=\"{}\"}} 1", escape(crate::VERSION));

    let counters = state.counters.lock().unwrap_or_else(|p| p.into_inner());
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
    drop(counters);

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
        for p in &state.profiles {
            let value = match i {
                0 => p.in_flight.load(Ordering::Relaxed),
                1 => p.queued.load(Ordering::Relaxed),
                2 => p.profile.slots.map_or(0, u64::from),
                3 => p.tokens_generated.load(Ordering::Relaxed),
                _ => p.prompt_tokens.load(Ordering::Relaxed),
            };
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {value}", escape(&p.profile.name));
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
    use crate::{MockConfig, ModelProfile};

    #[test]
    fn every_sample_line_is_well_formed() {
        let state = MockState::new(MockConfig {
            profiles: vec![ModelProfile::named("a\"b"), ModelProfile::named("c")],
            ..MockConfig::default()
        })
        .unwrap();
        let text = render(&state);
        assert!(text.contains("bakeoff_mock_queue_depth{model=\"a\\\"b\"} 0"), "{text}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(series.starts_with("bakeoff_mock_") && series.ends_with('}'), "{line}");
        }
    }
}
