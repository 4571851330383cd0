//! The `json-fields` grader for structured extraction: the JSON object in the output is
//! compared with the expected object field by field, with type-aware normalisation, and the
//! per-field outcomes are kept on the grade so set-level precision / recall / F1 per field
//! can be computed later (`field_report`).
//!
//! Counting: a right field is a true positive; a wrong one is both a false positive and a
//! false negative; a missing one a false negative; an extra one (in the output, not expected)
//! a false positive unless `ignore_extra`. A null, empty string or empty list means "no value"
//! on either side; a field absent from both is not counted at all.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::dates::{iso, parse_date};
use super::numbers::{number_of, same_number};
use super::repair::{ObjectRead, read_object};
use super::spec::{FieldType, GraderSpec, JsonFieldsOptions};
use super::text::{collapse_whitespace, nfkc};
use super::{Grade, quote};
use crate::format;

/// What happened to one field of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Correct,
    Wrong,
    Missing,
    Extra,
}

/// One field's outcome with both values (long values are cut to keep grades small).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldOutcome {
    pub field: String,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got: Option<Value>,
    /// An extra field not counted because of `ignore_extra`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
}

/// The structured detail a `json-fields` grade carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldsDetail {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// Every field right and nothing counted extra.
    pub exact: bool,
    pub fields: Vec<FieldOutcome>,
    /// The answer's JSON could not be read (why): every expected field counted wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unusable: Option<String>,
    /// The answer's JSON was repaired under `lenient` (what was done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired: Option<String>,
}

impl FieldsDetail {
    /// The detail of a `json-fields` grade, if `grade` is one.
    pub fn from_grade(grade: &Grade) -> Option<FieldsDetail> {
        if &*grade.grader != "json-fields" {
            return None;
        }
        serde_json::from_value(*grade.detail.clone()?).ok()
    }
}

/// Longest value (as JSON text) kept in a detail before it is cut.
const MAX_DETAIL_VALUE_CHARS: usize = 200;

fn kept(value: &Value) -> Value {
    let text = value.to_string();
    if text.chars().count() <= MAX_DETAIL_VALUE_CHARS {
        value.clone()
    } else {
        Value::String(crate::validation::truncate(&text, MAX_DETAIL_VALUE_CHARS))
    }
}

pub(super) fn json_fields(spec: &GraderSpec, o: &JsonFieldsOptions, output: &str, expected: Option<&Value>) -> Grade {
    let expected = match expected {
        Some(Value::Object(map)) => map.clone(),
        // A file may give the object as a JSON string.
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(map)) => map,
            _ => return Grade::pass_fail(spec, false, "the case's expected value is not a JSON object"),
        },
        _ => return Grade::pass_fail(spec, false, "the case's expected value is not a JSON object"),
    };
    let (got, read) = match read_object(output, o.lenient) {
        ObjectRead::Found(map, _) => (map, Read::Whole),
        ObjectRead::Repaired(map, what) => (map, Read::Repaired(what)),
        ObjectRead::Unusable(why) => return unusable_answer(spec, &expected, why),
        ObjectRead::Empty => (Map::new(), Read::Empty),
    };
    let mut detail = compare_records(o, &expected, &got);
    let required_failures: Vec<&FieldOutcome> = detail
        .fields
        .iter()
        .filter(|f| o.required.contains(&f.field) && f.outcome != Outcome::Correct && !f.ignored)
        .collect();
    let passed = read != Read::Empty && required_failures.is_empty() && detail.f1 >= o.min_f1 - 1e-9;
    let reason = match &read {
        Read::Whole => reason_for(o, &detail, &required_failures),
        Read::Repaired(what) => format!("{what}; {}", reason_for(o, &detail, &required_failures)),
        Read::Empty => "empty output: every expected field missing".to_string(),
    };
    if let Read::Repaired(what) = read {
        detail.repaired = Some(what);
    }
    let mut grade = Grade::new(spec, detail.f1, passed, reason);
    grade.detail = serde_json::to_value(&detail).ok().map(Box::new);
    grade
}

