//! Nothing lost when the database goes away mid-run: a TCP proxy between bakeoff and
//! PostgreSQL resets every connection in the middle of a run (until the mock has answered
//! [`HELD`] requests meanwhile, that the writer must hold); the writer holds the
//! records, tries again until the database answers, and the run finishes with every record
//! stored exactly once; a page asked for meanwhile answers 503 within a second or so. Away
//! past the writer's limit, the run is paused with every finished record stored (through the
//! spill file) and resumes from its page to the last case; a real `bakeoff serve` killed with
//! SIGKILL while its spill file holds records stores them on the next start, each once.
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, RequestRecord, RunConfig, RunStatus};
use bakeoff::engine::run::writer::WriterSettings;
use bakeoff::engine::run::{Runner, spill};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend};
use crate::support::proxy::FaultProxy;
use crate::support::runs::start_mock;
use crate::support::serve::{Server, start_run};
use crate::support::wait::{mock_outcomes, mock_requests, until};

const CASES: usize = 120;
/// Requests the mock answers while the database is away: the outage lasts until it has (its
/// own log says so), not a fixed time.
const HELD: usize = 20;
/// Longest the whole test waits for anything.
const DEADLINE: Duration = Duration::from_secs(120);

fn evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"outage","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":12}"#,
    );
    text.push('\n');
    for i in 0..CASES {
        let label = if i % 2 == 0 { "positive" } else { "negative" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:03}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":\"{label}\"}}\n"
        ));
    }
    EvalSetFile::parse("outage.jsonl", &text).unwrap()
}

/// A run of [`CASES`] cases on one steady mock candidate (about 10 requests a second at
/// concurrency 2), stored in a fresh PostgreSQL schema reached through a fault proxy.
struct Setup {
    proxy: Arc<FaultProxy>,
    /// The store through the proxy, as bakeoff reaches the database.
    t: TestStore,
    /// A second way in that the proxy never cuts, to watch the run from outside.
    direct: DynStore,
    run: i64,
    _mock: MockServer,
}

async fn setup(ttft_ms: f64) -> Setup {
    let server = url::Url::parse(&crate::support::db::postgres_server_url()).unwrap();
    let target = format!("{}:{}", server.host_str().unwrap(), server.port().unwrap_or(5432));
    let proxy = Arc::new(FaultProxy::start(target.parse().unwrap()).await);
    let t = crate::support::db::postgres_test_store_through(&proxy.addr.to_string()).await;
    let direct_url = t.url.replacen(&proxy.addr.to_string(), &target, 1);
    let direct = crate::support::db::open(&direct_url).await;
    let (version, candidate, mock) = seed(&t.store, ttft_ms).await;
    let run = create_run(&t.store, "outage", version, candidate).await;
    Setup {
        proxy,
        t,
        direct,
        run,
        _mock: mock,
    }
}

/// A run of the seeded candidate at c=2, without warm-ups or staged start.
async fn create_run(store: &DynStore, name: &str, version: i64, candidate: i64) -> i64 {
    create_run_of(store, name, version, candidate, None).await
}

/// [`create_run`] of the first `cases` cases only (None: every case).
async fn create_run_of(store: &DynStore, name: &str, version: i64, candidate: i64, cases: Option<u32>) -> i64 {
    store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 0,
                staged_rollout: false,
                case_limit: cases,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap()
}

/// Stores the eval set and one candidate on a steady mock answering after `ttft_ms`; returns
/// (version, candidate, mock).
async fn seed(store: &DynStore, ttft_ms: f64) -> (i64, i64, MockServer) {
    let file = evalset();
    let mock = start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms,
            inter_token_ms: Some(15.0),
            jitter: 0.0,
            ..ModelProfile::named("steady")
        }],
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await;
    let version = store.save_evalset_version(&file).await.unwrap();
    let spec = CandidateDraft {
        name: "steady".into(),
        provider: "openai-chat".into(),
        base_url: mock.base_url(),
        model: "steady".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    (version, candidate, mock)
}

