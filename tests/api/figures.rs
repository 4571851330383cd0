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
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::{MeasureOutcome, MeasureSpec, measure, synthetic_evalset};
use bakeoff::engine::run::pool::request_id;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use serde_json::Value;

use crate::support::app::{spawn_app_on, text_of};
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
        candidate,
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
        .position(|c| c.id == r.case_id)
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
        let span = (r.last_token_us.unwrap() - r.ttft_us().unwrap()) as f64 / 1e6;
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
    let detail = o.records[0].error_detail.as_deref().unwrap_or_default();
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

/// The first number in a text ("1,234.5 tok/s (min–max …)" → 1234.5).
fn number(text: &str) -> f64 {
    let start = text
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or_else(|| panic!("no number in {text:?}"));
    let digits: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits.parse().unwrap_or_else(|_| panic!("no number in {text:?}"))
}

/// A shown figure equals `value` to its printed precision (three significant digits).
fn shows(text: &str, value: f64, place: &str) {
    let shown = number(text);
    assert!(
        (shown - value).abs() <= value.abs() * 0.006,
        "{place}: shows {text:?}, the figure is {value}"
    );
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
    let levels = doc["levels"].as_array().unwrap();
    let figure = |c: u32| -> f64 {
        levels
            .iter()
            .find(|l| l["load"]["concurrency"] == c)
            .and_then(|l| l["aggregate_tok_s"].as_f64())
            .unwrap_or_else(|| panic!("{b}: measure --json has c={c}"))
    };
    let whole_run = |c: u32| -> f64 {
        levels
            .iter()
            .find(|l| l["load"]["concurrency"] == c)
            .and_then(|l| l["whole_run_tok_s"].as_f64())
            .unwrap()
    };
    let knee = doc["knees"][0]["concurrency"].as_u64().expect("a knee") as u32;
    let concurrencies = [1u32, 2, 4];

    let app = spawn_app_on(db).await;
    let run = app.store.get_run(run_id).await.unwrap().unwrap();
    let candidate = run.candidate_ids[0];

    // The run page's per-level table, found by its column heads.
    let (page, _) = app.page(&format!("/runs/{run_id}")).await;
    let heads = page.texts(".levels-speed thead th");
    let steady_col = heads
        .iter()
        .position(|h| h.contains("steady window"))
        .unwrap_or_else(|| panic!("{b}: {heads:?}"));
    let whole_col = heads.iter().position(|h| h.contains("whole run")).unwrap();
    for row in page.select(".levels-speed tbody tr") {
        let cells: Vec<String> = row
            .children()
            .filter_map(scraper::ElementRef::wrap)
            .map(|e| text_of(&e))
            .collect();
        let c = number(&cells[1]) as u32;
        // The speed table's first three cells are candidate, load and prompt.
        let offset = cells.len() - heads.len();
        shows(&cells[steady_col + offset], figure(c), &format!("{b}: run page c={c}"));
        shows(
            &cells[whole_col + offset],
            whole_run(c),
            &format!("{b}: run page whole run c={c}"),
        );
    }
    let knees = page.select(".knees li");
    assert!(text_of(&knees[0]).contains(&format!("knee at c={knee}")), "{b}");

    // The scorecard: its rule (judged at the run's c=1) and its chart's data.
    app.store
        .save_threshold_profile(
            "batch",
            "",
            &bakeoff::domain::thresholds::templates::batch_default_rules(),
            "test",
            "figures",
        )
        .await
        .unwrap();
    let scorecard = bakeoff::app::scorecard::assemble(&app.store, run_id, &Default::default())
        .await
        .unwrap();
    let series = bakeoff::web::scorecards::charts::throughput_series(&scorecard);
    for c in concurrencies {
        let (_, v) = series[0].points.iter().find(|p| p.0 == f64::from(c)).copied().unwrap();
        assert!(within(v, figure(c), 1e-9), "{b}: chart c={c}: {v} vs {}", figure(c));
    }
    assert_eq!(
        series[0].knee.as_ref().map(|k| k.concurrency),
        Some(knee),
        "{b}: the chart's knee"
    );
    let (card, _) = app.page(&format!("/runs/{run_id}/scorecard")).await;
    let row = card
        .select("tr.rule-row")
        .into_iter()
        .find(|r| text_of(r).contains("aggregate tok/s (steady window)"))
        .unwrap_or_else(|| panic!("{b}: the aggregate rule's row"));
    let value = row
        .select(&scraper::Selector::parse("td.cell .value").unwrap())
        .next()
        .map(|e| text_of(&e))
        .unwrap();
    shows(&value, figure(1), &format!("{b}: scorecard rule at c=1"));
    assert!(
        card.text("#chart-throughput").contains(&format!("knee c={knee}")),
        "{b}: the knee is marked on the chart"
    );

    // Exports: JSON, CSV, Markdown.
    let export: Value = app
        .get(&format!("/runs/{run_id}/scorecard/export.json"))
        .await
        .json()
        .await
        .unwrap();
    let rule = export["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"]["metric"] == "aggregate_tok_s")
        .unwrap();
    assert!(
        within(rule["cells"][0]["value"].as_f64().unwrap(), figure(1), 1e-9),
        "{b}: JSON rule"
    );
    for l in export["load_levels"][0]["levels"].as_array().unwrap() {
        let c = l["concurrency"].as_u64().unwrap() as u32;
        let v = l["aggregate_tok_s_steady_window"].as_f64().unwrap();
        assert!(within(v, figure(c), 1e-9), "{b}: JSON export c={c}");
        assert_eq!(l["knee"], Value::Bool(c == knee), "{b}");
    }
    let csv = app.text_ok(&format!("/runs/{run_id}/scorecard/export.csv")).await;
    for c in concurrencies {
        let line = csv
            .lines()
            .find(|l| l.starts_with(&format!("load_level,aggregate_tok_s@c={c},")))
            .unwrap_or_else(|| panic!("{b}: a CSV line for c={c}"));
        let value: f64 = line.split(',').nth(4).unwrap().parse().unwrap();
        // The CSV carries six significant digits (format::data), the same figure rounded.
        assert!(within(value, figure(c), 5e-6), "{b}: CSV c={c}");
    }
    let md = app.text_ok(&format!("/runs/{run_id}/scorecard/export.md")).await;
    for c in concurrencies {
        let line = md
            .lines()
            .find(|l| l.contains(&format!("| c={c} |")))
            .unwrap_or_else(|| panic!("{b}: a Markdown row for c={c}"));
        shows(
            line.split('|').nth(3).unwrap(),
            figure(c),
            &format!("{b}: Markdown c={c}"),
        );
    }

    // Compare and history.
    let (compare, _) = app.page(&format!("/archive/compare?runs={run_id}")).await;
    for c in concurrencies {
        let row = compare
            .select("tr[data-figure]")
            .into_iter()
            .find(|r| r.value().attr("data-figure") == Some(&format!("aggregate tok/s @c={c} (steady window)")))
            .unwrap_or_else(|| panic!("{b}: compare row c={c}"));
        let cell = row
            .select(&scraper::Selector::parse("td").unwrap())
            .next()
            .map(|e| text_of(&e))
            .unwrap();
        shows(&cell, figure(c), &format!("{b}: compare c={c}"));
    }
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
    assert_eq!(cells[3], "1", "{b}: history shows the sweep's first level");
    shows(&cells[8], figure(1), &format!("{b}: history"));
}
