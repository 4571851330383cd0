//! What an eval-set case says about tools: `tools`, `tool_choice`, `expected_calls`.
//!
//! Tools are read in the OpenAI shape (`{"type":"function","function":{name, description,
//! parameters}}`), the Anthropic shape (`{name, description, input_schema}`) or the bare
//! `{name, description, parameters}`, and kept (and hashed) in the OpenAI shape.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::grading::{Pattern, Schema};

/// A problem in a case's tool fields: the field path below the case (`tools[1].parameters`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ToolCaseError {
    pub field: String,
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> ToolCaseError {
    ToolCaseError {
        field: field.into(),
        message: message.into(),
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object (compiled once, when the file is read).
    pub parameters: Schema,
}

/// Longest tool name: OpenAI's limit (and the pattern below is theirs too).
const MAX_TOOL_NAME_CHARS: usize = 64;

impl ToolDef {
    /// Reads one entry of `tools` (`field` names it in problems).
    pub fn read(value: &Value, field: &str) -> Result<ToolDef, ToolCaseError> {
        let Some(object) = value.as_object() else {
            return Err(problem(field, "must be an object (a tool)"));
        };
        // OpenAI: the function inside; Anthropic and bare: the object itself.
        let (inner, inner_field) = match object.get("function") {
            Some(Value::Object(f)) => {
                if let Some(t) = object.get("type")
                    && t != "function"
                {
                    return Err(problem(format!("{field}.type"), "must be \"function\""));
                }
                (f, format!("{field}.function"))
            }
            Some(_) => return Err(problem(format!("{field}.function"), "must be an object")),
            None => (object, field.to_string()),
        };
        let name = match inner.get("name") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(problem(format!("{inner_field}.name"), "is required (a string)")),
        };
        let name_ok = !name.is_empty()
            && name.chars().count() <= MAX_TOOL_NAME_CHARS
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !name_ok {
            return Err(problem(
                format!("{inner_field}.name"),
                format!("{name:?} is not a tool name (1 to {MAX_TOOL_NAME_CHARS} of a-z A-Z 0-9 _ - .)"),
            ));
        }
        let description = match inner.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(problem(format!("{inner_field}.description"), "must be a string")),
        };
        let (schema_key, schema) = match (inner.get("parameters"), inner.get("input_schema")) {
            (Some(p), None) => ("parameters", p.clone()),
            (None, Some(s)) => ("input_schema", s.clone()),
            (None, None) => ("parameters", json!({"type": "object", "properties": {}})),
            (Some(_), Some(_)) => {
                return Err(problem(
                    format!("{inner_field}.input_schema"),
                    "give `parameters` or `input_schema`, not both",
                ));
            }
        };
        let schema_field = format!("{inner_field}.{schema_key}");
        if schema.get("type").is_some_and(|t| t != "object") || !schema.is_object() {
            return Err(problem(
                schema_field,
                "must be a JSON Schema of an object (\"type\": \"object\")",
            ));
        }
        let parameters = Schema::new(schema).map_err(|e| problem(&schema_field, e))?;
        let known = [
            "name",
            "description",
            "parameters",
            "input_schema",
            "strict",
            "type",
            "cache_control",
        ];
        if let Some(unknown) = inner.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(problem(format!("{inner_field}.{unknown}"), "is not a tool field"));
        }
        Ok(ToolDef {
            name,
            description,
            parameters,
        })
    }

    /// The OpenAI shape (how it is stored, hashed and sent to OpenAI-compatible servers).
    pub fn openai(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), json!(self.name));
        if let Some(d) = &self.description {
            function.insert("description".into(), json!(d));
        }
        function.insert("parameters".into(), self.parameters.source().clone());
        json!({"type": "function", "function": function})
    }

    /// One readable line: `get_weather(city: string, days?: integer) — Weather by city`.
    pub fn signature(&self) -> String {
        let schema = self.parameters.source();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let params: Vec<String> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(name, p)| {
                        let kind = match p.get("enum").and_then(Value::as_array) {
                            Some(values) => values.iter().map(Value::to_string).collect::<Vec<_>>().join("|"),
                            None => match p.get("type") {
                                Some(Value::String(t)) => t.clone(),
                                Some(other) => other.to_string(),
                                None => "any".into(),
                            },
                        };
                        let optional = if required.contains(&name.as_str()) { "" } else { "?" };
                        format!("{name}{optional}: {kind}")
                    })
                    .collect()
            })
            .unwrap_or_default();
        match &self.description {
            Some(d) => format!("{}({}) — {d}", self.name, params.join(", ")),
            None => format!("{}({})", self.name, params.join(", ")),
        }
    }

    /// The Anthropic shape.
    pub fn anthropic(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(self.name));
        if let Some(d) = &self.description {
            tool.insert("description".into(), json!(d));
        }
        tool.insert("input_schema".into(), self.parameters.source().clone());
        Value::Object(tool)
    }
}

