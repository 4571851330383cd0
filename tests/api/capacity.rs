//! Capacity at the SLO against the truth server (the mock with a known service capacity, whose
//! true capacity at an SLO is computed by exact simulation, `mock::truth`): an overloaded level
//! is marked past saturation; a sweep stops after a level past saturation unless asked; a level
//! stops once its attainment is decided, with the verdict of its own requests. How
//! close the search comes to the true capacity is not a test here: over HTTP it depends on the
//! client's own latency, which a busy machine moves (a suite's neighbours are enough). It is
//! checked where the machine is the search's alone: `mock::truth`'s unit tests (simulated
//! probes, 12 searches) and `cargo bench --bench capacity` (40 repeats).
use std::time::Duration;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::capacity::{LevelVerdict, SearchSettings};
use bakeoff::domain::run::{RunConfig, Slo};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::engine::run::capacity::{CandidateCapacity, CapacityPlan, find_capacity};
use bakeoff::mock::truth::{REFERENCE, REFERENCE_PROBE_REQUESTS, TruthServer};
use bakeoff::mock::{MockConfig, MockServer};
use bakeoff::store::DynStore;

const TRUTH: TruthServer = REFERENCE;
const PROBE_REQUESTS: u32 = REFERENCE_PROBE_REQUESTS;

fn truth_slo() -> Slo {
    TRUTH.reference_slo()
}

/// Longest a search may take before the test fails instead of hanging (a whole search over
/// HTTP is 8 probes of up to 1,000 requests).
const DEADLINE: Duration = Duration::from_secs(900);

async fn truth_mock() -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles: vec![TRUTH.profile("truth")],
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await
}

fn probe_config() -> RunConfig {
    probe_config_of(PROBE_REQUESTS)
}

fn probe_config_of(requests: u32) -> RunConfig {
    RunConfig {
        concurrency: 1,
        repetitions: 1,
        warmup_requests: 4,
        max_tokens: Some(TRUTH.tokens),
        temperature: Some(0.0),
        timeout_secs: 30,
        retries: 0,
        stream: true,
        staged_rollout: false,
        requests_per_level: Some(requests),
        slo: truth_slo(),
        ..RunConfig::default()
    }
}

