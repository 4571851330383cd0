//! Measurement over real HTTP against the built-in mock: every caliber against the mock's
//! ground truth (generous tolerances, never absolute speeds), error classes from mock profiles
//! that produce them, retries and warm-ups kept out of figures, the open-loop schedule, the
//! sweep's knee, the staged rollout, `bakeoff measure --json`, `bakeoff calibrate`, and the
//! harness report in both stores.
use std::collections::HashMap;
use std::time::Duration;

use bakeoff::domain::calibers::LevelFigures;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::load::{Load, LoadShape};
use bakeoff::domain::run::{Phase, RunConfig, RunStatus, TokenSource};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::{MeasureOutcome, MeasureSpec, measure, synthetic_evalset};
use bakeoff::engine::run::pool::request_id;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use serde_json::Value;

/// Longest any measurement here may take before the test fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(60);

async fn start_mock(profiles: Vec<ModelProfile>) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: Vec::new(),
        seed: 11,
    })
    .await
}

fn spec(mock: &MockServer, model: &str) -> CandidateSpec {
    spec_at(&mock.base_url(), model)
}

fn spec_at(base_url: &str, model: &str) -> CandidateSpec {
    CandidateSpec::openai_chat(format!("measure test {model}"), base_url, model)
}

fn config(load: LoadShape, requests: u32) -> RunConfig {
    RunConfig {
        concurrency: 1,
        repetitions: 1,
        warmup_requests: 0,
        max_tokens: Some(24),
        temperature: Some(0.0),
        timeout_secs: 20,
        retries: 0,
        stream: true,
        load,
        staged_rollout: false,
        requests_per_level: Some(requests),
        ..RunConfig::default()
    }
}

async fn run(mock: &MockServer, model: &str, evalset: EvalSetFile, config: RunConfig) -> MeasureOutcome {
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let spec = MeasureSpec {
        candidate: crate::support::checked::admin_new(&spec(mock, model)),
        evalset,
        config,
        run_name: format!("measure test {model}"),
    };
    tokio::time::timeout(DEADLINE, measure(&store, spec, Cancel::never()))
        .await
        .expect("the measurement ended in time")
        .expect("the measurement ran")
}

fn only_level(o: &MeasureOutcome) -> &LevelFigures {
    assert_eq!(o.figures.levels.len(), 1, "{:?}", o.figures.levels);
    &o.figures.levels[0]
}

