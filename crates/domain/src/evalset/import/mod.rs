//! Importers: text in another format in, a validated [`EvalSetFile`] out. Pure (no I/O).
//!
//! Each importer turns its rows into a header and case objects, remembering the source line of
//! each case; [`finish`] then runs the one eval-set parser over them, so an imported set obeys
//! exactly the rules of a hand-written file, and an error found there still names the source
//! line and field.
use serde_json::{Map, Value, json};

use super::{EMPTY_FILE, EvalSetError, EvalSetFile, Problem, Problems, TaskKind};

mod bfcl;
mod chat_log;
mod csv;
pub mod grader;
mod openai;
mod promptfoo;

pub use grader::{GraderChoice, GraderDecision};

/// A file format bakeoff can read eval sets from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// bakeoff's own JSONL with a header line (docs/evalset-format.md).
    Bakeoff,
    /// OpenAI evals samples: JSONL of `{"input": …, "ideal": …}`.
    OpenaiEvals,
    /// promptfoo tests: YAML list of `{vars, assert}` (or a config with `tests:`).
    Promptfoo,
    /// CSV with a header row: `input`, `expected`, optional `id`, `tags`, `grader`, more vars.
    Csv,
    /// BFCL-style tool-calling tests: JSONL of `{question, function, ground_truth}`.
    Bfcl,
    /// Chat logs (OpenAI `messages` or ShareGPT `conversations` per line): conversation cases.
    ChatLog,
}

impl Format {
    pub const ALL: [Format; 6] = [
        Format::Bakeoff,
        Format::OpenaiEvals,
        Format::Promptfoo,
        Format::Csv,
        Format::Bfcl,
        Format::ChatLog,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Format::Bakeoff => "bakeoff",
            Format::OpenaiEvals => "openai-evals",
            Format::Promptfoo => "promptfoo",
            Format::Csv => "csv",
            Format::Bfcl => "bfcl",
            Format::ChatLog => "chat-log",
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Format::Bakeoff => "bakeoff JSONL (header line + cases)",
            Format::OpenaiEvals => "OpenAI evals samples (JSONL: input, ideal)",
            Format::Promptfoo => "promptfoo tests (YAML: vars, assert)",
            Format::Csv => "CSV (input, expected, id, tags, grader)",
            Format::Bfcl => "BFCL tool-calling tests (JSONL: question, function, ground_truth)",
            Format::ChatLog => "Chat logs as conversations (JSONL: messages, or ShareGPT conversations)",
        }
    }
}

/// A format as chosen by a user: one of [`Format`], or detect it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FormatChoice {
    #[default]
    Auto,
    Known(Format),
}

impl std::str::FromStr for FormatChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("auto") {
            return Ok(FormatChoice::Auto);
        }
        Format::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(s))
            .map(FormatChoice::Known)
            .ok_or_else(|| {
                format!("unknown format {s:?}: use auto, bakeoff, openai-evals, promptfoo, csv, bfcl or chat-log")
            })
    }
}

/// What the user supplies where the source format has no place for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportOptions {
    /// The set's name; defaults to the source's own (bakeoff header, promptfoo description) or
    /// else the file name without extension.
    pub name: Option<String>,
    /// The task; required for formats that do not state one.
    pub task: Option<TaskKind>,
    /// User prompt template for formats whose cases are vars (promptfoo, CSV).
    pub prompt: Option<String>,
    /// The set's grader, for formats without graders of their own (OpenAI evals, CSV):
    /// proposed from the expected values unless chosen.
    pub grader: GraderChoice,
}

