//! One answer of a tool case graded call by call and argument by argument.
//!
//! Calls are matched to the expected ones by name, order-free (the assignment that gets the
//! most arguments right), unless the case says `ordered`. Arguments are compared with the
//! `json-fields` machinery (`grading::same_value`, outcomes, counts), or the argument's own
//! grader. Every way a case can fail is named ([`ToolFailure`]); "malformed" failures (the call
//! could not be read as sent: not JSON, double-encoded, in the text, cut off) are counted apart, since parsers that break only under load are a
//! failure mode of their own.
//!
//! Arguments sent as a JSON string inside a string (`"{\"city\":\"Paris\"}"` as the value of
//! `arguments`, once decoded) are **not repaired**: the call fails as "arguments
//! double-encoded" (malformed), and its inner object is still compared argument by argument so
//! the detail shows which values were right.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::case::{ArgGrader, ExpectedCall, ToolDef, ToolExpectation};
use super::text::calls_in_text;
use super::{ToolCall, ToolMode, ToolTurn};
use crate::grading::{Counts, FieldOutcome, FieldType, Grade, MAX_REASON_CHARS, Outcome, same_value};
use crate::validation::truncate;

/// The grader name of a tool-case grade.
pub const TOOL_GRADER: &str = "tool-calls";
/// Longest arguments text kept in a grade's detail (the record keeps them whole).
const MAX_DETAIL_ARGUMENT_CHARS: usize = 400;

/// Why a tool case failed; a case may fail for several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ToolFailure {
    /// An expected call was answered by a call of another tool.
    WrongTool {
        expected: String,
        got: String,
    },
    MissingCall {
        name: String,
    },
    ExtraCall {
        name: String,
    },
    ArgumentsNotJson {
        call: String,
        why: String,
    },
    /// The arguments were a JSON string holding the JSON object (not repaired).
    ArgumentsDoubleEncoded {
        call: String,
    },
    ArgumentsAgainstSchema {
        call: String,
        why: String,
    },
    WrongValue {
        call: String,
        argument: String,
    },
    MissingArgument {
        call: String,
        argument: String,
    },
    ExtraArgument {
        call: String,
        argument: String,
    },
    /// Native mode: a call written in the text content instead of the tool API.
    CallInText {
        name: String,
    },
    /// The answer stopped while a call was still being sent.
    StreamCut {
        call: String,
    },
    /// The calls were right but not in the order the case asks.
    WrongOrder,
    /// The case asks for an answer in text and the text is empty.
    NoText,
}

impl ToolFailure {
    pub const KINDS: [&'static str; 13] = [
        "wrong-tool",
        "missing-call",
        "extra-call",
        "arguments-not-json",
        "arguments-double-encoded",
        "arguments-against-schema",
        "wrong-value",
        "missing-argument",
        "extra-argument",
        "call-in-text",
        "stream-cut",
        "wrong-order",
        "no-text",
    ];

