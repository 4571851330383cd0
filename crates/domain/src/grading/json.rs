//! JSON graders: `json-valid` and `json-schema`, and `extract_json`, which finds the JSON
//! value in a model's answer (bare, in a ```json fence, or inside prose).
use serde_json::Value;

use super::spec::{GraderSpec, Schema};
use super::{Grade, quote};

/// Where in the output the JSON was found; reasons say so, since "valid JSON, but wrapped in
/// prose" matters to anyone who parses the output downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonSource {
    /// The whole trimmed output is JSON.
    Bare,
    /// Inside a Markdown code fence.
    Fenced,
    /// Embedded in prose.
    Embedded,
}

/// Places in prose where a JSON value may start that are tried before giving up; bounds the
/// work on long outputs full of braces.
const MAX_EMBEDDED_STARTS: usize = 64;

/// The JSON value in `output`: the whole output, else the first parsable ``` fence (```json
/// first), else the first `{` or `[` in the text that starts a complete value.
pub fn extract_json(output: &str) -> Option<Value> {
    extract_json_with_source(output).map(|(v, _)| v)
}

/// `extract_json`, also telling where the value was found.
pub fn extract_json_with_source(output: &str) -> Option<(Value, JsonSource)> {
    let trimmed = output.trim().trim_start_matches('\u{feff}');
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Some((v, JsonSource::Bare));
    }
    let fences = code_fences(trimmed);
    let json_first = fences
        .iter()
        .filter(|(lang, _)| lang.eq_ignore_ascii_case("json"))
        .chain(fences.iter().filter(|(lang, _)| !lang.eq_ignore_ascii_case("json")));
    for (_, body) in json_first {
        if let Ok(v) = serde_json::from_str::<Value>(body.trim()) {
            return Some((v, JsonSource::Fenced));
        }
    }
    scan_embedded(trimmed).found.map(|v| (v, JsonSource::Embedded))
}

/// What a scan of prose for JSON values finds.
#[derive(Debug, Default)]
pub(super) struct Embedded<'a> {
    /// The first complete value that looks like an answer.
    pub found: Option<Value>,
    /// The first object that opens but does not parse (cut off or malformed), from its `{`.
    pub broken: Option<&'a str>,
}

/// Scans `text` for JSON values starting at top-level `{` or `[` (a bracket inside an earlier,
/// broken value is part of it, not a value of its own: a cut-off object's inner object is not
/// the answer). A bare `[1]` inside prose is more likely a citation than the answer.
pub(super) fn scan_embedded(text: &str) -> Embedded<'_> {
    let mut out = Embedded::default();
    let mut at = 0;
    for _ in 0..MAX_EMBEDDED_STARTS {
        let Some(offset) = text[at..].find(['{', '[']) else {
            break;
        };
        let start = at + offset;
        let rest = &text[start..];
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match values.next() {
            Some(Ok(v)) if v.is_object() || v.as_array().is_some_and(|a| a.iter().any(|x| !x.is_number())) => {
                out.found = Some(v);
                return out;
            }
            Some(Ok(_)) => at = start + values.byte_offset(),
            _ => {
                if rest.starts_with('{') && out.broken.is_none() {
                    out.broken = Some(rest.trim_end());
                }
                match closing_of(rest) {
                    Some(end) => at = start + end,
                    // Never closes: everything after is inside it.
                    None => break,
                }
            }
        }
    }
    out
}

/// Byte offset just past the bracket that closes the one `text` starts with (strings skipped).
fn closing_of(text: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Markdown code fences as (info string, body); an unclosed last fence runs to the end (the
/// answer may have been cut by max_tokens).
pub(super) fn code_fences(text: &str) -> Vec<(String, &str)> {
    let mut fences = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let line_end = after.find('\n').unwrap_or(after.len());
        let lang = after[..line_end].trim().to_string();
        let body_start = (line_end + 1).min(after.len());
        let body = &after[body_start..];
        match body.find("```") {
            Some(close) => {
                fences.push((lang, &body[..close]));
                rest = &body[close + 3..];
            }
            None => {
                fences.push((lang, body));
                break;
            }
        }
    }
    fences
}

fn found_where(source: JsonSource) -> &'static str {
    match source {
        JsonSource::Bare => "the output is valid JSON",
        JsonSource::Fenced => "valid JSON in a code fence",
        JsonSource::Embedded => "valid JSON embedded in prose",
    }
}

/// The JSON a grader works on, or the failing grade that says why there is none.
fn json_of(spec: &GraderSpec, output: &str, strict: bool) -> Result<(Value, JsonSource), Grade> {
    if strict {
        return serde_json::from_str::<Value>(output.trim())
            .map(|v| (v, JsonSource::Bare))
            .map_err(|e| Grade::pass_fail(spec, false, format!("not JSON (strict): {e}")));
    }
    extract_json_with_source(output).ok_or_else(|| {
        Grade::pass_fail(
            spec,
            false,
            format!("no JSON value found in {}", quote(output.trim(), 60)),
        )
    })
}

pub(super) fn json_valid(spec: &GraderSpec, strict: bool, output: &str) -> Grade {
    match json_of(spec, output, strict) {
        Ok((_, source)) => Grade::pass_fail(spec, true, found_where(source)),
        Err(failed) => failed,
    }
}

