//! The `label` grader (one case: is the predicted label the expected one?) and the set-level
//! `classification_report` (accuracy, per-label precision / recall / F1, macro-F1, confusion
//! matrix) over (expected, predicted) pairs.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::spec::GraderSpec;
use super::text::{collapse_whitespace, is_cjk, is_punctuation, nfkc};
use super::{Grade, expected_text, quote};

/// Marks, quotes and emphasis stripped from both ends of a label: `**Billing**.` → `Billing`.
fn strip_decoration(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || is_punctuation(c) || matches!(c, '*' | '`' | '_' | '#'))
}

/// A label as compared: NFKC, decoration stripped, whitespace collapsed, case-folded if asked.
pub fn normalise_label(s: &str, ignore_case: bool) -> String {
    let t = collapse_whitespace(strip_decoration(&nfkc(s)));
    if ignore_case { t.to_lowercase() } else { t }
}

/// What the model answered, as one label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prediction {
    /// The whole answer is this label.
    Label(String),
    /// A longer answer that names exactly one allowed label.
    Found(String),
    /// The answer names none of the allowed labels.
    NoLabel,
    /// The answer names several allowed labels.
    Ambiguous(Vec<String>),
}

/// Reads the predicted label from `output`. With `labels`, the answer must be (or name
/// exactly one of) them, and the label's own spelling is returned; without, the normalised
/// answer is the label.
pub fn predict_label(output: &str, labels: &[String], ignore_case: bool) -> Prediction {
    let answer = normalise_label(output, ignore_case);
    if labels.is_empty() {
        return if answer.is_empty() {
            Prediction::NoLabel
        } else {
            Prediction::Label(answer)
        };
    }
    if let Some(l) = labels.iter().find(|l| normalise_label(l, ignore_case) == answer) {
        return Prediction::Label(l.clone());
    }
    let named: Vec<String> = labels
        .iter()
        .filter(|l| mentions(&answer, &normalise_label(l, ignore_case)))
        .cloned()
        .collect();
    match named.len() {
        0 => Prediction::NoLabel,
        1 => Prediction::Found(named[0].clone()),
        _ => Prediction::Ambiguous(named),
    }
}

/// Whether `text` names `label` as a whole word (a CJK label: anywhere, since CJK text has no
/// word boundaries).
fn mentions(text: &str, label: &str) -> bool {
    if label.is_empty() {
        return false;
    }
    if label.chars().any(is_cjk) {
        return text.contains(label);
    }
    let word_char = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() && !is_cjk(c));
    text.match_indices(label).any(|(at, _)| {
        !word_char(text[..at].chars().next_back()) && !word_char(text[at + label.len()..].chars().next())
    })
}

/// The expected label in the same spelling `predict_label` uses.
fn expected_label(expected: &str, labels: &[String], ignore_case: bool) -> String {
    let want = normalise_label(expected, ignore_case);
    labels
        .iter()
        .find(|l| normalise_label(l, ignore_case) == want)
        .cloned()
        .unwrap_or(want)
}

pub(super) fn label(
    spec: &GraderSpec,
    labels: &[String],
    ignore_case: bool,
    output: &str,
    expected: Option<&Value>,
) -> Grade {
    let Some(expected) = expected.map(expected_text) else {
        return Grade::pass_fail(spec, false, "case has no expected label");
    };
    let want = expected_label(&expected, labels, ignore_case);
    let prediction = predict_label(output, labels, ignore_case);
    let predicted = match &prediction {
        Prediction::Label(l) | Prediction::Found(l) => Some(l.clone()),
        Prediction::NoLabel | Prediction::Ambiguous(_) => None,
    };
    let same = |l: &String| normalise_label(l, ignore_case) == normalise_label(&want, ignore_case);
    let passed = predicted.as_ref().is_some_and(same);
    let reason = match &prediction {
        Prediction::Label(l) if passed => format!("label {}", quote(l, 60)),
        Prediction::Found(l) if passed => format!("label {} (named in a longer answer)", quote(l, 60)),
        Prediction::Label(l) | Prediction::Found(l) => {
            format!("predicted {}, expected {}", quote(l, 60), quote(&want, 60))
        }
        Prediction::NoLabel if labels.is_empty() => "empty answer".to_string(),
        Prediction::NoLabel => format!("names none of the labels: {}", quote(output.trim(), 60)),
        Prediction::Ambiguous(ls) => format!("names several labels: {}", ls.join(", ")),
    };
    let mut grade = Grade::pass_fail(spec, passed, reason);
    grade.detail = Some(Box::new(json!({"expected": want, "predicted": predicted})));
    grade
}

