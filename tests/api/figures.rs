//! Every figure right against the mock's ground truth, and the same on every page (issue 14,
//! items 1–6b; issue 13, item 3): multi-token first chunks, non-streamed requests at c=1 and
//! c=4, stall and first-token timeouts, `measure`'s exit status, and one sweep run read back from
//! the run page, the scorecard, its chart data, every export, compare, history and
//! `measure --json`.
use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use bakeoff::domain::calibers::{LevelFigures, RequestFigures, itl_ms};
use bakeoff::domain::candidate::{CandidateSpec, TokenizeEndpoint, TokenizeKind};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::load::{Load, LoadShape};
use bakeoff::domain::run::{RequestRecord, RunConfig};
use bakeoff::domain::thresholds::key::MetricKey;
use bakeoff::domain::thresholds::{Comparator, ThresholdRule};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::{MeasureOutcome, MeasureSpec, measure, synthetic_evalset};
use bakeoff::engine::run::pool::request_id;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use serde_json::Value;

use crate::support::app::{spawn_app, spawn_app_on, text_of};
use crate::support::db::{TestStore, each_backend};

const DEADLINE: Duration = Duration::from_secs(90);

async fn start_mock(profiles: Vec<ModelProfile>) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: Vec::new(),
        seed: 14,
    })
    .await
}

fn config(load: LoadShape, requests: u32, max_tokens: u32) -> RunConfig {
    RunConfig {
        concurrency: 1,
        repetitions: 1,
        warmup_requests: 0,
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        timeout_secs: 30,
        retries: 0,
        stream: true,
        load,
        staged_rollout: false,
        requests_per_level: Some(requests),
        ..RunConfig::default()
    }
}

async fn run(mock: &MockServer, model: &str, evalset: EvalSetFile, config: RunConfig) -> MeasureOutcome {
    let candidate = CandidateSpec::openai_chat(format!("figures {model}"), mock.base_url(), model);
    run_candidate(candidate, model, evalset, config).await
}

async fn run_candidate(
    candidate: CandidateSpec,
    model: &str,
    evalset: EvalSetFile,
    config: RunConfig,
) -> MeasureOutcome {
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let spec = MeasureSpec {
        candidate: crate::support::checked::admin_new(&candidate),
        evalset,
        config,
        run_name: format!("figures {model}"),
    };
    tokio::time::timeout(DEADLINE, measure(&store, spec, Cancel::never()))
        .await
        .expect("the measurement ended in time")
        .expect("the measurement ran")
}

/// The mock's record of every request, by the client's request id.
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

/// The server's record of a measured request.
fn truth_of<'a>(truth: &'a HashMap<String, Value>, file: &EvalSetFile, r: &RequestRecord) -> &'a Value {
    let index = file
        .cases
        .iter()
        .position(|c| *c.id == *r.case_id)
        .expect("a case of the file");
    let id = request_id(r.run_id, r.candidate_id, r.phase, index, r.repetition, r.attempt);
    truth.get(&id).unwrap_or_else(|| panic!("ground truth for {id}"))
}

fn level_at(o: &MeasureOutcome, c: u32) -> &LevelFigures {
    o.figures
        .levels
        .iter()
        .find(|l| l.load == Load::Concurrency { concurrency: c })
        .unwrap_or_else(|| panic!("a level at c={c}: {:?}", o.figures.levels))
}

fn within(measured: f64, truth: f64, rel: f64) -> bool {
    (measured - truth).abs() <= rel * truth.abs()
}

// ------------------------------------------------------------------ item 1: first chunk

#[tokio::test]
async fn decode_and_itl_leave_the_first_chunks_tokens_out() {
    // 8 tokens per chunk every 40 ms (5 ms a token), the first chunk too: decode 200 tok/s.
    let profile = ModelProfile {
        ttft_ms: 30.0,
        inter_token_ms: Some(5.0),
        tokens_per_chunk: 8,
        batch_first_chunk: true,
        ..ModelProfile::named("chunky")
    };
    let mock = start_mock(vec![profile]).await;
    let file = synthetic_evalset(&[16], 6, 64).unwrap();
    let o = run(
        &mock,
        "chunky",
        file.clone(),
        config(LoadShape::Levels { levels: vec![1] }, 6, 64),
    )
    .await;
    let level = level_at(&o, 1);
    assert_eq!(level.succeeded, 6, "{level:?}");
    let truth = ground_truth(&mock).await;
    let mut old_formula = Vec::new();
    let mut server = Vec::new();
    for r in o.records.iter().filter(|r| !r.is_warmup) {
        let t = truth_of(&truth, &file, r);
        assert_eq!(r.output_tokens, Some(64));
        assert_eq!(r.chunks.len(), 8, "{:?}", r.chunks);
        let (first, last) = (
            t["first_token_ms"].as_f64().unwrap(),
            t["last_token_ms"].as_f64().unwrap(),
        );
        // The server's own decode rate: the 56 tokens after its first chunk.
        server.push(56.0 / ((last - first) / 1000.0));
        let span = (r.last_token_us.get().unwrap() - r.ttft_us().unwrap()) as f64 / 1e6;
        old_formula.push(63.0 / span);
    }
    server.sort_by(f64::total_cmp);
    old_formula.sort_by(f64::total_cmp);
    let truth_decode = server[server.len() / 2];
    let decode = level.decode_tok_s_per_stream.as_ref().unwrap().p50;
    let itl = level.itl_ms.as_ref().unwrap();
    eprintln!(
        "8-token chunks: decode p50 {decode:.1} tok/s (old (N−1)/span formula {:.1}), server {truth_decode:.1}; ITL p50 {:.3} ms (n={})",
        old_formula[old_formula.len() / 2],
        itl.p50,
        itl.n
    );
    assert!(within(decode, truth_decode, 0.03), "{decode} vs {truth_decode}");
    assert!(
        !within(old_formula[old_formula.len() / 2], truth_decode, 0.05),
        "the old formula overstates by more than 5 %: the test can tell them apart"
    );
    assert_eq!(itl.n, 6 * 56, "N − k₁ samples per stream");
    assert!(within(itl.p50, 5.0, 0.05), "ITL p50 {}", itl.p50);
    // TPOT: (E2E − TTFT) / 56 ≈ 5 ms.
    assert!(within(level.tpot_ms.as_ref().unwrap().p50, 5.0, 0.1));
}