async fn ground_truth(mock: &MockServer) -> HashMap<String, Value> {
    let page: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .expect("fetching ground truth")
        .json()
        .await
        .expect("ground truth is JSON");
    page["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| Some((r["client_request_id"].as_str()?.to_string(), r.clone())))
        .collect()
}

fn within(measured: f64, truth: f64, rel: f64) -> bool {
    (measured - truth).abs() <= rel * truth.abs()
}

#[tokio::test]
async fn every_caliber_agrees_with_the_mock_ground_truth() {
    // 20 tokens at 8 ms in chunks of 2 (the first alone): ITL must split each chunk's gap.
    let profile = ModelProfile {
        ttft_ms: 40.0,
        inter_token_ms: Some(8.0),
        tokens_per_chunk: 2,
        ..ModelProfile::named("m")
    };
    let mock = start_mock(vec![profile]).await;
    let evalset = synthetic_evalset(&[16], 8, 20).unwrap();
    let o = run(
        &mock,
        "m",
        evalset.clone(),
        RunConfig {
            max_tokens: Some(20),
            ..config(LoadShape::Levels { levels: vec![4] }, 16)
        },
    )
    .await;
    assert_eq!(o.status, RunStatus::Finished);
    let level = only_level(&o);
    assert_eq!((level.requests, level.succeeded, level.failed), (16, 16, 0));
    assert_eq!(level.load, Load::Concurrency { concurrency: 4 });
    assert_eq!(level.token_sources.get("usage"), Some(&16));

    let truth = ground_truth(&mock).await;
    let index: HashMap<&str, usize> = evalset
        .cases
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id.as_str(), i))
        .collect();
    let mut server_decode = Vec::new();
    for r in o.records.iter().filter(|r| !r.is_warmup) {
        let id = request_id(
            r.run_id,
            r.candidate_id,
            r.phase,
            index[r.case_id.as_ref()],
            r.repetition,
            r.attempt,
        );
        let t = truth.get(&id).unwrap_or_else(|| panic!("ground truth for {id}"));
        assert_eq!(r.output_tokens, Some(20));
        assert_eq!(r.output_tokens, t["tokens_sent"].as_u64().map(|n| n as u32));
        // Chunks carried 1, then 2 each: the per-chunk counts were apportioned to match.
        assert_eq!(r.chunks.iter().map(|c| c.1).sum::<u32>(), 20);
        assert!(r.chunks.len() == 11, "{:?}", r.chunks);
        assert!(r.canonical_tokens.is_some_and(|n| n > 0));
        let client_ttft = r.ttft_us().unwrap() as f64 / 1000.0;
        let server_ttft = t["first_token_ms"].as_f64().unwrap();
        assert!(
            client_ttft >= server_ttft - 1.0 && client_ttft - server_ttft < 25.0,
            "TTFT {client_ttft} ms vs server {server_ttft} ms"
        );
        let (first, last) = (server_ttft, t["last_token_ms"].as_f64().unwrap());
        server_decode.push(19.0 / ((last - first) / 1000.0));
    }
    // Per-stream decode: the server sends 19 gaps of 8 ms → 125 tok/s.
    let decode = level.decode_tok_s_per_stream.as_ref().unwrap();
    let server_median = {
        server_decode.sort_by(|a, b| a.total_cmp(b));
        server_decode[server_decode.len() / 2]
    };
    assert!(
        within(decode.p50, server_median, 0.15),
        "{} vs {server_median}",
        decode.p50
    );
    // ITL: every per-token gap is ~8 ms; ICL: chunks of 2 are ~16 ms apart.
    let itl = level.itl_ms.as_ref().unwrap();
    assert_eq!(itl.n, 16 * 19);
    assert!(within(itl.p50, 8.0, 0.3), "ITL p50 {}", itl.p50);
    assert!(within(level.icl_ms.as_ref().unwrap().p50, 16.0, 0.3));
    // TPOT = (E2E − TTFT) / 19 ≈ 8 ms (the end comes just after the last token).
    assert!(within(level.tpot_ms.as_ref().unwrap().p50, 8.0, 0.3));
    // TTFA = TTFT (no reasoning); E2E ≈ TTFT + 19 × 8 ms.
    let ttft = level.ttft_ms.as_ref().unwrap();
    assert_eq!(level.ttfa_ms.as_ref().unwrap().p50, ttft.p50);
    assert!(within(level.e2e_ms.as_ref().unwrap().p50, ttft.p50 + 152.0, 0.3));
    // Aggregate over the measured window vs the arithmetic of the load: 4 streams, each
    // 20 tokens per (TTFT + 152 ms) → about 4 × 20 / 0.19 s; generous, as windows are short.
    let agg = level.aggregate_tok_s.unwrap();
    let expected = 4.0 * 20.0 / ((ttft.p50 + 152.0) / 1000.0);
    assert!(within(agg, expected, 0.35), "aggregate {agg} vs {expected}");
    assert!(level.req_per_s.is_some() && level.aggregate_chars_per_s.is_some());
    let w = level.repetitions[0].window.unwrap();
    assert!(w.steady, "16 requests at c=4 reach a steady state");
    let harness = o.harness.clone().expect("a harness report");
    assert!(harness.client_queue_ms.is_some() && !harness.open_loop);
    assert_eq!(harness.streamed_tokens, 320);
}