    /// Its kind as written in details and labels (`wrong-value`).
    pub fn kind(&self) -> &'static str {
        let i = match self {
            ToolFailure::WrongTool { .. } => 0,
            ToolFailure::MissingCall { .. } => 1,
            ToolFailure::ExtraCall { .. } => 2,
            ToolFailure::ArgumentsNotJson { .. } => 3,
            ToolFailure::ArgumentsDoubleEncoded { .. } => 4,
            ToolFailure::ArgumentsAgainstSchema { .. } => 5,
            ToolFailure::WrongValue { .. } => 6,
            ToolFailure::MissingArgument { .. } => 7,
            ToolFailure::ExtraArgument { .. } => 8,
            ToolFailure::CallInText { .. } => 9,
            ToolFailure::StreamCut { .. } => 10,
            ToolFailure::WrongOrder => 11,
            ToolFailure::NoText => 12,
        };
        Self::KINDS[i]
    }

    /// A call that could not be read as sent (the malformed-call rate counts these). A call
    /// against its schema was read: it is wrong, not malformed.
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            ToolFailure::ArgumentsNotJson { .. }
                | ToolFailure::ArgumentsDoubleEncoded { .. }
                | ToolFailure::CallInText { .. }
                | ToolFailure::StreamCut { .. }
        )
    }

    pub fn describe(&self) -> String {
        match self {
            ToolFailure::WrongTool { expected, got } => format!("called {got} instead of {expected}"),
            ToolFailure::MissingCall { name } => format!("no call of {name}"),
            ToolFailure::ExtraCall { name } => format!("extra call of {name}"),
            ToolFailure::ArgumentsNotJson { call, why } => format!("{call}: arguments not JSON ({why})"),
            ToolFailure::ArgumentsDoubleEncoded { call } => {
                format!("{call}: arguments double-encoded (a JSON string inside a string)")
            }
            ToolFailure::ArgumentsAgainstSchema { call, why } => {
                format!("{call}: arguments against the schema ({why})")
            }
            ToolFailure::WrongValue { call, argument } => format!("{call}: wrong value of {argument}"),
            ToolFailure::MissingArgument { call, argument } => format!("{call}: {argument} missing"),
            ToolFailure::ExtraArgument { call, argument } => format!("{call}: unexpected argument {argument}"),
            ToolFailure::CallInText { name } => format!("call of {name} leaked into the text"),
            ToolFailure::StreamCut { call } => format!("stream cut mid-call ({call})"),
            ToolFailure::WrongOrder => "calls not in the asked order".into(),
            ToolFailure::NoText => "no text answer".into(),
        }
    }
}

/// An abstention error: the model called when it must not, or did not call when it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Abstention {
    CalledWhenMustNot,
    DidNotCall,
}

/// An expected call and the actual call matched to it (either may be absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallPair {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<usize>,
    /// Per-argument outcomes (same-name pairs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<FieldOutcome>,
}

/// The structured detail of a `tool-calls` grade: what the case page shows side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallsDetail {
    pub mode: ToolMode,
    /// The expectation as the case says it.
    pub expected: Value,
    /// The calls as made (arguments cut to a few hundred characters).
    pub actual: Vec<ToolCall>,
    pub pairs: Vec<CallPair>,
    pub failures: Vec<ToolFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstention: Option<Abstention>,
    /// Calls by name: right, wrong tool, missing, extra.
    pub calls: Counts,
    /// Arguments over every call.
    pub arguments: Counts,
    pub argument_f1: f64,
    pub malformed: bool,
}

impl ToolCallsDetail {
    /// The detail of a `tool-calls` grade, if `grade` is one.
    pub fn from_grade(grade: &Grade) -> Option<ToolCallsDetail> {
        if &*grade.grader != TOOL_GRADER {
            return None;
        }
        serde_json::from_value(*grade.detail.clone()?).ok()
    }
}

/// How a call's arguments text reads.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgumentsRead {
    Object(Map<String, Value>),
    /// A JSON string holding this object.
    DoubleEncoded(Map<String, Value>),
    /// Not a JSON object (why).
    Unusable(String),
}

