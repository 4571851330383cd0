//! Structured output (`docs/tool-cases.md`, "Structured output"): a case's `response_format`
//! asks the server to constrain the answer to a JSON Schema — OpenAI-compatible servers through
//! `response_format: {"type": "json_schema", "json_schema": {...}}`, Anthropic through a forced
//! tool whose input schema is the schema (its `tool_use` input is the answer).
//!
//! Every answer of such a case gets a `response-format` grade: the answer (trimmed, nothing
//! extracted from fences or prose) must be JSON and valid against the schema. Its pass rate is
//! the schema-validity rate. A run may send each such case a second time without the
//! constraint (the case's *unconstrained twin*, id `<id>~unconstrained`) at the same load, so
//! the cost of constrained decoding is measured in one run: TTFT and decode rate side by side.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::case::ToolCaseError;
use crate::grading::{Grade, MAX_REASON_CHARS, Schema};
use crate::validation::truncate;

/// The grader name of the schema-validity grade.
pub const SCHEMA_GRADER: &str = "response-format";
/// What an unconstrained twin's case id ends with.
pub const TWIN_SUFFIX: &str = "~unconstrained";
/// The tag every unconstrained twin carries.
pub const TWIN_TAG: &str = "unconstrained";

/// A case's `response_format`: the answer must be JSON valid against `schema`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseFormat {
    /// The schema's name (OpenAI requires one; the Anthropic forced tool is named after it).
    pub name: String,
    pub description: Option<String>,
    pub schema: Schema,
    /// OpenAI's `strict` (sent as written; default true).
    pub strict: bool,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> ToolCaseError {
    ToolCaseError {
        field: field.into(),
        message: message.into(),
    }
}

impl ResponseFormat {
    /// Reads `{"type": "json_schema", "json_schema": {"name", "schema", "strict"?,
    /// "description"?}}` (`field` names it in problems).
    pub fn read(value: &Value, field: &str) -> Result<ResponseFormat, ToolCaseError> {
        let Some(object) = value.as_object() else {
            return Err(problem(
                field,
                "must be an object: {\"type\": \"json_schema\", \"json_schema\": {\"name\": …, \"schema\": {…}}}",
            ));
        };
        match object.get("type").and_then(Value::as_str) {
            Some("json_schema") => {}
            Some(other) => {
                return Err(problem(
                    format!("{field}.type"),
                    format!("{other:?} is not supported; use \"json_schema\" (with the schema the answer must fit)"),
                ));
            }
            None => return Err(problem(format!("{field}.type"), "is required: \"json_schema\"")),
        }
        if let Some(unknown) = object.keys().find(|k| !["type", "json_schema"].contains(&k.as_str())) {
            return Err(problem(format!("{field}.{unknown}"), "is not a response_format field"));
        }
        let inner_field = format!("{field}.json_schema");
        let Some(inner) = object.get("json_schema").and_then(Value::as_object) else {
            return Err(problem(&inner_field, "is required (an object with name and schema)"));
        };
        let name = match inner.get("name") {
            Some(Value::String(s))
                if !s.is_empty()
                    && s.len() <= 64
                    && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                s.clone()
            }
            Some(other) => {
                return Err(problem(
                    format!("{inner_field}.name"),
                    format!("{other} is not a schema name (1 to 64 of a-z A-Z 0-9 _ -)"),
                ));
            }
            None => return Err(problem(format!("{inner_field}.name"), "is required (a string)")),
        };
        let description = match inner.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(problem(format!("{inner_field}.description"), "must be a string")),
        };
        let strict = match inner.get("strict") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(problem(format!("{inner_field}.strict"), "must be true or false")),
        };
        let schema_value = match inner.get("schema") {
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(problem(
                    format!("{inner_field}.schema"),
                    "must be a JSON Schema (an object)",
                ));
            }
            None => return Err(problem(format!("{inner_field}.schema"), "is required (a JSON Schema)")),
        };
        let schema = Schema::new(schema_value).map_err(|e| problem(format!("{inner_field}.schema"), e))?;
        if let Some(unknown) = inner
            .keys()
            .find(|k| !["name", "description", "schema", "strict"].contains(&k.as_str()))
        {
            return Err(problem(
                format!("{inner_field}.{unknown}"),
                "is not a json_schema field",
            ));
        }
        Ok(ResponseFormat {
            name,
            description,
            schema,
            strict,
        })
    }

    /// The OpenAI shape (how it is stored, hashed and sent to OpenAI-compatible servers).
    pub fn openai(&self) -> Value {
        let mut inner = Map::new();
        inner.insert("name".into(), json!(self.name));
        if let Some(d) = &self.description {
            inner.insert("description".into(), json!(d));
        }
        inner.insert("schema".into(), self.schema.source().clone());
        inner.insert("strict".into(), json!(self.strict));
        json!({"type": "json_schema", "json_schema": inner})
    }

    /// Anthropic's equivalent: a tool whose input schema is the schema, which the request forces
    /// (`anthropic_choice`); its `tool_use` input is the answer. Anthropic's tool input is an
    /// object: a schema of another type is wrapped in `{"value": …}` by neither side, so it is
    /// sent as it is and the server says whether it takes it.
    pub fn anthropic_tool(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description.clone().unwrap_or_else(|| "Answer in this structure.".to_string()),
            "input_schema": self.schema.source(),
        })
    }

    pub fn anthropic_choice(&self) -> Value {
        json!({"type": "tool", "name": self.name})
    }
}

