//! Threshold profiles: the team's minimum acceptable values, one rule per metric.
//!
//! A rule names its metric with a key from the [catalog](CATALOG): a base name, an optional
//! parameter after `:` (a grader name, an error class) and an optional load condition after `@`
//! (`@c=8`), e.g. `aggregate_tok_s@c=8`, `ttft_p95_ms`, `grader_score:json_fields`,
//! `failure_rate:rate_limited`. Without `@c=N` a rule is judged at the run's own concurrency.
//!
//! Proportions (accuracy, failure rates, shares) are stored as fractions and shown as percent.
use serde::{Deserialize, Serialize};

use super::format;
use super::operability::{ChecklistItem, ProbeKind};
use super::run::ErrorClass;
use super::validation::{FieldErrors, MAX_FIELD_CHARS, MAX_NAME_CHARS, optional_text, required_text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparator {
    #[serde(rename = ">=")]
    AtLeast,
    #[serde(rename = "<=")]
    AtMost,
    #[serde(rename = "<")]
    Below,
    #[serde(rename = ">")]
    Above,
}

impl Comparator {
    pub const ALL: [Comparator; 4] = [
        Comparator::AtLeast,
        Comparator::Above,
        Comparator::AtMost,
        Comparator::Below,
    ];

    /// `≥`, `>`, `≤`, `<` as shown on pages.
    pub fn symbol(&self) -> &'static str {
        match self {
            Comparator::AtLeast => "≥",
            Comparator::AtMost => "≤",
            Comparator::Below => "<",
            Comparator::Above => ">",
        }
    }

    /// `>=`, `>`, `<=`, `<`: the form value and the stored JSON value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Comparator::AtLeast => ">=",
            Comparator::AtMost => "<=",
            Comparator::Below => "<",
            Comparator::Above => ">",
        }
    }

    pub fn parse(s: &str) -> Option<Comparator> {
        Comparator::ALL
            .into_iter()
            .find(|c| c.as_str() == s.trim() || c.symbol() == s.trim())
    }

    /// Whether `measured` satisfies `measured <cmp> threshold`.
    pub fn holds(&self, measured: f64, threshold: f64) -> bool {
        match self {
            Comparator::AtLeast => measured >= threshold,
            Comparator::Above => measured > threshold,
            Comparator::AtMost => measured <= threshold,
            Comparator::Below => measured < threshold,
        }
    }

    /// True for `≥` and `>`: a larger value is on the passing side.
    pub fn wants_high(&self) -> bool {
        matches!(self, Comparator::AtLeast | Comparator::Above)
    }
}

/// One rule: `metric comparator value`, with why the team chose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdRule {
    /// Metric key from the catalog, e.g. `aggregate_tok_s`, `accuracy`, `failure_rate`, `ttft_p95_ms`.
    pub metric: String,
    pub comparator: Comparator,
    pub value: f64,
    pub unit: String,
    #[serde(default)]
    pub rationale: String,
}

impl ThresholdRule {
    /// The rule in words, e.g. `accuracy ≥ 95 %`, `TTFT p95 ≤ 1000 ms @c=8`.
    pub fn describe(&self) -> String {
        match MetricKey::parse(&self.metric) {
            Ok(key) => format!(
                "{} {} {}",
                key.label(),
                self.comparator.symbol(),
                key.def().unit.format(self.value)
            ),
            Err(_) => format!(
                "{} {} {} {}",
                self.metric,
                self.comparator.symbol(),
                self.value,
                self.unit
            ),
        }
    }
}

/// A named profile at one version.
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdProfile {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: u32,
    pub rules: Vec<ThresholdRule>,
}

// ---------------------------------------------------------------- the metric catalog

/// The four dimensions a scorecard is organised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dimension {
    Throughput,
    Quality,
    Stability,
    Operability,
}

impl Dimension {
    pub const ALL: [Dimension; 4] = [
        Dimension::Throughput,
        Dimension::Quality,
        Dimension::Stability,
        Dimension::Operability,
    ];
    pub fn as_str(&self) -> &'static str {
        match self {
            Dimension::Throughput => "throughput",
            Dimension::Quality => "quality",
            Dimension::Stability => "stability",
            Dimension::Operability => "operability",
        }
    }
    pub fn title(&self) -> &'static str {
        match self {
            Dimension::Throughput => "Throughput and latency",
            Dimension::Quality => "Quality",
            Dimension::Stability => "Stability",
            Dimension::Operability => "Operability and cost",
        }
    }
}