impl Serialize for ToolDef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.openai().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolDef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolDef::read(&Value::deserialize(d)?, "tool").map_err(serde::de::Error::custom)
    }
}

/// Which tool the model may or must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default).
    Auto,
    /// No tool may be called.
    None,
    /// Some tool must be called (Anthropic: `any`).
    Required,
    /// This tool must be called.
    Tool(String),
}

impl ToolChoice {
    /// Reads `tool_choice` in the OpenAI or Anthropic shape.
    pub fn read(value: &Value, field: &str) -> Result<ToolChoice, ToolCaseError> {
        let by_word = |w: &str| match w {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::None),
            "required" | "any" => Some(ToolChoice::Required),
            _ => None,
        };
        let bad = || {
            problem(
                field,
                "must be \"auto\", \"none\", \"required\", {\"type\":\"function\",\"function\":{\"name\":…}} \
                 or Anthropic's {\"type\":\"auto\"|\"any\"|\"none\"|\"tool\", \"name\":…}",
            )
        };
        match value {
            Value::String(s) => by_word(s).ok_or_else(bad),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("function") => o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .map(|n| ToolChoice::Tool(n.to_string()))
                    .ok_or_else(bad),
                Some("tool") => o
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| ToolChoice::Tool(n.to_string()))
                    .ok_or_else(bad),
                Some(w) => by_word(w).ok_or_else(bad),
                None => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    /// The OpenAI shape.
    pub fn openai(&self) -> Value {
        match self {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        }
    }

    /// The Anthropic shape.
    pub fn anthropic(&self) -> Value {
        match self {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        }
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.openai().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolChoice::read(&Value::deserialize(d)?, "tool_choice").map_err(serde::de::Error::custom)
    }
}

/// How one argument's value is judged. Without one, an argument is compared as the
/// `json-fields` grader's `auto` type compares a field (numbers by value, dates by day, lists as
/// sets, text normalised).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ArgGrader {
    /// The JSON values equal as they are.
    Exact,
    /// Text after NFKC, whitespace collapsing and case folding.
    Text,
    /// A number within `abs_tol` or `rel_tol` (relative to the expected value) of it.
    Number {
        #[serde(default, skip_serializing_if = "is_zero")]
        abs_tol: f64,
        #[serde(default, skip_serializing_if = "is_zero")]
        rel_tol: f64,
    },
    /// The value (as text) matches the pattern; no expected value needed.
    Regex { pattern: Pattern },
    /// The value is one of `values` exactly (JSON equality).
    Enum { values: Vec<Value> },
    /// The same calendar day in any common notation.
    Date {
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        day_first: bool,
    },
    /// Any of `values`, each compared as `auto` compares.
    AnyOf { values: Vec<Value> },
    /// Present with any value.
    Present,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl ArgGrader {
    fn check(&self, field: &str) -> Result<(), ToolCaseError> {
        match self {
            ArgGrader::Number { abs_tol, rel_tol } => {
                if !(abs_tol.is_finite() && *abs_tol >= 0.0) {
                    return Err(problem(format!("{field}.abs_tol"), "must be a number ≥ 0"));
                }
                if !(rel_tol.is_finite() && *rel_tol >= 0.0) {
                    return Err(problem(format!("{field}.rel_tol"), "must be a number ≥ 0"));
                }
                Ok(())
            }
            ArgGrader::Enum { values } | ArgGrader::AnyOf { values } if values.is_empty() => {
                Err(problem(format!("{field}.values"), "must list at least one value"))
            }
            _ => Ok(()),
        }
    }

    /// Whether this grader needs the argument's expected value.
    fn needs_expected(&self) -> bool {
        !matches!(
            self,
            ArgGrader::Regex { .. } | ArgGrader::Enum { .. } | ArgGrader::AnyOf { .. } | ArgGrader::Present
        )
    }
}

/// One call the model is expected to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    pub name: String,
    /// Expected values by argument; an argument the call gives that is not here (nor in
    /// `graders`) counts as extra.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub arguments: Map<String, Value>,
    /// Per-argument graders; an argument with a grader and no expected value is still expected.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub graders: BTreeMap<String, ArgGrader>,
    /// Arguments the call may leave out (graded when given).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional: Vec<String>,
}

