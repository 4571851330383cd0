//! Telemetry sources (issue 49): scrapes stored on both backends, and whole runs against the
//! mock whose `/metrics` reports its ground truth in vLLM's naming: a level's counter increases
//! match what the mock did in the measured window (±1), and the diagnosis names the bottleneck
//! the mock was configured with.
use std::collections::HashSet;

use bakeoff::app::telemetry::{CandidateTelemetry, run_telemetry};
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::domain::telemetry::window::find;
use bakeoff::domain::telemetry::{Bottleneck, Boundary, Scrape, Signal, Source, parse};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;
use serde_json::Value;

use crate::support::db::{TestStore, each_backend, sqlite_store};
use crate::support::runs::{run_to_end, start_mock};

/// Cases whose prompts differ, so the mock's prefix cache sees each once.
fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"telemetry-test","task":"generation","system":"Repeat.","prompt":"Sentence {{n}}","graders":[{"kind":"exact"}],"max_tokens":40}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"The quick brown fox number {i} jumps over the lazy dog again and again\"}}"
        ));
    }
    EvalSetFile::parse("telemetry-test.jsonl", &text).expect("test eval set parses")
}

/// Runs `cases` cases at `concurrency` against a mock serving `profile`, scraping its
/// `/metrics` and simulated GPU; returns the store, the run, the candidate's telemetry and the
/// mock (for its ground truth).
async fn run_against(
    profile: ModelProfile,
    cases: usize,
    concurrency: u32,
    warmups: u32,
) -> (DynStore, i64, CandidateTelemetry, MockServer, impl Sized) {
    let config = RunConfig {
        concurrency,
        warmup_requests: warmups,
        temperature: Some(0.0),
        timeout_secs: 30,
        staged_rollout: false,
        ..RunConfig::default()
    };
    run_with(profile, cases, config).await
}

async fn run_with(
    profile: ModelProfile,
    cases: usize,
    config: RunConfig,
) -> (DynStore, i64, CandidateTelemetry, MockServer, impl Sized) {
    run_keeping(profile, cases, config, Vec::new()).await
}

/// [`run_with`] for a candidate keeping `keep` beyond the catalogue's series.
async fn run_keeping(
    profile: ModelProfile,
    cases: usize,
    config: RunConfig,
    keep: Vec<String>,
) -> (DynStore, i64, CandidateTelemetry, MockServer, impl Sized) {
    let file = evalset(cases);
    let mock = start_mock(MockConfig {
        profiles: vec![profile.clone()],
        answer_keys: vec![file.clone()],
        seed: 3,
    })
    .await;
    let (store, guard) = sqlite_store().await;
    let spec = CandidateSpec {
        metrics_url: Some(format!("{}/metrics", mock.root_url())),
        gpu_metrics_url: Some(format!("{}/mock/gpu/metrics", mock.root_url())),
        metrics_keep: keep,
        ..CandidateSpec::openai_chat("sim", mock.base_url(), &profile.name)
    };
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = store
        .create_run(&NewRun {
            name: "telemetry".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config,
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(&store, run).await, RunStatus::Finished);
    let t = run_telemetry(&store, run).await.expect("telemetry reads");
    assert_eq!(t.candidates.len(), 1, "the candidate was scraped");
    let c = t.candidates.into_iter().next().unwrap();
    assert_eq!(c.failed_scrapes, 0, "{:?}", c.first_error);
    assert!(c.engines.iter().any(|e| e == "vLLM"), "{:?}", c.engines);
    assert!(c.engines.iter().any(|e| e == "DCGM exporter"), "{:?}", c.engines);
    (store, run, c, mock, guard)
}

/// The mock's own totals right now, read from its `/metrics` (its ground truth counters).
async fn mock_total(mock: &MockServer, series: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", mock.root_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    parse(&text)
        .expect("the mock's /metrics is Prometheus text")
        .samples
        .iter()
        .filter(|s| s.name == series)
        .map(|s| s.value)
        .sum()
}

/// Tokens the mock sent and prompt tokens it admitted for the run's measured requests (its
/// request log, warm-ups left out by the request ids bakeoff sent for them).
async fn measured_ground_truth(store: &DynStore, run: i64, mock: &MockServer) -> (f64, f64) {
    let warmup_ids: HashSet<String> = store
        .list_request_records(run)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.is_warmup)
        .map(|r| {
            let case: usize = r.case_id.trim_start_matches('c').parse().unwrap();
            bakeoff::engine::run::pool::request_id(r.run_id, r.candidate_id, r.phase, case, r.repetition, r.attempt)
        })
        .collect();
    let page: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let measured: Vec<&Value> = page["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            !r["client_request_id"]
                .as_str()
                .is_some_and(|id| warmup_ids.contains(id))
        })
        .collect();
    let sum = |field: &str| measured.iter().map(|r| r[field].as_f64().unwrap_or(0.0)).sum::<f64>();
    (sum("tokens_sent"), sum("prompt_tokens"))
}