/// Guesses the format from the file name's extension, then from the first non-blank line.
pub fn detect(source_name: &str, text: &str) -> Format {
    let lower = source_name.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return Format::Promptfoo;
    }
    if lower.ends_with(".csv") {
        return Format::Csv;
    }
    let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if first.starts_with('{') {
        return match serde_json::from_str::<Value>(first) {
            Ok(Value::Object(map)) if !map.contains_key("bakeoff_evalset") && map.contains_key("input") => {
                Format::OpenaiEvals
            }
            Ok(Value::Object(map)) if map.contains_key("question") && map.contains_key("function") => Format::Bfcl,
            Ok(Value::Object(map))
                if !map.contains_key("bakeoff_evalset")
                    && (map.contains_key("conversations")
                        || (map.contains_key("messages") && !map.contains_key("id")))
                    && !map.contains_key("expected") =>
            {
                Format::ChatLog
            }
            _ => Format::Bakeoff,
        };
    }
    if first.starts_with('-') || first.starts_with('#') || first.ends_with(':') || first.starts_with("tests:") {
        return Format::Promptfoo;
    }
    Format::Csv
}

/// Reads `text` in `format` (detected when `Auto`). Returns the format used and the file.
pub fn import(
    choice: FormatChoice,
    source_name: &str,
    text: &str,
    options: &ImportOptions,
) -> Result<(Format, EvalSetFile), EvalSetError> {
    import_with_grader(choice, source_name, text, options).map(|i| (i.format, i.file))
}

/// What an import produced.
#[derive(Debug, Clone)]
pub struct Imported {
    pub format: Format,
    pub file: EvalSetFile,
    /// The set's grader and why, for formats whose grader bakeoff picks (OpenAI evals, CSV).
    pub grader: Option<GraderDecision>,
}

/// [`import`], also telling which grader was proposed and used, and why.
pub fn import_with_grader(
    choice: FormatChoice,
    source_name: &str,
    text: &str,
    options: &ImportOptions,
) -> Result<Imported, EvalSetError> {
    let format = match choice {
        FormatChoice::Known(f) => f,
        FormatChoice::Auto => detect(source_name, text),
    };
    // Said before any format's own rules, so an empty .jsonl is not called a CSV problem.
    if text.trim_start_matches('\u{feff}').trim().is_empty() {
        return Err(error(source_name, None, None, EMPTY_FILE.into()));
    }
    if text.len() > super::MAX_FILE_BYTES {
        return Err(error(
            source_name,
            None,
            None,
            format!("file is {} bytes; at most {}", text.len(), super::MAX_FILE_BYTES),
        ));
    }
    let draft = match format {
        Format::Bakeoff => {
            let file = bakeoff(source_name, text, options)?;
            return Ok(Imported {
                format,
                file,
                grader: None,
            });
        }
        Format::OpenaiEvals => openai::read(source_name, text, options)?,
        Format::Promptfoo => promptfoo::read(source_name, text, options)?,
        Format::Csv => csv::read(source_name, text, options)?,
        Format::Bfcl => bfcl::read(source_name, text, options)?,
        Format::ChatLog => chat_log::read(source_name, text, options)?,
    };
    let (draft, grader) = match expected_field(format) {
        Some(field) => {
            let (draft, decision) = apply_grader(draft, field, options.grader);
            (draft, Some(decision))
        }
        None => (draft, None),
    };
    Ok(Imported {
        format,
        file: finish(source_name, draft)?,
        grader,
    })
}

/// The name the format gives expected values, when bakeoff picks its grader (the format has no
/// graders of its own; promptfoo's assertions are taken as written).
fn expected_field(format: Format) -> Option<&'static str> {
    match format {
        Format::OpenaiEvals => Some("ideal"),
        Format::Csv => Some("expected"),
        Format::Bakeoff | Format::Promptfoo | Format::Bfcl | Format::ChatLog => None,
    }
}

