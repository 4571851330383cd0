//! The grader an imported set's expected values call for. A format without graders of its own
//! (OpenAI evals, CSV) used to get `exact` whatever its data: JSON answers then failed on a space
//! after a colon. The importer now proposes one from the expected values — JSON objects →
//! `json-fields`, numbers → `numeric`, a small set of labels → `label`, else normalised `exact`
//! — says why, and the user may choose another before saving.
use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A grader the user can pick on import; `Proposed` lets the data decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraderChoice {
    #[default]
    Proposed,
    JsonFields,
    Numeric,
    Label,
    Exact,
}

impl GraderChoice {
    pub const ALL: [GraderChoice; 5] = [
        GraderChoice::Proposed,
        GraderChoice::JsonFields,
        GraderChoice::Numeric,
        GraderChoice::Label,
        GraderChoice::Exact,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            GraderChoice::Proposed => "proposed",
            GraderChoice::JsonFields => "json-fields",
            GraderChoice::Numeric => "numeric",
            GraderChoice::Label => "label",
            GraderChoice::Exact => "exact",
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            GraderChoice::Proposed => "Proposed from the expected values",
            GraderChoice::JsonFields => "json-fields: JSON object compared field by field",
            GraderChoice::Numeric => "numeric: the number in the answer, within tolerance",
            GraderChoice::Label => "label: classification among the set's labels",
            GraderChoice::Exact => "exact: the text, whitespace collapsed",
        }
    }
}

impl std::str::FromStr for GraderChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(GraderChoice::Proposed);
        }
        GraderChoice::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown grader {s:?}: use proposed, json-fields, numeric, label or exact"))
    }
}

/// The grader an import uses, and why (shown in the preview and by the CLI).
#[derive(Debug, Clone, PartialEq)]
pub struct GraderDecision {
    /// What the data calls for.
    pub proposed: GraderChoice,
    /// What is used: the proposal, or the user's choice.
    pub chosen: GraderChoice,
    /// `ideal values are JSON objects in 40 of 40 cases → json-fields`.
    pub why: String,
}

/// Most distinct values a set may have for its expected values to be read as labels.
const MAX_LABELS: usize = 20;
/// Longest expected value read as a label (characters).
const MAX_LABEL_CHARS: usize = 40;

/// What one expected value is.
fn as_object(v: &Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(map) => Some(map.clone()),
        Value::String(s) => match serde_json::from_str::<Value>(s.trim()) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        },
        _ => None,
    }
}

fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

fn as_text(v: &Value) -> Option<&str> {
    v.as_str().map(str::trim)
}

/// The grader `expected` (the cases' expected values; cases without one are left out) calls
/// for, with the reason in words. `field` names the expected values as the format does
/// (`ideal`, `expected`).
pub fn propose(field: &str, expected: &[&Value]) -> (GraderChoice, String) {
    let n = expected.len();
    if n == 0 {
        return (
            GraderChoice::Exact,
            format!("no case has an `{field}` value → exact (nothing to compare yet)"),
        );
    }
    let objects = expected.iter().filter(|v| as_object(v).is_some()).count();
    if objects == n {
        return (
            GraderChoice::JsonFields,
            format!(
                "{field} values are JSON objects in {objects} of {n} cases → json-fields (field by field; \
                 whitespace, key order and number formatting do not matter)"
            ),
        );
    }
    let numbers: Vec<f64> = expected.iter().filter_map(|v| as_number(v)).collect();
    if numbers.len() == n {
        let tolerance = if numbers.iter().all(|x| x.fract() == 0.0) {
            "equal as numbers"
        } else {
            "within 0.1 %"
        };
        return (
            GraderChoice::Numeric,
            format!("{field} values are numbers in {n} of {n} cases → numeric ({tolerance}, the answer's last number)"),
        );
    }
    if let Some(labels) = labels_of(expected) {
        let shown: Vec<&str> = labels.iter().take(6).map(String::as_str).collect();
        let more = if labels.len() > shown.len() { ", …" } else { "" };
        return (
            GraderChoice::Label,
            format!(
                "{n} cases share {} distinct {field} values ({}{more}) → label (classification, with a \
                 confusion matrix)",
                labels.len(),
                shown.join(", ")
            ),
        );
    }
    let why = if objects > 0 {
        format!("{field} values are JSON objects in only {objects} of {n} cases → exact (whitespace collapsed)")
    } else {
        format!("{field} values are free text in {n} cases → exact (whitespace collapsed)")
    };
    (GraderChoice::Exact, why)
}

