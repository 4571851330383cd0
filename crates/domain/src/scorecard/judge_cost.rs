//! What the `llm-judge` calls made for each candidate's outputs cost. Judge calls are stored
//! under the judged candidate (phase `judge`, never in its figures or its own cost) and priced
//! here at the prices of the candidate that judged, shown apart and labelled as judge cost.
use serde::Serialize;

use super::summary::{JudgeUsage, judge_usage};
use crate::candidate::Candidate;
use crate::cost::token_cost;
use crate::evalset::EvalSetFile;
use crate::run::{JudgeConfig, RequestRecord};

/// Where to find who judged: the eval set (grader names by case) and the run's judge settings.
pub struct JudgeInput<'a> {
    pub file: &'a EvalSetFile,
    /// The run's judge settings (None: judging was off; any judge calls are priced by name).
    pub config: Option<&'a JudgeConfig>,
    /// Every candidate (judges need not be candidates of the run).
    pub all_candidates: &'a [Candidate],
}

/// The judge calls made for one candidate's outputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeCost {
    /// Judge calls (retries included).
    pub calls: usize,
    /// Calls that failed (their grade says so).
    pub failed: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Dollars at the judges' stated prices; None when a judge states none or is unknown.
    pub usd: Option<f64>,
    /// The judges' names, sorted.
    pub judges: Vec<String>,
}

/// Per candidate (in `candidates` order): the cost of the judge calls made for its outputs;
/// None when there were none.
pub fn judge_costs(
    candidates: &[Candidate],
    records: &[RequestRecord],
    input: &JudgeInput<'_>,
) -> Vec<Option<JudgeCost>> {
    candidates
        .iter()
        .map(|c| {
            let usage = judge_usage(c.id, records, input.file)?;
            Some(price(&usage, input.config, input.all_candidates))
        })
        .collect()
}

/// The judge calls' cost at the prices of the candidates that judged: by the run's judge
/// settings (None: by the names the eval set gives), looked up among every candidate.
pub fn price(usage: &JudgeUsage, config: Option<&JudgeConfig>, all_candidates: &[Candidate]) -> JudgeCost {
    let by_name = JudgeConfig::default();
    let config = config.unwrap_or(&by_name);
    let mut out = JudgeCost {
        calls: usage.calls,
        failed: usage.failed,
        input_tokens: 0,
        output_tokens: 0,
        usd: Some(0.0),
        judges: Vec::new(),
    };
    for t in &usage.by_judge {
        out.input_tokens += t.input_tokens;
        out.output_tokens += t.output_tokens;
        let judge = t.judge.as_deref().and_then(|name| config.resolve(name, all_candidates));
        let dollars = judge.and_then(|j| token_cost(&j.spec.pricing, t.input_tokens, t.output_tokens));
        out.usd = out.usd.zip(dollars).map(|(a, b)| a + b);
        if let Some(j) = judge
            && !out.judges.contains(&j.spec.name)
        {
            out.judges.push(j.spec.name.clone());
        }
    }
    out.judges.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;
    use crate::candidate::{CandidateSpec, Pricing};

    fn candidate(id: i64, name: &str, pricing: Pricing) -> Candidate {
        Candidate {
            id,
            spec: CandidateSpec {
                pricing,
                ..CandidateSpec::openai_chat(name, "http://127.0.0.1:9/v1", name)
            },
            created_at: Timestamp(0),
            updated_at: Timestamp(0),
        }
    }

    fn call(candidate_id: i64, case: &str, attempt: u32, tokens: (u32, u32), ok: bool) -> RequestRecord {
        let mut r: RequestRecord = serde_json::from_value(serde_json::json!({
            "run_id": 1, "candidate_id": candidate_id, "case_id": case, "phase": "judge", "repetition": 0,
            "attempt": attempt, "concurrency": 1, "is_warmup": true, "sent_at_us": 0, "client_queue_us": 0,
            "connect_us": null, "connection_reused": null, "headers_us": null, "first_chunk_us": null,
            "first_reasoning_us": null, "first_content_us": null, "last_token_us": null, "end_us": 1,
            "chunks": [], "http_status": 200, "finish_reason": "stop", "input_tokens": tokens.0,
            "output_tokens": tokens.1, "output_tokens_source": "usage", "reasoning_tokens": null,
            "canonical_tokens": null, "output_chars": 0, "output": "SCORE: 5", "reasoning": null,
            "error_class": null, "error_detail": null, "grades": []
        }))
        .unwrap();
        if !ok {
            r.error_class = Some(crate::run::ErrorClass::HttpServerError);
        }
        r
    }

    #[test]
    fn judge_calls_are_priced_at_the_judge_s_prices_by_hand() {
        let file = EvalSetFile::parse(
            "t.jsonl",
            concat!(
                r#"{"bakeoff_evalset":1,"name":"s","task":"generation","prompt":"{{q}}","graders":[{"kind":"llm-judge","judge":"big","rubric":"r"}]}"#,
                "\n",
                r#"{"id":"a","vars":{"q":"1"}}"#,
                "\n",
                r#"{"id":"b","vars":{"q":"2"},"graders":[{"kind":"llm-judge","judge":"big","rubric":"r"},{"kind":"llm-judge","judge":"cheap","rubric":"r"}]}"#,
                "\n"
            ),
        )
        .unwrap();
        let priced = |i, o| Pricing {
            input_per_mtok: Some(i),
            output_per_mtok: Some(o),
            ..Default::default()
        };
        let all = [
            candidate(1, "measured", priced(100.0, 100.0)),
            candidate(2, "big", priced(2.0, 10.0)),
            candidate(3, "cheap", Pricing::default()),
        ];
        let records = [
            call(1, "a", 0, (1000, 100), false),
            call(1, "a", 1, (1000, 100), true),
            call(1, "b", 0, (500, 50), true),
        ];
        let input = JudgeInput {
            file: &file,
            config: None,
            all_candidates: &all,
        };
        let costs = judge_costs(&all[..1], &records, &input);
        let c = costs[0].as_ref().unwrap();
        // 2 500 input × $2/M + 250 output × $10/M = $0.005 + $0.0025, at big's prices, not measured's.
        assert_eq!((c.calls, c.failed, c.input_tokens, c.output_tokens), (3, 1, 2500, 250));
        assert!((c.usd.unwrap() - 0.0075).abs() < 1e-12);
        assert_eq!(c.judges, ["big"]);
        // The second judge grader of case b goes to "cheap", which states no price.
        let more = [call(1, "b", crate::grading::JUDGE_ATTEMPT_STRIDE, (10, 1), true)];
        let c = judge_costs(&all[..1], &more, &input)[0].clone().unwrap();
        assert_eq!((c.usd, c.judges.as_slice()), (None, ["cheap".to_string()].as_slice()));
        // An override judges everything, whatever the graders name.
        let config = JudgeConfig {
            override_id: Some(3),
            ..Default::default()
        };
        let input = JudgeInput {
            config: Some(&config),
            ..input
        };
        assert_eq!(judge_costs(&all[..1], &records, &input)[0].as_ref().unwrap().usd, None);
        assert_eq!(judge_costs(&all[1..2], &records, &input), [None]);
    }
}