/// Sets the draft's header graders to the user's choice or, by default, to what its expected
/// values call for.
fn apply_grader(mut draft: Draft, field: &str, choice: GraderChoice) -> (Draft, GraderDecision) {
    let expected: Vec<Value> = draft
        .cases
        .iter()
        .filter_map(|(_, case)| case.get("expected").cloned())
        .collect();
    let refs: Vec<&Value> = expected.iter().collect();
    let (proposed, why) = grader::propose(field, &refs);
    let chosen = match choice {
        GraderChoice::Proposed => proposed,
        other => other,
    };
    draft
        .header
        .insert("graders".into(), grader::graders_for(chosen, &refs));
    if chosen == GraderChoice::JsonFields {
        for (_, case) in &mut draft.cases {
            if let Some(object) = case.get("expected").and_then(grader::as_expected_object) {
                case["expected"] = object;
            }
        }
    }
    (draft, GraderDecision { proposed, chosen, why })
}

/// bakeoff's own format; `name`/`task` options, when given, replace the header's.
fn bakeoff(source_name: &str, text: &str, options: &ImportOptions) -> Result<EvalSetFile, EvalSetError> {
    let mut file = EvalSetFile::parse(source_name, text)?;
    if options.name.is_none() && options.task.is_none() {
        return Ok(file);
    }
    if let Some(name) = &options.name {
        file.header.name = name.trim().to_string();
    }
    if let Some(task) = options.task {
        file.header.task = task;
    }
    // Re-check the header rules (e.g. the name's length) on the replaced values.
    EvalSetFile::parse(source_name, &file.normalised()).map_err(|mut e| {
        for p in &mut e.problems {
            if p.line == Some(1) {
                p.line = None;
            }
        }
        e
    })
}

/// What an importer produces: a header object and case objects with their source lines.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Draft {
    pub header: Map<String, Value>,
    pub cases: Vec<(Origin, Value)>,
    /// Rows refused by the importer itself (left out of `cases`), reported with the parser's.
    pub problems: Vec<Problem>,
}

/// Where a case came from in the source, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// 1-based line of a line-oriented source (JSONL, CSV).
    Line(usize),
    /// 1-based position in a list of tests (YAML).
    Test(usize),
}

/// Builds the header every importer starts from.
pub(crate) fn header(
    source_name: &str,
    options: &ImportOptions,
    own_name: Option<&str>,
    format: Format,
) -> Result<Map<String, Value>, EvalSetError> {
    let name = options
        .name
        .as_deref()
        .or(own_name)
        .map(str::to_string)
        .or_else(|| file_stem(source_name))
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| {
            error(
                source_name,
                None,
                Some("name"),
                format!("the {} format has no set name; give one", format.as_str()),
            )
        })?;
    let task = options.task.ok_or_else(|| {
        error(
            source_name,
            None,
            Some("task"),
            format!(
                "the {} format does not say which task the set measures; give one of extraction, \
                 classification, summarisation, translation, generation",
                format.as_str()
            ),
        )
    })?;
    let mut h = Map::new();
    h.insert("bakeoff_evalset".into(), json!(1));
    h.insert("name".into(), json!(name.trim()));
    h.insert("task".into(), json!(task.as_str()));
    if let Some(prompt) = &options.prompt {
        h.insert("prompt".into(), json!(prompt));
    }
    Ok(h)
}

/// Parses the draft as an eval-set file: the importer's own problems and the parser's, each
/// pointing back at the source line (or test).
fn finish(source_name: &str, draft: Draft) -> Result<EvalSetFile, EvalSetError> {
    let mut text = Value::Object(draft.header).to_string();
    for (_, case) in &draft.cases {
        text.push('\n');
        text.push_str(&case.to_string());
    }
    let importer_found_some = !draft.problems.is_empty();
    let mut found = Problems::default();
    for p in draft.problems {
        found.push(p);
    }
    let parsed = EvalSetFile::parse(source_name, &text);
    let file = match parsed {
        Ok(file) => file,
        Err(e) => {
            for mut p in e.problems {
                // Line 1 is the header we built; line n ≥ 2 is draft case n − 2.
                let origin = p
                    .line
                    .filter(|n| *n >= 2)
                    .and_then(|n| draft.cases.get(n - 2))
                    .map(|(o, _)| *o);
                // Rows the importer refused are left out of the draft: "no cases" is not news.
                if p.line.is_none() && importer_found_some {
                    continue;
                }
                (p.line, p.column) = (None, None);
                match origin {
                    Some(Origin::Line(line)) => p.line = Some(line),
                    Some(Origin::Test(n)) => p.message = format!("test {n}: {}", p.message),
                    None => {}
                }
                found.push(p);
            }
            found.add_unlisted(e.unlisted);
            return Err(found
                .into_result(source_name, ())
                .expect_err("a refused draft has problems"));
        }
    };
    found.into_result(source_name, file)
}

