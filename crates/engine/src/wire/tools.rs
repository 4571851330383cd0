//! A tool case's tools and tool choice in each provider's request shape. Prompt mode sends no
//! native tools (`domain::tool_calls::prompt_mode_case` puts them in the system message first).
use std::borrow::Cow;

use serde_json::{Map, Value};

use super::client::Exchange;
use crate::domain::candidate::ProviderKind;
use crate::domain::evalset::{EvalCase, EvalSetFile};
use crate::domain::tool_calls::{ToolMode, ToolTurn, prompt_mode_case};

/// Adds `tools` (and `tool_choice`) to the body when the case has tools. OpenAI-compatible chat
/// and Azure take the OpenAI shape, Anthropic its own; the legacy completions and the Responses
/// API are sent none (a tool case there runs in prompt mode; see `docs/tool-cases.md`).
pub fn add_tools(kind: ProviderKind, body: &mut Map<String, Value>, case: &EvalCase) {
    if case.tools.is_empty() {
        return;
    }
    match kind {
        ProviderKind::OpenAiChat | ProviderKind::AzureOpenAi => {
            body.insert(
                "tools".into(),
                Value::Array(case.tools.iter().map(|t| t.openai()).collect()),
            );
            if let Some(choice) = &case.tool_choice {
                body.insert("tool_choice".into(), choice.openai());
            }
        }
        ProviderKind::Anthropic => {
            body.insert(
                "tools".into(),
                Value::Array(case.tools.iter().map(|t| t.anthropic()).collect()),
            );
            if let Some(choice) = &case.tool_choice {
                body.insert("tool_choice".into(), choice.anthropic());
            }
        }
        ProviderKind::OpenAiCompletions | ProviderKind::OpenAiResponses => {}
    }
}

/// Structured output (`domain::tool_calls::structured`): OpenAI-compatible chat and Azure get
/// `response_format`; Anthropic a forced tool whose input schema is the schema (its `tool_use`
/// input is the answer, [`structured_answer`]); the legacy completions and the Responses API are
/// sent none (the answer is still graded against the schema).
pub fn add_response_format(kind: ProviderKind, body: &mut Map<String, Value>, case: &EvalCase) {
    let Some(format) = &case.response_format else {
        return;
    };
    match kind {
        ProviderKind::OpenAiChat | ProviderKind::AzureOpenAi => {
            body.insert("response_format".into(), format.openai());
        }
        ProviderKind::Anthropic => {
            body.insert("tools".into(), Value::Array(vec![format.anthropic_tool()]));
            body.insert("tool_choice".into(), format.anthropic_choice());
        }
        ProviderKind::OpenAiCompletions | ProviderKind::OpenAiResponses => {}
    }
}

/// A structured-output case's answer through Anthropic's forced tool: the tool's input becomes
/// the answer text (what is graded against the schema), and no tool turn is kept.
pub fn structured_answer(exchange: &mut Exchange, case: &EvalCase) {
    let Some(format) = &case.response_format else {
        return;
    };
    if let Some(turn) = exchange.tool_turn.take() {
        match turn.calls.iter().find(|c| c.name == format.name) {
            Some(call) if exchange.output.trim().is_empty() => exchange.output = call.arguments.clone(),
            _ => exchange.tool_turn = Some(turn),
        }
    }
}

/// Whether a provider kind takes tools natively.
pub fn sends_native_tools(kind: ProviderKind) -> bool {
    matches!(
        kind,
        ProviderKind::OpenAiChat | ProviderKind::AzureOpenAi | ProviderKind::Anthropic
    )
}

/// How a run's tool cases reach this provider: the run's mode, or prompt mode where the
/// provider takes no native tools.
pub fn mode_for(kind: ProviderKind, run_mode: ToolMode) -> ToolMode {
    if sends_native_tools(kind) {
        run_mode
    } else {
        ToolMode::Prompt
    }
}

/// The case as sent: a tool case in prompt mode carries its tools in the system message.
pub fn case_as_sent<'a>(file: &EvalSetFile, case: &'a EvalCase, mode: ToolMode) -> Cow<'a, EvalCase> {
    if mode == ToolMode::Prompt && case.is_tool_case() {
        Cow::Owned(prompt_mode_case(file, case))
    } else {
        Cow::Borrowed(case)
    }
}

