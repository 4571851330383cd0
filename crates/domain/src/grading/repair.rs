//! Reading the JSON object of an answer for `json-fields`: found whole (bare, fenced or in
//! prose), or unusable with the parser's reason, or — only under the grader's `lenient` option —
//! repaired from a cut-off object or trailing commas.
use serde_json::{Map, Value};

use super::json::{JsonSource, code_fences, extract_json_with_source, scan_embedded};
use super::quote;

/// What an answer's JSON object came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectRead {
    /// A complete object, as the model wrote it.
    Found(Map<String, Value>, JsonSource),
    /// Repaired under `lenient`: the salvaged object and what was done to it.
    Repaired(Map<String, Value>, String),
    /// The model answered, but no object can be read from it: why.
    Unusable(String),
    /// The output is empty: nothing was answered.
    Empty,
}

/// Cut points tried when salvaging a cut-off object (latest first); bounds the work.
const MAX_REPAIR_TRIES: usize = 32;

/// The object in `output`; with `lenient`, a broken one is repaired when it can be.
pub fn read_object(output: &str, lenient: bool) -> ObjectRead {
    let trimmed = output.trim().trim_start_matches('\u{feff}');
    if trimmed.is_empty() {
        return ObjectRead::Empty;
    }
    match extract_json_with_source(trimmed) {
        Some((Value::Object(map), source)) => return ObjectRead::Found(map, source),
        // `[{…}]`: one record wrapped in a list is still that record.
        Some((Value::Array(mut items), source)) if items.len() == 1 && items[0].is_object() => {
            if let Some(Value::Object(map)) = items.pop() {
                return ObjectRead::Found(map, source);
            }
        }
        Some((other, _)) => {
            return ObjectRead::Unusable(format!("the JSON is {}, not an object", kind_of(&other)));
        }
        None => {}
    }
    let Some(candidate) = candidate_text(trimmed) else {
        return ObjectRead::Unusable(format!("no JSON object in the output {}", quote(trimmed, 60)));
    };
    let problem = parse_problem(candidate);
    let repaired = if lenient { repair(candidate) } else { None };
    match repaired {
        Some((map, what)) if !map.is_empty() => ObjectRead::Repaired(map, format!("{what}; {problem}")),
        Some(_) => ObjectRead::Unusable(format!("{problem}; no complete field to salvage")),
        None => ObjectRead::Unusable(problem),
    }
}

/// The text that was meant to be the object: the first fence whose body opens one (```json
/// first), else the first object in the prose that opens and does not parse.
fn candidate_text(text: &str) -> Option<&str> {
    let fences = code_fences(text);
    let json_first = fences
        .iter()
        .filter(|(lang, _)| lang.eq_ignore_ascii_case("json"))
        .chain(fences.iter().filter(|(lang, _)| !lang.eq_ignore_ascii_case("json")));
    for (_, body) in json_first {
        let body = body.trim();
        if body.starts_with('{') {
            return Some(body);
        }
    }
    scan_embedded(text).broken
}

