//! One bad candidate never sinks a run (issue 13 item 4), against the built-in mock over real
//! HTTP: a wrong model name stops only its candidate at the staged start; a stream cut in
//! stage 3 is retried; a 429's `Retry-After` is waited out; an error budget stops a failing
//! candidate; the run page, the scorecard and its export state each stop; "Run again" and "Run
//! again without X" work through the page's own forms. Times are checked on the stored send
//! timestamps, never as speeds.
use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::summarise_candidate;
use bakeoff::domain::run::{ErrorBudget, ErrorClass, NewRun, Phase, RequestRecord, RunConfig, RunStatus, StopStage};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::app::{Page, TestApp, spawn_app_on, text_of};
use crate::support::db::{TestStore, each_backend, sqlite_store};
use crate::support::runs::{RUN_DEADLINE, run_to_end};

fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"isolation-test","task":"generation","prompt":"Sentence {{n}}","graders":[{"kind":"exact"}],"max_tokens":32}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"The quick brown fox number {i} jumps\"}}"
        ));
    }
    EvalSetFile::parse("isolation-test.jsonl", &text).expect("test eval set parses")
}

/// A quick model (a request takes a few tens of ms).
fn quick(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named(name)
    }
}

async fn start_mock(profiles: Vec<ModelProfile>, key: &EvalSetFile) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: vec![key.clone()],
        seed: 13,
    })
    .await
}

fn spec(name: &str, mock: &MockServer, model: &str) -> CandidateSpec {
    CandidateSpec {
        api_key: Some(Secret::new("sk-isolation-test")),
        ..CandidateSpec::openai_chat(name, mock.base_url(), model)
    }
}

fn config(retries: u32, staged_rollout: bool) -> RunConfig {
    RunConfig {
        concurrency: 2,
        warmup_requests: 1,
        temperature: Some(0.0),
        timeout_secs: 20,
        retries,
        staged_rollout,
        ..RunConfig::default()
    }
}

/// Stores the eval set, the candidates (in order) and a queued run; returns (run, candidate ids).
async fn create_run(
    store: &DynStore,
    file: &EvalSetFile,
    specs: &[CandidateSpec],
    config: RunConfig,
) -> (i64, Vec<i64>) {
    let version = store.save_evalset_version(file).await.expect("saving the eval set");
    let mut ids = Vec::new();
    for s in specs {
        ids.push(
            store
                .create_candidate(&crate::support::checked::admin_new(s))
                .await
                .expect("saving a candidate"),
        );
    }
    let run = store
        .create_run(&NewRun {
            name: "isolation test".into(),
            evalset_version_id: version,
            candidate_ids: ids.clone(),
            config,
        })
        .await
        .expect("creating the run");
    (run, ids)
}

fn measured_of(records: &[RequestRecord], candidate: i64) -> Vec<&RequestRecord> {
    records
        .iter()
        .filter(|r| r.candidate_id == candidate && !r.is_warmup)
        .collect()
}

/// Starts the run on the app's runner and waits for its end.
async fn run_on_app(app: &TestApp, run: i64) -> RunStatus {
    app.state.runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(run))
        .await
        .expect("the run ended in time");
    app.store.get_run(run).await.unwrap().unwrap().status
}

/// Submits the run page's "run again" form whose button says `label`, exactly as a browser
/// would (its action and hidden fields); returns the new run's id.
async fn submit_again(app: &TestApp, page: &Page, label: &str) -> i64 {
    let form = page
        .select("form.run-again-form")
        .into_iter()
        .find(|f| {
            f.select(&scraper::Selector::parse("button").unwrap())
                .any(|b| text_of(&b) == label)
        })
        .unwrap_or_else(|| panic!("no {label:?} button on the run page"));
    let action = form.value().attr("action").expect("the form has an action").to_string();
    let fields: Vec<(String, String)> = form
        .select(&scraper::Selector::parse("input[type=hidden]").unwrap())
        .map(|i| {
            (
                i.value().attr("name").unwrap().to_string(),
                i.value().attr("value").unwrap_or_default().to_string(),
            )
        })
        .collect();
    let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = app.post_form(&action, &pairs).await;
    assert_eq!(
        r.status().as_u16(),
        303,
        "{label}: {}",
        r.text().await.unwrap_or_default()
    );
    let location = r.headers()["location"].to_str().unwrap().to_string();
    location
        .trim_start_matches("/runs/")
        .parse()
        .expect("redirected to the new run")
}

