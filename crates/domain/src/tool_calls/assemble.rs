//! The calls of one answer rebuilt from what the server sent.
//!
//! OpenAI-compatible streams send `choices[0].delta.tool_calls`: a list of pieces, each with
//! the `index` of its call; the first piece of a call carries its `id` and name, later ones
//! only more `function.arguments` text, and several calls may interleave. Anthropic streams send
//! a `content_block_start` of type `tool_use` (id, name, an empty `input`), then
//! `input_json_delta` pieces (`partial_json`), then `content_block_stop`. Arguments are joined
//! exactly as sent, never parsed or repaired here (grading reads them).
use serde_json::Value;

use super::{ToolCall, ToolMode, ToolTurn};

#[derive(Debug, Default)]
struct Partial {
    /// The OpenAI `index`, or the Anthropic content-block index.
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
    /// Anthropic: the block's `input` from its start event (used when no delta follows).
    start_input: Option<Value>,
    /// Anthropic: `content_block_stop` seen.
    stopped: bool,
}

/// Assembles one streamed answer's calls; feed it every event, then [`CallAssembler::finish`].
#[derive(Debug, Default)]
pub struct CallAssembler {
    calls: Vec<Partial>,
    first_argument_us: Option<i64>,
    last_piece_us: Option<i64>,
    anthropic: bool,
}

impl CallAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any call has begun.
    pub fn has_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    fn call_at(&mut self, index: u64) -> &mut Partial {
        let pos = match self.calls.iter().position(|c| c.index == index) {
            Some(pos) => pos,
            None => {
                self.calls.push(Partial {
                    index,
                    ..Default::default()
                });
                self.calls.len() - 1
            }
        };
        &mut self.calls[pos]
    }

    /// Returns whether the piece carried text.
    fn arguments_piece(&mut self, index: u64, piece: &str, at_us: i64) -> bool {
        if !piece.is_empty() {
            self.first_argument_us.get_or_insert(at_us);
        }
        self.last_piece_us = Some(at_us);
        self.call_at(index).arguments.push_str(piece);
        !piece.is_empty()
    }

    /// One OpenAI-compatible `delta.tool_calls` list, received `at_us` after send. A piece
    /// without `index` is taken as the call at its position in the list (some servers omit it
    /// when there is one call). Returns whether any piece carried text (a name or arguments).
    pub fn push_openai(&mut self, tool_calls: &Value, at_us: i64) -> bool {
        let Some(pieces) = tool_calls.as_array() else {
            return false;
        };
        let mut carried = false;
        for (position, piece) in pieces.iter().enumerate() {
            let index = piece.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
            let call = self.call_at(index);
            if let Some(id) = piece.get("id").and_then(Value::as_str)
                && call.id.is_none()
                && !id.is_empty()
            {
                call.id = Some(id.to_string());
            }
            let function = piece.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                // Most servers send the whole name once; a few resend it, or send it in pieces.
                if !call.name.ends_with(name) || call.name.is_empty() {
                    call.name.push_str(name);
                }
                carried |= !name.is_empty();
            }
            carried |= match function.and_then(|f| f.get("arguments")) {
                Some(Value::String(piece)) => self.arguments_piece(index, piece, at_us),
                // Some servers (Ollama) send the arguments as an object, whole.
                Some(object @ Value::Object(_)) => self.arguments_piece(index, &object.to_string(), at_us),
                _ => {
                    self.last_piece_us = Some(at_us);
                    false
                }
            };
        }
        carried
    }

    /// One Anthropic stream event (its `data` as JSON). Returns whether it carried call text (a
    /// tool_use block's start with its name, or a non-empty `partial_json`).
    pub fn push_anthropic(&mut self, event: &Value, at_us: i64) -> bool {
        self.anthropic = true;
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event.get("type").and_then(Value::as_str) {
            Some("content_block_start") => {
                let Some(block) = event.get("content_block").filter(|b| b["type"] == "tool_use") else {
                    return false;
                };
                let call = self.call_at(index);
                call.id = block.get("id").and_then(Value::as_str).map(str::to_string);
                call.name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                call.start_input = block.get("input").cloned();
                self.last_piece_us = Some(at_us);
                true
            }
            Some("content_block_delta") => {
                let delta = &event["delta"];
                if delta["type"] != "input_json_delta" || !self.calls.iter().any(|c| c.index == index) {
                    return false;
                }
                let piece = delta.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                self.arguments_piece(index, piece, at_us)
            }
            Some("content_block_stop") => {
                if let Some(call) = self.calls.iter_mut().find(|c| c.index == index) {
                    call.stopped = true;
                    self.last_piece_us = Some(at_us);
                }
                false
            }
            _ => false,
        }
    }

    /// The turn once the stream has ended; `finished` is whether the stream ended properly (a
    /// finish reason, `[DONE]` or `message_stop` — not a dropped connection or a timeout).
    pub fn finish(self, finished: bool) -> ToolTurn {
        let anthropic = self.anthropic;
        let open_block = anthropic && self.calls.iter().any(|c| !c.stopped);
        let calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .map(|c| {
                let arguments = if c.arguments.is_empty() {
                    // No argument pieces: Anthropic's start input, or an argument-less call.
                    c.start_input.map(|v| v.to_string()).unwrap_or_default()
                } else {
                    c.arguments
                };
                ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments,
                }
            })
            .collect();
        let cut_mid_call = !calls.is_empty() && (!finished || open_block);
        ToolTurn {
            mode: ToolMode::Native,
            complete_us: if cut_mid_call || calls.is_empty() {
                None
            } else {
                self.last_piece_us
            },
            first_argument_us: self.first_argument_us,
            calls,
            cut_mid_call,
        }
    }
}

