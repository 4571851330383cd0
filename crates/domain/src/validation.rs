//! Field-level validation errors, shared by every form and file parser.

/// One problem with one named field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// All problems found in one input; empty means valid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The message for one field, if it has one (forms show it next to the input).
    pub fn get(&self, field: &str) -> Option<&str> {
        self.0.iter().find(|e| e.field == field).map(|e| e.message.as_str())
    }

    pub fn into_result<T>(self, value: T) -> Result<T, FieldErrors> {
        if self.is_empty() { Ok(value) } else { Err(self) }
    }
}

impl std::fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for FieldErrors {}

/// Longest text accepted in any single free-text field (names, notes, URLs…).
pub const MAX_FIELD_CHARS: usize = 10_000;
/// Longest accepted name (candidates, eval sets, profiles).
pub const MAX_NAME_CHARS: usize = 100;

/// Trimmed, required, bounded text; records an error and returns None otherwise.
pub fn required_text(errors: &mut FieldErrors, field: &str, raw: &str, max_chars: usize) -> Option<String> {
    let value = raw.trim();
    if value.is_empty() {
        errors.add(field, "is required");
        return None;
    }
    bounded(errors, field, value, max_chars)
}

/// Trimmed, optional, bounded text; empty becomes None.
pub fn optional_text(errors: &mut FieldErrors, field: &str, raw: &str, max_chars: usize) -> Option<String> {
    let value = raw.trim();
    if value.is_empty() {
        None
    } else {
        bounded(errors, field, value, max_chars)
    }
}

fn bounded(errors: &mut FieldErrors, field: &str, value: &str, max_chars: usize) -> Option<String> {
    let count = value.chars().count();
    if count > max_chars {
        errors.add(field, format!("is too long ({count} characters; at most {max_chars})"));
        return None;
    }
    Some(value.to_string())
}

/// A name for anything a user names (candidates, eval sets, profiles, runs, users, tokens):
/// trimmed, required, at most [`MAX_NAME_CHARS`], with at least one visible character, no
/// control, bidirectional-override or zero-width character (see [`name_problem`]), and no word
/// that mixes Latin with Greek, Cyrillic, Armenian or Cherokee letters (see [`mixed_scripts`]).
pub fn name(errors: &mut FieldErrors, field: &str, raw: &str) -> Option<String> {
    let value = required_text(errors, field, raw, MAX_NAME_CHARS)?;
    match name_problem(&value).or_else(|| mixed_scripts(&value)) {
        Some(problem) => {
            errors.add(field, problem);
            None
        }
        None => Some(value),
    }
}

/// Why `value` cannot be a name, or None. Refused: control characters (NUL, newlines, tabs…),
/// bidirectional embeddings, overrides, isolates and marks (they make a name read differently
/// from what it is), names made only of invisible characters (spaces, zero-width characters,
/// fillers), which would make a candidate impossible to tell apart, and invisible characters
/// anywhere in a name (two names that look the same would differ only by them), except the
/// joiners and variation selectors that writing systems and emoji need between visible
/// non-ASCII characters.
pub fn name_problem(value: &str) -> Option<&'static str> {
    if value.chars().any(char::is_control) {
        return Some("must not contain control characters (such as NUL, tab or line breaks)");
    }
    if value.chars().any(is_bidi_control) {
        return Some(
            "must not contain bidirectional override or isolate characters (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C)",
        );
    }
    if !value.chars().any(|c| !c.is_whitespace() && !is_invisible(c)) {
        return Some("must contain at least one visible character (not only spaces or zero-width characters)");
    }
    let chars: Vec<char> = value.chars().collect();
    let visible_non_ascii =
        |c: Option<&char>| c.is_some_and(|c| !c.is_ascii() && !c.is_whitespace() && !is_invisible(*c));
    for (i, c) in chars.iter().enumerate() {
        if !is_invisible(*c) {
            continue;
        }
        let before = i.checked_sub(1).and_then(|j| chars.get(j));
        let allowed = match c {
            // Zero-width (non-)joiners inside a word of a script or an emoji sequence.
            '\u{200C}' | '\u{200D}' => visible_non_ascii(before) && visible_non_ascii(chars.get(i + 1)),
            // Variation selectors after the symbol they select (emoji, CJK).
            '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}' => visible_non_ascii(before),
            _ => false,
        };
        if !allowed {
            return Some(
                "must not contain zero-width or other invisible characters (such as U+200B, U+2060, U+FEFF or U+00AD): \
                 two names that look the same would differ only by them",
            );
        }
    }
    None
}

/// Scripts whose letters look like Latin ones: a word mixing them with Latin letters ("pаypal"
/// with a Cyrillic а) reads as another name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LookalikeScript {
    Latin,
    Greek,
    Cyrillic,
    Armenian,
    Cherokee,
}