/// How a metric's value is stored, typed into the form and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Stored as a fraction in [0, 1], typed and shown as percent.
    Percent,
    Ms,
    TokS,
    ReqS,
    /// US dollars.
    Usd,
}

impl Unit {
    /// The unit as shown beside a value.
    pub fn symbol(&self) -> &'static str {
        match self {
            Unit::Percent => "%",
            Unit::Ms => "ms",
            Unit::TokS => "tok/s",
            Unit::ReqS => "req/s",
            Unit::Usd => "USD",
        }
    }
    /// The name stored in `ThresholdRule::unit` (proportions stay fractions, as stored).
    pub fn stored_name(&self) -> &'static str {
        match self {
            Unit::Percent => "fraction",
            other => other.symbol(),
        }
    }
    /// Stored value → the number a person types (95 for 0.95).
    pub fn to_display(&self, stored: f64) -> f64 {
        match self {
            Unit::Percent => stored * 100.0,
            _ => stored,
        }
    }
    /// The number a person typed → stored value.
    pub fn from_display(&self, typed: f64) -> f64 {
        match self {
            Unit::Percent => typed / 100.0,
            _ => typed,
        }
    }
    /// A stored value with its unit: `95 %`, `91.2 %`, `1000 ms`, `512 tok/s`, `$0.42`.
    pub fn format(&self, stored: f64) -> String {
        if !stored.is_finite() {
            return "—".into();
        }
        match self {
            Unit::Percent => format!("{} %", format::at_most_decimals(stored * 100.0, 1)),
            Unit::Usd => format::usd(stored),
            other => format!("{} {}", format::significant_trimmed(stored), other.symbol()),
        }
    }
    /// A difference between two stored values, signed: `+3.5 pp`, `−120 ms`.
    pub fn format_delta(&self, delta: f64) -> String {
        let sign = if delta > 0.0 {
            "+"
        } else if delta < 0.0 {
            "−"
        } else {
            "±"
        };
        let a = delta.abs();
        match self {
            Unit::Percent => format!("{sign}{} pp", format::at_most_decimals(a * 100.0, 1)),
            Unit::Usd => format!("{sign}{}", format::usd(a)),
            other => format!("{sign}{} {}", format::significant_trimmed(a), other.symbol()),
        }
    }
}

/// How the uncertainty of a measured value is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Uncertainty {
    /// A share of independent trials: Wilson score interval.
    Proportion,
    /// A statistic over requests: bootstrap percentile interval.
    Bootstrap,
    /// Counted exactly (money spent): compared as is.
    Exact,
}

/// What a metric's parameter (after `:`) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    None,
    /// A grader name from the eval set, required.
    Grader,
    /// An error class, optional (none = all classes).
    ErrorClass,
    /// An endpoint probe key (`domain::operability::ProbeKind`), required.
    Probe,
    /// A readiness checklist item key (`domain::operability::ChecklistItem`), required.
    ChecklistItem,
}

/// One entry of the catalog: a base metric name and everything needed to show and judge it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    pub base: &'static str,
    pub label: &'static str,
    pub dimension: Dimension,
    pub unit: Unit,
    /// Whether larger values are better (decides "best value" and the default comparator).
    pub higher_is_better: bool,
    pub uncertainty: Uncertainty,
    /// How the figure is computed (its caliber), in words.
    pub caliber: &'static str,
    pub param: Param,
    /// Whether `@c=N` applies (figures measured under a load condition).
    pub per_load: bool,
    /// Some(why) while bakeoff cannot measure this yet: rules on it are "not measured".
    pub not_measured_yet: Option<&'static str>,
}

const fn def(
    base: &'static str,
    label: &'static str,
    dimension: Dimension,
    unit: Unit,
    higher_is_better: bool,
    uncertainty: Uncertainty,
    caliber: &'static str,
) -> MetricDef {
    MetricDef {
        base,
        label,
        dimension,
        unit,
        higher_is_better,
        uncertainty,
        caliber,
        param: Param::None,
        per_load: true,
        not_measured_yet: None,
    }
}

const fn with_param(mut d: MetricDef, param: Param) -> MetricDef {
    d.param = param;
    d
}

const fn whole_run(mut d: MetricDef) -> MetricDef {
    d.per_load = false;
    d
}

const fn pending(mut d: MetricDef, why: &'static str) -> MetricDef {
    d.not_measured_yet = Some(why);
    d
}

use Dimension::{Operability, Quality, Stability, Throughput};
use Uncertainty::{Bootstrap, Exact, Proportion};

