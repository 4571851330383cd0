//! Replay as a run level (issue 48, docs/workloads.md "Replay as a run level"): a generated
//! shared-prefix workload replayed as level 1 of a run of two candidates against the mock's
//! prefix cache, through the JSON API, on both databases. Checked against the mock's ground
//! truth: every workload request reached the mock exactly once per candidate, with the recorded
//! input length (the synthetic text is o200k-exact and the same for both candidates) and
//! `max_tokens` the recorded output; bakeoff's per-request cached-token figures are the mock's
//! prefix cache's; the fidelity rows are stored; a latency rule without `@c=N` judges the
//! replay level; bad input is refused naming the field; the run page and the scorecard show
//! the replay block.
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::Phase;
use bakeoff::domain::workload::WorkloadFile;
use bakeoff::domain::workload::generate::{PoolPrefix, SharedPrefixSpec};
use bakeoff::domain::workload::replay::{replay_case_id, replay_index};
use bakeoff::engine::replay::prompt_of;
use bakeoff::engine::run::pool::request_id;
use bakeoff::engine::run::replay_level::text_seed;
use bakeoff::engine::tokens::o200k::o200k;
use bakeoff::mock::{MockConfig, ModelProfile};
use serde_json::{Value, json};

use crate::support::app::{TestApp, spawn_app_on};
use crate::support::db::{TestStore, each_backend};
use crate::support::runs::{ground_truth, start_mock};

/// A fast model whose prefix cache keeps everything for the test's length.
fn cachey(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 2.0,
        prefill_ms_per_token: 0.01,
        inter_token_ms: Some(0.3),
        jitter: 0.0,
        accuracy: 1.0,
        prefix_cache: true,
        prefix_cache_ttl_ms: Some(600_000.0),
        ..ModelProfile::named(name)
    }
}

/// 40 requests at 100 req/s (Poisson) sharing a 64-token system prompt and two pool prefixes.
fn workload() -> WorkloadFile {
    SharedPrefixSpec {
        name: "support-bot".into(),
        description: String::new(),
        requests: 40,
        per_second: 100.0,
        poisson: true,
        seed: 3,
        system_tokens: 64,
        prefixes: vec![
            PoolPrefix {
                tokens: 32,
                weight: 2.0,
            },
            PoolPrefix {
                tokens: 48,
                weight: 1.0,
            },
        ],
        suffix_min: 1,
        suffix_max: 24,
        output_tokens: 5,
        cache_bust: false,
        block_tokens: 16,
    }
    .generate("spec")
    .expect("the pool generates")
}