fn assert_within_one(what: &str, measured: Option<f64>, truth: f64) {
    let m = measured.unwrap_or_else(|| panic!("{what}: not measured"));
    assert!(
        (m - truth).abs() <= 1.0,
        "{what}: measured {m}, the mock's ground truth {truth}"
    );
}

#[tokio::test]
async fn a_queue_bound_server_is_named_and_its_counters_match_the_mock_within_one() {
    // Two slots for eight streams: six wait at the server all along the level.
    let profile = ModelProfile {
        name: "queued".into(),
        ttft_ms: 30.0,
        inter_token_ms: Some(6.0),
        slots: Some(2),
        ..ModelProfile::default()
    };
    let (store, run, c, mock, _guard) = run_against(profile, 24, 8, 2).await;
    let level = &c.levels[0];
    assert_eq!(
        level.diagnosis.bottleneck,
        Bottleneck::ServerQueued,
        "{:?}",
        level.diagnosis
    );
    let (tokens, prompt_tokens) = measured_ground_truth(&store, run, &mock).await;
    let increase = |s: Signal| find(&level.server, s).and_then(|s| s.increase);
    assert_within_one("output tokens", increase(Signal::GenerationTokens), tokens);
    assert_within_one("prompt tokens", increase(Signal::PromptTokens), prompt_tokens);
    assert_within_one(
        "prefix-cache queries",
        increase(Signal::PrefixCacheQueries),
        prompt_tokens,
    );
    assert_within_one("preemptions", increase(Signal::Preemptions), 0.0);
    // The client received what the server sent.
    assert!(
        (level.output_tokens as f64 - tokens).abs() <= 1.0,
        "{} vs {tokens}",
        level.output_tokens
    );
    // The server's own TTFT was read from its histogram, and the simulated GPU was busy.
    assert!(level.diagnosis.server_ttft_p50_ms.is_some(), "{:?}", level.diagnosis);
    // (A scrape falls anywhere in the level, so only "busy at some scrape" is certain.)
    let util = find(&level.gpu, Signal::GpuUtilisation).and_then(|s| s.max).unwrap();
    assert!(util > 0.0, "the simulated GPU was busy: {util}");
    assert!(level.joules_per_output_token.is_some_and(|j| j > 0.0), "{level:?}");
}

#[tokio::test]
async fn a_kv_bound_server_is_named_with_its_preemptions_matching_the_mock() {
    // Eight streams of ~50 tokens each in a cache of 200 tokens: they preempt each other.
    let profile = ModelProfile {
        name: "kv".into(),
        ttft_ms: 20.0,
        inter_token_ms: Some(4.0),
        kv_cache_tokens: Some(200),
        ..ModelProfile::default()
    };
    let (_store, _run, c, mock, _guard) = run_against(profile, 16, 8, 0).await;
    let level = &c.levels[0];
    assert_eq!(
        level.diagnosis.bottleneck,
        Bottleneck::KvFullPreempting,
        "{:?}",
        level.diagnosis
    );
    // No warm-ups: everything the mock did was in the measured window.
    let truth = mock_total(&mock, "vllm:num_preemptions_total").await;
    assert!(truth > 0.0, "the mock preempted");
    let preemptions = find(&level.server, Signal::Preemptions).and_then(|s| s.increase);
    assert_within_one("preemptions", preemptions, truth);
    let tokens = mock_total(&mock, "vllm:generation_tokens_total").await;
    let generated = find(&level.server, Signal::GenerationTokens).and_then(|s| s.increase);
    assert_within_one("output tokens", generated, tokens);
}