#[tokio::test]
async fn each_error_class_comes_from_the_mock_profile_that_produces_it() {
    let base = || ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named("x")
    };
    let cases: Vec<(ModelProfile, &str, u32)> = vec![
        (
            ModelProfile {
                error_429_rate: 1.0,
                ..base()
            },
            "rate_limited",
            20,
        ),
        (
            ModelProfile {
                error_500_rate: 1.0,
                ..base()
            },
            "http_5xx",
            20,
        ),
        (
            ModelProfile {
                cut_probability: 1.0,
                ..base()
            },
            "stream_cut",
            20,
        ),
        (
            ModelProfile {
                malformed_probability: 1.0,
                ..base()
            },
            "malformed_chunk",
            20,
        ),
        (
            ModelProfile {
                context_length: 20,
                ..base()
            },
            "context_length_exceeded",
            20,
        ),
        (
            ModelProfile {
                stall_probability: 1.0,
                stall_ms: 5000.0,
                ..base()
            },
            "total_timeout",
            1,
        ),
    ];
    for (i, (profile, class, timeout)) in cases.into_iter().enumerate() {
        let name = format!("p{i}");
        let mock = start_mock(vec![ModelProfile {
            name: name.clone(),
            ..profile
        }])
        .await;
        let o = run(
            &mock,
            &name,
            synthetic_evalset(&[16], 2, 8).unwrap(),
            RunConfig {
                max_tokens: Some(8),
                timeout_secs: timeout,
                ..config(LoadShape::Levels { levels: vec![2] }, 2)
            },
        )
        .await;
        let level = only_level(&o);
        assert_eq!((level.failed, level.succeeded), (2, 0), "{class}: {level:?}");
        assert_eq!(level.errors.get(class), Some(&2), "{class}: {:?}", level.errors);
        assert!(
            level.ttft_ms.is_none() && level.aggregate_tok_s.is_none(),
            "{class}: failures stay out of figures"
        );
    }
}

#[tokio::test]
async fn retries_and_warm_ups_never_leak_into_figures() {
    let profile = ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        error_500_rate: 0.5,
        ..ModelProfile::named("flaky")
    };
    let mock = start_mock(vec![profile]).await;
    let o = run(
        &mock,
        "flaky",
        synthetic_evalset(&[16], 12, 8).unwrap(),
        RunConfig {
            warmup_requests: 3,
            retries: 3,
            max_tokens: Some(8),
            ..config(LoadShape::Levels { levels: vec![3] }, 12)
        },
    )
    .await;
    let level = only_level(&o);
    let measured: Vec<_> = o.records.iter().filter(|r| !r.is_warmup).collect();
    let warmups = o.records.iter().filter(|r| r.is_warmup).count();
    assert_eq!(warmups, 3);
    assert!(
        o.records
            .iter()
            .filter(|r| r.is_warmup)
            .all(|r| r.phase == Phase::Warmup)
    );
    let retried = measured.iter().filter(|r| r.attempt > 0).count() as u64;
    assert!(retried > 0, "a 50 % failure rate over 12 requests needs retries");
    assert_eq!(level.retries, retried);
    assert_eq!(level.requests, 12, "one figure per request, whatever its attempts");
    assert_eq!(level.succeeded + level.failed, 12);
    assert_eq!(level.ttft_ms.as_ref().map(|d| d.n as u64), Some(level.succeeded));
    assert_eq!(
        level.output_tokens,
        8 * level.succeeded,
        "only successful final attempts count"
    );
}

#[tokio::test]
async fn a_rate_is_sent_on_schedule_whatever_the_server_does() {
    // Each answer takes ~600 ms: a closed loop at c=1 would need ~6 s for 10 requests; at
    // 20 req/s the open loop sends all of them within ~0.45 s and records its lag.
    let profile = ModelProfile {
        ttft_ms: 500.0,
        inter_token_ms: Some(10.0),
        ..ModelProfile::named("slow")
    };
    let mock = start_mock(vec![profile]).await;
    let o = run(
        &mock,
        "slow",
        synthetic_evalset(&[16], 10, 8).unwrap(),
        RunConfig {
            max_tokens: Some(8),
            ..config(
                LoadShape::Rate {
                    per_second: 20.0,
                    poisson: false,
                },
                10,
            )
        },
    )
    .await;
    let mut sends: Vec<i64> = o
        .records
        .iter()
        .filter(|r| !r.is_warmup)
        .map(|r| r.sent_at_us)
        .collect();
    sends.sort();
    assert_eq!(sends.len(), 10);
    let span_ms = (sends[9] - sends[0]) as f64 / 1000.0;
    assert!(
        (400.0..1500.0).contains(&span_ms),
        "10 sends at 20/s span ~450 ms, got {span_ms}"
    );
    assert!(
        o.records.iter().all(|r| r.concurrency == 0),
        "open loop is recorded as concurrency 0"
    );
    let harness = o.harness.clone().expect("a harness report");
    assert!(harness.open_loop);
    let lag = harness.schedule_lag_ms.expect("schedule lag is recorded");
    assert_eq!(lag.n, 10);
    let level = only_level(&o);
    assert_eq!(
        level.load,
        Load::Rate {
            per_second: 20.0,
            poisson: false
        }
    );
    assert_eq!(level.succeeded, 10);
}

