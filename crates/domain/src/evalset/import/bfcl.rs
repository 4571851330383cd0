//! BFCL-style single-turn tool-calling tests (the Berkeley Function Calling Leaderboard's
//! `simple`, `multiple`, `parallel` and `irrelevance` categories): one JSON object per line,
//! `{"id", "question": [[messages]] | [messages], "function": [schemas], "ground_truth": […]}`,
//! the possible answers given on the same line (BFCL keeps them in a second file, joined by id).
//!
//! Each becomes a tool case (docs/tool-cases.md): the functions become tools (BFCL's `dict`,
//! `float`, `tuple` and `any` types become JSON Schema's `object`, `number`, `array` and no
//! type), each `ground_truth` entry `{"fn": {"arg": [possible values]}}` an expected call whose
//! argument graders follow the possible values — one value: compared as `auto`; several:
//! `any-of`; `""` among them: the argument may be left out. An empty or absent `ground_truth`
//! (BFCL's irrelevance tests) expects no call. Several calls are matched order-free.
use serde_json::{Map, Value, json};

use super::{Draft, Format, ImportOptions, error, header, jsonl_cases};
use crate::evalset::problems::{kind_of, without_position};
use crate::evalset::{EvalSetError, TaskKind};

pub(super) fn read(source_name: &str, text: &str, options: &ImportOptions) -> Result<Draft, EvalSetError> {
    // A tool set measures generation of calls unless the user says otherwise.
    let options = ImportOptions {
        task: Some(options.task.unwrap_or(TaskKind::Generation)),
        ..options.clone()
    };
    let h = header(source_name, &options, None, Format::Bfcl)?;
    let (cases, problems) = jsonl_cases(text, "bfcl", |line, raw, id| test_case(source_name, line, raw, id));
    Ok(Draft {
        header: h,
        cases,
        problems,
    })
}

fn test_case(source_name: &str, line: usize, raw: &str, fallback_id: String) -> Result<Value, EvalSetError> {
    let err = |field: Option<&str>, message: String| error(source_name, Some(line), field, message);
    let test: Map<String, Value> = match serde_json::from_str(raw) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(err(
                None,
                format!("each line must be a JSON object, got {}", kind_of(&other)),
            ));
        }
        Err(e) => {
            let mut syntax = err(None, format!("not valid JSON: {}", without_position(&e)));
            syntax.problems[0].column = Some(e.column());
            return Err(syntax);
        }
    };
    let id = match test.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => fallback_id,
    };
    // `question` is a list of turns, each a list of messages (single-turn: one turn).
    let messages = match test.get("question") {
        Some(Value::Array(turns)) if turns.first().is_some_and(Value::is_array) => turns[0].clone(),
        Some(Value::Array(messages)) if !messages.is_empty() => Value::Array(messages.clone()),
        Some(Value::String(s)) => json!([{"role": "user", "content": s}]),
        _ => {
            return Err(err(
                Some("question"),
                "must be a list of messages (or of turns of messages)".into(),
            ));
        }
    };
    let functions = match test.get("function") {
        Some(Value::Array(f)) if !f.is_empty() => f,
        Some(Value::Object(_)) => return Err(err(Some("function"), "must be a list of functions".into())),
        _ => return Err(err(Some("function"), "is required (a list of function schemas)".into())),
    };
    let tools: Vec<Value> = functions
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if let Some(p) = f.get_mut("parameters") {
                *p = json_schema_types(p.take());
            }
            f
        })
        .collect();
    let expected_calls = match test.get("ground_truth") {
        None | Some(Value::Null) => json!("no-call"),
        Some(Value::Array(calls)) if calls.is_empty() => json!("no-call"),
        Some(Value::Array(calls)) => {
            let mut out = Vec::with_capacity(calls.len());
            for (i, call) in calls.iter().enumerate() {
                let Some((name, args)) = call.as_object().filter(|o| o.len() == 1).and_then(|o| o.iter().next()) else {
                    return Err(err(
                        Some(&format!("ground_truth[{i}]")),
                        "must be {\"function name\": {\"argument\": [possible values]}}".into(),
                    ));
                };
                let Some(args) = args.as_object() else {
                    return Err(err(
                        Some(&format!("ground_truth[{i}].{name}")),
                        "must be an object of arguments".into(),
                    ));
                };
                out.push(expected_call(name, args));
            }
            Value::Array(out)
        }
        Some(_) => return Err(err(Some("ground_truth"), "must be a list of calls".into())),
    };
    Ok(json!({"id": id, "messages": messages, "tools": tools, "expected_calls": expected_calls}))
}

