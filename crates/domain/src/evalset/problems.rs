//! Why a file was refused: every problem found in one pass (up to a bound), each naming its
//! place the same way: `file:line: field "x" …`, or `file:line, column C: …` for JSON syntax.

/// Problems listed one by one; past this many only their number is told.
pub const MAX_LISTED_PROBLEMS: usize = 50;

/// One problem and where it is: the 1-based line (and column, for JSON syntax) and the field
/// path (`id`, `graders[1].min`, `vars.text`) where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

impl Problem {
    pub fn new(line: Option<usize>, field: Option<&str>, message: impl Into<String>) -> Problem {
        Problem {
            line,
            column: None,
            field: field.map(str::to_string),
            message: message.into(),
        }
    }

    /// `3` or `3, column 14`; empty when the problem concerns the whole file.
    pub fn place(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{l}, column {c}"),
            (Some(l), None) => l.to_string(),
            _ => String::new(),
        }
    }

    /// The problem without its place: `field "id" must be …` or `field "graders[0]": …`.
    pub fn text(&self) -> String {
        match &self.field {
            // "field "id" must be a string" reads as a sentence; anything else gets a colon.
            Some(f) if ["must ", "is ", "are "].iter().any(|v| self.message.starts_with(v)) => {
                format!("field {f:?} {}", self.message)
            }
            Some(f) => format!("field {f:?}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place(), self.text())
    }
}

/// A refused file: its name and the problems found, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalSetError {
    pub source_name: String,
    /// At most [`MAX_LISTED_PROBLEMS`]; never empty.
    pub problems: Vec<Problem>,
    /// Problems found past the bound.
    pub unlisted: usize,
}

impl EvalSetError {
    /// A file refused for one reason.
    pub fn one(source_name: &str, problem: Problem) -> EvalSetError {
        EvalSetError {
            source_name: source_name.to_string(),
            problems: vec![problem],
            unlisted: 0,
        }
    }

    /// The first problem (in file order).
    pub fn first(&self) -> &Problem {
        &self.problems[0]
    }

    /// Every problem's line with the file name: `cases.jsonl:3: field "id" …`.
    pub fn lines(&self) -> Vec<String> {
        self.problems.iter().map(|p| self.line_of(p)).collect()
    }

    fn line_of(&self, p: &Problem) -> String {
        match p.place() {
            place if place.is_empty() => format!("{}: {}", self.source_name, p.text()),
            place => format!("{}:{place}: {}", self.source_name, p.text()),
        }
    }

    /// "and 12 more problems", when some were not listed.
    pub fn unlisted_note(&self) -> Option<String> {
        (self.unlisted > 0).then(|| {
            format!(
                "and {} more problem{}",
                self.unlisted,
                if self.unlisted == 1 { "" } else { "s" }
            )
        })
    }
}

impl std::fmt::Display for EvalSetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lines = self.lines();
        lines.extend(self.unlisted_note());
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for EvalSetError {}

/// Gathers problems in one pass, keeping the first [`MAX_LISTED_PROBLEMS`].
#[derive(Debug, Default)]
pub(crate) struct Problems {
    listed: Vec<Problem>,
    unlisted: usize,
}

impl Problems {
    pub fn push(&mut self, problem: Problem) {
        if self.listed.len() < MAX_LISTED_PROBLEMS {
            self.listed.push(problem);
        } else {
            self.unlisted += 1;
        }
    }

    pub fn add(&mut self, line: Option<usize>, field: Option<&str>, message: impl Into<String>) {
        self.push(Problem::new(line, field, message));
    }

    /// Counts problems another pass found past its own bound.
    pub fn add_unlisted(&mut self, n: usize) {
        self.unlisted += n;
    }

    /// `Ok(value)` when nothing was found, else the error with the problems in line order
    /// (problems of the whole file first).
    pub fn into_result<T>(mut self, source_name: &str, value: T) -> Result<T, EvalSetError> {
        if self.listed.is_empty() {
            return Ok(value);
        }
        self.listed.sort_by_key(|p| (p.line, p.column));
        Err(EvalSetError {
            source_name: source_name.to_string(),
            problems: self.listed,
            unlisted: self.unlisted,
        })
    }
}

/// What a JSON value is, for "got …" messages.
pub(crate) fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A serde_json message without its " at line L column C" (the place is told apart).
pub(crate) fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => text[..i].to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_names_its_place_one_way_and_the_list_is_bounded() {
        let mut found = Problems::default();
        found.add(Some(3), Some("id"), "must be a string or number, got an object");
        found.push(Problem {
            line: Some(2),
            column: Some(14),
            field: None,
            message: "expected `,` or `}`".into(),
        });
        found.add(Some(4), Some("expected"), "x");
        let e = found.into_result("cases.jsonl", ()).unwrap_err();
        assert_eq!(
            e.lines(),
            [
                "cases.jsonl:2, column 14: expected `,` or `}`",
                "cases.jsonl:3: field \"id\" must be a string or number, got an object",
                "cases.jsonl:4: field \"expected\": x",
            ]
        );

        let mut many = Problems::default();
        for line in 1..=MAX_LISTED_PROBLEMS + 7 {
            many.add(Some(line), None, "bad");
        }
        let e = many.into_result("f", ()).unwrap_err();
        assert_eq!((e.problems.len(), e.unlisted), (MAX_LISTED_PROBLEMS, 7));
        assert!(e.to_string().ends_with("\nand 7 more problems"), "{e}");
    }
}
