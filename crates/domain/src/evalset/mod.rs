//! Eval sets: one JSONL file (a header line, then one case per line), versioned by the hash
//! of its normalised content. The format is documented in `docs/evalset-format.md`.
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::grading::Grader;
use super::tool_calls::{ToolChoice, ToolDef, ToolExpectation};

pub mod conversation;
pub mod diff;
mod fields;
pub mod import;
pub(crate) mod problems;

use problems::Problems;
pub use problems::{EvalSetError, MAX_LISTED_PROBLEMS, Problem};

/// Largest eval-set file accepted.
pub const MAX_FILE_BYTES: usize = 20 * 1024 * 1024;
/// Most cases in one eval set.
pub const MAX_CASES: usize = 100_000;
/// Longest line (the header or one case), so one runaway case cannot fill the file limit.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Longest set name, case id or tag, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// The task an eval set measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Extraction,
    Classification,
    Summarisation,
    Translation,
    Generation,
}

impl TaskKind {
    pub const ALL: [TaskKind; 5] = [
        TaskKind::Extraction,
        TaskKind::Classification,
        TaskKind::Summarisation,
        TaskKind::Translation,
        TaskKind::Generation,
    ];

    /// The kind named `s` as in files (`"summarisation"`).
    pub fn parse(s: &str) -> Option<TaskKind> {
        TaskKind::ALL.into_iter().find(|t| t.as_str() == s.trim())
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            TaskKind::Extraction => "extraction",
            TaskKind::Classification => "classification",
            TaskKind::Summarisation => "summarisation",
            TaskKind::Translation => "translation",
            TaskKind::Generation => "generation",
        }
    }
}

/// First line of the file: what the set is and how to prompt and grade it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSetHeader {
    /// Format marker and version; must be 1.
    pub bakeoff_evalset: u32,
    pub name: String,
    pub task: TaskKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// System message for chat providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// User prompt template; `{{name}}` is replaced by the case's `vars.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Graders applied to every case that names none of its own.
    #[serde(default)]
    pub graders: Vec<Grader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Graders read the reasoning too (reasoning, a blank line, the answer); by default they
    /// read only the answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grade_reasoning: bool,
    /// The history conversation cases carry by default (`own` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<conversation::HistoryMode>,
}

/// A chat message given literally by a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// One case: its input (vars for the template, or literal messages), expected value, graders.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalCase {
    pub id: String,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub vars: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<ChatMessage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graders: Vec<Grader>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// A tool case's tools (`docs/tool-cases.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// A tool case's expected outcome: calls, "no-call" or "text".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_calls: Option<ToolExpectation>,
    /// A conversation case's turns (`conversation`); empty for a single-request case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<conversation::Turn>,
    /// A conversation case's history mode, over the set's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<conversation::HistoryMode>,
    /// Structured output: the answer must be JSON valid against this schema, asked of the
    /// server (`response_format`, or Anthropic's forced tool); graded `response-format`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<crate::tool_calls::structured::ResponseFormat>,
}

impl EvalCase {
    /// Whether this is a tool case (its request carries tools).
    pub fn is_tool_case(&self) -> bool {
        self.expected_calls.is_some()
    }

    /// The expected value as text (strings as-is, other JSON compactly).
    pub fn expected_text(&self) -> Option<String> {
        self.expected.as_ref().map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }

    pub fn weight(&self) -> f64 {
        self.weight.unwrap_or(1.0)
    }
}

/// A parsed, valid eval-set file.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSetFile {
    pub header: EvalSetHeader,
    pub cases: Vec<EvalCase>,
}