/// The calls of a whole (non-streamed) OpenAI-compatible `message`.
pub fn calls_from_openai_message(message: &Value) -> Vec<ToolCall> {
    let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
        return Vec::new();
    };
    calls
        .iter()
        .map(|c| {
            let function = &c["function"];
            ToolCall {
                id: c.get("id").and_then(Value::as_str).map(str::to_string),
                name: function
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                arguments: match function.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                },
            }
        })
        .collect()
}

/// The `tool_use` blocks of a whole Anthropic `content` list.
pub fn calls_from_anthropic_content(content: &Value) -> Vec<ToolCall> {
    let Some(blocks) = content.as_array() else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| ToolCall {
            id: b.get("id").and_then(Value::as_str).map(str::to_string),
            name: b.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
            arguments: b.get("input").map(Value::to_string).unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn piece(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
        let mut f = serde_json::Map::new();
        if let Some(n) = name {
            f.insert("name".into(), json!(n));
        }
        f.insert("arguments".into(), json!(args));
        let mut p = json!({"index": index, "function": f});
        if let Some(id) = id {
            p["id"] = json!(id);
            p["type"] = json!("function");
        }
        json!([p])
    }

    #[test]
    fn interleaved_calls_assemble_by_index_with_the_first_id() {
        let mut a = CallAssembler::new();
        a.push_openai(&piece(0, Some("call_a"), Some("get_weather"), ""), 10);
        a.push_openai(&piece(1, Some("call_b"), Some("get_time"), "{\"tz\":"), 20);
        a.push_openai(&piece(0, None, None, "{\"city\":\"巴"), 30);
        a.push_openai(&piece(1, None, None, "\"UTC\"}"), 40);
        a.push_openai(&piece(0, None, None, "黎\"}"), 50);
        let turn = a.finish(true);
        assert_eq!(turn.calls.len(), 2);
        assert_eq!(turn.calls[0].id.as_deref(), Some("call_a"));
        assert_eq!(turn.calls[0].arguments, "{\"city\":\"巴黎\"}");
        assert_eq!(turn.calls[1].arguments, "{\"tz\":\"UTC\"}");
        assert_eq!((turn.first_argument_us, turn.complete_us), (Some(20), Some(50)));
        assert!(!turn.cut_mid_call);
    }

    #[test]
    fn a_stream_that_ends_without_a_finish_is_cut_mid_call() {
        let mut a = CallAssembler::new();
        a.push_openai(&piece(0, Some("c"), Some("f"), "{\"a\":"), 1);
        let turn = a.finish(false);
        assert!(turn.cut_mid_call);
        assert_eq!(turn.complete_us, None);
        assert!(!CallAssembler::new().finish(false).cut_mid_call);
    }

    #[test]
    fn anthropic_tool_use_blocks_assemble_from_input_json_deltas() {
        let mut a = CallAssembler::new();
        assert!(!a.push_anthropic(
            &json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            1
        ));
        assert!(!a.push_anthropic(
            &json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me"}}),
            2
        ));
        assert!(a.push_anthropic(&json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}), 3));
        for (i, p) in ["", "{\"ci", "ty\": \"Par", "is\"}"].iter().enumerate() {
            a.push_anthropic(
                &json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":p}}),
                4 + i as i64,
            );
        }
        a.push_anthropic(&json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}}), 9);
        a.push_anthropic(&json!({"type":"content_block_stop","index":2}), 10);
        assert!(!a.push_anthropic(&json!({"type":"content_block_stop","index":1}), 11));
        let turn = a.finish(true);
        assert_eq!(turn.calls[0].arguments, "{\"city\": \"Paris\"}");
        assert_eq!(turn.calls[1].arguments, "{}");
        assert_eq!(turn.first_argument_us, Some(5));
        assert!(!turn.cut_mid_call);
    }

    #[test]
    fn an_unclosed_anthropic_block_is_cut_even_after_a_clean_end() {
        let mut a = CallAssembler::new();
        a.push_anthropic(&json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}), 1);
        a.push_anthropic(&json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}), 2);
        assert!(a.finish(true).cut_mid_call);
    }

    #[test]
    fn whole_messages_give_their_calls() {
        let m = json!({"role":"assistant","content":null,"tool_calls":[
            {"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
            {"id":"2","type":"function","function":{"name":"g","arguments":{"b":2}}}]});
        let calls = calls_from_openai_message(&m);
        assert_eq!(calls[0].arguments, "{\"a\":1}");
        assert_eq!(calls[1].arguments, "{\"b\":2}");
        let content = json!([{"type":"text","text":"ok"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]);
        assert_eq!(calls_from_anthropic_content(&content)[0].arguments, "{\"a\":1}");
    }
}