async fn one_wrong_model_name_stops_only_its_candidate(t: TestStore) {
    let app = spawn_app_on(t).await;
    // The shipped threshold profiles, so the scorecard can judge.
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let file = evalset(6);
    let mock = start_mock(vec![quick("alpha"), quick("beta")], &file).await;
    let specs = [
        spec("alpha", &mock, "alpha"),
        spec("typo", &mock, "no-such-model"),
        spec("beta", &mock, "beta"),
    ];
    let (run, ids) = create_run(&app.store, &file, &specs, config(1, true)).await;
    let (alpha, typo, beta) = (ids[0], ids[1], ids[2]);

    assert_eq!(run_on_app(&app, run).await, RunStatus::Finished, "{}", app.backend);
    let records = app.store.list_request_records(run).await.unwrap();
    for good in [alpha, beta] {
        let measured = measured_of(&records, good);
        assert_eq!(measured.len(), 6, "{}: every case of a healthy candidate", app.backend);
        assert!(measured.iter().all(|r| r.succeeded()));
    }
    // The wrong one sent its first stage only: a 404 is not worth retrying.
    let typo_records: Vec<&RequestRecord> = records.iter().filter(|r| r.candidate_id == typo).collect();
    assert_eq!(typo_records.len(), 1, "{typo_records:?}");
    assert_eq!(typo_records[0].phase, Phase::Smoke);
    assert_eq!(typo_records[0].http_status, Some(404));

    let stops = app.store.list_candidate_stops(run).await.unwrap();
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!((stops[0].candidate_id, stops[0].stage), (typo, StopStage::StagedStart));
    let outcome = stops[0].outcome();
    assert!(
        outcome.starts_with("stopped at staged start: stage 1/3")
            && outcome.contains("HTTP 404")
            && outcome.contains("no-such-model"),
        "{outcome}"
    );

    // The run page states the stop and offers both buttons.
    let (page, _) = app.page(&format!("/runs/{run}")).await;
    let stopped = page.text(&format!("[data-stopped-candidate=\"{typo}\"]"));
    assert!(
        stopped.contains("typo") && stopped.contains("NO-GO") && stopped.contains("HTTP 404"),
        "{stopped}"
    );
    let buttons = page.texts("form.run-again-form button");
    assert_eq!(buttons, ["Run again", "Run again without typo"]);

    // The scorecard: NO-GO with the stop as its first reason, on the page and in the export.
    let (card, _) = app.page(&format!("/runs/{run}/scorecard")).await;
    let verdict = card.text(&format!(".verdict-card[data-candidate=\"{typo}\"] p.verdict"));
    assert_eq!(verdict, "NO-GO");
    let reasons = card.texts(&format!(".verdict-card[data-candidate=\"{typo}\"] .reasons li"));
    assert!(reasons[0].starts_with("stopped at staged start"), "{reasons:?}");
    let json: serde_json::Value = app
        .get(&format!("/runs/{run}/scorecard/export.json"))
        .await
        .json()
        .await
        .unwrap();
    let exported = json.to_string();
    assert!(exported.contains("stopped at staged start"), "{exported}");

    // "Run again without typo": the same settings, the two others.
    let original = app.store.get_run(run).await.unwrap().unwrap();
    let without = submit_again(&app, &page, "Run again without typo").await;
    let again = app.store.get_run(without).await.unwrap().unwrap();
    assert_eq!(again.candidate_ids, vec![alpha, beta]);
    assert_eq!(
        (again.config, again.evalset_version_id),
        (original.config.clone(), original.evalset_version_id)
    );
    assert!(again.name.ends_with("without typo"), "{}", again.name);
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(without))
        .await
        .unwrap();
    let again = app.store.get_run(without).await.unwrap().unwrap();
    assert_eq!(again.status, RunStatus::Finished);
    assert!(app.store.list_candidate_stops(without).await.unwrap().is_empty());
    let (page2, _) = app.page(&format!("/runs/{without}")).await;
    assert_eq!(
        page2.texts(".run-again-form button"),
        ["Run again"],
        "a clean run offers only the same run again: no candidate to leave out"
    );

    // "Run again": all three, same order and settings.
    let all = submit_again(&app, &page, "Run again").await;
    let again = app.store.get_run(all).await.unwrap().unwrap();
    assert_eq!(
        (again.candidate_ids, again.config),
        (vec![alpha, typo, beta], original.config)
    );
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(all))
        .await
        .unwrap();

    // "without" must name one of the run's candidates.
    let r = app
        .post_form(&format!("/runs/{run}/again"), &[("without", "999999")])
        .await;
    assert_eq!(r.status().as_u16(), 400);
}
each_backend!(one_wrong_model_name_stops_only_its_candidate);

#[tokio::test]
async fn a_stream_cut_in_stage_3_is_retried_and_the_run_goes_on() {
    let (store, _db) = sqlite_store().await;
    let file = evalset(5);
    // beta's 4th admitted request is stage 3's second: its stream is cut half-way.
    let cut = ModelProfile {
        cut_requests: vec![4],
        ..quick("beta")
    };
    let mock = start_mock(vec![quick("alpha"), cut], &file).await;
    let specs = [spec("alpha", &mock, "alpha"), spec("beta", &mock, "beta")];
    let (run, ids) = create_run(&store, &file, &specs, config(1, true)).await;
    assert_eq!(run_to_end(&store, run).await, RunStatus::Finished);
    assert!(store.list_candidate_stops(run).await.unwrap().is_empty());
    let records = store.list_request_records(run).await.unwrap();
    let smoke: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.candidate_id == ids[1] && r.phase == Phase::Smoke)
        .collect();
    let cut: Vec<&&RequestRecord> = smoke
        .iter()
        .filter(|r| r.error_class == Some(ErrorClass::StreamCut))
        .collect();
    assert_eq!(cut.len(), 1, "{smoke:?}");
    let retried = smoke
        .iter()
        .find(|r| r.case_id == cut[0].case_id && r.repetition == cut[0].repetition && r.attempt == 1)
        .expect("the cut request was retried");
    assert!(retried.succeeded(), "{retried:?}");
    assert!(retried.repetition >= 2, "it was a stage-3 request (repetitions 2..)");
    for id in &ids {
        assert_eq!(
            measured_of(&records, *id).len(),
            5,
            "both candidates measured every case"
        );
    }
}