impl ExpectedCall {
    /// One readable line: `get_weather(city = "Paris", days ≈ 3 ±1)`.
    pub fn describe(&self) -> String {
        let args: Vec<String> = self
            .argument_names()
            .into_iter()
            .map(|name| {
                let want = self.arguments.get(name).map(Value::to_string).unwrap_or_default();
                let optional = if self.optional.iter().any(|o| o == name) {
                    "?"
                } else {
                    ""
                };
                let rule = match self.graders.get(name) {
                    None => format!("= {want}"),
                    Some(ArgGrader::Exact) => format!("== {want}"),
                    Some(ArgGrader::Text) => format!("= {want} (as text)"),
                    Some(ArgGrader::Number { abs_tol, rel_tol }) => {
                        format!("≈ {want} (±{abs_tol}, ±{}%)", rel_tol * 100.0)
                    }
                    Some(ArgGrader::Regex { pattern }) => format!("~ /{}/", pattern.as_str()),
                    Some(ArgGrader::Enum { values }) | Some(ArgGrader::AnyOf { values }) => format!(
                        "∈ {{{}}}",
                        values.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")
                    ),
                    Some(ArgGrader::Date { .. }) => format!("= {want} (same day)"),
                    Some(ArgGrader::Present) => "given".into(),
                };
                format!("{name}{optional} {rule}")
            })
            .collect();
        format!("{}({})", self.name, args.join(", "))
    }

    /// Every argument this call expects or grades, in name order.
    pub fn argument_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .arguments
            .keys()
            .chain(self.graders.keys())
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// The expected outcome of a tool case.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolExpectation {
    /// These calls (order-free unless `ordered`).
    Calls { calls: Vec<ExpectedCall>, ordered: bool },
    /// Must not call any tool.
    NoCall,
    /// Must answer in text (no call, and non-empty text the case's own graders then judge).
    Text,
}

impl ToolExpectation {
    /// Reads `expected_calls`: a list of calls, `{"calls": [...], "ordered": true}`,
    /// `"no-call"` or `"text"`.
    pub fn read(value: &Value, field: &str) -> Result<ToolExpectation, ToolCaseError> {
        let read_calls = |items: &Value, at: &str| -> Result<Vec<ExpectedCall>, ToolCaseError> {
            let Some(items) = items.as_array() else {
                return Err(problem(at, "must be a list of calls"));
            };
            if items.is_empty() {
                return Err(problem(
                    at,
                    "is empty; to expect no call write \"no-call\" (or \"text\" for an answer in text)",
                ));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let here = format!("{at}[{i}]");
                    let call: ExpectedCall =
                        serde_json::from_value(item.clone()).map_err(|e| problem(&here, e.to_string()))?;
                    for (arg, g) in &call.graders {
                        g.check(&format!("{here}.graders.{arg}"))?;
                        if g.needs_expected() && !call.arguments.contains_key(arg) {
                            return Err(problem(
                                format!("{here}.graders.{arg}"),
                                "needs the argument's expected value in `arguments`",
                            ));
                        }
                    }
                    Ok(call)
                })
                .collect()
        };
        match value {
            Value::String(s) if s == "no-call" => Ok(ToolExpectation::NoCall),
            Value::String(s) if s == "text" => Ok(ToolExpectation::Text),
            Value::String(s) => Err(problem(
                field,
                format!(
                    "is {s:?}; use a list of calls, {{\"calls\": […], \"ordered\": true}}, \"no-call\" or \"text\""
                ),
            )),
            Value::Array(_) => Ok(ToolExpectation::Calls {
                calls: read_calls(value, field)?,
                ordered: false,
            }),
            Value::Object(o) => {
                if let Some(unknown) = o.keys().find(|k| *k != "calls" && *k != "ordered") {
                    return Err(problem(
                        format!("{field}.{unknown}"),
                        "is not a field here (calls, ordered)",
                    ));
                }
                let ordered = match o.get("ordered") {
                    None => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(problem(format!("{field}.ordered"), "must be true or false")),
                };
                let calls = o
                    .get("calls")
                    .ok_or_else(|| problem(format!("{field}.calls"), "is required"))?;
                Ok(ToolExpectation::Calls {
                    calls: read_calls(calls, &format!("{field}.calls"))?,
                    ordered,
                })
            }
            _ => Err(problem(
                field,
                "must be a list of calls, an object, \"no-call\" or \"text\"",
            )),
        }
    }

    /// The expected calls (none for "no-call" and "text").
    pub fn calls(&self) -> &[ExpectedCall] {
        match self {
            ToolExpectation::Calls { calls, .. } => calls,
            _ => &[],
        }
    }

    /// How the expectation reads on a page: "get_weather, get_time (in this order)".
    pub fn describe(&self) -> String {
        match self {
            ToolExpectation::NoCall => "no tool call".into(),
            ToolExpectation::Text => "an answer in text, no tool call".into(),
            ToolExpectation::Calls { calls, ordered } => {
                let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
                format!(
                    "{}{}",
                    names.join(", "),
                    if *ordered && calls.len() > 1 {
                        " (in this order)"
                    } else {
                        ""
                    }
                )
            }
        }
    }
}