impl EvalSetFile {
    /// Parses and validates a whole file; nothing partial is ever returned. Every problem is
    /// found in one pass (up to [`MAX_LISTED_PROBLEMS`]), in line order.
    pub fn parse(source_name: &str, text: &str) -> Result<EvalSetFile, EvalSetError> {
        let whole = |message: String| Err(EvalSetError::one(source_name, Problem::new(None, None, message)));
        if text.len() > MAX_FILE_BYTES {
            return whole(format!("file is {} bytes; at most {MAX_FILE_BYTES}", text.len()));
        }
        if let Some((line, l)) = text.lines().enumerate().find(|(_, l)| l.len() > MAX_LINE_BYTES) {
            return Err(EvalSetError::one(
                source_name,
                Problem::new(
                    Some(line + 1),
                    None,
                    format!("line is {} bytes; at most {MAX_LINE_BYTES}", l.len()),
                ),
            ));
        }
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((header_line, header_text)) = lines.next() else {
            return whole(EMPTY_FILE.into());
        };
        let mut found = Problems::default();
        let header = read_line(header_line, header_text, fields::header, &mut found);
        if let Some(header) = &header {
            check_header(header_line, header, &mut found);
        }
        let mut cases = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut case_lines = 0;
        let mut case_line_numbers = Vec::new();
        for (line, case_text) in lines {
            case_lines += 1;
            if case_lines > MAX_CASES {
                found.add(Some(line), None, format!("more than {MAX_CASES} cases"));
                break;
            }
            let Some(case) = read_line(line, case_text, fields::case, &mut found) else {
                continue;
            };
            let mut problem = |field: &str, message: String| found.add(Some(line), Some(field), message);
            if let Some(message) = case_id_problem(&case.id) {
                problem("id", message);
            } else if !seen.insert(case.id.clone()) {
                problem("id", format!("duplicate case id {:?}", case.id));
            }
            for (field, message) in check_graders(&case.graders) {
                problem(&field, message);
            }
            for (i, message) in case
                .tags
                .iter()
                .enumerate()
                .filter_map(|(i, t)| too_long(t).map(|m| (i, m)))
            {
                problem(&format!("tags[{i}]"), message);
            }
            for (field, message) in conversation::check(&case, header.as_ref().and_then(|h| h.history)) {
                problem(&field, message);
            }
            if let Some(header) = &header
                && !case.is_conversation()
            {
                if case.messages.is_none() && header.prompt.is_none() {
                    problem(
                        "messages",
                        "is missing, and the header has no prompt template to build them from".into(),
                    );
                }
                if let Some(prompt) = &header.prompt
                    && case.messages.is_none()
                {
                    for var in template_vars(prompt).into_iter().filter(|v| !case.vars.contains_key(v)) {
                        problem(
                            &format!("vars.{var}"),
                            "is used by the prompt template but missing".into(),
                        );
                    }
                }
            }
            if let Some(w) = case.weight
                && !(w.is_finite() && w > 0.0)
            {
                problem("weight", "must be a positive number".into());
            }
            for e in super::tool_calls::check_case(&case.tools, case.tool_choice.as_ref(), case.expected_calls.as_ref())
            {
                problem(&e.field, e.message);
            }
            if case.response_format.is_some() && !case.tools.is_empty() {
                problem(
                    "response_format",
                    "a case is a tool case or a structured-output case, not both (leave out tools or response_format)"
                        .into(),
                );
            }
            cases.push(case);
            case_line_numbers.push(line);
        }
        if case_lines == 0 {
            found.add(None, None, "no cases after the header");
        }
        // A turn's record key (`trip#2`) must not be another case's id.
        for (case, line) in cases.iter().zip(case_line_numbers.iter()) {
            if let Some((conversation, turn)) = conversation::split_turn_key(&case.id)
                && cases.iter().any(|c| c.id == conversation && c.turns.len() >= turn)
            {
                found.add(
                    Some(*line),
                    Some("id"),
                    format!(
                        "{:?} is the record key of turn {turn} of conversation case {conversation:?}; rename one",
                        case.id
                    ),
                );
            }
        }
        match header {
            Some(header) => found.into_result(source_name, EvalSetFile { header, cases }),
            None => Err(found
                .into_result(source_name, ())
                .expect_err("an unread header is a problem")),
        }
    }

    /// The normalised text: every line re-serialised with sorted keys, blank lines dropped.
    pub fn normalised(&self) -> String {
        let mut out = canonical_json(&self.header);
        for case in &self.cases {
            out.push('\n');
            out.push_str(&canonical_json(case));
        }
        out.push('\n');
        out
    }

    /// The version identity: SHA-256 of the normalised text, hex.
    pub fn content_hash(&self) -> String {
        hex::encode(Sha256::digest(self.normalised().as_bytes()))
    }

    /// Graders for one case: its own, else the header's defaults. A tool case takes no
    /// defaults: its calls are graded by the `tool-calls` grade, its text only by its own graders.
    /// A conversation case has none of its own: each turn has (`graders_for_turn`).
    pub fn graders_for<'a>(&'a self, case: &'a EvalCase) -> &'a [Grader] {
        if case.graders.is_empty() && !case.is_tool_case() && !case.is_conversation() {
            &self.header.graders
        } else {
            &case.graders
        }
    }

