//! The mock's approximate tokenizer: deterministic, dependency-free, close enough to real BPE
//! counts for load shaping. The rule (documented in docs/mock.md):
//! - whitespace is free: it belongs to the token that follows it (trailing whitespace to the
//!   last token), so the pieces of a text concatenate back to the text exactly;
//! - each CJK character (Han, kana, Hangul, CJK and full-width punctuation) is one token;
//! - a run of letters is one token per 6 letters; a run of digits one token per 3 digits;
//! - every other character (punctuation, symbols, emoji) is one token.
//!
//! Chat prompts add 4 tokens per message and 3 for the reply's priming, as OpenAI's own
//! counting guide does.
use std::ops::Range;

const LETTERS_PER_TOKEN: usize = 6;
const DIGITS_PER_TOKEN: usize = 3;
/// Per-message overhead of the chat format (role and separators), and the reply's priming.
pub const CHAT_TOKENS_PER_MESSAGE: u32 = 4;
pub const CHAT_REPLY_PRIMING: u32 = 3;

/// Han, kana, Hangul, CJK symbols/punctuation and full-width forms.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF        // Hangul Jamo
        | 0x2E80..=0x2FDF      // CJK radicals, Kangxi
        | 0x3000..=0x30FF      // CJK symbols and punctuation, Hiragana, Katakana
        | 0x3100..=0x31FF      // Bopomofo, Hangul compatibility, kana extensions
        | 0x3400..=0x4DBF      // CJK extension A
        | 0x4E00..=0x9FFF      // CJK unified ideographs
        | 0xAC00..=0xD7AF      // Hangul syllables
        | 0xF900..=0xFAFF      // CJK compatibility ideographs
        | 0xFF00..=0xFFEF      // half-width and full-width forms
        | 0x20000..=0x3FFFF    // CJK extensions B and later
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Single,
}

fn class(c: char) -> Class {
    if is_cjk(c) {
        Class::Single
    } else if c.is_numeric() {
        Class::Digit
    } else if c.is_alphabetic() {
        Class::Letter
    } else {
        Class::Single
    }
}

/// Byte ranges of the tokens of `text`, in order; they concatenate back to `text` unless the
/// text is only whitespace (then there are none).
pub fn token_spans(text: &str) -> TokenSpans<'_> {
    TokenSpans { text, pos: 0 }
}

pub struct TokenSpans<'a> {
    text: &'a str,
    pos: usize,
}

impl Iterator for TokenSpans<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let start = self.pos;
        let rest = &self.text[start..];
        let body = rest.find(|c: char| !c.is_whitespace())?;
        let mut chars = rest[body..].char_indices();
        let (_, first) = chars.next()?;
        let kind = class(first);
        let limit = match kind {
            Class::Letter => LETTERS_PER_TOKEN,
            Class::Digit => DIGITS_PER_TOKEN,
            Class::Single => 1,
        };
        let mut end = body + first.len_utf8();
        for (taken, (offset, c)) in (1..).zip(chars) {
            if taken == limit || class(c) != kind {
                break;
            }
            end = body + offset + c.len_utf8();
        }
        let mut end = start + end;
        // Trailing whitespace belongs to the last token, so nothing of the text is lost.
        if self.text[end..].trim_start().is_empty() {
            end = self.text.len();
        }
        self.pos = end;
        Some(start..end)
    }
}

/// Approximate token count of one text.
pub fn count_tokens(text: &str) -> u32 {
    token_spans(text).count() as u32
}

/// Approximate prompt tokens of a chat request from its message contents.
pub fn count_chat_tokens<'a>(contents: impl IntoIterator<Item = &'a str>) -> u32 {
    contents
        .into_iter()
        .map(|c| count_tokens(c) + CHAT_TOKENS_PER_MESSAGE)
        .sum::<u32>()
        + CHAT_REPLY_PRIMING
}

/// Words the filler text is made of: every one is a single token under the rule above, and
/// carries its leading space so pieces can be streamed without allocating.
const FILLER: [&str; 64] = [
    " the", " model", " was", " asked", " to", " write", " a", " long", " answer", " about", " many", " things",
    " and", " it", " kept", " going", " while", " tokens", " flowed", " out", " at", " steady", " pace", " for",
    " anyone", " who", " timed", " them", " with", " care", " each", " word", " is", " one", " token", " here", " so",
    " counts", " stay", " exact", " under", " load", " from", " start", " finish", " every", " stream", " gets",
    " its", " own", " text", " yet", " same", " seed", " gives", " same", " words", " again", " when", " run",
    " twice", " over", " time", " end",
];

/// The `index`-th filler token of the text seeded by `seed`. The first token has no leading
/// space; all others start with one.
pub fn filler_token(seed: u64, index: u32) -> &'static str {
    let h = super::rng::mix(seed ^ u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let word = FILLER[(h % FILLER.len() as u64) as usize];
    if index == 0 { &word[1..] } else { word }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Vec<&str> {
        token_spans(text).map(|r| &text[r]).collect()
    }

    #[test]
    fn english_words_punctuation_and_numbers() {
        assert_eq!(pieces("Hello, world!"), vec!["Hello", ",", " world", "!"]);
        // 20 letters: 6 + 6 + 6 + 2.
        assert_eq!(count_tokens("internationalization"), 4);
        assert_eq!(pieces("in 2024"), vec!["in", " 202", "4"]);
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("   \n "), 0);
    }

    #[test]
    fn cjk_is_one_token_per_character() {
        assert_eq!(count_tokens("我的发票金额不对"), 8);
        assert_eq!(count_tokens("我的发票，请帮我。"), 9);
        assert_eq!(pieces("快递ok"), vec!["快", "递", "ok"]);
        assert_eq!(count_tokens("カタカナ 한국어"), 7);
    }

    #[test]
    fn pieces_rebuild_the_text_exactly() {
        for text in ["  lead and trail  ", "a\n\nb", "混合 mixed 文本, 123456789!", "x"] {
            assert_eq!(pieces(text).concat(), text);
        }
    }

    #[test]
    fn chat_overhead_and_filler() {
        assert_eq!(count_chat_tokens(["Hello, world!", "好"]), 4 + 4 + 1 + 4 + 3);
        assert!(FILLER.iter().all(|w| count_tokens(w) == 1 && w.starts_with(' ')));
        let text: String = (0..50).map(|i| filler_token(9, i)).collect();
        assert_eq!(count_tokens(&text), 50);
        assert!(!text.starts_with(' '));
        assert_eq!(filler_token(9, 3), filler_token(9, 3));
    }
}