/// A tool case's record carries its tool turn (with the mode it was sent in) even when the
/// answer made no call, so grading knows how to read it.
pub fn mark_tool_turn(exchange: &mut Exchange, case: &EvalCase, mode: ToolMode) {
    if case.is_tool_case() {
        exchange.tool_turn.get_or_insert_with(ToolTurn::default).mode = mode;
    }
}

/// Whether a streamed answer's calls were sent whole: the stream completed (a finish reason or
/// the protocol's end) and the answer did not stop at its token limit (which cuts a call too).
pub fn calls_finished(stream_completed: bool, finish_reason: Option<&str>) -> bool {
    stream_completed && finish_reason != Some("length")
}

#[cfg(test)]
mod structured_tests {
    use serde_json::{Map, json};

    use super::{Exchange, add_response_format, structured_answer};
    use crate::domain::candidate::ProviderKind;
    use crate::domain::evalset::EvalSetFile;
    use crate::domain::tool_calls::{ToolCall, ToolTurn};

    fn case() -> crate::domain::evalset::EvalCase {
        let set = r#"{"bakeoff_evalset":1,"name":"s","task":"extraction","prompt":"{{q}}"}
{"id":"o","vars":{"q":"Order 7?"},"expected":{"id":7},"response_format":{"type":"json_schema","json_schema":{"name":"order","schema":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}}}}"#;
        EvalSetFile::parse("s.jsonl", set).unwrap().cases[0].clone()
    }

    #[test]
    fn openai_gets_response_format_and_anthropic_a_forced_tool_whose_input_is_the_answer() {
        let case = case();
        let mut openai = Map::new();
        add_response_format(ProviderKind::OpenAiChat, &mut openai, &case);
        assert_eq!(openai["response_format"]["type"], "json_schema");
        assert_eq!(openai["response_format"]["json_schema"]["name"], "order");
        let mut anthropic = Map::new();
        add_response_format(ProviderKind::Anthropic, &mut anthropic, &case);
        assert_eq!(anthropic["tool_choice"], json!({"type": "tool", "name": "order"}));
        assert_eq!(anthropic["tools"][0]["input_schema"]["required"], json!(["id"]));
        assert!(!anthropic.contains_key("response_format"));
        let mut legacy = Map::new();
        add_response_format(ProviderKind::OpenAiCompletions, &mut legacy, &case);
        assert!(legacy.is_empty());
        // Anthropic's answer: the forced tool's input is the text graded against the schema.
        let mut x = Exchange {
            tool_turn: Some(ToolTurn {
                calls: vec![ToolCall {
                    id: Some("toolu_1".into()),
                    name: "order".into(),
                    arguments: r#"{"id": 7}"#.into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        structured_answer(&mut x, &case);
        assert_eq!((x.output.as_str(), x.tool_turn.is_none()), (r#"{"id": 7}"#, true));
    }
}

/// The trap set (`tests/fixtures/tool_calls/traps.jsonl`): recorded answers, each with a hand
/// label, read through the real stream path (bytes → SSE → the provider's decoder → the
/// assembler) and graded; every label must come out exactly.
#[cfg(test)]
mod traps {
    use serde_json::{Value, json};

    use super::calls_finished;
    use crate::domain::candidate::ProviderKind;
    use crate::domain::tool_calls::{
        CallAssembler, ToolCallsDetail, ToolDef, ToolExpectation, ToolFailure, ToolMode, ToolTurn, grade_turn,
    };
    use crate::wire::protocol::ToolPiece;
    use crate::wire::provider::{parse_completion, stream_decoder};
    use crate::wire::sse::SseParser;

    const TRAPS: &str = include_str!("../../../../tests/fixtures/tool_calls/traps.jsonl");

    /// The event-stream text of a trap: OpenAI `data:` lines ending in `[DONE]`, Anthropic
    /// named events; a cut trap ends without the end marker.
    fn stream_text(kind: ProviderKind, events: &[Value], cut: bool) -> String {
        let mut text = String::new();
        for e in events {
            if kind == ProviderKind::Anthropic {
                text.push_str(&format!("event: {}\n", e["type"].as_str().unwrap_or("x")));
            }
            text.push_str(&format!("data: {e}\n\n"));
        }
        if !cut && kind != ProviderKind::Anthropic {
            text.push_str("data: [DONE]\n\n");
        }
        text
    }

    /// The turn and text content a trap's answer reads as.
    fn read_answer(trap: &Value, kind: ProviderKind) -> (ToolTurn, String) {
        if let Some(whole) = trap.get("whole") {
            let completion = parse_completion(kind, &whole.to_string()).expect("a whole answer parses");
            let turn = ToolTurn {
                calls: completion.tool_calls,
                ..Default::default()
            };
            return (turn, completion.content);
        }
        let events = trap["events"].as_array().expect("events");
        let bytes = stream_text(kind, events, trap["cut"] == true).into_bytes();
        let step = trap["split_every"].as_u64().map_or(bytes.len(), |n| n as usize);
        let (mut parser, mut decoder) = (SseParser::new(), stream_decoder(kind));
        let (mut assembler, mut content) = (CallAssembler::new(), String::new());
        let (mut finish_reason, mut done): (Option<String>, bool) = (None, false);
        let mut decoded = Vec::new();
        for (at, read) in bytes.chunks(step).enumerate() {
            for event in parser.push(read).expect("lines are short") {
                decoded.push((at as i64, event));
            }
        }
        decoded.extend(parser.finish().map(|e| (bytes.len() as i64, e)));
        for (at, event) in decoded {
            let update = decoder.decode(&event).expect("every trap event decodes");
            match update.tool_piece.map(|p| *p) {
                Some(ToolPiece::OpenAi(v)) => _ = assembler.push_openai(&v, at),
                Some(ToolPiece::Anthropic(v)) => _ = assembler.push_anthropic(&v, at),
                None => {}
            }
            content.push_str(&update.content);
            finish_reason = update.finish_reason.or(finish_reason);
            done |= update.done;
        }
        let completed = done || finish_reason.is_some();
        (
            assembler.finish(calls_finished(completed, finish_reason.as_deref())),
            content,
        )
    }

    #[test]
    fn every_trap_is_graded_as_its_hand_label_says() {
        let mut lines = TRAPS.lines().filter(|l| !l.trim().is_empty());
        let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let tools: Vec<ToolDef> = header["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| ToolDef::read(t, "tools").unwrap())
            .collect();
        let (mut count, mut wrong, mut cut_graded) = (0, Vec::new(), 0);
        let mut kinds_seen = std::collections::BTreeSet::new();
        for line in lines {
            let trap: Value = serde_json::from_str(line).unwrap();
            let id = trap["id"].as_str().unwrap();
            let kind = match trap["provider"].as_str() {
                Some("anthropic") => ProviderKind::Anthropic,
                _ => ProviderKind::OpenAiChat,
            };
            let expectation = ToolExpectation::read(&trap["expect"], "expect").unwrap();
            let (mut turn, content) = read_answer(&trap, kind);
            turn.mode = ToolMode::parse(trap["mode"].as_str().unwrap()).unwrap();
            // A trap whose connection broke off: the engine grades it (a failed request too) only
            // when a call was being sent.
            if trap["cut"] == true {
                let graded = crate::domain::tool_calls::cut_mid_call(Some(&turn), &content);
                let labelled = trap["graded_when_failed"]
                    .as_bool()
                    .unwrap_or_else(|| trap["label"]["failures"].to_string().contains("stream-cut"));
                if graded != labelled {
                    wrong.push(format!("{id}: graded when failed {graded}, labelled {labelled}"));
                }
                cut_graded += usize::from(graded);
            }
            let grade = grade_turn(&tools, &expectation, &turn, &content);
            let detail = ToolCallsDetail::from_grade(&grade).unwrap();
            let mut failures: Vec<&str> = detail.failures.iter().map(ToolFailure::kind).collect();
            failures.sort_unstable();
            kinds_seen.extend(failures.iter().copied());
            let got = json!({"passed": grade.passed, "failures": failures});
            if got != trap["label"] {
                wrong.push(format!(
                    "{id}: labelled {}, graded {got} ({})",
                    trap["label"], grade.reason
                ));
            }
            count += 1;
        }
        assert!(count >= 40, "only {count} traps");
        assert!(
            wrong.is_empty(),
            "{} of {count} traps graded against their label:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
        // The set exercises every failure kind but none.
        let missing: Vec<&&str> = ToolFailure::KINDS
            .iter()
            .filter(|k| !kinds_seen.contains(**k))
            .collect();
        assert!(missing.is_empty(), "no trap of kind {missing:?}");
        assert!(cut_graded >= 5, "only {cut_graded} answers cut mid-call");
        eprintln!(
            "tool-call trap set: {count} recorded answers, all graded as labelled ({cut_graded} broke off mid-call: \
             failed requests graded stream-cut)"
        );
    }
}
