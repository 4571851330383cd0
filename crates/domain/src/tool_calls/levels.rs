//! Tool figures per load level: tool-call accuracy, argument F1, malformed-call rate and
//! abstention errors (each with its 90 % interval, as the threshold rules judge them), and the
//! timing of tool turns (time to the first argument piece, time to the complete call; p50 with
//! its interval, and p95). Parsers that break only under load, and tool turns that slow down
//! under load, show here level by level.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ToolCallsDetail, ToolMode};
use crate::run::RequestRecord;
use crate::scorecard::Measurement;
use crate::scorecard::measurement::tool_figure;
use crate::stats::{median_ci, quantile};

/// The caliber of the time to the first argument piece.
pub const FIRST_ARGUMENT_CALIBER: &str = "send → first piece of a call's arguments (native: the first tool_calls / \
     input_json_delta piece carrying argument text; prompt mode: the first answer token, TTFA), client clock, final \
     attempts of streamed tool turns that made a call";
/// The caliber of the time to the complete call.
pub const COMPLETE_CALIBER: &str = "send → the last call complete (native: the last call piece of an answer that \
     finished; prompt mode: the answer's last token), client clock, final attempts of streamed tool turns that \
     made a call and were not cut";

/// A timing figure of tool turns at one level: p50 (with its 90 % bootstrap interval) and p95, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnTiming {
    /// Tool turns timed.
    pub n: usize,
    pub p50_ms: Option<f64>,
    pub p50_interval_ms: Option<(f64, f64)>,
    pub p95_ms: Option<f64>,
}

impl TurnTiming {
    fn of(mut values_ms: Vec<f64>) -> TurnTiming {
        if values_ms.is_empty() {
            return TurnTiming::default();
        }
        let interval = median_ci(&values_ms, 0.90).map(|i| (i.lo, i.hi));
        TurnTiming {
            n: values_ms.len(),
            p50_ms: Some(quantile(&mut values_ms, 0.5)),
            p50_interval_ms: interval,
            p95_ms: Some(quantile(&mut values_ms, 0.95)),
        }
    }
}

/// One load level's tool figures for one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolLevel {
    /// The level's concurrency; 0 for an open loop (a request rate).
    pub concurrency: u32,
    /// Final attempts with a `tool-calls` grade at this level.
    pub answers: usize,
    /// Of those, answers cut mid-call (failed requests graded `stream-cut`).
    pub cut_mid_call: usize,
    pub accuracy: Measurement,
    pub argument_f1: Measurement,
    pub malformed: Measurement,
    pub abstention: Measurement,
    pub first_argument: TurnTiming,
    pub complete: TurnTiming,
}

/// The tool figures of a candidate's final attempts, one per load level (ascending), over the
/// answers that carry a `tool-calls` grade. Empty when none does.
pub fn tool_levels(finals: &[&RequestRecord]) -> Vec<ToolLevel> {
    let mut by_level: BTreeMap<u32, Vec<&RequestRecord>> = BTreeMap::new();
    for r in finals.iter().filter(|r| !r.is_warmup) {
        if r.grades.iter().any(|g| ToolCallsDetail::from_grade(g).is_some()) {
            by_level.entry(r.concurrency).or_default().push(r);
        }
    }
    by_level
        .into_iter()
        .map(|(c, records)| {
            let level = Some(c);
            let (mut first, mut complete) = (Vec::new(), Vec::new());
            let mut cut = 0;
            for r in &records {
                if !r.succeeded() {
                    cut += 1;
                }
                if let Some((f, done)) = turn_times(r) {
                    first.extend(f);
                    complete.extend(done);
                }
            }
            ToolLevel {
                concurrency: c,
                answers: records.len(),
                cut_mid_call: cut,
                accuracy: tool_figure("tool_call_accuracy", &records, level),
                argument_f1: tool_figure("tool_argument_f1", &records, level),
                malformed: tool_figure("malformed_call_rate", &records, level),
                abstention: tool_figure("abstention_error_rate", &records, level),
                first_argument: TurnTiming::of(first),
                complete: TurnTiming::of(complete),
            }
        })
        .collect()
}