const LATENCY_CALIBER_TTFT: &str = "send → first non-empty token (reasoning or content), successful requests";
const LATENCY_CALIBER_TTFA: &str = "send → first non-empty content token, successful requests";
const LATENCY_CALIBER_TPOT: &str = "(E2E − TTFT) / (output tokens − 1), successful requests with ≥ 2 tokens";
const LATENCY_CALIBER_E2E: &str = "send → end of stream, successful requests";
const OPERABILITY_PENDING: &str = "no probe measures it yet";

/// Every metric a rule may name. Percentile variants of latencies are separate entries so the
/// form can offer them in one list.
pub const CATALOG: &[MetricDef] = &[
    // --- throughput and latency
    def(
        "aggregate_tok_s",
        "aggregate tok/s",
        Throughput,
        Unit::TokS,
        true,
        Bootstrap,
        "all output tokens in the measured window / window length",
    ),
    def(
        "request_throughput",
        "request throughput",
        Throughput,
        Unit::ReqS,
        true,
        Bootstrap,
        "completed requests in the measured window / window length",
    ),
    def(
        "decode_tok_s_p50",
        "decode tok/s/stream p50",
        Throughput,
        Unit::TokS,
        true,
        Bootstrap,
        "(output tokens − 1) / (last token − first token), median over successful requests",
    ),
    def(
        "e2e_tok_s_p50",
        "e2e tok/s/stream p50",
        Throughput,
        Unit::TokS,
        true,
        Bootstrap,
        "output tokens / E2E, median over successful requests",
    ),
    def(
        "ttft_p50_ms",
        "TTFT p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttft_p90_ms",
        "TTFT p90",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttft_p95_ms",
        "TTFT p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttft_p99_ms",
        "TTFT p99",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttfa_p50_ms",
        "TTFA p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFA,
    ),
    def(
        "ttfa_p95_ms",
        "TTFA p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFA,
    ),
    def(
        "tpot_p50_ms",
        "TPOT p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TPOT,
    ),
    def(
        "tpot_p95_ms",
        "TPOT p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TPOT,
    ),
    def(
        "e2e_p50_ms",
        "E2E p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    def(
        "e2e_p90_ms",
        "E2E p90",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    def(
        "e2e_p95_ms",
        "E2E p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    def(
        "e2e_p99_ms",
        "E2E p99",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    // --- quality (judged over every case measured, whatever its load)
    whole_run(def(
        "accuracy",
        "accuracy",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "weighted share of graded cases passed; a failed request counts as wrong",
    )),
    whole_run(def(
        "pass_rate",
        "pass rate",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "share of cases whose every grader passed, each case counted once (weights ignored)",
    )),
    whole_run(with_param(
        def(
            "grader_score",
            "mean grader score",
            Quality,
            Unit::Percent,
            true,
            Bootstrap,
            "mean score in [0, 1] of the named grader; a failed request scores 0",
        ),
        Param::Grader,
    )),
    // --- stability
    with_param(
        def(
            "failure_rate",
            "failure rate",
            Stability,
            Unit::Percent,
            false,
            Proportion,
            "failed / measured requests, final attempts (after retries), warm-ups excluded",
        ),
        Param::ErrorClass,
    ),
    def(
        "retry_share",
        "requests needing a retry",
        Stability,
        Unit::Percent,
        false,
        Proportion,
        "share of measured requests whose first attempt failed",
    ),
    def(
        "e2e_cv",
        "E2E spread (CV)",
        Stability,
        Unit::Percent,
        false,
        Bootstrap,
        "standard deviation / mean of E2E latency over successful requests",
    ),
    whole_run(def(
        "soak_tok_s_loss",
        "throughput loss over a soak",
        Stability,
        Unit::Percent,
        false,
        Bootstrap,
        "fall of output tok/s from the first to the last of 10 soak windows, as a share of the first \
         (least-squares trend over the windows, 90 % t-interval of its slope)",
    )),
    // --- operability and cost
    def(
        "rate_limited_share",
        "attempts rate-limited (429)",
        Operability,
        Unit::Percent,
        false,
        Proportion,
        "share of measured attempts answered with HTTP 429",
    ),
    whole_run(def(
        "usage_reported_share",
        "token usage reported",
        Operability,
        Unit::Percent,
        true,
        Proportion,
        "share of successful requests whose server reported token usage",
    )),
    whole_run(def(
        "cost_per_1k_cases",
        "cost per 1,000 cases",
        Operability,
        Unit::Usd,
        false,
        Exact,
        "(input tokens × input price + output tokens × output price) of measured attempts, retries included, per 1,000 requests",
    )),
    whole_run(def(
        "cost_per_correct",
        "cost per correct answer",
        Operability,
        Unit::Usd,
        false,
        Exact,
        "cost of measured attempts / cases answered correctly",
    )),
    whole_run(def(
        "operability_score",
        "operability score",
        Operability,
        Unit::Percent,
        true,
        Exact,
        "mean of the share of endpoint probes passed (latest probe run) and of readiness checklist items done \
         (current answers), from the candidate's Operability page",
    )),
    whole_run(def(
        "probes_passed_share",
        "endpoint probes passed",
        Operability,
        Unit::Percent,
        true,
        Exact,
        "passed / applicable endpoint probes in the candidate's latest probe run",
    )),
    whole_run(def(
        "checklist_share",
        "readiness checklist done",
        Operability,
        Unit::Percent,
        true,
        Exact,
        "items answered yes / items that apply, in the candidate's current checklist",
    )),
    whole_run(with_param(
        def(
            "probe",
            "endpoint probe",
            Operability,
            Unit::Percent,
            true,
            Exact,
            "100 % when the named probe passed in the latest probe run, 0 % when it failed",
        ),
        Param::Probe,
    )),
    whole_run(with_param(
        def(
            "checklist",
            "checklist item",
            Operability,
            Unit::Percent,
            true,
            Exact,
            "100 % when the named readiness item is answered yes, 0 % when no or unanswered",
        ),
        Param::ChecklistItem,
    )),
    pending(
        whole_run(def(
            "cold_start_ms",
            "cold start",
            Operability,
            Unit::Ms,
            false,
            Bootstrap,
            "time from an idle endpoint to its first successful answer",
        )),
        OPERABILITY_PENDING,
    ),
];

/// The catalog entry named `base`.
pub fn metric_def(base: &str) -> Option<&'static MetricDef> {
    CATALOG.iter().find(|d| d.base == base)
}

/// A parsed metric key: catalog entry, parameter and load condition.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricKey {
    pub base: &'static str,
    /// Grader name, or error class string.
    pub param: Option<String>,
    /// `@c=N`: the concurrency the figure must be measured at.
    pub concurrency: Option<u32>,
}