/// The (expected, predicted) pair a `label` grade carries; predicted is None when the answer
/// named no label (or several).
pub fn label_pair(grade: &Grade) -> Option<(String, Option<String>)> {
    if &*grade.grader != "label" {
        return None;
    }
    let detail = grade.detail.as_ref()?;
    let expected = detail.get("expected")?.as_str()?.to_string();
    let predicted = detail.get("predicted").and_then(Value::as_str).map(str::to_string);
    Some((expected, predicted))
}

/// Per-label figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelStats {
    pub label: String,
    /// Cases whose expected label this is.
    pub support: u64,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// Set-level classification quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassificationReport {
    /// Every label seen, expected or predicted, sorted.
    pub labels: Vec<String>,
    pub per_label: Vec<LabelStats>,
    pub cases: u64,
    pub accuracy: f64,
    /// Unweighted mean of the per-label F1 over `labels`.
    pub macro_f1: f64,
    /// `confusion[i][j]`: cases expected `labels[i]`, predicted `labels[j]`.
    pub confusion: Vec<Vec<u64>>,
    /// `no_label[i]`: cases expected `labels[i]` whose answer named no label.
    pub no_label: Vec<u64>,
}

/// Accuracy, per-label P/R/F1, macro-F1 and the confusion matrix. As in scikit-learn, the
/// label set is every label expected or predicted, a label never predicted has precision 0,
/// and an answer with no label counts against recall only.
pub fn classification_report(pairs: &[(String, Option<String>)]) -> ClassificationReport {
    let labels: Vec<String> = pairs
        .iter()
        .flat_map(|(e, p)| std::iter::once(e).chain(p.iter()))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<&str, usize> = labels.iter().enumerate().map(|(i, l)| (l.as_str(), i)).collect();
    let n = labels.len();
    let mut confusion = vec![vec![0u64; n]; n];
    let mut no_label = vec![0u64; n];
    for (e, p) in pairs {
        let row = index[e.as_str()];
        match p {
            Some(p) => confusion[row][index[p.as_str()]] += 1,
            None => no_label[row] += 1,
        }
    }
    let per_label: Vec<LabelStats> = labels
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let tp = confusion[i][i] as f64;
            let predicted: u64 = confusion.iter().map(|row| row[i]).sum();
            let support: u64 = confusion[i].iter().sum::<u64>() + no_label[i];
            let precision = if predicted > 0 { tp / predicted as f64 } else { 0.0 };
            let recall = if support > 0 { tp / support as f64 } else { 0.0 };
            let f1 = if precision + recall > 0.0 {
                2.0 * precision * recall / (precision + recall)
            } else {
                0.0
            };
            LabelStats {
                label: label.clone(),
                support,
                precision,
                recall,
                f1,
            }
        })
        .collect();
    let correct: u64 = (0..n).map(|i| confusion[i][i]).sum();
    let cases = pairs.len() as u64;
    ClassificationReport {
        accuracy: if cases > 0 { correct as f64 / cases as f64 } else { 0.0 },
        macro_f1: if n > 0 {
            per_label.iter().map(|s| s.f1).sum::<f64>() / n as f64
        } else {
            0.0
        },
        labels,
        per_label,
        cases,
        confusion,
        no_label,
    }
}

#[cfg(test)]
mod tests {
    use super::super::grade;
    use super::*;

    fn spec(json: &str) -> GraderSpec {
        let s: GraderSpec = serde_json::from_str(json).unwrap();
        s.validate().unwrap();
        s
    }