/// Stores the truth candidate and a workload of prompts the mock does not know (so every answer
/// is `tokens` of filler), then searches.
async fn search(store: &DynStore, mock: &MockServer, settings: SearchSettings, requests: u32) -> CandidateCapacity {
    // One candidate per search (names are unique): the light probe and the search apart.
    let name = format!("truth server from {} req/s", settings.start);
    let spec = CandidateSpec::openai_chat(name, mock.base_url(), "truth");
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let workload = synthetic_evalset(&[16], 40, TRUTH.tokens).unwrap();
    let version = store.save_evalset_version(&workload).await.unwrap();
    let plan = CapacityPlan {
        name: "capacity test".into(),
        evalset_version_id: version,
        candidate_ids: vec![candidate_id],
        config: probe_config_of(requests),
        settings,
    };
    let mut found = tokio::time::timeout(DEADLINE, find_capacity(store, &plan, Cancel::never()))
        .await
        .expect("the search ended in time")
        .expect("the search ran");
    found.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_past_saturation_is_marked() {
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let mock = truth_mock().await;
    let settings = SearchSettings {
        start: TRUTH.max_rate() * 2.0,
        max_probes: 1,
        ..SearchSettings::default()
    };
    let found = search(&store, &mock, settings, 300).await;
    let probe = &found.probes[0];
    assert!(probe.probe.past_saturation, "{:?}", probe.signs);
    assert!(probe.signs.ttft_growth.is_some(), "{:?}", probe.signs);
    assert_ne!(probe.probe.verdict(0.9), LevelVerdict::Meets);
    let events = store.list_run_events(probe.run_id).await.unwrap();
    assert!(
        events.iter().any(|e| e.message.contains("past saturation")),
        "{events:?}"
    );
    mock.shutdown().await.unwrap();
}

/// A truth server of two slots (20 ms to the first token, then two more 20 ms apart), stored as
/// a candidate, and a synthetic workload of `cases` 16-token prompts: (mock, candidate, version).
async fn two_slots(store: &DynStore, cases: usize) -> (MockServer, i64, i64) {
    let server = TruthServer {
        slots: 2,
        first_token_ms: 20.0,
        inter_token_ms: 20.0,
        tokens: 3,
    };
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![server.profile("two-slots")],
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await;
    let spec = CandidateSpec::openai_chat("two slots", mock.base_url(), "two-slots");
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let workload = synthetic_evalset(&[16], cases, server.tokens).unwrap();
    let version = store.save_evalset_version(&workload).await.unwrap();
    (mock, candidate_id, version)
}

/// A sweep over concurrency against a server of two slots: at c=8 its throughput stays that of
/// c=2 (the two slots were already full), so c=8 is past saturation, its figures say so, and c=16
/// is skipped — unless the run asks to measure past saturation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_stops_after_a_level_past_saturation_unless_asked() {
    use bakeoff::domain::calibers::run_figures;
    use bakeoff::domain::load::LoadShape;
    use bakeoff::domain::run::{NewRun, RunStatus};
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let (mock, candidate_id, version) = two_slots(&store, 20).await;
    for measure_past_saturation in [false, true] {
        let config = RunConfig {
            load: LoadShape::Levels {
                levels: vec![1, 2, 8, 16],
            },
            requests_per_level: Some(48),
            measure_past_saturation,
            ..probe_config()
        };
        let run_id = store
            .create_run(&NewRun {
                name: format!("sweep, measure past saturation: {measure_past_saturation}"),
                evalset_version_id: version,
                candidate_ids: vec![candidate_id],
                config: config.clone(),
            })
            .await
            .unwrap();
        let status = crate::support::runs::run_to_end_within(&store, run_id, DEADLINE)
            .await
            .status;
        assert_eq!(status, RunStatus::Finished);
        let records = store.list_request_records(run_id).await.unwrap();
        let figures = run_figures(&records, &config, candidate_id, |_| None);
        let at = |c: u32| {
            figures
                .levels
                .iter()
                .find(|l| l.load == bakeoff::domain::load::Load::Concurrency { concurrency: c })
        };
        let c8 = at(8).expect("c=8 measured");
        assert!(c8.saturation.throughput_flat, "{:?}", c8.saturation);
        assert!(c8.saturation.past_saturation());
        assert!(!at(2).expect("c=2 measured").saturation.past_saturation());
        let events = store.list_run_events(run_id).await.unwrap();
        let said = |text: &str| events.iter().any(|e| e.message.contains(text));
        assert!(
            events
                .iter()
                .any(|e| e.message.contains("level c=8") && e.message.contains("past saturation")),
            "{events:?}"
        );
        if measure_past_saturation {
            assert!(at(16).is_some(), "c=16 measured when asked");
            assert!(!said("skipped"), "{events:?}");
        } else {
            assert!(at(16).is_none(), "c=16 skipped");
            assert!(said("c=16 skipped: level c=8 is past saturation"), "{events:?}");
        }
    }
    mock.shutdown().await.unwrap();
}