/// How the output's object was read.
#[derive(Debug, PartialEq)]
enum Read {
    Whole,
    Repaired(String),
    Empty,
}

/// An answer whose JSON cannot be read: the case fails and every expected field counts as
/// wrong (attempted, unusable) — never missing, which would leave precision untouched.
fn unusable_answer(spec: &GraderSpec, expected: &Map<String, Value>, why: String) -> Grade {
    let fields: Vec<FieldOutcome> = expected
        .iter()
        .filter(|(_, v)| !is_empty(v))
        .map(|(name, want)| FieldOutcome {
            field: name.clone(),
            outcome: Outcome::Wrong,
            expected: Some(kept(want)),
            got: None,
            ignored: false,
        })
        .collect();
    let reason = format!(
        "unusable answer: {why}; its {} expected field{} count as wrong",
        fields.len(),
        if fields.len() == 1 { "" } else { "s" }
    );
    let detail = FieldsDetail {
        precision: 0.0,
        recall: 0.0,
        f1: 0.0,
        exact: false,
        fields,
        unusable: Some(why),
        repaired: None,
    };
    let mut grade = Grade::new(spec, 0.0, false, reason);
    grade.detail = serde_json::to_value(&detail).ok().map(Box::new);
    grade
}

fn reason_for(o: &JsonFieldsOptions, d: &FieldsDetail, required_failures: &[&FieldOutcome]) -> String {
    let mut parts = vec![format!(
        "F1 {:.2} (P {:.2}, R {:.2}){}",
        d.f1,
        d.precision,
        d.recall,
        if d.exact { ", exact" } else { "" }
    )];
    if !required_failures.is_empty() {
        let names: Vec<&str> = required_failures.iter().map(|f| f.field.as_str()).collect();
        parts.push(format!("required not right: {}", names.join(", ")));
    }
    let of = |kind: Outcome| d.fields.iter().filter(move |f| f.outcome == kind && !f.ignored);
    let wrong: Vec<String> = of(Outcome::Wrong)
        .map(|f| {
            format!(
                "{} ({} ≠ {})",
                f.field,
                short(f.got.as_ref()),
                short(f.expected.as_ref())
            )
        })
        .collect();
    if !wrong.is_empty() {
        parts.push(format!("wrong: {}", wrong.join(", ")));
    }
    let missing: Vec<&str> = of(Outcome::Missing).map(|f| f.field.as_str()).collect();
    if !missing.is_empty() {
        parts.push(format!("missing: {}", missing.join(", ")));
    }
    let extra: Vec<&str> = of(Outcome::Extra).map(|f| f.field.as_str()).collect();
    if !extra.is_empty() {
        parts.push(format!("extra: {}", extra.join(", ")));
    }
    if d.f1 < o.min_f1 - 1e-9 {
        parts.push(format!("below F1 {:.2}", o.min_f1));
    }
    parts.join("; ")
}

fn short(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => quote(s, 24),
        Some(other) => crate::validation::truncate(&other.to_string(), 24),
        None => "—".to_string(),
    }
}