impl MetricKey {
    /// Parses `base[:param][@c=N]`; the error says what is wrong in words.
    pub fn parse(key: &str) -> Result<MetricKey, String> {
        let key = key.trim();
        let (rest, load) = match key.split_once('@') {
            Some((rest, load)) => (rest, Some(load)),
            None => (key, None),
        };
        let (base, param) = match rest.split_once(':') {
            Some((b, p)) => (b, Some(p.trim().to_string()).filter(|p| !p.is_empty())),
            None => (rest, None),
        };
        let def = metric_def(base.trim()).ok_or_else(|| format!("{base:?} is not a metric in the catalog"))?;
        match (def.param, &param) {
            (Param::None, Some(p)) => return Err(format!("{} takes no parameter (got {p:?})", def.label)),
            (Param::Grader, None) => return Err(format!("{} needs a grader name", def.label)),
            (Param::Grader, Some(p)) if p.chars().count() > MAX_NAME_CHARS => {
                return Err("the grader name is too long".to_string());
            }
            (Param::ErrorClass, Some(p)) if ErrorClass::parse(p).is_none() => {
                return Err(format!("{p:?} is not an error class"));
            }
            (Param::Probe, None) => return Err(format!("{} needs a probe name", def.label)),
            (Param::Probe, Some(p)) if ProbeKind::parse(p).is_none() => {
                return Err(format!("{p:?} is not an endpoint probe"));
            }
            (Param::ChecklistItem, None) => return Err(format!("{} needs a checklist item", def.label)),
            (Param::ChecklistItem, Some(p)) if ChecklistItem::parse(p).is_none() => {
                return Err(format!("{p:?} is not a checklist item"));
            }
            _ => {}
        }
        let concurrency = match load {
            None => None,
            Some(_) if !def.per_load => {
                return Err(format!(
                    "{} is judged over the whole run; it takes no load condition",
                    def.label
                ));
            }
            Some(load) => {
                let n = load
                    .trim()
                    .strip_prefix("c=")
                    .and_then(|n| n.trim().parse::<u32>().ok())
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| format!("load condition {load:?} must read c=N with N from 1 to 1024"))?;
                Some(n)
            }
        };
        Ok(MetricKey {
            base: def.base,
            param,
            concurrency,
        })
    }

    pub fn def(&self) -> &'static MetricDef {
        // `parse` only builds keys from catalog entries.
        metric_def(self.base).expect("a parsed metric key names a catalog entry")
    }

    /// The key as stored: `base[:param][@c=N]`.
    pub fn to_key(&self) -> String {
        let mut s = self.base.to_string();
        if let Some(p) = &self.param {
            s.push(':');
            s.push_str(p);
        }
        if let Some(c) = self.concurrency {
            s.push_str(&format!("@c={c}"));
        }
        s
    }

    /// Label with parameter and load: `failure rate (rate_limited)`, `TTFT p95 @c=8`.
    pub fn label(&self) -> String {
        let d = self.def();
        let mut s = d.label.to_string();
        if let Some(p) = &self.param {
            s.push_str(&format!(" ({p})"));
        }
        if let Some(c) = self.concurrency {
            s.push_str(&format!(" @c={c}"));
        }
        s
    }

    pub fn error_class(&self) -> Option<ErrorClass> {
        match self.def().param {
            Param::ErrorClass => self.param.as_deref().and_then(ErrorClass::parse),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------- templates and defaults

/// A starting point for a common workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileTemplate {
    pub key: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub rules: Vec<ThresholdRule>,
}

fn rule(metric: &str, comparator: Comparator, value: f64, rationale: &str) -> ThresholdRule {
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

// ---------------------------------------------------------------- the profile form

/// How many empty rule rows the form offers for new rules.
pub const BLANK_RULE_ROWS: usize = 3;
/// Most rules one profile may hold.
pub const MAX_RULES: usize = 50;

/// One rule row as typed. `value` is in the unit shown (percent for proportions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleDraft {
    pub metric: String,
    /// Grader name or error class.
    pub param: String,
    /// Load condition: a concurrency, or blank for the run's own.
    pub concurrency: String,
    pub comparator: String,
    pub value: String,
    pub rationale: String,
}

impl RuleDraft {
    pub fn is_blank(&self) -> bool {
        self.metric.trim().is_empty()
            && self.param.trim().is_empty()
            && self.concurrency.trim().is_empty()
            && self.value.trim().is_empty()
            && self.rationale.trim().is_empty()
    }

    /// The row pre-filled from a stored rule.
    pub fn from_rule(rule: &ThresholdRule) -> RuleDraft {
        match MetricKey::parse(&rule.metric) {
            Ok(key) => RuleDraft {
                metric: key.base.to_string(),
                param: key.param.clone().unwrap_or_default(),
                concurrency: key.concurrency.map(|c| c.to_string()).unwrap_or_default(),
                comparator: rule.comparator.as_str().to_string(),
                value: format::at_most_decimals(key.def().unit.to_display(rule.value), 6),
                rationale: rule.rationale.clone(),
            },
            Err(_) => RuleDraft {
                metric: rule.metric.clone(),
                comparator: rule.comparator.as_str().to_string(),
                value: rule.value.to_string(),
                rationale: rule.rationale.clone(),
                ..Default::default()
            },
        }
    }
}

/// The profile form as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileDraft {
    pub name: String,
    pub description: String,
    /// Who is saving ("your name").
    pub changed_by: String,
    /// Why this change.
    pub change_rationale: String,
    pub rules: Vec<RuleDraft>,
}

