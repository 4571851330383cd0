//! promptfoo tests in YAML: a list of `{description?, vars, assert}`, or a config whose
//! `tests:` holds that list (its `prompts:` gives the template, its `defaultTest` the default
//! assertions). Assertion types bakeoff grades the same way are mapped to graders; any other
//! type is an error naming the test and the type.
use serde_json::{Map, Value, json};

use super::{Draft, Format, ImportOptions, Origin, error, header};
use crate::evalset::EvalSetError;

/// promptfoo assertion types bakeoff maps, for error messages.
const SUPPORTED: &str = "equals, contains, icontains, contains-any, icontains-any, contains-all, \
     icontains-all, not-contains, not-icontains, not-contains-any, not-icontains-any, starts-with, \
     regex, not-regex, is-json, contains-json";

pub(super) fn read(source_name: &str, text: &str, options: &ImportOptions) -> Result<Draft, EvalSetError> {
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        error(source_name, line, None, format!("not valid YAML: {e}"))
    })?;
    let err = |field: Option<&str>, message: String| error(source_name, None, field, message);
    let (config, tests) = match doc {
        Value::Array(tests) => (Map::new(), tests),
        Value::Object(mut config) => match config.remove("tests") {
            Some(Value::Array(tests)) => (config, tests),
            Some(Value::String(s)) => {
                return Err(err(
                    Some("tests"),
                    format!("refers to {s:?}; paste or upload the tests themselves"),
                ));
            }
            _ => return Err(err(Some("tests"), "must be a list of tests".into())),
        },
        _ => return Err(err(None, "expected a list of tests, or a config with `tests:`".into())),
    };
    if tests.is_empty() {
        return Err(err(Some("tests"), "has no tests".into()));
    }

    let description = config.get("description").and_then(Value::as_str);
    let mut h = header(source_name, options, None, Format::Promptfoo)?;
    if let Some(d) = description {
        h.insert("description".into(), json!(d));
    }
    let (default_vars, default_graders) = match config.get("defaultTest") {
        None => (Map::new(), Vec::new()),
        Some(Value::Object(d)) => {
            let vars = match d.get("vars") {
                None => Map::new(),
                Some(Value::Object(v)) => v.clone(),
                Some(_) => return Err(err(Some("defaultTest.vars"), "must be a mapping".into())),
            };
            let mut graders = Vec::new();
            mapped_asserts(d.get("assert"), &mut None, &mut graders)
                .map_err(|(field, m)| err(Some(&format!("defaultTest.{field}")), m))?;
            (vars, graders)
        }
        Some(_) => return Err(err(Some("defaultTest"), "must be a mapping".into())),
    };
    if !default_graders.is_empty() {
        h.insert("graders".into(), Value::Array(default_graders.clone()));
    }

    let mut cases = Vec::with_capacity(tests.len());
    let mut var_names = std::collections::BTreeSet::new();
    let mut seen_ids = std::collections::HashSet::new();
    for (i, test) in tests.iter().enumerate() {
        let n = i + 1;
        let test_err = |field: &str, message: String| err(Some(field), format!("test {n}: {message}"));
        let Some(test) = test.as_object() else {
            return Err(test_err("tests", "must be a mapping with `vars` and `assert`".into()));
        };
        if let Some(extra) = test
            .keys()
            .find(|k| !["description", "vars", "assert", "metadata"].contains(&k.as_str()))
        {
            return Err(test_err(
                extra,
                "is not supported (a test has `description`, `vars`, `assert`, `metadata`)".into(),
            ));
        }
        let mut vars = default_vars.clone();
        match test.get("vars") {
            None => {}
            Some(Value::Object(v)) => vars.extend(v.clone()),
            Some(_) => return Err(test_err("vars", "must be a mapping of names to values".into())),
        }
        var_names.extend(vars.keys().cloned());
        let mut expected = None;
        let mut graders = default_graders.clone();
        mapped_asserts(test.get("assert"), &mut expected, &mut graders).map_err(|(field, m)| test_err(&field, m))?;

        // A unique description is a readable id; otherwise number the tests.
        let id = match test.get("description").and_then(Value::as_str).map(str::trim) {
            Some(d) if !d.is_empty() && d.chars().count() <= 100 && !seen_ids.contains(d) => d.to_string(),
            _ => format!("test-{n}"),
        };
        seen_ids.insert(id.clone());
        let mut case = Map::new();
        case.insert("id".into(), json!(id));
        case.insert("vars".into(), Value::Object(vars));
        if let Some(e) = expected {
            case.insert("expected".into(), e);
        }
        // Equal to the header's defaults: leave the case to inherit them.
        if graders != default_graders {
            case.insert("graders".into(), Value::Array(graders));
        }
        // YAML tests have no line of their own here: parser errors name the test instead.
        cases.push((Origin::Test(n), Value::Object(case)));
    }

    if !h.contains_key("prompt") {
        let prompt = prompt_of(&config, &var_names).map_err(|m| err(Some("prompts"), m))?;
        h.insert("prompt".into(), json!(prompt));
    }
    Ok(Draft {
        header: h,
        cases,
        problems: Vec::new(),
    })
}