/// Waits (bounded) until at least `n` records of the run are stored.
async fn wait_stored(direct: &DynStore, run: i64, n: usize) {
    until(&format!("{n} stored records"), DEADLINE, || async {
        direct.list_request_records(run).await.unwrap().len() >= n
    })
    .await;
}

/// Waits (bounded) until the mock has answered `more` requests after `since` of them.
async fn answered_since(mock: &MockServer, since: usize, more: usize) {
    until(&format!("{more} more requests answered"), DEADLINE, || async {
        mock_requests(mock).await >= since + more
    })
    .await;
}

/// Waits (bounded) until the spill file exists.
async fn spilled(spill_file: &std::path::Path) {
    until("a spill file", DEADLINE, || async { spill_file.exists() }).await;
}

/// Waits (bounded) until the writer holds no record in memory: every request the mock completed
/// (its own log) is stored or in the spill file, give or take the two in flight. A writer
/// keeping `memory_records` (over two) in memory gets there only once it has paused the run,
/// which moves them all to the spill file.
async fn paused_by_the_writer(mock: &MockServer, direct: &DynStore, run: i64, spill_file: &std::path::Path) {
    until("the writer to pause the run", DEADLINE, || async {
        let completed = mock_outcomes(mock, "completed").await;
        let stored = direct.list_request_records(run).await.unwrap().len();
        let spilled = spill::read(spill_file).ok().flatten().map_or(0, |s| s.records.len());
        stored + spilled + 2 >= completed
    })
    .await;
}

