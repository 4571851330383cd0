//! Overlap with reference text: ROUGE-L (longest common subsequence F1) and chrF (character
//! n-gram F-score). Both work on Chinese: ROUGE-L tokenises CJK text into characters and
//! everything else into words; chrF is character-based to begin with.
use std::collections::HashMap;

use serde_json::Value;

use super::spec::GraderSpec;
use super::text::{is_cjk, nfkc};
use super::{Grade, expected_text};

/// ROUGE-L tokens: NFKC and lower-cased; every CJK character is a token, every run of other
/// letters and digits is a token, punctuation and spaces separate. So `今天天气很好` is six
/// tokens and `用Rust写` is `用 rust 写`.
pub fn rouge_tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in nfkc(text).to_lowercase().chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            tokens.push(c.to_string());
        } else if c.is_alphanumeric() {
            word.push(c);
        } else if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// Length of the longest common subsequence (two-row dynamic programme).
pub fn lcs_len<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut prev = vec![0usize; b.len() + 1];
    let mut cur = vec![0usize; b.len() + 1];
    for x in a {
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = if x == y { prev[j] + 1 } else { prev[j + 1].max(cur[j]) };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// ROUGE-L F1 of `candidate` against `reference`: P = LCS / |candidate|, R = LCS / |reference|.
pub fn rouge_l(candidate: &str, reference: &str) -> f64 {
    let (c, r) = (rouge_tokens(candidate), rouge_tokens(reference));
    if c.is_empty() || r.is_empty() {
        return 0.0;
    }
    let lcs = lcs_len(&c, &r) as f64;
    if lcs == 0.0 {
        return 0.0;
    }
    let (p, rec) = (lcs / c.len() as f64, lcs / r.len() as f64);
    2.0 * p * rec / (p + rec)
}

/// chrF's defaults, as in sacreBLEU: character n-grams up to 6, recall weighted β = 2.
const CHRF_ORDER: usize = 6;
const CHRF_BETA: f64 = 2.0;

/// Per order n: (n-grams in the hypothesis, in the reference, matched).
pub fn chrf_stats(hypothesis: &str, reference: &str) -> Vec<[u64; 3]> {
    // sacreBLEU's default drops all whitespace and keeps case.
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<Vec<char>>();
    let (h, r) = (squash(hypothesis), squash(reference));
    (1..=CHRF_ORDER)
        .map(|n| {
            let (hc, rc) = (ngram_counts(&h, n), ngram_counts(&r, n));
            let matched: u64 = hc.iter().map(|(g, k)| (*k).min(rc.get(g).copied().unwrap_or(0))).sum();
            [hc.values().sum(), rc.values().sum(), matched]
        })
        .collect()
}

fn ngram_counts(chars: &[char], n: usize) -> HashMap<&[char], u64> {
    let mut counts = HashMap::new();
    if chars.len() >= n {
        for gram in chars.windows(n) {
            *counts.entry(gram).or_insert(0) += 1;
        }
    }
    counts
}

/// chrF in [0, 1] from (summed) statistics: precision and recall are averaged over the orders
/// where both sides have n-grams, then combined as F-β (sacreBLEU 2.x without smoothing).
pub fn chrf_from_stats(stats: &[[u64; 3]]) -> f64 {
    let (mut p, mut r, mut orders) = (0.0, 0.0, 0usize);
    for &[hyp, reference, matched] in stats {
        if hyp > 0 && reference > 0 {
            p += matched as f64 / hyp as f64;
            r += matched as f64 / reference as f64;
            orders += 1;
        }
    }
    if orders == 0 {
        return 0.0;
    }
    let (p, r) = (p / orders as f64, r / orders as f64);
    if p + r == 0.0 {
        return 0.0;
    }
    let b2 = CHRF_BETA * CHRF_BETA;
    (1.0 + b2) * p * r / (b2 * p + r)
}

/// Sentence-level chrF of `hypothesis` against `reference`, in [0, 1] (sacreBLEU shows ×100).
pub fn chrf(hypothesis: &str, reference: &str) -> f64 {
    chrf_from_stats(&chrf_stats(hypothesis, reference))
}

/// The references: a string, or every string of an array (the best one counts).
fn references(expected: Option<&Value>) -> Vec<String> {
    match expected {
        Some(Value::Array(items)) => items
            .iter()
            .map(expected_text)
            .filter(|s| !s.trim().is_empty())
            .collect(),
        Some(other) => vec![expected_text(other)]
            .into_iter()
            .filter(|s| !s.trim().is_empty())
            .collect(),
        None => Vec::new(),
    }
}

pub(super) fn overlap(
    spec: &GraderSpec,
    metric: fn(&str, &str) -> f64,
    min: f64,
    output: &str,
    expected: Option<&Value>,
) -> Grade {
    let refs = references(expected);
    if refs.is_empty() {
        return Grade::pass_fail(spec, false, "case has no expected reference text");
    }
    let best = refs.iter().map(|r| metric(output, r)).fold(0.0, f64::max);
    let passed = best >= min;
    let of = if refs.len() > 1 {
        format!(" (best of {} references)", refs.len())
    } else {
        String::new()
    };
    Grade::new(
        spec,
        best,
        passed,
        format!(
            "{} {best:.3}{of}; {} {min:.2}",
            spec.name(),
            if passed { "at least" } else { "below" }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::grade;
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_split_cjk_into_characters_and_latin_into_words() {
        assert_eq!(rouge_tokens("今天天气很好"), ["今", "天", "天", "气", "很", "好"]);
        assert_eq!(
            rouge_tokens("我用Rust写Web服务！"),
            ["我", "用", "rust", "写", "web", "服", "务"]
        );
        assert_eq!(rouge_tokens("The cat, the HAT."), ["the", "cat", "the", "hat"]);
    }

    #[test]
    fn rouge_l_by_hand() {
        // 今天天气很好 vs 今天天气不错: LCS 今天天气 = 4 of 6 each way → P = R = F = 2/3.
        assert!((rouge_l("今天天气很好", "今天天气不错") - 2.0 / 3.0).abs() < 1e-12);
        // "the cat sat on the mat" vs "the cat lay on the mat": LCS 5 of 6 → 5/6.
        assert!((rouge_l("the cat sat on the mat", "the cat lay on the mat") - 5.0 / 6.0).abs() < 1e-12);
        // Different lengths: candidate 3 tokens, reference 6, LCS 3 → P 1, R 1/2, F 2/3.
        assert!((rouge_l("猫 坐 着", "那只猫坐着呢") - 2.0 / 3.0).abs() < 1e-12);
        // Order matters (subsequence, not bag): a b c vs c b a → LCS 1 → 1/3.
        assert!((rouge_l("a b c", "c b a") - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(rouge_l("", "x"), 0.0);
        assert_eq!(rouge_l("完全不同", "毫无关系"), 0.0);
    }

    #[test]
    fn chrf_by_hand_and_against_sacrebleu() {
        // abc vs abd: 1-grams 2/3, 2-grams 1/2, 3-grams 0/1 → P = R = 7/18.
        assert!((chrf("abc", "abd") - 7.0 / 18.0).abs() < 1e-12);
        // 今天天气很好 vs 今天天气不错: n=1 4/6, n=2 3/5, n=3 2/4, n=4 1/3, n=5 0/2, n=6 0/1
        // → P = R = (2/3 + 3/5 + 1/2 + 1/3) / 6 = 0.35 (sacreBLEU 2.6: 35.0).
        assert!((chrf("今天天气很好", "今天天气不错") - 0.35).abs() < 1e-12);
        // sacreBLEU 2.6 sentence_score: 61.576379378113785.
        let s = chrf(
            "The relationship between Obama and Netanyahu is not exactly friendly.",
            "The ties between Obama and Netanyahu are not particularly friendly.",
        );
        assert!((s - 0.6157637937811378).abs() < 1e-12, "{s}");
        // sacreBLEU 2.6 sentence_score: 34.66673426620699 (recall-weighted, unequal lengths).
        assert!((chrf("猫坐在垫子上", "猫在垫子上坐着") - 0.346_667_342_662_069_9).abs() < 1e-12);
        // Corpus level sums statistics first: sacreBLEU 2.6 corpus_score 84.64214891738334.
        let pairs = [
            (
                "The relationship between cats and dogs is not exactly friendly.",
                "The relationship between dogs and cats is not exactly friendly.",
            ),
            (
                "a good bookshop is just a genteel black hole that knows how to read.",
                "A good bookshop is just a genteel Black Hole that knows how to read.",
            ),
        ];
        let mut total = vec![[0u64; 3]; CHRF_ORDER];
        for (h, r) in pairs {
            for (t, s) in total.iter_mut().zip(chrf_stats(h, r)) {
                for k in 0..3 {
                    t[k] += s[k];
                }
            }
        }
        assert!((chrf_from_stats(&total) - 0.846_421_489_173_833_4).abs() < 1e-12);
        assert_eq!(chrf("", "abc"), 0.0);
    }

    #[test]
    fn graders_use_min_and_the_best_reference() {
        let rouge: GraderSpec = serde_json::from_str(r#"{"kind":"rouge-l","min":0.6}"#).unwrap();
        let g = grade(&rouge, "今天天气很好", Some(&json!("今天天气不错")));
        assert!(g.passed && (g.score - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(g.reason, "rouge-l 0.667; at least 0.60");
        let strict: GraderSpec = serde_json::from_str(r#"{"kind":"rouge-l","min":0.7}"#).unwrap();
        assert!(!grade(&strict, "今天天气很好", Some(&json!("今天天气不错"))).passed);
        let multi = grade(&strict, "今天天气很好", Some(&json!(["明天下雨", "今天天气很好！"])));
        assert!(
            multi.passed && multi.score == 1.0 && multi.reason.contains("best of 2"),
            "{}",
            multi.reason
        );
        let chrf_spec: GraderSpec = serde_json::from_str(r#"{"kind":"chrf","min":0.3}"#).unwrap();
        assert!(grade(&chrf_spec, "今天天气很好", Some(&json!("今天天气不错"))).passed);
        assert!(!grade(&chrf_spec, "x", None).passed);
        let bad: GraderSpec = serde_json::from_str(r#"{"kind":"chrf","min":35}"#).unwrap();
        assert_eq!(bad.validate().unwrap_err().field, "min");
    }
}