// ------------------------------------------------------- item 2: server-tokenizer recounts

#[tokio::test]
async fn server_tokenizer_recounts_attribute_tokens_to_chunks_exactly() {
    // Streams without usage, recounted after the load by the mock's own tokenize endpoint (the
    // tokenizer its streams are cut by): one token a chunk, then 8-token chunks (the first one
    // full too). 4 ms between tokens, no jitter.
    for (model, per_chunk, how) in [("single", 1u32, "one-per-chunk"), ("octet", 8, "server-prefixes")] {
        let profile = ModelProfile {
            ttft_ms: 20.0,
            inter_token_ms: Some(4.0),
            tokens_per_chunk: per_chunk,
            batch_first_chunk: per_chunk > 1,
            no_usage_in_stream: true,
            ..ModelProfile::named(model)
        };
        let mock = start_mock(vec![profile]).await;
        let file = synthetic_evalset(&[16], 6, 48).unwrap();
        let candidate = CandidateSpec {
            tokenize: Some(TokenizeEndpoint {
                kind: TokenizeKind::LlamaCpp,
                path: "/tokenize".into(),
            }),
            ..CandidateSpec::openai_chat(format!("figures {model}"), mock.base_url(), model)
        };
        let o = run_candidate(
            candidate,
            model,
            file.clone(),
            config(LoadShape::Levels { levels: vec![1] }, 6, 48),
        )
        .await;
        let level = level_at(&o, 1);
        assert_eq!(level.succeeded, 6, "{model}: {level:?}");
        assert_eq!(level.token_sources.get("server-tokenizer"), Some(&6), "{model}");
        assert_eq!(
            level.chunk_attribution.get(how),
            Some(&6),
            "{model}: {:?}",
            level.chunk_attribution
        );
        let truth = ground_truth(&mock).await;
        for r in o.records.iter().filter(|r| !r.is_warmup) {
            let t = truth_of(&truth, &file, r);
            let n = t["tokens_sent"].as_u64().unwrap() as u32;
            assert_eq!(r.output_tokens, Some(n), "{model}: the server's count");
            assert_eq!(
                r.chunks.len() as u64,
                t["token_chunks_sent"].as_u64().unwrap(),
                "{model}"
            );
            assert_eq!(r.chunk_attribution.map(|a| a.as_str()), Some(how), "{model}");
            // Every chunk carries exactly what the mock put in it.
            assert!(r.chunks.iter().all(|c| c.1 == per_chunk), "{model}: {:?}", r.chunks);
            // Per stream, against the mock's own first and last token (it logs no other token
            // times): decode (N − k₁) / (last − first), and the mean ITL, its inverse.
            let (first, last) = (
                t["first_token_ms"].as_f64().unwrap(),
                t["last_token_ms"].as_f64().unwrap(),
            );
            let server_decode = f64::from(n - per_chunk) / ((last - first) / 1000.0);
            let decode = RequestFigures::of(r).unwrap().decode_tok_s.unwrap();
            let gaps = itl_ms(r);
            let samples: u32 = gaps.iter().map(|g| g.1).sum();
            let mean_itl = gaps.iter().map(|(gap, k)| gap * f64::from(*k)).sum::<f64>() / f64::from(samples);
            eprintln!(
                "{model}: decode {decode:.1} tok/s (mock {server_decode:.1}), ITL mean {mean_itl:.3} ms (mock {:.3})",
                1000.0 / server_decode
            );
            assert_eq!(samples, n - per_chunk, "{model}: N − k₁ ITL samples");
            assert!(
                within(decode, server_decode, 0.03),
                "{model}: decode {decode} vs the mock's {server_decode}"
            );
            assert!(
                within(mean_itl, 1000.0 / server_decode, 0.03),
                "{model}: ITL mean {mean_itl}"
            );
        }
        let itl = level.itl_ms.as_ref().unwrap();
        assert_eq!(
            itl.n,
            6 * (48 - per_chunk) as usize,
            "{model}: N − k₁ samples per stream"
        );
        // The terminal table names the attribution beside the token source.
        let mut out = Vec::new();
        bakeoff::cli::measure_endpoint::print_outcome(&mut out, &o).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains(&format!("server-tokenizer 6/6 · per chunk: {how} 6")),
            "{model}: {out}"
        );
    }
}

// ---------------------------------------------------------------- item 3: not streamed

/// The server's tokens spread evenly over each request's time in the server (received → body
/// sent), counted inside the client's windows: the mock's ground truth for the aggregate.
fn server_rate_in_windows(level: &LevelFigures, records: &[&RequestRecord], truth: &[&Value]) -> f64 {
    let windows = &level.repetitions[0].windows;
    let secs: f64 = windows.iter().map(|w| w.secs()).sum();
    let mut tokens = 0.0;
    for (_, t) in records.iter().zip(truth) {
        let start = t["received_unix_ms"].as_f64().unwrap() * 1000.0;
        let end = start + t["last_token_ms"].as_f64().unwrap() * 1000.0;
        let n = t["tokens_sent"].as_f64().unwrap();
        for w in windows {
            let overlap = end.min(w.end_us as f64) - start.max(w.start_us as f64);
            if overlap > 0.0 {
                tokens += n * overlap / (end - start);
            }
        }
    }
    tokens / secs
}