async fn post(app: &TestApp, path: &str, content_type: &str, body: String) -> (u16, Value) {
    let r = app
        .client
        .post(app.url(path))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get_json(app: &TestApp, path: &str) -> Value {
    let r = app.get(path).await;
    assert_eq!(r.status().as_u16(), 200, "GET {path}");
    r.json().await.unwrap()
}

/// The fields a 422 problem names.
fn fields(problem: &Value) -> Vec<String> {
    problem["field_errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["field"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn a_workload_replayed_as_a_run_level_agrees_with_the_mock_and_is_judged(db: TestStore) {
    let backend = db.backend;
    let key = EvalSetFile::parse("gate-set.jsonl", &crate::gate::evalset_text()).unwrap();
    let mock = start_mock(MockConfig {
        profiles: vec![cachey("model-a"), cachey("model-b")],
        answer_keys: vec![key],
        seed: 5,
    })
    .await;
    let app = spawn_app_on(db).await;
    for m in ["model-a", "model-b"] {
        let toml = crate::api_v1::candidate_toml(m, &mock.base_url(), m);
        let (status, body) = post(&app, "/api/v1/candidates", "application/toml", toml).await;
        assert_eq!(status, 200, "{backend}: {body}");
    }
    let (status, body) = post(
        &app,
        "/api/v1/evalsets",
        "application/jsonl",
        crate::gate::evalset_text(),
    )
    .await;
    assert_eq!(status, 200, "{backend}: {body}");
    let workload = workload();
    let n = workload.requests.len();
    let (version, _) = app.store.save_workload_version(&workload).await.unwrap();
    let profile = json!({"bakeoff_profile": 1, "name": "replay latency", "rule": [
        {"metric": "ttft_p95_ms", "comparator": "<=", "value": 60000},
        {"metric": "failure_rate", "comparator": "<=", "value": 5}
    ]});
    let (status, body) = post(&app, "/api/v1/profiles", "application/json", profile.to_string()).await;
    assert_eq!(status, 200, "{backend}: {body}");
    let profile_id = body["profile"]["id"].as_i64().unwrap();

    // Bad input: refused naming each field, nothing stored.
    let bad = json!({"evalset": "gate-set", "candidates": ["model-a"], "settings": {
        "load": {"shape": "replay", "workload_version": version + 1000, "replay_speed": 0}
    }});
    let (status, problem) = post(&app, "/api/v1/runs", "application/json", bad.to_string()).await;
    assert_eq!(status, 422, "{backend}: {problem}");
    let named = fields(&problem);
    assert!(named.iter().any(|f| f.contains("replay_speed")), "{backend}: {problem}");
    let unknown = json!({"evalset": "gate-set", "candidates": ["model-a"], "settings": {
        "load": {"shape": "replay", "workload_version": version + 1000}
    }});
    let (status, problem) = post(&app, "/api/v1/runs", "application/json", unknown.to_string()).await;
    assert_eq!(status, 422, "{backend}: {problem}");
    assert!(
        fields(&problem).iter().any(|f| f.contains("workload_version")),
        "{backend}: {problem}"
    );
    assert!(
        app.store.list_runs(10, 0).await.unwrap().is_empty(),
        "{backend}: nothing stored"
    );

    // The run: the eval set at c=2 (level 0), then the workload at 4× (level 1).
    let good = json!({"evalset": "gate-set", "candidates": ["model-a", "model-b"], "settings": {
        "concurrency": 2, "warmup_requests": 0, "retries": 0, "timeout_secs": 30, "staged_rollout": false,
        "load": {"shape": "replay", "workload_version": version, "replay_speed": 4}
    }});
    let (status, body) = post(&app, "/api/v1/runs", "application/json", good.to_string()).await;
    assert_eq!(status, 201, "{backend}: {body}");
    let run_id = body["run_id"].as_i64().unwrap();
    let done = crate::support::wait::until_some(&format!("run #{run_id} to end"), Duration::from_secs(90), || {
        let app = &app;
        async move {
            let s = get_json(app, &format!("/api/v1/runs/{run_id}")).await;
            (s["terminal"] == true).then_some(s)
        }
    })
    .await;
    assert_eq!(done["status"], "finished", "{backend}: {done}");

    let run = app.store.get_run(run_id).await.unwrap().unwrap();
    let records = app.store.list_request_records(run_id).await.unwrap();
    let truth = ground_truth(&mock).await;
    let log: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seed = text_seed(run_id);
    let prompts: Vec<String> = (0..n).map(|i| prompt_of(&workload, i, seed).0).collect();
    let mut hits = 0;
    for &candidate in &run.candidate_ids {
        let replayed: Vec<_> = records
            .iter()
            .filter(|r| r.candidate_id == candidate && replay_index(&r.case_id).is_some())
            .collect();
        let mut indices: Vec<usize> = replayed.iter().filter_map(|r| replay_index(&r.case_id)).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..n).collect::<Vec<_>>(), "{backend}: every line once");
        let mut ids = HashSet::new();
        for r in &replayed {
            let i = replay_index(&r.case_id).unwrap();
            assert!(r.succeeded(), "{backend} {}: {:?}", r.case_id, r.error_detail());
            assert_eq!((r.phase, r.attempt, r.concurrency), (Phase::Throughput, 0, 0));
            assert_eq!(*r.case_id, *replay_case_id(i));
            let recorded = &workload.requests[i];
            let id = request_id(run_id, candidate, r.phase, i, r.repetition, 0);
            let t = truth
                .get(&id)
                .unwrap_or_else(|| panic!("{backend}: the mock saw {}", r.case_id));
            // The recorded lengths: o200k-exact text, as the mock counted it; max_tokens as recorded.
            assert_eq!(o200k().encode(&prompts[i]).len(), recorded.input_tokens as usize);
            assert_eq!(
                t["prompt_tokens"].as_u64(),
                Some(u64::from(bakeoff::mock::tokens::count_chat_tokens([
                    prompts[i].as_str()
                ]))),
                "{backend} {}",
                r.case_id
            );
            assert_eq!(
                t["max_tokens"].as_u64(),
                Some(u64::from(recorded.output_tokens)),
                "{}",
                r.case_id
            );
            // Cached tokens: bakeoff's figure is the mock's prefix cache's, request by request.
            let read = t["cached_prompt_tokens"].as_u64().unwrap() as u32;
            assert_eq!(
                r.prompt_cache.map(|c| c.read_tokens),
                Some(read),
                "{backend} {}",
                r.case_id
            );
            hits += usize::from(read > 0);
            ids.insert(id);
        }
        // Sent once: the mock's log holds each of them once.
        let received = log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["client_request_id"].as_str().is_some_and(|id| ids.contains(id)))
            .count();
        assert_eq!(received, n, "{backend}: each request reached the mock once");
    }
    assert!(
        hits > n,
        "{backend}: the shared prefixes were read from the cache ({hits})"
    );

    // Fidelity rows: one per request and candidate, lengths as recorded.
    let sends = app.store.list_replay_sends(run_id).await.unwrap();
    assert_eq!(sends.len(), 2 * n, "{backend}");
    assert!(sends.iter().all(|s| s.lengths_exact() && s.segment == 0), "{backend}");
    let due: HashMap<(i64, u32), i64> = sends
        .iter()
        .map(|s| ((s.candidate_id, s.request_index), s.due_offset_us))
        .collect();
    for s in &sends {
        let other = run.candidate_ids.iter().find(|&&c| c != s.candidate_id).unwrap();
        assert_eq!(
            due[&(*other, s.request_index)],
            s.due_offset_us,
            "one schedule for both"
        );
    }

    // The verdict: the latency rule without @c=N judges the replay level (its n requests).
    let verdict = get_json(&app, &format!("/api/v1/runs/{run_id}/verdict?profile={profile_id}")).await;
    for c in verdict["candidates"].as_array().unwrap() {
        let rule = &c["rules"][0];
        assert_eq!(rule["state"], "pass", "{backend}: {verdict}");
        let conditions = rule["conditions"].as_str().unwrap();
        assert!(
            conditions.contains(&format!("n={n} requests")),
            "{backend}: judged on the replay level: {conditions}"
        );
    }

    // The run page and the scorecard show the replay block.
    let page = app.get_html(&format!("/runs/{run_id}")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.count("section.replay"), 1, "{}", page.text("main"));
    assert!(
        page.text("section.replay h2").contains("support-bot"),
        "{}",
        page.text("section.replay")
    );
    assert_eq!(
        page.texts("section.replay td[data-figure=sent]"),
        vec![format!("{n} of {n}"); 2]
    );
    assert_eq!(
        page.texts("section.replay td[data-figure=lengths]"),
        vec![format!("{n} of {n}"); 2]
    );
    assert!(
        page.text("section.replay").contains("replay fell behind"),
        "the bar is stated"
    );
    let lags = page.texts("section.replay td[data-figure=lag-p99]");
    assert!(lags.len() == 2 && lags.iter().all(|l| l.ends_with(" ms")), "{lags:?}");
    let card = app
        .get_html(&format!("/runs/{run_id}/scorecard?profile={profile_id}"))
        .await;
    assert_eq!(card.status, 200, "{}", card.text("main"));
    assert_eq!(card.count("section.replay"), 1, "{}", card.text("main"));
    mock.shutdown().await.unwrap();
}
each_backend!(a_workload_replayed_as_a_run_level_agrees_with_the_mock_and_is_judged);

