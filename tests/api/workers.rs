//! Workers past one machine: real `bakeoff worker` processes sharing a PostgreSQL database take
//! the units of queued runs under leases. Three workers finish runs with exactly one record per
//! case; a worker killed with SIGKILL mid-unit loses the unit to another once its lease runs
//! out, and nothing is lost or stored twice; a candidate that needs a label is measured only by a
//! worker carrying it; the per-candidate cap holds across workers.
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::domain::workers::UnitStatus;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::db::postgres_url;

/// Longest a test waits for anything.
const DEADLINE: Duration = Duration::from_secs(90);

/// A `bakeoff worker` process, killed when dropped.
struct Worker {
    child: Child,
}

impl Worker {
    fn start(database_url: &str, name: &str, extra: &[&str]) -> Worker {
        let mut args = vec![
            "worker",
            "--database-url",
            database_url,
            "--name",
            name,
            "--lease-secs",
            "2",
        ];
        args.extend_from_slice(extra);
        let child = Command::new(env!("CARGO_BIN_EXE_bakeoff"))
            .args(&args)
            .env("BAKEOFF_LOG", "warn")
            .env("NO_COLOR", "1")
            .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting bakeoff worker");
        Worker { child }
    }

    /// SIGKILL: no chance to give anything back.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"workers","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":8}"#,
    );
    text.push('\n');
    for i in 0..cases {
        let label = if i % 2 == 0 { "positive" } else { "negative" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:02}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":\"{label}\"}}\n"
        ));
    }
    EvalSetFile::parse("workers.jsonl", &text).expect("the eval set parses")
}

/// A mock whose every request takes ≈ `request_ms`, one profile per name.
async fn mock(names: &[&str], file: &EvalSetFile, request_ms: f64) -> MockServer {
    let profiles = names
        .iter()
        .map(|name| ModelProfile {
            ttft_ms: request_ms / 2.0,
            inter_token_ms: Some(request_ms / 16.0),
            tokens_per_chunk: 1,
            jitter: 0.0,
            ..ModelProfile::named(*name)
        })
        .collect();
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await
}

struct Seeded {
    version: i64,
    candidates: Vec<i64>,
}

async fn seed(store: &DynStore, file: &EvalSetFile, mock: &MockServer, names: &[&str]) -> Seeded {
    seed_at(store, file, &mock.base_url(), names).await
}

/// [`seed`] with candidates reaching the mock at `base_url` (e.g. through a proxy).
async fn seed_at(store: &DynStore, file: &EvalSetFile, base_url: &str, names: &[&str]) -> Seeded {
    let version = store.save_evalset_version(file).await.expect("saving the eval set");
    let mut candidates = Vec::new();
    for name in names {
        let spec = CandidateSpec::openai_chat(*name, base_url, *name);
        candidates.push(
            store
                .create_candidate(&crate::support::checked::admin_new(&spec))
                .await
                .expect("saving a candidate"),
        );
    }
    Seeded { version, candidates }
}

fn run_config(concurrency: u32) -> RunConfig {
    RunConfig {
        concurrency,
        repetitions: 1,
        warmup_requests: 0,
        temperature: Some(0.0),
        timeout_secs: 20,
        retries: 0,
        staged_rollout: false,
        ..RunConfig::default()
    }
}

async fn create_run(store: &DynStore, version: i64, candidates: &[i64], concurrency: u32) -> i64 {
    create_run_with(store, version, candidates, run_config(concurrency)).await
}

async fn create_run_with(store: &DynStore, version: i64, candidates: &[i64], config: RunConfig) -> i64 {
    let run = store
        .create_run(&NewRun {
            name: "workers".into(),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
            config,
        })
        .await
        .expect("creating a run");
    // Handed to the workers, as a page, the API or `run start` does.
    store.request_run(run).await.expect("queueing the run");
    run
}

/// Polls (bounded) until `check` holds.
async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::wait::until(what, DEADLINE, check).await;
}

async fn status(store: &DynStore, run: i64) -> RunStatus {
    store.get_run(run).await.unwrap().expect("the run exists").status
}

async fn events(store: &DynStore, run: i64) -> Vec<String> {
    store
        .list_run_events(run)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect()
}