#[tokio::test]
async fn non_streamed_requests_have_no_decode_figures_and_a_true_aggregate() {
    let profile = ModelProfile {
        ttft_ms: 20.0,
        inter_token_ms: Some(2.0),
        ..ModelProfile::named("whole")
    };
    let mock = start_mock(vec![profile]).await;
    let file = synthetic_evalset(&[16], 24, 48).unwrap();
    let o = run(
        &mock,
        "whole",
        file.clone(),
        RunConfig {
            stream: false,
            ..config(LoadShape::Levels { levels: vec![1, 4] }, 24, 48)
        },
    )
    .await;
    let truth = ground_truth(&mock).await;
    for c in [1u32, 4] {
        let level = level_at(&o, c);
        assert_eq!(level.succeeded, 24, "c={c}");
        assert!(
            level.tpot_ms.is_none()
                && level.itl_ms.is_none()
                && level.icl_ms.is_none()
                && level.decode_tok_s_per_stream.is_none(),
            "c={c}: nothing between the first token and the last to time"
        );
        let json = serde_json::to_value(level).unwrap();
        for field in ["tpot_ms", "itl_ms", "icl_ms", "decode_tok_s_per_stream"] {
            assert_eq!(json[field], Value::Null, "c={c}: {field} is null, never 0");
        }
        let records: Vec<&RequestRecord> = o
            .records
            .iter()
            .filter(|r| !r.is_warmup && r.concurrency == c)
            .collect();
        let truths: Vec<&Value> = records.iter().map(|r| truth_of(&truth, &file, r)).collect();
        let server = server_rate_in_windows(level, &records, &truths);
        let got = level.aggregate_tok_s.unwrap();
        eprintln!(
            "non-streamed c={c}: aggregate {got:.1} tok/s (steady window), whole run {:.1}, mock truth {server:.1}",
            level.whole_run_tok_s.unwrap()
        );
        assert!(within(got, server, 0.02), "c={c}: {got} vs the mock's {server}");
        assert!(level.whole_run_tok_s.unwrap() <= got * 1.01, "c={c}");
    }
    // The terminal table says so instead of printing zeros.
    let mut out = Vec::new();
    bakeoff::cli::measure_endpoint::print_outcome(&mut out, &o).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("not measured"), "{out}");
}

// ------------------------------------------------------------------ item 6: timeouts

#[tokio::test]
async fn a_stalled_stream_fails_on_the_stall_timeout_not_the_total() {
    let profile = ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        stall_probability: 1.0,
        stall_ms: 20_000.0,
        ..ModelProfile::named("stalls")
    };
    let mock = start_mock(vec![profile]).await;
    let started = std::time::Instant::now();
    let o = run(
        &mock,
        "stalls",
        synthetic_evalset(&[16], 2, 8).unwrap(),
        RunConfig {
            timeout_secs: 60,
            stall_timeout_secs: Some(1),
            ..config(LoadShape::Levels { levels: vec![2] }, 2, 8)
        },
    )
    .await;
    let took = started.elapsed();
    let level = level_at(&o, 2);
    assert_eq!(level.errors.get("stall_timeout"), Some(&2), "{:?}", level.errors);
    assert!(
        took < Duration::from_secs(10),
        "1 s stall timeout, not the 60 s total: {took:?}"
    );
    let detail = o.records[0].error_detail().unwrap_or_default();
    assert!(detail.contains("no token for 1.0 s"), "{detail}");

    // A server that never sends a token: first_token_timeout, at its own bound.
    let silent = ModelProfile {
        ttft_ms: 20_000.0,
        ..ModelProfile::named("silent")
    };
    let mock = start_mock(vec![silent]).await;
    let started = std::time::Instant::now();
    let o = run(
        &mock,
        "silent",
        synthetic_evalset(&[16], 1, 8).unwrap(),
        RunConfig {
            timeout_secs: 60,
            first_token_timeout_secs: Some(1),
            ..config(LoadShape::Levels { levels: vec![1] }, 1, 8)
        },
    )
    .await;
    assert_eq!(level_at(&o, 1).errors.get("first_token_timeout"), Some(&1));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The run form's fields for a short run of the tiny eval set against one candidate.
fn run_form<'a>(version: &'a str, candidate: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut fields = vec![
        ("evalset_version", version),
        ("candidate", candidate),
        ("concurrency", "2"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("retries", "0"),
        ("stream", "on"),
        ("load_shape", "fixed"),
    ];
    fields.extend_from_slice(extra);
    fields
}

/// The one run the app holds, run to its end.
async fn the_run_to_its_end(app: &crate::support::app::TestApp) -> bakeoff::domain::run::Run {
    let run = app.store.list_runs(1, 0).await.unwrap()[0].run.clone();
    tokio::time::timeout(DEADLINE, app.state.runner.wait(run.id))
        .await
        .expect("the run ended in time");
    app.store.get_run(run.id).await.unwrap().unwrap()
}