#[tokio::test]
async fn a_sweep_finds_the_knee_of_a_server_with_two_slots() {
    let profile = ModelProfile {
        ttft_ms: 20.0,
        inter_token_ms: Some(4.0),
        slots: Some(2),
        ..ModelProfile::named("two-slots")
    };
    let mock = start_mock(vec![profile]).await;
    let o = run(
        &mock,
        "two-slots",
        synthetic_evalset(&[16], 16, 16).unwrap(),
        RunConfig {
            max_tokens: Some(16),
            // Every level, also past the two slots' saturation: the knee is the point here.
            measure_past_saturation: true,
            ..config(
                LoadShape::Sweep {
                    max_concurrency: 8,
                    ttft_factor: 2.0,
                    min_gain: 0.05,
                },
                16,
            )
        },
    )
    .await;
    let loads: Vec<String> = o.figures.levels.iter().map(|l| l.load.label()).collect();
    assert_eq!(loads, ["c=1", "c=2", "c=4", "c=8"]);
    let (_, knee) = o.figures.knees.first().expect("a knee");
    assert_eq!(knee.concurrency, 2, "{knee:?}");
}

#[tokio::test]
async fn the_staged_rollout_stops_a_run_before_spending_its_budget() {
    // Shortest case fits the 64-token context, the longest does not.
    let profile = ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        context_length: 64,
        ..ModelProfile::named("small-context")
    };
    let mock = start_mock(vec![profile]).await;
    let o = run(
        &mock,
        "small-context",
        synthetic_evalset(&[8, 200], 3, 8).unwrap(),
        RunConfig {
            staged_rollout: true,
            max_tokens: Some(8),
            ..config(LoadShape::Levels { levels: vec![2] }, 6)
        },
    )
    .await;
    assert_eq!(o.status, RunStatus::Failed);
    let error = o.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("staged rollout stopped measure test small-context at stage 2/3"),
        "{error}"
    );
    assert!(
        error.contains("context_length_exceeded") && error.contains("(1) symptom"),
        "{error}"
    );
    assert!(
        o.records.iter().all(|r| r.is_warmup && r.phase == Phase::Smoke),
        "nothing measured"
    );
    assert!(o.figures.levels.is_empty());
    assert!(
        o.events
            .iter()
            .any(|e| e.level == "info" && e.message.contains("stage 1/3"))
    );

    // The same workload with a big enough context passes every stage and measures.
    let roomy = start_mock(vec![ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named("roomy")
    }])
    .await;
    let o = run(
        &roomy,
        "roomy",
        synthetic_evalset(&[8, 200], 3, 8).unwrap(),
        RunConfig {
            staged_rollout: true,
            max_tokens: Some(8),
            ..config(LoadShape::Levels { levels: vec![2] }, 6)
        },
    )
    .await;
    assert_eq!(o.status, RunStatus::Finished);
    let smoke = o.records.iter().filter(|r| r.phase == Phase::Smoke).count();
    assert_eq!(smoke, 6, "1 + 1 + 4 rollout requests");
    assert_eq!(o.figures.levels.len(), 2, "two prompt bins");
    assert!(o.figures.levels.iter().all(|l| l.requests == 6));
}