/// Reads a call's raw arguments; an empty text is an empty object (an argument-less call).
pub fn read_arguments(raw: &str) -> ArgumentsRead {
    if raw.trim().is_empty() {
        return ArgumentsRead::Object(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => ArgumentsRead::Object(map),
        Ok(Value::String(inner)) => match serde_json::from_str::<Value>(&inner) {
            Ok(Value::Object(map)) => ArgumentsRead::DoubleEncoded(map),
            _ => ArgumentsRead::Unusable("a JSON string, not an object".into()),
        },
        Ok(other) => ArgumentsRead::Unusable(format!("{}, not an object", crate::evalset::problems::kind_of(&other))),
        Err(e) => ArgumentsRead::Unusable(e.to_string()),
    }
}

/// Whether one argument's value is right.
fn argument_right(grader: Option<&ArgGrader>, want: Option<&Value>, got: &Value) -> bool {
    let as_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match (grader, want) {
        (Some(ArgGrader::Present), _) => true,
        (Some(ArgGrader::Regex { pattern }), _) => pattern.regex().is_match(&as_text(got)),
        (Some(ArgGrader::Enum { values }), _) => values.iter().any(|v| same_value(FieldType::Exact, v, got, false)),
        (Some(ArgGrader::AnyOf { values }), _) => values.iter().any(|v| same_value(FieldType::Auto, v, got, false)),
        (Some(grader), Some(want)) => match grader {
            ArgGrader::Exact => same_value(FieldType::Exact, want, got, false),
            ArgGrader::Text => same_value(FieldType::Text, want, got, false),
            ArgGrader::Date { day_first } => same_value(FieldType::Date, want, got, *day_first),
            ArgGrader::Number { abs_tol, rel_tol } => {
                match (crate::grading::number_of(want), crate::grading::number_of(got)) {
                    (Some(w), Some(g)) => {
                        crate::grading::same_number(w, g) || (w - g).abs() <= abs_tol.max(rel_tol * w.abs())
                    }
                    _ => false,
                }
            }
            _ => unreachable!("handled above"),
        },
        (Some(_), None) => false,
        (None, Some(want)) => same_value(FieldType::Auto, want, got, false),
        (None, None) => false,
    }
}

/// A value as kept in a detail: long ones cut to their first characters, as text.
fn kept(v: &Value) -> Value {
    let text = v.to_string();
    if text.chars().count() <= MAX_DETAIL_ARGUMENT_CHARS {
        v.clone()
    } else {
        Value::String(truncate(&text, MAX_DETAIL_ARGUMENT_CHARS))
    }
}

fn is_given(v: &Value) -> bool {
    !v.is_null()
}

/// Per-argument outcomes of one call against one expected call.
fn compare_arguments(expected: &ExpectedCall, got: &Map<String, Value>) -> Vec<FieldOutcome> {
    let mut names: Vec<&str> = expected.argument_names();
    names.extend(got.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let want = expected.arguments.get(name).filter(|v| is_given(v));
        let grader = expected.graders.get(name);
        let have = got.get(name).filter(|v| is_given(v));
        let expected_at_all = want.is_some() || grader.is_some();
        let outcome = match have {
            None if expected.optional.iter().any(|o| o == name) || !expected_at_all => continue,
            None => Outcome::Missing,
            Some(_) if !expected_at_all => Outcome::Extra,
            Some(h) if argument_right(grader, want, h) => Outcome::Correct,
            Some(_) => Outcome::Wrong,
        };
        out.push(FieldOutcome {
            field: name.to_string(),
            outcome,
            expected: want.cloned(),
            got: have.map(kept),
            ignored: false,
        });
    }
    out
}

/// One actual call as graded: its arguments read, and whether it is usable.
struct Read {
    name: String,
    arguments: Option<Map<String, Value>>,
}

/// Grades one answer of a tool case. `content` is the answer's text (in prompt mode the calls
/// are read from it); `tools` the case's tools.
pub fn grade_turn(tools: &[ToolDef], expectation: &ToolExpectation, turn: &ToolTurn, content: &str) -> Grade {
    let mut failures = Vec::new();
    let (calls, text, cut) = match turn.mode {
        ToolMode::Native => {
            let leaked = calls_in_text(content);
            for call in leaked.calls.iter().filter(|c| tools.iter().any(|t| t.name == c.name)) {
                failures.push(ToolFailure::CallInText {
                    name: call.name.clone(),
                });
            }
            let text = if failures.is_empty() {
                content.trim().to_string()
            } else {
                leaked.rest
            };
            (turn.calls.clone(), text, turn.cut_mid_call)
        }
        ToolMode::Prompt => {
            let read = calls_in_text(content);
            (read.calls, read.rest, turn.cut_mid_call || read.unclosed)
        }
    };
    // Read every call's arguments; the last call of a cut answer is "stream cut", not "not JSON".
    let mut read = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let is_cut = cut && i + 1 == calls.len();
        // A call cut before any argument text came was not argument-less: nothing was read.
        let read_as = if is_cut && call.arguments.trim().is_empty() {
            ArgumentsRead::Unusable("cut before its arguments".into())
        } else {
            read_arguments(&call.arguments)
        };
        let arguments = match read_as {
            ArgumentsRead::Object(map) => Some(map),
            ArgumentsRead::DoubleEncoded(map) => {
                failures.push(ToolFailure::ArgumentsDoubleEncoded {
                    call: call.name.clone(),
                });
                Some(map)
            }
            ArgumentsRead::Unusable(why) => {
                if !is_cut {
                    failures.push(ToolFailure::ArgumentsNotJson {
                        call: call.name.clone(),
                        why: truncate(&why, 80),
                    });
                }
                None
            }
        };
        if is_cut {
            failures.push(ToolFailure::StreamCut {
                call: call.name.clone(),
            });
        } else if let (Some(map), Some(tool)) = (&arguments, tools.iter().find(|t| t.name == call.name))
            && let Some(e) = tool
                .parameters
                .validator()
                .iter_errors(&Value::Object(map.clone()))
                .next()
        {
            let path = e.instance_path().as_str().to_string();
            let at = if path.is_empty() { "(root)".to_string() } else { path };
            failures.push(ToolFailure::ArgumentsAgainstSchema {
                call: call.name.clone(),
                why: truncate(&format!("{at}: {e}"), 120),
            });
        }
        read.push(Read {
            name: call.name.clone(),
            arguments,
        });
    }
    let mut call_counts = Counts::default();
    let mut argument_counts = Counts::default();
    let mut pairs = Vec::new();
    let mut abstention = None;
    match expectation {
        ToolExpectation::NoCall | ToolExpectation::Text => {
            for (i, r) in read.iter().enumerate() {
                failures.push(ToolFailure::ExtraCall { name: r.name.clone() });
                call_counts.extra += 1;
                argument_counts.extra += r.arguments.as_ref().map_or(0, |a| a.len() as u64);
                pairs.push(CallPair {
                    expected: None,
                    actual: Some(i),
                    arguments: Vec::new(),
                });
            }
            if !read.is_empty() {
                abstention = Some(Abstention::CalledWhenMustNot);
            }
            if matches!(expectation, ToolExpectation::Text) && text.trim().is_empty() {
                failures.push(ToolFailure::NoText);
            }
        }
        ToolExpectation::Calls {
            calls: expected,
            ordered,
        } => {
            if read.is_empty() {
                abstention = Some(Abstention::DidNotCall);
            }
            let matched = best_matching(expected, &read);
            if *ordered {
                let order: Vec<usize> = matched.iter().flatten().copied().collect();
                if order.windows(2).any(|w| w[0] > w[1]) {
                    failures.push(ToolFailure::WrongOrder);
                }
            }
            let used: Vec<usize> = matched.iter().flatten().copied().collect();
            let mut spare = (0..read.len()).filter(|a| !used.contains(a));
            for (e, want) in expected.iter().enumerate() {
                match matched[e] {
                    Some(a) => {
                        call_counts.correct += 1;
                        let outcomes = match &read[a].arguments {
                            Some(got) => compare_arguments(want, got),
                            // Attempted but unreadable: every expected argument is wrong.
                            None => want
                                .argument_names()
                                .into_iter()
                                .map(|name| FieldOutcome {
                                    field: name.to_string(),
                                    outcome: Outcome::Wrong,
                                    expected: want.arguments.get(name).cloned(),
                                    got: None,
                                    ignored: false,
                                })
                                .collect(),
                        };
                        for o in &outcomes {
                            add(&mut argument_counts, o.outcome);
                            let (call, argument) = (want.name.clone(), o.field.clone());
                            match o.outcome {
                                Outcome::Wrong if read[a].arguments.is_some() => {
                                    failures.push(ToolFailure::WrongValue { call, argument })
                                }
                                Outcome::Missing => failures.push(ToolFailure::MissingArgument { call, argument }),
                                Outcome::Extra => failures.push(ToolFailure::ExtraArgument { call, argument }),
                                _ => {}
                            }
                        }
                        pairs.push(CallPair {
                            expected: Some(e),
                            actual: Some(a),
                            arguments: outcomes,
                        });
                    }
                    None => {
                        let names = want.argument_names().len() as u64;
                        match spare.next() {
                            Some(a) => {
                                failures.push(ToolFailure::WrongTool {
                                    expected: want.name.clone(),
                                    got: read[a].name.clone(),
                                });
                                call_counts.wrong += 1;
                                argument_counts.wrong += names;
                                pairs.push(CallPair {
                                    expected: Some(e),
                                    actual: Some(a),
                                    arguments: Vec::new(),
                                });
                            }
                            None => {
                                // An answer cut mid-call never got to its later calls: the cut
                                // is the failure (the missing call is still counted).
                                if !cut {
                                    failures.push(ToolFailure::MissingCall {
                                        name: want.name.clone(),
                                    });
                                }
                                call_counts.missing += 1;
                                argument_counts.missing += names;
                                pairs.push(CallPair {
                                    expected: Some(e),
                                    actual: None,
                                    arguments: Vec::new(),
                                });
                            }
                        }
                    }
                }
            }
            for a in spare {
                failures.push(ToolFailure::ExtraCall {
                    name: read[a].name.clone(),
                });
                call_counts.extra += 1;
                argument_counts.extra += read[a].arguments.as_ref().map_or(0, |m| m.len() as u64);
                pairs.push(CallPair {
                    expected: None,
                    actual: Some(a),
                    arguments: Vec::new(),
                });
            }
        }
    }
    let mut all = argument_counts;
    all.correct += call_counts.correct;
    all.wrong += call_counts.wrong;
    all.missing += call_counts.missing;
    all.extra += call_counts.extra;
    let passed = failures.is_empty();
    let score = if passed { 1.0 } else { all.prf().2.min(0.999) };
    let (_, _, argument_f1) = argument_counts.prf();
    let malformed = failures.iter().any(ToolFailure::is_malformed);
    let reason = if passed {
        match expectation {
            ToolExpectation::Calls { calls, .. } => format!(
                "{} call{} right, every argument right",
                calls.len(),
                if calls.len() == 1 { "" } else { "s" }
            ),
            other => format!("{} as expected", other.describe()),
        }
    } else {
        let parts: Vec<String> = failures.iter().map(ToolFailure::describe).collect();
        parts.join("; ")
    };
    let detail = ToolCallsDetail {
        mode: turn.mode,
        expected: serde_json::to_value(expectation).unwrap_or_default(),
        actual: calls
            .into_iter()
            .map(|c| ToolCall {
                arguments: truncate(&c.arguments, MAX_DETAIL_ARGUMENT_CHARS),
                ..c
            })
            .collect(),
        pairs,
        failures,
        abstention,
        calls: call_counts,
        arguments: argument_counts,
        argument_f1,
        malformed,
    };
    Grade {
        grader: TOOL_GRADER.into(),
        score,
        passed,
        reason: truncate(&reason, MAX_REASON_CHARS),
        detail: serde_json::to_value(&detail).ok().map(Box::new),
        weight: 1.0,
        required: true,
    }
}

