//! Chat logs: JSONL, one conversation per line, as `{"messages": [{"role", "content"}…]}`
//! (OpenAI's chat shape) or ShareGPT's `{"conversations": [{"from": "human"|"gpt"|"system",
//! "value"}…]}`. Each line becomes a **conversation case** with golden history: every user
//! message a turn, the assistant reply logged after it that turn's `golden` reply (the history
//! later turns are sent with). Nothing is graded: the logged replies are what was said, not
//! what must be said — add graders or `expected` values per turn before judging by them.
use serde_json::{Map, Value, json};

use super::{Draft, Format, ImportOptions, error, header, jsonl_cases};
use crate::evalset::EvalSetError;
use crate::evalset::problems::{kind_of, without_position};

pub(super) fn read(source_name: &str, text: &str, options: &ImportOptions) -> Result<Draft, EvalSetError> {
    let mut h = header(source_name, options, None, Format::ChatLog)?;
    h.insert("history".into(), json!("golden"));
    let system = std::cell::RefCell::new(None::<(usize, String)>);
    let (cases, mut problems) = jsonl_cases(text, "conversation", |line, raw, id| {
        let (case, sys) = conversation(source_name, line, raw, id)?;
        let mut first = system.borrow_mut();
        match (&*first, sys) {
            (None, Some(s)) => *first = Some((line, s)),
            (Some((at, s0)), Some(s)) if *s0 != s => {
                return Err(error(
                    source_name,
                    Some(line),
                    Some("messages[0]"),
                    format!(
                        "its system message differs from line {at}'s; an eval set has one system message (split the file by system message)"
                    ),
                ));
            }
            _ => {}
        }
        Ok(case)
    });
    if let Some((_, s)) = system.into_inner() {
        h.insert("system".into(), json!(s));
    }
    problems.sort_by_key(|p| p.line);
    Ok(Draft {
        header: h,
        cases,
        problems,
    })
}

/// One line: the case and its system message, if any.
fn conversation(
    source_name: &str,
    line: usize,
    raw: &str,
    id: String,
) -> Result<(Value, Option<String>), EvalSetError> {
    let err = |field: Option<&str>, message: String| error(source_name, Some(line), field, message);
    let object: Map<String, Value> = match serde_json::from_str(raw) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(err(
                None,
                format!(
                    "each line must be a JSON object with `messages` or `conversations`, got {}",
                    kind_of(&other)
                ),
            ));
        }
        Err(e) => {
            let mut syntax = err(None, format!("not valid JSON: {}", without_position(&e)));
            syntax.problems[0].column = Some(e.column());
            return Err(syntax);
        }
    };
    let (field, role_key, text_key) = if object.contains_key("conversations") {
        ("conversations", "from", "value")
    } else {
        ("messages", "role", "content")
    };
    let Some(items) = object.get(field).and_then(Value::as_array).filter(|a| !a.is_empty()) else {
        return Err(err(Some(field), "must be a non-empty list of messages".into()));
    };
    let mut system = None;
    let mut turns: Vec<Map<String, Value>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let place = |k: &str| format!("{field}[{i}].{k}");
        let role = item.get(role_key).and_then(Value::as_str);
        let text = match item.get(text_key) {
            Some(Value::String(s)) => s.clone(),
            // Content as text parts (OpenAI's array form).
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => return Err(err(Some(&place(text_key)), "must be a string".into())),
        };
        match role {
            Some("system") if i == 0 => system = Some(text),
            Some("user" | "human") => {
                let mut turn = Map::new();
                turn.insert("user".into(), json!(text));
                turns.push(turn);
            }
            Some("assistant" | "gpt" | "bot" | "model") => match turns.last_mut() {
                Some(turn) if !turn.contains_key("golden") => {
                    turn.insert("golden".into(), json!(text));
                }
                _ => {
                    return Err(err(
                        Some(&place(role_key)),
                        "an assistant message must follow a user message (two replies in a row, or a reply first)"
                            .into(),
                    ));
                }
            },
            Some(other) => {
                return Err(err(
                    Some(&place(role_key)),
                    format!("{other:?} is not a role bakeoff replays (system first, then user and assistant)"),
                ));
            }
            None => return Err(err(Some(&place(role_key)), "is required (a string)".into())),
        }
    }
    if turns.is_empty() {
        return Err(err(Some(field), "has no user message".into()));
    }
    // Template markers in logged text are literal: `{{` would be read as a var.
    for t in &mut turns {
        if let Some(Value::String(u)) = t.get("user")
            && u.contains("{{")
        {
            let escaped = u.replace("{{", "{{lbrace}}{{lbrace}}");
            t.insert("user".into(), json!(escaped));
            t.insert("vars".into(), json!({"lbrace": "{"}));
        }
    }
    let id = object
        .get("id")
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or(id);
    Ok((
        json!({"id": id, "turns": turns.into_iter().map(Value::Object).collect::<Vec<_>>()}),
        system,
    ))
}

#[cfg(test)]
mod tests {
    use crate::evalset::TaskKind;
    use crate::evalset::conversation::HistoryMode;
    use crate::evalset::import::{Format, FormatChoice, ImportOptions, detect, import};

    fn options() -> ImportOptions {
        ImportOptions {
            task: Some(TaskKind::Generation),
            ..ImportOptions::default()
        }
    }

    #[test]
    fn openai_and_sharegpt_logs_become_conversations_with_golden_history() {
        let text = r#"{"messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"你好吗？"},{"role":"assistant","content":"很好。"}]}
{"id":"s2","conversations":[{"from":"system","value":"Be kind."},{"from":"human","value":"2+2? {{x}}"},{"from":"gpt","value":"4"}]}
"#;
        assert_eq!(detect("log.jsonl", text), Format::ChatLog);
        let (format, file) = import(FormatChoice::Auto, "log.jsonl", text, &options()).unwrap();
        assert_eq!(format, Format::ChatLog);
        assert_eq!(file.header.system.as_deref(), Some("Be kind."));
        assert_eq!(file.header.history, Some(HistoryMode::Golden));
        let c = &file.cases[0];
        assert_eq!(c.turns.len(), 2);
        assert_eq!(c.turns[0].golden.as_deref(), Some("Hello!"));
        let m = file.turn_messages(c, 1, &file.golden_replies(c));
        assert_eq!(
            m.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
            ["Be kind.", "Hi", "Hello!", "你好吗？"]
        );
        assert_eq!(file.cases[1].id, "s2");
        // A literal `{{x}}` in a log stays literal.
        assert_eq!(file.turn_messages(&file.cases[1], 0, &[])[1].content, "2+2? {{x}}");
        assert!(
            file.graders_for_turn(&c.turns[0]).is_empty(),
            "logged replies are not graded"
        );
    }

    #[test]
    fn a_bad_line_is_named_with_its_field() {
        let text = r#"{"messages":[{"role":"user","content":"Hi"}]}
{"messages":[{"role":"assistant","content":"first"}]}
{"messages":[{"role":"system","content":"Other."},{"role":"user","content":"x"}]}
{"messages":[{"role":"user","content":"Hi"},{"role":"system","content":"late"}]}
"#;
        let e = import(FormatChoice::Known(Format::ChatLog), "log.jsonl", text, &options()).unwrap_err();
        let lines = e.lines();
        assert!(lines[0].starts_with("log.jsonl:2: field \"messages[0].role\""), "{e}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("log.jsonl:4: field \"messages[1].role\"")),
            "{e}"
        );
    }
}
