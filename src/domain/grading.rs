//! Graders turn one output into a score in [0, 1], a pass/fail and a reason.
//! Only `exact` exists so far; the eval-set issue adds the other kinds behind this enum.
use serde::{Deserialize, Serialize};

/// A grader and its options, as written in an eval-set file (`{"kind": "exact", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum GraderSpec {
    /// Output equals the expected text after the chosen normalisations (all on by default
    /// except case folding).
    Exact {
        #[serde(default = "yes")]
        trim: bool,
        #[serde(default)]
        ignore_case: bool,
        #[serde(default = "yes")]
        collapse_whitespace: bool,
    },
}

fn yes() -> bool {
    true
}

impl GraderSpec {
    pub fn name(&self) -> &'static str {
        match self {
            GraderSpec::Exact { .. } => "exact",
        }
    }
}

/// One grader's verdict on one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    pub grader: String,
    pub score: f64,
    pub passed: bool,
    pub reason: String,
}

/// Grades `output` against `expected` with one grader.
pub fn grade(spec: &GraderSpec, output: &str, expected: Option<&str>) -> Grade {
    match spec {
        GraderSpec::Exact {
            trim,
            ignore_case,
            collapse_whitespace,
        } => {
            let Some(expected) = expected else {
                return Grade {
                    grader: spec.name().into(),
                    score: 0.0,
                    passed: false,
                    reason: "case has no expected value".into(),
                };
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
            let passed = norm(output) == norm(expected);
            let reason = if passed {
                "matches the expected text".to_string()
            } else {
                format!(
                    "expected {:?}, got {:?}",
                    super::validation::truncate(expected, 80),
                    super::validation::truncate(output, 80)
                )
            };
            Grade {
                grader: spec.name().into(),
                score: if passed { 1.0 } else { 0.0 },
                passed,
                reason,
            }
        }
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

    fn exact(ignore_case: bool) -> GraderSpec {
        GraderSpec::Exact {
            trim: true,
            ignore_case,
            collapse_whitespace: true,
        }
    }

    #[test]
    fn exact_normalises_as_asked() {
        assert!(grade(&exact(false), "  positive\n", Some("positive")).passed);
        assert!(!grade(&exact(false), "Positive", Some("positive")).passed);
        assert!(grade(&exact(true), "Positive", Some("positive")).passed);
        assert!(grade(&exact(false), "正面  情绪", Some("正面 情绪")).passed);
        let g = grade(&exact(false), "negative", Some("positive"));
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
        let ok = grade(&exact(false), "a", Some("a"));
        let bad = grade(&exact(false), "a", Some("b"));
        assert_eq!(case_passed(&[ok.clone(), bad]), Some(false));
        assert_eq!(case_passed(&[ok]), Some(true));
        assert_eq!(case_passed(&[]), None);
    }
}
