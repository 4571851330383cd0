//! A summary answers every key exactly as `measure` answers it from the records.
use std::collections::HashMap;

use super::*;

/// A record built from JSON, so optional fields added later keep their defaults.
fn record(candidate_id: i64, case: usize, concurrency: u32, attempt: u32, i: i64) -> RequestRecord {
    let failed = i % 7 == 3;
    let class = ["rate_limited", "http_server_error", "total_timeout"][(i % 3) as usize];
    let e2e = 200_000 + (i * 7_919) % 90_000;
    serde_json::from_value(serde_json::json!({
        "run_id": 1, "candidate_id": candidate_id, "case_id": format!("c{case}"),
        "phase": if i % 11 == 0 { "soak" } else { "quality" }, "repetition": (i % 2),
        "attempt": attempt, "concurrency": concurrency, "is_warmup": i % 29 == 0,
        "sent_at_us": i * 50_000, "client_queue_us": 0, "connect_us": null,
        "connection_reused": null, "headers_us": 20_000, "first_chunk_us": 40_000 + (i % 13) * 1_000,
        "first_reasoning_us": null, "first_content_us": 40_000 + (i % 13) * 1_000,
        "last_token_us": if failed { serde_json::Value::Null } else { e2e.into() },
        "end_us": if failed { serde_json::Value::Null } else { e2e.into() },
        "chunks": [], "http_status": if failed { 500 } else { 200 },
        "finish_reason": if failed { serde_json::Value::Null } else { "stop".into() },
        "input_tokens": 100, "output_tokens": if failed { serde_json::Value::Null } else { (40 + i % 20).into() },
        "output_tokens_source": if i % 5 == 0 { "chunks" } else { "usage" }, "reasoning_tokens": null,
        "canonical_tokens": null, "output_chars": 200, "output": "x", "reasoning": null,
        "error_class": if failed { class.into() } else { serde_json::Value::Null },
        "error_detail": null,
        "grades": if failed { serde_json::json!([]) } else { serde_json::json!([
            {"grader": "exact", "score": if i % 4 == 0 { 0.0 } else { 1.0 }, "passed": i % 4 != 0, "reason": ""}
        ]) }
    }))
    .expect("a record parses")
}

/// Two candidates at c=1 and c=4 (the run's load is 4), retries, warm-ups, a soak and failures.
fn records() -> Vec<RequestRecord> {
    let mut out = Vec::new();
    let mut i = 0;
    for candidate in [1, 2] {
        for concurrency in [1, 4] {
            for case in 0..40 {
                out.push(record(candidate, case, concurrency, 0, i));
                if case % 9 == 1 {
                    out.push(record(candidate, case, concurrency, 1, i + 1_000));
                }
                i += 1;
            }
        }
    }
    out
}

/// Every key a rule can name: each base, with each parameter kind, at no load, a measured and
/// an unmeasured one.
fn every_key() -> Vec<MetricKey> {
    let mut keys = Vec::new();
    for def in CATALOG {
        let params: Vec<Option<String>> = match def.param {
            Param::None => vec![None],
            Param::ErrorClass => std::iter::once(None)
                .chain(ErrorClass::ALL.iter().map(|c| Some(c.as_str().to_string())))
                .collect(),
            Param::Grader => vec![Some("exact".into()), Some("never-graded".into())],
            Param::Probe => vec![Some("usage_in_stream".into())],
            Param::ChecklistItem => vec![Some("monitoring".into())],
            Param::Incumbent => vec![None],
            Param::Turn => vec![Some("2".into())],
        };
        let loads = if def.per_load {
            vec![None, Some(1), Some(4), Some(16)]
        } else {
            vec![None]
        };
        for p in &params {
            for &c in &loads {
                let mut text = def.base.to_string();
                if let Some(p) = p {
                    text = format!("{text}:{p}");
                }
                if let Some(c) = c {
                    text = format!("{text}@c={c}");
                }
                keys.push(MetricKey::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}")));
            }
        }
    }
    keys
}

#[test]
fn a_summary_measures_every_key_as_the_records_do() {
    let all = records();
    let weights: HashMap<String, f64> = [("c3".to_string(), 2.5), ("c7".to_string(), 0.5)].into();
    for (run_c, candidate, records) in [(4, 1, &all[..]), (4, 2, &all[..]), (8, 1, &all[..]), (4, 1, &[][..])] {
        let resumes = [];
        // An SLO, so `slo_attainment` is counted too.
        let slo = crate::run::Slo {
            ttft_ms: Some(300.0),
            ..Default::default()
        };
        let cx = SummaryContext {
            slo,
            run_concurrency: run_c,
            weights: &weights,
            resumes: &resumes,
            file: None,
        };
        let summary = summarise(candidate, records, &cx);
        // Stored as JSON and read back, it answers the same.
        let stored: CandidateSummary = serde_json::from_str(&serde_json::to_string(&summary).unwrap()).unwrap();
        let data = CandidateRecords::new(candidate, records).with_resumes(&resumes);
        for key in every_key() {
            let extras = Extras {
                slo: Some(&slo),
                ..Extras::default()
            };
            let direct = measure(&key, &data, run_c, &weights, &extras);
            assert_eq!(
                stored.measure(&key, run_c, &Extras::default()),
                direct,
                "{} (run at c={run_c}, {} records)",
                key.to_key(),
                records.len()
            );
        }
    }
}

#[test]
fn thinning_keeps_the_ends_and_spaces_the_rest() {
    let v: Vec<f64> = (0..1000).map(f64::from).collect();
    let t = thin_sorted(v.clone(), 5);
    assert_eq!(t, [0.0, 250.0, 500.0, 749.0, 999.0]);
    assert_eq!(thin_sorted(v[..4].to_vec(), 5), v[..4]);
}
