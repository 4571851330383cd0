//! Graders turn one output into a score in [0, 1], a pass/fail and a short reason.
//!
//! `spec` holds what an eval-set file says (every kind and its options); one file per family
//! holds the pure grading logic. Nothing here does I/O: the `llm-judge` kind is a spec plus the
//! prompt and reply parsing, and the engine makes the judge call.
mod classification;
mod dates;
mod fields;
mod json;
mod judge;
mod numbers;
mod overlap;
mod repair;
mod spec;
mod text;

pub use classification::{
    ClassificationReport, LabelStats, Prediction, classification_report, label_pair, predict_label,
};
pub use dates::{iso as iso_date, parse_date};
pub use fields::{Counts, FieldOutcome, FieldReport, FieldStats, FieldsDetail, Outcome, field_report, same_value};
pub use json::{JsonSource, extract_json, extract_json_with_source};
pub use judge::{
    JUDGE_ATTEMPT_STRIDE, JUDGE_GRADE_POSITION, judge_failed, judge_name_for_attempt, judge_prompt, judge_slots,
    parse_judge_reply,
};
pub use numbers::{number_of, numbers_in, parse_amount, same_number};
pub use overlap::{chrf, rouge_l};
pub use spec::{
    DEFAULT_JUDGE_MIN, FieldType, Grader, GraderSpec, JsonFieldsOptions, JudgeScale, LengthUnit, NumberPick, Pattern,
    Schema, SpecError, TextMatch,
};
pub use text::{count_tokens, count_words, is_cjk, nfkc};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::validation::truncate;

/// Longest reason kept on a grade, in characters.
pub const MAX_REASON_CHARS: usize = 200;

/// One grader's verdict on one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    /// Shared by the grades of records read at once (one name per grader, not one per grade).
    pub grader: std::sync::Arc<str>,
    /// In [0, 1].
    pub score: f64,
    pub passed: bool,
    /// Human-readable, at most about `MAX_REASON_CHARS` characters.
    pub reason: String,
    /// Structured detail for set-level figures: per-field outcomes (`json-fields`, see
    /// `FieldsDetail`), the expected and predicted label (`label`, see `label_pair`).
    /// Boxed: most grades have none, and a big run's end step holds every grade of a candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<Value>>,
    /// The grader's weight in the case score (its `weight` option; default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: f64,
    /// Whether the case fails when this grade fails (its `required` option; default true).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub required: bool,
}

fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Grade {
    fn new(spec: &GraderSpec, score: f64, passed: bool, reason: impl AsRef<str>) -> Grade {
        Grade {
            grader: spec.name().into(),
            score: if score.is_finite() { score.clamp(0.0, 1.0) } else { 0.0 },
            passed,
            reason: truncate(reason.as_ref(), MAX_REASON_CHARS),
            detail: None,
            weight: 1.0,
            required: true,
        }
    }

    fn pass_fail(spec: &GraderSpec, passed: bool, reason: impl AsRef<str>) -> Grade {
        Grade::new(spec, if passed { 1.0 } else { 0.0 }, passed, reason)
    }

    /// Test fixture: a required `exact` grade of weight 1, score 1 or 0, no reason.
    #[doc(hidden)]
    pub fn test_exact(passed: bool) -> Grade {
        Grade {
            grader: "exact".into(),
            score: if passed { 1.0 } else { 0.0 },
            passed,
            reason: String::new(),
            detail: None,
            weight: 1.0,
            required: true,
        }
    }
}

/// Grades `output` against the case's `expected` value with one grader. Pure and total: every
/// problem (no expected value, no JSON in the output…) is a failing grade with its reason.
/// `llm-judge` needs a model call, so here it only fails with a reason saying so; the engine
/// grades it (see `GraderSpec::needs_model`, `judge_prompt`, `parse_judge_reply`).
pub fn grade(spec: &GraderSpec, output: &str, expected: Option<&Value>) -> Grade {
    use text::ContainsMode;
    match spec {
        GraderSpec::Exact {
            trim,
            ignore_case,
            collapse_whitespace,
            nfkc,
            ignore_punctuation,
        } => {
            let norm = text::ExactNorm {
                trim: *trim,
                ignore_case: *ignore_case,
                collapse_whitespace: *collapse_whitespace,
                nfkc: *nfkc,
                ignore_punctuation: *ignore_punctuation,
            };
            text::exact(spec, &norm, output, expected)
        }
        GraderSpec::Contains(m) | GraderSpec::ContainsAll(m) => {
            text::contains(spec, ContainsMode::All, m, output, expected)
        }
        GraderSpec::ContainsAny(m) => text::contains(spec, ContainsMode::Any, m, output, expected),
        GraderSpec::NotContains(m) => text::contains(spec, ContainsMode::None, m, output, expected),
        GraderSpec::Regex { pattern, negate } => text::regex(spec, pattern, *negate, output),
        GraderSpec::JsonValid { strict } => json::json_valid(spec, *strict, output),
        GraderSpec::JsonSchema { schema, strict } => json::json_schema(spec, schema, *strict, output),
        GraderSpec::JsonFields(options) => fields::json_fields(spec, options, output, expected),
        GraderSpec::Label { labels, ignore_case } => {
            classification::label(spec, labels, *ignore_case, output, expected)
        }
        GraderSpec::Numeric {
            value,
            abs_tol,
            rel_tol,
            pick,
        } => numbers::numeric(spec, *value, *abs_tol, *rel_tol, *pick, output, expected),
        GraderSpec::Length { min, max, unit } => text::length(spec, *min, *max, *unit, output),
        GraderSpec::RougeL { min } => overlap::overlap(spec, overlap::rouge_l, *min, output, expected),
        GraderSpec::Chrf { min } => overlap::overlap(spec, overlap::chrf, *min, output, expected),
        GraderSpec::LlmJudge { .. } => Grade::pass_fail(
            spec,
            false,
            "llm-judge needs a call to the judge model; the engine grades it, not grade()",
        ),
    }
}

