//! Text graders: `exact`, the `contains` family, `regex`, `length`; and the text helpers the
//! other families share (NFKC, punctuation, CJK detection, word and token counts).
use serde_json::Value;
use unicode_normalization::UnicodeNormalization;

use super::spec::{GraderSpec, LengthUnit, Pattern, TextMatch};
use super::{Grade, expected_text, quote};

/// Unicode NFKC: full-width `ＡＢＣ１２３` → `ABC123`, `①` → `1`, `ﬁ` → `fi`.
pub fn nfkc(s: &str) -> String {
    s.nfkc().collect()
}

/// Han ideographs, kana and hangul: scripts written without spaces between words, so every
/// character counts as a token of its own.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF      // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x323AF  // CJK extensions B–H
        | 0x3040..=0x30FF    // hiragana, katakana
        | 0x31F0..=0x31FF    // katakana phonetic extensions
        | 0x1100..=0x11FF    // hangul jamo
        | 0x3130..=0x318F    // hangul compatibility jamo
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0x3005..=0x3007    // 々 〆 〇
    )
}

/// Punctuation, ASCII and the common non-ASCII blocks (general punctuation, CJK symbols and
/// punctuation, full-width and small forms). Letters, digits, spaces and symbols such as `$`
/// are not punctuation.
pub fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation() && !matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '`' | '|' | '~');
    }
    matches!(c as u32,
        0xA1 | 0xA7 | 0xAB | 0xB6 | 0xB7 | 0xBB | 0xBF
        | 0x2010..=0x2027
        | 0x2030..=0x205E
        | 0x3001..=0x3003
        | 0x3008..=0x3011
        | 0x3014..=0x301F
        | 0x3030 | 0x303D | 0x30FB
        | 0xFE10..=0xFE19
        | 0xFE30..=0xFE4F
        | 0xFE50..=0xFE6B
        | 0xFF01..=0xFF03
        | 0xFF05..=0xFF0A
        | 0xFF0C..=0xFF0F
        | 0xFF1A | 0xFF1B | 0xFF1F | 0xFF20
        | 0xFF3B..=0xFF3D
        | 0xFF3F | 0xFF5B | 0xFF5D
        | 0xFF5F..=0xFF65
    )
}

/// Whitespace runs become one space; leading and trailing whitespace goes.
pub fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `exact` grader's normalisation, in a fixed order: NFKC, punctuation, trim, whitespace,
/// case.
pub struct ExactNorm {
    pub trim: bool,
    pub ignore_case: bool,
    pub collapse_whitespace: bool,
    pub nfkc: bool,
    pub ignore_punctuation: bool,
}

impl ExactNorm {
    pub fn apply(&self, s: &str) -> String {
        let mut t = if self.nfkc { nfkc(s) } else { s.to_string() };
        if self.ignore_punctuation {
            t = t.chars().filter(|c| !is_punctuation(*c)).collect();
        }
        if self.trim {
            t = t.trim().to_string();
        }
        if self.collapse_whitespace {
            t = collapse_whitespace(&t);
        }
        if self.ignore_case {
            t = t.to_lowercase();
        }
        t
    }
}

pub(super) fn exact(spec: &GraderSpec, norm: &ExactNorm, output: &str, expected: Option<&Value>) -> Grade {
    let Some(expected) = expected.map(expected_text) else {
        return Grade::pass_fail(spec, false, "case has no expected value");
    };
    let (want, got) = (norm.apply(&expected), norm.apply(output));
    if want == got {
        return Grade::pass_fail(spec, true, "matches the expected text");
    }
    let at = want.chars().zip(got.chars()).take_while(|(a, b)| a == b).count();
    Grade::pass_fail(
        spec,
        false,
        format!(
            "expected {}, got {} (differs at character {})",
            quote(&want, 70),
            quote(&got, 70),
            at + 1
        ),
    )
}

