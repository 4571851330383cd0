//! Graders turn one output into a score in [0, 1], a pass/fail and a short reason.
//!
//! `spec` holds what an eval-set file says (every kind and its options); one file per family
//! holds the pure grading logic. Nothing here does I/O: the `llm-judge` kind is a spec plus the
//! prompt and reply parsing, and the engine makes the judge call.
mod spec;

pub use spec::{
    DEFAULT_JUDGE_MIN, FieldType, GraderSpec, JsonFieldsOptions, JudgeScale, LengthUnit, NumberPick, Pattern, Schema,
    SpecError, TextMatch,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::validation::truncate;

/// Longest reason kept on a grade, in characters.
pub const MAX_REASON_CHARS: usize = 200;

/// One grader's verdict on one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    pub grader: String,
    pub score: f64,
    pub passed: bool,
    pub reason: String,
}

impl Grade {
    fn new(spec: &GraderSpec, score: f64, passed: bool, reason: impl AsRef<str>) -> Grade {
        Grade {
            grader: spec.name().to_string(),
            score: if score.is_finite() { score.clamp(0.0, 1.0) } else { 0.0 },
            passed,
            reason: truncate(reason.as_ref(), MAX_REASON_CHARS),
        }
    }

    fn pass_fail(spec: &GraderSpec, passed: bool, reason: impl AsRef<str>) -> Grade {
        Grade::new(spec, if passed { 1.0 } else { 0.0 }, passed, reason)
    }
}

/// Grades `output` against the case's `expected` value with one grader.
pub fn grade(spec: &GraderSpec, output: &str, expected: Option<&Value>) -> Grade {
    match spec {
        GraderSpec::Exact {
            trim,
            ignore_case,
            collapse_whitespace,
            ..
        } => {
            let Some(expected) = expected.map(expected_text) else {
                return Grade::pass_fail(spec, false, "case has no expected value");
            };
            let norm = |s: &str| {
                let mut t = if *trim { s.trim().to_string() } else { s.to_string() };
                if *collapse_whitespace {
                    t = t.split_whitespace().collect::<Vec<_>>().join(" ");
                }
                if *ignore_case {
                    t = t.to_lowercase();
                }
                t
            };
            let passed = norm(output) == norm(&expected);
            let reason = if passed {
                "matches the expected text".to_string()
            } else {
                format!("expected {:?}, got {:?}", truncate(&expected, 80), truncate(output, 80))
            };
            Grade::pass_fail(spec, passed, reason)
        }
        _ => Grade::pass_fail(spec, false, format!("grader {} is not implemented yet", spec.name())),
    }
}

/// The expected value as text: strings as they are, other JSON compactly.
pub fn expected_text(expected: &Value) -> String {
    match expected {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A case passes when every grader passes; with no graders it is not graded (None).
pub fn case_passed(grades: &[Grade]) -> Option<bool> {
    if grades.is_empty() {
        None
    } else {
        Some(grades.iter().all(|g| g.passed))
    }
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
    fn case_passes_only_when_all_graders_pass() {
        let ok = grade(&exact(false), "a", Some(&json!("a")));
        let bad = grade(&exact(false), "a", Some(&json!("b")));
        assert_eq!(case_passed(&[ok.clone(), bad]), Some(false));
        assert_eq!(case_passed(&[ok]), Some(true));
        assert_eq!(case_passed(&[]), None);
    }
}
