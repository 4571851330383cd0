//! Runs under admission caps, against the built-in mock with slow profiles: a second run on a
//! candidate waits (queued, saying why) and starts when the first ends, first come first served;
//! cancel works while waiting; a resumed run respects the caps; a raised per-candidate cap lets
//! runs share a candidate and flags both. Overlap is checked from the stored records and run
//! times, never from speed figures.
use std::time::Duration;

use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, Run, RunConfig, RunStatus};
use bakeoff::engine::run::Runner;
use bakeoff::engine::run::admission::Caps;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;
use tokio::net::TcpListener;

use crate::support::app::{spawn_app, spawn_app_on};
use crate::support::db::{TestStore, each_backend, sqlite_store};
use crate::support::proxy::FaultProxy;

/// Longest any wait in these tests may take before the test fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(90);

fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"caps-test","task":"generation","prompt":"Sentence {{n}}","graders":[{"kind":"exact"}],"max_tokens":64}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"The quick brown fox number {i} jumps over the lazy dog\"}}"
        ));
    }
    EvalSetFile::parse("caps-test.jsonl", &text).expect("test eval set parses")
}

/// A model slow enough that a run of a few cases lasts a noticeable while (~0.2 s a request).
fn slow(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 60.0,
        inter_token_ms: Some(10.0),
        ..ModelProfile::named(name)
    }
}

async fn start_mock(names: &[&str], key: &EvalSetFile) -> MockServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the mock");
    bakeoff::mock::spawn(
        MockConfig {
            profiles: names.iter().map(|n| slow(n)).collect(),
            answer_keys: vec![key.clone()],
            seed: 7,
        },
        listener,
    )
    .await
    .expect("starting the mock")
}

fn spec(name: &str, base_url: &str) -> CandidateSpec {
    CandidateSpec {
        api_key: Some(Secret::new("sk-caps-test")),
        ..CandidateSpec::openai_chat(name, base_url, name)
    }
}

fn config() -> RunConfig {
    RunConfig {
        concurrency: 1,
        repetitions: 1,
        warmup_requests: 0,
        temperature: Some(0.0),
        timeout_secs: 20,
        retries: 0,
        staged_rollout: false,
        ..RunConfig::default()
    }
}

/// The eval set, one candidate per name (all on the mock, through `gate`), and the store's
/// version id.
struct Setup {
    version: i64,
    candidates: Vec<i64>,
    /// Holds every request while on, so a run stays in flight until the states a test
    /// looks for are seen, however slow the machine (instead of racing the mock's speed).
    gate: FaultProxy,
    _mock: MockServer,
}

impl Setup {
    /// Requests go nowhere (connections accepted, nothing forwarded) until [`Setup::release`].
    fn hold(&self) {
        self.gate.blackhole_on();
    }

    fn release(&self) {
        self.gate.blackhole_off();
    }
}

async fn setup(store: &DynStore, names: &[&str], cases: usize) -> Setup {
    let file = evalset(cases);
    let mock = start_mock(names, &file).await;
    let gate = FaultProxy::start(mock.addr).await;
    let base_url = format!("http://{}/v1", gate.addr);
    let version = store.save_evalset_version(&file).await.expect("saving the eval set");
    let mut candidates = Vec::new();
    for name in names {
        candidates.push(
            store
                .create_candidate(&crate::support::checked::admin_new(&spec(name, &base_url)))
                .await
                .expect("saving a candidate"),
        );
    }
    Setup {
        version,
        candidates,
        gate,
        _mock: mock,
    }
}

async fn create_run(store: &DynStore, version: i64, name: &str, candidates: &[i64]) -> i64 {
    store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
            config: config(),
        })
        .await
        .expect("creating a run")
}

async fn get(store: &DynStore, id: i64) -> Run {
    store.get_run(id).await.unwrap().expect("the run exists")
}