#[tokio::test]
async fn the_run_form_sets_the_stage_timeouts_and_the_executor_keeps_them() {
    let app = spawn_app().await;
    let mock = start_mock(vec![ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        stall_probability: 1.0,
        stall_ms: 20_000.0,
        ..ModelProfile::named("stalls-model")
    }])
    .await;
    let version = app.create_evalset().await.to_string();
    let candidate = app.create_candidate("stalls", &mock.base_url()).await.to_string();

    // Offered folded away, each with its range and default.
    let form = app.get_html("/runs/new").await;
    assert_eq!(form.count("details.advanced:not([open]) #f-stall_timeout_secs"), 1);
    assert_eq!(form.count("details.advanced #f-first_token_timeout_secs"), 1);
    assert!(form.text("#f-stall_timeout_secs-help").contains("Blank: 20 s"));
    assert!(form.text("#f-first_token_timeout_secs-help").contains("Blank: 60 s"));

    // Out of range: a field error naming the range, the section unfolded, nothing stored.
    for (extra, field, message) in [
        (
            vec![("timeout_secs", "60"), ("stall_timeout_secs", "0")],
            "stall_timeout_secs",
            "must be between 1 and 3600, got 0",
        ),
        (
            vec![("timeout_secs", "60"), ("first_token_timeout_secs", "5000")],
            "first_token_timeout_secs",
            "must be between 1 and 3600, got 5000",
        ),
        (
            vec![("timeout_secs", "30"), ("stall_timeout_secs", "45")],
            "stall_timeout_secs",
            "must be between 1 and the whole-request timeout (30 s), got 45",
        ),
    ] {
        let page = app
            .post_form_html("/runs", &run_form(&version, &candidate, &extra))
            .await;
        assert_eq!(page.status, 422, "{field}");
        let error = page.text(&format!("#f-{field}-error"));
        assert!(error.contains(message), "{field}: {error}");
        assert_eq!(page.count("details.advanced[open]"), 1, "{field}");
        assert_eq!(app.run_count().await, 0);
    }

    // A 1 s stall timeout: stored with the run, shown in its conditions, and every stalled
    // stream fails stall_timeout long before the 60 s whole-request timeout.
    let started = std::time::Instant::now();
    let r = app
        .post_form(
            "/runs",
            &run_form(
                &version,
                &candidate,
                &[("timeout_secs", "60"), ("stall_timeout_secs", "1")],
            ),
        )
        .await;
    assert_eq!(r.status(), 303);
    let run = the_run_to_its_end(&app).await;
    let took = started.elapsed();
    assert_eq!(run.config.stall_timeout_secs, Some(1));
    assert_eq!(run.config.first_token_timeout_secs, None);
    let records = app.store.list_request_records(run.id).await.unwrap();
    let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.is_warmup).collect();
    assert_eq!(measured.len(), 3, "{records:?}");
    for r in &measured {
        assert_eq!(
            r.error_class,
            Some(bakeoff::domain::run::ErrorClass::StallTimeout),
            "{:?}",
            r.error_detail()
        );
        assert!(r.error_detail().unwrap_or_default().contains("no token for 1.0 s"));
    }
    assert!(
        took < Duration::from_secs(30),
        "1 s stalls, not the 60 s total: {took:?}"
    );
    let page = app.get_html(&format!("/runs/{}", run.id)).await;
    let conditions = page.text(".conditions");
    assert!(
        conditions.contains("60 s whole request · first token 60 s · stall 1 s"),
        "{conditions}"
    );
}

#[tokio::test]
async fn the_run_page_counts_warm_ups_as_configured_and_the_staged_start_apart() {
    let app = spawn_app().await;
    let mock = start_mock(vec![ModelProfile {
        ttft_ms: 2.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named("steady-model")
    }])
    .await;
    let version = app.create_evalset().await.to_string();
    let candidate = app.create_candidate("steady", &mock.base_url()).await.to_string();
    let r = app
        .post_form(
            "/runs",
            &run_form(
                &version,
                &candidate,
                &[
                    ("timeout_secs", "20"),
                    ("warmup_requests", "2"),
                    ("staged_rollout", "on"),
                ],
            ),
        )
        .await;
    assert_eq!(r.status(), 303);
    let run = the_run_to_its_end(&app).await;
    assert_eq!(run.config.warmup_requests, 2);
    let records = app.store.list_request_records(run.id).await.unwrap();
    let staged = records
        .iter()
        .filter(|r| r.phase == bakeoff::domain::run::Phase::Smoke)
        .count();
    let warm_ups = records
        .iter()
        .filter(|r| r.is_warmup && r.phase != bakeoff::domain::run::Phase::Smoke)
        .count();
    assert!(staged > 0 && warm_ups == 2, "{staged} staged, {warm_ups} warm-ups");

    let page = app.get_html(&format!("/runs/{}", run.id)).await;
    let progress = page.text(".progress-list .progress-text");
    assert!(
        progress.contains(" · 2 warm-ups (excluded) · ")
            && progress.contains(&format!(" · {staged} staged-start requests (excluded)")),
        "{progress}"
    );
    assert!(
        !page.text("main").contains(&format!("{} warm-ups", staged + 2)),
        "staged-start requests are not warm-ups"
    );
    let conditions = page.text(".conditions");
    assert!(
        conditions.contains("warm-ups (excluded) 2") && conditions.contains("staged start (excluded) on"),
        "{conditions}"
    );
}

/// An extraction set whose second answer is longer than the run's max_tokens (20 mock tokens:
/// the first answer is 16).
const CUT_JSON_EVALSET: &str = r#"{"bakeoff_evalset":1,"name":"cut json","task":"extraction","prompt":"Extract the record: {{text}}","graders":[{"kind":"json-fields"}]}
{"id":"short","vars":{"text":"Ada, 1815"},"expected":{"name":"Ada","year":1815}}
{"id":"long","vars":{"text":"Grace Hopper, born 1906-12-09 in New York City"},"expected":{"born":"1906-12-09","city":"New York City","name":"Grace Hopper"}}
"#;

