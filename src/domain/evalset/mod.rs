//! Eval sets: one JSONL file (a header line, then one case per line), versioned by the hash
//! of its normalised content. The format is documented in `docs/evalset-format.md`.
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::grading::Grader;

pub mod diff;
pub mod import;

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
}

/// A chat message given literally by a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// One case: its input (vars for the template, or literal messages), expected value, graders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

impl EvalCase {
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

/// Why a file was refused, naming the line (1-based) and field where known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}{}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default(), field.as_ref().map(|f| format!(" (field `{f}`)")).unwrap_or_default())]
pub struct EvalSetError {
    pub source_name: String,
    pub line: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

impl EvalSetFile {
    /// Parses and validates a whole file; nothing partial is ever returned.
    pub fn parse(source_name: &str, text: &str) -> Result<EvalSetFile, EvalSetError> {
        let err = |line: Option<usize>, field: Option<&str>, message: String| EvalSetError {
            source_name: source_name.to_string(),
            line,
            field: field.map(str::to_string),
            message,
        };
        if text.len() > MAX_FILE_BYTES {
            return Err(err(
                None,
                None,
                format!("file is {} bytes; at most {MAX_FILE_BYTES}", text.len()),
            ));
        }
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty());
        if let Some((line, l)) = text.lines().enumerate().find(|(_, l)| l.len() > MAX_LINE_BYTES) {
            return Err(err(
                Some(line + 1),
                None,
                format!("line is {} bytes; at most {MAX_LINE_BYTES}", l.len()),
            ));
        }
        let (header_line, header_text) = lines
            .next()
            .ok_or_else(|| err(None, None, "file is empty; the first line must be the header".into()))?;
        let header: EvalSetHeader = serde_json::from_str(header_text)
            .map_err(|e| err(Some(header_line), field_of(&e).as_deref(), format!("header: {e}")))?;
        if header.bakeoff_evalset != 1 {
            return Err(err(
                Some(header_line),
                Some("bakeoff_evalset"),
                "unsupported format version; expected 1".into(),
            ));
        }
        if header.name.trim().is_empty() {
            return Err(err(Some(header_line), Some("name"), "is required".into()));
        }
        if let Err((field, message)) = check_graders(&header.graders) {
            return Err(err(Some(header_line), Some(&field), message));
        }
        if let Some(message) = too_long(&header.name) {
            return Err(err(Some(header_line), Some("name"), message));
        }
        if let Some(problem) = super::validation::name_problem(&header.name) {
            return Err(err(Some(header_line), Some("name"), problem.into()));
        }
        let mut cases = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (line, case_text) in lines {
            if cases.len() >= MAX_CASES {
                return Err(err(Some(line), None, format!("more than {MAX_CASES} cases")));
            }
            let case: EvalCase =
                serde_json::from_str(case_text).map_err(|e| err(Some(line), field_of(&e).as_deref(), e.to_string()))?;
            if case.id.trim().is_empty() {
                return Err(err(Some(line), Some("id"), "is required".into()));
            }
            if let Err((field, message)) = check_graders(&case.graders) {
                return Err(err(Some(line), Some(&field), message));
            }
            if let Some(message) = too_long(&case.id) {
                return Err(err(Some(line), Some("id"), message));
            }
            if let Some(problem) = super::validation::name_problem(&case.id) {
                return Err(err(Some(line), Some("id"), problem.into()));
            }
            if let Some((i, message)) = case
                .tags
                .iter()
                .enumerate()
                .find_map(|(i, t)| too_long(t).map(|m| (i, m)))
            {
                return Err(err(Some(line), Some(&format!("tags[{i}]")), message));
            }
            if !seen.insert(case.id.clone()) {
                return Err(err(Some(line), Some("id"), format!("duplicate case id {:?}", case.id)));
            }
            if case.messages.is_none() && header.prompt.is_none() {
                return Err(err(
                    Some(line),
                    Some("messages"),
                    "case has no messages and the header has no prompt template".into(),
                ));
            }
            if let Some(prompt) = &header.prompt
                && case.messages.is_none()
                && let Some(var) = template_vars(prompt).into_iter().find(|v| !case.vars.contains_key(v))
            {
                let field = format!("vars.{var}");
                return Err(err(
                    Some(line),
                    Some(&field),
                    "is used by the prompt template but missing".into(),
                ));
            }
            if let Some(w) = case.weight
                && !(w.is_finite() && w > 0.0)
            {
                return Err(err(Some(line), Some("weight"), "must be a positive number".into()));
            }
            cases.push(case);
        }
        if cases.is_empty() {
            return Err(err(None, None, "no cases after the header".into()));
        }
        Ok(EvalSetFile { header, cases })
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