/// A tiny OpenAI-style server that streams "Hello world!" in three chunks and never reports
/// usage (as some servers do); serves `connections` requests, then stops.
async fn no_usage_server(connections: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..connections {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // Read the head, then the body by its content-length.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let length = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= head_end + 4 + length {
                            break;
                        }
                    }
                }
                let mut body = String::new();
                for piece in ["Hello", " world", "!"] {
                    body.push_str(&format!(
                        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{piece}\"}},\"finish_reason\":null}}]}}\n\n"
                    ));
                }
                body.push_str(
                    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
                );
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn the_tokenizer_counts_when_the_server_gives_no_usage() {
    let base_url = no_usage_server(2).await;
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let candidate = CandidateSpec {
        base_url,
        ..spec_at("http://unused/v1", "quiet")
    };
    let o = measure(
        &store,
        MeasureSpec {
            candidate: crate::support::checked::admin_new(&candidate),
            evalset: synthetic_evalset(&[16], 2, 8).unwrap(),
            config: config(LoadShape::Levels { levels: vec![1] }, 2),
            run_name: "no usage".into(),
        },
        Cancel::never(),
    )
    .await
    .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{:?}", o.events);
    assert_eq!(o.records.len(), 2);
    for r in &o.records {
        assert_eq!(r.output(), "Hello world!");
        assert_eq!(r.output_tokens_source, Some(TokenSource::Tokenizer));
        let n = bakeoff::engine::tokens::tokenizer::count("Hello world!");
        assert_eq!((r.output_tokens, r.canonical_tokens), (Some(n), Some(n)));
        assert_eq!(r.chunks.len(), 3);
    }
    assert_eq!(only_level(&o).token_sources.get("tokenizer"), Some(&2));
}