    #[test]
    fn label_normalises_and_finds_the_label() {
        let s = spec(r#"{"kind":"label","labels":["billing","technical","account"]}"#);
        assert!(grade(&s, "**Billing**.", Some(&json!("billing"))).passed);
        let g = grade(&s, "This ticket is about billing.", Some(&json!("billing")));
        assert!(g.passed && g.reason.contains("longer answer"), "{}", g.reason);
        assert_eq!(label_pair(&g), Some(("billing".into(), Some("billing".into()))));
        // "billings" is not the word "billing".
        assert!(!grade(&s, "billings", Some(&json!("billing"))).passed);
        let g = grade(&s, "billing or technical", Some(&json!("billing")));
        assert!(
            !g.passed && g.reason.starts_with("names several labels"),
            "{}",
            g.reason
        );
        assert_eq!(label_pair(&g), Some(("billing".into(), None)));
        let g = grade(&s, "technical", Some(&json!("billing")));
        assert_eq!(g.reason, "predicted \"technical\", expected \"billing\"");
        // Case matters only when asked.
        let strict = spec(r#"{"kind":"label","labels":["Billing"],"ignore_case":false}"#);
        assert!(!grade(&strict, "billing", Some(&json!("Billing"))).passed);
    }

    #[test]
    fn chinese_labels() {
        let s = spec(r#"{"kind":"label","labels":["正面","负面","中性"]}"#);
        assert!(grade(&s, "「正面」", Some(&json!("正面"))).passed);
        assert!(grade(&s, "情感倾向：负面。", Some(&json!("负面"))).passed);
        assert!(!grade(&s, "不确定", Some(&json!("中性"))).passed);
        // Without a label list, the normalised answer is the label (full-width folds).
        let open = spec(r#"{"kind":"classification"}"#);
        assert_eq!(open.name(), "label");
        assert!(grade(&open, " ＰＯＳＩＴＩＶＥ ", Some(&json!("positive"))).passed);
    }

    #[test]
    fn macro_f1_on_a_small_confusion_matrix() {
        // expected → predicted: a→a ×3, a→b ×1, b→b ×2, b→a ×1, c→c ×1, c→(none) ×1
        let p = |e: &str, g: Option<&str>| (e.to_string(), g.map(str::to_string));
        let mut pairs = vec![];
        pairs.extend(std::iter::repeat_n(p("a", Some("a")), 3));
        pairs.push(p("a", Some("b")));
        pairs.extend(std::iter::repeat_n(p("b", Some("b")), 2));
        pairs.push(p("b", Some("a")));
        pairs.push(p("c", Some("c")));
        pairs.push(p("c", None));
        let r = classification_report(&pairs);
        assert_eq!(r.labels, ["a", "b", "c"]);
        assert_eq!(r.confusion, vec![vec![3, 1, 0], vec![1, 2, 0], vec![0, 0, 1]]);
        assert_eq!(r.no_label, vec![0, 0, 1]);
        // accuracy 6/9.
        assert!((r.accuracy - 6.0 / 9.0).abs() < 1e-12);
        // a: P 3/4, R 3/4, F1 3/4.  b: P 2/3, R 2/3, F1 2/3.  c: P 1, R 1/2, F1 2/3.
        let f1: Vec<f64> = r.per_label.iter().map(|s| s.f1).collect();
        for (got, want) in f1.iter().zip([0.75, 2.0 / 3.0, 2.0 / 3.0]) {
            assert!((got - want).abs() < 1e-12, "{f1:?}");
        }
        assert!((r.macro_f1 - (0.75 + 2.0 / 3.0 + 2.0 / 3.0) / 3.0).abs() < 1e-12);
        assert_eq!(r.per_label[2].support, 2);
    }

    #[test]
    fn a_label_only_predicted_counts_in_the_macro_average() {
        let pairs = vec![
            ("x".to_string(), Some("y".to_string())),
            ("x".to_string(), Some("x".to_string())),
        ];
        let r = classification_report(&pairs);
        assert_eq!(r.labels, ["x", "y"]);
        // x: P 1, R 1/2, F1 2/3; y: P 0, R 0 (no support), F1 0 → macro 1/3.
        assert!((r.macro_f1 - 1.0 / 3.0).abs() < 1e-12);
        let empty = classification_report(&[]);
        assert_eq!((empty.cases, empty.accuracy, empty.macro_f1), (0, 0.0, 0.0));
    }
}