#[tokio::test]
async fn a_client_that_cannot_keep_its_schedule_is_named_client_bound() {
    // An open loop asking 20,000 requests a second of an unconstrained, fast server: no client
    // keeps that schedule, so requests leave late (schedule lag) while the server idles.
    let profile = ModelProfile {
        name: "fast".into(),
        ttft_ms: 1.0,
        inter_token_ms: Some(0.2),
        ..ModelProfile::default()
    };
    let config = RunConfig {
        warmup_requests: 0,
        temperature: Some(0.0),
        timeout_secs: 30,
        staged_rollout: false,
        load: LoadShape::Rate {
            per_second: 20_000.0,
            poisson: false,
        },
        requests_per_level: Some(1_500),
        ..RunConfig::default()
    };
    let (_store, _run, c, _mock, _guard) = run_with(profile, 20, config).await;
    let level = &c.levels[0];
    assert_eq!(
        level.diagnosis.bottleneck,
        Bottleneck::ClientBound,
        "{:?} (client lag p99 {:?} ms)",
        level.diagnosis,
        level.client_lag_p99_ms
    );
    assert!(
        level.diagnosis.evidence[0].contains("client lag p99"),
        "{:?}",
        level.diagnosis.evidence
    );
    // The server was not the bottleneck: nothing waited in its queue (it has no slot limit).
    let queue = find(&level.server, Signal::QueueLength).and_then(|s| s.max);
    assert_eq!(queue, Some(0.0), "{:?}", level.server);
}

#[tokio::test]
async fn the_scrape_interval_is_the_runs_and_series_kept_by_name_are_stored_and_charted() {
    let profile = ModelProfile {
        name: "kept".into(),
        ttft_ms: 30.0,
        inter_token_ms: Some(6.0),
        slots: Some(2),
        ..ModelProfile::default()
    };
    let config = RunConfig {
        concurrency: 4,
        warmup_requests: 0,
        temperature: Some(0.0),
        timeout_secs: 30,
        staged_rollout: false,
        scrape_interval_secs: Some(0.2),
        ..RunConfig::default()
    };
    // The mock's own series are in no engine's catalogue: one kept by its family name, the
    // others by a prefix.
    let keep = vec!["bakeoff_mock_requests".to_string(), "bakeoff_mock_queue*".to_string()];
    let (store, run, c, _mock, _guard) = run_keeping(profile, 24, config, keep).await;
    assert_eq!(
        c.kept_series,
        ["bakeoff_mock_queue_depth", "bakeoff_mock_requests_total"],
        "the kept series, and nothing else beyond the catalogue"
    );
    let events: Vec<String> = store
        .list_run_events(run)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(
        events.iter().any(|e| e.contains("scraped every 0.2 s")
            && e.contains("also keeping bakeoff_mock_requests, bakeoff_mock_queue*")),
        "{events:?}"
    );
    // Periodic scrapes 0.2 s apart (the boundary scrapes come between them): their median gap
    // is the interval, well below the default second.
    let scrapes = store.list_telemetry_scrapes(run, c.candidate_id).await.unwrap();
    let periodic: Vec<i64> = scrapes
        .iter()
        .filter(|s| s.source == Source::Server && s.boundary.is_none())
        .map(|s| s.at_us)
        .collect();
    let mut gaps: Vec<i64> = periodic.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    assert!(gaps.len() >= 3, "{} periodic scrapes", periodic.len());
    let median_ms = gaps[gaps.len() / 2] as f64 / 1000.0;
    assert!((150.0..500.0).contains(&median_ms), "median gap {median_ms} ms");
    // The kept counter counts the mock's requests: its last scrape saw every one of them.
    let last = scrapes
        .iter()
        .rev()
        .find(|s| s.source == Source::Server && s.error.is_none())
        .unwrap();
    let requests: f64 = last
        .samples
        .iter()
        .filter(|x| x.name == "bakeoff_mock_requests_total")
        .map(|x| x.value)
        .sum();
    assert_eq!(requests, 24.0, "{:?}", last.samples);
    // Each kept series is charted on the telemetry page.
    let t = run_telemetry(&store, run).await.unwrap();
    let kept: Vec<&str> = t
        .charts
        .iter()
        .filter(|ch| ch.id.starts_with("chart-telemetry-kept-"))
        .map(|ch| ch.title.as_str())
        .collect();
    assert_eq!(
        kept,
        [
            "bakeoff_mock_queue_depth over time",
            "bakeoff_mock_requests_total over time"
        ]
    );
}