#[test]
fn measure_json_has_the_documented_fields() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mock = runtime.block_on(start_mock(vec![ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named("m")
    }]));
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("m.json");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "measure",
            "--base-url",
            &mock.base_url(),
            "--model",
            "m",
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "8",
            "--warmup",
            "1",
            "--json",
        ])
        .arg(&json_path)
        .env("BAKEOFF_LOG", "warn")
        .output()
        .expect("running bakeoff measure");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("TTFT p50 ms") && stdout.contains("aggregate tok/s"),
        "{stdout}"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(doc["format"], "bakeoff-measure/1");
    assert_eq!(doc["status"], "finished");
    assert_eq!(doc["conditions"]["model"], "m");
    assert_eq!(doc["conditions"]["workload"]["kind"], "synthetic");
    assert_eq!(doc["conditions"]["run_config"]["load"]["shape"], "levels");
    // No tokenize endpoint declared: the sources say where the 8 measured counts came from.
    assert_eq!(doc["tokens"]["server_tokenizer"], Value::Null);
    assert_eq!(doc["tokens"]["canonical_tokenizer"], "o200k_base");
    let sources = doc["tokens"]["sources"].as_object().unwrap();
    assert_eq!(
        sources.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
        8,
        "{sources:?}"
    );
    assert!(!sources.contains_key("server-tokenizer"));
    assert!(
        doc["provenance"]["server_headers"]["server"]
            .as_str()
            .unwrap()
            .starts_with("bakeoff-mock/")
    );
    assert_eq!(doc["provenance"]["models"]["id"], "m");
    assert!(doc["harness"]["wall_s"].as_f64().is_some());
    assert!(doc["harness"]["figure_shifts"].is_array());
    // The whole process, start-up included: at least the harness's share of it.
    let process_cpu = doc["process"]["cpu_s"].as_f64().unwrap();
    assert!(
        process_cpu >= doc["harness"]["cpu_s"].as_f64().unwrap() - 0.011,
        "{process_cpu}"
    );
    assert!(doc["process"]["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
    assert!(doc["harness"]["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
    // `bakeoff measure` handed off to the lean binary beside it (cargo builds both).
    assert_eq!(doc["process"]["binary"], "bakeoff-measure");
    assert_eq!(doc["levels"].as_array().unwrap().len(), 2);
    let level = &doc["levels"][1];
    assert_eq!(
        level["load"],
        serde_json::json!({"kind": "concurrency", "concurrency": 2})
    );
    for field in [
        "ttft_ms",
        "ttfa_ms",
        "e2e_ms",
        "tpot_ms",
        "itl_ms",
        "icl_ms",
        "decode_tok_s_per_stream",
        "e2e_tok_s_per_stream",
        "canonical_e2e_tok_s_per_stream",
        "chars_per_s_per_stream",
    ] {
        assert!(level[field]["p50"].as_f64().is_some(), "{field}: {level}");
    }
    for field in [
        "aggregate_tok_s",
        "aggregate_canonical_tok_s",
        "aggregate_chars_per_s",
        "req_per_s",
    ] {
        assert!(level[field].as_f64().is_some(), "{field}");
    }
    assert_eq!(level["requests"], 4);
    // 1 warm-up + 6 rollout + 2 levels × 4 requests.
    assert_eq!(doc["records"].as_array().unwrap().len(), 15);
    assert!(doc["definitions"].as_array().unwrap().len() >= 10);
    assert!(
        doc["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["message"].as_str().unwrap().contains("stage 3/3"))
    );
    runtime.block_on(async { mock.shutdown().await.unwrap() });
}

#[test]
fn measure_json_names_each_error_class_alike_in_records_and_levels() {
    // Half the requests answer 500: one JSON holds failed records and per-level error counts.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mock = runtime.block_on(start_mock(vec![ModelProfile {
        ttft_ms: 2.0,
        inter_token_ms: Some(1.0),
        error_500_rate: 0.5,
        ..ModelProfile::named("flaky")
    }]));
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("flaky.json");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "measure",
            "--base-url",
            &mock.base_url(),
            "--model",
            "flaky",
            "--requests",
            "12",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "8",
            "--warmup",
            "0",
            "--retries",
            "0",
            "--no-rollout",
            "--json",
        ])
        .arg(&json_path)
        .env("BAKEOFF_LOG", "warn")
        .output()
        .expect("running bakeoff measure");
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(&json_path)
            .unwrap_or_else(|_| panic!("no JSON written: {}", String::from_utf8_lossy(&output.stderr))),
    )
    .unwrap();
    let mut in_records: HashMap<String, u64> = HashMap::new();
    for r in doc["records"].as_array().unwrap() {
        if let Some(class) = r["error_class"].as_str() {
            *in_records.entry(class.to_string()).or_default() += 1;
        }
    }
    let mut in_levels: HashMap<String, u64> = HashMap::new();
    for l in doc["levels"].as_array().unwrap() {
        for (class, n) in l["errors"].as_object().unwrap() {
            *in_levels.entry(class.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    assert!(
        in_records.get("http_5xx").is_some_and(|&n| n > 0 && n < 12),
        "some failed, some did not: {in_records:?}"
    );
    // No retries, no warm-ups: every failed record is one final failure of a level.
    assert_eq!(in_records, in_levels, "records[].error_class vs levels[].errors");
    let errors_doc = doc.to_string();
    assert!(!errors_doc.contains("http_server_error"), "one vocabulary");
    runtime.block_on(async { mock.shutdown().await.unwrap() });
}

#[tokio::test]
async fn calibrate_compares_against_the_ground_truth() {
    let options = bakeoff::engine::calibrate::CalibrateOptions {
        levels: vec![1, 8],
        seconds_per_level: 1,
        tokens: 16,
        inter_token_ms: 4.0,
        ttft_ms: 10.0,
        tokens_per_chunk: 1,
        chunked: vec![],
        chunk_tokens: 8,
        not_streamed: vec![],
        ingest: Some(bakeoff::engine::calibrate::IngestOptions {
            concurrency: 4,
            tokens: 40,
            inter_token_ms: 1.0,
            tokens_per_chunk: 8,
        }),
        mock_threads: 2,
        // The default: the mock in a process of its own (this build's `bakeoff` binary).
        mock: bakeoff::engine::calibrate::MockPlacement::Process {
            exe: env!("CARGO_BIN_EXE_bakeoff").into(),
        },
        // c=1 again over https, against the mock process served over TLS.
        tls_levels: vec![1],
        scrape_telemetry: false,
        scrape_blocks: 1,
    };
    let report = tokio::time::timeout(DEADLINE, bakeoff::app::calibrate::calibrate(&options, |_| {}))
        .await
        .expect("calibration ended in time")
        .expect("calibration ran");
    assert_eq!(report.levels.len(), 4);
    use bakeoff::engine::calibrate::LevelPurpose;
    let purposes: Vec<_> = report
        .levels
        .iter()
        .map(|l| (l.purpose, l.concurrency, l.tokens_per_chunk))
        .collect();
    assert_eq!(
        purposes,
        vec![
            (LevelPurpose::Latency, 1, 1),
            (LevelPurpose::Latency, 8, 1),
            (LevelPurpose::Ingest, 4, 8),
            (LevelPurpose::Latency, 1, 1),
        ]
    );
    let https: Vec<bool> = report.levels.iter().map(|l| l.https).collect();
    assert_eq!(https, [false, false, false, true]);
    // One timed path: the https level is kernel-stamped as the http ones are.
    for l in &report.levels {
        assert_eq!(l.clock, "kernel stamp", "{l:?}");
    }
    for l in &report.levels {
        assert!(l.requests > 0 && l.matched == l.requests, "{l:?}");
        assert!(
            l.mock_cpu_cores.is_some() && l.mock_cpu_s_per_million_tokens.is_some(),
            "{l:?}"
        );
        assert!(l.mock_ran.starts_with("own process on "), "{l:?}");
        // Judged against the mock's ground truth by causality, not speed: bakeoff cannot see a
        // token before the mock sent it, nor reach the mock before sending (one machine, one
        // clock; 1 ms for rounding). The upper bounds only catch a unit or sign slip (µs for
        // ms, a factor of 1000): how close the figures are is the calibration table's business
        // on a quiet machine, and a loaded 2-core machine delays reads by tens of ms.
        assert!(l.ttft_error_ms_p50.is_some_and(|e| e > -1.0 && e < 1000.0), "{l:?}");
        // The TTFT error split at the mock's timestamps: both halves measured, neither negative.
        let (late, gap) = (l.first_token_late_ms_p99.unwrap(), l.send_to_mock_ms_p99.unwrap());
        assert!(late >= 0.0 && gap >= 0.0 && late.max(gap) < 1000.0, "{l:?}");
        assert!(l.send_to_mock_ms_p50.is_some_and(|g| g > -1.0), "{l:?}");
        // Rates within a factor of two of the truth (a unit slip is a factor of 1000).
        assert!(l.decode_error_pct_p50.is_some_and(|e| e.abs() < 50.0), "{l:?}");
        assert!(l.aggregate_error_pct.is_some_and(|e| e.abs() < 50.0), "{l:?}");
    }
    assert_eq!(report.targets.len(), 6);
}

#[tokio::test]
async fn calibrate_covers_chunked_and_non_streamed_levels() {
    use bakeoff::engine::calibrate::LevelPurpose;
    let options = bakeoff::engine::calibrate::CalibrateOptions {
        levels: vec![1],
        seconds_per_level: 1,
        tokens: 48,
        inter_token_ms: 2.0,
        ttft_ms: 10.0,
        tokens_per_chunk: 1,
        chunked: vec![1, 4],
        chunk_tokens: 8,
        not_streamed: vec![1, 4],
        ingest: None,
        mock_threads: 2,
        // The default: the mock in a process of its own (this build's `bakeoff` binary).
        mock: bakeoff::engine::calibrate::MockPlacement::Process {
            exe: env!("CARGO_BIN_EXE_bakeoff").into(),
        },
        tls_levels: Vec::new(),
        scrape_telemetry: false,
        scrape_blocks: 1,
    };
    let report = tokio::time::timeout(DEADLINE, bakeoff::app::calibrate::calibrate(&options, |_| {}))
        .await
        .expect("calibration ended in time")
        .expect("calibration ran");
    let levels: Vec<_> = report
        .levels
        .iter()
        .map(|l| (l.purpose, l.concurrency, l.tokens_per_chunk, l.stream))
        .collect();
    assert_eq!(
        levels,
        vec![
            (LevelPurpose::Latency, 1, 1, true),
            (LevelPurpose::Chunked, 1, 8, true),
            (LevelPurpose::Chunked, 4, 8, true),
            (LevelPurpose::NotStreamed, 1, 1, false),
            (LevelPurpose::NotStreamed, 4, 1, false),
        ]
    );
    // Errors against the mock's ground truth are bounded loosely (never a speed): on a shared
    // 2-core machine a few ms of scheduling land in one figure or another.
    for l in &report.levels {
        assert!(l.requests > 0 && l.matched == l.requests, "{l:?}");
        assert!(l.e2e_error_ms_p50.is_some_and(|e| e.abs() < 50.0), "{l:?}");
        assert!(l.aggregate_error_pct.is_some_and(|e| e.abs() < 25.0), "{l:?}");
        if l.stream {
            assert!(
                l.ttft_error_ms_p50.is_some() && l.decode_error_pct_p50.is_some(),
                "{l:?}"
            );
            assert!(l.itl_error_pct_p50.is_some() && l.not_measured.is_empty(), "{l:?}");
            // Close to the truth, or the harness says why not: on a starved machine the kernel
            // merges queued packets and ITL reads short; the level must then be flagged.
            let close = l.ttft_error_ms_p50.is_some_and(|e| e.abs() < 50.0)
                && l.decode_error_pct_p50.is_some_and(|e| e.abs() < 25.0)
                && l.itl_error_pct_p50.is_some_and(|e| e.abs() < 25.0);
            assert!(close || (l.unreliable && !l.unreliable_reasons.is_empty()), "{l:?}");
        } else {
            assert!(
                l.ttft_error_ms_p50.is_none() && l.decode_error_pct_p50.is_none() && l.itl_error_pct_p50.is_none(),
                "{l:?}"
            );
            assert_eq!(l.not_measured.len(), 3, "{l:?}");
            for figure in ["TTFT", "ITL", "decode tok/s"] {
                assert!(
                    l.not_measured
                        .iter()
                        .any(|n| n.starts_with(&format!("{figure}: not measured"))),
                    "{figure}: {l:?}"
                );
            }
        }
    }
    // The printed report says "not measured" where a figure cannot exist, never a number.
    let mut out = Vec::new();
    bakeoff::cli::calibrate::print_calibration(&mut out, &report).unwrap();
    let out = String::from_utf8(out).unwrap();
    let row = out
        .lines()
        .find(|l| l.contains("not streamed c=4"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        row.matches("not measured").count(),
        9,
        "TTFT p50/p99, its two sides p50/p99, ITL, decode p50/p99: {row}"
    );
    assert!(out.contains("chunked c=4"), "{out}");
    assert!(
        out.contains("not streamed c=1: TTFT: not measured (not streamed"),
        "{out}"
    );
}

mod store {
    use bakeoff::domain::calibers::HarnessReport;
    use bakeoff::domain::run::{NewRun, RunConfig};
    use bakeoff::store::StoreError;

    use crate::support::db::{TestStore, each_backend};

    each_backend!(the_harness_report_is_kept_with_its_run);
    async fn the_harness_report_is_kept_with_its_run(t: TestStore) {
        let store = &t.store;
        let file = bakeoff::engine::endpoint_measure::synthetic_evalset(&[8], 1, 4).unwrap();
        let version = store.save_evalset_version(&file).await.unwrap();
        let run = store
            .create_run(&NewRun {
                name: "harness".into(),
                evalset_version_id: version,
                candidate_ids: vec![],
                config: RunConfig::default(),
            })
            .await
            .unwrap();
        assert_eq!(store.get_run_harness(run).await.unwrap(), None, "{}", t.backend);
        let report = HarnessReport {
            bakeoff_version: "0.1.0".into(),
            host: "h".into(),
            cores: 2,
            wall_s: 3.5,
            cpu_s: Some(0.25),
            cpu_share: Some(0.036),
            streamed_tokens: 1000,
            cpu_s_per_million_tokens: Some(250.0),
            open_loop: true,
            schedule_lag_ms: None,
            client_queue_ms: None,
            runtime_lag_ms: None,
            lag_bound_ms: 10.0,
            unreliable: true,
            reasons: vec!["p99 schedule lag 12.0 ms exceeds 10 ms".into()],
            lag_spikes: bakeoff::domain::calibers::LagSpikes {
                threshold_ms: 5.0,
                spikes: vec![(1_000, 9_000, 8.0)],
                measured_requests: 40,
                marked_requests: 1,
            },
            figure_shifts: vec![bakeoff::domain::self_check::FigureShift {
                figure: "TTFT p99".into(),
                reported_ms: 61.0,
                shift_ms: 7.5,
                bound_ms: 1.0,
            }],
            process_cpu_s: Some(0.4),
            peak_rss_bytes: Some(30_000_000),
        };
        store.set_run_harness(run, &report).await.unwrap();
        assert_eq!(
            store.get_run_harness(run).await.unwrap(),
            Some(report.clone()),
            "{}",
            t.backend
        );
        let again = HarnessReport {
            unreliable: false,
            reasons: vec![],
            ..report
        };
        store.set_run_harness(run, &again).await.unwrap();
        assert_eq!(store.get_run_harness(run).await.unwrap(), Some(again.clone()));
        assert!(matches!(
            store.set_run_harness(run + 999, &again).await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(store.get_run_harness(run + 999).await.unwrap(), None);
    }
}