/// Which members of the contains family is grading.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ContainsMode {
    All,
    Any,
    None,
}

pub(super) fn contains(
    spec: &GraderSpec,
    mode: ContainsMode,
    m: &TextMatch,
    output: &str,
    expected: Option<&Value>,
) -> Grade {
    let needles: Vec<String> = match (&m.value, &m.values, expected) {
        (Some(v), _, _) => vec![v.clone()],
        (None, Some(vs), _) => vs.clone(),
        (None, None, Some(Value::Array(items))) => items.iter().map(expected_text).collect(),
        (None, None, Some(other)) => vec![expected_text(other)],
        (None, None, None) => Vec::new(),
    };
    let needles: Vec<String> = needles.into_iter().filter(|n| !n.is_empty()).collect();
    if needles.is_empty() {
        return Grade::pass_fail(
            spec,
            false,
            "nothing to look for: no `value`, `values` or expected value",
        );
    }
    let fold = |s: &str| if m.ignore_case { s.to_lowercase() } else { s.to_string() };
    let haystack = fold(output);
    let (found, absent): (Vec<&String>, Vec<&String>) = needles.iter().partition(|n| haystack.contains(&fold(n)));
    let list = |items: &[&String]| items.iter().map(|s| quote(s, 40)).collect::<Vec<_>>().join(", ");
    let total = needles.len() as f64;
    match mode {
        ContainsMode::All => {
            let score = found.len() as f64 / total;
            if absent.is_empty() {
                Grade::new(spec, score, true, format!("contains {}", list(&found)))
            } else {
                Grade::new(spec, score, false, format!("missing {}", list(&absent)))
            }
        }
        ContainsMode::Any => match found.first() {
            Some(hit) => Grade::pass_fail(spec, true, format!("contains {}", quote(hit, 60))),
            None => Grade::pass_fail(spec, false, format!("contains none of {}", list(&absent))),
        },
        ContainsMode::None => {
            let score = absent.len() as f64 / total;
            if found.is_empty() {
                Grade::new(spec, score, true, "contains none of the forbidden values")
            } else {
                Grade::new(spec, score, false, format!("contains forbidden {}", list(&found)))
            }
        }
    }
}

pub(super) fn regex(spec: &GraderSpec, pattern: &Pattern, negate: bool, output: &str) -> Grade {
    let hit = pattern.regex().find(output);
    let shown = format!("/{}/", pattern.as_str());
    match (hit, negate) {
        (Some(m), false) => Grade::pass_fail(spec, true, format!("matches {}", quote(m.as_str(), 80))),
        (None, false) => Grade::pass_fail(spec, false, format!("no match for {}", quote_raw(&shown, 120))),
        (Some(m), true) => Grade::pass_fail(spec, false, format!("matches {} but must not", quote(m.as_str(), 80))),
        (None, true) => Grade::pass_fail(
            spec,
            true,
            format!("no match for {}, as required", quote_raw(&shown, 120)),
        ),
    }
}

fn quote_raw(s: &str, max: usize) -> String {
    crate::validation::truncate(s, max)
}

/// Words: every CJK character is one; elsewhere a maximal run of non-CJK, non-space characters
/// holding at least one letter or digit is one (`Hello,` is one word, `,` alone is none).
pub fn count_words(s: &str) -> usize {
    let mut words = 0;
    for piece in s.split_whitespace() {
        let mut run_has_alnum = false;
        for c in piece.chars() {
            if is_cjk(c) {
                words += usize::from(run_has_alnum) + 1;
                run_has_alnum = false;
            } else if c.is_alphanumeric() {
                run_has_alnum = true;
            }
        }
        words += usize::from(run_has_alnum);
    }
    words
}

