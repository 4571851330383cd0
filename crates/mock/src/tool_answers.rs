//! The mock's answers to tool cases: the expected calls, or the same calls with one mistake of
//! the profile's `tool_faults` (drawn once per seed, profile and case), rendered natively (the
//! calls' arguments, laid out for `tool_calls` deltas) or in prompt mode (`<tool_call>` blocks
//! in the text).
use serde_json::{Map, Value};

use super::profile::ToolFaults;
use super::rng::{stable_hash, unit};
use crate::domain::evalset::EvalCase;
use crate::domain::tool_calls::{ArgGrader, ToolExpectation};

/// What the mock answers to a tool case.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// (name, arguments text) of each call, as sent.
    pub calls: Vec<(String, String)>,
    /// The mistake made (`tool_faults` kinds, or `wrong_value` beyond the accuracy); None: right.
    pub fault: Option<&'static str>,
    /// Native mode: the calls go in the text content, not the tool API.
    pub in_text: bool,
    /// The text answer when the case expects none or text (and no call is made).
    pub text: String,
}

impl ToolAnswer {
    /// The stream is to be cut halfway through the first call (`tool_faults.stream_cut`).
    pub fn cut_mid_call(&self) -> bool {
        self.fault == Some("stream_cut")
    }
}

impl ToolAnswer {
    /// The answer's calls as prompt-mode text: one `<tool_call>` block each.
    pub fn as_text(&self) -> String {
        if self.calls.is_empty() {
            return self.text.clone();
        }
        self.calls
            .iter()
            .map(|(name, arguments)| {
                // A prompt-mode call carries its arguments as an object: a double-encoded one is
                // then a string holding a string.
                let arguments = if self.fault == Some("arguments_double_encoded") {
                    Value::String(arguments.clone()).to_string()
                } else {
                    arguments.clone()
                };
                format!(
                    "<tool_call>{{\"name\": {}, \"arguments\": {arguments}}}</tool_call>",
                    Value::String(name.clone())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The answer to tool case `case` (None when it is no tool case).
pub fn tool_answer(case: &EvalCase, parts: &[&[u8]], correct: bool, faults: &ToolFaults) -> Option<ToolAnswer> {
    let expectation = case.expected_calls.as_ref()?;
    let mut calls: Vec<(String, Map<String, Value>)> = match expectation {
        ToolExpectation::Calls { calls, .. } => calls.iter().map(|c| (c.name.clone(), arguments_for(c))).collect(),
        ToolExpectation::NoCall | ToolExpectation::Text => Vec::new(),
    };
    let as_texts = |calls: &[(String, Map<String, Value>)]| -> Vec<(String, String)> {
        calls
            .iter()
            .map(|(name, args)| (name.clone(), Value::Object(args.clone()).to_string()))
            .collect()
    };
    let right = as_texts(&calls);
    let mut draw_parts = parts.to_vec();
    draw_parts.push(b"tool-fault".as_slice());
    let mut u = unit(stable_hash(&draw_parts));
    let mut fault = None;
    for (kind, rate) in faults.rates() {
        if u < rate {
            fault = Some(kind);
            break;
        }
        u -= rate;
    }
    if fault.is_none() && !correct {
        fault = match calls.first_mut().and_then(|(_, args)| args.values_mut().next()) {
            Some(value) => {
                *value = wrong_value(value);
                Some("wrong_value")
            }
            // Nothing to get wrong in a call without arguments (or no call): call it wrong.
            None => Some("wrong_tool"),
        };
    }
    let other_tool = |name: &str| {
        case.tools
            .iter()
            .map(|t| t.name.clone())
            .find(|n| n != name)
            .unwrap_or_else(|| format!("{name}_v2"))
    };
    match fault {
        Some("wrong_tool") => match calls.first_mut() {
            Some((name, _)) => *name = other_tool(name),
            None => calls.push((other_tool(""), Map::new())),
        },
        Some("missing_call") => {
            calls.pop();
        }
        Some("extra_call") => {
            let extra = calls.first().cloned().unwrap_or_else(|| (other_tool(""), Map::new()));
            calls.push(extra);
        }
        _ => {}
    }
    let mut texts = as_texts(&calls);
    if let Some((_, first)) = texts.first_mut() {
        match fault {
            Some("arguments_not_json") => {
                first.pop();
            }
            Some("arguments_double_encoded") => *first = Value::String(first.clone()).to_string(),
            _ => {}
        }
    }
    let text = match (expectation, case.expected_text()) {
        (ToolExpectation::Text | ToolExpectation::NoCall, Some(t)) => t,
        _ => "I can answer that without a tool.".to_string(),
    };
    // A fault that changes nothing (no call to garble, none to leave out) is no fault: the
    // ground truth says what the answer really is.
    let in_text = fault == Some("call_in_text") && !texts.is_empty();
    let cut = fault == Some("stream_cut") && !texts.is_empty();
    if texts == right && !in_text && !cut {
        fault = None;
    }
    Some(ToolAnswer {
        calls: texts,
        fault,
        in_text,
        text,
    })
}

/// The expected arguments, with a value for each graded argument the case gives none
/// (the first of an `enum` or `any-of`; `present` and `regex` ones get a placeholder).
fn arguments_for(call: &crate::domain::tool_calls::ExpectedCall) -> Map<String, Value> {
    let mut args = call.arguments.clone();
    for (name, grader) in &call.graders {
        // An optional argument without an expected value is left out.
        if args.contains_key(name) || call.optional.contains(name) {
            continue;
        }
        let value = match grader {
            ArgGrader::Enum { values } | ArgGrader::AnyOf { values } => values.first().cloned(),
            ArgGrader::Present | ArgGrader::Regex { .. } => Some(Value::String("x".into())),
            _ => None,
        };
        if let Some(v) = value {
            args.insert(name.clone(), v);
        }
    }
    args
}

/// A plausible wrong value of the same type.
fn wrong_value(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i.wrapping_add(1)),
            None => Value::from(n.as_f64().unwrap_or(0.0) * 2.0 + 1.0),
        },
        Value::String(s) => Value::String(format!("{s} (unsure)")),
        Value::Bool(b) => Value::Bool(!b),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::evalset::EvalSetFile;

    const SET: &str = r#"{"bakeoff_evalset":1,"name":"t","task":"generation","prompt":"{{q}}"}
{"id":"w","vars":{"q":"Weather?"},"tools":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}},{"name":"get_time","parameters":{"type":"object"}}],"expected_calls":[{"name":"get_weather","arguments":{"city":"Oslo","days":2}}]}"#;