/// One ground-truth call: each argument's possible values become its expected value and grader.
fn expected_call(name: &str, args: &Map<String, Value>) -> Value {
    let (mut arguments, mut graders, mut optional) = (Map::new(), Map::new(), Vec::new());
    for (arg, possible) in args {
        let values: Vec<Value> = match possible {
            Value::Array(v) => v.clone(),
            other => vec![other.clone()],
        };
        // `""` among the possible values: the argument may be left out.
        let (absent, given): (Vec<Value>, Vec<Value>) = values.into_iter().partition(|v| v == &json!(""));
        if !absent.is_empty() {
            optional.push(json!(arg));
        }
        match given.as_slice() {
            [] => {}
            [one] => {
                arguments.insert(arg.clone(), one.clone());
            }
            many => {
                arguments.insert(arg.clone(), many[0].clone());
                graders.insert(arg.clone(), json!({"kind": "any-of", "values": many}));
            }
        }
    }
    let mut call = json!({"name": name, "arguments": arguments});
    if !graders.is_empty() {
        call["graders"] = Value::Object(graders);
    }
    if !optional.is_empty() {
        call["optional"] = Value::Array(optional);
    }
    call
}

/// BFCL's Python-flavoured types as JSON Schema's, everywhere in a schema.
fn json_schema_types(schema: Value) -> Value {
    match schema {
        Value::Object(mut map) => {
            if let Some(Value::String(t)) = map.get("type") {
                match t.as_str() {
                    "dict" => {
                        map.insert("type".into(), json!("object"));
                    }
                    "float" => {
                        map.insert("type".into(), json!("number"));
                    }
                    "tuple" => {
                        map.insert("type".into(), json!("array"));
                    }
                    "any" => {
                        map.remove("type");
                    }
                    _ => {}
                }
            }
            Value::Object(map.into_iter().map(|(k, v)| (k, json_schema_types(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(json_schema_types).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use crate::evalset::import::{Format, FormatChoice, ImportOptions, import};
    use crate::tool_calls::{ArgGrader, ToolExpectation};

    const BFCL: &str = r#"{"id": "simple_0", "question": [[{"role": "user", "content": "Find the area of a triangle with a base of 10 units and height of 5 units."}]], "function": [{"name": "calculate_triangle_area", "description": "Calculate the area of a triangle given its base and height.", "parameters": {"type": "dict", "properties": {"base": {"type": "integer", "description": "The base of the triangle."}, "height": {"type": "integer"}, "unit": {"type": "string"}}, "required": ["base", "height"]}}], "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]}
{"id": "parallel_3", "question": [[{"role": "user", "content": "Weather in Boston and San Francisco?"}]], "function": [{"name": "get_weather", "description": "Weather", "parameters": {"type": "dict", "properties": {"location": {"type": "string"}, "scale": {"type": "float"}}, "required": ["location"]}}], "ground_truth": [{"get_weather": {"location": ["Boston, MA", "Boston"]}}, {"get_weather": {"location": ["San Francisco, CA", "San Francisco"]}}]}
{"id": "irrelevance_0", "question": [[{"role": "user", "content": "Tell me a joke."}]], "function": [{"name": "get_weather", "description": "Weather", "parameters": {"type": "dict", "properties": {"location": {"type": "string"}}}}]}
"#;

    #[test]
    fn bfcl_tests_become_tool_cases_with_the_right_graders() {
        let (format, file) = import(FormatChoice::Auto, "bfcl.json", BFCL, &ImportOptions::default()).unwrap();
        assert_eq!(format, Format::Bfcl);
        assert_eq!(file.cases.len(), 3);
        let simple = &file.cases[0];
        assert_eq!(simple.id, "simple_0");
        assert_eq!(simple.tools[0].parameters.source()["type"], "object");
        let ToolExpectation::Calls { calls, ordered } = simple.expected_calls.as_ref().unwrap() else {
            panic!("calls expected")
        };
        assert!(!ordered);
        assert_eq!(calls[0].arguments["base"], 10);
        assert_eq!(calls[0].arguments["unit"], "units");
        assert_eq!(calls[0].optional, ["unit"]);
        let parallel = file.cases[1].expected_calls.as_ref().unwrap().calls();
        assert_eq!(parallel.len(), 2);
        assert!(matches!(parallel[0].graders["location"], ArgGrader::AnyOf { ref values } if values.len() == 2));
        assert_eq!(
            file.cases[1].tools[0].parameters.source()["properties"]["scale"]["type"],
            "number"
        );
        assert_eq!(file.cases[2].expected_calls, Some(ToolExpectation::NoCall));
    }

    #[test]
    fn a_bad_line_names_its_line_and_field() {
        let bad = BFCL.replace(
            r#""ground_truth": [{"calculate_triangle_area""#,
            r#""ground_truth": [{"a": {}, "calculate_triangle_area""#,
        );
        let e = import(
            FormatChoice::Known(Format::Bfcl),
            "b.json",
            &bad,
            &ImportOptions::default(),
        )
        .unwrap_err();
        let p = e.first();
        assert_eq!((p.line, p.field.as_deref()), (Some(1), Some("ground_truth[0]")), "{e}");
        let unknown = BFCL.replace(r#"{"calculate_triangle_area": {"base""#, r#"{"calc_area": {"base""#);
        let e = import(
            FormatChoice::Known(Format::Bfcl),
            "b.json",
            &unknown,
            &ImportOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.first().line, Some(1), "{e}");
        assert!(e.to_string().contains("not in `tools`"), "{e}");
    }
}