/// The prompt template: the config's one prompt, else `{{var}}` when the tests use one variable.
fn prompt_of(config: &Map<String, Value>, var_names: &std::collections::BTreeSet<String>) -> Result<String, String> {
    match config.get("prompts") {
        Some(Value::String(p)) => return literal_prompt(p),
        Some(Value::Array(list)) if list.len() == 1 => {
            return match &list[0] {
                Value::String(p) => literal_prompt(p),
                Value::Object(o) => match o.get("raw").and_then(Value::as_str) {
                    Some(p) => literal_prompt(p),
                    None => Err("the prompt needs a `raw` template".into()),
                },
                _ => Err("must be a template string".into()),
            };
        }
        Some(Value::Array(list)) if list.len() > 1 => {
            return Err(format!(
                "has {} prompts; a bakeoff eval set has one template: give it explicitly",
                list.len()
            ));
        }
        _ => {}
    }
    match var_names.iter().collect::<Vec<_>>().as_slice() {
        [one] => Ok(format!("{{{{{one}}}}}")),
        names => Err(format!(
            "the tests use {} variables ({}) and the file has no prompt; give a prompt template such as `{{{{{}}}}}`",
            names.len(),
            names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "),
            names.first().map(|n| n.as_str()).unwrap_or("question")
        )),
    }
}

fn literal_prompt(p: &str) -> Result<String, String> {
    if p.trim_start().starts_with("file://") {
        Err(format!("refers to {p:?}; give the prompt template itself"))
    } else {
        Ok(p.to_string())
    }
}

