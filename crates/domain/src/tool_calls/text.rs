//! Prompt mode: the tools described in the system prompt, and calls read back from text.
//!
//! Read, in this order: `<tool_call>{…}</tool_call>` blocks (Hermes, Qwen and most chat
//! templates), fenced code blocks holding a call object (or a list of them), and — only when
//! neither is present — the first bare JSON object in the text that is a call. A call object is
//! `{"name": …, "arguments": {…}}` (`parameters` and `input` are read as `arguments`). The same
//! reader finds calls that leaked into the text content in native mode.
use serde_json::Value;

use super::ToolCall;
use super::case::{ToolChoice, ToolDef};
use crate::evalset::{ChatMessage, EvalCase, EvalSetFile};

/// Calls read from a text, and the text without them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextCalls {
    pub calls: Vec<ToolCall>,
    /// The text with every call's span taken out, trimmed.
    pub rest: String,
    /// A `<tool_call>` block was opened and never closed (the answer stopped mid-call).
    pub unclosed: bool,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// Bare-object attempts at most, so a text of many braces costs little.
const MAX_BARE_ATTEMPTS: usize = 64;

/// The system-prompt text that describes the tools in prompt mode.
pub fn tools_prompt(tools: &[ToolDef], choice: Option<&ToolChoice>) -> String {
    let mut out = String::from("You can call tools. The tools are described below as JSON, one per line:\n<tools>\n");
    for t in tools {
        out.push_str(&t.openai()["function"].to_string());
        out.push('\n');
    }
    out.push_str(
        "</tools>\nTo call a tool, answer with one block per call and nothing else:\n\
         <tool_call>{\"name\": \"tool name\", \"arguments\": {…}}</tool_call>\n",
    );
    out.push_str(match choice {
        Some(ToolChoice::None) => "Do not call any tool now; answer in text.",
        Some(ToolChoice::Required) => "You must call at least one tool.",
        Some(ToolChoice::Tool(_)) => "You must call the tool named here: ",
        Some(ToolChoice::Auto) | None => "If no tool fits the request, answer in text without calling one.",
    });
    if let Some(ToolChoice::Tool(name)) = choice {
        out.push_str(name);
        out.push('.');
    }
    out
}

/// A tool case as sent in prompt mode: its messages with the tools described in the system
/// message (appended to the set's own, or a new one first), and no native tools.
pub fn prompt_mode_case(file: &EvalSetFile, case: &EvalCase) -> EvalCase {
    let mut messages = file.messages_for(case);
    let described = tools_prompt(&case.tools, case.tool_choice.as_ref());
    match messages.iter_mut().find(|m| m.role == "system") {
        Some(system) => {
            system.content.push_str("\n\n");
            system.content.push_str(&described);
        }
        None => messages.insert(
            0,
            ChatMessage {
                role: "system".into(),
                content: described,
            },
        ),
    }
    EvalCase {
        messages: Some(messages),
        tools: Vec::new(),
        tool_choice: None,
        ..case.clone()
    }
}

/// The calls in `text`.
pub fn calls_in_text(text: &str) -> TextCalls {
    let mut calls = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut unclosed = false;
    // 1. <tool_call> blocks.
    let mut from = 0;
    while let Some(open) = text[from..].find(OPEN).map(|i| from + i) {
        let body_start = open + OPEN.len();
        match text[body_start..].find(CLOSE).map(|i| body_start + i) {
            Some(close) => {
                calls.extend(calls_of(text[body_start..close].trim()));
                spans.push((open, close + CLOSE.len()));
                from = close + CLOSE.len();
            }
            None => {
                unclosed = true;
                calls.extend(calls_of(text[body_start..].trim()));
                spans.push((open, text.len()));
                break;
            }
        }
    }
    // 2. Fenced blocks holding call objects.
    if calls.is_empty() {
        let mut from = 0;
        while let Some(open) = text[from..].find("```").map(|i| from + i) {
            let after_fence = open + 3;
            let Some(body_start) = text[after_fence..].find('\n').map(|i| after_fence + i + 1) else {
                break;
            };
            let Some(close) = text[body_start..].find("```").map(|i| body_start + i) else {
                break;
            };
            let body = text[body_start..close].trim();
            if let Ok(value) = serde_json::from_str::<Value>(body)
                && let Some(found) = calls_of_value(&value)
            {
                calls.extend(found);
                spans.push((open, close + 3));
            }
            from = close + 3;
        }
    }
    // 3. A bare call object.
    if calls.is_empty() {
        for (attempt, (start, _)) in text.match_indices('{').enumerate() {
            if attempt >= MAX_BARE_ATTEMPTS {
                break;
            }
            let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
            if let Some(Ok(value)) = values.next()
                && let Some(found) = calls_of_value(&value)
            {
                calls.extend(found);
                spans.push((start, start + values.byte_offset()));
                break;
            }
        }
    }
    let mut rest = String::new();
    let mut at = 0;
    for (start, end) in spans {
        rest.push_str(&text[at..start]);
        at = end;
    }
    rest.push_str(&text[at..]);
    TextCalls {
        calls,
        rest: rest.trim().to_string(),
        unclosed,
    }
}