/// Stop when decided over HTTP against a truth server of two slots of 60 ms: at c=1 every
/// request is in time, at c=16 nearly none (the queue holds each for about 400 ms). Each level
/// stops sending once its attainment is decided and says so, and keeps the verdict of its own
/// requests: a level that met at every request stops after 55 (the exact rule; Wilson's interval
/// needed 60), the overloaded one after its first 40 outcomes and the requests then in flight —
/// where the replay of its own records through the rule (`domain::decide`) cuts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_stops_once_decided_with_the_verdict_of_its_own_requests() {
    use bakeoff::domain::capacity::{DECIDE_MIN_REQUESTS, LevelDecision};
    use bakeoff::domain::decide::{IN_FLIGHT, decision_of, outcome_of, replay_run};
    use bakeoff::domain::load::LoadShape;
    use bakeoff::domain::run::{NewRun, RunStatus, split_repetition};
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let (mock, candidate_id, version) = two_slots(&store, 40).await;
    let levels = [1, 16];
    let config = RunConfig {
        load: LoadShape::Levels {
            levels: levels.to_vec(),
        },
        requests_per_level: Some(120),
        slo: Slo {
            ttft_ms: Some(300.0),
            target_attainment: Some(0.9),
            ..Slo::default()
        },
        stop_when_decided: true,
        measure_past_saturation: true,
        ..probe_config()
    };
    let run_id = store
        .create_run(&NewRun {
            name: "stop when decided".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate_id],
            config: config.clone(),
        })
        .await
        .unwrap();
    let status = crate::support::runs::run_to_end_within(&store, run_id, DEADLINE)
        .await
        .status;
    assert_eq!(status, RunStatus::Finished);
    let records = store.list_request_records(run_id).await.unwrap();
    let events = store.list_run_events(run_id).await.unwrap();
    let slo = config.effective_slo();
    let replays = replay_run(&records, &config, candidate_id, |_| None, IN_FLIGHT);
    assert_eq!(replays.len(), 2, "{replays:?}");
    for (level, c) in levels.iter().enumerate() {
        let outcomes: Vec<_> = records
            .iter()
            .filter(|r| !r.is_warmup && split_repetition(r.repetition).0 == level as u32)
            .filter_map(|r| outcome_of(r, &slo, config.retries))
            .collect();
        let (verdict, counted, _) = decision_of(&outcomes, 0.9).expect("decided");
        let said = format!(
            "level c={c} stopped when decided: SLO attainment {} the target after {counted} requests",
            verdict.as_str()
        );
        assert!(events.iter().any(|e| e.message.contains(&said)), "{said}: {events:?}");
        // Stopped: no request sent after the decision but those already in flight (at most c).
        let n = outcomes.len() as u64;
        assert!(
            n >= counted && n <= counted + u64::from(*c) && n < 120,
            "c={c}: {n} of {counted}"
        );
        // Its own requests replayed through the rule: cut where it stopped, the same verdict.
        let replay = &replays[level];
        assert_eq!(replay.decided.map(|d| (d.0, d.1)), Some((verdict, counted)));
        assert_eq!((replay.stopped, replay.full), (verdict, verdict), "c={c}");
        // The replay cuts at the deciding answer's end; the level stopped a moment later, once
        // that answer was counted, and a worker may have sent one more in between.
        assert!(
            replay.kept <= n && n <= replay.kept + 2,
            "c={c}: kept {} of {n}",
            replay.kept
        );
        if *c == 1 && outcomes.iter().all(|o| o.met) {
            // One at a time, every one in time: the exact rule says "meets" after 55.
            let mut rule = LevelDecision::new(0.9);
            (0..55).for_each(|_| rule.add(true));
            assert_eq!((verdict, counted, n), (rule.decided().unwrap(), 55, 55));
        }
        if *c == 16 {
            assert_eq!(
                (verdict, counted),
                (bakeoff::domain::capacity::LevelVerdict::Misses, DECIDE_MIN_REQUESTS)
            );
        }
    }
    mock.shutdown().await.unwrap();
}