async fn events(store: &DynStore, id: i64) -> Vec<String> {
    store
        .list_run_events(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect()
}

/// Polls (bounded) until `check` holds.
async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::wait::until(what, DEADLINE, check).await;
}

async fn wait_all(runner: &Runner, ids: &[i64]) {
    for &id in ids {
        tokio::time::timeout(DEADLINE, runner.wait(id))
            .await
            .unwrap_or_else(|_| panic!("run {id} ended in time"));
    }
}

/// Stored evidence that two runs sent requests at the same time: the send-to-end spans of
/// their records, microseconds since the epoch.
async fn span_us(store: &DynStore, id: i64) -> (i64, i64) {
    let records = store.list_request_records(id).await.unwrap();
    assert!(!records.is_empty(), "run {id} stored records");
    let first = records.iter().map(|r| r.sent_at_us).min().unwrap();
    let last = records
        .iter()
        .map(|r| r.sent_at_us + r.end_us.get().unwrap_or(0))
        .max()
        .unwrap();
    (first, last)
}

each_backend!(a_second_run_on_a_candidate_waits_and_never_overlaps_the_first);
async fn a_second_run_on_a_candidate_waits_and_never_overlaps_the_first(t: TestStore) {
    let store = &t.store;
    let s = setup(store, &["slow-a", "slow-b"], 5).await;
    let (a, b) = (s.candidates[0], s.candidates[1]);
    let first = create_run(store, s.version, "first on a", &[a]).await;
    let second = create_run(store, s.version, "second on a", &[a]).await;
    let other = create_run(store, s.version, "on b", &[b]).await;
    let runner = Runner::with_caps(
        store.clone(),
        Caps {
            max_runs: 4,
            per_candidate: 1,
        },
    );
    s.hold();
    runner.start(first);
    runner.start(second);
    runner.start(other);

    let expected = format!("waiting: run #{first} is measuring slow-a");
    until("the second run says what it waits for", || async {
        runner.waiting_reason(second).as_deref() == Some(expected.as_str())
    })
    .await;
    assert_eq!(get(store, second).await.status, RunStatus::Queued, "{}", t.backend);
    until("the wait is in the event log", || async {
        events(store, second).await.contains(&expected)
    })
    .await;
    // A run on another candidate is not held up.
    until("the run on b executes", || async {
        runner.is_executing(other) || get(store, other).await.status.is_terminal()
    })
    .await;
    let q = runner.queue();
    assert!(
        q.waiting.iter().any(|(id, why)| *id == second && *why == expected),
        "{q:?}"
    );
    s.release();

    wait_all(&runner, &[first, second, other]).await;
    for id in [first, second, other] {
        assert_eq!(
            get(store, id).await.status,
            RunStatus::Finished,
            "run {id} on {}",
            t.backend
        );
    }
    let (r1, r2) = (get(store, first).await, get(store, second).await);
    assert!(
        r1.finished_at.unwrap().0 <= r2.started_at.unwrap().0,
        "{}: the second run started only after the first ended",
        t.backend
    );
    let (_, first_end) = span_us(store, first).await;
    let (second_start, _) = span_us(store, second).await;
    assert!(
        first_end <= second_start,
        "{}: no request of the second run was sent while the first was measuring ({first_end} > {second_start})",
        t.backend
    );
    let log = events(store, second).await;
    assert!(log.iter().any(|m| m.starts_with("a slot is free after")), "{log:?}");
    assert!(
        !events(store, first).await.iter().any(|m| m.contains("sharing")),
        "with one run per candidate nothing is shared"
    );
}