#[tokio::test]
async fn the_run_page_and_scorecard_show_each_levels_diagnosis_a_server_chart_and_gpu_cost_beside_energy() {
    let app = crate::support::app::spawn_app().await;
    let file = evalset(16);
    let profile = ModelProfile {
        name: "brief".into(),
        ttft_ms: 30.0,
        inter_token_ms: Some(6.0),
        slots: Some(2),
        ..ModelProfile::default()
    };
    let mock = start_mock(MockConfig {
        profiles: vec![profile.clone()],
        answer_keys: vec![file.clone()],
        seed: 3,
    })
    .await;
    let spec = CandidateSpec {
        metrics_url: Some(format!("{}/metrics", mock.root_url())),
        gpu_metrics_url: Some(format!("{}/mock/gpu/metrics", mock.root_url())),
        gpu_count: Some(2),
        gpu_kind: Some("H100".into()),
        gpu_hour_price: Some(3.0),
        ..CandidateSpec::openai_chat("brief", mock.base_url(), &profile.name)
    };
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let candidate = app
        .store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = app
        .store
        .create_run(&NewRun {
            name: "brief".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 6,
                warmup_requests: 0,
                temperature: Some(0.0),
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(&app.store, run).await, RunStatus::Finished);
    // A scorecard needs a profile to judge by.
    app.store
        .save_threshold_profile(
            "batch",
            "",
            &bakeoff::domain::thresholds::templates::batch_default_rules(),
            "test",
            "",
        )
        .await
        .unwrap();
    let t = run_telemetry(&app.store, run).await.unwrap();
    let level = &t.candidates[0].levels[0];
    // 2 GPUs at $3/h over the level's window, per million output tokens received in it.
    let expected = 2.0 * 3.0 * level.window_s / 3600.0 / level.output_tokens as f64 * 1e6;
    let cost = level.gpu_cost_per_mtok.expect("priced GPUs have a cost");
    assert!((cost - expected).abs() <= expected * 1e-9, "{cost} vs {expected}");
    for path in [format!("/runs/{run}"), format!("/runs/{run}/scorecard")] {
        let (page, _) = app.page(&path).await;
        assert_eq!(page.count("section.telemetry-brief"), 1, "{path}");
        let row = ".telemetry-brief-levels tbody tr[data-candidate=\"brief\"]";
        assert_eq!(page.count(row), 1, "{path}: one level");
        assert_eq!(
            page.text(&format!("{row} .diagnosis")),
            level.diagnosis.bottleneck.label(),
            "{path}"
        );
        let gpu_cost = page.text(&format!("{row} .gpu-cost"));
        assert!(
            gpu_cost.contains(&bakeoff::domain::format::usd(cost))
                && gpu_cost.contains("per 1M output tokens (2 × H100 at $3.00/GPU-hour"),
            "{path}: {gpu_cost}"
        );
        let energy = page.texts(&format!("{row} td.num"));
        assert!(energy.iter().any(|e| e.ends_with("J/token")), "{path}: {energy:?}");
        assert_eq!(
            page.count(".telemetry-brief figure.chart[id=\"chart-telemetry-queue-length\"] svg"),
            1,
            "{path}: the server queue over time"
        );
        assert_eq!(
            page.attr(".telemetry-brief p a", "href").as_deref(),
            Some(format!("/runs/{run}/telemetry").as_str()),
            "{path}"
        );
    }
    // The full page has the cost column too.
    let full = app.get_html(&format!("/runs/{run}/telemetry")).await;
    assert!(
        full.text("table.telemetry-levels tbody tr .gpu-cost")
            .contains("per 1M output tokens")
    );
    // A run without telemetry shows no section.
    let plain = app.finished_run("plain", None).await;
    assert_eq!(
        app.get_html(&format!("/runs/{plain}"))
            .await
            .count("section.telemetry-brief"),
        0
    );
}

#[tokio::test]
async fn the_run_form_sets_the_scrape_interval_within_its_bounds_and_the_run_page_states_it() {
    let app = crate::support::app::spawn_app().await;
    let (run_stored, mock) = stored_run_against_mock(&app.store, 2).await;
    let candidate = app.store.run_candidates(run_stored).await.unwrap()[0].id.to_string();
    let version = app
        .store
        .get_run(run_stored)
        .await
        .unwrap()
        .unwrap()
        .evalset_version_id
        .to_string();
    let form = app.get_html("/runs/new").await;
    assert_eq!(form.count("details.advanced:not([open]) #f-scrape_interval_secs"), 1);
    assert!(
        form.text("#f-scrape_interval_secs-help")
            .contains("0.1 to 60. Blank: 1 s.")
    );
    let fields = |interval: &'static str| {
        vec![
            ("evalset_version", version.clone()),
            ("candidate", candidate.clone()),
            ("concurrency", "1".to_string()),
            ("repetitions", "1".to_string()),
            ("warmup_requests", "0".to_string()),
            ("stream", "on".to_string()),
            ("load_shape", "fixed".to_string()),
            ("scrape_interval_secs", interval.to_string()),
        ]
    };
    let runs_before = app.run_count().await;
    for (bad, message) in [
        ("0.05", "must be between 0.1 and 60, got 0.05"),
        ("90", "must be between 0.1 and 60, got 90"),
    ] {
        let f = fields(bad);
        let borrowed: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let page = app.post_form_html("/runs", &borrowed).await;
        assert_eq!(page.status, 422, "{bad}");
        assert!(page.text("#f-scrape_interval_secs-error").contains(message), "{bad}");
        assert_eq!(page.count("details.advanced[open]"), 1, "{bad}");
        assert_eq!(app.run_count().await, runs_before, "nothing stored");
    }
    let f = fields("0.5");
    let borrowed: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = app.post_form("/runs", &borrowed).await;
    assert_eq!(r.status(), 303);
    let run = app.store.list_runs(1, 0).await.unwrap()[0].run.clone();
    assert_eq!(run.config.scrape_interval_secs, Some(0.5));
    let page = app.get_html(&format!("/runs/{}", run.id)).await;
    assert!(
        page.text(".conditions")
            .contains("every 0.5 s and at each level's start and end")
    );
    tokio::time::timeout(crate::support::runs::RUN_DEADLINE, app.state.runner.wait(run.id))
        .await
        .expect("the run ended in time");
    drop(mock);
}

