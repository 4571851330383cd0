//! How often and how a candidate fails: by error class and group, with Wilson intervals, and
//! answers cut short at max_tokens.
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::TRUNCATED;
use crate::run::{ErrorClass, RequestRecord};
use crate::stats::{Interval, wilson};

/// A count out of a total, as a rate with its Wilson interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    /// `failure_rate`, an error class (`first_token_timeout`), a group (`timeout`) or `truncated`.
    pub key: String,
    pub label: String,
    pub count: u64,
    pub n: u64,
    pub rate: f64,
    pub interval: Option<Interval>,
}

impl Rate {
    pub(super) fn new(key: impl Into<String>, label: impl Into<String>, count: u64, n: u64, confidence: f64) -> Rate {
        Rate {
            key: key.into(),
            label: label.into(),
            count,
            n,
            rate: if n > 0 { count as f64 / n as f64 } else { 0.0 },
            interval: wilson(count, n, confidence),
        }
    }
}

/// Failures of the final attempts (after retries) of measured requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureSummary {
    /// Requests that ended in an error.
    pub overall: Rate,
    /// Errors plus answers truncated at max_tokens.
    pub with_truncation: Rate,
    /// Every error class seen, and `truncated`, most frequent first.
    pub by_class: Vec<Rate>,
    /// The classes the issue tracker speaks of: timeouts, 429, 5xx, stream cuts, malformed
    /// output, truncation, context length, other client errors, connection failures, other.
    /// Every group is listed, seen or not, so a zero is visible.
    pub by_group: Vec<Rate>,
}

/// The broad group an error class belongs to, with its label.
pub fn failure_group(class: ErrorClass) -> (&'static str, &'static str) {
    use ErrorClass::*;
    match class {
        ConnectTimeout | FirstTokenTimeout | StallTimeout | TotalTimeout => ("timeout", "timeouts"),
        RateLimited => ("rate_limited", "rate-limited (429)"),
        HttpServerError => ("server_error", "server errors (5xx)"),
        StreamCut => ("stream_cut", "stream cuts"),
        MalformedChunk | NonJsonResponse | EmptyOutput => ("malformed", "malformed or empty output"),
        ContextLengthExceeded => ("context_length", "context length exceeded"),
        HttpClientError => ("client_error", "other client errors (4xx)"),
        ConnectRefused | Dns | Tls => ("connection", "connection failures"),
        Other => ("other", "other"),
    }
}

pub(super) const GROUPS: [(&str, &str); 10] = [
    ("timeout", "timeouts"),
    ("rate_limited", "rate-limited (429)"),
    ("server_error", "server errors (5xx)"),
    ("stream_cut", "stream cuts"),
    ("malformed", "malformed or empty output"),
    (TRUNCATED, "truncated at max_tokens"),
    ("context_length", "context length exceeded"),
    ("client_error", "other client errors (4xx)"),
    ("connection", "connection failures"),
    ("other", "other"),
];

fn truncated(r: &RequestRecord) -> bool {
    r.succeeded() && r.finish_reason.as_deref() == Some("length")
}

/// Failure rates over `finals` (one record per measured request).
pub fn failure_summary(finals: &[&RequestRecord], confidence: f64) -> FailureSummary {
    let n = finals.len() as u64;
    let failed = finals.iter().filter(|r| !r.succeeded()).count() as u64;
    let cut_short = finals.iter().filter(|r| truncated(r)).count() as u64;
    let mut classes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut groups: HashMap<&'static str, u64> = HashMap::new();
    for r in finals {
        if let Some(c) = r.error_class {
            *classes.entry(c.as_str()).or_default() += 1;
            *groups.entry(failure_group(c).0).or_default() += 1;
        }
    }
    if cut_short > 0 {
        classes.insert(TRUNCATED, cut_short);
    }
    groups.insert(TRUNCATED, cut_short);
    let mut by_class: Vec<Rate> = classes
        .into_iter()
        .map(|(key, count)| Rate::new(key, key.replace('_', " "), count, n, confidence))
        .collect();
    by_class.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    FailureSummary {
        overall: Rate::new("failure_rate", "failed requests", failed, n, confidence),
        with_truncation: Rate::new(
            "failure_rate_with_truncation",
            "failed or truncated",
            failed + cut_short,
            n,
            confidence,
        ),
        by_class,
        by_group: GROUPS
            .iter()
            .map(|(key, label)| Rate::new(*key, *label, groups.get(key).copied().unwrap_or(0), n, confidence))
            .collect(),
    }
}