each_backend!(the_global_cap_is_first_come_first_served_and_a_waiting_run_can_be_cancelled);
async fn the_global_cap_is_first_come_first_served_and_a_waiting_run_can_be_cancelled(t: TestStore) {
    let store = &t.store;
    let s = setup(store, &["slow-a", "slow-b", "slow-c"], 4).await;
    let first = create_run(store, s.version, "first", &[s.candidates[0]]).await;
    let second = create_run(store, s.version, "second", &[s.candidates[1]]).await;
    let third = create_run(store, s.version, "third", &[s.candidates[2]]).await;
    let runner = Runner::with_caps(
        store.clone(),
        Caps {
            max_runs: 1,
            per_candidate: 1,
        },
    );
    // Started out of order: the queue still goes by run id.
    s.hold();
    runner.start(third);
    runner.start(second);
    runner.start(first);
    until("the first run executes", || async { runner.is_executing(first) }).await;
    until("the others wait", || async {
        runner.waiting_reason(second).as_deref() == Some("waiting: 1 run is executing, at most 1 at once")
            && runner.waiting_reason(third) == Some(format!("waiting: run #{second} is ahead in the queue"))
    })
    .await;

    assert!(runner.cancel(second), "a waiting run can be cancelled");
    tokio::time::timeout(DEADLINE, runner.wait(second))
        .await
        .expect("cancelled in time");
    let cancelled = get(store, second).await;
    assert_eq!(cancelled.status, RunStatus::Cancelled, "{}", t.backend);
    assert!(cancelled.started_at.is_none(), "it never started");
    assert!(store.list_request_records(second).await.unwrap().is_empty());
    assert!(
        events(store, second)
            .await
            .contains(&"cancelled while waiting for a slot".to_string())
    );
    // The third now waits for the global slot itself.
    until("the third run moves up", || async {
        runner.is_executing(third)
            || runner
                .waiting_reason(third)
                .is_some_and(|w| w.contains("at most 1 at once"))
    })
    .await;
    s.release();

    wait_all(&runner, &[first, third]).await;
    let (r1, r3) = (get(store, first).await, get(store, third).await);
    assert_eq!((r1.status, r3.status), (RunStatus::Finished, RunStatus::Finished));
    assert!(r1.finished_at.unwrap().0 <= r3.started_at.unwrap().0, "{}", t.backend);
    assert!(span_us(store, first).await.1 <= span_us(store, third).await.0);
}

#[tokio::test]
async fn resumed_runs_respect_the_caps() {
    let (store, _guard) = sqlite_store().await;
    let s = setup(&store, &["slow-a"], 4).await;
    let first = create_run(&store, s.version, "first", &s.candidates).await;
    let second = create_run(&store, s.version, "second", &s.candidates).await;
    // As after a crash: both were running.
    for id in [second, first] {
        store.set_run_status(id, RunStatus::Running, None).await.unwrap();
    }
    let runner = Runner::new(store.clone());
    assert_eq!(runner.caps().per_candidate, 1, "one run per candidate by default");
    s.hold();
    assert_eq!(runner.resume_unfinished().await.unwrap(), 2);
    until("the second run waits again, queued", || async {
        runner.waiting_reason(second) == Some(format!("waiting: run #{first} is measuring slow-a"))
            && get(&store, second).await.status == RunStatus::Queued
    })
    .await;
    s.release();
    wait_all(&runner, &[first, second]).await;
    assert_eq!(get(&store, second).await.status, RunStatus::Finished);
    assert!(span_us(&store, first).await.1 <= span_us(&store, second).await.0);
}

#[tokio::test]
async fn a_raised_per_candidate_cap_lets_runs_share_and_flags_both() {
    let (store, _guard) = sqlite_store().await;
    let s = setup(&store, &["slow-a"], 6).await;
    let first = create_run(&store, s.version, "first", &s.candidates).await;
    let second = create_run(&store, s.version, "second", &s.candidates).await;
    let runner = Runner::with_caps(
        store.clone(),
        Caps {
            max_runs: 4,
            per_candidate: 2,
        },
    );
    s.hold();
    runner.start(first);
    runner.start(second);
    until("both execute", || async {
        runner.is_executing(first) && runner.is_executing(second)
    })
    .await;
    s.release();
    wait_all(&runner, &[first, second]).await;
    let shared = |other: i64| format!("sharing slow-a with run #{other} (up to 2 runs per candidate)");
    assert!(
        events(&store, first)
            .await
            .iter()
            .any(|m| m.starts_with(&shared(second))),
        "{:?}",
        events(&store, first).await
    );
    assert!(
        events(&store, second)
            .await
            .iter()
            .any(|m| m.starts_with(&shared(first)))
    );
    let (a, b) = (span_us(&store, first).await, span_us(&store, second).await);
    assert!(a.0 < b.1 && b.0 < a.1, "the runs really overlapped: {a:?} {b:?}");
}