/// Per-field outcomes and the record's precision / recall / F1.
pub fn compare_records(o: &JsonFieldsOptions, expected: &Map<String, Value>, got: &Map<String, Value>) -> FieldsDetail {
    let names: BTreeSet<&String> = expected.keys().chain(got.keys()).collect();
    let mut fields = Vec::new();
    for name in names {
        let want = expected.get(name).filter(|v| !is_empty(v));
        let have = got.get(name).filter(|v| !is_empty(v));
        let typ = o.types.get(name).copied().unwrap_or_default();
        let outcome = match (want, have) {
            (None, None) => continue,
            (Some(w), Some(h)) => {
                if same_value(typ, w, h, o.day_first) {
                    Outcome::Correct
                } else {
                    Outcome::Wrong
                }
            }
            (Some(_), None) => Outcome::Missing,
            (None, Some(_)) => Outcome::Extra,
        };
        fields.push(FieldOutcome {
            field: name.clone(),
            outcome,
            expected: want.map(kept),
            got: have.map(kept),
            ignored: outcome == Outcome::Extra && o.ignore_extra,
        });
    }
    let count = |kind: Outcome| fields.iter().filter(|f| f.outcome == kind && !f.ignored).count();
    let counts = Counts {
        correct: count(Outcome::Correct) as u64,
        wrong: count(Outcome::Wrong) as u64,
        missing: count(Outcome::Missing) as u64,
        extra: count(Outcome::Extra) as u64,
    };
    let (precision, recall, f1) = counts.prf();
    FieldsDetail {
        precision,
        recall,
        f1,
        exact: counts.wrong + counts.missing + counts.extra == 0,
        fields,
        unusable: None,
        repaired: None,
    }
}

/// Outcome counts for one field or a whole set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub correct: u64,
    pub wrong: u64,
    pub missing: u64,
    pub extra: u64,
}

impl Counts {
    /// Precision, recall, F1. With nothing expected and nothing given all three are 1 (an
    /// empty record extracted as empty is right).
    pub fn prf(&self) -> (f64, f64, f64) {
        let tp = self.correct as f64;
        let predicted = tp + (self.wrong + self.extra) as f64;
        let actual = tp + (self.wrong + self.missing) as f64;
        if predicted == 0.0 && actual == 0.0 {
            return (1.0, 1.0, 1.0);
        }
        let precision = if predicted > 0.0 { tp / predicted } else { 0.0 };
        let recall = if actual > 0.0 { tp / actual } else { 0.0 };
        let f1 = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        (precision, recall, f1)
    }

    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Correct => self.correct += 1,
            Outcome::Wrong => self.wrong += 1,
            Outcome::Missing => self.missing += 1,
            Outcome::Extra => self.extra += 1,
        }
    }
}

/// One field over a whole set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldStats {
    pub field: String,
    pub counts: Counts,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// Set-level extraction quality: per field, all fields pooled (micro), and whole records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldReport {
    pub fields: Vec<FieldStats>,
    pub micro: FieldStats,
    pub records: u64,
    pub exact_records: u64,
    /// Records whose answer had no usable JSON object (fields counted wrong).
    #[serde(default)]
    pub unusable_records: u64,
    /// Records whose JSON was repaired under `lenient`.
    #[serde(default)]
    pub repaired_records: u64,
}

impl FieldReport {
    /// Share of records with every field right and nothing extra.
    pub fn exact_rate(&self) -> Option<f64> {
        (self.records > 0).then(|| self.exact_records as f64 / self.records as f64)
    }
}