fn add(counts: &mut Counts, outcome: Outcome) {
    match outcome {
        Outcome::Correct => counts.correct += 1,
        Outcome::Wrong => counts.wrong += 1,
        Outcome::Missing => counts.missing += 1,
        Outcome::Extra => counts.extra += 1,
    }
}

/// Expected calls searched exhaustively up to this many (beyond, matched greedily).
const MAX_EXHAUSTIVE_CALLS: usize = 8;

/// For each expected call, the actual call of the same name matched to it: the assignment with
/// the most calls matched, then the most arguments right.
fn best_matching(expected: &[ExpectedCall], read: &[Read]) -> Vec<Option<usize>> {
    let value = |e: usize, a: usize| -> f64 {
        let args_right = match &read[a].arguments {
            Some(got) => {
                let outcomes = compare_arguments(&expected[e], got);
                outcomes.iter().filter(|o| o.outcome == Outcome::Correct).count() as f64
                    - 0.5 * outcomes.iter().filter(|o| o.outcome != Outcome::Correct).count() as f64
            }
            None => 0.0,
        };
        // A matched call always beats any number of right arguments elsewhere.
        1000.0 + args_right
    };
    let candidates: Vec<Vec<(usize, f64)>> = (0..expected.len())
        .map(|e| {
            (0..read.len())
                .filter(|&a| read[a].name == expected[e].name)
                .map(|a| (a, value(e, a)))
                .collect()
        })
        .collect();
    if expected.len() <= MAX_EXHAUSTIVE_CALLS && read.len() <= MAX_EXHAUSTIVE_CALLS {
        let mut best = (f64::MIN, vec![None; expected.len()]);
        let mut current = vec![None; expected.len()];
        search(
            &candidates,
            0,
            0.0,
            &mut vec![false; read.len()],
            &mut current,
            &mut best,
        );
        best.1
    } else {
        let mut used = vec![false; read.len()];
        candidates
            .iter()
            .map(|options| {
                let pick = options
                    .iter()
                    .filter(|(a, _)| !used[*a])
                    .max_by(|x, y| x.1.total_cmp(&y.1))
                    .map(|(a, _)| *a);
                if let Some(a) = pick {
                    used[a] = true;
                }
                pick
            })
            .collect()
    }
}