/// A validated profile save.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileSave {
    pub name: String,
    pub description: String,
    pub changed_by: String,
    pub change_rationale: String,
    pub rules: Vec<ThresholdRule>,
}

/// The field name of rule row `i`'s `part`, as the form and its errors use it.
pub fn rule_field(i: usize, part: &str) -> String {
    format!("rule{i}_{part}")
}

impl ProfileDraft {
    pub fn from_profile(p: &ThresholdProfile) -> ProfileDraft {
        ProfileDraft {
            name: p.name.clone(),
            description: p.description.clone(),
            changed_by: String::new(),
            change_rationale: String::new(),
            rules: p.rules.iter().map(RuleDraft::from_rule).collect(),
        }
    }

    /// Validates every field and rule row, collecting all problems. Blank rows are skipped; a
    /// row with metric "" but other text is an error (nothing typed is silently dropped).
    pub fn validate(&self) -> Result<ProfileSave, FieldErrors> {
        let mut e = FieldErrors::default();
        let name = super::validation::name(&mut e, "name", &self.name);
        let description = optional_text(&mut e, "description", &self.description, MAX_FIELD_CHARS);
        let changed_by = super::validation::name(&mut e, "changed_by", &self.changed_by);
        let change_rationale = required_text(&mut e, "change_rationale", &self.change_rationale, MAX_FIELD_CHARS);
        let mut rules: Vec<ThresholdRule> = Vec::new();
        for (i, row) in self.rules.iter().enumerate() {
            if row.is_blank() {
                continue;
            }
            if let Some(rule) = validate_rule(&mut e, i, row) {
                if rules.iter().any(|r| r.metric == rule.metric) {
                    e.add(
                        rule_field(i, "metric"),
                        "repeats a metric already in this profile (one rule per metric and condition)",
                    );
                } else {
                    rules.push(rule);
                }
            }
        }
        if rules.is_empty() && e.is_empty() {
            e.add("rules", "a profile needs at least one rule");
        }
        if rules.len() > MAX_RULES {
            e.add("rules", format!("a profile holds at most {MAX_RULES} rules"));
        }
        e.into_result(ProfileSave {
            name: name.unwrap_or_default(),
            description: description.unwrap_or_default(),
            changed_by: changed_by.unwrap_or_default(),
            change_rationale: change_rationale.unwrap_or_default(),
            rules,
        })
    }
}