impl Serialize for ToolExpectation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolExpectation::NoCall => "no-call".serialize(s),
            ToolExpectation::Text => "text".serialize(s),
            ToolExpectation::Calls { calls, ordered: false } => calls.serialize(s),
            ToolExpectation::Calls { calls, ordered: true } => json!({"calls": calls, "ordered": true}).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ToolExpectation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolExpectation::read(&Value::deserialize(d)?, "expected_calls").map_err(serde::de::Error::custom)
    }
}

/// The rules between a case's tool fields: unique tool names, expected calls and a named
/// tool choice naming a listed tool, expected arguments the tool's schema knows.
pub fn check_case(
    tools: &[ToolDef],
    choice: Option<&ToolChoice>,
    expectation: Option<&ToolExpectation>,
) -> Vec<ToolCaseError> {
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|u| u.name == t.name) {
            out.push(problem(
                format!("tools[{i}].name"),
                format!("{:?} is listed twice", t.name),
            ));
        }
    }
    let known = |name: &str| tools.iter().find(|t| t.name == name);
    if let Some(ToolChoice::Tool(name)) = choice
        && known(name).is_none()
    {
        out.push(problem(
            "tool_choice",
            format!("names {name:?}, which is not in `tools`"),
        ));
    }
    if let Some(expectation) = expectation {
        if tools.is_empty() {
            out.push(problem("tools", "is required when `expected_calls` is given"));
        }
        for (i, call) in expectation.calls().iter().enumerate() {
            let here = match expectation {
                ToolExpectation::Calls { ordered: true, .. } => format!("expected_calls.calls[{i}]"),
                _ => format!("expected_calls[{i}]"),
            };
            let Some(tool) = known(&call.name) else {
                if !tools.is_empty() {
                    out.push(problem(
                        format!("{here}.name"),
                        format!("{:?} is not in `tools`", call.name),
                    ));
                }
                continue;
            };
            // Expected values must themselves pass the schema's per-property rules.
            let properties = tool.parameters.source().get("properties").and_then(Value::as_object);
            for (arg, want) in &call.arguments {
                match properties.and_then(|p| p.get(arg)) {
                    Some(property) => {
                        if let Ok(v) = jsonschema::draft202012::new(property)
                            && let Some(e) = v.iter_errors(want).next()
                        {
                            out.push(problem(
                                format!("{here}.arguments.{arg}"),
                                format!("does not fit the tool's schema: {e}"),
                            ));
                        }
                    }
                    None if properties.is_some() => out.push(problem(
                        format!("{here}.arguments.{arg}"),
                        format!("is not a parameter of {:?}", call.name),
                    )),
                    None => {}
                }
            }
        }
    }
    if expectation.is_none() && !tools.is_empty() {
        out.push(problem(
            "expected_calls",
            "is required when `tools` is given (a list of calls, \"no-call\" or \"text\")",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type":"function","function":{"name":"get_weather","description":"Weather",
            "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}})
    }

    #[test]
    fn tools_are_read_in_every_shape_and_kept_in_the_openai_shape() {
        let openai = ToolDef::read(&weather(), "tools[0]").unwrap();
        let anthropic = ToolDef::read(
            &json!({"name":"get_weather","description":"Weather","input_schema":
                {"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}),
            "tools[0]",
        )
        .unwrap();
        assert_eq!(openai, anthropic);
        assert_eq!(serde_json::to_value(&anthropic).unwrap(), weather());
        assert_eq!(anthropic.anthropic()["input_schema"]["required"], json!(["city"]));
    }

    #[test]
    fn bad_tools_name_the_field() {
        let e = ToolDef::read(&json!({"type":"function","function":{"parameters":{}}}), "tools[2]").unwrap_err();
        assert_eq!(e.field, "tools[2].function.name");
        let e = ToolDef::read(
            &json!({"name":"x","parameters":{"type":"object","properties":{"a":{"type":"nope"}}}}),
            "tools[0]",
        )
        .unwrap_err();
        assert_eq!(e.field, "tools[0].parameters");
        let e = ToolDef::read(&json!({"name":"has space"}), "tools[0]").unwrap_err();
        assert_eq!(e.field, "tools[0].name");
        let e = ToolDef::read(&json!({"name":"x","parameters":{"type":"array"}}), "tools[0]").unwrap_err();
        assert_eq!(e.field, "tools[0].parameters");
    }

    #[test]
    fn tool_choice_reads_both_shapes() {
        let read = |v: Value| ToolChoice::read(&v, "tool_choice");
        assert_eq!(read(json!("auto")).unwrap(), ToolChoice::Auto);
        assert_eq!(read(json!({"type":"any"})).unwrap(), ToolChoice::Required);
        assert_eq!(
            read(json!({"type":"tool","name":"a"})).unwrap(),
            read(json!({"type":"function","function":{"name":"a"}})).unwrap()
        );
        assert!(read(json!("sometimes")).is_err());
        assert_eq!(ToolChoice::None.anthropic(), json!({"type": "none"}));
    }

    #[test]
    fn expectations_read_and_round_trip() {
        for v in [
            json!("no-call"),
            json!("text"),
            json!([{"name":"get_weather","arguments":{"city":"Paris"}}]),
            json!({"calls":[{"name":"a"},{"name":"b","arguments":{"n":1},"graders":{"n":{"kind":"number","abs_tol":0.5}}}],"ordered":true}),
        ] {
            let e = ToolExpectation::read(&v, "expected_calls").unwrap();
            assert_eq!(serde_json::to_value(&e).unwrap(), v);
        }
        let bad = |v: Value| ToolExpectation::read(&v, "expected_calls").unwrap_err().field;
        assert_eq!(bad(json!([])), "expected_calls");
        assert_eq!(bad(json!("maybe")), "expected_calls");
        assert_eq!(bad(json!([{"name":"a","args":{}}])), "expected_calls[0]");
        assert_eq!(
            bad(json!([{"name":"a","graders":{"n":{"kind":"number"}}}])),
            "expected_calls[0].graders.n"
        );
        assert_eq!(
            bad(json!([{"name":"a","arguments":{"n":1},"graders":{"n":{"kind":"number","abs_tol":-1}}}])),
            "expected_calls[0].graders.n.abs_tol"
        );
        assert_eq!(
            bad(json!({"calls":[{"name":"a"}],"sorted":true})),
            "expected_calls.sorted"
        );
    }

    #[test]
    fn the_case_rules_tie_expected_calls_to_the_tools() {
        let tools = vec![ToolDef::read(&weather(), "tools[0]").unwrap()];
        let expect = |v: Value| ToolExpectation::read(&v, "expected_calls").unwrap();
        assert!(
            check_case(
                &tools,
                None,
                Some(&expect(json!([{"name":"get_weather","arguments":{"city":"Oslo"}}])))
            )
            .is_empty()
        );
        let fields = |errs: Vec<ToolCaseError>| errs.into_iter().map(|e| e.field).collect::<Vec<_>>();
        assert_eq!(
            fields(check_case(&tools, None, Some(&expect(json!([{"name":"get_time"}]))))),
            ["expected_calls[0].name"]
        );
        assert_eq!(
            fields(check_case(
                &tools,
                None,
                Some(&expect(
                    json!([{"name":"get_weather","arguments":{"city":"Oslo","days":"two","wind":1}}])
                ))
            )),
            ["expected_calls[0].arguments.days", "expected_calls[0].arguments.wind"]
        );
        assert_eq!(
            fields(check_case(
                &tools,
                Some(&ToolChoice::Tool("x".into())),
                Some(&ToolExpectation::NoCall)
            )),
            ["tool_choice"]
        );
        assert_eq!(fields(check_case(&tools, None, None)), ["expected_calls"]);
        assert_eq!(fields(check_case(&[], None, Some(&ToolExpectation::NoCall))), ["tools"]);
        let twice = vec![tools[0].clone(), tools[0].clone()];
        assert_eq!(
            fields(check_case(&twice, None, Some(&ToolExpectation::NoCall))),
            ["tools[1].name"]
        );
    }
}
