//! Reading the header and a case from one line's JSON object field by field, so that every
//! bad field of a line is reported with its path (serde alone stops at the first and names
//! the value, not the field).
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::conversation::{HistoryMode, Turn};
use super::problems::kind_of;
use super::{ChatMessage, EvalCase, EvalSetHeader, TaskKind};
use crate::grading::Grader;
use crate::tool_calls::{ToolCaseError, ToolChoice, ToolDef, ToolExpectation};

/// (field path, message) pairs found on one line.
pub(super) type FieldProblems = Vec<(String, String)>;

const HEADER_FIELDS: [&str; 12] = [
    "bakeoff_evalset",
    "name",
    "task",
    "description",
    "language",
    "system",
    "prompt",
    "graders",
    "max_tokens",
    "temperature",
    "grade_reasoning",
    "history",
];
const CASE_FIELDS: [&str; 13] = [
    "id",
    "vars",
    "messages",
    "expected",
    "graders",
    "tags",
    "weight",
    "tools",
    "tool_choice",
    "expected_calls",
    "turns",
    "history",
    "response_format",
];
const TURN_FIELDS: [&str; 5] = ["user", "vars", "expected", "graders", "golden"];

/// One line's object, read by the rules of `what` ("header", "case").
struct Reader<'a> {
    object: &'a Map<String, Value>,
    problems: FieldProblems,
}

impl<'a> Reader<'a> {
    fn new(object: &'a Map<String, Value>, known: &[&str], what: &str) -> Self {
        let problems = object
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| {
                (
                    k.clone(),
                    format!("is not a {what} field (known: {})", known.join(", ")),
                )
            })
            .collect();
        Reader { object, problems }
    }

    fn problem(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push((field.into(), message.into()));
    }

    /// The field as `T`, None when absent, null or of the wrong type (then a problem saying
    /// what it must be).
    fn optional<T: DeserializeOwned>(&mut self, field: &str, must_be: &str) -> Option<T> {
        let value = self.object.get(field).filter(|v| !v.is_null())?;
        typed(value, field, must_be, &mut self.problems)
    }

    fn required<T: DeserializeOwned>(&mut self, field: &str, must_be: &str) -> Option<T> {
        if self.object.get(field).is_none_or(Value::is_null) {
            self.problem(field, format!("is required ({must_be})"));
            return None;
        }
        self.optional(field, must_be)
    }

    /// A list whose items are read one by one (`graders[2]`), each with serde's own reason.
    fn list<T: DeserializeOwned>(&mut self, field: &str) -> Vec<T> {
        let Some(value) = self.object.get(field).filter(|v| !v.is_null()) else {
            return Vec::new();
        };
        let Some(items) = value.as_array() else {
            self.problem(field, format!("must be a list, got {}", kind_of(value)));
            return Vec::new();
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match serde_json::from_value::<T>(item.clone()) {
                Ok(t) => out.push(t),
                Err(e) => self.problem(format!("{field}[{i}]"), e.to_string()),
            }
        }
        out
    }
}

impl Reader<'_> {
    /// `history`: `"own"` or `"golden"`.
    fn history(&mut self) -> Option<HistoryMode> {
        let text: String = self.optional("history", "\"own\" or \"golden\"")?;
        let mode = HistoryMode::parse(&text);
        if mode.is_none() {
            self.problem(
                "history",
                format!("is {text:?}; use \"own\" (the model's own replies) or \"golden\" (the file's)"),
            );
        }
        mode
    }

    /// `turns`, each read field by field (`turns[2].graders[0]`, `turns[1].answer`).
    fn turns(&mut self) -> Vec<Turn> {
        let Some(value) = self.object.get("turns").filter(|v| !v.is_null()) else {
            return Vec::new();
        };
        let Some(items) = value.as_array() else {
            self.problem("turns", format!("must be a list of turns, got {}", kind_of(value)));
            return Vec::new();
        };
        if items.is_empty() {
            self.problem("turns", "is empty; a conversation case needs at least one turn");
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let Some(object) = item.as_object() else {
                self.problem(
                    format!("turns[{i}]"),
                    format!("must be an object, got {}", kind_of(item)),
                );
                continue;
            };
            let mut r = Reader::new(object, &TURN_FIELDS, "turn");
            let user: Option<String> = r.required("user", "a string (the user's message)");
            let turn = Turn {
                user: user.unwrap_or_default(),
                vars: r
                    .optional("vars", "an object of template variables")
                    .unwrap_or_default(),
                expected: object.get("expected").filter(|v| !v.is_null()).cloned(),
                graders: r.list::<Grader>("graders"),
                golden: r.optional("golden", "a string (the reply carried as history)"),
            };
            if r.problems.is_empty() {
                out.push(turn);
            } else {
                for (field, message) in r.problems {
                    self.problem(format!("turns[{i}].{field}"), message);
                }
            }
        }
        out
    }

    /// `tools`, each entry read on its own (`tools[1].function.parameters`).
    fn tools(&mut self) -> Vec<ToolDef> {
        let Some(value) = self.object.get("tools").filter(|v| !v.is_null()) else {
            return Vec::new();
        };
        let Some(items) = value.as_array() else {
            self.problem("tools", format!("must be a list of tools, got {}", kind_of(value)));
            return Vec::new();
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match ToolDef::read(item, &format!("tools[{i}]")) {
                Ok(t) => out.push(t),
                Err(e) => self.problem(e.field, e.message),
            }
        }
        out
    }

    /// A tool field read by its own reader, which names the place of each problem.
    fn tool_field<T>(&mut self, field: &str, read: fn(&Value, &str) -> Result<T, ToolCaseError>) -> Option<T> {
        let value = self.object.get(field).filter(|v| !v.is_null())?;
        match read(value, field) {
            Ok(t) => Some(t),
            Err(e) => {
                self.problem(e.field, e.message);
                None
            }
        }
    }
}

