//! Numbers and currency amounts as people and models write them, and the `numeric` grader.
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::spec::{GraderSpec, NumberPick};
use super::text::nfkc;
use super::{Grade, quote};
use crate::format;

/// Currency words and codes removed before reading an amount (longest first, so `人民币`
/// goes before `元`). Compared case-insensitively for the Latin codes.
const CURRENCY_WORDS: &[&str] = &[
    "人民币",
    "美元",
    "欧元",
    "日元",
    "港币",
    "港元",
    "英镑",
    "元整",
    "圆",
    "元",
    "块",
    "RMB",
    "CNY",
    "USD",
    "EUR",
    "GBP",
    "JPY",
    "HKD",
    "US",
    "HK",
];
/// Currency signs (after NFKC, `￥` is `¥` and `＄` is `$`).
const CURRENCY_SIGNS: &[char] = &['¥', '$', '€', '£', '₹', '₩', '₽', '₺'];

/// Reads a whole string as a number or amount: `1234.5`, `¥1,234.50`, `1234.5 元`,
/// `$1,234.50`, `1.234,50 €`, `-3`, `1.5万`, `RMB 2,000`, full-width `１２３`. None when the
/// string is anything else (`12 apples`, `2024-03-05`).
///
/// Separators: with both `,` and `.`, the last one is the decimal point; a lone `,` followed
/// by exactly three digits groups thousands (`1,234`), otherwise it is a decimal comma
/// (`1,5`); several `.` group thousands (`1.234.567`), a single `.` is a decimal point.
pub fn parse_amount(raw: &str) -> Option<f64> {
    let mut s = nfkc(raw).trim().to_string();
    for word in CURRENCY_WORDS {
        // ASCII upper-casing keeps byte offsets, so `at` indexes `s` too.
        if let Some(at) = s.to_ascii_uppercase().find(word) {
            s.replace_range(at..at + word.len(), " ");
        }
    }
    let s: String = s.chars().filter(|c| !CURRENCY_SIGNS.contains(c)).collect();
    let s = s.trim();
    let (s, multiplier) = match s.chars().last() {
        Some('万') => (&s[..s.len() - '万'.len_utf8()], 1e4),
        Some('亿') => (&s[..s.len() - '亿'.len_utf8()], 1e8),
        Some('千') => (&s[..s.len() - '千'.len_utf8()], 1e3),
        _ => (s, 1.0),
    };
    let s = s.trim().replace('−', "-");
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, s.strip_prefix('+').unwrap_or(&s).trim_start()),
    };
    let digits = join_digit_groups(digits)?;
    if digits.is_empty()
        || !digits.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '.')
        || !digits.starts_with(|c: char| c.is_ascii_digit() || c == '.')
    {
        return None;
    }
    let plain = normalise_separators(&digits)?;
    let value: f64 = plain.parse().ok()?;
    let value = value * multiplier;
    Some(if negative { -value } else { value })
}

/// `1 234 567,5` → `1234567,5`: spaces (also no-break) between digit groups of three go.
fn join_digit_groups(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split([' ', '\u{a0}', '\u{202f}']).filter(|p| !p.is_empty()).collect();
    if parts.len() <= 1 {
        return Some(parts.first().copied().unwrap_or_default().to_string());
    }
    let grouped = parts[1..]
        .iter()
        .all(|p| p.chars().take_while(char::is_ascii_digit).count() == 3);
    grouped.then(|| parts.concat())
}

fn normalise_separators(s: &str) -> Option<String> {
    let commas = s.matches(',').count();
    let dots = s.matches('.').count();
    let out = match (commas, dots) {
        (0, 0) | (0, 1) => s.to_string(),
        (0, _) => {
            if !groups_of_three(s, '.') {
                return None;
            }
            s.replace('.', "")
        }
        (_, 0) => {
            let after = s.rsplit(',').next().unwrap_or_default();
            if commas == 1 && after.len() != 3 {
                s.replace(',', ".")
            } else {
                if !groups_of_three(s, ',') {
                    return None;
                }
                s.replace(',', "")
            }
        }
        _ => {
            let last_comma = s.rfind(',')?;
            let last_dot = s.rfind('.')?;
            if last_dot > last_comma {
                s.replace(',', "")
            } else {
                s.replace('.', "").replace(',', ".")
            }
        }
    };
    (out.matches('.').count() <= 1).then_some(out)
}

fn groups_of_three(s: &str, sep: char) -> bool {
    let mut parts = s.split(sep);
    let first = parts.next().unwrap_or_default();
    !first.is_empty() && first.len() <= 3 && parts.all(|p| p.len() == 3)
}

/// Number-like runs in prose: `-12`, `1,234.5`, `3.0e8`, `1.5万`. The thousands pattern wants
/// groups of exactly three, so `2024-03-05` yields 2024, 3, 5 (a `-` right after a letter or
/// digit is a hyphen, not a sign).
static NUMBER_IN_TEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[-−+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*[万亿])?")
        .expect("number pattern compiles")
});

/// Every number written in `text`, in order.
pub fn numbers_in(text: &str) -> Vec<f64> {
    let text = nfkc(text);
    NUMBER_IN_TEXT
        .find_iter(&text)
        .filter_map(|m| {
            let mut s = m.as_str();
            let glued = text[..m.start()].chars().last().is_some_and(|c| c.is_alphanumeric());
            if glued && s.starts_with(['-', '−', '+']) {
                s = &s[s.chars().next().map_or(0, char::len_utf8)..];
            }
            let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
            let (body, multiplier) = match compact.chars().last() {
                Some('万') => (compact.trim_end_matches('万').to_string(), 1e4),
                Some('亿') => (compact.trim_end_matches('亿').to_string(), 1e8),
                _ => (compact.clone(), 1.0),
            };
            let body = body.replace('−', "-").replace(',', "");
            body.parse::<f64>().ok().map(|v| v * multiplier)
        })
        .collect()
}