/// Checks that no record key is stored twice and returns the measured cases (first tries).
fn unique_cases(records: &[RequestRecord]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for r in records {
        let key = (
            r.candidate_id,
            r.case_id.clone(),
            r.phase.as_str(),
            r.repetition,
            r.attempt,
        );
        assert!(keys.insert(key.clone()), "record {key:?} stored twice");
    }
    records
        .iter()
        .filter(|r| !r.is_warmup && r.attempt == 0)
        .map(|r| r.case_id.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn postgres_reset_mid_run_loses_nothing() {
    let Setup {
        proxy,
        t,
        direct,
        run,
        _mock: mock,
    } = setup(40.0).await;
    let store = t.store.clone();
    let app = spawn_app_on(t).await;
    let runner = Runner::new(store.clone());
    runner.start(run);

    // Cut once some records are stored and the run is well under way.
    wait_stored(&direct, run, 10).await;
    let before_cut = direct.list_request_records(run).await.unwrap().len();
    assert!(before_cut < CASES, "the run ended before the cut; make the mock slower");
    let answered_at_cut = mock_requests(&mock).await;
    proxy.go_down();

    // A page meanwhile answers 503 fast instead of hanging.
    let asked = Instant::now();
    let page = app.get("/runs").await;
    let took = asked.elapsed();
    assert_eq!(page.status(), 503, "a page while the database is away");
    assert!(took < Duration::from_secs(3), "the 503 took {took:?}");
    assert!(page.text().await.unwrap().contains("database is not answering"));

    // Back once the writer holds records measured meanwhile.
    answered_since(&mock, answered_at_cut, HELD).await;
    proxy.come_back();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the run ended in time");
    let ended = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Finished, "the run finishes: {:?}", ended.error);
    let records = direct.list_request_records(run).await.unwrap();
    let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup && r.attempt == 0).collect();
    let cases: BTreeSet<&str> = measured.iter().map(|r| r.case_id.as_ref()).collect();
    assert_eq!(measured.len(), CASES, "{CASES} of {CASES} records stored, none twice");
    assert_eq!(cases.len(), CASES);
    let events = direct.list_run_events(run).await.unwrap();
    let told = events
        .iter()
        .find(|e| e.message.contains("database did not answer"))
        .expect("the outage is told in the run's log");
    assert!(told.message.contains("none lost"), "{}", told.message);
    eprintln!("run log: {}", told.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn postgres_away_past_the_limit_pauses_the_run_and_resume_stores_every_case_once() {
    // Slow enough (≈ 10 s of load) that the pause comes well before the last case.
    let Setup {
        proxy,
        t,
        direct,
        run,
        _mock,
    } = setup(150.0).await;
    let mock = _mock;
    let spill_dir = tempfile::tempdir().unwrap();
    let spill_file = spill::path(spill_dir.path(), run);
    let runner = Runner::new(t.store.clone()).with_writer(WriterSettings {
        spill_dir: Some(spill_dir.path().to_path_buf()),
        memory_records: 5,
        pause_after: Some(Duration::from_secs(3)),
        ..WriterSettings::default()
    });
    runner.start(run);
    wait_stored(&direct, run, 10).await;
    proxy.go_down();
    // Past five held records, the rest go to the spill file.
    spilled(&spill_file).await;
    // Away past the 3 s limit: back once the run is paused.
    paused_by_the_writer(&mock, &direct, run, &spill_file).await;
    proxy.come_back();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the paused run's task ended in time");

    let paused = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(paused.status, RunStatus::Paused, "{:?}", paused.error);
    let message = paused.error.clone().expect("a paused run says why");
    assert!(message.contains("the database did not answer for"), "{message}");
    let records = direct.list_request_records(run).await.unwrap();
    let cases = unique_cases(&records);
    assert!(cases.len() < CASES, "the run stopped before the end: {}", cases.len());
    // Exact counts: everything measured is stored, some of it through the spill file.
    let counts = format!("{n} records measured, {n} stored (", n = records.len());
    assert!(message.contains(&counts), "{message} (expected {counts:?})");
    assert!(message.contains("through the spill file), 0 pending"), "{message}");
    eprintln!("run error: {message}");
    assert!(!spill_file.exists(), "the replayed spill file is removed");
    let events = direct.list_run_events(run).await.unwrap();
    assert!(events.iter().any(|e| e.message.starts_with("paused:")), "{events:?}");

    // The run page says so and offers to resume; resuming measures the rest.
    let app = spawn_app_on(t).await;
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.count("[data-paused]"), 1, "the run page shows the pause");
    assert!(page.text("[data-paused]").contains(&counts));
    assert_eq!(page.text("[data-run-status]"), "paused");
    let resumed = app.post_form(&format!("/runs/{run}/resume"), &[]).await;
    assert_eq!(resumed.status().as_u16(), 303);
    tokio::time::timeout(DEADLINE, app.state.runner.wait(run))
        .await
        .expect("the resumed run ended in time");
    let ended = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    let records = direct.list_request_records(run).await.unwrap();
    assert_eq!(
        unique_cases(&records).len(),
        CASES,
        "{CASES} of {CASES} cases stored, none twice"
    );
    let again = app.post_form(&format!("/runs/{run}/resume"), &[]).await;
    assert_eq!(again.status().as_u16(), 400, "only a paused run resumes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_spill_file_left_by_kill_9_is_stored_on_the_next_start_each_record_once() {
    let server = url::Url::parse(&crate::support::db::postgres_server_url()).unwrap();
    let target = format!("{}:{}", server.host_str().unwrap(), server.port().unwrap_or(5432));
    let proxy = FaultProxy::start(target.parse().unwrap()).await;
    let (direct_url, _guard) = crate::support::db::postgres_url().await;
    let through_url = direct_url.replacen(&target, &proxy.addr.to_string(), 1);
    let direct = crate::support::db::open(&direct_url).await;
    let (version, candidate, _mock) = seed(&direct, 150.0).await;
    let spill_dir = tempfile::tempdir().unwrap();
    let spill_dir_text = spill_dir.path().display().to_string();
    // Every record held while the database is away goes to the spill file; no pause.
    let env = [
        ("BAKEOFF_SPILL_DIR", spill_dir_text.as_str()),
        ("BAKEOFF_WRITER_MEMORY_RECORDS", "0"),
        ("BAKEOFF_DB_OUTAGE_PAUSE_SECS", "600"),
    ];
    let first = Server::start(&through_url, &env);
    let form: Vec<(String, String)> = [
        ("name", "spill"),
        ("evalset_version", &version.to_string()),
        ("candidate", &candidate.to_string()),
        ("concurrency", "2"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("max_tokens", "12"),
        ("temperature", "0"),
        ("timeout_secs", "20"),
        ("retries", "1"),
        ("stream", "on"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let run = start_run(&first.base_url, &form).await;
    wait_stored(&direct, run, 10).await;
    proxy.go_down();
    let spill_file = spill::path(spill_dir.path(), run);
    let spilled = crate::support::wait::until_some("10 spilled records", DEADLINE, || async {
        let lines = std::fs::read_to_string(&spill_file)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        (lines >= 10).then_some(lines)
    })
    .await;
    first.kill();
    // Whatever was appended until the kill is what the next start finds.
    let spilled = std::fs::read_to_string(&spill_file)
        .map(|t| t.lines().filter(|l| l.ends_with('}')).count())
        .unwrap_or(spilled);
    let before = direct.list_request_records(run).await.unwrap().len();
    assert_eq!(
        direct.get_run(run).await.unwrap().unwrap().status,
        RunStatus::Running,
        "a killed run is left running"
    );
    proxy.come_back();

    let second = Server::start(&through_url, &env);
    let ended = crate::support::wait::run_ended(&direct, run, DEADLINE).await;
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    let records = direct.list_request_records(run).await.unwrap();
    assert_eq!(
        unique_cases(&records).len(),
        CASES,
        "{CASES} of {CASES} cases stored, none twice"
    );
    assert!(records.len() >= before + spilled, "the spilled records are stored");
    let events = direct.list_run_events(run).await.unwrap();
    let told = format!("spill file replayed: {spilled} records read back, {spilled} of them new to the store");
    assert!(
        events.iter().any(|e| e.message.starts_with(&told)),
        "{told:?} in {events:?}"
    );
    assert!(!spill_file.exists(), "the replayed spill file is removed");
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locked_longer_than_its_busy_timeout_loses_nothing() {
    let t = crate::support::db::sqlite_test_store().await;
    let (version, candidate, _mock) = seed(&t.store, 40.0).await;
    let run = create_run(&t.store, "locked", version, candidate).await;
    let spill_dir = tempfile::tempdir().unwrap();
    let runner = Runner::new(t.store.clone()).with_writer(WriterSettings {
        spill_dir: Some(spill_dir.path().to_path_buf()),
        memory_records: 2,
        pause_after: None,
        ..WriterSettings::default()
    });
    runner.start(run);
    wait_stored(&t.store, run, 10).await;
    // Another process holds the write lock past the store's 5 s busy timeout.
    let mut other = <sqlx::SqliteConnection as sqlx::Connection>::connect(&t.url)
        .await
        .unwrap();
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut other).await.unwrap();
    // Held until a write has timed out and the records beyond two went to the spill file.
    spilled(&spill::path(spill_dir.path(), run)).await;
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the run ended in time");

    let ended = t.store.get_run(run).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    let records = t.store.list_request_records(run).await.unwrap();
    assert_eq!(
        unique_cases(&records).len(),
        CASES,
        "{CASES} of {CASES} cases stored, none twice"
    );
    let events = t.store.list_run_events(run).await.unwrap();
    let told = events
        .iter()
        .find(|e| e.message.contains("database did not answer"))
        .expect("the lock is told in the run's log");
    assert!(told.message.contains("none lost"), "{}", told.message);
    assert!(told.message.contains("in the spill file"), "{}", told.message);
    assert!(
        !spill::path(spill_dir.path(), run).exists(),
        "the spill file is removed"
    );
}

/// Makes the database refuse (a trigger raising an error, not an outage) every record of
/// `case_id`, and only those.
async fn refuse_records_of(t: &TestStore, case_id: &str) {
    if t.backend == "sqlite" {
        t.execute_raw(&format!(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON request_records WHEN NEW.case_id = '{case_id}' \
             BEGIN SELECT RAISE(ABORT, 'refused for the test'); END"
        ))
        .await
        .unwrap();
    } else {
        t.execute_raw(&format!(
            "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.case_id = '{case_id}' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$"
        ))
        .await
        .unwrap();
        t.execute_raw(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON request_records FOR EACH ROW EXECUTE FUNCTION refuse_one()",
        )
        .await
        .unwrap();
    }
}

/// A record the database refuses is set aside with the reason in the refused-records file; the
/// records batched with it are stored, the run goes on to the last case, and its message counts
/// exactly.
async fn a_record_the_database_refuses_is_kept_and_the_others_stored(t: TestStore) {
    const RUN_CASES: usize = 20;
    let (version, candidate, _mock) = seed(&t.store, 5.0).await;
    let run = create_run_of(&t.store, "refused", version, candidate, Some(RUN_CASES as u32)).await;
    refuse_records_of(&t, "case-007").await;
    let spill_dir = tempfile::tempdir().unwrap();
    let runner = Runner::new(t.store.clone()).with_writer(WriterSettings {
        spill_dir: Some(spill_dir.path().to_path_buf()),
        ..WriterSettings::default()
    });
    runner.start(run);
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the run ended in time");

    let records = t.store.list_request_records(run).await.unwrap();
    let cases = unique_cases(&records);
    let expected: BTreeSet<String> = (0..RUN_CASES)
        .filter(|&i| i != 7)
        .map(|i| format!("case-{i:03}"))
        .collect();
    assert_eq!(cases, expected, "{}: every other case stored", t.backend);
    assert_eq!(records.len(), RUN_CASES - 1, "{}", t.backend);

    let refused = spill::read_refused(&spill::refused_path(spill_dir.path(), run)).unwrap();
    assert_eq!(refused.len(), 1, "{}: {refused:?}", t.backend);
    assert_eq!(&*refused[0].record.case_id, "case-007");
    assert_eq!(refused[0].record.run_id, run);
    assert!(
        refused[0].reason.contains("refused for the test"),
        "{}",
        refused[0].reason
    );

    let ended = t.store.get_run(run).await.unwrap().unwrap();
    assert_eq!(
        ended.status,
        RunStatus::Failed,
        "{}: the refusal is not passed over",
        t.backend
    );
    let message = ended.error.expect("the run says why");
    let counts = format!("1 of {RUN_CASES} records refused by the database (",);
    assert!(message.contains(&counts), "{message}");
    assert!(message.contains("refused for the test"), "{message}");
    assert!(
        message.contains(&spill::refused_path(spill_dir.path(), run).display().to_string()),
        "{message}"
    );
    let stored = format!("{RUN_CASES} records measured, {} stored, 0 pending", RUN_CASES - 1);
    assert!(message.contains(&stored), "{message} (expected {stored:?})");
}

each_backend!(
    a_record_the_database_refuses_is_kept_and_the_others_stored,
    flavor = "multi_thread",
    worker_threads = 2
);

/// The database stays away past the pause limit and past the writer's finish limit: the run is
/// paused (not failed) with what it held still in the spill file, exact counts in its message,
/// and resuming stores every case once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn postgres_away_past_the_finish_limit_pauses_the_run_with_the_spill_file_kept() {
    const RUN_CASES: usize = 20;
    const PAUSE_AFTER: Duration = Duration::from_secs(1);
    const FINISH_AFTER: Duration = Duration::from_secs(2);
    let Setup {
        proxy,
        t,
        direct,
        run: seeded,
        _mock,
    } = setup(300.0).await;
    let seeded = direct.get_run(seeded).await.unwrap().unwrap();
    let run = create_run_of(
        &t.store,
        "finish",
        seeded.evalset_version_id,
        seeded.candidate_ids[0],
        Some(RUN_CASES as u32),
    )
    .await;
    let spill_dir = tempfile::tempdir().unwrap();
    let spill_file = spill::path(spill_dir.path(), run);
    let runner = Runner::new(t.store.clone()).with_writer(WriterSettings {
        spill_dir: Some(spill_dir.path().to_path_buf()),
        memory_records: 0,
        pause_after: Some(PAUSE_AFTER),
        finish_after: FINISH_AFTER,
    });
    runner.start(run);
    // About 3 s of load: the cut comes early in it.
    wait_stored(&direct, run, 2).await;
    proxy.go_down();
    spilled(&spill_file).await;
    // Paused after 1 s away, the load stops; 2 s after it ended the writer stops waiting. These
    // limits are what is tested, and nothing outside the writer tells when they are up (every
    // record goes to the spill file at once): waited out, with room for a loaded machine.
    tokio::time::sleep((PAUSE_AFTER + FINISH_AFTER) * 2).await;
    let stored = direct.list_request_records(run).await.unwrap().len();
    let spilled = spill::read(&spill_file)
        .unwrap()
        .expect("the spill file is kept")
        .records
        .len();
    assert!(spilled > 0);
    proxy.come_back();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the paused run's task ended in time");

    let paused = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(paused.status, RunStatus::Paused, "not failed: {:?}", paused.error);
    let message = paused.error.clone().expect("a paused run says why");
    let counts = format!(
        "{} records measured, {stored} stored, {spilled} pending (kept in the spill file",
        stored + spilled
    );
    assert!(message.contains(&counts), "{message} (expected {counts:?})");
    assert_eq!(
        direct.list_request_records(run).await.unwrap().len(),
        stored,
        "the spill file waits for the resume"
    );
    assert!(spill_file.exists());

    bakeoff::app::runs::resume_paused(&t.store, &runner, run).await.unwrap();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the resumed run ended in time");
    let ended = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    let records = direct.list_request_records(run).await.unwrap();
    assert_eq!(unique_cases(&records).len(), RUN_CASES, "every case stored once");
    assert_eq!(records.len(), RUN_CASES, "none measured twice");
    assert!(!spill_file.exists(), "the replayed spill file is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn postgres_blackholed_mid_run_pages_answer_503_fast_and_the_run_loses_nothing() {
    let Setup {
        proxy,
        t,
        direct,
        run,
        _mock: mock,
    } = setup(40.0).await;
    let store = t.store.clone();
    let app = spawn_app_on(t).await;
    let runner = Runner::new(store.clone());
    runner.start(run);
    wait_stored(&direct, run, 10).await;
    let before = direct.list_request_records(run).await.unwrap().len();
    assert!(
        before < CASES,
        "the run ended before the blackhole; make the mock slower"
    );
    // Pages asked for all along, so some are in flight (their connection taken, their query
    // sent) when the packets start being dropped.
    let asked_pages = std::sync::atomic::AtomicUsize::new(0);
    let browsing = (0..4).map(|_| async {
        let mut worst = Duration::ZERO;
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(3) {
            let asked = Instant::now();
            asked_pages.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let status = app.get(&format!("/runs/{run}")).await.status();
            assert!(status == 200 || status == 503, "{status}");
            worst = worst.max(asked.elapsed());
        }
        worst
    });
    // Packets dropped silently (no reset, no answer) once the browsing is under way, until the
    // checks below are done and the writer holds records measured meanwhile.
    let hole = async {
        until("pages asked before the blackhole", DEADLINE, || async {
            asked_pages.load(std::sync::atomic::Ordering::SeqCst) >= 8
        })
        .await;
        proxy.blackhole_on();
        mock_requests(&mock).await
    };
    let (worsts, answered_at_hole) = tokio::time::timeout(
        DEADLINE,
        futures_util::future::join(futures_util::future::join_all(browsing), hole),
    )
    .await
    .expect("no page hangs through the blackhole");
    for worst in worsts {
        eprintln!("slowest page while the blackhole began: {worst:?}");
        // Bounded by the store's wait for an answer: the blackhole lasts until these checks end.
        assert!(worst < Duration::from_secs(6), "a page hung for {worst:?}");
    }
    for path in ["/runs", &format!("/runs/{run}")] {
        let asked = Instant::now();
        let page = app.get(path).await;
        let took = asked.elapsed();
        eprintln!("{path} during the blackhole: {} in {took:?}", page.status());
        assert_eq!(page.status(), 503, "{path} while the database is blackholed");
        assert!(took < Duration::from_secs(4), "{path}: the 503 took {took:?}");
        assert!(page.text().await.unwrap().contains("database is not answering"));
    }

    answered_since(&mock, answered_at_hole, HELD).await;
    proxy.blackhole_off();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the run ended in time");
    let ended = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Finished, "the run finishes: {:?}", ended.error);
    let records = direct.list_request_records(run).await.unwrap();
    assert_eq!(
        unique_cases(&records).len(),
        CASES,
        "{CASES} of {CASES} cases stored, none twice"
    );
    assert_eq!(records.len(), CASES, "no case measured twice");
}
