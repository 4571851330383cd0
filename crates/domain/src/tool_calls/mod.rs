//! Tool cases (`docs/tool-cases.md`): a case whose request carries tools and whose expected
//! outcome is a set of calls, "no call", or text.
//!
//! - `case`: what an eval-set file says (the tools in the OpenAI or Anthropic shape, the tool
//!   choice, the expected calls with their per-argument graders);
//! - `assemble`: the calls of one answer rebuilt from what the server sent (streamed deltas
//!   by index, Anthropic `tool_use` blocks, whole messages);
//! - `text`: prompt mode (the tools described in the system prompt, calls read from the text);
//! - `grade`: one answer graded call by call and argument by argument, with a failure taxonomy.
//!
//! Nothing here does I/O: the engine feeds the assembler and stores the [`ToolTurn`].
mod assemble;
mod case;
mod grade;
pub mod levels;
pub mod structured;
mod text;

pub use assemble::{CallAssembler, calls_from_anthropic_content, calls_from_openai_message};
pub use case::{ArgGrader, ExpectedCall, ToolCaseError, ToolChoice, ToolDef, ToolExpectation, check_case};
pub use grade::{
    Abstention, ArgumentsRead, CallPair, TOOL_GRADER, ToolCallsDetail, ToolFailure, ToolReport, grade_turn,
    read_arguments, tool_report,
};
pub use text::{TextCalls, calls_in_text, prompt_mode_case, tools_prompt};

use serde::{Deserialize, Serialize};

use crate::evalset::EvalCase;
use crate::grading::Grade;

/// The `tool-calls` grade of a tool case's answer (None for a case without expected calls).
/// `content` is the answer's text; a record without a turn was sent natively and made no call.
pub fn grade_case(case: &EvalCase, turn: Option<&ToolTurn>, content: &str) -> Option<Grade> {
    let expectation = case.expected_calls.as_ref()?;
    let native = ToolTurn::default();
    Some(grade_turn(&case.tools, expectation, turn.unwrap_or(&native), content))
}

/// Whether an answer that broke off (a failed request: the connection ended or the stream
/// stopped) broke off while a call was being sent: natively, a call had started and the
/// stream never completed; in prompt mode, the text stops inside a `<tool_call>` block. Such an
/// answer is graded (`stream-cut`, a malformed call) as well as counted as a failed request.
pub fn cut_mid_call(turn: Option<&ToolTurn>, content: &str) -> bool {
    match turn {
        Some(t) if t.mode == ToolMode::Prompt => calls_in_text(content).unclosed,
        Some(t) => t.cut_mid_call,
        None => false,
    }
}

/// One call as the model made it: the arguments kept as the raw text the server sent (so a
/// record stays re-gradable), never repaired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// How the tools reached the model and how its calls were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// The provider's tool API (`tools`, `tool_calls`, `tool_use` blocks).
    #[default]
    Native,
    /// The tools described in the system prompt; calls read from the answer's text.
    Prompt,
}

impl ToolMode {
    pub fn is_native(&self) -> bool {
        *self == ToolMode::Native
    }

    pub fn parse(s: &str) -> Option<ToolMode> {
        match s.trim() {
            "native" => Some(ToolMode::Native),
            "prompt" => Some(ToolMode::Prompt),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ToolMode::Native => "native",
            ToolMode::Prompt => "prompt",
        }
    }
}

/// How a run sends its tool cases: every candidate through one mode, or `Both`: each candidate
/// natively and, right after it at the same load, as its prompt-mode variant — a candidate of the
/// run of its own ([`prompt_mode_name`]), so each mode has its own column, figures and verdict
/// on every page (`RunConfig::prompt_mode_candidates` says which candidates are the variants).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunToolMode {
    #[default]
    Native,
    Prompt,
    Both,
}

impl RunToolMode {
    pub fn is_native(&self) -> bool {
        *self == RunToolMode::Native
    }

    pub fn parse(s: &str) -> Option<RunToolMode> {
        match s.trim() {
            "native" => Some(RunToolMode::Native),
            "prompt" => Some(RunToolMode::Prompt),
            "both" => Some(RunToolMode::Both),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            RunToolMode::Native => "native",
            RunToolMode::Prompt => "prompt",
            RunToolMode::Both => "both",
        }
    }

    /// The mode candidate `candidate_id` of the run is sent in: in a `Both` run, prompt mode
    /// for the prompt-mode variants, native for the others.
    pub fn of_candidate(&self, candidate_id: i64, prompt_mode_candidates: &[i64]) -> ToolMode {
        match self {
            RunToolMode::Native => ToolMode::Native,
            RunToolMode::Prompt => ToolMode::Prompt,
            RunToolMode::Both if prompt_mode_candidates.contains(&candidate_id) => ToolMode::Prompt,
            RunToolMode::Both => ToolMode::Native,
        }
    }
}

impl From<ToolMode> for RunToolMode {
    fn from(mode: ToolMode) -> RunToolMode {
        match mode {
            ToolMode::Native => RunToolMode::Native,
            ToolMode::Prompt => RunToolMode::Prompt,
        }
    }
}

/// What a candidate's prompt-mode variant is called in a run whose tool mode is `both`.
pub const PROMPT_MODE_SUFFIX: &str = " (prompt mode)";

/// The name of `candidate`'s prompt-mode variant.
pub fn prompt_mode_name(candidate: &str) -> String {
    format!("{candidate}{PROMPT_MODE_SUFFIX}")
}

/// The calls of one answer, as recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolTurn {
    pub mode: ToolMode,
    /// Native calls (in prompt mode these are read from the text when graded, not stored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCall>,
    /// The stream ended (no finish, no stop event) while a call was still being sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_mid_call: bool,
    /// Offset from send of the first argument delta, µs (streamed native calls only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_argument_us: Option<i64>,
    /// Offset from send at which the last call was complete, µs (streamed native calls only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_us: Option<i64>,
}
