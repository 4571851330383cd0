//! CSV with a header row. Columns: `input` (required) and `expected`, optional `id`, `tags`
//! (semicolon-separated) and `grader` (a grader kind such as `exact`, or grader JSON); every
//! other column becomes a template variable. The prompt template defaults to `{{input}}`.
use serde_json::{Map, Value, json};

use super::{Draft, Format, ImportOptions, Origin, Problem, error, header, numbered_id, split_tags};
use crate::evalset::EvalSetError;

pub(super) fn read(source_name: &str, text: &str, options: &ImportOptions) -> Result<Draft, EvalSetError> {
    let mut h = header(source_name, options, None, Format::Csv)?;
    h.entry("prompt").or_insert_with(|| json!("{{input}}"));

    let text = text.trim_start_matches('\u{feff}');
    let mut problems = Vec::new();
    // The csv reader takes an unclosed quote to the end of the file and blames a later row:
    // read the rows before it, and name the line where it opened.
    let text = match unclosed_quote(text) {
        Some((line, offset)) => {
            problems.push(Problem::new(
                Some(line),
                None,
                "a quoted cell opens here and is never closed (a \" is missing; a \" inside a quoted cell is written \"\")",
            ));
            if offset == 0 {
                return Ok(Draft {
                    header: h,
                    cases: Vec::new(),
                    problems,
                });
            }
            &text[..offset]
        }
        None => text,
    };
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let columns: Vec<String> = match reader.headers() {
        Ok(columns) => columns.iter().map(|c| c.trim().to_string()).collect(),
        Err(e) => return Err(csv_error(source_name, &e)),
    };
    let mut header_problem =
        |field: Option<&str>, message: String| problems.push(Problem::new(Some(1), field, message));
    for (i, c) in columns.iter().enumerate() {
        if c.is_empty() {
            header_problem(None, format!("column {} has no name", i + 1));
        } else if columns[..i].contains(c) {
            header_problem(Some(c), "is a column that appears twice".into());
        }
    }
    if !columns.iter().any(|c| c == "input") {
        header_problem(
            Some("input"),
            format!(
                "is a required column the header row lacks (found: {})",
                columns.join(", ")
            ),
        );
    }
    if problems.iter().any(|p| p.line == Some(1)) {
        // Without a sound header row no row can be read.
        return Ok(Draft {
            header: h,
            cases: Vec::new(),
            problems,
        });
    }

    let mut records = Vec::new();
    for record in reader.records() {
        match record {
            Ok(r) => records.push(r),
            Err(e) => problems.extend(csv_error(source_name, &e).problems),
        }
    }
    let mut cases = Vec::with_capacity(records.len());
    for (n, record) in records.iter().enumerate() {
        let line = record.position().map(|p| p.line() as usize).unwrap_or(n + 2);
        let mut case = Map::new();
        let mut vars = Map::new();
        let mut row_ok = true;
        for (column, value) in columns.iter().zip(record.iter()) {
            match column.as_str() {
                "id" => {
                    if !value.trim().is_empty() {
                        case.insert("id".into(), json!(value.trim()));
                    }
                }
                "expected" => {
                    if !value.is_empty() {
                        case.insert("expected".into(), json!(value));
                    }
                }
                "tags" => {
                    let tags = split_tags(value);
                    if !tags.is_empty() {
                        case.insert("tags".into(), Value::Array(tags));
                    }
                }
                "grader" => match graders(value) {
                    Ok(Some(graders)) => {
                        case.insert("graders".into(), graders);
                    }
                    Ok(None) => {}
                    Err(m) => {
                        problems.push(Problem::new(Some(line), Some("grader"), m));
                        row_ok = false;
                    }
                },
                var => {
                    vars.insert(var.to_string(), json!(value));
                }
            }
        }
        case.entry("id")
            .or_insert_with(|| json!(numbered_id("row", n + 1, records.len())));
        case.insert("vars".into(), Value::Object(vars));
        if row_ok {
            cases.push((Origin::Line(line), Value::Object(case)));
        }
    }
    Ok(Draft {
        header: h,
        cases,
        problems,
    })
}