impl Serialize for ResponseFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.openai().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ResponseFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ResponseFormat::read(&Value::deserialize(d)?, "response_format").map_err(serde::de::Error::custom)
    }
}

/// The schema-validity grade of an answer: JSON (the whole answer, trimmed) and valid against
/// the schema. The reason names the first violation.
pub fn grade_structured(format: &ResponseFormat, answer: &str) -> Grade {
    let (passed, reason) = match serde_json::from_str::<Value>(answer.trim()) {
        Err(e) => (false, format!("not JSON: {e}")),
        Ok(value) => match format.schema.validator().iter_errors(&value).next() {
            None => (true, format!("valid JSON against the {} schema", format.name)),
            Some(e) => {
                let path = e.instance_path().as_str().to_string();
                let at = if path.is_empty() { "(root)".to_string() } else { path };
                (false, format!("against the {} schema at {at}: {e}", format.name))
            }
        },
    };
    Grade {
        grader: SCHEMA_GRADER.into(),
        score: if passed { 1.0 } else { 0.0 },
        passed,
        reason: truncate(&reason, MAX_REASON_CHARS),
        detail: None,
        weight: 1.0,
        required: true,
    }
}

/// The eval set as a run with `unconstrained_twins` sends it: each case with a
/// `response_format` followed by its twin (the same case without the constraint and without
/// the schema grade, id `<id>~unconstrained`, tagged `unconstrained`). A twin counts as a case
/// for `case_limit`.
pub fn with_twins(mut file: crate::evalset::EvalSetFile) -> crate::evalset::EvalSetFile {
    let mut cases = Vec::with_capacity(file.cases.len() * 2);
    for case in file.cases {
        let twin = case.response_format.is_some().then(|| {
            let mut twin = case.clone();
            twin.id = format!("{}{TWIN_SUFFIX}", case.id);
            twin.response_format = None;
            twin.tags.push(TWIN_TAG.to_string());
            twin
        });
        cases.push(case);
        cases.extend(twin);
    }
    file.cases = cases;
    file
}

/// Whether a case id is an unconstrained twin's, and its constrained case's id.
pub fn twin_of(case_id: &str) -> Option<&str> {
    case_id.strip_suffix(TWIN_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format() -> ResponseFormat {
        ResponseFormat::read(
            &json!({"type": "json_schema", "json_schema": {"name": "order", "schema": {
                "type": "object", "properties": {"id": {"type": "integer"}, "status": {"enum": ["open", "shipped"]}},
                "required": ["id", "status"], "additionalProperties": false}}}),
            "response_format",
        )
        .unwrap()
    }

    #[test]
    fn answers_are_graded_json_and_valid_against_the_schema() {
        let f = format();
        assert!(grade_structured(&f, r#" {"id": 7, "status": "open"} "#).passed);
        let broken = grade_structured(&f, r#"{"id": 7, "status": "open""#);
        assert!(
            !broken.passed && broken.reason.starts_with("not JSON"),
            "{}",
            broken.reason
        );
        let wrong = grade_structured(&f, r#"{"id": "7", "status": "open"}"#);
        assert!(!wrong.passed && wrong.reason.contains("/id"), "{}", wrong.reason);
        // Fenced JSON is not what a constrained answer is: not JSON.
        assert!(!grade_structured(&f, "```json\n{\"id\": 7, \"status\": \"open\"}\n```").passed);
    }

    #[test]
    fn the_format_is_read_with_its_field_named_and_kept_in_the_openai_shape() {
        let f = format();
        assert_eq!(f.openai()["json_schema"]["strict"], true);
        assert_eq!(f.anthropic_choice(), json!({"type": "tool", "name": "order"}));
        assert_eq!(f.anthropic_tool()["input_schema"]["required"], json!(["id", "status"]));
        let e = ResponseFormat::read(&json!({"type": "json_object"}), "response_format").unwrap_err();
        assert_eq!(e.field, "response_format.type");
        let e = ResponseFormat::read(
            &json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 3}}}),
            "response_format",
        )
        .unwrap_err();
        assert_eq!(e.field, "response_format.json_schema.schema");
        let e = ResponseFormat::read(&json!({"type": "json_schema", "json_schema": {"schema": {}}}), "rf").unwrap_err();
        assert_eq!(e.field, "rf.json_schema.name");
        assert_eq!(twin_of("a~unconstrained"), Some("a"));
        assert_eq!(twin_of("a"), None);
    }
}

/// The schema-validity rate at load `c` (None: the whole run): the share of `response-format`
/// grades that passed, over the final attempts that carry one.
pub fn schema_valid_rate(finals: &[&crate::run::RequestRecord], c: Option<u32>) -> crate::scorecard::Measurement {
    let grades: Vec<bool> = finals
        .iter()
        .filter_map(|r| r.grades.iter().find(|g| &*g.grader == SCHEMA_GRADER))
        .map(|g| g.passed)
        .collect();
    let passed = grades.iter().filter(|p| **p).count() as f64;
    let mut m = crate::scorecard::measurement::proportion(
        passed,
        grades.len() as f64,
        crate::scorecard::SampleUnit::Requests,
        c,
    );
    if grades.is_empty() {
        m.missing =
            Some("no answer to a case with a response_format (the eval set has none, or none succeeded)".into());
    }
    m
}

/// A figure of constrained answers beside their unconstrained twins' at one level: the medians
/// and the difference (constrained − unconstrained) with its 90 % bootstrap interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    pub constrained: Option<f64>,
    pub unconstrained: Option<f64>,
    pub difference: Option<f64>,
    pub interval: Option<(f64, f64)>,
}