/// The calls in one `<tool_call>` body: call objects, or — when the body is not JSON — one call
/// whose arguments are the raw text after `"arguments":` (graded "arguments not JSON").
fn calls_of(body: &str) -> Vec<ToolCall> {
    if let Ok(value) = serde_json::from_str::<Value>(body)
        && let Some(found) = calls_of_value(&value)
    {
        return found;
    }
    vec![salvage(body)]
}

fn salvage(body: &str) -> ToolCall {
    static NAME: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r#""name"\s*:\s*"([^"]*)""#).expect("a valid pattern"));
    static ARGUMENTS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#""(?:arguments|parameters)"\s*:\s*"#).expect("a valid pattern")
    });
    let name = NAME.captures(body).map(|c| c[1].to_string()).unwrap_or_default();
    let arguments = match ARGUMENTS.find(body) {
        Some(m) => {
            let raw = body[m.end()..].trim_end();
            // The call object's own closing brace is not part of the arguments.
            raw.strip_suffix('}').unwrap_or(raw).trim_end().to_string()
        }
        None => body.to_string(),
    };
    ToolCall {
        id: None,
        name,
        arguments,
    }
}

/// A call object, or a list of them, as calls; None when `value` is not one.
fn calls_of_value(value: &Value) -> Option<Vec<ToolCall>> {
    match value {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_of_object).collect(),
        Value::Object(_) => call_of_object(value).map(|c| vec![c]),
        _ => None,
    }
}

fn call_of_object(value: &Value) -> Option<ToolCall> {
    let object = value.as_object()?;
    // OpenAI's own shape inside the text: {"type":"function","function":{…}}.
    if let Some(function) = object.get("function").filter(|f| f.is_object()) {
        return call_of_object(function);
    }
    let name = object.get("name")?.as_str()?.to_string();
    let arguments = ["arguments", "parameters", "input"]
        .iter()
        .find_map(|k| object.get(*k))
        .map(|a| match a {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| "{}".to_string());
    Some(ToolCall {
        id: None,
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_call_blocks_fences_and_bare_objects_are_read() {
        let t = calls_in_text(
            "Sure.\n<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}</tool_call>\n<tool_call>\n{\"name\":\"b\",\"parameters\":{}}\n</tool_call>",
        );
        assert_eq!(t.calls.len(), 2);
        assert_eq!(
            (t.calls[0].name.as_str(), t.calls[0].arguments.as_str()),
            ("a", "{\"x\":1}")
        );
        assert_eq!(t.rest, "Sure.");
        let fenced = calls_in_text("```json\n[{\"name\":\"a\",\"arguments\":{\"x\":1}},{\"name\":\"b\"}]\n```");
        assert_eq!(fenced.calls.len(), 2);
        assert_eq!(fenced.rest, "");
        let bare = calls_in_text("I will call {\"name\": \"a\", \"arguments\": {\"q\": \"{x}\"}} now");
        assert_eq!(bare.calls[0].arguments, json!({"q": "{x}"}).to_string());
        assert_eq!(bare.rest, "I will call  now");
        assert!(calls_in_text("The answer is {\"total\": 3}.").calls.is_empty());
    }

    #[test]
    fn a_broken_or_unclosed_block_is_still_a_call() {
        let t = calls_in_text("<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1,}}</tool_call>");
        assert_eq!(t.calls[0].name, "a");
        assert_eq!(t.calls[0].arguments, "{\"x\": 1,}");
        let cut = calls_in_text("<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": ");
        assert!(cut.unclosed);
        assert_eq!(cut.calls[0].name, "a");
    }

    #[test]
    fn the_prompt_lists_every_tool_and_the_format() {
        let tool = ToolDef::read(&json!({"name":"get_weather","parameters":{"type":"object"}}), "t").unwrap();
        let p = tools_prompt(&[tool], Some(&ToolChoice::Tool("get_weather".into())));
        assert!(p.contains("\"name\":\"get_weather\"") && p.contains("<tool_call>") && p.ends_with("get_weather."));
    }

    #[test]
    fn a_prompt_mode_case_carries_the_tools_in_its_system_message() {
        let file = EvalSetFile::parse(
            "t.jsonl",
            r#"{"bakeoff_evalset":1,"name":"t","task":"generation","system":"Be brief.","prompt":"{{q}}"}
{"id":"a","vars":{"q":"Weather in Oslo?"},"tools":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],"expected_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}}]}"#,
        )
        .unwrap();
        let sent = prompt_mode_case(&file, &file.cases[0]);
        let messages = sent.messages.as_ref().unwrap();
        assert_eq!(messages.len(), 2);
        assert!(messages[0].content.starts_with("Be brief.\n\nYou can call tools."));
        assert_eq!(messages[1].content, "Weather in Oslo?");
        assert!(sent.tools.is_empty() && sent.expected_calls.is_some());
    }
}