#[tokio::test]
async fn the_candidate_form_keeps_series_by_name_and_names_a_bad_entry() {
    let app = crate::support::app::spawn_app().await;
    let fields = |keep: &'static str| {
        vec![
            ("name", "kept"),
            ("provider", "openai-chat"),
            ("base_url", "http://127.0.0.1:9/v1"),
            ("model", "m"),
            ("metrics_url", "http://127.0.0.1:9/metrics"),
            ("metrics_keep", keep),
        ]
    };
    let page = app
        .post_form_html("/candidates", &fields("vllm:spec_decode_*\n9lives"))
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-metrics_keep-error")
            .contains("\"9lives\" is not a Prometheus metric name"),
        "{}",
        page.text("#f-metrics_keep-error")
    );
    assert_eq!(app.candidate_count().await, 0, "nothing stored");
    let r = app
        .post_form("/candidates", &fields("vllm:spec_decode_*, vllm:num_requests_swapped"))
        .await;
    assert_eq!(r.status(), 303);
    let stored = &app.store.list_candidates().await.unwrap()[0];
    assert_eq!(
        stored.spec.metrics_keep,
        ["vllm:spec_decode_*", "vllm:num_requests_swapped"]
    );
    // The edit form shows them back (one a line; the page helper folds whitespace).
    let edit = app.get_html(&format!("/candidates/{}/edit", stored.id)).await;
    assert_eq!(
        edit.text("#f-metrics_keep"),
        "vllm:spec_decode_* vllm:num_requests_swapped"
    );
}