/// Maps a test's `assert` list: `equals` sets the expected value (and an `exact` or
/// `json-fields` grader); every other supported type adds a grader. Errors are (field, message).
fn mapped_asserts(
    asserts: Option<&Value>,
    expected: &mut Option<Value>,
    graders: &mut Vec<Value>,
) -> Result<(), (String, String)> {
    let list = match asserts {
        None => return Ok(()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(("assert".into(), "must be a list of assertions".into())),
    };
    for (j, a) in list.iter().enumerate() {
        let at = |field: &str| format!("assert.{field}");
        let which = format!("assertion {}", j + 1);
        let Some(a) = a.as_object() else {
            return Err(("assert".into(), format!("{which} must be a mapping with `type`")));
        };
        if let Some(extra) = a.keys().find(|k| !["type", "value", "metric"].contains(&k.as_str())) {
            return Err((
                at(extra),
                format!("{which}: option `{extra}` is not supported (only `type` and `value`)"),
            ));
        }
        let kind = a
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| (at("type"), format!("{which} has no `type`")))?;
        let value = a.get("value");
        let need_text = || -> Result<String, (String, String)> {
            match value {
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                Some(Value::Number(n)) => Ok(n.to_string()),
                _ => Err((at("value"), format!("{which} (`{kind}`) needs a text `value`"))),
            }
        };
        let need_list = || -> Result<Vec<String>, (String, String)> {
            match value {
                Some(Value::Array(items)) if !items.is_empty() => items
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s.clone()),
                        Value::Number(n) => Ok(n.to_string()),
                        _ => Err((at("value"), format!("{which} (`{kind}`): every value must be text"))),
                    })
                    .collect(),
                _ => Err((at("value"), format!("{which} (`{kind}`) needs a list of values"))),
            }
        };
        let grader = match kind {
            "equals" => {
                if expected.is_some() {
                    return Err((at("type"), format!("{which}: a test can have only one `equals`")));
                }
                match value {
                    Some(Value::String(s)) => {
                        *expected = Some(json!(s));
                        json!({"kind": "exact"})
                    }
                    Some(Value::Number(n)) => {
                        *expected = Some(json!(n.to_string()));
                        json!({"kind": "exact"})
                    }
                    Some(obj @ Value::Object(_)) => {
                        *expected = Some(obj.clone());
                        json!({"kind": "json-fields"})
                    }
                    _ => {
                        return Err((
                            at("value"),
                            format!("{which} (`equals`) needs a text or object `value`"),
                        ));
                    }
                }
            }
            "contains" => json!({"kind": "contains", "value": need_text()?}),
            "icontains" => json!({"kind": "contains", "value": need_text()?, "ignore_case": true}),
            "contains-any" => json!({"kind": "contains-any", "values": need_list()?}),
            "icontains-any" => json!({"kind": "contains-any", "values": need_list()?, "ignore_case": true}),
            "contains-all" => json!({"kind": "contains-all", "values": need_list()?}),
            "icontains-all" => json!({"kind": "contains-all", "values": need_list()?, "ignore_case": true}),
            "not-contains" => json!({"kind": "not-contains", "value": need_text()?}),
            "not-icontains" => json!({"kind": "not-contains", "value": need_text()?, "ignore_case": true}),
            "not-contains-any" => json!({"kind": "not-contains", "values": need_list()?}),
            "not-icontains-any" => json!({"kind": "not-contains", "values": need_list()?, "ignore_case": true}),
            "starts-with" => json!({"kind": "regex", "pattern": format!("^{}", regex::escape(&need_text()?))}),
            "regex" => json!({"kind": "regex", "pattern": need_text()?}),
            "not-regex" => json!({"kind": "regex", "pattern": need_text()?, "negate": true}),
            // promptfoo's is-json wants the whole output to be JSON; contains-json finds it inside.
            "is-json" | "contains-json" => {
                let strict = kind == "is-json";
                match value {
                    None | Some(Value::Null) => json!({"kind": "json-valid", "strict": strict}),
                    Some(schema @ Value::Object(_)) => {
                        json!({"kind": "json-schema", "schema": schema, "strict": strict})
                    }
                    Some(_) => {
                        return Err((
                            at("value"),
                            format!("{which} (`{kind}`): the value must be an inline JSON Schema"),
                        ));
                    }
                }
            }
            other => {
                return Err((
                    at("type"),
                    format!(
                        "{which}: promptfoo assertion type `{other}` has no bakeoff grader (supported: {SUPPORTED})"
                    ),
                ));
            }
        };
        graders.push(grader);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::evalset::TaskKind;
    use crate::evalset::import::{Format, FormatChoice, ImportOptions, import};

    fn options() -> ImportOptions {
        ImportOptions {
            name: None,
            task: Some(TaskKind::Classification),
            prompt: None,
            grader: Default::default(),
        }
    }

    const CONFIG: &str = r#"
description: Ticket routing
prompts:
  - "Route this ticket: {{ticket}}"
defaultTest:
  assert:
    - type: not-icontains
      value: "as an AI"
tests:
  - description: double charge
    vars:
      ticket: I was charged twice.
    assert:
      - type: equals
        value: billing
  - vars:
      ticket: 应用一打开就崩溃
    assert:
      - type: icontains-any
        value: [technical, bug]
      - type: regex
        value: "^[a-z]+$"
  - vars:
      ticket: "Where is my parcel?"
    assert:
      - type: is-json
        value: {type: object, required: [queue]}
      - type: starts-with
        value: "{"