#[tokio::test]
async fn the_runs_list_and_the_run_page_show_the_caps_and_the_queue() {
    let app = spawn_app().await;
    let s = setup(&app.store, &["slow-a"], 12).await;
    let first = create_run(&app.store, s.version, "first", &s.candidates).await;
    let second = create_run(&app.store, s.version, "second", &s.candidates).await;
    s.hold();
    app.state.runner.start(first);
    app.state.runner.start(second);
    let expected = format!("waiting: run #{first} is measuring slow-a");
    until("the second run waits", || async {
        app.state.runner.waiting_reason(second).as_deref() == Some(expected.as_str())
    })
    .await;

    let list = app.get_html("/runs").await;
    assert_eq!(list.attr("#run-caps", "data-max-runs").as_deref(), Some("4"));
    assert_eq!(list.attr("#run-caps", "data-per-candidate").as_deref(), Some("1"));
    assert!(list.text("#run-caps").contains("a second run on a candidate waits"));
    assert!(list.text(&format!("[data-executing=\"{first}\"]")).contains("slow-a"));
    assert!(list.text(&format!("[data-waiting=\"{second}\"]")).contains(&expected));

    let page = app.get_html(&format!("/runs/{second}")).await;
    assert!(page.text("[data-waiting]").starts_with(&expected));
    assert_eq!(
        page.attr("[data-run-status]", "data-run-status").as_deref(),
        Some("queued")
    );
    let live = app.get_html(&format!("/runs/{second}/live")).await;
    assert!(live.text("[data-waiting]").starts_with(&expected));
    assert!(live.texts(".events li").iter().any(|l| l.contains(&expected)));
    // The running run's page has no waiting line.
    assert_eq!(app.get_html(&format!("/runs/{first}")).await.count("[data-waiting]"), 0);

    // Cancel from the page while it waits.
    assert_eq!(
        app.post_form(&format!("/runs/{second}/cancel"), &[]).await.status(),
        303
    );
    until("the waiting run is cancelled", || async {
        get(&app.store, second).await.status == RunStatus::Cancelled
    })
    .await;
    app.state.runner.cancel(first);
    tokio::time::timeout(DEADLINE, app.state.runner.wait(first))
        .await
        .unwrap();
    s.release();
    let list = app.get_html("/runs").await;
    assert!(
        list.text(".run-queue .empty")
            .contains("No run is executing or waiting")
    );
}

