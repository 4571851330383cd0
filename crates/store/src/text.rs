//! Text that a server, a model or a person sent is stored losslessly on both backends.
//!
//! SQLite's TEXT holds any Unicode scalar value, U+0000 included, so SQLite stores text as it
//! is ([`TextCodec::Verbatim`]). PostgreSQL's `text` refuses NUL (a single NUL in one answer
//! used to fail the whole batch), so on PostgreSQL the columns that hold such text go through
//! [`TextCodec::Escaped`]: NUL is written as [`ESCAPE`] followed by `0`, and [`ESCAPE`] itself
//! as [`ESCAPE`] twice; every other character (the other control characters included, which
//! PostgreSQL accepts) is written as it is. The encoding is applied when a value is bound and
//! undone when a row is read, so nothing above the store sees it; it is injective, so equality
//! (e.g. "did two candidates give the same output") is the same on encoded text.
//!
//! The escape is U+E000, the first private-use character: no standard text means anything by
//! it, and it is one character (never a byte sequence a driver could split). Migration 0013
//! (PostgreSQL) doubled every U+E000 already stored in these columns, so rows written before it
//! read back as they were.
//!
//! Columns encoded (PostgreSQL): `request_records.output`, `.reasoning`, `.error_detail`,
//! `.finish_reason`; `grades.reason`; `run_events.message`; `runs.error`; `scorecards.note`;
//! `run_candidate_stops.reason`.
//! JSON columns need nothing: serde_json writes control characters as `\u0000` escapes.
use std::borrow::Cow;

/// The escape character of [`TextCodec::Escaped`].
pub const ESCAPE: char = '\u{E000}';

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextCodec {
    /// Stored as it is (SQLite).
    Verbatim,
    /// NUL and [`ESCAPE`] escaped (PostgreSQL).
    Escaped,
}

impl TextCodec {
    /// The text as it is written to the database.
    pub fn encode(self, text: &str) -> Cow<'_, str> {
        if self == TextCodec::Verbatim || !text.contains(['\0', ESCAPE]) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len() + 8);
        for c in text.chars() {
            match c {
                '\0' => {
                    out.push(ESCAPE);
                    out.push('0');
                }
                ESCAPE => {
                    out.push(ESCAPE);
                    out.push(ESCAPE);
                }
                c => out.push(c),
            }
        }
        Cow::Owned(out)
    }

    pub fn encode_opt(self, text: Option<&str>) -> Option<Cow<'_, str>> {
        text.map(|t| self.encode(t))
    }

    /// The text as it was before [`TextCodec::encode`]. An escape followed by anything else
    /// (which `encode` never writes) is kept as it is rather than dropped.
    pub fn decode(self, text: String) -> String {
        if self == TextCodec::Verbatim || !text.contains(ESCAPE) {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c != ESCAPE {
                out.push(c);
                continue;
            }
            match chars.peek() {
                Some('0') => {
                    chars.next();
                    out.push('\0');
                }
                Some(&ESCAPE) => {
                    chars.next();
                    out.push(ESCAPE);
                }
                _ => out.push(ESCAPE),
            }
        }
        out
    }

    pub fn decode_opt(self, text: Option<String>) -> Option<String> {
        text.map(|t| self.decode(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_awkward_character() -> String {
        let mut s: String = (0u8..0x20).map(char::from).collect();
        s.push('\u{7f}');
        s.push(ESCAPE);
        s.push_str("0\u{E000}0\u{E000}\u{E000}0 é 漢字 \u{FEFF}");
        s
    }

    #[test]
    fn escaped_text_has_no_nul_and_round_trips() {
        let text = every_awkward_character();
        let stored = TextCodec::Escaped.encode(&text);
        assert!(!stored.contains('\0'));
        assert_eq!(TextCodec::Escaped.decode(stored.into_owned()), text);
    }

    #[test]
    fn plain_text_is_not_copied_and_verbatim_changes_nothing() {
        assert!(matches!(TextCodec::Escaped.encode("plain\ttext\n"), Cow::Borrowed(_)));
        let text = every_awkward_character();
        assert_eq!(TextCodec::Verbatim.encode(&text), text.as_str());
        assert_eq!(TextCodec::Verbatim.decode(text.clone()), text);
    }

    #[test]
    fn encoding_is_injective_on_neighbours() {
        let a = TextCodec::Escaped.encode("\0").into_owned();
        let b = TextCodec::Escaped.encode("\u{E000}0").into_owned();
        assert_ne!(a, b);
        assert_eq!(TextCodec::Escaped.decode(b), "\u{E000}0");
    }

    #[test]
    fn a_stray_escape_is_kept() {
        assert_eq!(TextCodec::Escaped.decode("a\u{E000}b".into()), "a\u{E000}b");
        assert_eq!(TextCodec::Escaped.decode("a\u{E000}".into()), "a\u{E000}");
    }
}