/// A series' total in an exposition read over HTTP with bakeoff's own parser.
async fn scraped_total(url: &str, series: &str) -> Option<f64> {
    let response = reqwest::get(url).await.ok()?;
    assert_eq!(response.status(), 200, "GET {url}");
    let text = response.text().await.ok()?;
    let samples = parse(&text).expect("bakeoff's own /metrics is Prometheus text").samples;
    let values: Vec<f64> = samples.iter().filter(|s| s.name == series).map(|s| s.value).collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// A mock and a stored one-candidate run of `cases` cases against it (not started).
async fn stored_run_against_mock(store: &DynStore, cases: usize) -> (i64, MockServer) {
    let file = evalset(cases);
    let mock = start_mock(MockConfig {
        profiles: vec![ModelProfile::named("own")],
        answer_keys: vec![file.clone()],
        seed: 4,
    })
    .await;
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            "own",
            mock.base_url(),
            "own",
        )))
        .await
        .unwrap();
    let run = store
        .create_run(&NewRun {
            name: "own metrics".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    (run, mock)
}

#[tokio::test]
async fn serves_own_metrics_scraped_over_http_move_with_a_run() {
    let app = crate::support::app::spawn_app().await;
    let url = app.url("/metrics");
    let sent = "bakeoff_requests_sent_total";
    let written = "bakeoff_records_written_total";
    let before = (
        scraped_total(&url, sent).await.expect("requests sent is exposed"),
        scraped_total(&url, written).await.expect("records written is exposed"),
    );
    assert!(scraped_total(&url, "bakeoff_requests_in_flight").await.is_some());
    let (run, _mock) = stored_run_against_mock(&app.store, 6).await;
    assert_eq!(run_to_end(&app.store, run).await, RunStatus::Finished);
    let records = app.store.list_request_records(run).await.unwrap().len() as f64;
    assert_eq!(records, 6.0);
    // Other tests of this process may send too (cargo test runs them on threads): at least
    // this run's requests and records.
    let after = (
        scraped_total(&url, sent).await.unwrap(),
        scraped_total(&url, written).await.unwrap(),
    );
    assert!(after.0 - before.0 >= records, "{sent}: {before:?} → {after:?}");
    assert!(after.1 - before.1 >= records, "{written}: {before:?} → {after:?}");
    // A page served meanwhile is timed in the page-latency histogram.
    let pages = "bakeoff_page_latency_seconds_count";
    let seen = scraped_total(&url, pages).await.unwrap_or(0.0);
    app.get("/runs").await;
    assert!(scraped_total(&url, pages).await.unwrap() > seen);
}

#[tokio::test]
async fn a_workers_own_metrics_scraped_over_http_count_exactly_its_runs_requests() {
    let (db_url, _dir) = crate::support::db::sqlite_url();
    let store = crate::support::db::open(&db_url).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let worker = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "worker",
            "--database-url",
            &db_url,
            "--name",
            "scraped",
            "--metrics-listen",
            &listen,
        ])
        .env("BAKEOFF_LOG", "warn")
        .env("NO_COLOR", "1")
        .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting bakeoff worker");
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let worker = Killed(worker);
    let url = format!("http://{listen}/metrics");
    let deadline = std::time::Duration::from_secs(90);
    let before = crate::support::wait::until_some("the worker's /metrics answers", deadline, || async {
        match reqwest::get(&url).await {
            Ok(r) if r.status() == 200 => {
                let samples = parse(&r.text().await.ok()?).ok()?.samples;
                samples
                    .iter()
                    .find(|s| s.name == "bakeoff_requests_sent_total")
                    .map(|s| s.value)
            }
            _ => None,
        }
    })
    .await;
    assert_eq!(before, 0.0, "a new worker has sent nothing");
    let (run, _mock) = stored_run_against_mock(&store, 5).await;
    store.request_run(run).await.unwrap();
    crate::support::wait::until("the worker finishes the run", deadline, || async {
        store.get_run(run).await.unwrap().unwrap().status.is_terminal()
    })
    .await;
    assert_eq!(store.get_run(run).await.unwrap().unwrap().status, RunStatus::Finished);
    let records = store.list_request_records(run).await.unwrap().len() as f64;
    // The worker's process sent this run's requests and nothing else.
    assert_eq!(scraped_total(&url, "bakeoff_requests_sent_total").await, Some(records));
    assert_eq!(
        scraped_total(&url, "bakeoff_records_written_total").await,
        Some(records)
    );
    drop(worker);
}