#[tokio::test]
async fn an_answer_cut_off_by_max_tokens_fails_json_fields_with_the_parse_error() {
    let app = spawn_app().await;
    let file = EvalSetFile::parse("cut.jsonl", CUT_JSON_EVALSET).unwrap();
    // The mock answers every case right, in as many tokens as max_tokens allows.
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 2.0,
            inter_token_ms: Some(1.0),
            ..ModelProfile::named("extractor-model")
        }],
        answer_keys: vec![file.clone()],
        seed: 14,
    })
    .await;
    let version = app.store.save_evalset_version(&file).await.unwrap().to_string();
    let candidate = app.create_candidate("extractor", &mock.base_url()).await.to_string();
    let r = app
        .post_form(
            "/runs",
            &run_form(&version, &candidate, &[("timeout_secs", "20"), ("max_tokens", "20")]),
        )
        .await;
    assert_eq!(r.status(), 303);
    let run = the_run_to_its_end(&app).await;
    let records = app.store.list_request_records(run.id).await.unwrap();
    let of = |case: &str| {
        records
            .iter()
            .find(|r| !r.is_warmup && &*r.case_id == case)
            .unwrap_or_else(|| panic!("a record of {case}: {records:?}"))
    };
    let short = of("short");
    assert!(short.succeeded() && short.grades[0].passed, "{:?}", short.grades);

    // The cut-off answer: a successful request whose text stops mid-object.
    let long = of("long");
    assert!(long.succeeded(), "{:?}", long.error_class);
    assert_eq!(long.finish_reason.as_deref(), Some("length"));
    let expected = file.cases[1].expected_text().unwrap();
    assert!(
        expected.starts_with(long.output().trim()) && long.output().trim().len() < expected.len(),
        "cut off: {:?}",
        long.output()
    );
    let grade = &long.grades[0];
    assert!(!grade.passed, "{grade:?}");
    assert!(
        grade
            .reason
            .starts_with("unusable answer: the JSON is cut off (EOF while parsing")
            && grade.reason.ends_with("its 3 expected fields count as wrong"),
        "{}",
        grade.reason
    );
    let detail = bakeoff::domain::grading::FieldsDetail::from_grade(grade).unwrap();
    assert!(detail.unusable.is_some());
    assert_eq!(detail.fields.len(), 3);
    assert!(
        detail
            .fields
            .iter()
            .all(|f| f.outcome == bakeoff::domain::grading::Outcome::Wrong),
        "attempted, unusable: wrong, never missing: {:?}",
        detail.fields
    );

    // The run page counts it: 1 unusable answer, its 3 fields wrong, none missing.
    let page = app.get_html(&format!("/runs/{}", run.id)).await;
    let figure = |name: &str| {
        let text = page.text(&format!(".quality-candidate dl [data-figure=\"{name}\"] dd"));
        number(&text) as u64
    };
    assert_eq!(
        (figure("unusable"), figure("wrong"), figure("missing")),
        (1, 3, 0),
        "{}",
        page.text(".quality-candidate")
    );
    // The case's drill-down shows the parser's message (escaped like all model text).
    let cases = app.get_html(&format!("/runs/{}/cases", run.id)).await;
    let reasons = cases.texts("table.grades").join(" | ");
    assert!(
        reasons.contains("unusable answer: the JSON is cut off (EOF while parsing"),
        "{reasons}"
    );
}

#[test]
fn measure_exits_non_zero_when_every_measured_request_failed() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mock = runtime.block_on(start_mock(vec![ModelProfile {
        error_500_rate: 1.0,
        ..ModelProfile::named("broken")
    }]));
    let output = Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "measure",
            "--base-url",
            &mock.base_url(),
            "--model",
            "broken",
            "--requests",
            "3",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "8",
            "--warmup",
            "0",
            "--retries",
            "0",
            "--no-rollout",
        ])
        .env("BAKEOFF_LOG", "warn")
        .output()
        .expect("running bakeoff measure");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("all 3 measured requests failed (http_5xx ×3)"),
        "{stderr}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(["measure", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Exit status:") && help.contains("3  the run finished but every measured request failed"));
    assert!(help.contains("--stall-timeout") && help.contains("--first-token-timeout"));
}

// ------------------------------------------------------- item 4: one figure everywhere

/// The first number in a text and the decimals it is printed with
/// ("1,234.5 tok/s (min–max …)" → (1234.5, 1)).
fn number_shown(text: &str) -> (f64, i32) {
    let start = text
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or_else(|| panic!("no number in {text:?}"));
    let digits: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    let digits = digits.trim_end_matches('.');
    let decimals = digits.split_once('.').map_or(0, |(_, d)| d.len() as i32);
    let value = digits.parse().unwrap_or_else(|_| panic!("no number in {text:?}"));
    (value, decimals)
}

fn number(text: &str) -> f64 {
    number_shown(text).0
}

/// A shown figure is `value` rounded to the digits it is printed with: the same figure computed
/// another way (another percentile method, other requests) fails here.
fn shows(text: &str, value: f64, place: &str) {
    let (shown, decimals) = number_shown(text);
    let half_unit = 0.5 * 10f64.powi(-decimals);
    assert!(
        (shown - value).abs() <= half_unit * (1.0 + 1e-9) + value.abs() * 1e-12,
        "{place}: shows {text:?}, the figure is {value}"
    );
}

/// An unrounded figure (JSON) is `value`.
fn equals(got: &Value, value: f64, place: &str) {
    let got = got.as_f64().unwrap_or_else(|| panic!("{place}: no number: {got}"));
    assert!(within(got, value, 1e-9), "{place}: {got}, the figure is {value}");
}

/// One level's figures as `measure --json` gives them: what every page must show.
#[derive(Debug, Clone, Copy)]
struct Reference {
    ttft_p50: f64,
    e2e_p50: f64,
    decode_p50: f64,
    steady: f64,
    whole_run: f64,
}

fn references(doc: &Value, concurrencies: &[u32]) -> HashMap<u32, Reference> {
    concurrencies
        .iter()
        .map(|&c| {
            let l = doc["levels"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["load"]["concurrency"] == c)
                .unwrap_or_else(|| panic!("measure --json has c={c}"));
            let f = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("measure --json c={c}: {v}"));
            (
                c,
                Reference {
                    ttft_p50: f(&l["ttft_ms"]["p50"]),
                    e2e_p50: f(&l["e2e_ms"]["p50"]),
                    decode_p50: f(&l["decode_tok_s_per_stream"]["p50"]),
                    steady: f(&l["aggregate_tok_s"]),
                    whole_run: f(&l["whole_run_tok_s"]),
                },
            )
        })
        .collect()
}