fn validate_rule(e: &mut FieldErrors, i: usize, row: &RuleDraft) -> Option<ThresholdRule> {
    let before = e.0.len();
    let Some(def) = metric_def(row.metric.trim()) else {
        let message = if row.metric.trim().is_empty() {
            "choose a metric (or clear the row)".to_string()
        } else {
            format!("{:?} is not a metric in the catalog", row.metric.trim())
        };
        e.add(rule_field(i, "metric"), message);
        return None;
    };
    let mut key = def.base.to_string();
    let param = row.param.trim();
    match def.param {
        Param::None if !param.is_empty() => e.add(rule_field(i, "param"), format!("{} takes no parameter", def.label)),
        Param::Grader if param.is_empty() => {
            e.add(rule_field(i, "param"), "name the grader, e.g. exact or json_fields")
        }
        Param::ErrorClass if !param.is_empty() && ErrorClass::parse(param).is_none() => e.add(
            rule_field(i, "param"),
            format!("{param:?} is not an error class (e.g. http_5xx, rate_limited, stream_cut)"),
        ),
        Param::Probe if ProbeKind::parse(param).is_none() => e.add(
            rule_field(i, "param"),
            format!(
                "name a probe: {}",
                ProbeKind::ALL.iter().map(|k| k.key()).collect::<Vec<_>>().join(", ")
            ),
        ),
        Param::ChecklistItem if ChecklistItem::parse(param).is_none() => e.add(
            rule_field(i, "param"),
            format!(
                "name a checklist item: {}",
                ChecklistItem::ALL
                    .iter()
                    .map(|k| k.key())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        _ if !param.is_empty() => key.push_str(&format!(":{param}")),
        _ => {}
    }
    let concurrency = row.concurrency.trim();
    if !concurrency.is_empty() {
        match concurrency.parse::<u32>() {
            _ if !def.per_load => e.add(
                rule_field(i, "concurrency"),
                format!("{} is judged over the whole run; leave the load blank", def.label),
            ),
            Ok(n) if (1..=1024).contains(&n) => key.push_str(&format!("@c={n}")),
            _ => e.add(rule_field(i, "concurrency"), "must be a whole number from 1 to 1024"),
        }
    }
    let comparator = Comparator::parse(&row.comparator);
    if comparator.is_none() {
        e.add(rule_field(i, "comparator"), "choose one of ≥, >, ≤, <");
    }
    let value = match row.value.trim() {
        "" => {
            e.add(rule_field(i, "value"), "is required");
            None
        }
        raw => match raw.replace(['%', ',', '$'], "").trim().parse::<f64>() {
            Ok(v) if !v.is_finite() || v < 0.0 => {
                e.add(rule_field(i, "value"), "must be a number of at least 0");
                None
            }
            Ok(v) if def.unit == Unit::Percent && v > 100.0 => {
                e.add(rule_field(i, "value"), "is a percentage: at most 100");
                None
            }
            Ok(v) => Some(def.unit.from_display(v)),
            Err(_) => {
                e.add(
                    rule_field(i, "value"),
                    format!("must be a number, got {:?}", super::validation::truncate(raw, 40)),
                );
                None
            }
        },
    };
    let rationale = optional_text(e, &rule_field(i, "rationale"), &row.rationale, MAX_FIELD_CHARS);
    if e.0.len() > before {
        return None;
    }
    Some(ThresholdRule {
        metric: key,
        comparator: comparator?,
        value: value?,
        unit: def.unit.stored_name().to_string(),
        rationale: rationale.unwrap_or_default(),
    })
}

// ---------------------------------------------------------------- history diffs

/// How one rule changed between two versions.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleChange {
    Added(ThresholdRule),
    Removed(ThresholdRule),
    Changed { old: ThresholdRule, new: ThresholdRule },
}

impl RuleChange {
    /// One line in words: `accuracy ≥ 95 % → ≥ 97 %`, `added TTFT p95 ≤ 1000 ms`.
    pub fn describe(&self) -> String {
        match self {
            RuleChange::Added(r) => format!("added {}", r.describe()),
            RuleChange::Removed(r) => format!("removed {}", r.describe()),
            RuleChange::Changed { old, new } => {
                let (o, n) = (old.describe(), new.describe());
                if o == n {
                    format!("{o}: rationale changed")
                } else {
                    format!("{o} → {n}")
                }
            }
        }
    }
    pub fn kind(&self) -> &'static str {
        match self {
            RuleChange::Added(_) => "added",
            RuleChange::Removed(_) => "removed",
            RuleChange::Changed { .. } => "changed",
        }
    }
}