/// The line and byte offset of the start of the line where a quoted cell opens and is never
/// closed (RFC 4180: a quote opens only at the start of a cell; `""` inside is a quote).
fn unclosed_quote(text: &str) -> Option<(usize, usize)> {
    let (mut line, mut line_start) = (1usize, 0usize);
    let mut opened: Option<(usize, usize)> = None;
    let mut cell_start = true;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (opened.is_some(), c) {
            (true, '"') if chars.peek().is_some_and(|(_, n)| *n == '"') => {
                chars.next();
            }
            (true, '"') => opened = None,
            (false, '"') if cell_start => opened = Some((line, line_start)),
            (_, '\n') => {
                line += 1;
                line_start = i + 1;
            }
            _ => {}
        }
        cell_start = opened.is_none() && (c == ',' || c == '\n' || c == '\r');
    }
    opened
}

/// A `grader` cell: empty (use the defaults), a kind name (`contains`), or grader JSON (one
/// object or a list).
fn graders(cell: &str) -> Result<Option<Value>, String> {
    let cell = cell.trim();
    if cell.is_empty() {
        return Ok(None);
    }
    if cell.starts_with('{') || cell.starts_with('[') {
        return match serde_json::from_str::<Value>(cell) {
            Ok(Value::Array(list)) => Ok(Some(Value::Array(list))),
            Ok(one @ Value::Object(_)) => Ok(Some(json!([one]))),
            Ok(_) => Err("must be a grader kind, a grader object or a list of them".into()),
            Err(e) => Err(format!("is not valid JSON: {e}")),
        };
    }
    if cell.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Ok(Some(json!([{"kind": cell}])));
    }
    Err(format!(
        "{cell:?} is neither a grader kind (e.g. `exact`) nor grader JSON (e.g. {{\"kind\": \"exact\"}})"
    ))
}

fn csv_error(source_name: &str, e: &::csv::Error) -> EvalSetError {
    let line = e.position().map(|p| p.line() as usize);
    let message = match e.kind() {
        ::csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("row has {len} fields but the header row has {expected_len}")
        }
        ::csv::ErrorKind::Utf8 { .. } => "is not valid UTF-8".to_string(),
        _ => e.to_string(),
    };
    error(source_name, line, None, message)
}

#[cfg(test)]
mod tests {
    use crate::evalset::TaskKind;
    use crate::evalset::import::{Format, FormatChoice, ImportOptions, import};

    fn options() -> ImportOptions {
        ImportOptions {
            name: Some("tickets".into()),
            task: Some(TaskKind::Classification),
            prompt: None,
            grader: Default::default(),
        }
    }

    #[test]
    fn reads_columns_ids_tags_graders_and_quoted_cells() {
        let text = "id,input,expected,tags,grader,lang\n\
                    t1,\"I was charged twice, please help\",billing,en; money,,en\n\
                    ,\"多行\n工单\",technical,zh,\"{\"\"kind\"\":\"\"exact\"\",\"\"ignore_case\"\":true}\",zh\n";
        let (format, file) = import(FormatChoice::Auto, "t.csv", text, &options()).unwrap();
        assert_eq!(format, Format::Csv);
        assert_eq!(file.header.name, "tickets");
        assert_eq!(file.header.prompt.as_deref(), Some("{{input}}"));
        assert_eq!(file.cases[0].id, "t1");
        assert_eq!(file.cases[0].tags, ["en", "money"]);
        assert_eq!(file.cases[0].vars["lang"], "en");
        assert_eq!(
            file.messages_for(&file.cases[0])[0].content,
            "I was charged twice, please help"
        );
        assert_eq!(file.cases[1].id, "row-002");
        assert_eq!(file.cases[1].vars["input"], "多行\n工单");
        assert_eq!(file.cases[1].graders.len(), 1);
        assert!(file.cases[0].graders.is_empty());
    }

    #[test]
    fn errors_name_the_row_line_and_column() {
        let e = import(
            FormatChoice::Known(Format::Csv),
            "t.csv",
            "text,expected\na,b\n",
            &options(),
        )
        .unwrap_err()
        .first()
        .clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("input")), "{e}");

        let ragged = "input,expected\na,b\nc\n";
        let e = import(FormatChoice::Known(Format::Csv), "t.csv", ragged, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("1 fields"), "{e}");

        let bad_grader = "input,expected,grader\na,b,exact\nc,d,\"{nope\"\n";
        let e = import(FormatChoice::Known(Format::Csv), "t.csv", bad_grader, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("grader")), "{e}");

        let unknown_kind = "input,expected,grader\na,b,telepathy\n";
        let e = import(FormatChoice::Known(Format::Csv), "t.csv", unknown_kind, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!(e.line, Some(2), "{e}");

        let dup = "id,input\nx,a\nx,b\n";
        let e = import(FormatChoice::Known(Format::Csv), "t.csv", dup, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("id")), "{e}");
    }
}