    fn case() -> EvalCase {
        EvalSetFile::parse("t", SET).unwrap().cases[0].clone()
    }

    #[test]
    fn right_answers_are_the_expected_calls() {
        let a = tool_answer(&case(), &[b"p"], true, &ToolFaults::default()).unwrap();
        assert_eq!(
            a.calls,
            [("get_weather".to_string(), r#"{"city":"Oslo","days":2}"#.to_string())]
        );
        assert_eq!(a.fault, None);
        assert_eq!(
            a.as_text(),
            r#"<tool_call>{"name": "get_weather", "arguments": {"city":"Oslo","days":2}}</tool_call>"#
        );
    }

    #[test]
    fn each_fault_changes_the_calls_as_named() {
        let only = |kind: &str| {
            let mut f = ToolFaults::default();
            match kind {
                "wrong_tool" => f.wrong_tool = 1.0,
                "missing_call" => f.missing_call = 1.0,
                "extra_call" => f.extra_call = 1.0,
                "arguments_not_json" => f.arguments_not_json = 1.0,
                "arguments_double_encoded" => f.arguments_double_encoded = 1.0,
                "stream_cut" => f.stream_cut = 1.0,
                _ => f.call_in_text = 1.0,
            }
            tool_answer(&case(), &[b"p"], true, &f).unwrap()
        };
        assert_eq!(only("wrong_tool").calls[0].0, "get_time");
        assert!(only("missing_call").calls.is_empty());
        assert_eq!(only("extra_call").calls.len(), 2);
        assert!(serde_json::from_str::<Value>(&only("arguments_not_json").calls[0].1).is_err());
        assert!(
            serde_json::from_str::<Value>(&only("arguments_double_encoded").calls[0].1)
                .unwrap()
                .is_string()
        );
        assert!(only("call_in_text").in_text);
        // A cut keeps the calls as they are (the stream breaks off halfway through the first).
        let cut = only("stream_cut");
        let right = tool_answer(&case(), &[b"p"], true, &ToolFaults::default()).unwrap();
        assert!(cut.cut_mid_call() && cut.calls == right.calls && !right.cut_mid_call());
        let wrong = tool_answer(&case(), &[b"p"], false, &ToolFaults::default()).unwrap();
        assert_eq!(wrong.fault, Some("wrong_value"));
        assert_eq!(wrong.calls[0].1, r#"{"city":"Oslo (unsure)","days":2}"#);
    }
}