each_backend!(a_soak_from_the_operability_page_waits_for_its_candidate_and_probes_never_overlap_a_run);
async fn a_soak_from_the_operability_page_waits_for_its_candidate_and_probes_never_overlap_a_run(t: TestStore) {
    let app = spawn_app_on(t).await;
    let (store, backend) = (&app.store, app.backend);
    let runner = &app.state.runner;
    // 10 cases at ~0.7 s each, one at a time: the first run measures slow-a for seconds.
    let s = setup(store, &["slow-a"], 10).await;
    let a = s.candidates[0];
    let first = create_run(store, s.version, "first on a", &[a]).await;
    s.hold();
    runner.start(first);
    until("the first run executes", || async { runner.is_executing(first) }).await;

    let r = app
        .post_form(
            &format!("/candidates/{a}/operability/soak"),
            &[
                ("seconds", "5"),
                ("concurrency", "2"),
                ("evalset_version_id", &s.version.to_string()),
            ],
        )
        .await;
    assert_eq!(r.status(), 303, "{backend}");
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let soak: i64 = location
        .split("soak=")
        .nth(1)
        .and_then(|rest| rest.split('#').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("{backend}: unexpected redirect {location}"));
    let expected = format!("waiting: run #{first} is measuring slow-a");
    until("the soak says what it waits for", || async {
        runner.waiting_reason(soak).as_deref() == Some(expected.as_str())
    })
    .await;
    assert_eq!(get(store, soak).await.status, RunStatus::Queued, "{backend}");
    assert!(get(store, soak).await.config.soak, "{backend}: stored as a soak");
    let page = app.get_html(&format!("/candidates/{a}/operability?soak={soak}")).await;
    assert!(
        page.text(".soak-queued").contains(&format!("run #{soak}")),
        "{backend}: {}",
        page.text(".soak-queued")
    );

    // A probe while the first run measures slow-a is refused, naming the run; nothing sent.
    assert!(runner.is_executing(first), "{backend}: the first run still measures");
    let refused = app.post_form(&format!("/candidates/{a}/operability/probes"), &[]).await;
    assert_eq!(refused.status(), 409, "{backend}");
    let body = refused.text().await.unwrap();
    assert!(
        body.contains(&format!("Run #{first} is measuring slow-a")),
        "{backend}: {body}"
    );
    assert!(store.list_probe_runs(a, 10).await.unwrap().is_empty(), "{backend}");
    s.release();

    wait_all(runner, &[first, soak]).await;
    let (r1, rs) = (get(store, first).await, get(store, soak).await);
    assert_eq!(r1.status, RunStatus::Finished, "{backend}");
    assert_eq!(rs.status, RunStatus::Finished, "{backend}: {:?}", rs.error);
    assert!(
        r1.finished_at.unwrap().0 <= rs.started_at.unwrap().0,
        "{backend}: the soak started only after the first run ended"
    );
    let (_, first_end) = span_us(store, first).await;
    let (soak_start, _) = span_us(store, soak).await;
    assert!(
        first_end <= soak_start,
        "{backend}: no soak request was sent while the first run measured ({first_end} > {soak_start})"
    );
    let records = store.list_request_records(soak).await.unwrap();
    assert!(
        records.iter().all(|r| r.phase == bakeoff::domain::run::Phase::Soak),
        "{backend}"
    );
    let log = events(store, soak).await;
    assert!(
        log.iter().any(|m| m.starts_with("a slot is free after")),
        "{backend}: {log:?}"
    );
    assert!(
        log.iter().any(|m| m.contains("slow-a: soak, concurrency 2 for 5 s")),
        "{backend}: {log:?}"
    );
    assert!(
        !log.iter().any(|m| m.contains("resumed")),
        "{backend}: a fresh soak is not a resume: {log:?}"
    );

    // A run due while a probe checks the candidate waits for the probe, saying so.
    let hold = runner.begin_probe(a).expect("no run measures slow-a now");
    let after = create_run(store, s.version, "after the probe", &[a]).await;
    runner.start(after);
    until("the run waits for the probe", || async {
        runner.waiting_reason(after).as_deref() == Some("waiting: an endpoint probe is checking slow-a")
    })
    .await;
    drop(hold);
    wait_all(runner, &[after]).await;
    assert_eq!(get(store, after).await.status, RunStatus::Finished, "{backend}");

    // With no run measuring, the page's probes run and are stored.
    let ok = app.post_form(&format!("/candidates/{a}/operability/probes"), &[]).await;
    assert_eq!(ok.status(), 303, "{backend}");
    crate::support::wait::until("the background probes are saved", Duration::from_secs(60), || async {
        store.list_probe_runs(a, 10).await.unwrap().len() == 1
    })
    .await;
}