/// Every measured record of the run is one (candidate, case, repetition, attempt), and there
/// is one per case and candidate.
async fn exactly_one_record_per_case(store: &DynStore, run: i64, candidates: &[i64], cases: usize) {
    let records = store.list_request_records(run).await.unwrap();
    let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
    let keys: BTreeSet<_> = measured
        .iter()
        .map(|r| (r.candidate_id, r.case_id.clone(), r.repetition, r.attempt))
        .collect();
    assert_eq!(keys.len(), measured.len(), "run {run}: no record stored twice");
    for &candidate in candidates {
        let cases_seen: BTreeSet<_> = measured
            .iter()
            .filter(|r| r.candidate_id == candidate)
            .map(|r| r.case_id.clone())
            .collect();
        let of_candidate = measured.iter().filter(|r| r.candidate_id == candidate).count();
        assert_eq!(
            (cases_seen.len(), of_candidate),
            (cases, cases),
            "run {run}, candidate {candidate}: every case exactly once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn three_workers_finish_three_runs_with_exactly_one_record_per_case() {
    const CASES: usize = 12;
    let (url, _guard) = postgres_url().await;
    let store = crate::support::db::open(&url).await;
    let names = ["slow-a", "slow-b", "slow-c"];
    let file = evalset(CASES);
    let mock = mock(&names, &file, 40.0).await;
    // Every request is held (a proxy forwarding nothing) until each worker holds a unit: one
    // unit at a time each, so no worker can finish its run and take another's, however late
    // another starts under load.
    let proxy = crate::support::proxy::FaultProxy::start(mock.addr).await;
    proxy.blackhole_on();
    let s = seed_at(&store, &file, &format!("http://{}/v1", proxy.addr), &names).await;
    let _workers: Vec<Worker> = ["w1", "w2", "w3"]
        .iter()
        .map(|name| Worker::start(&url, name, &["--capacity", "1"]))
        .collect();
    until("the three workers are up", || async {
        store.list_workers().await.unwrap().len() == 3
    })
    .await;
    let runs = [
        create_run(&store, s.version, &s.candidates[0..1], 2).await,
        create_run(&store, s.version, &s.candidates[1..2], 2).await,
        create_run(&store, s.version, &s.candidates[2..3], 2).await,
    ];
    until("each worker holds a unit", || async {
        let mut leased = 0;
        for &run in &runs {
            let units = store.list_run_units(run).await.unwrap();
            leased += units.iter().filter(|u| u.status == UnitStatus::Leased).count();
        }
        leased == 3
    })
    .await;
    proxy.blackhole_off();
    for &run in &runs {
        until("the run finishes", || async { status(&store, run).await.is_terminal() }).await;
        assert_eq!(
            status(&store, run).await,
            RunStatus::Finished,
            "{:?}",
            events(&store, run).await
        );
    }
    let mut measured_by = BTreeSet::new();
    for (i, &run) in runs.iter().enumerate() {
        exactly_one_record_per_case(&store, run, &s.candidates[i..i + 1], CASES).await;
        // The closing step ends (the slot is given up) after the end-of-run step stored the
        // run's page summaries.
        until("the run gives up its slot", || async {
            let units = store.list_run_units(run).await.unwrap();
            units.len() == 2 && units.iter().all(|u| u.status == UnitStatus::Done)
        })
        .await;
        let units = store.list_run_units(run).await.unwrap();
        assert_eq!(units.len(), 2, "one candidate unit and the closing step: {units:?}");
        assert!(
            units.iter().all(|u| u.status == UnitStatus::Done && u.claims == 1),
            "{units:?}"
        );
        let candidate_unit = &units[0];
        assert!(
            candidate_unit.harness.is_some(),
            "each unit keeps its worker's harness report"
        );
        // Stored by the worker that closed the run, before it gave up the slot.
        for kind in bakeoff::web::runs::summaries::KINDS {
            assert!(
                store.get_run_summary(run, kind).await.unwrap().is_some(),
                "run {run}: its {kind} summary was stored before its slot was given up"
            );
        }
        measured_by.insert(candidate_unit.worker.clone().unwrap());
    }
    assert_eq!(measured_by.len(), 3, "each worker measured one run: {measured_by:?}");
    let workers = store.list_workers().await.unwrap();
    let now = store.database_now().await.unwrap();
    assert_eq!(
        workers
            .iter()
            .filter(|w| w.is_live(now))
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>(),
        ["w1", "w2", "w3"]
    );
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_worker_killed_mid_unit_loses_it_to_another_and_nothing_is_lost_or_stored_twice() {
    const CASES: usize = 30;
    let (url, _guard) = postgres_url().await;
    let store = crate::support::db::open(&url).await;
    let file = evalset(CASES);
    let mock = mock(&["slow-a"], &file, 200.0).await;
    let s = seed(&store, &file, &mock, &["slow-a"]).await;
    let run = create_run(&store, s.version, &s.candidates, 2).await;
    let mut first = Worker::start(&url, "doomed", &[]);
    until("some records are stored", || async {
        store.list_request_records(run).await.unwrap().len() >= 6
    })
    .await;
    first.kill();
    let stored_at_kill = store.list_request_records(run).await.unwrap().len();
    assert!(
        stored_at_kill < CASES,
        "the kill came mid-unit ({stored_at_kill} of {CASES})"
    );
    let _second = Worker::start(&url, "rescuer", &[]);
    until("the run finishes", || async { status(&store, run).await.is_terminal() }).await;
    assert_eq!(
        status(&store, run).await,
        RunStatus::Finished,
        "{:?}",
        events(&store, run).await
    );
    exactly_one_record_per_case(&store, run, &s.candidates, CASES).await;
    let units = store.list_run_units(run).await.unwrap();
    assert_eq!(units[0].worker.as_deref(), Some("rescuer"), "{units:?}");
    assert_eq!(
        units[0].claims, 2,
        "taken twice: by the killed worker, then over: {units:?}"
    );
    let log = events(&store, run).await;
    assert!(
        log.iter()
            .any(|m| m.contains("worker rescuer took over unit 1 from worker doomed")),
        "{log:?}"
    );
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_candidate_needing_a_label_is_measured_only_by_a_worker_carrying_it() {
    const CASES: usize = 4;
    let (url, _guard) = postgres_url().await;
    let store = crate::support::db::open(&url).await;
    let names = ["anywhere", "eu-only"];
    let file = evalset(CASES);
    let mock = mock(&names, &file, 40.0).await;
    let s = seed(&store, &file, &mock, &names).await;
    store
        .set_candidate_worker_labels(s.candidates[1], &["eu".to_string()])
        .await
        .unwrap();
    let run = create_run(&store, s.version, &s.candidates, 2).await;
    let _plain = Worker::start(&url, "plain", &["--labels", "us,gpu-a"]);
    // The first unit (anywhere) goes; the second waits for a worker labelled eu.
    until("the unlabelled candidate is measured", || async {
        store
            .list_run_units(run)
            .await
            .unwrap()
            .first()
            .is_some_and(|u| u.status == UnitStatus::Done)
    })
    .await;
    // Proof that the plain worker has looked at the queue since, passing over the eu unit: two
    // more heartbeats of it (its loop beats, then tries to claim, then beats again).
    let beat = || async {
        let workers = store.list_workers().await.unwrap();
        let plain = workers.iter().find(|w| w.name == "plain").expect("plain is registered");
        plain.heartbeat_at.0
    };
    let mut seen = beat().await;
    for _ in 0..2 {
        let before = seen;
        seen = crate::support::wait::until_some("a heartbeat of the plain worker", DEADLINE, || async {
            let now = beat().await;
            (now > before).then_some(now)
        })
        .await;
    }
    let units = store.list_run_units(run).await.unwrap();
    assert_eq!(
        units[1].status,
        UnitStatus::Queued,
        "nobody labelled eu took it: {units:?}"
    );
    assert_eq!(status(&store, run).await, RunStatus::Running);
    let _eu = Worker::start(&url, "eu-1", &["--labels", "eu"]);
    until("the run finishes", || async { status(&store, run).await.is_terminal() }).await;
    assert_eq!(
        status(&store, run).await,
        RunStatus::Finished,
        "{:?}",
        events(&store, run).await
    );
    let units = store.list_run_units(run).await.unwrap();
    assert_eq!(units[0].worker.as_deref(), Some("plain"));
    assert_eq!(units[1].worker.as_deref(), Some("eu-1"), "{units:?}");
    exactly_one_record_per_case(&store, run, &s.candidates, CASES).await;
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn the_per_candidate_cap_holds_across_workers() {
    const CASES: usize = 6;
    let (url, _guard) = postgres_url().await;
    let store = crate::support::db::open(&url).await;
    let file = evalset(CASES);
    let mock = mock(&["shared"], &file, 150.0).await;
    let s = seed(&store, &file, &mock, &["shared"]).await;
    let first = create_run(&store, s.version, &s.candidates, 2).await;
    let second = create_run(&store, s.version, &s.candidates, 2).await;
    let _workers = [Worker::start(&url, "a", &[]), Worker::start(&url, "b", &[])];
    for run in [first, second] {
        until("the run finishes", || async { status(&store, run).await.is_terminal() }).await;
        assert_eq!(status(&store, run).await, RunStatus::Finished);
    }
    let span = |records: Vec<bakeoff::domain::run::RequestRecord>| {
        let start = records.iter().map(|r| r.sent_at_us).min().unwrap();
        let end = records
            .iter()
            .map(|r| r.sent_at_us + r.end_us.get().unwrap_or(0))
            .max()
            .unwrap();
        (start, end)
    };
    let (_, first_end) = span(store.list_request_records(first).await.unwrap());
    let (second_start, _) = span(store.list_request_records(second).await.unwrap());
    assert!(
        first_end <= second_start,
        "one run per candidate across both workers: the second began at {second_start} µs, before the first ended at {first_end} µs"
    );
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn one_load_split_over_two_workers_gives_the_mocks_true_aggregate_within_one_percent() {
    const CASES: usize = 40;
    const CONCURRENCY: u32 = 8;
    let (url, _guard) = postgres_url().await;
    let store = crate::support::db::open(&url).await;
    let file = evalset(CASES);
    // No answer key: 40 filler tokens a request, 5 ms apart after 20 ms, one a chunk.
    let profile = ModelProfile {
        ttft_ms: 20.0,
        inter_token_ms: Some(5.0),
        tokens_per_chunk: 1,
        jitter: 0.0,
        ..ModelProfile::named("split")
    };
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![profile],
        answer_keys: vec![],
        seed: 9,
    })
    .await;
    let s = seed(&store, &file, &mock, &["split"]).await;
    let config = RunConfig {
        max_tokens: Some(40),
        duration_secs: Some(4),
        clients: Some(2),
        ..run_config(CONCURRENCY)
    };
    let run = create_run_with(&store, s.version, &s.candidates, config).await;
    let _workers = [
        Worker::start(&url, "left", &["--capacity", "1"]),
        Worker::start(&url, "right", &["--capacity", "1"]),
    ];
    until("the run finishes", || async { status(&store, run).await.is_terminal() }).await;
    assert_eq!(
        status(&store, run).await,
        RunStatus::Finished,
        "{:?}",
        events(&store, run).await
    );
    let units = store.list_run_units(run).await.unwrap();
    let shares: BTreeSet<_> = units[..2].iter().map(|u| u.worker.clone().unwrap()).collect();
    assert_eq!(shares.len(), 2, "each share on its own worker: {units:?}");
    assert!(units[..2].iter().all(|u| u.clock_offset_ms.is_some()), "{units:?}");
    let log = events(&store, run).await;
    assert!(
        log.iter()
            .any(|m| m.contains("load split over 2 clients") && m.contains("clocks differ by at most")),
        "{log:?}"
    );

    // Both shares' records are one level at the whole concurrency.
    let records: Vec<_> = store
        .list_request_records(run)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.is_warmup)
        .collect();
    assert!(records.iter().all(|r| r.concurrency == CONCURRENCY));
    let keys: BTreeSet<_> = records
        .iter()
        .map(|r| (r.case_id.clone(), r.repetition, r.attempt))
        .collect();
    assert_eq!(keys.len(), records.len(), "no record stored twice");
    let figures = bakeoff::domain::calibers::figures_at_concurrency(records.iter(), CONCURRENCY, &[])
        .expect("the level's figures");
    let measured = figures.aggregate_tok_s.expect("an aggregate");
    let window = figures.repetitions[0].window.expect("a steady window");

    // The mock's truth: the tokens it sent inside the same window (its own timestamps, tokens
    // evenly spaced between its first and last), per second.
    let page: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut sent = 0.0;
    for r in page["requests"].as_array().unwrap() {
        let (Some(first), Some(last)) = (r["first_token_ms"].as_f64(), r["last_token_ms"].as_f64()) else {
            continue;
        };
        let received = r["received_unix_ms"].as_f64().unwrap();
        let n = r["tokens_sent"].as_u64().unwrap();
        for i in 0..n {
            let at_ms = if n == 1 {
                first
            } else {
                first + (last - first) * i as f64 / (n - 1) as f64
            };
            let at_us = ((received + at_ms) * 1000.0) as i64;
            if (window.start_us..=window.end_us).contains(&at_us) {
                sent += 1.0;
            }
        }
    }
    let truth = sent / window.secs();
    let error = (measured - truth) / truth * 100.0;
    eprintln!("split over 2 workers: measured {measured:.1} tok/s, mock {truth:.1} tok/s, error {error:+.2} %");
    assert!(
        error.abs() <= 1.0,
        "measured {measured:.1} vs the mock's {truth:.1} tok/s ({error:+.2} %)"
    );
    mock.shutdown().await.ok();
}