/// The distinct labels when the expected values look like classes: short texts, at least two,
/// at most [`MAX_LABELS`], each used twice on average.
fn labels_of(expected: &[&Value]) -> Option<Vec<String>> {
    let texts: Option<Vec<&str>> = expected.iter().map(|v| as_text(v)).collect();
    let texts = texts?;
    if texts
        .iter()
        .any(|t| t.is_empty() || t.chars().count() > MAX_LABEL_CHARS || t.contains('\n'))
    {
        return None;
    }
    let distinct: BTreeSet<&str> = texts.iter().copied().collect();
    (distinct.len() >= 2 && distinct.len() <= MAX_LABELS && distinct.len() * 2 <= texts.len())
        .then(|| distinct.into_iter().map(str::to_string).collect())
}

/// The header graders for `choice` (never `Proposed`) over `expected`.
pub fn graders_for(choice: GraderChoice, expected: &[&Value]) -> Value {
    match choice {
        GraderChoice::JsonFields => json!([{"kind": "json-fields"}]),
        GraderChoice::Numeric => {
            let whole = expected.iter().filter_map(|v| as_number(v)).all(|x| x.fract() == 0.0);
            if whole {
                json!([{"kind": "numeric"}])
            } else {
                json!([{"kind": "numeric", "rel_tol": 0.001}])
            }
        }
        GraderChoice::Label => match labels_of(expected) {
            Some(labels) => json!([{"kind": "label", "labels": labels}]),
            // Chosen by hand for values that do not look like classes: any label.
            None => json!([{"kind": "label"}]),
        },
        GraderChoice::Exact | GraderChoice::Proposed => json!([{"kind": "exact"}]),
    }
}

/// Expected values as json-fields reads them best: a string holding a JSON object becomes the
/// object (shown and diffed as one).
pub fn as_expected_object(v: &Value) -> Option<Value> {
    match v {
        Value::String(_) => as_object(v).map(Value::Object),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn propose_of(values: &[Value]) -> (GraderChoice, String) {
        let refs: Vec<&Value> = values.iter().collect();
        propose("ideal", &refs)
    }

    #[test]
    fn json_numbers_labels_and_text_get_their_grader() {
        let objects: Vec<Value> = (0..40)
            .map(|i| json!(format!("{{\"name\": \"n{i}\", \"age\": {i}}}")))
            .collect();
        let (choice, why) = propose_of(&objects);
        assert_eq!(choice, GraderChoice::JsonFields);
        assert!(
            why.starts_with("ideal values are JSON objects in 40 of 40 cases → json-fields"),
            "{why}"
        );
        assert_eq!(
            propose_of(&[json!({"a": 1}), json!("{\"b\": 2}")]).0,
            GraderChoice::JsonFields
        );

        let (choice, why) = propose_of(&[json!("42"), json!(" 7 "), json!(3)]);
        assert_eq!(choice, GraderChoice::Numeric);
        assert!(why.contains("equal as numbers"), "{why}");
        let decimals = [json!("3.14"), json!("2")];
        assert!(propose_of(&decimals).1.contains("within 0.1 %"));
        let refs: Vec<&Value> = decimals.iter().collect();
        assert_eq!(graders_for(GraderChoice::Numeric, &refs)[0]["rel_tol"], json!(0.001));

        let labels: Vec<Value> = ["billing", "technical", "billing", "account", "technical", "account"]
            .iter()
            .map(|l| json!(l))
            .collect();
        let (choice, why) = propose_of(&labels);
        assert_eq!(choice, GraderChoice::Label);
        assert!(
            why.contains("3 distinct ideal values (account, billing, technical)"),
            "{why}"
        );
        let refs: Vec<&Value> = labels.iter().collect();
        assert_eq!(
            graders_for(GraderChoice::Label, &refs),
            json!([{"kind": "label", "labels": ["account", "billing", "technical"]}])
        );

        let free = [json!("Paris is the capital."), json!("It rains."), json!("Yes, twice.")];
        assert_eq!(propose_of(&free).0, GraderChoice::Exact);
        // Every value distinct is no set of labels; half JSON is not JSON.
        assert_eq!(propose_of(&[json!("a"), json!("b")]).0, GraderChoice::Exact);
        let (choice, why) = propose_of(&[json!({"a": 1}), json!("plain")]);
        assert_eq!(choice, GraderChoice::Exact);
        assert!(why.contains("only 1 of 2"), "{why}");
        assert_eq!(propose("expected", &[]).0, GraderChoice::Exact);
    }

    #[test]
    fn choices_parse_by_name() {
        assert_eq!("".parse::<GraderChoice>(), Ok(GraderChoice::Proposed));
        assert_eq!("JSON-fields".parse::<GraderChoice>(), Ok(GraderChoice::JsonFields));
        assert!("fuzzy".parse::<GraderChoice>().unwrap_err().contains("json-fields"));
    }
}