fn lookalike_script(c: char) -> Option<LookalikeScript> {
    use LookalikeScript::*;
    if !c.is_alphabetic() {
        return None;
    }
    match c {
        'A'..='Z'
        | 'a'..='z'
        | '\u{00C0}'..='\u{024F}'
        | '\u{1E00}'..='\u{1EFF}'
        | '\u{FF21}'..='\u{FF3A}'
        | '\u{FF41}'..='\u{FF5A}' => Some(Latin),
        '\u{0370}'..='\u{03FF}' | '\u{1F00}'..='\u{1FFF}' => Some(Greek),
        '\u{0400}'..='\u{052F}' | '\u{1C80}'..='\u{1C8F}' | '\u{2DE0}'..='\u{2DFF}' | '\u{A640}'..='\u{A69F}' => {
            Some(Cyrillic)
        }
        '\u{0530}'..='\u{058F}' => Some(Armenian),
        '\u{13A0}'..='\u{13FF}' | '\u{AB70}'..='\u{ABBF}' => Some(Cherokee),
        _ => None,
    }
}

/// Why `value` is a confusable name, or None: one of its words (split at spaces and
/// punctuation) mixes letters of Latin and of a script whose letters look like Latin ones
/// (Greek, Cyrillic, Armenian, Cherokee).
pub fn mixed_scripts(value: &str) -> Option<&'static str> {
    for word in value.split(|c: char| !c.is_alphanumeric()) {
        let mut first = None;
        for script in word.chars().filter_map(lookalike_script) {
            match first {
                None => first = Some(script),
                Some(f) if f != script => {
                    return Some(
                        "mixes letters of different scripts in one word (e.g. Latin and Cyrillic), so it reads \
                         like another name: write each word in one script",
                    );
                }
                Some(_) => {}
            }
        }
    }
    None
}

/// What a name looks like: compatibility-normalised (NFKC), lower-case, without invisible
/// characters, with letters of Greek, Cyrillic and Armenian that look like Latin ones replaced by
/// them. Two different names with the same skeleton are confusable.
pub fn skeleton(value: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    value
        .nfkc()
        .filter(|c| !is_invisible(*c) && !is_bidi_control(*c))
        .flat_map(char::to_lowercase)
        .map(latin_lookalike)
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `new` would be confused with `existing`: the two differ but look the same
/// ([`skeleton`]). A name confusable with one in use is refused by the save paths that check
/// names against their kind's.
pub fn confusable(new: &str, existing: &str) -> bool {
    new != existing && skeleton(new) == skeleton(existing)
}

/// The Latin letter a lower-case Greek, Cyrillic or Armenian letter is drawn like, else itself.
fn latin_lookalike(c: char) -> char {
    match c {
        // Cyrillic
        'а' => 'a',
        'в' => 'b',
        'е' | 'ё' => 'e',
        'һ' => 'h',
        'і' | 'ї' => 'i',
        'ј' => 'j',
        'к' => 'k',
        'м' => 'm',
        'н' => 'h',
        'о' => 'o',
        'р' => 'p',
        'с' => 'c',
        'т' => 't',
        'у' => 'y',
        'х' => 'x',
        'ѕ' => 's',
        'ԁ' => 'd',
        'ԛ' => 'q',
        'ԝ' => 'w',
        'ӏ' => 'l',
        // Greek
        'α' => 'a',
        'β' => 'b',
        'ε' => 'e',
        'η' => 'n',
        'ι' => 'i',
        'κ' => 'k',
        'μ' => 'u',
        'ν' => 'v',
        'ο' => 'o',
        'ρ' => 'p',
        'τ' => 't',
        'υ' => 'u',
        'χ' => 'x',
        'γ' => 'y',
        'ζ' => 'z',
        // Armenian
        'օ' => 'o',
        'ս' => 'u',
        'ց' => 'g',
        'հ' => 'h',
        'ո' => 'n',
        'ք' => 'p',
        other => other,
    }
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Characters that draw nothing: zero-width spaces and joiners, word joiners and invisible
/// operators, soft hyphen, BOM, variation selectors, Hangul and braille blanks.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2060}'..='\u{2064}'
            | '\u{206A}'..='\u{206F}'
            | '\u{2800}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{E0000}'..='\u{E007F}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

/// Optional number parsed from a form field, bounded to [min, max].
pub fn optional_number<T>(errors: &mut FieldErrors, field: &str, raw: &str, min: T, max: T) -> Option<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let value = raw.trim();
    if value.is_empty() {
        return None;
    }
    match value.parse::<T>() {
        Ok(n) if n >= min && n <= max => Some(n),
        // Every message names the range, whatever was wrong with the value.
        Ok(_) => {
            errors.add(field, format!("must be between {min} and {max}, got {value}"));
            None
        }
        Err(_) if value.parse::<f64>().is_ok() => {
            errors.add(
                field,
                format!("must be a whole number from {min} to {max}, got {value}"),
            );
            None
        }
        Err(_) => {
            errors.add(
                field,
                format!("must be a number from {min} to {max}, got {:?}", truncate(value, 40)),
            );
            None
        }
    }
}

/// Required number parsed from a form field, bounded to [min, max].
pub fn required_number<T>(errors: &mut FieldErrors, field: &str, raw: &str, min: T, max: T) -> Option<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    if raw.trim().is_empty() {
        errors.add(field, "is required");
        return None;
    }
    optional_number(errors, field, raw, min, max)
}