fn typed<T: DeserializeOwned>(value: &Value, field: &str, must_be: &str, problems: &mut FieldProblems) -> Option<T> {
    match serde_json::from_value::<T>(value.clone()) {
        Ok(t) => Some(t),
        Err(_) => {
            problems.push((field.to_string(), format!("must be {must_be}, got {}", kind_of(value))));
            None
        }
    }
}

/// The header line's fields; None with the problems when any is bad.
pub(super) fn header(object: &Map<String, Value>) -> Result<EvalSetHeader, FieldProblems> {
    let mut r = Reader::new(object, &HEADER_FIELDS, "header");
    let version: Option<u32> = r.required("bakeoff_evalset", "the format version 1");
    if version.is_some_and(|v| v != 1) {
        r.problem("bakeoff_evalset", "is an unsupported format version; expected 1");
    }
    let name: Option<String> = r.required("name", "a string");
    let task_text: Option<String> = r.required("task", "a string");
    let task = task_text.as_deref().and_then(|t| {
        let task = TaskKind::parse(t);
        if task.is_none() {
            let known: Vec<&str> = TaskKind::ALL.iter().map(TaskKind::as_str).collect();
            r.problem("task", format!("is {t:?}; use one of {}", known.join(", ")));
        }
        task
    });
    let header = EvalSetHeader {
        bakeoff_evalset: version.unwrap_or(1),
        name: name.unwrap_or_default(),
        task: task.unwrap_or(TaskKind::Generation),
        description: r.optional("description", "a string"),
        language: r.optional("language", "a string"),
        system: r.optional("system", "a string"),
        prompt: r.optional("prompt", "a string"),
        graders: r.list::<Grader>("graders"),
        max_tokens: r.optional("max_tokens", "a whole number from 1 to 4294967295"),
        temperature: r.optional("temperature", "a number"),
        grade_reasoning: r.optional("grade_reasoning", "true or false").unwrap_or(false),
        history: r.history(),
    };
    if r.problems.is_empty() {
        Ok(header)
    } else {
        Err(r.problems)
    }
}

/// One case line's fields; a numeric id is read as its text.
pub(super) fn case(object: &Map<String, Value>) -> Result<EvalCase, FieldProblems> {
    let mut r = Reader::new(object, &CASE_FIELDS, "case");
    let id = match object.get("id") {
        None | Some(Value::Null) => {
            r.problem("id", "is required (a string or number)");
            String::new()
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            r.problem("id", format!("must be a string or number, got {}", kind_of(other)));
            String::new()
        }
    };
    let messages = object
        .get("messages")
        .filter(|v| !v.is_null())
        .map(|_| r.list::<ChatMessage>("messages"));
    let tags: Vec<String> = match object.get("tags").filter(|v| !v.is_null()) {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, t)| typed(t, &format!("tags[{i}]"), "a string", &mut r.problems))
            .collect(),
        Some(other) => {
            r.problem("tags", format!("must be a list of strings, got {}", kind_of(other)));
            Vec::new()
        }
        None => Vec::new(),
    };
    let case = EvalCase {
        id,
        vars: r
            .optional("vars", "an object of template variables")
            .unwrap_or_default(),
        messages,
        expected: object.get("expected").filter(|v| !v.is_null()).cloned(),
        graders: r.list::<Grader>("graders"),
        tags,
        weight: r.optional("weight", "a positive number"),
        tools: r.tools(),
        tool_choice: r.tool_field("tool_choice", ToolChoice::read),
        expected_calls: r.tool_field("expected_calls", ToolExpectation::read),
        turns: r.turns(),
        history: r.history(),
        response_format: r.tool_field("response_format", crate::tool_calls::structured::ResponseFormat::read),
    };
    if r.problems.is_empty() {
        Ok(case)
    } else {
        Err(r.problems)
    }
}
