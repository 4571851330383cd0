//! What an eval-set file says about grading: every grader kind and its options.
//!
//! The JSON form is `{"kind": "<kind>", …options}`; unknown options are refused. Options that
//! are off by default are left out when a spec is re-serialised, so adding an option never
//! changes the content hash of files that do not use it. Regular expressions and JSON Schemas
//! are compiled while the file is parsed: a bad one is an eval-set error naming the field, and
//! grading never compiles anything.
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A grader and its options, as written in an eval-set file (`{"kind": "exact", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum GraderSpec {
    /// Output equals the expected text after the chosen normalisations (trim and whitespace
    /// collapsing on by default; case folding, NFKC and punctuation removal off).
    Exact {
        #[serde(default = "yes")]
        trim: bool,
        #[serde(default)]
        ignore_case: bool,
        #[serde(default = "yes")]
        collapse_whitespace: bool,
        /// Unicode NFKC: full-width `ＡＢＣ１２３` reads as `ABC123`, `ﬁ` as `fi`.
        #[serde(default, skip_serializing_if = "is_false")]
        nfkc: bool,
        /// Drop every punctuation character (ASCII and CJK: `，。！？「」…`) before comparing.
        #[serde(default, skip_serializing_if = "is_false")]
        ignore_punctuation: bool,
    },
    /// Output contains `value` (or every one of `values`; default: the case's expected value).
    Contains(TextMatch),
    /// Output contains none of the values.
    NotContains(TextMatch),
    /// Output contains at least one of the values.
    ContainsAny(TextMatch),
    /// Output contains every one of the values; the score is the fraction found.
    ContainsAll(TextMatch),
    /// Output matches a regular expression (Rust `regex` syntax, linear time).
    Regex {
        pattern: Pattern,
        /// Pass when the pattern does NOT match.
        #[serde(default, skip_serializing_if = "is_false")]
        negate: bool,
    },
    /// Output is (or contains, in a code fence or prose) one JSON value.
    JsonValid {
        /// The whole output, trimmed, must be JSON: no fences, no prose around it.
        #[serde(default, skip_serializing_if = "is_false")]
        strict: bool,
    },
    /// The JSON in the output validates against an inline JSON Schema (draft 2020-12).
    JsonSchema {
        schema: Schema,
        #[serde(default, skip_serializing_if = "is_false")]
        strict: bool,
    },
    /// Structured extraction: the JSON object in the output is compared field by field with the
    /// expected object (per-field precision / recall / F1, whole-record exact).
    JsonFields(JsonFieldsOptions),
    /// Classification: the normalised output is the expected label.
    #[serde(alias = "classification")]
    Label {
        /// The allowed labels; an output naming none of them is wrong. Empty: any label.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        labels: Vec<String>,
        #[serde(default = "yes")]
        ignore_case: bool,
    },
    /// The number in the output is within tolerance of the expected number.
    Numeric {
        /// The expected number; default: the case's expected value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
        /// Largest accepted |output − expected|.
        #[serde(default, skip_serializing_if = "is_zero")]
        abs_tol: f64,
        /// Largest accepted |output − expected| / |expected|.
        #[serde(default, skip_serializing_if = "is_zero")]
        rel_tol: f64,
        /// Which number of the output is the answer when it holds several.
        #[serde(default, skip_serializing_if = "NumberPick::is_default")]
        pick: NumberPick,
    },
    /// Output length is within bounds.
    Length {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u64>,
        #[serde(default)]
        unit: LengthUnit,
    },
    /// ROUGE-L F1 (longest common subsequence) against the expected text(s), at least `min`.
    RougeL { min: f64 },
    /// chrF (character 6-gram F-score, β = 2) against the expected text(s), at least `min`.
    Chrf { min: f64 },
    /// A judge model scores the output against a rubric. Run by the engine as its own recorded
    /// requests, never by `grade()` (domain code makes no calls).
    LlmJudge {
        /// Name of the candidate that acts as judge.
        judge: String,
        rubric: String,
        #[serde(default)]
        scale: JudgeScale,
        /// Lowest passing score on the `1-5` scale (default 4); not used by `pass-fail`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<u8>,
    },
}

/// A grader as listed in a file: its kind and options, plus how it counts in the case's
/// verdict. `weight` (default 1, any positive number) weighs its score in the case score (the
/// weighted mean of the grader scores); `required` (default true) says whether the case fails
/// when it fails. A non-required grader is graded and reported but never fails a case.
///
/// Written flat, beside the kind's options: `{"kind": "exact", "weight": 2, "required": false}`.
/// The defaults are left out when re-serialised, so existing files keep their content hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Grader {
    pub spec: GraderSpec,
    pub weight: f64,
    pub required: bool,
}

impl From<GraderSpec> for Grader {
    fn from(spec: GraderSpec) -> Self {
        Grader {
            spec,
            weight: 1.0,
            required: true,
        }
    }
}

impl std::ops::Deref for Grader {
    type Target = GraderSpec;
    fn deref(&self) -> &GraderSpec {
        &self.spec
    }
}

impl Grader {
    /// The kind's own checks, then `weight`.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(SpecError {
                field: "weight".into(),
                message: "must be a positive number".into(),
            });
        }
        self.spec.validate()
    }

    /// The grader in words, with its weight and `optional` when it is not required.
    pub fn describe(&self) -> String {
        let mut out = self.spec.describe();
        if self.weight != 1.0 {
            out.push_str(&format!(" · weight {}", self.weight));
        }
        if !self.required {
            out.push_str(" · optional (does not fail the case)");
        }
        out
    }

    /// Grades `output` with this grader (see `grade`), the grade carrying its weight and
    /// whether it is required.
    pub fn grade(&self, output: &str, expected: Option<&serde_json::Value>) -> super::Grade {
        self.weigh(super::grade(&self.spec, output, expected))
    }

    /// `grade` with this grader's weight and `required` set on it.
    pub fn weigh(&self, mut grade: super::Grade) -> super::Grade {
        grade.weight = self.weight;
        grade.required = self.required;
        grade
    }
}

impl Serialize for Grader {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut value = serde_json::to_value(&self.spec).map_err(S::Error::custom)?;
        if let serde_json::Value::Object(map) = &mut value {
            if self.weight != 1.0 {
                map.insert("weight".into(), serde_json::json!(self.weight));
            }
            if !self.required {
                // A json-fields list of required fields moves to its other spelling.
                if let Some(fields) = map.remove("required") {
                    map.insert("required_fields".into(), fields);
                }
                map.insert("required".into(), serde_json::Value::Bool(false));
            }
        }
        value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Grader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut value = serde_json::Value::deserialize(d)?;
        let mut weight = 1.0;
        let mut required = true;
        if let serde_json::Value::Object(map) = &mut value {
            if let Some(w) = map.remove("weight") {
                weight = w
                    .as_f64()
                    .ok_or_else(|| D::Error::custom("`weight` must be a positive number"))?;
            }
            // `json-fields` has its own `required`, a list of fields: a list stays its option.
            let fields_list = map.get("kind").and_then(|k| k.as_str()) == Some("json-fields")
                && map.get("required").is_some_and(|r| r.is_array());
            if !fields_list && let Some(r) = map.remove("required") {
                required = r
                    .as_bool()
                    .ok_or_else(|| D::Error::custom("`required` must be true or false"))?;
            }
        }
        let spec = GraderSpec::deserialize(value).map_err(D::Error::custom)?;
        Ok(Grader { spec, weight, required })
    }
}

/// Options shared by the `contains` family.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_case: bool,
}

/// Options of the `json-fields` grader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonFieldsOptions {
    /// How to compare a field; fields not named here are compared by `auto`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, FieldType>,
    /// Fields that must be present and right for the grade to pass, whatever the F1. Also
    /// spelled `required_fields` (needed beside the grader-level `"required": false`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", alias = "required_fields")]
    pub required: Vec<String>,
    /// Lowest passing field F1 for the record (default 1.0: every field right, nothing extra).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub min_f1: f64,
    /// Read `05/03/2024` as 5 March (day first) rather than May 3.
    #[serde(default, skip_serializing_if = "is_false")]
    pub day_first: bool,
    /// Fields in the output that the expected object lacks do not count against precision.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_extra: bool,
    /// Salvage the complete fields of a cut-off object and drop trailing commas (for pipelines
    /// that repair JSON); the grade then says it was repaired. Off: such an answer is unusable,
    /// the case fails and its fields count as wrong.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lenient: bool,
}

impl Default for JsonFieldsOptions {
    fn default() -> Self {
        JsonFieldsOptions {
            types: BTreeMap::new(),
            required: Vec::new(),
            min_f1: 1.0,
            day_first: false,
            ignore_extra: false,
            lenient: false,
        }
    }
}

/// How one extracted field is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// Guess from the expected value: number, amount, date, list, else text.
    #[default]
    Auto,
    /// Trimmed, whitespace-collapsed, NFKC, case-folded text.
    Text,
    /// A number or currency amount: `¥1,234.50` = `1234.5 元` = `1234.5`.
    Number,
    /// A calendar date: `2024年3月5日` = `2024-03-05` = `March 5, 2024`.
    Date,
    /// A set of items; a string is split on `,，、;；`.
    List,
    /// The JSON values must be equal as they are.
    Exact,
}

/// Which number of an output the `numeric` grader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NumberPick {
    First,
    /// The last number: reasoning usually ends with the answer.
    #[default]
    Last,
}

impl NumberPick {
    fn is_default(&self) -> bool {
        *self == NumberPick::default()
    }
}

/// What the `length` grader counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LengthUnit {
    /// Unicode scalar values (a Chinese character is one).
    #[default]
    Chars,
    /// Approximate tokens: one per CJK character, one per 4 characters of other words.
    Tokens,
    /// Whitespace-separated words; each CJK character counts as one word.
    Words,
}

/// The judge's scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum JudgeScale {
    #[default]
    #[serde(rename = "1-5")]
    OneToFive,
    #[serde(rename = "pass-fail")]
    PassFail,
}

/// A regular expression compiled once, when the eval set is parsed; serialises as its source.
#[derive(Debug, Clone)]
pub struct Pattern(regex::Regex);

/// Compiled-program size cap, so a file cannot make a grader eat memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl Pattern {
    pub fn new(source: &str) -> Result<Pattern, String> {
        regex::RegexBuilder::new(source)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map(Pattern)
            .map_err(|e| {
                format!(
                    "`pattern` is not a valid regular expression: {}",
                    one_line(&e.to_string())
                )
            })
    }

    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let source = String::deserialize(d)?;
        Pattern::new(&source).map_err(serde::de::Error::custom)
    }
}

/// An inline JSON Schema (draft 2020-12), compiled once when the eval set is parsed.
/// Remote `$ref`s are never fetched: the crate is built without resolvers, so they are errors.
#[derive(Clone)]
pub struct Schema {
    source: serde_json::Value,
    validator: Arc<jsonschema::Validator>,
}

impl Schema {
    pub fn new(source: serde_json::Value) -> Result<Schema, String> {
        let validator = jsonschema::draft202012::new(&source)
            .map_err(|e| format!("`schema` is not a valid JSON Schema: {}", one_line(&e.to_string())))?;
        Ok(Schema {
            source,
            validator: Arc::new(validator),
        })
    }

    pub fn source(&self) -> &serde_json::Value {
        &self.source
    }

    pub fn validator(&self) -> &jsonschema::Validator {
        &self.validator
    }
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Schema").field(&self.source).finish()
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let source = serde_json::Value::deserialize(d)?;
        Schema::new(source).map_err(serde::de::Error::custom)
    }
}

/// A grader option that is out of range, named by its option (`min`, `labels`…).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl GraderSpec {
    /// The kind, as written in files (`"json-fields"`).
    pub fn name(&self) -> &'static str {
        match self {
            GraderSpec::Exact { .. } => "exact",
            GraderSpec::Contains(_) => "contains",
            GraderSpec::NotContains(_) => "not-contains",
            GraderSpec::ContainsAny(_) => "contains-any",
            GraderSpec::ContainsAll(_) => "contains-all",
            GraderSpec::Regex { .. } => "regex",
            GraderSpec::JsonValid { .. } => "json-valid",
            GraderSpec::JsonSchema { .. } => "json-schema",
            GraderSpec::JsonFields(_) => "json-fields",
            GraderSpec::Label { .. } => "label",
            GraderSpec::Numeric { .. } => "numeric",
            GraderSpec::Length { .. } => "length",
            GraderSpec::RougeL { .. } => "rouge-l",
            GraderSpec::Chrf { .. } => "chrf",
            GraderSpec::LlmJudge { .. } => "llm-judge",
        }
    }

    /// True for graders that need a model call (run by the engine, not by `grade()`).
    pub fn needs_model(&self) -> bool {
        matches!(self, GraderSpec::LlmJudge { .. })
    }

    /// Checks the options that serde cannot (ranges, non-empty lists). The eval-set parser
    /// calls this for every grader; regexes and schemas were already compiled by serde.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |field: &str, message: &str| {
            Err(SpecError {
                field: field.to_string(),
                message: message.to_string(),
            })
        };
        match self {
            GraderSpec::Contains(m)
            | GraderSpec::NotContains(m)
            | GraderSpec::ContainsAny(m)
            | GraderSpec::ContainsAll(m) => {
                if m.value.is_some() && m.values.is_some() {
                    return bad("values", "give `value` or `values`, not both");
                }
                if m.value.as_deref().is_some_and(str::is_empty) {
                    return bad("value", "must not be empty");
                }
                if let Some(values) = &m.values {
                    if values.is_empty() {
                        return bad("values", "must list at least one string");
                    }
                    if values.iter().any(String::is_empty) {
                        return bad("values", "must not contain an empty string");
                    }
                }
            }
            GraderSpec::JsonFields(o) => {
                if !(o.min_f1.is_finite() && (0.0..=1.0).contains(&o.min_f1)) {
                    return bad("min_f1", "must be between 0 and 1");
                }
                if o.required.iter().any(|f| f.trim().is_empty()) {
                    return bad("required", "must not contain an empty field name");
                }
            }
            GraderSpec::Label { labels, .. } => {
                if labels.iter().any(|l| l.trim().is_empty()) {
                    return bad("labels", "must not contain an empty label");
                }
            }
            GraderSpec::Numeric {
                value,
                abs_tol,
                rel_tol,
                ..
            } => {
                if value.is_some_and(|v| !v.is_finite()) {
                    return bad("value", "must be a finite number");
                }
                if !(abs_tol.is_finite() && *abs_tol >= 0.0) {
                    return bad("abs_tol", "must be a number ≥ 0");
                }
                if !(rel_tol.is_finite() && *rel_tol >= 0.0) {
                    return bad("rel_tol", "must be a number ≥ 0");
                }
            }
            GraderSpec::Length { min, max, .. } => {
                if min.is_none() && max.is_none() {
                    return bad("max", "give `min`, `max` or both");
                }
                if let (Some(lo), Some(hi)) = (min, max)
                    && lo > hi
                {
                    return bad("min", "must not exceed `max`");
                }
            }
            GraderSpec::RougeL { min } | GraderSpec::Chrf { min } => {
                if !(min.is_finite() && (0.0..=1.0).contains(min)) {
                    return bad("min", "must be between 0 and 1");
                }
            }
            GraderSpec::LlmJudge {
                judge,
                rubric,
                scale,
                min,
            } => {
                if judge.trim().is_empty() {
                    return bad("judge", "is required (the name of the judge candidate)");
                }
                if rubric.trim().is_empty() {
                    return bad("rubric", "is required");
                }
                if let Some(m) = min {
                    if *scale == JudgeScale::PassFail {
                        return bad("min", "is only used by the `1-5` scale");
                    }
                    if !(1..=5).contains(m) {
                        return bad("min", "must be between 1 and 5");
                    }
                }
            }
            GraderSpec::Exact { .. }
            | GraderSpec::Regex { .. }
            | GraderSpec::JsonValid { .. }
            | GraderSpec::JsonSchema { .. } => {}
        }
        Ok(())
    }

    /// The grader in words, for pages: `exact (trim, collapse whitespace)`, `rouge-l ≥ 0.40`.
    pub fn describe(&self) -> String {
        let with = |opts: Vec<String>| {
            if opts.is_empty() {
                self.name().to_string()
            } else {
                format!("{} ({})", self.name(), opts.join(", "))
            }
        };
        let flag = |on: bool, word: &str| on.then(|| word.to_string());
        match self {
            GraderSpec::Exact {
                trim,
                ignore_case,
                collapse_whitespace,
                nfkc,
                ignore_punctuation,
            } => {
                let opts: Vec<String> = [
                    flag(*trim, "trim"),
                    flag(*collapse_whitespace, "collapse whitespace"),
                    flag(*ignore_case, "ignore case"),
                    flag(*nfkc, "NFKC"),
                    flag(*ignore_punctuation, "ignore punctuation"),
                ]
                .into_iter()
                .flatten()
                .collect();
                if opts.is_empty() {
                    "exact (byte for byte)".to_string()
                } else {
                    with(opts)
                }
            }
            GraderSpec::Contains(m)
            | GraderSpec::NotContains(m)
            | GraderSpec::ContainsAny(m)
            | GraderSpec::ContainsAll(m) => {
                let mut opts = Vec::new();
                match (&m.value, &m.values) {
                    (Some(v), _) => opts.push(format!("{v:?}")),
                    (None, Some(vs)) => opts.push(vs.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(" ")),
                    (None, None) => opts.push("the expected value".to_string()),
                }
                opts.extend(flag(m.ignore_case, "ignore case"));
                with(opts)
            }
            GraderSpec::Regex { pattern, negate } => {
                let mut opts = vec![format!("/{}/", pattern.as_str())];
                opts.extend(flag(*negate, "must not match"));
                with(opts)
            }
            GraderSpec::JsonValid { strict } | GraderSpec::JsonSchema { strict, .. } => {
                with(flag(*strict, "strict").into_iter().collect())
            }
            GraderSpec::JsonFields(o) => {
                let mut opts = vec![format!("F1 ≥ {:.2}", o.min_f1)];
                if !o.required.is_empty() {
                    opts.push(format!("required: {}", o.required.join(", ")));
                }
                opts.extend(flag(o.day_first, "day first"));
                opts.extend(flag(o.ignore_extra, "extra fields ignored"));
                with(opts)
            }
            GraderSpec::Label { labels, ignore_case } => {
                let mut opts = Vec::new();
                if !labels.is_empty() {
                    opts.push(labels.join(" | "));
                }
                opts.extend(flag(*ignore_case, "ignore case"));
                with(opts)
            }
            GraderSpec::Numeric {
                value,
                abs_tol,
                rel_tol,
                pick,
            } => {
                let mut opts = Vec::new();
                if let Some(v) = value {
                    opts.push(format!("= {v}"));
                }
                if *abs_tol > 0.0 {
                    opts.push(format!("± {abs_tol}"));
                }
                if *rel_tol > 0.0 {
                    opts.push(format!("± {}%", rel_tol * 100.0));
                }
                opts.extend(flag(*pick == NumberPick::First, "first number"));
                with(opts)
            }
            GraderSpec::Length { min, max, unit } => {
                let unit = match unit {
                    LengthUnit::Chars => "chars",
                    LengthUnit::Tokens => "tokens",
                    LengthUnit::Words => "words",
                };
                let range = match (min, max) {
                    (Some(lo), Some(hi)) => format!("{lo}–{hi} {unit}"),
                    (Some(lo), None) => format!("≥ {lo} {unit}"),
                    (None, Some(hi)) => format!("≤ {hi} {unit}"),
                    (None, None) => format!("any number of {unit}"),
                };
                with(vec![range])
            }
            GraderSpec::RougeL { min } | GraderSpec::Chrf { min } => format!("{} ≥ {min:.2}", self.name()),
            GraderSpec::LlmJudge { judge, scale, min, .. } => {
                let scale = match scale {
                    JudgeScale::OneToFive => format!("1-5, pass ≥ {}", min.unwrap_or(DEFAULT_JUDGE_MIN)),
                    JudgeScale::PassFail => "pass-fail".to_string(),
                };
                with(vec![format!("judge {judge}"), scale])
            }
        }
    }
}

/// Lowest passing judge score on the `1-5` scale when the spec names none.
pub const DEFAULT_JUDGE_MIN: u8 = 4;

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}