/// Rule-by-rule differences from `old` to `new`, matched by metric key, in `new`'s order
/// followed by removals.
pub fn diff_rules(old: &[ThresholdRule], new: &[ThresholdRule]) -> Vec<RuleChange> {
    let mut changes = Vec::new();
    for n in new {
        match old.iter().find(|o| o.metric == n.metric) {
            None => changes.push(RuleChange::Added(n.clone())),
            Some(o) if o != n => changes.push(RuleChange::Changed {
                old: o.clone(),
                new: n.clone(),
            }),
            Some(_) => {}
        }
    }
    for o in old {
        if !new.iter().any(|n| n.metric == o.metric) {
            changes.push(RuleChange::Removed(o.clone()));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(metric: &str, cmp: &str, value: &str) -> RuleDraft {
        RuleDraft {
            metric: metric.into(),
            comparator: cmp.into(),
            value: value.into(),
            ..Default::default()
        }
    }

    #[test]
    fn metric_keys_parse_with_params_and_loads() {
        let k = MetricKey::parse("ttft_p95_ms@c=8").unwrap();
        assert_eq!((k.base, k.concurrency), ("ttft_p95_ms", Some(8)));
        assert_eq!(k.label(), "TTFT p95 @c=8");
        assert_eq!(k.to_key(), "ttft_p95_ms@c=8");
        let k = MetricKey::parse("failure_rate:rate_limited").unwrap();
        assert_eq!(k.error_class(), Some(ErrorClass::RateLimited));
        assert_eq!(k.label(), "failure rate (rate_limited)");
        assert!(MetricKey::parse("grader_score").unwrap_err().contains("grader name"));
        assert!(MetricKey::parse("accuracy@c=4").unwrap_err().contains("whole run"));
        assert!(
            MetricKey::parse("failure_rate:teapot")
                .unwrap_err()
                .contains("not an error class")
        );
        assert!(MetricKey::parse("tok_s").unwrap_err().contains("not a metric"));
        assert!(MetricKey::parse("aggregate_tok_s@c=0").is_err());
        assert!(
            MetricKey::parse("probe:teleport")
                .unwrap_err()
                .contains("not an endpoint probe")
        );
        assert!(
            MetricKey::parse("checklist")
                .unwrap_err()
                .contains("needs a checklist item")
        );
        assert_eq!(
            MetricKey::parse("probe:usage_in_stream").unwrap().label(),
            "endpoint probe (usage_in_stream)"
        );
        for d in CATALOG {
            let key = match d.param {
                Param::Grader => format!("{}:exact", d.base),
                Param::Probe => format!("{}:usage_in_stream", d.base),
                Param::ChecklistItem => format!("{}:monitoring", d.base),
                _ => d.base.to_string(),
            };
            assert!(MetricKey::parse(&key).is_ok(), "{key}");
        }
    }

    #[test]
    fn comparators_hold_at_the_boundary_as_written() {
        assert!(Comparator::AtLeast.holds(0.95, 0.95));
        assert!(!Comparator::Above.holds(0.95, 0.95));
        assert!(Comparator::AtMost.holds(1000.0, 1000.0));
        assert!(!Comparator::Below.holds(0.02, 0.02));
        assert_eq!(Comparator::parse("≥"), Some(Comparator::AtLeast));
        assert_eq!(Comparator::parse("<"), Some(Comparator::Below));
    }

    #[test]
    fn units_format_values_and_deltas() {
        assert_eq!(Unit::Percent.format(0.912), "91.2 %");
        assert_eq!(Unit::Percent.format(0.95), "95 %");
        assert_eq!(Unit::Ms.format(1000.0), "1000 ms");
        assert_eq!(Unit::TokS.format(41.23), "41.2 tok/s");
        assert_eq!(Unit::TokS.format(20.0), "20 tok/s");
        assert_eq!(Unit::Usd.format(12.3), "$12.30");
        assert_eq!(Unit::Usd.format(0.004213), "$0.00421");
        assert_eq!(Unit::Percent.format_delta(-0.035), "−3.5 pp");
        assert_eq!(Unit::Ms.format_delta(120.0), "+120 ms");
        assert_eq!(
            batch_default_rules()
                .iter()
                .map(ThresholdRule::describe)
                .collect::<Vec<_>>(),
            ["aggregate tok/s ≥ 500 tok/s", "accuracy ≥ 95 %", "failure rate < 2 %"]
        );
    }

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

    #[test]
    fn a_valid_draft_converts_percent_and_builds_keys() {
        let draft = ProfileDraft {
            name: " Batch ".into(),
            description: "".into(),
            changed_by: "ana".into(),
            change_rationale: "first cut".into(),
            rules: vec![
                row("accuracy", ">=", "95"),
                RuleDraft {
                    concurrency: "8".into(),
                    rationale: "users wait".into(),
                    ..row("ttft_p95_ms", "<=", "1000")
                },
                RuleDraft {
                    param: "http_5xx".into(),
                    ..row("failure_rate", "<", "1.5 %")
                },
                RuleDraft::default(),
            ],
        };
        let save = draft.validate().unwrap();
        assert_eq!(save.name, "Batch");
        let keys: Vec<&str> = save.rules.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(keys, ["accuracy", "ttft_p95_ms@c=8", "failure_rate:http_5xx"]);
        assert!((save.rules[0].value - 0.95).abs() < 1e-12);
        assert_eq!(save.rules[0].unit, "fraction");
        assert!((save.rules[2].value - 0.015).abs() < 1e-12);
        assert_eq!(save.rules[1].rationale, "users wait");
        // Round trip through the form.
        let back = RuleDraft::from_rule(&save.rules[1]);
        assert_eq!(
            (back.metric.as_str(), back.concurrency.as_str(), back.value.as_str()),
            ("ttft_p95_ms", "8", "1000")
        );
        assert_eq!(RuleDraft::from_rule(&save.rules[0]).value, "95");
    }

    #[test]
    fn every_bad_field_is_reported_by_row() {
        let draft = ProfileDraft {
            name: "".into(),
            changed_by: "".into(),
            change_rationale: "".into(),
            rules: vec![
                row("accuracy", ">=", "120"),
                row("teapot", ">=", "1"),
                row("grader_score", "=", "abc"),
                RuleDraft {
                    concurrency: "4".into(),
                    ..row("pass_rate", ">=", "90")
                },
                row("accuracy", ">=", "90"),
                RuleDraft {
                    rationale: "forgot the metric".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let e = draft.validate().unwrap_err();
        for field in [
            "name",
            "changed_by",
            "change_rationale",
            "rule0_value",
            "rule1_metric",
            "rule2_param",
            "rule2_comparator",
            "rule2_value",
            "rule3_concurrency",
            "rule5_metric",
        ] {
            assert!(e.get(field).is_some(), "no error for {field}: {e}");
        }
        // Row 4 repeats accuracy only if row 0 was valid; row 0 was not, so no duplicate error.
        assert!(e.get("rule4_metric").is_none(), "{e}");
        let dup = ProfileDraft {
            name: "x".into(),
            changed_by: "a".into(),
            change_rationale: "b".into(),
            rules: vec![row("accuracy", ">=", "90"), row("accuracy", ">=", "95")],
            ..Default::default()
        };
        assert!(
            dup.validate()
                .unwrap_err()
                .get("rule1_metric")
                .unwrap()
                .contains("repeats")
        );
        let empty = ProfileDraft {
            name: "x".into(),
            changed_by: "a".into(),
            change_rationale: "b".into(),
            ..Default::default()
        };
        assert!(empty.validate().unwrap_err().get("rules").is_some());
    }

    #[test]
    fn diffs_match_rules_by_metric() {
        let old = batch_default_rules();
        let mut new = old.clone();
        new[1].value = 0.97;
        new.remove(2);
        new.push(rule("ttft_p95_ms", Comparator::AtMost, 800.0, "dashboards"));
        let d = diff_rules(&old, &new);
        let lines: Vec<String> = d.iter().map(RuleChange::describe).collect();
        assert_eq!(
            lines,
            [
                "accuracy ≥ 95 % → accuracy ≥ 97 %",
                "added TTFT p95 ≤ 800 ms",
                "removed failure rate < 2 %"
            ]
        );
        assert!(diff_rules(&old, &old).is_empty());
    }
}