/// `"text"` with the text cut to `max` characters.
fn quote(s: &str, max: usize) -> String {
    format!("{:?}", truncate(s, max))
}

/// The expected value as text: strings as they are, other JSON compactly.
pub fn expected_text(expected: &Value) -> String {
    match expected {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A case passes when every required grader passes; grades of non-required graders are
/// reported but never fail it. With no required grade (no graders, or only optional ones
/// graded, e.g. a required `llm-judge` in a run with judging off) it is not graded (None).
pub fn case_passed(grades: &[Grade]) -> Option<bool> {
    let mut required = grades.iter().filter(|g| g.required).peekable();
    required.peek()?;
    Some(required.all(|g| g.passed))
}

/// The case score: the weighted mean of its grades' scores (every grade counts, required or
/// not); None with no grades.
pub fn case_score(grades: &[Grade]) -> Option<f64> {
    let total: f64 = grades.iter().map(|g| g.weight).sum();
    (total > 0.0).then(|| grades.iter().map(|g| g.weight * g.score).sum::<f64>() / total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exact(ignore_case: bool) -> GraderSpec {
        GraderSpec::Exact {
            trim: true,
            ignore_case,
            collapse_whitespace: true,
            nfkc: false,
            ignore_punctuation: false,
        }
    }

    #[test]
    fn exact_normalises_as_asked() {
        let e = |s: &str| json!(s);
        assert!(grade(&exact(false), "  positive\n", Some(&e("positive"))).passed);
        assert!(!grade(&exact(false), "Positive", Some(&e("positive"))).passed);
        assert!(grade(&exact(true), "Positive", Some(&e("positive"))).passed);
        assert!(grade(&exact(false), "正面  情绪", Some(&e("正面 情绪"))).passed);
        let g = grade(&exact(false), "negative", Some(&e("positive")));
        assert_eq!((g.score, g.passed), (0.0, false));
        assert!(g.reason.contains("expected \"positive\""));
    }

    #[test]
    fn defaults_come_from_serde() {
        let spec: GraderSpec = serde_json::from_str(r#"{"kind":"exact"}"#).unwrap();
        assert_eq!(spec, exact(false));
        assert!(serde_json::from_str::<GraderSpec>(r#"{"kind":"exact","bogus":1}"#).is_err());
    }

    #[test]
    fn required_graders_decide_and_weights_weigh() {
        let g = |score: f64, passed: bool, weight: f64, required: bool| Grade {
            grader: "x".into(),
            score,
            passed,
            reason: String::new(),
            detail: None,
            weight,
            required,
        };
        // A failing optional grader is reported but does not fail the case.
        let grades = [g(1.0, true, 3.0, true), g(0.0, false, 1.0, false)];
        assert_eq!(case_passed(&grades), Some(true));
        // Score: (3·1 + 1·0) / 4.
        assert_eq!(case_score(&grades), Some(0.75));
        // A failing required one fails it, whatever the weights.
        let grades = [g(1.0, true, 10.0, true), g(0.2, false, 0.5, true)];
        assert_eq!(case_passed(&grades), Some(false));
        assert!((case_score(&grades).unwrap() - (10.0 + 0.1) / 10.5).abs() < 1e-12);
        // Only optional grades present (the required judge was not run): not graded.
        assert_eq!(case_passed(&[g(1.0, true, 1.0, false)]), None);
        assert_eq!(case_score(&[]), None);
    }

    #[test]
    fn weight_and_required_are_read_validated_and_left_out_at_their_defaults() {
        let plain: Grader = serde_json::from_str(r#"{"kind":"exact"}"#).unwrap();
        assert_eq!((plain.weight, plain.required), (1.0, true));
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::to_value(&plain.spec).unwrap()
        );
        let g: Grader = serde_json::from_str(r#"{"kind":"rouge-l","min":0.3,"weight":2.5,"required":false}"#).unwrap();
        assert_eq!((g.weight, g.required, g.name()), (2.5, false, "rouge-l"));
        assert_eq!(
            serde_json::from_value::<Grader>(serde_json::to_value(&g).unwrap()).unwrap(),
            g
        );
        assert!(
            g.describe().ends_with("weight 2.5 · optional (does not fail the case)"),
            "{}",
            g.describe()
        );
        let graded = g.grade("a b", Some(&json!("a b")));
        assert_eq!((graded.weight, graded.required), (2.5, false));
        let zero: Grader = serde_json::from_str(r#"{"kind":"exact","weight":0}"#).unwrap();
        assert_eq!(zero.validate().unwrap_err().field, "weight");
        let e = serde_json::from_str::<Grader>(r#"{"kind":"exact","required":"yes"}"#).unwrap_err();
        assert!(e.to_string().contains("`required` must be true or false"), "{e}");
        assert!(serde_json::from_str::<Grader>(r#"{"kind":"exact","wieght":2}"#).is_err());
        // json-fields' own `required` (a list of fields) is not the grader's.
        let fields: Grader = serde_json::from_str(r#"{"kind":"json-fields","required":["total"]}"#).unwrap();
        assert!(fields.required);
        let both: Grader =
            serde_json::from_str(r#"{"kind":"json-fields","required_fields":["total"],"required":false}"#).unwrap();
        assert!(!both.required && matches!(&both.spec, GraderSpec::JsonFields(o) if o.required == ["total"]));
        let again = serde_json::to_value(&both).unwrap();
        assert_eq!(
            again,
            json!({"kind": "json-fields", "required_fields": ["total"], "required": false})
        );
        assert_eq!(serde_json::from_value::<Grader>(again).unwrap(), both);
    }

    #[test]
    fn case_passes_only_when_all_graders_pass() {
        let ok = grade(&exact(false), "a", Some(&json!("a")));
        let bad = grade(&exact(false), "a", Some(&json!("b")));
        assert_eq!(case_passed(&[ok.clone(), bad]), Some(false));
        assert_eq!(case_passed(&[ok]), Some(true));
        assert_eq!(case_passed(&[]), None);
    }

    /// Every JSON example in docs/graders.md is a valid spec that survives a round trip, and
    /// every kind is documented.
    #[test]
    fn documented_examples_parse_validate_and_round_trip() {
        let doc = include_str!("../../../../docs/graders.md");
        let mut kinds = std::collections::BTreeSet::new();
        let mut in_json = false;
        for line in doc.lines() {
            match line.trim() {
                "```json" => in_json = true,
                "```" => in_json = false,
                example if in_json && !example.is_empty() => {
                    let spec: Grader = serde_json::from_str(example).unwrap_or_else(|e| panic!("{example}: {e}"));
                    spec.validate().unwrap_or_else(|e| panic!("{example}: {e}"));
                    let again: Grader = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
                    assert_eq!(again, spec, "{example}");
                    assert!(!spec.describe().is_empty());
                    kinds.insert(spec.name());
                }
                _ => {}
            }
        }
        assert_eq!(kinds.len(), 15, "documented kinds: {kinds:?}");
    }

    #[test]
    fn options_off_by_default_are_not_serialised() {
        // Keeps the normalised text, and so the version hash, of existing files unchanged.
        let spec: GraderSpec = serde_json::from_str(r#"{"kind":"exact"}"#).unwrap();
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({"kind": "exact", "trim": true, "ignore_case": false, "collapse_whitespace": true})
        );
        let spec: GraderSpec = serde_json::from_str(r#"{"kind":"json-fields"}"#).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), json!({"kind": "json-fields"}));
    }

    #[test]
    fn every_grade_is_bounded_and_judge_is_left_to_the_engine() {
        let judge: GraderSpec =
            serde_json::from_str(r#"{"kind":"llm-judge","judge":"j","rubric":"r","scale":"pass-fail"}"#).unwrap();
        assert!(judge.needs_model());
        let g = grade(&judge, "x", None);
        assert!(!g.passed && g.reason.contains("engine"));
        let long = "很长的回答".repeat(200);
        let g = grade(&exact(false), &long, Some(&json!("短")));
        assert!(
            g.reason.chars().count() <= MAX_REASON_CHARS + 1,
            "{}",
            g.reason.chars().count()
        );
        let bad: GraderSpec =
            serde_json::from_str(r#"{"kind":"llm-judge","judge":"j","rubric":"r","scale":"pass-fail","min":3}"#)
                .unwrap();
        assert_eq!(bad.validate().unwrap_err().field, "min");
    }
}