/// Approximate tokens, close to what BPE tokenizers (cl100k, o200k, Qwen, Llama 3) produce
/// without depending on any of them: one per CJK character, and ⌈n / 4⌉ per run of n other
/// non-space characters (English averages about four characters per token).
pub fn count_tokens(s: &str) -> usize {
    let mut tokens = 0;
    for piece in s.split_whitespace() {
        let mut run = 0usize;
        for c in piece.chars() {
            if is_cjk(c) {
                tokens += run.div_ceil(4) + 1;
                run = 0;
            } else {
                run += 1;
            }
        }
        tokens += run.div_ceil(4);
    }
    tokens
}

pub(super) fn length(spec: &GraderSpec, min: Option<u64>, max: Option<u64>, unit: LengthUnit, output: &str) -> Grade {
    let text = output.trim();
    let (n, unit_name) = match unit {
        LengthUnit::Chars => (text.chars().count(), "characters"),
        LengthUnit::Tokens => (count_tokens(text), "tokens (approx.)"),
        LengthUnit::Words => (count_words(text), "words"),
    };
    let n64 = n as u64;
    if let Some(lo) = min
        && n64 < lo
    {
        return Grade::pass_fail(spec, false, format!("{n} {unit_name}; at least {lo} wanted"));
    }
    if let Some(hi) = max
        && n64 > hi
    {
        return Grade::pass_fail(spec, false, format!("{n} {unit_name}; at most {hi} wanted"));
    }
    Grade::pass_fail(spec, true, format!("{n} {unit_name}, within bounds"))
}

#[cfg(test)]
mod tests {
    use super::super::grade;
    use super::*;
    use serde_json::json;

    fn spec(json: &str) -> GraderSpec {
        let s: GraderSpec = serde_json::from_str(json).unwrap();
        s.validate().unwrap();
        s
    }

