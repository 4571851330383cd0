//! OpenAI evals samples: one JSON object per line, `{"input": [messages] | "text", "ideal":
//! "text" | ["text", …]}`. Other keys are kept as the case's `vars` (model-graded evals use
//! them in their templates).
use serde_json::{Map, Value, json};

use super::{Draft, Format, ImportOptions, error, header, jsonl_cases};
use crate::evalset::EvalSetError;
use crate::evalset::problems::{kind_of, without_position};

pub(super) fn read(source_name: &str, text: &str, options: &ImportOptions) -> Result<Draft, EvalSetError> {
    let h = header(source_name, options, None, Format::OpenaiEvals)?;
    // The header graders are proposed from the ideal values once every line is read
    // (`super::apply_grader`).
    let (cases, problems) = jsonl_cases(text, "sample", |line, raw, id| sample(source_name, line, raw, id));
    Ok(Draft {
        header: h,
        cases,
        problems,
    })
}

/// One sample line as a case object.
fn sample(source_name: &str, line: usize, raw: &str, id: String) -> Result<Value, EvalSetError> {
    let err = |field: Option<&str>, message: String| error(source_name, Some(line), field, message);
    let sample: Map<String, Value> = match serde_json::from_str(raw) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(err(
                None,
                format!("each line must be a JSON object with `input`, got {}", kind_of(&other)),
            ));
        }
        Err(e) => {
            let mut syntax = err(None, format!("not valid JSON: {}", without_position(&e)));
            syntax.problems[0].column = Some(e.column());
            return Err(syntax);
        }
    };
    let mut case = Map::new();
    case.insert("id".into(), json!(id));
    case.insert("messages".into(), messages(sample.get("input"), &err)?);
    match sample.get("ideal") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            case.insert("expected".into(), json!(s));
        }
        // A structured answer: compared field by field (json-fields).
        Some(object @ Value::Object(_)) => {
            case.insert("expected".into(), object.clone());
        }
        Some(Value::Array(items)) => {
            let ideals: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            match ideals.as_deref() {
                Some([one]) => {
                    case.insert("expected".into(), json!(one));
                }
                // Several acceptable answers: right when the whole output (trimmed) is any
                // one of them; the first is kept as the expected value shown and diffed.
                Some(many) if !many.is_empty() => {
                    let alternatives: Vec<String> = many.iter().map(|a| regex::escape(a.trim())).collect();
                    let pattern = format!(r"^\s*(?:{})\s*$", alternatives.join("|"));
                    case.insert("expected".into(), json!(many[0]));
                    case.insert("graders".into(), json!([{"kind": "regex", "pattern": pattern}]));
                }
                _ => {
                    return Err(err(
                        Some("ideal"),
                        "must be a string, a JSON object or a non-empty list of strings".into(),
                    ));
                }
            }
        }
        Some(_) => {
            return Err(err(
                Some("ideal"),
                "must be a string, a JSON object or a non-empty list of strings".into(),
            ));
        }
    }
    let vars: Map<String, Value> = sample
        .into_iter()
        .filter(|(k, _)| k != "input" && k != "ideal")
        .collect();
    if !vars.is_empty() {
        case.insert("vars".into(), Value::Object(vars));
    }
    Ok(Value::Object(case))
}

/// `input` as chat messages: a string is one user message; a list must hold
/// `{"role", "content"}` objects with string values.
fn messages(input: Option<&Value>, err: &impl Fn(Option<&str>, String) -> EvalSetError) -> Result<Value, EvalSetError> {
    match input {
        Some(Value::String(s)) => Ok(json!([{"role": "user", "content": s}])),
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let field = |k: &str| format!("input[{i}].{k}");
                let Some(obj) = item.as_object() else {
                    return Err(err(Some(&format!("input[{i}]")), "must be an object".into()));
                };
                if let Some(extra) = obj.keys().find(|k| *k != "role" && *k != "content") {
                    return Err(err(
                        Some(&field(extra)),
                        "is not supported: a message has only `role` and `content`".into(),
                    ));
                }
                let role = obj.get("role").and_then(Value::as_str);
                let content = obj.get("content").and_then(Value::as_str);
                match (role, content) {
                    (Some(role), Some(content)) => out.push(json!({"role": role, "content": content})),
                    (None, _) => return Err(err(Some(&field("role")), "must be a string".into())),
                    (_, None) => return Err(err(Some(&field("content")), "must be a string".into())),
                }
            }
            Ok(Value::Array(out))
        }
        None => Err(err(Some("input"), "is required".into())),
        Some(_) => Err(err(
            Some("input"),
            "must be a string or a non-empty list of chat messages".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::evalset::TaskKind;
    use crate::evalset::import::{Format, FormatChoice, ImportOptions, import};

    fn options() -> ImportOptions {
        ImportOptions {
            name: None,
            task: Some(TaskKind::Classification),
            prompt: None,
            grader: Default::default(),
        }
    }

    #[test]
    fn reads_string_and_chat_inputs() {
        let text = r#"{"input": [{"role": "system", "content": "Answer yes or no."}, {"role": "user", "content": "Is water wet?"}], "ideal": "yes"}

{"input": "2+2=", "ideal": ["4"], "topic": "maths"}
"#;
        let (format, file) = import(FormatChoice::Auto, "match.jsonl", text, &options()).unwrap();
        assert_eq!(format, Format::OpenaiEvals);
        assert_eq!(file.header.name, "match");
        assert_eq!(file.cases.len(), 2);
        assert_eq!(file.cases[0].id, "sample-001");
        assert_eq!(file.messages_for(&file.cases[0]).len(), 2);
        assert_eq!(file.cases[1].expected_text().as_deref(), Some("4"));
        assert_eq!(file.messages_for(&file.cases[1])[0].content, "2+2=");
        assert_eq!(file.cases[1].vars["topic"], "maths");
        assert!(file.cases[1].graders.is_empty());

        let many = r#"{"input": "Capital of France?", "ideal": ["Paris", "paris (France)"]}"#;
        let (_, file) = import(FormatChoice::Auto, "m.jsonl", many, &options()).unwrap();
        let spec = &file.cases[0].graders[0];
        assert_eq!(spec.name(), "regex");
        let expected = file.cases[0].expected.as_ref();
        for (output, passes) in [
            (" Paris\n", true),
            ("paris (France)", true),
            ("Lyon", false),
            ("Parisian", false),
        ] {
            assert_eq!(crate::grading::grade(spec, output, expected).passed, passes, "{output}");
        }
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let text = "{\"input\": \"a\", \"ideal\": \"b\"}\n\n{\"input\": [{\"role\": \"user\"}], \"ideal\": \"b\"}\n";
        let e = import(FormatChoice::Known(Format::OpenaiEvals), "s.jsonl", text, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("input[0].content")), "{e}");

        let e = import(
            FormatChoice::Known(Format::OpenaiEvals),
            "s.jsonl",
            "{\"ideal\": 3, \"input\": \"x\"}",
            &options(),
        )
        .unwrap_err()
        .first()
        .clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("ideal")));

        let e = import(
            FormatChoice::Known(Format::OpenaiEvals),
            "s.jsonl",
            "{\"ideal\": \"x\"}",
            &options(),
        )
        .unwrap_err()
        .first()
        .clone();
        assert_eq!(e.field.as_deref(), Some("input"));

        let e = import(
            FormatChoice::Known(Format::OpenaiEvals),
            "s.jsonl",
            "not json",
            &options(),
        )
        .unwrap_err()
        .first()
        .clone();
        assert_eq!(e.line, Some(1));
        assert!(e.message.contains("not valid JSON"), "{e}");
    }
}