async fn telemetry_scrapes_are_stored_and_read_back_in_time_order(t: TestStore) {
    let store = &t.store;
    let file = evalset(1);
    let version = store.save_evalset_version(&file).await.unwrap();
    let spec = CandidateSpec {
        metrics_url: Some("http://127.0.0.1:9/metrics".into()),
        gpu_metrics_url: Some("http://127.0.0.1:9/gpu?collect[]=power".into()),
        metrics_keep: vec!["vllm:num_requests_swapped".into(), "vllm:spec_decode_*".into()],
        ..CandidateSpec::openai_chat("scraped", "http://127.0.0.1:9/v1", "m")
    };
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let stored = store.get_candidate(candidate).await.unwrap().unwrap();
    assert_eq!(stored.spec.metrics_url, spec.metrics_url, "{}", t.backend);
    assert_eq!(stored.spec.gpu_metrics_url, spec.gpu_metrics_url, "{}", t.backend);
    assert_eq!(stored.spec.metrics_keep, spec.metrics_keep, "{}", t.backend);
    let run = store
        .create_run(&NewRun {
            name: "scrapes".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    let samples = parse("vllm:num_requests_waiting{model_name=\"a \\\"q\\\" b\\nc\"} 3\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 251.5\nx_bucket{le=\"+Inf\"} NaN\n")
        .unwrap()
        .samples;
    let scrapes = vec![
        Scrape {
            source: Source::Gpu,
            at_us: 2_000_000,
            took_us: 900,
            level: None,
            boundary: None,
            error: None,
            samples: samples[1..].to_vec(),
        },
        Scrape {
            source: Source::Server,
            at_us: 1_000_000,
            took_us: 1200,
            level: Some(3),
            boundary: Some(Boundary::Start),
            error: None,
            samples: samples[..1].to_vec(),
        },
        Scrape {
            source: Source::Server,
            at_us: 3_000_000,
            took_us: 2_000_000,
            level: Some(3),
            boundary: Some(Boundary::End),
            error: Some("no answer within 2 s".into()),
            samples: Vec::new(),
        },
    ];
    assert_eq!(
        store.append_telemetry_scrapes(run, candidate, &scrapes).await.unwrap(),
        3
    );
    let back = store.list_telemetry_scrapes(run, candidate).await.unwrap();
    assert_eq!(back.len(), 3, "{}", t.backend);
    assert_eq!(back[0], scrapes[1], "{}: label escapes kept", t.backend);
    assert_eq!(back[2], scrapes[2], "{}", t.backend);
    // NaN is not equal to itself: compare the rest of the GPU scrape by hand.
    assert_eq!(back[1].samples[0], scrapes[0].samples[0], "{}", t.backend);
    assert!(back[1].samples[1].value.is_nan(), "{}", t.backend);
    // Another candidate of no run: refused, nothing stored.
    assert!(
        store
            .append_telemetry_scrapes(run, candidate + 99, &scrapes)
            .await
            .is_err()
    );
    assert!(
        store
            .list_telemetry_scrapes(run, candidate + 99)
            .await
            .unwrap()
            .is_empty()
    );
}
each_backend!(telemetry_scrapes_are_stored_and_read_back_in_time_order);