pub(crate) fn error(source_name: &str, line: Option<usize>, field: Option<&str>, message: String) -> EvalSetError {
    EvalSetError::one(source_name, Problem::new(line, field, message))
}

/// `dir/tickets.csv` → `tickets`; None for names without a stem (e.g. "pasted text").
fn file_stem(source_name: &str) -> Option<String> {
    let base = source_name.rsplit(['/', '\\']).next().unwrap_or(source_name);
    let (stem, ext) = base.rsplit_once('.')?;
    (!stem.is_empty() && !ext.is_empty() && !ext.contains(' ')).then(|| stem.to_string())
}

/// `"a; b;;c "` → `["a", "b", "c"]`.
pub(crate) fn split_tags(raw: &str) -> Vec<Value> {
    raw.split(';')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| Value::String(t.to_string()))
        .collect()
}

/// Case ids `prefix-001`… wide enough for `count` cases, so they sort in file order.
/// The cases of a JSONL source: each non-blank line read on its own by `case(line, raw, id)`
/// (ids numbered `prefix-N` over the non-blank lines); a bad line is noted and the next read.
pub(crate) fn jsonl_cases(
    text: &str,
    prefix: &str,
    case: impl Fn(usize, &str, String) -> Result<Value, EvalSetError>,
) -> (Vec<(Origin, Value)>, Vec<Problem>) {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let mut cases = Vec::with_capacity(lines.len());
    let mut problems = Vec::new();
    for (n, (line, raw)) in lines.iter().enumerate() {
        match case(*line, raw, numbered_id(prefix, n + 1, lines.len())) {
            Ok(value) => cases.push((Origin::Line(*line), value)),
            Err(e) => problems.extend(e.problems),
        }
    }
    (cases, problems)
}