"#;

    #[test]
    fn reads_a_config_with_prompts_defaults_and_assertions() {
        let (format, file) = import(FormatChoice::Auto, "tickets.yaml", CONFIG, &options()).unwrap();
        assert_eq!(format, Format::Promptfoo);
        assert_eq!(file.header.name, "tickets");
        assert_eq!(file.header.description.as_deref(), Some("Ticket routing"));
        assert_eq!(file.header.prompt.as_deref(), Some("Route this ticket: {{ticket}}"));
        assert_eq!(file.header.graders.len(), 1);
        assert_eq!(file.cases.len(), 3);
        let first = &file.cases[0];
        assert_eq!(first.id, "double charge");
        assert_eq!(first.expected_text().as_deref(), Some("billing"));
        // defaultTest's assertion plus the test's own.
        let kinds: Vec<&str> = first.graders.iter().map(|g| g.name()).collect();
        assert_eq!(kinds, ["not-contains", "exact"]);
        assert_eq!(file.cases[1].id, "test-2");
        let kinds: Vec<&str> = file.cases[1].graders.iter().map(|g| g.name()).collect();
        assert_eq!(kinds, ["not-contains", "contains-any", "regex"]);
        let kinds: Vec<&str> = file.cases[2].graders.iter().map(|g| g.name()).collect();
        assert_eq!(kinds, ["not-contains", "json-schema", "regex"]);
        assert_eq!(
            file.messages_for(&file.cases[1])[0].content,
            "Route this ticket: 应用一打开就崩溃"
        );
    }

    #[test]
    fn a_bare_list_with_one_variable_gets_a_template() {
        let text = "- vars: {q: \"2+2?\"}\n  assert: [{type: equals, value: 4}]\n- vars: {q: \"3+3?\"}\n";
        let (_, file) = import(FormatChoice::Known(Format::Promptfoo), "maths.yml", text, &options()).unwrap();
        assert_eq!(file.header.prompt.as_deref(), Some("{{q}}"));
        assert_eq!(file.cases[0].expected_text().as_deref(), Some("4"));
        assert!(file.cases[1].graders.is_empty() && file.cases[1].expected.is_none());
    }

    #[test]
    fn unknown_assertions_and_bad_shapes_are_named() {
        let text = "- vars: {q: a}\n  assert: [{type: equals, value: x}]\n- vars: {q: b}\n  assert:\n    - type: equals\n      value: y\n    - type: javascript\n      value: output.length > 3\n";
        let e = import(FormatChoice::Known(Format::Promptfoo), "t.yaml", text, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!(e.field.as_deref(), Some("assert.type"));
        assert!(
            e.message
                .starts_with("test 2: assertion 2: promptfoo assertion type `javascript`"),
            "{e}"
        );

        let e = import(
            FormatChoice::Known(Format::Promptfoo),
            "t.yaml",
            "- vars: [1]\n",
            &options(),
        )
        .unwrap_err()
        .first()
        .clone();
        assert_eq!(e.field.as_deref(), Some("vars"), "{e}");

        let e = import(
            FormatChoice::Known(Format::Promptfoo),
            "t.yaml",
            "tests: [\n",
            &options(),
        )
        .unwrap_err()
        .first()
        .clone();
        assert!(e.message.starts_with("not valid YAML"), "{e}");
        assert!(e.line.is_some());

        let two_vars = "- vars: {a: 1, b: 2}\n";
        let e = import(FormatChoice::Known(Format::Promptfoo), "t.yaml", two_vars, &options())
            .unwrap_err()
            .first()
            .clone();
        assert_eq!(e.field.as_deref(), Some("prompts"), "{e}");
        let with_prompt = ImportOptions {
            prompt: Some("{{a}} + {{b}}".into()),
            ..options()
        };
        assert!(import(FormatChoice::Known(Format::Promptfoo), "t.yaml", two_vars, &with_prompt).is_ok());

        let bad_regex = "- vars: {q: a}\n  assert: [{type: regex, value: \"(\"}]\n";
        let e = import(FormatChoice::Known(Format::Promptfoo), "t.yaml", bad_regex, &options())
            .unwrap_err()
            .first()
            .clone();
        assert!(e.message.contains("regular expression"), "{e}");
    }
}