/// At most `max` characters of `s`, with an ellipsis when cut (for error messages and excerpts).
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut cut: String = s.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_bounded_parsed_and_their_errors_name_the_range() {
        let mut e = FieldErrors::default();
        assert_eq!(optional_number::<u32>(&mut e, "c", "-3", 1, 1024), None);
        assert_eq!(e.get("c"), Some("must be a whole number from 1 to 1024, got -3"));
        let mut e = FieldErrors::default();
        assert_eq!(optional_number::<u32>(&mut e, "c", "4096", 1, 1024), None);
        assert_eq!(e.get("c"), Some("must be between 1 and 1024, got 4096"));
        let mut e = FieldErrors::default();
        assert_eq!(optional_number::<f64>(&mut e, "t", "fast", 0.0, 2.0), None);
        assert_eq!(e.get("t"), Some("must be a number from 0 to 2, got \"fast\""));
        let mut e = FieldErrors::default();
        assert_eq!(optional_number::<i64>(&mut e, "c", "-3", 1, 64), None);
        assert_eq!(e.get("c"), Some("must be between 1 and 64, got -3"));
        let mut e = FieldErrors::default();
        assert_eq!(required_number::<u32>(&mut e, "c", " 8 ", 1, 1024), Some(8));
        assert!(e.is_empty());
    }

    #[test]
    fn required_text_rejects_blank_and_overlong() {
        let mut e = FieldErrors::default();
        assert_eq!(required_text(&mut e, "name", "  ", 5), None);
        assert_eq!(e.get("name"), Some("is required"));
        let mut e = FieldErrors::default();
        assert_eq!(required_text(&mut e, "name", "abcdef", 5), None);
        assert!(e.get("name").unwrap().contains("too long (6 characters; at most 5)"));
        let mut e = FieldErrors::default();
        assert_eq!(required_text(&mut e, "name", " 模型 ", 5).as_deref(), Some("模型"));
        assert!(e.is_empty());
    }

    #[test]
    fn names_need_a_visible_character_and_no_control_or_bidi_characters() {
        for ok in [
            "fast-model",
            " 模型 ",
            "👩\u{200D}💻",
            "fast ⚡\u{FE0F}",
            "Qwen 2.5 (AWQ)",
            "Модель GPT",
            "ελληνικά",
        ] {
            let mut e = FieldErrors::default();
            assert!(name(&mut e, "name", ok).is_some(), "{ok:?}: {e}");
        }
        assert_eq!(name(&mut FieldErrors::default(), "name", " a ").as_deref(), Some("a"));
        for (bad, says) in [
            ("\u{200B}\u{200B}", "visible"),
            ("\u{FEFF}\u{2060}\u{3164}", "visible"),
            ("gpt\u{202E}4pmt", "bidirectional"),
            ("a\u{2067}b", "bidirectional"),
            ("a\0b", "control"),
            ("a\nb", "control"),
            ("", "required"),
            ("gpt\u{200B}-4o", "zero-width"),
            ("a\u{200D}b", "zero-width"),
            ("gpt-4o\u{2060}", "zero-width"),
            ("soft\u{00AD}hyphen", "zero-width"),
            ("g\u{0440}t-4o", "scripts"),
            ("p\u{0430}ypal", "scripts"),
            ("\u{03BF}pus", "scripts"),
        ] {
            let mut e = FieldErrors::default();
            assert_eq!(name(&mut e, "name", bad), None, "{bad:?}");
            assert!(e.get("name").unwrap().contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn names_that_look_alike_have_the_same_skeleton() {
        assert!(confusable("g\u{0440}t-4\u{043E}", "gpt-4o"), "Cyrillic р and о");
        assert!(confusable("GPT-4o", "gpt-4o"), "case");
        assert!(confusable("gpt\u{200B}-4o", "gpt-4o"), "zero-width");
        assert!(confusable("ｇｐｔ-4o", "gpt-4o"), "full-width");
        assert!(!confusable("gpt-4o", "gpt-4o"), "the same name");
        assert!(!confusable("gpt-4o", "gpt-4o-mini"));
        assert!(!confusable("модель", "model"), "an all-Cyrillic word stays what it is");
    }

    #[test]
    fn truncate_counts_characters_not_bytes() {
        assert_eq!(truncate("一二三四", 2), "一二…");
        assert_eq!(truncate("ab", 2), "ab");
    }
}