    /// Graders for one case: its own, else the header's defaults.
    pub fn graders_for<'a>(&'a self, case: &'a EvalCase) -> &'a [Grader] {
        if case.graders.is_empty() {
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
            for g in self.graders_for(case) {
                if let super::grading::GraderSpec::LlmJudge { judge, .. } = &g.spec
                    && !out.iter().any(|(name, _)| name == judge)
                {
                    out.push((judge.clone(), case.id.clone()));
                }
            }
        }
        out
    }

    /// The chat messages sent for a case.
    pub fn messages_for(&self, case: &EvalCase) -> Vec<ChatMessage> {
        if let Some(messages) = &case.messages {
            return messages.clone();
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

fn template_vars(template: &str) -> Vec<String> {
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

/// The first grader with an out-of-range option, as (`graders[i].option`, message).
/// (Regexes and schemas are already compiled, and refused, while the line is deserialised.)
fn check_graders(graders: &[Grader]) -> Result<(), (String, String)> {
    if !graders.is_empty() && graders.iter().all(|g| !g.required) {
        return Err((
            "graders".to_string(),
            "every grader is `required: false`; at least one must be required to pass or fail a case".to_string(),
        ));
    }
    for (i, g) in graders.iter().enumerate() {
        g.validate().map_err(|e| {
            (
                format!("graders[{i}].{}", e.field),
                format!("{} grader: {}", g.name(), e.message),
            )
        })?;
    }
    Ok(())
}

/// Best-effort field name from a serde error ("missing field `task`", "unknown field `x`").
fn field_of(e: &serde_json::Error) -> Option<String> {
    let msg = e.to_string();
    let start = msg.find('`')? + 1;
    let end = start + msg[start..].find('`')?;
    Some(msg[start..end].to_string())
}

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
    fn errors_name_line_and_field() {
        let bad = GOOD.replace(r#""id":"b","#, r#""id":"b","colour":1,"#);
        let e = EvalSetFile::parse("s.jsonl", &bad).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("colour")));
        assert!(e.to_string().starts_with("s.jsonl:4 (field `colour`)"), "{e}");

        let missing = GOOD.replace(r#""vars":{"text":"awful"},"#, "");
        let e = EvalSetFile::parse("s.jsonl", &missing).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("vars.text")));

        let dup = GOOD.replace(r#""id":"b""#, r#""id":"a""#);
        assert_eq!(EvalSetFile::parse("s", &dup).unwrap_err().field.as_deref(), Some("id"));
        assert!(EvalSetFile::parse("s", "").is_err());
    }

    #[test]
    fn grader_options_are_checked_with_line_and_field() {
        let bad_min = GOOD.replace(
            r#"[{"kind":"exact"}]"#,
            r#"[{"kind":"exact"},{"kind":"rouge-l","min":2}]"#,
        );
        let e = EvalSetFile::parse("s.jsonl", &bad_min).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("graders[1].min")), "{e}");

        let bad_case = GOOD.replace(
            r#""expected":"negative","#,
            r#""expected":"negative","graders":[{"kind":"length","min":9,"max":3}],"#,
        );
        let e = EvalSetFile::parse("s.jsonl", &bad_case).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("graders[0].min")), "{e}");

        let bad_regex = GOOD.replace(r#"{"kind":"exact"}"#, r#"{"kind":"regex","pattern":"(unclosed"}"#);
        let e = EvalSetFile::parse("s.jsonl", &bad_regex).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("pattern")), "{e}");
        assert!(e.message.contains("not a valid regular expression"), "{e}");
    }

    #[test]
    fn prompt_bins_come_from_tags() {
        assert_eq!(prompt_bin(&["x".into(), "prompt_tokens:2048".into()]), Some(2048));
        assert_eq!(prompt_bin(&["prompt_tokens:abc".into()]), None);
        assert_eq!(prompt_bin(&[]), None);
    }
}