    /// The judges the `llm-judge` graders of the first `case_count` cases name, each once, with
    /// the first case naming it: [(judge name, case id)].
    pub fn judge_names(&self, case_count: usize) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for case in self.cases.iter().take(case_count) {
            // A conversation's graders are its turns'.
            let turns = case.turns.iter().flat_map(|t| self.graders_for_turn(t));
            for g in self.graders_for(case).iter().chain(turns) {
                if let super::grading::GraderSpec::LlmJudge { judge, .. } = &g.spec
                    && !out.iter().any(|(name, _)| name == judge)
                {
                    out.push((judge.clone(), case.id.clone()));
                }
            }
        }
        out
    }

    /// The chat messages sent for a case (a conversation case: its last turn's, with the
    /// golden history, or the expected replies where no golden one is written).
    pub fn messages_for(&self, case: &EvalCase) -> Vec<ChatMessage> {
        if let Some(messages) = &case.messages {
            return messages.clone();
        }
        if case.is_conversation() {
            return self.turn_messages(case, case.turns.len() - 1, &self.golden_replies(case));
        }
        let mut out = Vec::new();
        if let Some(system) = &self.header.system {
            out.push(ChatMessage {
                role: "system".into(),
                content: system.clone(),
            });
        }
        let prompt = self.header.prompt.as_deref().unwrap_or_default();
        out.push(ChatMessage {
            role: "user".into(),
            content: render_template(prompt, &case.vars),
        });
        out
    }

    /// The raw prompt for completion-style providers: messages flattened.
    pub fn prompt_text_for(&self, case: &EvalCase) -> String {
        self.messages_for(case)
            .into_iter()
            .map(|m| m.content)
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// Why `id` cannot be a case id, or None: the rule an eval-set file's case ids, and the case
/// ids of an imported run's records, both pass (required, at most [`MAX_NAME_CHARS`], and the
/// name rule's characters).
pub fn case_id_problem(id: &str) -> Option<String> {
    if id.trim().is_empty() {
        Some("is required".into())
    } else if let Some(message) = too_long(id) {
        Some(message)
    } else {
        super::validation::name_problem(id).map(str::to_string)
    }
}

/// Length check for names, ids and tags.
fn too_long(value: &str) -> Option<String> {
    let n = value.chars().count();
    (n > MAX_NAME_CHARS).then(|| format!("is {n} characters long; at most {MAX_NAME_CHARS}"))
}

/// `{{name}}` → value of `vars.name` (strings unquoted, other JSON compact).
pub fn render_template(template: &str, vars: &serde_json::Map<String, serde_json::Value>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = after[..end].trim();
                match vars.get(name) {
                    Some(serde_json::Value::String(s)) => out.push_str(s),
                    Some(other) => out.push_str(&other.to_string()),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

pub(crate) fn template_vars(template: &str) -> Vec<String> {
    let mut vars = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        vars.push(after[..end].trim().to_string());
        rest = &after[end + 2..];
    }
    vars
}

fn canonical_json<T: Serialize>(value: &T) -> String {
    // serde_json::Value keeps object keys in a BTreeMap here (no preserve_order), so keys sort.
    serde_json::to_value(value).map(|v| v.to_string()).unwrap_or_default()
}

/// Every out-of-range grader option, as (`graders[i].option`, message).
/// (Regexes and schemas are already compiled, and refused, while the line is read.)
pub(crate) fn check_graders(graders: &[Grader]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !graders.is_empty() && graders.iter().all(|g| !g.required) {
        out.push((
            "graders".to_string(),
            "are all `required: false`; at least one must be required to pass or fail a case".to_string(),
        ));
    }
    for (i, g) in graders.iter().enumerate() {
        if let Err(e) = g.validate() {
            out.push((
                format!("graders[{i}].{}", e.field),
                format!("{} grader: {}", g.name(), e.message),
            ));
        }
    }
    out
}

/// The header's rules beyond its fields' types.
fn check_header(line: usize, header: &EvalSetHeader, found: &mut Problems) {
    let mut problem = |field: &str, message: String| found.add(Some(line), Some(field), message);
    if header.name.trim().is_empty() {
        problem("name", "is required".into());
    } else if let Some(message) = too_long(&header.name) {
        problem("name", message);
    } else if let Some(p) = super::validation::name_problem(&header.name) {
        problem("name", p.into());
    }
    for (field, message) in check_graders(&header.graders) {
        problem(&field, message);
    }
}

/// One line's JSON object read by `read`; None when it is not (its problems are then in
/// `found`: a syntax error with its column, or each bad field).
fn read_line<T>(
    line: usize,
    text: &str,
    read: fn(&serde_json::Map<String, serde_json::Value>) -> Result<T, fields::FieldProblems>,
    found: &mut Problems,
) -> Option<T> {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            found.push(Problem {
                line: Some(line),
                column: Some(e.column()),
                field: None,
                message: format!("not valid JSON: {}", problems::without_position(&e)),
            });
            return None;
        }
    };
    let Some(object) = value.as_object() else {
        found.add(
            Some(line),
            None,
            format!("each line must be a JSON object, got {}", problems::kind_of(&value)),
        );
        return None;
    };
    match read(object) {
        Ok(t) => Some(t),
        Err(problems) => {
            for (field, message) in problems {
                found.add(Some(line), Some(&field), message);
            }
            None
        }
    }
}