/// Find capacity from the app: a run of load shape "capacity" over request rate with two
/// candidates, posted through the API, runs like any run and ends with each candidate's
/// capacity @ SLO, its bracket and every probe level, stored (`run_capacity`) and shown on the
/// run page with both charts. Not asserted: how close the capacity comes to the truth (load
/// dependent; `cargo bench --bench capacity` measures it).
async fn find_capacity_through_the_api(db: crate::support::db::TestStore) {
    use crate::api_v1::Api;
    use bakeoff::domain::accounts::Role;
    use serde_json::json;
    const MAX_PROBES: usize = 4;
    let app = crate::support::app::spawn_app_on(db).await;
    let mock = truth_mock().await;
    let api = Api::new(&app, "planner", Role::Admin).await;
    let mut toml = String::from("bakeoff_candidates = 1\n");
    for name in ["truth-a", "truth-b"] {
        toml.push_str(&format!(
            "[[candidate]]\nname = \"{name}\"\nprovider = \"openai-chat\"\nbase_url = \"{}\"\nmodel = \"truth\"\n",
            mock.base_url()
        ));
    }
    let a = api
        .send("POST", "/api/v1/candidates", Some(("application/toml", toml)))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let mut set = String::from(
        r#"{"bakeoff_evalset":1,"name":"capacity-set","task":"generation","prompt":"Tell me about {{n}}","max_tokens":3}"#,
    );
    for i in 0..20 {
        set.push_str(&format!("\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}}}}"));
    }
    set.push('\n');
    let a = api
        .send("POST", "/api/v1/evalsets", Some(("application/jsonl", set)))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let slo = truth_slo();
    let settings = json!({
        "concurrency": 4, "warmup_requests": 4, "retries": 0, "timeout_secs": 30, "temperature": 0.0,
        "staged_rollout": false, "max_tokens": TRUTH.tokens,
        "slo": {"ttft_ms": slo.ttft_ms, "target_percent": 90},
        "load": {"shape": "capacity", "capacity_axis": "rate", "rate": (TRUTH.max_rate() * 0.4).round(),
                 "capacity_max_probes": MAX_PROBES, "requests_per_level": 120},
    });
    // Without an SLO target the search has nothing to look for: refused, naming the field.
    let mut no_target = settings.clone();
    no_target["slo"] = json!({"ttft_ms": 70});
    let a = api
        .post(
            "/api/v1/runs",
            &json!({"evalset": "capacity-set", "candidates": ["truth-a"], "settings": no_target}),
        )
        .await;
    assert!((400..500).contains(&a.status), "{a:?}");
    assert!(a.body.to_string().contains("target_percent"), "{a:?}");
    let a = api
        .post(
            "/api/v1/runs",
            &json!({"evalset": "capacity-set", "candidates": ["truth-a", "truth-b"], "settings": settings}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let run = a.body["run_id"].as_i64().unwrap();
    let done = crate::support::wait::until_some(&format!("run #{run} to end"), DEADLINE, || async {
        let status = api.ok(&format!("/api/v1/runs/{run}")).await;
        (status["terminal"] == true).then_some(status)
    })
    .await;
    assert_eq!(done["status"], "finished", "{done}");
    // Stored: each candidate's search, with an outcome, its probes within the budget and the
    // estimate inside its bracket.
    let searches = app.store.list_run_capacity(run).await.unwrap();
    assert_eq!(searches.len(), 2, "each candidate its own search");
    let records = app.store.list_request_records(run).await.unwrap();
    for s in &searches {
        let outcome = s.outcome.as_ref().expect("the search ended");
        assert!(
            !s.probes.is_empty() && s.probes.len() <= MAX_PROBES,
            "{:?}",
            s.probes.len()
        );
        if let Some(c) = outcome.capacity {
            assert!(outcome.lower.is_none_or(|l| l <= c), "{outcome:?}");
            assert!(outcome.upper.is_none_or(|u| c <= u), "{outcome:?}");
        }
        // Every probe is a level of this run, its records kept under it.
        for p in &s.probes {
            assert_eq!(p.run_id, run);
            assert!(p.probe.requests > 0, "{p:?}");
            let level = bakeoff::domain::capacity::level_of(s.search.settings.axis, p.probe.load);
            let kept = records
                .iter()
                .filter(|r| {
                    r.candidate_id == s.candidate_id
                        && !r.is_warmup
                        && bakeoff::domain::run::split_repetition(r.repetition).0 == level
                })
                .count() as u64;
            assert!(kept >= p.probe.requests, "{kept} records at {} for {p:?}", p.probe.load);
        }
    }
    // The run page shows it: a headline per candidate, a row per probe, both charts.
    let r = reqwest::Client::new()
        .get(app.url(&format!("/runs/{run}")))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let page = crate::support::app::Page::parse(200, &r.text().await.unwrap());
    assert_eq!(page.count("section.capacity article.capacity-candidate"), 2);
    let headlines = page.texts("[data-capacity-headline]");
    assert!(
        headlines.iter().all(|h| h.starts_with("capacity @ SLO")),
        "{headlines:?}"
    );
    let rows: usize = searches.iter().map(|s| s.probes.len()).sum();
    assert_eq!(page.count("table.capacity-probes tbody tr"), rows);
    assert_eq!(page.count("section.capacity #chart-capacity svg"), 1);
    assert_eq!(page.count("section.capacity #chart-frontier svg"), 1);
    mock.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_capacity_through_the_api_sqlite() {
    find_capacity_through_the_api(crate::support::db::sqlite_test_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_capacity_through_the_api_postgres() {
    find_capacity_through_the_api(crate::support::db::postgres_test_store().await).await;
}