/// The rules the sweep is judged by: the aggregate at the run's own level (c=1) and at c=4,
/// the latencies and per-stream decode at c=2.
fn sweep_rules() -> Vec<ThresholdRule> {
    [
        ("aggregate_tok_s", Comparator::AtLeast, 1.0),
        ("aggregate_tok_s@c=4", Comparator::AtLeast, 1.0),
        ("ttft_p50_ms@c=2", Comparator::AtMost, 60_000.0),
        ("e2e_p50_ms@c=2", Comparator::AtMost, 60_000.0),
        ("decode_tok_s_p50@c=2", Comparator::AtLeast, 1.0),
    ]
    .into_iter()
    .map(|(metric, comparator, value)| ThresholdRule {
        metric: metric.into(),
        comparator,
        value,
        unit: MetricKey::parse(metric).unwrap().def().unit.stored_name().into(),
        rationale: String::new(),
    })
    .collect()
}

/// The figure a rule judges, from the reference.
fn rule_figure(metric: &str, refs: &HashMap<u32, Reference>) -> f64 {
    let key = MetricKey::parse(metric).unwrap();
    let r = refs[&key.concurrency.unwrap_or(1)];
    match key.base {
        "aggregate_tok_s" => r.steady,
        "ttft_p50_ms" => r.ttft_p50,
        "e2e_p50_ms" => r.e2e_p50,
        "decode_tok_s_p50" => r.decode_p50,
        other => panic!("no reference for {other}"),
    }
}

/// The cells of a table row (header cell included).
fn row_cells(row: &scraper::ElementRef<'_>) -> Vec<String> {
    row.children()
        .filter_map(scraper::ElementRef::wrap)
        .map(|e| text_of(&e))
        .collect()
}