/// What an empty file (or one of blank lines only) is told, whatever its format.
pub const EMPTY_FILE: &str = "file is empty (no text, or only blank lines)";

/// The tag that puts a case in a prompt-length bin: `prompt_tokens:2048`.
pub const PROMPT_BIN_TAG: &str = "prompt_tokens:";

/// The prompt-length bin of a case: its `prompt_tokens:N` tag.
pub fn prompt_bin(tags: &[String]) -> Option<u32> {
    tags.iter()
        .find_map(|t| t.strip_prefix(PROMPT_BIN_TAG).and_then(|n| n.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"bakeoff_evalset":1,"name":"sentiment","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}]}
{"id":"a","vars":{"text":"好极了"},"expected":"positive"}

{"id":"b","vars":{"text":"awful"},"expected":"negative","tags":["en"]}
"#;

    #[test]
    fn parses_renders_and_hashes_stably() {
        let f = EvalSetFile::parse("s.jsonl", GOOD).unwrap();
        assert_eq!(f.cases.len(), 2);
        assert_eq!(f.messages_for(&f.cases[0])[0].content, "Label: 好极了");
        // Key order and blank lines do not change the version; content does.
        let reordered = GOOD.replace(
            r#"{"id":"a","vars":{"text":"好极了"},"expected":"positive"}"#,
            r#"{"expected":"positive","id":"a","vars":{"text":"好极了"}}"#,
        );
        assert_eq!(
            EvalSetFile::parse("s", &reordered).unwrap().content_hash(),
            f.content_hash()
        );
        let changed = GOOD.replace("awful", "bad");
        assert_ne!(
            EvalSetFile::parse("s", &changed).unwrap().content_hash(),
            f.content_hash()
        );
    }

    #[test]
    fn grade_reasoning_is_a_checked_option_that_leaves_older_hashes_alone() {
        let f = EvalSetFile::parse("s.jsonl", GOOD).unwrap();
        assert!(!f.header.grade_reasoning);
        let on = GOOD.replace(
            r#""task":"classification","#,
            r#""task":"classification","grade_reasoning":true,"#,
        );
        let g = EvalSetFile::parse("s.jsonl", &on).unwrap();
        assert!(g.header.grade_reasoning);
        assert_ne!(g.content_hash(), f.content_hash());
        let off = GOOD.replace(
            r#""task":"classification","#,
            r#""task":"classification","grade_reasoning":false,"#,
        );
        assert_eq!(
            EvalSetFile::parse("s.jsonl", &off).unwrap().content_hash(),
            f.content_hash()
        );
        let bad = GOOD.replace(
            r#""task":"classification","#,
            r#""task":"classification","grade_reasoning":"yes","#,
        );
        let e = EvalSetFile::parse("s.jsonl", &bad).unwrap_err().first().clone();
        assert!(e.to_string().contains("grade_reasoning"), "{e}");
    }

    #[test]
    fn errors_name_line_and_field() {
        let bad = GOOD.replace(r#""id":"b","#, r#""id":"b","colour":1,"#);
        let e = EvalSetFile::parse("s.jsonl", &bad).unwrap_err().first().clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("colour")));
        let whole = EvalSetFile::parse("s.jsonl", &bad).unwrap_err().to_string();
        assert!(
            whole.starts_with("s.jsonl:4: field \"colour\" is not a case field"),
            "{whole}"
        );

        let missing = GOOD.replace(r#""vars":{"text":"awful"},"#, "");
        let e = EvalSetFile::parse("s.jsonl", &missing).unwrap_err().first().clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("vars.text")));

        let dup = GOOD.replace(r#""id":"b""#, r#""id":"a""#);
        assert_eq!(
            EvalSetFile::parse("s", &dup).unwrap_err().first().field.as_deref(),
            Some("id")
        );
        assert!(EvalSetFile::parse("s", "").is_err());
    }

    #[test]
    fn every_problem_is_found_in_one_pass_with_its_place() {
        let text = "{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"classification\",\"prompt\":\"{{q}}\"}\n\
                    {\"id\":{\"x\":1},\"vars\":{\"q\":\"a\"}}\n\
                    {\"id\":\"b\",\"vars\":{\"q\":\"a\"},\"weight\":-1,\"graders\":[{\"kind\":\"length\",\"min\":9,\"max\":3}]}\n\
                    {\"id\":\"c\",\"vars\":{\"q\":\"a\"},\"tags\":[3],\"weight\":\"heavy\"}\n\
                    {\"id\":\"d\", \"vars\": {\"q\": \"a\"\n\
                    {\"id\":7,\"vars\":{}}\n";
        let e = EvalSetFile::parse("cases.jsonl", text).unwrap_err();
        let lines = e.lines();
        assert_eq!(lines.len(), 7, "{e}");
        assert_eq!(
            lines[0], "cases.jsonl:2: field \"id\" must be a string or number, got an object",
            "{e}"
        );
        assert!(lines[1].starts_with("cases.jsonl:3: field \"graders[0].min\": "), "{e}");
        assert_eq!(
            lines[2], "cases.jsonl:3: field \"weight\" must be a positive number",
            "{e}"
        );
        assert_eq!(
            lines[3], "cases.jsonl:4: field \"tags[0]\" must be a string, got a number",
            "{e}"
        );
        assert_eq!(
            lines[4], "cases.jsonl:4: field \"weight\" must be a positive number, got a string",
            "{e}"
        );
        assert!(lines[5].starts_with("cases.jsonl:5, column "), "{e}");
        assert!(
            lines[5].ends_with(": not valid JSON: EOF while parsing an object"),
            "{e}"
        );
        assert_eq!(
            lines[6], "cases.jsonl:6: field \"vars.q\" is used by the prompt template but missing",
            "{e}"
        );
        let blank = EvalSetFile::parse("e.jsonl", "\n  \n").unwrap_err();
        assert!(blank.to_string().contains("file is empty"), "{blank}");
    }

    #[test]
    fn grader_options_are_checked_with_line_and_field() {
        let bad_min = GOOD.replace(
            r#"[{"kind":"exact"}]"#,
            r#"[{"kind":"exact"},{"kind":"rouge-l","min":2}]"#,
        );
        let e = EvalSetFile::parse("s.jsonl", &bad_min).unwrap_err().first().clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("graders[1].min")), "{e}");

        let bad_case = GOOD.replace(
            r#""expected":"negative","#,
            r#""expected":"negative","graders":[{"kind":"length","min":9,"max":3}],"#,
        );
        let e = EvalSetFile::parse("s.jsonl", &bad_case).unwrap_err().first().clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("graders[0].min")), "{e}");

        let bad_regex = GOOD.replace(r#"{"kind":"exact"}"#, r#"{"kind":"regex","pattern":"(unclosed"}"#);
        let e = EvalSetFile::parse("s.jsonl", &bad_regex).unwrap_err().first().clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("graders[0]")), "{e}");
        assert!(e.message.contains("not a valid regular expression"), "{e}");
    }

    #[test]
    fn prompt_bins_come_from_tags() {
        assert_eq!(prompt_bin(&["x".into(), "prompt_tokens:2048".into()]), Some(2048));
        assert_eq!(prompt_bin(&["prompt_tokens:abc".into()]), None);
        assert_eq!(prompt_bin(&[]), None);
    }
}
