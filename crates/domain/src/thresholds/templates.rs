//! Starting points: the shipped profiles, the demo's and the article's defaults, and templates
//! for common workloads.
use super::key::MetricKey;
use super::{Comparator, ThresholdRule};

/// A starting point for a common workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileTemplate {
    pub key: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub rules: Vec<ThresholdRule>,
}

pub(super) fn rule(metric: &str, comparator: Comparator, value: f64, rationale: &str) -> ThresholdRule {
    let unit = MetricKey::parse(metric)
        .map(|k| k.def().unit.stored_name().to_string())
        .unwrap_or_default();
    ThresholdRule {
        metric: metric.into(),
        comparator,
        value,
        unit,
        rationale: rationale.into(),
    }
}

/// The article's batch-summarisation example: ≥ 500 tok/s aggregate, ≥ 95 % accuracy, < 2 % failures.
pub fn batch_default_rules() -> Vec<ThresholdRule> {
    vec![
        rule(
            "aggregate_tok_s",
            Comparator::AtLeast,
            500.0,
            "batch jobs must finish overnight",
        ),
        rule("accuracy", Comparator::AtLeast, 0.95, "rework costs more than compute"),
        rule("failure_rate", Comparator::Below, 0.02, "retries must stay rare"),
    ]
}

/// The demo's default: routing support tickets, sized for the shipped 20-case eval set.
///
/// With 20 cases a proportion cannot be shown to be above 95 % or below 2 % (even 20 / 20 has a
/// one-sided 95 % lower bound of 88 %), so these minimums are ones a 20-case run can settle;
/// the rationale of each says what to tighten for a full run.
pub fn demo_default_rules() -> Vec<ThresholdRule> {
    vec![
        rule(
            "accuracy",
            Comparator::AtLeast,
            0.80,
            "a misrouted ticket costs an agent a re-triage; 80 % is the floor a 20-case run can confirm",
        ),
        rule(
            "failure_rate",
            Comparator::Below,
            0.15,
            "failed calls fall back to manual routing; 20 requests can only show failures are rare, tighten to 2 % for a full run",
        ),
        rule(
            "e2e_p95_ms",
            Comparator::AtMost,
            3000.0,
            "agents see the suggested queue while they open the ticket",
        ),
        rule(
            "request_throughput",
            Comparator::AtLeast,
            2.0,
            "peak inflow is about 5,000 tickets an hour (1.4 per second) plus headroom",
        ),
        rule(
            "cost_per_1k_cases",
            Comparator::AtMost,
            1.0,
            "the routing budget is one dollar per thousand tickets",
        ),
    ]
}

/// Profiles created on first start: (name, description, rules). The first is the default.
pub fn shipped_profiles() -> Vec<(&'static str, &'static str, Vec<ThresholdRule>)> {
    vec![
        (
            DEMO_PROFILE_NAME,
            "Routing support tickets to a queue (the shipped demo eval set): accuracy, failures, latency, \
             throughput and cost minimums a 20-case run can settle.",
            demo_default_rules(),
        ),
        (
            ARTICLE_PROFILE_NAME,
            "The article's example minimums for a batch job: ≥ 500 tok/s aggregate, ≥ 95 % accuracy, < 2 % failures.",
            batch_default_rules(),
        ),
        (
            AGENT_PROFILE_NAME,
            "An agent calling tools (the shipped zh-en-tool-calls set): tool-call accuracy, argument F1, \
             malformed calls and abstention errors at the run's load.",
            agent_default_rules(),
        ),
    ]
}

/// The shipped eval set each shipped profile was written for: (eval set, profile).
pub const SHIPPED_PROFILE_SETS: [(&str, &str); 3] = [
    ("support-ticket-triage", DEMO_PROFILE_NAME),
    ("zh-en-tool-calls", AGENT_PROFILE_NAME),
    ("zh-en-summarisation", ARTICLE_PROFILE_NAME),
];

/// Name of the agent tool-calls profile.
pub const AGENT_PROFILE_NAME: &str = "Agent tool calls";

/// Tool-call quality an agent needs (docs/tool-cases.md), judged at the run's load.
fn agent_default_rules() -> Vec<ThresholdRule> {
    use Comparator::{AtLeast, AtMost, Below};
    vec![
        rule(
            "tool_call_accuracy",
            AtLeast,
            0.90,
            "a wrong call is a wrong action taken for the user",
        ),
        rule(
            "tool_argument_f1",
            AtLeast,
            0.95,
            "arguments feed other systems as they are",
        ),
        rule(
            "malformed_call_rate",
            AtMost,
            0.02,
            "a call the agent cannot parse stops the task",
        ),
        rule(
            "abstention_error_rate",
            AtMost,
            0.05,
            "calling when it must not, or not calling when it must, confuses the user",
        ),
        rule("failure_rate", Below, 0.02, "a failed request is a failed step"),
    ]
}