/// A JSON value as a number: numbers as they are, strings read by `parse_amount`.
pub fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_amount(s),
        _ => None,
    }
}

/// Equal up to floating-point noise (`0.1 + 0.2` = `0.3`; `1234.5` = `1234.50`).
pub fn same_number(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

pub(super) fn numeric(
    spec: &GraderSpec,
    value: Option<f64>,
    abs_tol: f64,
    rel_tol: f64,
    pick: NumberPick,
    output: &str,
    expected: Option<&Value>,
) -> Grade {
    let want = match (value, expected) {
        (Some(v), _) => v,
        (None, Some(e)) => match number_of(e) {
            Some(v) => v,
            None => return Grade::pass_fail(spec, false, format!("expected value {e} is not a number")),
        },
        (None, None) => return Grade::pass_fail(spec, false, "case has no expected number"),
    };
    // A whole-output amount (`1.234,50 €`) reads better as one value than as its digit runs.
    let got = parse_amount(output).or_else(|| {
        let found = numbers_in(output);
        match pick {
            NumberPick::First => found.first().copied(),
            NumberPick::Last => found.last().copied(),
        }
    });
    let Some(got) = got else {
        return Grade::pass_fail(spec, false, format!("no number in {}", quote(output.trim(), 60)));
    };
    let allowed = abs_tol.max(rel_tol * want.abs());
    let diff = (got - want).abs();
    let passed = diff <= allowed || same_number(got, want);
    let tolerance = if allowed > 0.0 {
        format!(" ± {}", format::shortest(allowed))
    } else {
        String::new()
    };
    let reason = format!(
        "got {}, expected {}{tolerance}{}",
        format::shortest(got),
        format::shortest(want),
        if passed { "" } else { " (outside tolerance)" }
    );
    Grade::pass_fail(spec, passed, reason)
}

#[cfg(test)]
mod tests {
    use super::super::grade;
    use super::*;
    use serde_json::json;

    #[test]
    fn amounts_in_common_notations() {
        for s in [
            "1234.5",
            "¥1,234.50",
            "￥1,234.50",
            "1234.5 元",
            "1,234.50元",
            "$1,234.50",
            "US$ 1,234.50",
            "1.234,50 €",
            "1 234,50 €",
            "RMB 1,234.5",
            "人民币1234.50元",
            "１２３４.５",
        ] {
            assert_eq!(parse_amount(s), Some(1234.5), "{s}");
        }
        assert_eq!(parse_amount("1,5"), Some(1.5));
        assert_eq!(parse_amount("1,234"), Some(1234.0));
        assert_eq!(parse_amount("1.234.567"), Some(1_234_567.0));
        assert_eq!(parse_amount("-¥20"), Some(-20.0));
        assert_eq!(parse_amount("1.5万"), Some(15_000.0));
        assert_eq!(parse_amount("3亿元"), Some(300_000_000.0));
        for s in ["", "abc", "12 apples", "2024-03-05", "1,23,4", "1.2.3", "1 2"] {
            assert_eq!(parse_amount(s), None, "{s}");
        }
    }

    #[test]
    fn numbers_in_prose() {
        assert_eq!(
            numbers_in("共 3 件，合计 1,234.50 元，约 1.2万"),
            vec![3.0, 1234.5, 12_000.0]
        );
        assert_eq!(numbers_in("2024-03-05"), vec![2024.0, 3.0, 5.0]);
        assert_eq!(numbers_in("from -4 to 5."), vec![-4.0, 5.0]);
        assert_eq!(numbers_in("c = 3.0e8 m/s"), vec![3.0e8]);
    }

    #[test]
    fn numeric_grader_tolerances_and_pick() {
        let exact: GraderSpec = serde_json::from_str(r#"{"kind":"numeric"}"#).unwrap();
        assert!(grade(&exact, "The answer is 42.", Some(&json!(42))).passed);
        assert!(grade(&exact, "¥1,234.50", Some(&json!("1234.5"))).passed);
        assert!(grade(&exact, "0.30000000000000004", Some(&json!(0.3))).passed);
        let g = grade(&exact, "41", Some(&json!(42)));
        assert!(
            !g.passed && g.reason == "got 41, expected 42 (outside tolerance)",
            "{}",
            g.reason
        );
        // Last number by default (reasoning ends with the answer); first on request.
        assert!(grade(&exact, "3 apples + 4 apples = 7", Some(&json!(7))).passed);
        let first: GraderSpec = serde_json::from_str(r#"{"kind":"numeric","pick":"first"}"#).unwrap();
        assert!(grade(&first, "7, because 3 + 4", Some(&json!(7))).passed);

        let abs: GraderSpec = serde_json::from_str(r#"{"kind":"numeric","value":100,"abs_tol":0.5}"#).unwrap();
        assert!(grade(&abs, "100.5", None).passed);
        assert!(!grade(&abs, "100.6", None).passed);
        let rel: GraderSpec = serde_json::from_str(r#"{"kind":"numeric","rel_tol":0.01}"#).unwrap();
        assert!(grade(&rel, "about 1010", Some(&json!(1000))).passed);
        assert!(!grade(&rel, "about 1011", Some(&json!(1000))).passed);
        assert!(!grade(&rel, "no idea", Some(&json!(1000))).passed);
        assert!(!grade(&rel, "5", Some(&json!("five"))).passed);
        let neg: GraderSpec = serde_json::from_str(r#"{"kind":"numeric","abs_tol":-1}"#).unwrap();
        assert_eq!(neg.validate().unwrap_err().field, "abs_tol");
    }
}