#[tokio::test]
async fn a_429_is_retried_no_sooner_than_its_retry_after_and_counted_once() {
    let (store, _db) = sqlite_store().await;
    let file = evalset(2);
    let limited = ModelProfile {
        rate_limit_requests: vec![1],
        retry_after_s: 1,
        ..quick("alpha")
    };
    let mock = start_mock(vec![limited], &file).await;
    let config = RunConfig {
        concurrency: 1,
        warmup_requests: 0,
        ..config(1, false)
    };
    let (run, ids) = create_run(&store, &file, &[spec("alpha", &mock, "alpha")], config).await;
    assert_eq!(run_to_end(&store, run).await, RunStatus::Finished);
    let records = store.list_request_records(run).await.unwrap();
    let refused = records
        .iter()
        .find(|r| r.error_class == Some(ErrorClass::RateLimited))
        .expect("the first request was refused");
    assert_eq!((refused.attempt, refused.http_status), (0, Some(429)));
    let retry = records
        .iter()
        .find(|r| r.case_id == refused.case_id && r.attempt == 1)
        .expect("it was retried");
    assert!(retry.succeeded());
    // Retry-After counts from the refusal's arrival: the retry's send is at least 1 s later.
    let refusal_arrived = refused.sent_at_us + refused.end_us.get().unwrap_or(0);
    let waited_us = retry.sent_at_us - refusal_arrived;
    assert!(waited_us >= 1_000_000, "retried after {waited_us} µs");
    // The retry's wait is not client queue time, and the request counts once in the figures.
    assert!(retry.client_queue_us < 500_000, "{}", retry.client_queue_us);
    let summary = summarise_candidate(ids[0], &records, |_| 1.0);
    assert_eq!((summary.requests, summary.failures), (2, 0));
    assert_eq!(summary.ttft_ms.map(|d| d.n), Some(2));
}

#[tokio::test]
async fn a_candidate_over_its_error_budget_is_stopped_while_the_other_finishes() {
    let (store, _db) = sqlite_store().await;
    let file = evalset(12);
    let broken = ModelProfile {
        error_500_rate: 1.0,
        ..quick("broken")
    };
    let mock = start_mock(vec![broken, quick("alpha")], &file).await;
    let config = RunConfig {
        concurrency: 1,
        warmup_requests: 0,
        error_budget: ErrorBudget {
            max_failed_percent: 50.0,
            window: 4,
        },
        ..config(0, false)
    };
    let specs = [spec("broken", &mock, "broken"), spec("alpha", &mock, "alpha")];
    let (run, ids) = create_run(&store, &file, &specs, config).await;
    assert_eq!(run_to_end(&store, run).await, RunStatus::Finished);
    let records = store.list_request_records(run).await.unwrap();
    // One request at a time: the budget is judged after the 4th and stops the 5th.
    assert_eq!(measured_of(&records, ids[0]).len(), 4);
    assert_eq!(measured_of(&records, ids[1]).len(), 12, "the other candidate went on");
    let stops = store.list_candidate_stops(run).await.unwrap();
    assert_eq!(stops.len(), 1);
    assert_eq!(
        (stops[0].candidate_id, stops[0].stage),
        (ids[0], StopStage::ErrorBudget)
    );
    assert!(
        stops[0].reason.starts_with("4 of its last 4 measured requests failed") && stops[0].reason.contains("http_5xx"),
        "{}",
        stops[0].reason
    );
    let events = store.list_run_events(run).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("broken: stopped by its error budget")),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e
            .message
            .starts_with("finished: 1 of 2 candidates measured; stopped: broken")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_run_whose_every_candidate_stops_fails_saying_why_for_each() {
    let (store, _db) = sqlite_store().await;
    let file = evalset(3);
    let mock = start_mock(vec![quick("alpha")], &file).await;
    let specs = [spec("one", &mock, "missing-1"), spec("two", &mock, "missing-2")];
    let (run, _) = create_run(&store, &file, &specs, config(1, true)).await;
    assert_eq!(run_to_end(&store, run).await, RunStatus::Failed);
    let error = store.get_run(run).await.unwrap().unwrap().error.unwrap_or_default();
    assert!(
        error.starts_with("every candidate was stopped: one: stopped at staged start")
            && error.contains("two: stopped at staged start")
            && error.contains("missing-2"),
        "{error}"
    );
}