/// Name of the demo's default profile.
pub const DEMO_PROFILE_NAME: &str = "Support-ticket triage (demo default)";
/// Name of the article's batch-summarisation profile.
pub const ARTICLE_PROFILE_NAME: &str = "Batch summarisation (article example)";

/// Templates for common workloads, offered when creating a profile.
pub fn templates() -> Vec<ProfileTemplate> {
    use Comparator::{AtLeast, AtMost, Below};
    vec![
        ProfileTemplate {
            key: "batch-summarisation",
            name: "Batch summarisation",
            description: "Overnight summarisation of a document backlog (the article's example).",
            rules: batch_default_rules(),
        },
        ProfileTemplate {
            key: "structured-extraction",
            name: "Structured extraction",
            description: "Pulling fields into JSON from documents; correctness of every field matters most.",
            rules: vec![
                rule(
                    "accuracy",
                    AtLeast,
                    0.97,
                    "a wrong field flows into downstream systems unnoticed",
                ),
                rule(
                    "failure_rate",
                    Below,
                    0.01,
                    "a failed extraction needs a person to key the document",
                ),
                rule(
                    "e2e_p95_ms",
                    AtMost,
                    10_000.0,
                    "documents are processed within the upload request",
                ),
                rule("cost_per_1k_cases", AtMost, 5.0, "budget per thousand documents"),
            ],
        },
        ProfileTemplate {
            key: "online-chat",
            name: "Online chat",
            description: "An assistant people talk to: first token fast, then a steady reading pace.",
            rules: vec![
                rule("ttft_p95_ms", AtMost, 1_000.0, "people notice a pause over a second"),
                rule(
                    "tpot_p95_ms",
                    AtMost,
                    80.0,
                    "faster than reading speed (about 12 tokens a second)",
                ),
                rule("accuracy", AtLeast, 0.85, "answers must be right most of the time"),
                rule("failure_rate", Below, 0.01, "an error in a chat is a lost user"),
            ],
        },
        ProfileTemplate {
            key: "classification-at-scale",
            name: "Classification at scale",
            description: "Labelling a large stream of short texts: requests per second and cost dominate.",
            rules: vec![
                rule(
                    "request_throughput",
                    AtLeast,
                    20.0,
                    "the stream peaks at 20 items a second",
                ),
                rule("accuracy", AtLeast, 0.90, "labels feed a dashboard reviewed weekly"),
                rule(
                    "failure_rate",
                    Below,
                    0.01,
                    "failures are re-queued, but must stay rare",
                ),
                rule("cost_per_1k_cases", AtMost, 0.50, "millions of items a month"),
            ],
        },
        ProfileTemplate {
            key: "agent-tool-calls",
            name: AGENT_PROFILE_NAME,
            description: "An agent calling tools (the shipped zh-en-tool-calls set): every call right, readable \
                          and made only when it should be, at the agent's concurrency.",
            rules: agent_default_rules(),
        },
        ProfileTemplate {
            key: "replace-the-incumbent",
            name: "Replace the incumbent",
            description: "A challenger to the model in production: its answers not worse than the incumbent's in \
                          people's blind comparisons, and no less reliable. Choose the incumbent on the scorecard, or \
                          name it in each win-rate rule.",
            rules: vec![
                rule(
                    "blind_win_rate",
                    AtLeast,
                    0.40,
                    "not worse than the incumbent at 95 %: within 10 points of an even split in blind comparisons",
                ),
                rule(
                    "failure_rate",
                    Below,
                    0.02,
                    "no more failures than production tolerates",
                ),
            ],
        },
        ProfileTemplate {
            key: "ticket-triage-demo",
            name: DEMO_PROFILE_NAME,
            description: "The demo's default, sized for the shipped 20-case support-ticket set.",
            rules: demo_default_rules(),
        },
    ]
}

pub fn template(key: &str) -> Option<ProfileTemplate> {
    templates().into_iter().find(|t| t.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_rule_and_template_names_a_catalog_metric() {
        for t in templates() {
            for r in &t.rules {
                let k = MetricKey::parse(&r.metric).unwrap_or_else(|e| panic!("{}: {e}", t.key));
                assert_eq!(r.unit, k.def().unit.stored_name(), "{}", r.metric);
                assert!(!r.rationale.is_empty());
            }
        }
        assert_eq!(shipped_profiles()[0].0, DEMO_PROFILE_NAME);
    }
}