/// The parser's word on `candidate`: cut off (ended too early) or malformed, and where.
fn parse_problem(candidate: &str) -> String {
    let mut values = serde_json::Deserializer::from_str(candidate).into_iter::<Value>();
    match values.next() {
        Some(Err(e)) if e.is_eof() => format!("the JSON is cut off ({e})"),
        Some(Err(e)) => format!("the JSON is malformed ({e})"),
        // Parsed after all (e.g. a fence body that is not the first value): not an object.
        Some(Ok(v)) => format!("the JSON is {}, not an object", kind_of(&v)),
        None => "the JSON is cut off (nothing after the opening brace)".to_string(),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A repaired object and what was done: trailing commas dropped, and/or a cut-off object closed
/// after its last complete value (a value cut in the middle is dropped, not guessed).
fn repair(candidate: &str) -> Option<(Map<String, Value>, String)> {
    let (cleaned, dropped_commas) = drop_trailing_commas(candidate);
    let commas = "dropped trailing commas";
    if dropped_commas && let Some(map) = object(&cleaned) {
        return Some((map, format!("repaired: {commas}")));
    }
    let closed = close_after_last_complete_value(&cleaned)?;
    let what = if dropped_commas {
        format!("repaired: {commas} and closed a cut-off object")
    } else {
        "repaired: closed a cut-off object after its last complete value".to_string()
    };
    Some((closed, what))
}

fn object(text: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// `text` without the commas that stand (outside strings) right before a `}` or `]`.
fn drop_trailing_commas(text: &str) -> (String, bool) {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped, mut dropped) = (false, false, false);
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if c == ','
            && chars[i + 1..]
                .iter()
                .find(|n| !n.is_whitespace())
                .is_some_and(|n| matches!(n, '}' | ']'))
        {
            dropped = true;
            continue;
        }
        out.push(c);
    }
    (out, dropped)
}

/// The object up to its last complete value, closed: cut points are after an opening bracket,
/// before a comma, after a closing bracket and after a closing quote (a key's quote fails to
/// parse and an earlier point is tried).
fn close_after_last_complete_value(text: &str) -> Option<Map<String, Value>> {
    let mut stack: Vec<char> = Vec::new();
    // (byte offset to cut at, the brackets open there)
    let mut cuts: Vec<(usize, Vec<char>)> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    in_string = false;
                    cuts.push((i + 1, stack.clone()));
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                stack.push(c);
                cuts.push((i + 1, stack.clone()));
            }
            '}' | ']' => {
                stack.pop();
                if stack.is_empty() {
                    // The object closed: whatever follows is not part of it.
                    return object(&text[..=i]);
                }
                cuts.push((i + 1, stack.clone()));
            }
            ',' => cuts.push((i, stack.clone())),
            _ => {}
        }
    }
    cuts.iter().rev().take(MAX_REPAIR_TRIES).find_map(|(at, open)| {
        let mut attempt = text[..*at].trim_end().to_string();
        attempt.extend(open.iter().rev().map(|b| if *b == '{' { '}' } else { ']' }));
        object(&attempt)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn found(output: &str) -> Value {
        match read_object(output, false) {
            ObjectRead::Found(map, _) => Value::Object(map),
            other => panic!("{other:?}"),
        }
    }

    fn repaired(output: &str) -> (Value, String) {
        match read_object(output, true) {
            ObjectRead::Repaired(map, what) => (Value::Object(map), what),
            other => panic!("{other:?}"),
        }
    }

    fn unusable(output: &str) -> String {
        match read_object(output, false) {
            ObjectRead::Unusable(why) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn whole_objects_are_found_bare_fenced_or_in_prose() {
        assert_eq!(found("{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(found("```json\n{\"a\" : 1}\n```"), json!({"a": 1}));
        assert_eq!(found("Result: {\"a\":1}. Done."), json!({"a": 1}));
        assert_eq!(found("[{\"a\":1}]"), json!({"a": 1}));
        assert_eq!(read_object("  \n", true), ObjectRead::Empty);
    }

    #[test]
    fn broken_objects_are_unusable_with_the_parsers_reason() {
        let cut = unusable("{\"name\": \"Ada\", \"city\": \"Lon");
        assert!(
            cut.starts_with("the JSON is cut off (EOF while parsing a string"),
            "{cut}"
        );
        let fenced = unusable("```json\n{\"name\": \"Ada\",\n}\n```");
        assert!(
            fenced.starts_with("the JSON is malformed (trailing comma at line 2"),
            "{fenced}"
        );
        assert_eq!(unusable("[1, 2]"), "the JSON is a list, not an object");
        assert!(unusable("I cannot answer that.").starts_with("no JSON object in the output"));
    }

    #[test]
    fn lenient_salvages_complete_fields_and_says_so() {
        let (v, what) = repaired("{\"name\": \"Ada\", \"city\": \"Lon");
        assert_eq!(v, json!({"name": "Ada"}));
        assert!(
            what.starts_with("repaired: closed a cut-off object") && what.contains("cut off"),
            "{what}"
        );
        let (v, _) = repaired("{\"name\": \"Ada\", \"tags\": [\"x\", \"y\"], \"n\": 12");
        assert_eq!(
            v,
            json!({"name": "Ada", "tags": ["x", "y"]}),
            "a number cut mid-way is dropped"
        );
        let (v, _) = repaired("{\"a\": {\"b\": \"c\"}, \"d\": \"e\"");
        assert_eq!(v, json!({"a": {"b": "c"}, "d": "e"}));
        let (v, _) = repaired("{\"a\": 1, \"b\"");
        assert_eq!(v, json!({"a": 1}));
        let (v, what) = repaired("```json\n{\"a\": 1, \"b\": [2, 3,],}\n```");
        assert_eq!(v, json!({"a": 1, "b": [2, 3]}));
        assert!(what.starts_with("repaired: dropped trailing commas"), "{what}");
        let (v, what) = repaired("{\"a\": \"x, }\", \"b\": [1,],");
        assert_eq!(v, json!({"a": "x, }", "b": [1]}));
        assert!(what.contains("trailing commas and closed"), "{what}");
        // Nothing to salvage is still unusable.
        assert!(
            matches!(read_object("{\"na", true), ObjectRead::Unusable(ref why) if why.ends_with("no complete field to salvage"))
        );
        assert!(matches!(read_object("no braces", true), ObjectRead::Unusable(_)));
    }
}