/// (time to the first argument piece, time to the complete call) of one tool turn that made a
/// call, ms; None when it made none or was not streamed.
fn turn_times(r: &RequestRecord) -> Option<(Option<f64>, Option<f64>)> {
    let turn = r.tool_turn()?;
    let ms = |us: i64| us as f64 / 1000.0;
    match turn.mode {
        ToolMode::Native => {
            let first = turn.first_argument_us.map(ms);
            let complete = turn.complete_us.filter(|_| r.succeeded()).map(ms);
            (first.is_some() || complete.is_some()).then_some((first, complete))
        }
        ToolMode::Prompt => {
            let called = r
                .grades
                .iter()
                .filter_map(ToolCallsDetail::from_grade)
                .any(|d| !d.actual.is_empty());
            let first = r.first_content_us.get()?;
            called.then(|| {
                let done = r.last_token_us.get().filter(|_| r.succeeded()).map(ms);
                (Some(ms(first)), done)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grading::Grade;
    use crate::run::{ErrorClass, RecordTexts};
    use crate::tool_calls::{ToolExpectation, ToolTurn, grade_turn};

    fn record(c: u32, passed_call: bool, first_ms: i64, complete_ms: Option<i64>) -> RequestRecord {
        let tools = vec![
            crate::tool_calls::ToolDef::read(&serde_json::json!({"name": "f", "parameters": {"type": "object"}}), "t")
                .unwrap(),
        ];
        let expect = ToolExpectation::read(&serde_json::json!([{"name": "f", "arguments": {"x": 1}}]), "e").unwrap();
        let turn = ToolTurn {
            mode: ToolMode::Native,
            calls: vec![super::super::ToolCall {
                id: None,
                name: "f".into(),
                arguments: (if passed_call { r#"{"x": 1}"# } else { r#"{"x": "# }).to_string(),
            }],
            cut_mid_call: !passed_call,
            first_argument_us: Some(first_ms * 1000),
            complete_us: complete_ms.map(|m| m * 1000),
        };
        let grade: Grade = grade_turn(&tools, &expect, &turn, "");
        let mut r = RequestRecord::test_quality("case");
        r.concurrency = c;
        r.grades = vec![grade];
        r.texts = RecordTexts {
            tool_turn: Some(turn),
            ..Default::default()
        }
        .into();
        if !passed_call {
            r.error_class = Some(ErrorClass::StreamCut);
        }
        r
    }

    #[test]
    fn each_level_counts_its_answers_cut_calls_and_times() {
        let mut records = Vec::new();
        for i in 0..10 {
            records.push(record(1, true, 10 + i, Some(20 + i)));
        }
        for i in 0..8 {
            records.push(record(16, true, 40 + i, Some(80 + i)));
        }
        records.push(record(16, false, 45, None));
        records.push(record(16, false, 46, None));
        // Cut for summaries, as the run page reads them: the timing survives.
        for r in &mut records {
            r.cut_for_summaries();
        }
        let finals: Vec<&RequestRecord> = records.iter().collect();
        let levels = tool_levels(&finals);
        assert_eq!(levels.len(), 2);
        let (one, sixteen) = (&levels[0], &levels[1]);
        assert_eq!((one.concurrency, one.answers, one.cut_mid_call), (1, 10, 0));
        assert_eq!(
            (sixteen.concurrency, sixteen.answers, sixteen.cut_mid_call),
            (16, 10, 2)
        );
        assert_eq!(one.accuracy.value, Some(1.0));
        assert_eq!(sixteen.accuracy.value, Some(0.8));
        assert_eq!(sixteen.malformed.value, Some(0.2));
        assert!(sixteen.malformed.interval.is_some_and(|(lo, hi)| lo < 0.2 && hi > 0.2));
        assert_eq!(one.malformed.value, Some(0.0));
        // Timing: the cut turns have a first argument piece but no complete call.
        assert_eq!((one.first_argument.n, one.complete.n), (10, 10));
        assert_eq!((sixteen.first_argument.n, sixteen.complete.n), (10, 8));
        assert_eq!(one.first_argument.p50_ms, Some(14.5));
        assert!(sixteen.complete.p50_ms.unwrap() > one.complete.p95_ms.unwrap());
    }
}