/// Validation errors listed in a reason, at most.
const MAX_LISTED_ERRORS: usize = 3;

pub(super) fn json_schema(spec: &GraderSpec, schema: &Schema, strict: bool, output: &str) -> Grade {
    let value = match json_of(spec, output, strict) {
        Ok((v, _)) => v,
        Err(failed) => return failed,
    };
    let errors: Vec<String> = schema
        .validator()
        .iter_errors(&value)
        .map(|e| {
            let path = e.instance_path().as_str().to_string();
            let at = if path.is_empty() { "(root)".to_string() } else { path };
            format!("{at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        return Grade::pass_fail(spec, true, "matches the schema");
    }
    let mut reason = format!(
        "{} schema error{}: {}",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" },
        errors
            .iter()
            .take(MAX_LISTED_ERRORS)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ")
    );
    if errors.len() > MAX_LISTED_ERRORS {
        reason.push_str("; …");
    }
    Grade::pass_fail(spec, false, reason)
}

#[cfg(test)]
mod tests {
    use super::super::grade;
    use super::*;
    use serde_json::json;

    #[test]
    fn extracts_bare_fenced_and_embedded_json() {
        assert_eq!(extract_json(" {\"a\": 1}\n"), Some(json!({"a": 1})));
        let fenced = "Here is the result:\n```json\n{\"name\": \"张三\", \"age\": 30}\n```\nHope this helps.";
        assert_eq!(
            extract_json_with_source(fenced),
            Some((json!({"name": "张三", "age": 30}), JsonSource::Fenced))
        );
        // A json fence wins over an earlier fence of another language.
        let two = "```python\nprint(1)\n```\n```json\n[\"x\"]\n```";
        assert_eq!(extract_json(two), Some(json!(["x"])));
        // A fence cut off by max_tokens still counts if its body parses.
        assert_eq!(extract_json("```json\n{\"ok\": true}\n"), Some(json!({"ok": true})));
        let prose = "根据文本，提取结果为 {\"金额\": \"¥1,234.50\"}，请核对。";
        assert_eq!(
            extract_json_with_source(prose),
            Some((json!({"金额": "¥1,234.50"}), JsonSource::Embedded))
        );
        // Braces that open nothing parsable are skipped; citations like [1] are not answers.
        assert_eq!(
            extract_json("see [1] and {oops} then {\"k\": [1, 2]}"),
            Some(json!({"k": [1, 2]}))
        );
        assert_eq!(extract_json("no json here [1]"), None);
        assert_eq!(extract_json(""), None);
    }

    #[test]
    fn json_valid_strict_and_lenient() {
        let lenient: GraderSpec = serde_json::from_str(r#"{"kind":"json-valid"}"#).unwrap();
        let strict: GraderSpec = serde_json::from_str(r#"{"kind":"json-valid","strict":true}"#).unwrap();
        let fenced = "```json\n{\"a\":1}\n```";
        let g = grade(&lenient, fenced, None);
        assert!(g.passed && g.reason.contains("code fence"), "{}", g.reason);
        let g = grade(&strict, fenced, None);
        assert!(!g.passed && g.reason.starts_with("not JSON (strict)"), "{}", g.reason);
        assert!(grade(&strict, "  [1,2] ", None).passed);
        assert!(!grade(&lenient, "{\"a\": 1", None).passed);
    }

    #[test]
    fn json_schema_reports_errors_with_instance_paths() {
        let spec: GraderSpec = serde_json::from_value(json!({
            "kind": "json-schema",
            "schema": {
                "type": "object",
                "required": ["name", "items"],
                "properties": {
                    "name": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "integer", "minimum": 0}}
                }
            }
        }))
        .unwrap();
        assert!(grade(&spec, r#"{"name":"x","items":[1,2]}"#, None).passed);
        let g = grade(&spec, "```json\n{\"name\": 5, \"items\": [1, -2]}\n```", None);
        assert!(!g.passed);
        assert!(g.reason.starts_with("2 schema errors"), "{}", g.reason);
        assert!(g.reason.contains("/name: 5 is not of type \"string\""), "{}", g.reason);
        assert!(
            g.reason.contains("/items/1: -2 is less than the minimum of 0"),
            "{}",
            g.reason
        );
        let g = grade(&spec, r#"{"name":"x"}"#, None);
        assert!(
            g.reason.contains("(root): \"items\" is a required property"),
            "{}",
            g.reason
        );
        assert!(!grade(&spec, "not json", None).passed);
    }

    #[test]
    fn bad_schemas_and_remote_refs_are_refused_at_parse_time() {
        let bad = serde_json::from_value::<GraderSpec>(json!({"kind": "json-schema", "schema": {"type": 12}}));
        let err = bad.unwrap_err().to_string();
        assert!(err.starts_with("`schema` is not a valid JSON Schema"), "{err}");
        let remote = serde_json::from_value::<GraderSpec>(json!({
            "kind": "json-schema",
            "schema": {"$ref": "https://example.com/schema.json"}
        }));
        assert!(remote.is_err(), "remote $ref must not be fetched");
    }
}