    #[test]
    fn exact_nfkc_makes_full_width_equal_half_width() {
        let plain = spec(r#"{"kind":"exact"}"#);
        let folded = spec(r#"{"kind":"exact","nfkc":true}"#);
        assert!(!grade(&plain, "ＡＢＣ１２３", Some(&json!("ABC123"))).passed);
        assert!(grade(&folded, "ＡＢＣ１２３", Some(&json!("ABC123"))).passed);
        // NFKC is not case folding.
        assert!(!grade(&folded, "ａｂｃ", Some(&json!("ABC"))).passed);
        let both = spec(r#"{"kind":"exact","nfkc":true,"ignore_case":true}"#);
        assert!(grade(&both, "ａｂｃ", Some(&json!("ABC"))).passed);
    }

    #[test]
    fn exact_ignores_punctuation_only_when_asked() {
        let plain = spec(r#"{"kind":"exact"}"#);
        let nopunct = spec(r#"{"kind":"exact","ignore_punctuation":true}"#);
        assert!(!grade(&plain, "好的。", Some(&json!("好的"))).passed);
        assert!(grade(&nopunct, "好的。", Some(&json!("好的"))).passed);
        assert!(grade(&nopunct, "「是」！", Some(&json!("是"))).passed);
        assert!(grade(&nopunct, "Yes, sir!", Some(&json!("Yes sir"))).passed);
        // Digits and letters are never punctuation.
        assert!(!grade(&nopunct, "A1", Some(&json!("A2"))).passed);
        let g = grade(&plain, "positive", Some(&json!("positiv")));
        assert!(g.reason.contains("differs at character 8"), "{}", g.reason);
    }

    #[test]
    fn exact_compares_structured_expected_as_compact_json() {
        let plain = spec(r#"{"kind":"exact"}"#);
        assert!(grade(&plain, "42", Some(&json!(42))).passed);
        assert!(!grade(&plain, "x", None).passed);
    }

    #[test]
    fn contains_family() {
        let one = spec(r#"{"kind":"contains","value":"退款"}"#);
        assert!(grade(&one, "我们已为您办理退款。", None).passed);
        assert!(!grade(&one, "我们已为您办理。", None).passed);

        let all = spec(r#"{"kind":"contains-all","values":["alpha","beta","gamma"],"ignore_case":true}"#);
        let g = grade(&all, "ALPHA and Beta", None);
        assert!(!g.passed);
        assert!((g.score - 2.0 / 3.0).abs() < 1e-12);
        assert!(g.reason.contains("\"gamma\""), "{}", g.reason);

        let any = spec(r#"{"kind":"contains-any","values":["cat","dog"]}"#);
        assert!(grade(&any, "hotdog", None).passed);
        assert!(!grade(&any, "Cat", None).passed);

        let none = spec(r#"{"kind":"not-contains","values":["sorry","抱歉"]}"#);
        assert!(grade(&none, "Here you go.", None).passed);
        let g = grade(&none, "很抱歉", None);
        assert!(!g.passed);
        assert_eq!(g.score, 0.5);

        // Without value(s), the expected value (or list) is used.
        let from_expected = spec(r#"{"kind":"contains-all"}"#);
        assert!(grade(&from_expected, "北京 上海", Some(&json!(["北京", "上海"]))).passed);
        assert!(!grade(&from_expected, "北京", Some(&json!(["北京", "上海"]))).passed);
        assert!(!grade(&from_expected, "anything", None).passed);
    }

    #[test]
    fn contains_options_are_validated() {
        let both: GraderSpec = serde_json::from_str(r#"{"kind":"contains","value":"a","values":["b"]}"#).unwrap();
        assert_eq!(both.validate().unwrap_err().field, "values");
        let empty: GraderSpec = serde_json::from_str(r#"{"kind":"contains-any","values":[]}"#).unwrap();
        assert_eq!(empty.validate().unwrap_err().field, "values");
    }

    #[test]
    fn regex_is_compiled_at_parse_time() {
        let err = serde_json::from_str::<GraderSpec>(r#"{"kind":"regex","pattern":"a(b"}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`pattern` is not a valid regular expression"),
            "{err}"
        );
        let date = spec(r#"{"kind":"regex","pattern":"^\\d{4}-\\d{2}-\\d{2}$"}"#);
        assert!(grade(&date, "2024-03-05", None).passed);
        assert!(!grade(&date, "2024-3-5", None).passed);
        let no_urls = spec(r#"{"kind":"regex","pattern":"https?://","negate":true}"#);
        assert!(grade(&no_urls, "纯文本", None).passed);
        let g = grade(&no_urls, "see http://x", None);
        assert!(!g.passed && g.reason.contains("must not"), "{}", g.reason);
        // Round-trips as its source text.
        assert_eq!(
            serde_json::to_value(&date).unwrap()["pattern"],
            json!("^\\d{4}-\\d{2}-\\d{2}$")
        );
    }

    #[test]
    fn word_and_token_counts_are_cjk_aware() {
        assert_eq!(count_words("Hello, world!"), 2);
        assert_eq!(count_words("今天天气很好"), 6);
        assert_eq!(count_words("我用Python写代码"), 6);
        assert_eq!(count_words(" , — "), 0);
        // "internationalization" is 20 chars → 5; "is" → 1; "hard." → 2.
        assert_eq!(count_tokens("internationalization is hard."), 8);
        assert_eq!(count_tokens("你好world"), 4);
    }

    #[test]
    fn length_bounds_in_each_unit() {
        let chars = spec(r#"{"kind":"length","max":5}"#);
        assert!(grade(&chars, "  你好世界啊 \n", None).passed);
        assert!(!grade(&chars, "你好世界啊!", None).passed);
        let words = spec(r#"{"kind":"length","min":3,"max":4,"unit":"words"}"#);
        assert!(grade(&words, "one two three", None).passed);
        let g = grade(&words, "one two", None);
        assert!(!g.passed && g.reason.starts_with("2 words; at least 3"), "{}", g.reason);
        let bad: GraderSpec = serde_json::from_str(r#"{"kind":"length"}"#).unwrap();
        assert!(bad.validate().is_err());
    }
}