pub(crate) fn numbered_id(prefix: &str, n: usize, count: usize) -> String {
    let width = count.to_string().len().max(3);
    format!("{prefix}-{n:0width$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_detected_from_name_then_content() {
        assert_eq!(detect("t.yaml", ""), Format::Promptfoo);
        assert_eq!(detect("t.CSV", "{}"), Format::Csv);
        assert_eq!(detect("x", "\n{\"bakeoff_evalset\":1}\n"), Format::Bakeoff);
        assert_eq!(detect("x", "{\"input\":\"hi\",\"ideal\":\"yo\"}"), Format::OpenaiEvals);
        assert_eq!(detect("x", "- vars:\n    a: 1"), Format::Promptfoo);
        assert_eq!(detect("x", "tests:\n  - vars: {}"), Format::Promptfoo);
        assert_eq!(detect("x", "input,expected\na,b"), Format::Csv);
    }

    #[test]
    fn format_choice_parses_names() {
        assert_eq!("auto".parse::<FormatChoice>(), Ok(FormatChoice::Auto));
        assert_eq!(
            "OpenAI-Evals".parse::<FormatChoice>(),
            Ok(FormatChoice::Known(Format::OpenaiEvals))
        );
        assert!("xml".parse::<FormatChoice>().unwrap_err().contains("promptfoo"));
    }

    #[test]
    fn bakeoff_files_can_be_renamed_on_import() {
        let text = "{\"bakeoff_evalset\":1,\"name\":\"a\",\"task\":\"generation\",\"prompt\":\"{{q}}\"}\n\
                    {\"id\":\"1\",\"vars\":{\"q\":\"hi\"}}\n";
        let options = ImportOptions {
            name: Some("renamed".into()),
            task: Some(TaskKind::Classification),
            prompt: None,
            grader: Default::default(),
        };
        let (format, file) = import(FormatChoice::Auto, "a.jsonl", text, &options).unwrap();
        assert_eq!(format, Format::Bakeoff);
        assert_eq!(file.header.name, "renamed");
        assert_eq!(file.header.task, TaskKind::Classification);
    }

    #[test]
    fn empty_files_say_so_whatever_their_extension() {
        let options = ImportOptions {
            task: Some(TaskKind::Generation),
            ..ImportOptions::default()
        };
        for name in ["e.csv", "e.jsonl", "e.yaml", "pasted text"] {
            let e = import(FormatChoice::Auto, name, "\u{feff}\n \n", &options).unwrap_err();
            assert_eq!(e.to_string(), format!("{name}: {EMPTY_FILE}"));
        }
    }

    #[test]
    fn imports_report_every_bad_row_with_its_source_line() {
        let options = ImportOptions {
            task: Some(TaskKind::Generation),
            ..ImportOptions::default()
        };
        let csv = "id,input,grader\na,x,telepathy!\nb,y\nc,z,exact\nc,w,exact\n";
        let e = import(FormatChoice::Auto, "t.csv", csv, &options).unwrap_err();
        let lines: Vec<String> = e.lines();
        assert_eq!(lines.len(), 3, "{e}");
        assert!(lines[0].starts_with("t.csv:2: field \"grader\": "), "{e}");
        assert!(lines[1].starts_with("t.csv:3: row has 2 fields"), "{e}");
        assert_eq!(lines[2], "t.csv:5: field \"id\": duplicate case id \"c\"", "{e}");

        // An unclosed quote is told where it opens, and the rows before it are still read.
        let quote = "input,expected\na,b\n\"never closed,b\nc,d\ne,f\n";
        let e = import(FormatChoice::Auto, "q.csv", quote, &options).unwrap_err();
        assert_eq!(e.problems.len(), 1, "{e}");
        assert!(
            e.to_string()
                .starts_with("q.csv:3: a quoted cell opens here and is never closed"),
            "{e}"
        );

        let openai = "{\"input\": \"a\", \"ideal\": \"b\"}\n{\"input\": 3}\n{\"ideal\": \"x\" oops}\n";
        let e = import(FormatChoice::Known(Format::OpenaiEvals), "s.jsonl", openai, &options).unwrap_err();
        let lines = e.lines();
        assert_eq!(
            lines[0], "s.jsonl:2: field \"input\" must be a string or a non-empty list of chat messages",
            "{e}"
        );
        assert!(lines[1].starts_with("s.jsonl:3, column 1"), "{e}");
        assert!(lines[1].ends_with(": not valid JSON: expected `,` or `}`"), "{e}");
    }

    #[test]
    fn names_default_to_the_file_stem_and_tasks_are_required() {
        assert_eq!(file_stem("dir/tickets.v2.csv").as_deref(), Some("tickets.v2"));
        assert_eq!(file_stem("pasted text"), None);
        let e = header("pasted text", &ImportOptions::default(), None, Format::Csv)
            .unwrap_err()
            .first()
            .clone();
        assert_eq!(e.field.as_deref(), Some("name"));
        let e = header("t.csv", &ImportOptions::default(), None, Format::Csv)
            .unwrap_err()
            .first()
            .clone();
        assert_eq!(e.field.as_deref(), Some("task"));
        assert_eq!(numbered_id("row", 7, 1500), "row-0007");
        assert_eq!(split_tags(" a; b;;c "), vec![json!("a"), json!("b"), json!("c")]);
    }
}