fn search(
    candidates: &[Vec<(usize, f64)>],
    e: usize,
    total: f64,
    used: &mut Vec<bool>,
    current: &mut Vec<Option<usize>>,
    best: &mut (f64, Vec<Option<usize>>),
) {
    if e == candidates.len() {
        if total > best.0 {
            *best = (total, current.clone());
        }
        return;
    }
    for &(a, v) in &candidates[e] {
        if !used[a] {
            used[a] = true;
            current[e] = Some(a);
            search(candidates, e + 1, total + v, used, current, best);
            used[a] = false;
        }
    }
    current[e] = None;
    search(candidates, e + 1, total, used, current, best);
}

/// Tool-case quality over many records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolReport {
    pub records: u64,
    pub passed: u64,
    /// Records with at least one malformed call.
    pub malformed: u64,
    pub abstention_errors: u64,
    pub arguments: Counts,
    /// Failed records by failure kind (a record counts once per kind).
    pub failures: BTreeMap<String, u64>,
}

impl ToolReport {
    /// Tool-call accuracy: the share of records whose calls were all right.
    pub fn accuracy(&self) -> Option<f64> {
        (self.records > 0).then(|| self.passed as f64 / self.records as f64)
    }

    pub fn malformed_rate(&self) -> Option<f64> {
        (self.records > 0).then(|| self.malformed as f64 / self.records as f64)
    }