/// Pools per-record details into per-field and overall precision / recall / F1.
pub fn field_report<'a>(details: impl IntoIterator<Item = &'a FieldsDetail>) -> FieldReport {
    let mut per_field: BTreeMap<String, Counts> = BTreeMap::new();
    let mut all = Counts::default();
    let (mut records, mut exact_records, mut unusable_records, mut repaired_records) = (0u64, 0u64, 0u64, 0u64);
    for d in details {
        records += 1;
        exact_records += u64::from(d.exact);
        unusable_records += u64::from(d.unusable.is_some());
        repaired_records += u64::from(d.repaired.is_some());
        for f in d.fields.iter().filter(|f| !f.ignored) {
            per_field.entry(f.field.clone()).or_default().add(f.outcome);
            all.add(f.outcome);
        }
    }
    let stats = |field: String, counts: Counts| {
        let (precision, recall, f1) = counts.prf();
        FieldStats {
            field,
            counts,
            precision,
            recall,
            f1,
        }
    };
    FieldReport {
        fields: per_field.into_iter().map(|(f, c)| stats(f, c)).collect(),
        micro: stats("(all fields)".to_string(), all),
        records,
        exact_records,
        unusable_records,
        repaired_records,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Text as compared: NFKC, whitespace collapsed, trimmed, case-folded; scalars by their text.
fn text_of(v: &Value) -> String {
    let raw = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().map(format::shortest).unwrap_or_else(|| n.to_string()),
        other => other.to_string(),
    };
    collapse_whitespace(&nfkc(&raw)).to_lowercase()
}

fn date_of(v: &Value, day_first: bool) -> Option<time::Date> {
    v.as_str().and_then(|s| parse_date(s, day_first))
}

fn bool_of(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match text_of(&Value::String(s.clone())).as_str() {
            "true" | "yes" | "y" | "是" | "对" | "有" => Some(true),
            "false" | "no" | "n" | "否" | "不是" | "无" | "没有" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// List items: arrays as they are; a string split on `, ， 、 ; ； newline`; a scalar alone.
fn items_of(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        Value::String(s) => s
            .split([',', '，', '、', ';', '；', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| Value::String(p.to_string()))
            .collect(),
        other => vec![other.clone()],
    }
}

/// A canonical key for set comparison: numbers and amounts by value, dates by ISO form,
/// objects by their keys' canonical values, else normalised text.
fn canonical(v: &Value, day_first: bool) -> String {
    match v {
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .filter(|(_, v)| !is_empty(v))
                .map(|(k, v)| format!("{}={}", text_of(&Value::String(k.clone())), canonical(v, day_first)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let set: BTreeSet<String> = items.iter().map(|i| canonical(i, day_first)).collect();
            format!("[{}]", set.into_iter().collect::<Vec<_>>().join(","))
        }
        Value::Bool(b) => format!("b:{b}"),
        _ => {
            if let Some(d) = date_of(v, day_first) {
                format!("d:{}", iso(d))
            } else if let Some(n) = number_of(v) {
                format!("n:{}", format::shortest(n))
            } else {
                format!("t:{}", text_of(v))
            }
        }
    }
}

/// Whether `got` is the `want`ed value under the field's type.
pub fn same_value(typ: FieldType, want: &Value, got: &Value, day_first: bool) -> bool {
    match typ {
        FieldType::Exact => match (want, got) {
            (Value::Number(a), Value::Number(b)) => a.as_f64().zip(b.as_f64()).is_some_and(|(a, b)| a == b),
            _ => want == got,
        },
        FieldType::Text => text_of(want) == text_of(got),
        FieldType::Number => match (number_of(want), number_of(got)) {
            (Some(a), Some(b)) => same_number(a, b),
            _ => false,
        },
        FieldType::Date => match (date_of(want, day_first), date_of(got, day_first)) {
            (Some(a), Some(b)) => a == b,
            // The expected value is not a date after all: compare as text rather than fail.
            (None, _) => text_of(want) == text_of(got),
            (Some(_), None) => false,
        },
        FieldType::List => {
            let set = |v: &Value| -> BTreeSet<String> { items_of(v).iter().map(|i| canonical(i, day_first)).collect() };
            set(want) == set(got)
        }
        FieldType::Auto => same_auto(want, got, day_first),
    }
}

fn same_auto(want: &Value, got: &Value, day_first: bool) -> bool {
    match want {
        Value::Array(_) => same_value(FieldType::List, want, got, day_first),
        Value::Object(w) => match got {
            Value::Object(g) => {
                let keys: BTreeSet<&String> = w
                    .iter()
                    .chain(g.iter())
                    .filter(|(_, v)| !is_empty(v))
                    .map(|(k, _)| k)
                    .collect();
                keys.into_iter().all(|k| match (w.get(k), g.get(k)) {
                    (Some(a), Some(b)) => same_auto(a, b, day_first),
                    _ => false,
                })
            }
            _ => false,
        },
        Value::Number(_) => same_value(FieldType::Number, want, got, day_first),
        Value::Bool(w) => bool_of(got) == Some(*w),
        Value::Null => is_empty(got),
        Value::String(_) => {
            if date_of(want, day_first).is_some() {
                return same_value(FieldType::Date, want, got, day_first);
            }
            if let (Some(a), Some(b)) = (number_of(want), number_of(got)) {
                return same_number(a, b);
            }
            text_of(want) == text_of(got)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::grade;
    use super::*;
    use serde_json::json;

    fn spec(options: Value) -> GraderSpec {
        let mut v = options;
        v["kind"] = json!("json-fields");
        let s: GraderSpec = serde_json::from_value(v).unwrap();
        s.validate().unwrap();
        s
    }

    fn detail(g: &Grade) -> FieldsDetail {
        FieldsDetail::from_grade(g).expect("json-fields grade has a detail")
    }

    fn outcome(d: &FieldsDetail, field: &str) -> Outcome {
        d.fields.iter().find(|f| f.field == field).unwrap().outcome
    }

    #[test]
    fn type_aware_normalisation_makes_equal_values_equal() {
        let s = spec(json!({}));
        let expected = json!({
            "total": "1234.5",
            "date": "2024-03-05",
            "vendor": "Acme  Trading Co.",
            "items": ["pen", "paper"],
            "paid": true,
            "count": 3
        });
        let output = r#"```json
{"total": "¥1,234.50", "date": "2024年3月5日", "vendor": "ACME trading co.", "items": ["Paper", "pen"], "paid": "yes", "count": "3"}
```"#;
        let g = grade(&s, output, Some(&expected));
        assert!(g.passed, "{}", g.reason);
        assert_eq!(g.score, 1.0);
        let d = detail(&g);
        assert!(d.exact);
        assert_eq!(d.fields.len(), 6);
    }

    #[test]
    fn missing_wrong_and_extra_are_told_apart() {
        let s = spec(json!({}));
        let expected = json!({"a": "1", "b": "x", "c": "2024-03-05", "gone": null});
        // a right, b wrong, c missing, d extra, "gone" null on both sides is not counted.
        let g = grade(
            &s,
            r#"{"a": 1, "b": "y", "d": "surprise", "gone": ""}"#,
            Some(&expected),
        );
        let d = detail(&g);
        assert_eq!(outcome(&d, "a"), Outcome::Correct);
        assert_eq!(outcome(&d, "b"), Outcome::Wrong);
        assert_eq!(outcome(&d, "c"), Outcome::Missing);
        assert_eq!(outcome(&d, "d"), Outcome::Extra);
        assert!(d.fields.iter().all(|f| f.field != "gone"));
        // TP 1; predicted = 1 + wrong 1 + extra 1 = 3; actual = 1 + wrong 1 + missing 1 = 3.
        assert!((d.precision - 1.0 / 3.0).abs() < 1e-12);
        assert!((d.recall - 1.0 / 3.0).abs() < 1e-12);
        assert!((d.f1 - 1.0 / 3.0).abs() < 1e-12);
        assert!(!d.exact && !g.passed);
        assert_eq!(
            g.reason,
            "F1 0.33 (P 0.33, R 0.33); wrong: b (\"y\" ≠ \"x\"); missing: c; extra: d; below F1 1.00"
        );
    }

    #[test]
    fn threshold_required_fields_and_ignored_extras() {
        let expected = json!({"name": "张三", "phone": "13800000000", "city": "北京"});
        let output = r#"{"name": "张三", "phone": "13800000000", "city": "上海", "note": "VIP"}"#;
        // P = 2/4, R = 2/3, F1 = 2·(1/2)(2/3)/(1/2 + 2/3) = 4/7.
        let lenient = spec(json!({"min_f1": 0.5}));
        let g = grade(&lenient, output, Some(&expected));
        assert!((g.score - 4.0 / 7.0).abs() < 1e-12, "{}", g.score);
        assert!(g.passed);
        let required = spec(json!({"min_f1": 0.5, "required": ["city"]}));
        let g = grade(&required, output, Some(&expected));
        assert!(
            !g.passed && g.reason.contains("required not right: city"),
            "{}",
            g.reason
        );
        // Ignoring extras: P = 2/3, R = 2/3.
        let no_extra = spec(json!({"min_f1": 0.6, "ignore_extra": true}));
        let g = grade(&no_extra, output, Some(&expected));
        assert!((g.score - 2.0 / 3.0).abs() < 1e-12 && g.passed, "{}", g.reason);
    }

    #[test]
    fn type_hints_change_the_comparison() {
        let expected = json!({"id": "007", "when": "05/03/2024", "tags": "a、b"});
        let auto = spec(json!({}));
        let g = grade(
            &auto,
            r#"{"id": "7", "when": "2024-05-03", "tags": ["b", "a"]}"#,
            Some(&expected),
        );
        // auto: "007" and "7" are the same number; 05/03 is May 3 (month first by default);
        // "a、b" is plain text in auto mode, so the list differs.
        let d = detail(&g);
        assert_eq!(outcome(&d, "id"), Outcome::Correct);
        assert_eq!(outcome(&d, "when"), Outcome::Correct);
        assert_eq!(outcome(&d, "tags"), Outcome::Wrong);
        let hinted = spec(json!({"types": {"id": "text", "tags": "list"}, "day_first": true}));
        let d = detail(&grade(
            &hinted,
            r#"{"id": "7", "when": "2024-03-05", "tags": ["b", "a"]}"#,
            Some(&expected),
        ));
        assert_eq!(outcome(&d, "id"), Outcome::Wrong);
        assert_eq!(outcome(&d, "when"), Outcome::Correct);
        assert_eq!(outcome(&d, "tags"), Outcome::Correct);
        let exact = spec(json!({"types": {"n": "exact"}}));
        assert!(!grade(&exact, r#"{"n": "5"}"#, Some(&json!({"n": 5}))).passed);
        assert!(grade(&exact, r#"{"n": 5.0}"#, Some(&json!({"n": 5}))).passed);
    }

    #[test]
    fn an_answer_without_a_usable_object_counts_every_field_wrong() {
        let s = spec(json!({}));
        let g = grade(&s, "I could not find anything.", Some(&json!({"a": 1, "b": 2})));
        assert!(
            !g.passed && g.reason.starts_with("unusable answer: no JSON object"),
            "{}",
            g.reason
        );
        let d = detail(&g);
        assert_eq!(d.fields.iter().filter(|f| f.outcome == Outcome::Wrong).count(), 2);
        assert!(d.unusable.is_some());
        // Nothing answered at all is missing, not wrong.
        let d = detail(&grade(&s, "  ", Some(&json!({"a": 1}))));
        assert_eq!(outcome(&d, "a"), Outcome::Missing);
        assert!(!grade(&s, "{}", Some(&json!("not an object"))).passed);
        // The expected object may be given as a JSON string; one record in a list is read.
        assert!(grade(&s, r#"{"a": 1}"#, Some(&json!("{\"a\": 1}"))).passed);
        assert!(grade(&s, r#"[{"a": 1}]"#, Some(&json!({"a": 1}))).passed);
        assert!(!grade(&s, r#"[{"a": 1}, {"a": 2}]"#, Some(&json!({"a": 1}))).passed);
    }

    #[test]
    fn a_cut_off_answer_fails_with_the_parse_error_unless_lenient_repairs_it() {
        let expected = json!({"name": "Ada", "city": "London", "year": 1843});
        let cut = r#"{"name": "Ada", "city": "London", "ye"#;
        let g = grade(&spec(json!({})), cut, Some(&expected));
        assert!(!g.passed && g.score == 0.0);
        assert!(
            g.reason
                .starts_with("unusable answer: the JSON is cut off (EOF while parsing")
                && g.reason.ends_with("its 3 expected fields count as wrong"),
            "{}",
            g.reason
        );
        let d = detail(&g);
        assert!(d.fields.iter().all(|f| f.outcome == Outcome::Wrong && f.got.is_none()));
        // Set level: the unusable answer lowers precision as much as recall.
        let right = detail(&grade(
            &spec(json!({})),
            r#"{"name":"Ada","city":"London","year":1843}"#,
            Some(&expected),
        ));
        let report = field_report([&right, &d]);
        assert_eq!((report.micro.precision, report.micro.recall), (0.5, 0.5));
        assert_eq!((report.unusable_records, report.repaired_records), (1, 0));
        // Code fences around valid JSON stay accepted, whatever the whitespace.
        let fenced = "```json\n{ \"name\" : \"Ada\",\n  \"city\":\"London\", \"year\": 1843 }\n```";
        assert!(grade(&spec(json!({})), fenced, Some(&expected)).passed);

        let lenient = spec(json!({"lenient": true, "min_f1": 0.5}));
        let g = grade(&lenient, cut, Some(&expected));
        let d = detail(&g);
        assert_eq!(outcome(&d, "name"), Outcome::Correct);
        assert_eq!(outcome(&d, "city"), Outcome::Correct);
        assert_eq!(outcome(&d, "year"), Outcome::Missing);
        assert!(
            g.passed && g.reason.starts_with("repaired: closed a cut-off object"),
            "{}",
            g.reason
        );
        assert!(d.repaired.is_some() && d.unusable.is_none());
        let g = grade(
            &lenient,
            r#"{"name": "Ada", "city": "London", "year": 1843,}"#,
            Some(&expected),
        );
        assert!(
            g.passed && g.reason.starts_with("repaired: dropped trailing commas"),
            "{}",
            g.reason
        );
    }

    #[test]
    fn lenient_is_not_written_when_off() {
        let s = spec(json!({}));
        assert!(!serde_json::to_string(&s).unwrap().contains("lenient"));
        let on = spec(json!({"lenient": true}));
        assert!(serde_json::to_string(&on).unwrap().contains("\"lenient\":true"));
    }

    #[test]
    fn set_level_report_pools_fields() {
        let s = spec(json!({}));
        let expected = json!({"total": 10, "date": "2024-03-05"});
        let grades = [
            grade(&s, r#"{"total": 10, "date": "2024-03-05"}"#, Some(&expected)),
            grade(&s, r#"{"total": 11, "date": "2024-03-05"}"#, Some(&expected)),
            grade(&s, r#"{"total": 10, "x": 1}"#, Some(&expected)),
        ];
        let details: Vec<FieldsDetail> = grades.iter().filter_map(FieldsDetail::from_grade).collect();
        let r = field_report(&details);
        assert_eq!((r.records, r.exact_records), (3, 1));
        let total = r.fields.iter().find(|f| f.field == "total").unwrap();
        // total: correct 2, wrong 1 → P = R = 2/3.
        assert_eq!(
            total.counts,
            Counts {
                correct: 2,
                wrong: 1,
                missing: 0,
                extra: 0
            }
        );
        assert!((total.f1 - 2.0 / 3.0).abs() < 1e-12);
        let date = r.fields.iter().find(|f| f.field == "date").unwrap();
        // date: correct 2, missing 1 → P = 1, R = 2/3, F1 = 0.8.
        assert!((date.precision - 1.0).abs() < 1e-12 && (date.f1 - 0.8).abs() < 1e-12);
        let x = r.fields.iter().find(|f| f.field == "x").unwrap();
        assert_eq!((x.precision, x.recall, x.f1), (0.0, 0.0, 0.0));
        // micro: correct 4, wrong 1, missing 1, extra 1 → P = 4/6, R = 4/6.
        assert!((r.micro.precision - 4.0 / 6.0).abs() < 1e-12);
        assert!((r.exact_rate().unwrap() - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn min_f1_is_validated() {
        let bad: GraderSpec = serde_json::from_value(json!({"kind": "json-fields", "min_f1": 1.5})).unwrap();
        assert_eq!(bad.validate().unwrap_err().field, "min_f1");
    }
}