/// A replay cut off mid-level (its process gone: the execution dropped where it stood) resumes:
/// every finished record is kept, the requests without one are sent once on the schedule
/// re-anchored at the resume, marked as sent after a restart.
async fn a_replay_cut_off_mid_level_resumes_and_keeps_every_finished_record(db: TestStore) {
    use bakeoff::domain::candidate::CandidateSpec;
    use bakeoff::domain::load::LoadShape;
    use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
    use bakeoff::engine::cancel::Cancel;
    use bakeoff::engine::run::executor::execute;

    let backend = db.backend;
    let store = db.store.clone();
    let key = EvalSetFile::parse("gate-set.jsonl", &crate::gate::evalset_text()).unwrap();
    let mock = start_mock(MockConfig {
        profiles: vec![cachey("model-a")],
        answer_keys: vec![key.clone()],
        seed: 5,
    })
    .await;
    let evalset = store.save_evalset_version(&key).await.unwrap();
    let spec = CandidateSpec::openai_chat("model-a", mock.base_url(), "model-a");
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    // 40 requests at 20 req/s: two seconds of replay at 1×.
    let mut w = workload();
    for (i, r) in w.requests.iter_mut().enumerate() {
        r.at_ms = i as f64 * 50.0;
    }
    let n = w.requests.len();
    let (version, _) = store.save_workload_version(&w).await.unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "replay resumed".into(),
            evalset_version_id: evalset,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                load: LoadShape::Replay {
                    workload_version: version,
                    speed: 1.0,
                },
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let replayed = |store: bakeoff::store::DynStore| async move {
        let records = store.list_request_records(run_id).await.unwrap();
        records
            .iter()
            .filter_map(|r| replay_index(&r.case_id))
            .collect::<Vec<_>>()
    };
    let first = tokio::spawn(execute(store.clone(), run_id, Cancel::never()));
    crate::support::wait::until_some("a third of the replay stored", Duration::from_secs(60), || {
        let store = store.clone();
        async move { (replayed(store).await.len() >= n / 3).then_some(()) }
    })
    .await;
    first.abort();
    let _ = first.await;
    let kept = replayed(store.clone()).await;
    assert!(kept.len() < n, "{backend}: cut off mid-level ({} of {n})", kept.len());
    assert_eq!(
        execute(store.clone(), run_id, Cancel::never()).await.unwrap(),
        RunStatus::Finished,
        "{backend}"
    );
    let mut all = replayed(store.clone()).await;
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "{backend}: every request once");
    let sends = store.list_replay_sends(run_id).await.unwrap();
    assert_eq!(sends.len(), n, "{backend}");
    let after: Vec<u32> = sends
        .iter()
        .filter(|s| s.segment > 0)
        .map(|s| s.request_index)
        .collect();
    assert!(!after.is_empty(), "{backend}: the rest was sent after the restart");
    for i in &after {
        assert!(
            !kept.contains(&(*i as usize)),
            "{backend}: request {i} kept and sent again"
        );
    }
    let events: Vec<String> = store
        .list_run_events(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(
        events.iter().any(|e| e.contains("replay resumed")),
        "{backend}: {events:?}"
    );
    mock.shutdown().await.unwrap();
}
each_backend!(a_replay_cut_off_mid_level_resumes_and_keeps_every_finished_record);