impl Compared {
    fn of(constrained: &[f64], unconstrained: &[f64]) -> Compared {
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            (!v.is_empty()).then(|| crate::stats::median(&mut v))
        };
        let (a, b) = (median(constrained), median(unconstrained));
        Compared {
            constrained: a,
            unconstrained: b,
            difference: a.zip(b).map(|(a, b)| a - b),
            interval: difference_interval(constrained, unconstrained),
        }
    }
}

/// 90 % percentile-bootstrap interval of median(a) − median(b), each sample resampled on its
/// own (the two are different requests), deterministic.
fn difference_interval(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mut rng = crate::stats::SplitMix64::new(0x5eed_c0de);
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; b.len()]);
    let mut diffs = Vec::with_capacity(2000);
    for _ in 0..2000 {
        for x in ra.iter_mut() {
            *x = a[rng.below(a.len())];
        }
        for x in rb.iter_mut() {
            *x = b[rng.below(b.len())];
        }
        diffs.push(crate::stats::median(&mut ra) - crate::stats::median(&mut rb));
    }
    diffs.sort_by(f64::total_cmp);
    Some((
        crate::stats::quantile_sorted(&diffs, 0.05),
        crate::stats::quantile_sorted(&diffs, 0.95),
    ))
}

/// The cost of constrained decoding at one load level: the constrained answers (cases with a
/// `response_format` whose twin was sent) beside their unconstrained twins, and the
/// schema-validity rate of the constrained ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConstraintCost {
    pub concurrency: u32,
    pub constrained_n: usize,
    pub unconstrained_n: usize,
    /// TTFT, ms.
    pub ttft_ms: Compared,
    /// Decode tok/s per stream.
    pub decode_tok_s: Compared,
    pub schema_valid: crate::scorecard::Measurement,
}

/// Per load level (ascending), the constrained answers beside their twins; empty when the run
/// sent no twins. Successful final attempts only (a failed request has no TTFT).
pub fn constraint_cost(finals: &[&crate::run::RequestRecord]) -> Vec<ConstraintCost> {
    use std::collections::{BTreeMap, HashSet};
    let twinned: HashSet<&str> = finals.iter().filter_map(|r| twin_of(&r.case_id)).collect();
    if twinned.is_empty() {
        return Vec::new();
    }
    type Sides<'a> = (Vec<&'a crate::run::RequestRecord>, Vec<&'a crate::run::RequestRecord>);
    let mut levels: BTreeMap<u32, Sides<'_>> = BTreeMap::new();
    for r in finals.iter().filter(|r| !r.is_warmup) {
        let entry = levels.entry(r.concurrency).or_default();
        if twin_of(&r.case_id).is_some() {
            entry.1.push(r);
        } else if twinned.contains(r.case_id.as_ref()) {
            entry.0.push(r);
        }
    }
    levels
        .into_iter()
        .filter(|(_, (c, u))| !c.is_empty() && !u.is_empty())
        .map(|(level, (constrained, free))| {
            let figures = |rs: &[&crate::run::RequestRecord]| {
                let all: Vec<crate::calibers::RequestFigures> = rs
                    .iter()
                    .filter_map(|r| crate::calibers::RequestFigures::of(r))
                    .collect();
                let ttft: Vec<f64> = all.iter().map(|f| f.ttft_ms).collect();
                let decode: Vec<f64> = all.iter().filter_map(|f| f.decode_tok_s).collect();
                (ttft, decode)
            };
            let (ct, cd) = figures(&constrained);
            let (ft, fd) = figures(&free);
            ConstraintCost {
                concurrency: level,
                constrained_n: constrained.len(),
                unconstrained_n: free.len(),
                ttft_ms: Compared::of(&ct, &ft),
                decode_tok_s: Compared::of(&cd, &fd),
                schema_valid: schema_valid_rate(&constrained, Some(level)),
            }
        })
        .collect()
}