each_backend!(one_sweep_shows_the_same_figure_on_every_page);
async fn one_sweep_shows_the_same_figure_on_every_page(db: TestStore) {
    // Two slots: throughput stops growing after c=2, so the sweep has a knee.
    let profile = ModelProfile {
        ttft_ms: 20.0,
        inter_token_ms: Some(3.0),
        slots: Some(2),
        ..ModelProfile::named("two-slots")
    };
    let mock = start_mock(vec![profile]).await;
    let b = db.backend;
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("sweep.json");
    // Measured by the real command, stored in the app's database (on a blocking thread: the
    // mock answers on this test's runtime).
    let mut command = Command::new(env!("CARGO_BIN_EXE_bakeoff"));
    command
        .args([
            "measure",
            "--base-url",
            &mock.base_url(),
            "--model",
            "two-slots",
            "--sweep",
            "--sweep-max",
            "4",
            "--requests",
            "12",
            "--repetitions",
            "2",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "24",
            "--warmup",
            "1",
            "--no-rollout",
            "--timeout",
            "20",
            "--store",
            "--database-url",
            &url,
            "--json",
        ])
        .arg(&json_path)
        .env("BAKEOFF_LOG", "warn")
        .env(
            "BAKEOFF_SECRET_KEY",
            crate::support::db::TEST_SERVER_KEY
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        );
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("running bakeoff measure");
    assert!(
        output.status.success(),
        "{b}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let run_id = doc["stored_run_id"].as_i64().expect("the run was stored");
    let concurrencies = [1u32, 2, 4];
    let refs = references(&doc, &concurrencies);
    let knee = doc["knees"][0]["concurrency"].as_u64().expect("a knee") as u32;

    let app = spawn_app_on(db).await;
    let run = app.store.get_run(run_id).await.unwrap().unwrap();
    let candidate = run.candidate_ids[0];

    // The run page's per-level tables, columns found by their heads.
    let (page, _) = app.page(&format!("/runs/{run_id}")).await;
    let column = |table: &str, head: &str| -> usize {
        let heads = page.texts(&format!(".{table} thead th"));
        heads
            .iter()
            .position(|h| h.starts_with(head))
            .unwrap_or_else(|| panic!("{b}: no column {head:?} in {heads:?}"))
    };
    let level_rows = |table: &str| -> Vec<(u32, Vec<String>)> {
        page.select(&format!(".{table} tbody tr"))
            .iter()
            .map(|row| {
                let cells = row_cells(row);
                (number(&cells[1]) as u32, cells)
            })
            .collect()
    };
    let (ttft_col, e2e_col) = (
        column("levels-latency", "TTFT p50"),
        column("levels-latency", "E2E p50"),
    );
    let latency = level_rows("levels-latency");
    assert_eq!(latency.len(), concurrencies.len(), "{b}");
    for (c, cells) in &latency {
        shows(&cells[ttft_col], refs[c].ttft_p50, &format!("{b}: run page TTFT c={c}"));
        shows(&cells[e2e_col], refs[c].e2e_p50, &format!("{b}: run page E2E c={c}"));
    }
    let (decode_col, steady_col, whole_col) = (
        column("levels-speed", "decode tok/s/stream p50"),
        column("levels-speed", "aggregate tok/s @ level, steady window"),
        column("levels-speed", "aggregate tok/s @ level, whole run"),
    );
    for (c, cells) in &level_rows("levels-speed") {
        let r = refs[c];
        shows(&cells[decode_col], r.decode_p50, &format!("{b}: run page decode c={c}"));
        shows(&cells[steady_col], r.steady, &format!("{b}: run page steady c={c}"));
        shows(
            &cells[whole_col],
            r.whole_run,
            &format!("{b}: run page whole run c={c}"),
        );
    }
    let knees = page.select(".knees li");
    assert!(text_of(&knees[0]).contains(&format!("knee at c={knee}")), "{b}");
    // Two repetitions: the steady-window aggregate's spread is their min–max, labelled so.
    let spread_head = &page.texts(".levels-speed thead th")[steady_col];
    assert!(spread_head.contains("(min–max of repetitions)"), "{b}: {spread_head}");
    for (c, cells) in &level_rows("levels-speed") {
        let spread = &doc["levels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["load"]["concurrency"] == *c)
            .unwrap()["aggregate_tok_s_spread"];
        assert_eq!(spread["repetitions"], 2, "{b}: c={c}");
        let cell = &cells[steady_col];
        let (_, range) = cell
            .split_once("(min–max of 2 repetitions: ")
            .unwrap_or_else(|| panic!("{b}: c={c}: {cell}"));
        let (min, max) = range.trim_end_matches(')').split_once(" – ").unwrap();
        shows(min, spread["min"].as_f64().unwrap(), &format!("{b}: spread min c={c}"));
        shows(max, spread["max"].as_f64().unwrap(), &format!("{b}: spread max c={c}"));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("[min–max of repetitions]"), "{b}: {stdout}");
    // The results table above pools no levels: a sweep's figures are per level only.
    for row in page.select("table.scorecard tbody tr") {
        let cells = row_cells(&row);
        if ["TTFT p50", "E2E p50", "decode tok/s/stream p50", "aggregate tok/s"]
            .iter()
            .any(|f| cells[0].starts_with(f))
        {
            assert!(
                cells[1..].iter().all(|c| c.contains("per load level")),
                "{b}: a sweep's results table shows a pooled figure: {cells:?}"
            );
        }
    }

    // The scorecard, judged by rules at c=1, c=2 and c=4.
    let (profile_id, _) = app
        .store
        .save_threshold_profile("sweep figures", "", &sweep_rules(), "test", "figures")
        .await
        .unwrap();
    let choice = bakeoff::app::scorecard::ScorecardChoice {
        profile: Some(profile_id),
        ..Default::default()
    };
    let scorecard = bakeoff::app::scorecard::assemble(&app.store, &app.state.views.summaries, run_id, &choice)
        .await
        .unwrap();
    // Its chart's data: both aggregates at every level, and the knee.
    let series = bakeoff::app::pages::charts::throughput_series(&scorecard);
    for c in concurrencies {
        let at = |points: &[(f64, f64)]| points.iter().find(|p| p.0 == f64::from(c)).copied().unwrap().1;
        assert!(within(at(&series[0].points), refs[&c].steady, 1e-9), "{b}: chart c={c}");
        assert!(
            within(at(&series[0].whole_run), refs[&c].whole_run, 1e-9),
            "{b}: chart whole run c={c}"
        );
    }
    assert_eq!(
        series[0].knee.as_ref().map(|k| k.concurrency),
        Some(knee),
        "{b}: the chart's knee"
    );
    let (card, _) = app
        .page(&format!("/runs/{run_id}/scorecard?profile={profile_id}"))
        .await;
    let value_sel = scraper::Selector::parse("td.cell .value").unwrap();
    for rule in sweep_rules() {
        let label = MetricKey::parse(&rule.metric).unwrap().label();
        let row = card
            .select("tr.rule-row")
            .into_iter()
            .find(|r| {
                r.select(&scraper::Selector::parse("th.rule-label").unwrap())
                    .next()
                    .and_then(|th| th.text().next().map(|t| t.trim() == label))
                    .unwrap_or(false)
            })
            .unwrap_or_else(|| panic!("{b}: the scorecard's row {label:?}"));
        let value = row.select(&value_sel).next().map(|e| text_of(&e)).unwrap();
        shows(
            &value,
            rule_figure(&rule.metric, &refs),
            &format!("{b}: scorecard {}", rule.metric),
        );
    }
    assert!(
        card.text("#chart-throughput").contains(&format!("knee c={knee}")),
        "{b}: the knee is marked on the chart"
    );

    // Exports: JSON, CSV, Markdown.
    let export: Value = app
        .get(&format!("/runs/{run_id}/scorecard/export.json?profile={profile_id}"))
        .await
        .json()
        .await
        .unwrap();
    check_scorecard_json(&export, &refs, knee, &format!("{b}: JSON export"));
    let csv = app
        .text_ok(&format!("/runs/{run_id}/scorecard/export.csv?profile={profile_id}"))
        .await;
    for rule in sweep_rules() {
        let line = csv
            .lines()
            .find(|l| l.split(',').nth(1) == Some(rule.metric.as_str()))
            .unwrap_or_else(|| panic!("{b}: a CSV line for {}", rule.metric));
        shows(
            line.split(',').nth(4).unwrap(),
            rule_figure(&rule.metric, &refs),
            &format!("{b}: CSV {}", rule.metric),
        );
    }
    for c in concurrencies {
        for (metric, figure) in [
            (format!("aggregate_tok_s@c={c}"), refs[&c].steady),
            (format!("whole_run_tok_s@c={c}"), refs[&c].whole_run),
        ] {
            let line = csv
                .lines()
                .find(|l| l.starts_with(&format!("load_level,{metric},")))
                .unwrap_or_else(|| panic!("{b}: a CSV line for {metric}"));
            shows(line.split(',').nth(4).unwrap(), figure, &format!("{b}: CSV {metric}"));
        }
    }
    let md = app
        .text_ok(&format!("/runs/{run_id}/scorecard/export.md?profile={profile_id}"))
        .await;
    for rule in sweep_rules() {
        let label = bakeoff::domain::neutralize::markdown_text(&MetricKey::parse(&rule.metric).unwrap().label());
        let prefix = format!("| {label} ");
        let line = md
            .lines()
            .find(|l| l.starts_with(&prefix) && !l[prefix.len()..].starts_with('@'))
            .unwrap_or_else(|| panic!("{b}: a Markdown row for {label}"));
        shows(
            line.split('|').nth(2).unwrap(),
            rule_figure(&rule.metric, &refs),
            &format!("{b}: Markdown {}", rule.metric),
        );
    }
    for c in concurrencies {
        let line = md
            .lines()
            .find(|l| l.contains(&format!("| c={c} |")))
            .unwrap_or_else(|| panic!("{b}: a Markdown row for c={c}"));
        let cells: Vec<&str> = line.split('|').collect();
        shows(cells[3], refs[&c].steady, &format!("{b}: Markdown c={c}"));
        shows(cells[4], refs[&c].whole_run, &format!("{b}: Markdown whole run c={c}"));
    }

    // The repetitions' spread is never called a confidence interval.
    for (place, text) in [
        ("run page", page.text("main")),
        ("scorecard", card.text("main")),
        ("JSON export", export.to_string()),
        ("CSV export", csv.clone()),
        ("Markdown export", md.clone()),
        ("measure --json", doc.to_string()),
        ("measure's table", stdout.to_string()),
    ] {
        assert!(!text.contains("95 % CI"), "{b}: {place} says 95 % CI");
    }

    // Compare: every figure per level.
    let (compare, _) = app.page(&format!("/archive/compare?runs={run_id}")).await;
    for c in concurrencies {
        let r = refs[&c];
        for (figure, value) in [
            (format!("TTFT p50 @c={c}"), r.ttft_p50),
            (format!("E2E p50 @c={c}"), r.e2e_p50),
            (format!("decode tok/s/stream p50 @c={c}"), r.decode_p50),
            (format!("aggregate tok/s @c={c} (steady window)"), r.steady),
            (format!("aggregate tok/s @c={c} (whole run)"), r.whole_run),
        ] {
            let row = compare
                .select("tr[data-figure]")
                .into_iter()
                .find(|row| row.value().attr("data-figure") == Some(&figure))
                .unwrap_or_else(|| panic!("{b}: compare row {figure}"));
            let cell = row
                .select(&scraper::Selector::parse("td").unwrap())
                .next()
                .map(|e| text_of(&e))
                .unwrap();
            shows(&cell, value, &format!("{b}: compare {figure}"));
        }
    }

    // History: the sweep's first level.
    let evalset = app
        .store
        .get_evalset_version(run.evalset_version_id)
        .await
        .unwrap()
        .unwrap()
        .evalset_id;
    let (history, _) = app
        .page(&format!("/archive/history?candidate={candidate}&evalset={evalset}"))
        .await;
    let cells: Vec<String> = history
        .select(&format!("tr[data-run=\"{run_id}\"] td"))
        .iter()
        .map(text_of)
        .collect();
    // Run, date, version, verdict, then the figures.
    assert_eq!(cells[4], "1", "{b}: history shows the sweep's first level");
    shows(&cells[7], refs[&1].ttft_p50, &format!("{b}: history TTFT"));
    shows(&cells[8], refs[&1].decode_p50, &format!("{b}: history decode"));
    shows(&cells[9], refs[&1].steady, &format!("{b}: history aggregate"));

    // The gate's reports (`bakeoff run start --report-json / --report-md`) carry the rules.
    let gate = bakeoff::app::gate::judge(&app.store, run_id, profile_id, None)
        .await
        .unwrap();
    let gate_json: Value = serde_json::from_str(&bakeoff::app::gate::report::json(&gate)).unwrap();
    check_gate_json(&gate_json, &refs, &format!("{b}: gate JSON"));
    let gate_md = bakeoff::app::gate::report::markdown(&gate);
    for r in &gate.candidates[0].rules {
        let line = gate_md
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", bakeoff::domain::neutralize::markdown_text(&r.rule))))
            .unwrap_or_else(|| panic!("{b}: gate Markdown row {}", r.rule));
        shows(
            line.split('|').nth(2).unwrap(),
            rule_figure(&r.metric, &refs),
            &format!("{b}: gate Markdown {}", r.metric),
        );
    }

    // The JSON API (last: a token turns the app to accounts mode).
    let api = crate::api_v1::Api::new(&app, "ci", bakeoff::domain::accounts::Role::Viewer).await;
    let card = api
        .ok(&format!("/api/v1/runs/{run_id}/scorecard?profile={profile_id}"))
        .await;
    check_scorecard_json(&card, &refs, knee, &format!("{b}: API scorecard"));
    let verdict = api
        .ok(&format!("/api/v1/runs/{run_id}/verdict?profile={profile_id}"))
        .await;
    check_gate_json(&verdict, &refs, &format!("{b}: API verdict"));
}

/// A scorecard's JSON (export or API): its rules' values and its throughput curve.
fn check_scorecard_json(doc: &Value, refs: &HashMap<u32, Reference>, knee: u32, place: &str) {
    let rows = doc["rows"].as_array().unwrap();
    for rule in sweep_rules() {
        let row = rows
            .iter()
            .find(|r| r["rule"]["metric"] == rule.metric.as_str())
            .unwrap_or_else(|| panic!("{place}: no row {}", rule.metric));
        equals(
            &row["cells"][0]["value"],
            rule_figure(&rule.metric, refs),
            &format!("{place} {}", rule.metric),
        );
    }
    let levels = doc["load_levels"][0]["levels"].as_array().unwrap();
    assert_eq!(levels.len(), refs.len(), "{place}");
    for l in levels {
        let c = l["concurrency"].as_u64().unwrap() as u32;
        equals(
            &l["aggregate_tok_s_steady_window"],
            refs[&c].steady,
            &format!("{place} c={c}"),
        );
        equals(
            &l["aggregate_tok_s_whole_run"],
            refs[&c].whole_run,
            &format!("{place} whole run c={c}"),
        );
        assert_eq!(l["knee"], Value::Bool(c == knee), "{place}");
    }
}

/// A gate report's JSON (`--report-json` or the API's verdict): each rule's measured value.
fn check_gate_json(doc: &Value, refs: &HashMap<u32, Reference>, place: &str) {
    let rules = doc["candidates"][0]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), sweep_rules().len(), "{place}");
    for r in rules {
        let metric = r["metric"].as_str().unwrap();
        shows(
            r["measured"]
                .as_str()
                .unwrap_or_else(|| panic!("{place}: {metric} not measured")),
            rule_figure(metric, refs),
            &format!("{place} {metric}"),
        );
    }
}