    pub fn abstention_error_rate(&self) -> Option<f64> {
        (self.records > 0).then(|| self.abstention_errors as f64 / self.records as f64)
    }

    /// Argument F1 pooled over every call.
    pub fn argument_f1(&self) -> f64 {
        self.arguments.prf().2
    }
}

/// Pools the `tool-calls` grades of many records.
pub fn tool_report<'a>(grades: impl IntoIterator<Item = &'a Grade>) -> ToolReport {
    let mut report = ToolReport::default();
    for (grade, detail) in grades
        .into_iter()
        .filter_map(|g| ToolCallsDetail::from_grade(g).map(|d| (g, d)))
    {
        report.records += 1;
        report.passed += u64::from(grade.passed);
        report.malformed += u64::from(detail.malformed);
        report.abstention_errors += u64::from(detail.abstention.is_some());
        report.arguments.correct += detail.arguments.correct;
        report.arguments.wrong += detail.arguments.wrong;
        report.arguments.missing += detail.arguments.missing;
        report.arguments.extra += detail.arguments.extra;
        let mut kinds: Vec<&str> = detail.failures.iter().map(ToolFailure::kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for kind in kinds {
            *report.failures.entry(kind.to_string()).or_default() += 1;
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolDef> {
        vec![
            ToolDef::read(
                &json!({"name":"get_weather","parameters":{"type":"object","properties":{
                    "city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city"]}}),
                "t",
            )
            .unwrap(),
            ToolDef::read(
                &json!({"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}),
                "t",
            )
            .unwrap(),
        ]
    }

    fn expect(v: Value) -> ToolExpectation {
        ToolExpectation::read(&v, "expected_calls").unwrap()
    }

    fn native(calls: &[(&str, &str)]) -> ToolTurn {
        ToolTurn {
            calls: calls
                .iter()
                .map(|(n, a)| ToolCall {
                    id: None,
                    name: n.to_string(),
                    arguments: a.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn kinds(g: &Grade) -> Vec<&'static str> {
        ToolCallsDetail::from_grade(g)
            .unwrap()
            .failures
            .iter()
            .map(ToolFailure::kind)
            .collect()
    }

    #[test]
    fn parallel_calls_match_order_free_unless_ordered() {
        let e = json!([{"name":"get_weather","arguments":{"city":"Paris"}},{"name":"get_weather","arguments":{"city":"Oslo"}},{"name":"get_time","arguments":{"tz":"UTC"}}]);
        let turn = native(&[
            ("get_time", r#"{"tz":"UTC"}"#),
            ("get_weather", r#"{"city":"oslo"}"#),
            ("get_weather", r#"{"city":"Paris"}"#),
        ]);
        let g = grade_turn(&tools(), &expect(e.clone()), &turn, "");
        assert!(g.passed, "{}", g.reason);
        assert_eq!(g.score, 1.0);
        let ordered = json!({"calls": e, "ordered": true});
        assert_eq!(
            kinds(&grade_turn(&tools(), &expect(ordered), &turn, "")),
            ["wrong-order"]
        );
    }

    #[test]
    fn each_failure_kind_is_named() {
        let one = expect(json!([{"name":"get_weather","arguments":{"city":"Paris","days":3}}]));
        let k = |calls: &[(&str, &str)], text: &str| kinds(&grade_turn(&tools(), &one, &native(calls), text));
        assert_eq!(k(&[("get_time", "{}")], ""), ["wrong-tool"]);
        assert_eq!(k(&[], ""), ["missing-call"]);
        assert_eq!(
            k(
                &[("get_weather", r#"{"city":"Paris","days":3}"#), ("get_time", "{}")],
                ""
            ),
            ["extra-call"]
        );
        assert_eq!(
            k(&[("get_weather", r#"{"city":"Paris","days":3"#)], ""),
            ["arguments-not-json"]
        );
        assert_eq!(
            k(&[("get_weather", r#""{\"city\":\"Paris\",\"days\":3}""#)], ""),
            ["arguments-double-encoded"]
        );
        assert_eq!(
            k(&[("get_weather", r#"{"city":"Paris","days":0}"#)], ""),
            ["arguments-against-schema", "wrong-value"]
        );
        assert_eq!(
            k(&[("get_weather", r#"{"city":"Lyon","days":3}"#)], ""),
            ["wrong-value"]
        );
        assert_eq!(k(&[("get_weather", r#"{"city":"Paris"}"#)], ""), ["missing-argument"]);
        assert_eq!(
            k(&[("get_weather", r#"{"city":"Paris","days":3,"unit":"C"}"#)], ""),
            ["extra-argument"]
        );
        assert_eq!(
            k(
                &[],
                r#"<tool_call>{"name":"get_weather","arguments":{"city":"Paris","days":3}}</tool_call>"#
            ),
            ["call-in-text", "missing-call"]
        );
        let mut cut = native(&[("get_weather", r#"{"city":"Par"#)]);
        cut.cut_mid_call = true;
        assert_eq!(kinds(&grade_turn(&tools(), &one, &cut, "")), ["stream-cut"]);
        let g = grade_turn(&tools(), &expect(json!("text")), &native(&[]), " ");
        assert_eq!(kinds(&g), ["no-text"]);
    }

    #[test]
    fn abstention_errors_both_ways() {
        let d = |g: &Grade| ToolCallsDetail::from_grade(g).unwrap();
        let g = grade_turn(&tools(), &expect(json!("no-call")), &native(&[("get_time", "{}")]), "");
        assert_eq!(d(&g).abstention, Some(Abstention::CalledWhenMustNot));
        let g = grade_turn(
            &tools(),
            &expect(json!([{"name":"get_time"}])),
            &native(&[]),
            "It is noon.",
        );
        assert_eq!(d(&g).abstention, Some(Abstention::DidNotCall));
        let g = grade_turn(&tools(), &expect(json!("no-call")), &native(&[]), "I cannot.");
        assert!(g.passed && d(&g).abstention.is_none());
    }

    #[test]
    fn argument_graders_and_f1() {
        let e = expect(json!([{"name":"get_weather","arguments":{"city":"Paris","days":3},
            "graders":{"days":{"kind":"number","abs_tol":1},"city":{"kind":"any-of","values":["Paris","巴黎"]}}}]));
        assert!(
            grade_turn(
                &tools(),
                &e,
                &native(&[("get_weather", r#"{"city":"巴黎","days":4}"#)]),
                ""
            )
            .passed
        );
        let g = grade_turn(
            &tools(),
            &e,
            &native(&[("get_weather", r#"{"city":"Lyon","days":3}"#)]),
            "",
        );
        let d = ToolCallsDetail::from_grade(&g).unwrap();
        assert_eq!((d.arguments.correct, d.arguments.wrong), (1, 1));
        assert!((d.argument_f1 - 0.5).abs() < 1e-9);
        assert!(g.score < 1.0 && g.score > 0.0);
        let re = expect(json!([{"name":"get_time","graders":{"tz":{"kind":"regex","pattern":"^(UTC|GMT)$"}}}]));
        assert!(grade_turn(&tools(), &re, &native(&[("get_time", r#"{"tz":"GMT"}"#)]), "").passed);
        let opt = expect(json!([{"name":"get_weather","arguments":{"city":"Paris","days":3},"optional":["days"]}]));
        assert!(grade_turn(&tools(), &opt, &native(&[("get_weather", r#"{"city":"Paris"}"#)]), "").passed);
    }

    #[test]
    fn prompt_mode_reads_calls_from_the_text() {
        let e = expect(json!([{"name":"get_time","arguments":{"tz":"UTC"}}]));
        let turn = ToolTurn {
            mode: ToolMode::Prompt,
            ..Default::default()
        };
        let text = "```json\n{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\"}}\n```";
        assert!(grade_turn(&tools(), &e, &turn, text).passed);
        let cut = "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":";
        assert_eq!(kinds(&grade_turn(&tools(), &e, &turn, cut)), ["stream-cut"]);
    }

    #[test]
    fn reports_pool_records() {
        let e = expect(json!([{"name":"get_time","arguments":{"tz":"UTC"}}]));
        let grades = [
            grade_turn(&tools(), &e, &native(&[("get_time", r#"{"tz":"UTC"}"#)]), ""),
            grade_turn(&tools(), &e, &native(&[("get_time", r#"{"tz":"#)]), ""),
            grade_turn(&tools(), &e, &native(&[]), "noon"),
        ];
        let r = tool_report(&grades);
        assert_eq!((r.records, r.passed, r.malformed, r.abstention_errors), (3, 1, 1, 1));
        assert_eq!(r.accuracy(), Some(1.0 / 3.0));
        assert_eq!(r.failures.get("missing-call"), Some(&1));
    }
}
