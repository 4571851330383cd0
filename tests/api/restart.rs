//! Durability: the real `bakeoff serve` binary is killed with SIGKILL in the middle of a run,
//! started again on the same database, and must finish the run with every
//! (candidate, case, repetition) recorded exactly once — on SQLite and, when
//! `BAKEOFF_TEST_POSTGRES_URL` is set, on PostgreSQL. Cancel keeps what was finished.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{RequestRecord, RunStatus};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::app::{browser_client, spawn_app};
use crate::support::db::{postgres_url, sqlite_url};
use crate::support::serve::{Server, http, start_run};

/// Longest a test waits for anything (a server to listen, a run to get going or to finish).
const DEADLINE: Duration = Duration::from_secs(90);
const CASES: usize = 10;
const REPETITIONS: u32 = 3;
const CANDIDATES: [&str; 2] = ["slow-a", "slow-b"];

/// Ten classification cases the mock answers from its key.
fn evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"restart","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":12}"#,
    );
    text.push('\n');
    for i in 0..CASES {
        let label = if i % 2 == 0 { "positive" } else { "negative" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:02}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":\"{label}\"}}\n"
        ));
    }
    EvalSetFile::parse("restart.jsonl", &text).expect("the restart eval set parses")
}

/// A mock slow enough (≈ 0.3 s a request) that a run is still going when the server is killed.
async fn slow_mock(file: &EvalSetFile) -> MockServer {
    let profiles = CANDIDATES
        .iter()
        .map(|name| ModelProfile {
            ttft_ms: 80.0,
            inter_token_ms: Some(20.0),
            tokens_per_chunk: 1,
            jitter: 0.0,
            ..ModelProfile::named(*name)
        })
        .collect();
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: vec![file.clone()],
        seed: 11,
    })
    .await
}

/// Stores the eval set and one candidate per mock profile; returns (version id, candidate ids).
async fn seed(store: &DynStore, file: &EvalSetFile, mock: &MockServer) -> (i64, Vec<i64>) {
    let version = store.save_evalset_version(file).await.expect("saving the eval set");
    let mut ids = Vec::new();
    for name in CANDIDATES {
        let spec = CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: mock.base_url(),
            model: name.into(),
            ..Default::default()
        }
        .validate(None)
        .expect("a valid candidate");
        ids.push(
            store
                .create_candidate(&crate::support::checked::admin_new(&spec))
                .await
                .expect("saving a candidate"),
        );
    }
    (version, ids)
}

/// The run form as a browser posts it.
fn run_form(version: i64, candidates: &[i64]) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = vec![
        ("name".into(), "restart test".into()),
        ("evalset_version".into(), version.to_string()),
        ("concurrency".into(), "2".into()),
        ("repetitions".into(), REPETITIONS.to_string()),
        ("warmup_requests".into(), "1".into()),
        ("max_tokens".into(), "12".into()),
        ("temperature".into(), "0".into()),
        ("timeout_secs".into(), "20".into()),
        ("retries".into(), "1".into()),
        ("stream".into(), "on".into()),
        // The staged rollout runs first (its requests are warm-ups, excluded below).
        ("staged_rollout".into(), "on".into()),
    ];
    for id in candidates {
        fields.push(("candidate".into(), id.to_string()));
    }
    fields
}

/// Measured (non-warm-up) records stored so far.
async fn measured(store: &DynStore, run_id: i64) -> Vec<RequestRecord> {
    let records = store.list_request_records(run_id).await.expect("listing records");
    records.into_iter().filter(|r| !r.is_warmup).collect()
}

/// Waits (bounded) until `done` holds for the stored state; polls the store every 50 ms.
async fn wait_until(store: &DynStore, run_id: i64, what: &str, done: impl Fn(RunStatus, usize) -> bool) {
    let start = tokio::time::Instant::now();
    loop {
        let run = store
            .get_run(run_id)
            .await
            .expect("reading the run")
            .expect("the run exists");
        let n = measured(store, run_id).await.len();
        if done(run.status, n) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "waited {DEADLINE:?} for {what}: status {}, {n} measured records",
            run.status.as_str()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

type UnitKey = (i64, String, u32);

/// Checks that every (candidate, case, repetition) of the measured phase has exactly one final
/// record and that no record key appears twice.
fn assert_complete(records: &[RequestRecord], candidates: &[i64], backend: &str) {
    let mut keys = BTreeSet::new();
    for r in records {
        let key = (
            r.candidate_id,
            r.case_id.clone(),
            r.phase.as_str(),
            r.repetition,
            r.attempt,
        );
        assert!(keys.insert(key.clone()), "{backend}: duplicate record {key:?}");
    }
    let mut finals: BTreeMap<UnitKey, usize> = BTreeMap::new();
    for r in records {
        // Every record here is final: the mock fails nothing, so no attempt is retried.
        assert!(r.succeeded(), "{backend}: {:?} {:?}", r.error_class, r.error_detail());
        *finals
            .entry((r.candidate_id, r.case_id.to_string(), r.repetition))
            .or_default() += 1;
    }
    for &candidate in candidates {
        for case in 0..CASES {
            for repetition in 0..REPETITIONS {
                let key = (candidate, format!("case-{case:02}"), repetition);
                assert_eq!(
                    finals.get(&key),
                    Some(&1),
                    "{backend}: {key:?} must be recorded exactly once"
                );
            }
        }
    }
    assert_eq!(
        finals.len(),
        candidates.len() * CASES * REPETITIONS as usize,
        "{backend}: no unexpected units"
    );
}

async fn kill_and_resume(database_url: &str, backend: &str) {
    let file = evalset();
    let mock = slow_mock(&file).await;
    // The test's own connection migrates the database first, then seeds it.
    let store = crate::support::db::open(database_url).await;
    let (version, candidates) = seed(&store, &file, &mock).await;

    let first = Server::start(database_url, &[]);
    let run_id = start_run(&first.base_url, &run_form(version, &candidates)).await;
    let total = candidates.len() * CASES * REPETITIONS as usize;
    // Kill once a few records are stored, well before the end.
    wait_until(&store, run_id, "the first records", |status, n| {
        assert!(
            !status.is_terminal(),
            "{backend}: the run ended before the kill ({n} records)"
        );
        n >= 4
    })
    .await;
    first.kill();

    let before = measured(&store, run_id).await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(
        run.status,
        RunStatus::Running,
        "{backend}: a killed run is left running"
    );
    assert!(
        before.len() < total,
        "{backend}: the kill came mid-run ({} of {total})",
        before.len()
    );

    let second = Server::start(database_url, &[]);
    wait_until(&store, run_id, "the resumed run to finish", |status, _| {
        status.is_terminal()
    })
    .await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{backend}: {:?}", run.error);

    let after = measured(&store, run_id).await;
    assert_complete(&after, &candidates, backend);
    // Nothing stored before the kill was lost or rewritten.
    for r in &before {
        assert!(
            after.iter().any(|a| a == r),
            "{backend}: record {} rep {} attempt {} changed or vanished",
            r.case_id,
            r.repetition,
            r.attempt
        );
    }
    let events = store.list_run_events(run_id).await.unwrap();
    assert!(
        events.iter().any(|e| e.message.starts_with("resumed")),
        "{backend}: the event log says the run was resumed: {events:?}"
    );
    // The page of the resumed run renders from the stored records.
    let page = http()
        .get(format!("{}/runs/{run_id}", second.base_url))
        .send()
        .await
        .expect("GET the run page");
    assert_eq!(page.status().as_u16(), 200);
    drop(second);
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_with_sigkill_resumes_on_sqlite_with_every_record_exactly_once() {
    let (url, _guard) = sqlite_url();
    kill_and_resume(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_run_killed_with_sigkill_resumes_on_postgres_with_every_record_exactly_once() {
    let (url, _guard) = postgres_url().await;
    kill_and_resume(&url, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_run_and_keeps_every_finished_record() {
    let app = spawn_app().await;
    let file = evalset();
    let mock = slow_mock(&file).await;
    let (version, candidates) = seed(&app.store, &file, &mock).await;
    let fields = run_form(version, &candidates);
    let run_id = start_run(&app.base_url, &fields).await;
    let total = candidates.len() * CASES * REPETITIONS as usize;
    wait_until(&app.store, run_id, "the first records", |_, n| n >= 3).await;

    let r = app.post_form(&format!("/runs/{run_id}/cancel"), &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    let started = tokio::time::Instant::now();
    tokio::time::timeout(DEADLINE, app.state.runner.wait(run_id))
        .await
        .expect("the cancelled run stops");
    // Generous bound: cancel abandons in-flight requests instead of waiting for them.
    assert!(started.elapsed() < Duration::from_secs(10), "cancel is prompt");
    let run = app.store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);

    let kept = measured(&app.store, run_id).await;
    assert!(kept.len() >= 3 && kept.len() < total, "{} of {total} kept", kept.len());
    let mut keys = BTreeSet::new();
    for r in &kept {
        assert!(r.succeeded());
        assert!(
            keys.insert((r.candidate_id, r.case_id.clone(), r.repetition, r.attempt)),
            "no duplicates"
        );
    }
    // Nothing more arrives after the run says cancelled, even once every request the mock
    // took has ended (the mock's own count), so a late answer would have been stored by now.
    crate::support::wait::until("the mock to hold no request", DEADLINE, || async {
        crate::support::wait::mock_busy(&mock).await == 0
    })
    .await;
    assert_eq!(measured(&app.store, run_id).await.len(), kept.len());
    mock.shutdown().await.ok();
}

/// A soak (the operability page's) killed with SIGKILL resumes as a soak: the stored soak
/// requests are kept, the rest is sent in the soak phase with fresh request numbers (no
/// ordinary run of its config), the events say what was kept and what is re-measured, and the
/// trend windows leave the downtime out.
async fn soak_kill_and_resume(database_url: &str, backend: &str) {
    use bakeoff::domain::run::Phase;
    use bakeoff::domain::stability::StabilityOptions;
    use bakeoff::domain::stability::soak::soak_analysis;

    let file = evalset();
    let mock = slow_mock(&file).await;
    let store = crate::support::db::open(database_url).await;
    let (version, candidates) = seed(&store, &file, &mock).await;
    let candidate = candidates[0];

    let first = Server::start(database_url, &[]);
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("seconds", "6"),
            ("concurrency", "2"),
            ("evalset_version_id", &version.to_string()),
        ])
        .finish();
    let r = browser_client(&first.base_url)
        .await
        .post(format!("{}/candidates/{candidate}/operability/soak", first.base_url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .expect("POST the soak form");
    assert_eq!(r.status().as_u16(), 303, "{backend}");
    // The soak runs in the background; its run appears at once.
    let run_id = crate::support::wait::until_some(&format!("{backend}: the soak run"), DEADLINE, || async {
        let runs = store.list_runs(5, 0).await.unwrap();
        runs.iter().find(|r| r.run.config.soak).map(|r| r.run.id)
    })
    .await;
    // Records are stored as they arrive: kill once a few are, well before the 6 s end.
    wait_until(&store, run_id, "the first soak records", |status, n| {
        assert!(!status.is_terminal(), "{backend}: the soak ended before the kill");
        n >= 4
    })
    .await;
    first.kill();
    let before = measured(&store, run_id).await;
    assert!(before.iter().all(|r| r.phase == Phase::Soak), "{backend}");
    // Down for longer than a soak ever has nothing in flight, so the pause is unmistakable.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let second = Server::start(database_url, &[]);
    wait_until(&store, run_id, "the resumed soak to finish", |status, _| {
        status.is_terminal()
    })
    .await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{backend}: {:?}", run.error);

    let after = measured(&store, run_id).await;
    assert!(
        after.iter().all(|r| r.phase == Phase::Soak),
        "{backend}: the resumed part is a soak too: {:?}",
        after.iter().map(|r| r.phase.as_str()).collect::<BTreeSet<_>>()
    );
    assert!(
        after.len() > before.len(),
        "{backend}: the soak went on after the restart"
    );
    for r in &before {
        assert!(
            after.iter().any(|a| a == r),
            "{backend}: a kept record changed or vanished"
        );
    }
    let mut keys = BTreeSet::new();
    for r in &after {
        assert!(r.succeeded(), "{backend}: {:?}", r.error_detail());
        assert!(
            keys.insert((r.case_id.clone(), r.repetition, r.attempt)),
            "{backend}: duplicate soak request {} rep {}",
            r.case_id,
            r.repetition
        );
    }
    let events = store.list_run_events(run_id).await.unwrap();
    let resumed = events
        .iter()
        .find(|e| e.message.starts_with("resumed soak after a restart"))
        .unwrap_or_else(|| panic!("{backend}: no resume event in {events:?}"));
    assert!(
        resumed
            .message
            .contains(&format!("{} stored soak requests kept", before.len()))
            && resumed.message.contains("remaining"),
        "{backend}: {}",
        resumed.message
    );
    assert!(
        events.iter().any(|e| e.message.contains("soak done")),
        "{backend}: {events:?}"
    );
    // The windows cover load time: the downtime is cut out and the verdict says so.
    let refs: Vec<&RequestRecord> = after.iter().collect();
    let analysis = soak_analysis(&refs, &StabilityOptions::default()).expect("enough soak records");
    assert!(analysis.paused_s >= 2.0, "{backend}: paused {} s", analysis.paused_s);
    assert!(analysis.verdict.contains("left out"), "{backend}: {}", analysis.verdict);
    drop(second);
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_killed_with_sigkill_resumes_as_a_soak_on_sqlite() {
    let (url, _guard) = sqlite_url();
    soak_kill_and_resume(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_soak_killed_with_sigkill_resumes_as_a_soak_on_postgres() {
    let (url, _guard) = postgres_url().await;
    soak_kill_and_resume(&url, "postgres").await;
}

/// How long the server stays down between a kill and the next start.
const DOWNTIME: Duration = Duration::from_millis(1500);

/// Kills the server during the run and again during the resumed run, then lets a third start
/// finish it: the figures are per segment (three of them, the downtime left out) and the run
/// page and the scorecard say so.
async fn kill_during_a_resumed_run(database_url: &str, backend: &str) {
    let file = evalset();
    let mock = slow_mock(&file).await;
    let store = crate::support::db::open(database_url).await;
    let (version, candidates) = seed(&store, &file, &mock).await;
    let total = candidates.len() * CASES * REPETITIONS as usize;

    let first = Server::start(database_url, &[]);
    let run_id = start_run(&first.base_url, &run_form(version, &candidates)).await;
    wait_until(&store, run_id, "the first records", |_, n| n >= 4).await;
    first.kill();
    let after_first = measured(&store, run_id).await.len();
    tokio::time::sleep(DOWNTIME).await;

    let second = Server::start(database_url, &[]);
    wait_until(&store, run_id, "records of the resumed run", |status, n| {
        assert!(
            !status.is_terminal(),
            "{backend}: the resumed run ended before the second kill"
        );
        n >= after_first + 4
    })
    .await;
    second.kill();
    let after_second = measured(&store, run_id).await.len();
    assert!(after_second < total, "{backend}: the second kill came mid-run");
    tokio::time::sleep(DOWNTIME).await;

    let third = Server::start(database_url, &[]);
    wait_until(&store, run_id, "the twice resumed run to finish", |status, _| {
        status.is_terminal()
    })
    .await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{backend}: {:?}", run.error);
    assert_complete(&measured(&store, run_id).await, &candidates, backend);
    let events = store.list_run_events(run_id).await.unwrap();
    let resumes = events.iter().filter(|e| e.message.starts_with("resumed:")).count();
    assert_eq!(resumes, 2, "{backend}: two resumes in the event log");

    // "measured in 3 segments (the run was resumed); 4.1 s of downtime excluded …"
    let segments = |text: &str| -> Option<(u32, f64)> {
        let marker = " segments (the run was resumed); ";
        let at = text.find(marker)?;
        let n = text[..at].rsplit(' ').next()?;
        let rest = &text[at + marker.len()..];
        let downtime = rest.split_once(" s of downtime excluded")?.0;
        Some((n.parse().ok()?, downtime.replace(',', "").parse().ok()?))
    };
    for path in [format!("/runs/{run_id}"), format!("/runs/{run_id}/scorecard")] {
        let page = http()
            .get(format!("{}{path}", third.base_url))
            .send()
            .await
            .expect("GET a page of the run");
        assert_eq!(page.status().as_u16(), 200, "{backend}: {path}");
        let text = page.text().await.unwrap();
        let (n, downtime) =
            segments(&text).unwrap_or_else(|| panic!("{backend}: {path} states the segments of the resumed run"));
        assert_eq!(n, 3, "{backend}: {path}: three segments (two kills)");
        // Each downtime is at least the time the server was down; neither is in any window.
        assert!(
            downtime >= 2.0 * DOWNTIME.as_secs_f64(),
            "{backend}: {path}: {downtime} s of downtime excluded, the server was down at least {:?} twice",
            DOWNTIME
        );
    }
    same_aggregates_on_compare_and_history(&third.base_url, &store, run_id, version, backend).await;
    drop(third);
    mock.shutdown().await.ok();
}

/// The text of `selector` in `html` (trimmed, whitespace collapsed), or "" when absent.
fn text_of(html: &scraper::Html, selector: &str) -> String {
    let selector = scraper::Selector::parse(selector).unwrap_or_else(|e| panic!("selector {selector}: {e}"));
    html.select(&selector)
        .next()
        .map(|e| e.text().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The run page's results cell of candidate column `i` in the first row whose label `pick`s.
fn results_cell(html: &scraper::Html, pick: impl Fn(&str) -> bool, i: usize) -> String {
    let rows = scraper::Selector::parse("table.results tbody tr").unwrap();
    let label = scraper::Selector::parse("th .figure-label").unwrap();
    let cells = scraper::Selector::parse("td").unwrap();
    let row = html
        .select(&rows)
        .find(|r| {
            r.select(&label)
                .next()
                .is_some_and(|l| pick(&l.text().collect::<String>()))
        })
        .expect("the results table has the row");
    row.select(&cells)
        .nth(i)
        .map(|c| c.text().collect::<String>())
        .unwrap_or_default()
}

/// The leading "N tok/s" of a cell.
fn leading_tok_s(cell: &str) -> String {
    let end = cell.find(" tok/s").unwrap_or_else(|| panic!("no tok/s in {cell:?}"));
    cell[..end + " tok/s".len()].to_string()
}

/// A resumed run's aggregate tok/s on the compare page and on the candidate's history equals
/// the run page's (per segment, the downtime left out), and both pages state the segments.
async fn same_aggregates_on_compare_and_history(
    base_url: &str,
    store: &DynStore,
    run_id: i64,
    version: i64,
    backend: &str,
) {
    let get = |path: String| async move {
        let page = http()
            .get(format!("{base_url}{path}"))
            .send()
            .await
            .expect("GET a page");
        assert_eq!(page.status().as_u16(), 200, "{backend}: {path}");
        scraper::Html::parse_document(&page.text().await.unwrap())
    };
    let run = store.get_run(run_id).await.unwrap().unwrap();
    let evalset = store.get_evalset_version(version).await.unwrap().unwrap().evalset_id;
    let run_page = get(format!("/runs/{run_id}")).await;
    let compare = get(format!("/archive/compare?runs={run_id}")).await;
    let mut resumed = Vec::new();
    for (i, &candidate) in run.candidate_ids.iter().enumerate() {
        let name = store.get_candidate(candidate).await.unwrap().unwrap().spec.name;
        // The results table: one row per figure, one column per candidate in the run's order.
        let steady = leading_tok_s(&results_cell(
            &run_page,
            |label| label.starts_with("aggregate tok/s") && !label.contains("whole run"),
            i,
        ));
        let whole = leading_tok_s(&results_cell(
            &run_page,
            |label| label.starts_with("aggregate tok/s") && label.contains("whole run"),
            i,
        ));
        // One column per candidate of the run, in its order.
        let on_compare = |label: &str| {
            text_of(
                &compare,
                &format!(
                    "tr[data-figure=\"aggregate tok/s @c=2 ({label})\"] td:nth-of-type({})",
                    i + 1
                ),
            )
        };
        assert_eq!(
            leading_tok_s(&on_compare("steady window")),
            steady,
            "{backend}: {name} on compare"
        );
        assert_eq!(
            leading_tok_s(&on_compare("whole run")),
            whole,
            "{backend}: {name} on compare"
        );
        // Candidates run one after the other: a kill splits the one being measured.
        let segments = text_of(&compare, &format!("td[data-segments=\"{run_id}:{candidate}\"]"));
        if segments.starts_with("measured in") {
            resumed.push(segments.clone());
        }

        let history = get(format!("/archive/history?candidate={candidate}&evalset={evalset}")).await;
        let cell = text_of(&history, &format!("tr[data-run=\"{run_id}\"] td[data-aggregate]"));
        assert_eq!(leading_tok_s(&cell), steady, "{backend}: {name} on history");
        match segments.as_str() {
            "one" => assert!(!cell.contains("segments"), "{backend}: history says {cell:?}"),
            text => assert!(
                cell.ends_with(text),
                "{backend}: history says {cell:?}, compare {text:?}"
            ),
        }
    }
    // The run page states the most segments of any candidate (three: two kills).
    assert!(
        resumed.iter().any(|s| s.starts_with("measured in 3 segments")),
        "{backend}: compare states the segments: {resumed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_killed_again_states_three_segments_without_the_downtime_on_sqlite() {
    let (url, _guard) = sqlite_url();
    kill_during_a_resumed_run(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_resumed_run_killed_again_states_three_segments_without_the_downtime_on_postgres() {
    let (url, _guard) = postgres_url().await;
    kill_during_a_resumed_run(&url, "postgres").await;
}

/// A find-capacity run killed with SIGKILL after its first probe level was stored resumes its
/// search on the next start: the probes stored before the kill are kept as its first probes,
/// and it ends as a search ends (an outcome with its estimate inside its bracket, within the
/// probe budget).
async fn capacity_kill_and_resume(database_url: &str, backend: &str) {
    use bakeoff::domain::candidate::CandidateSpec;
    use bakeoff::engine::endpoint_measure::synthetic_evalset;
    use bakeoff::mock::truth::REFERENCE as TRUTH;
    const MAX_PROBES: usize = 5;
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![TRUTH.profile("truth")],
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await;
    let store = crate::support::db::open(database_url).await;
    let spec = CandidateSpec::openai_chat("truth", mock.base_url(), "truth");
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let workload = synthetic_evalset(&[16], 40, TRUTH.tokens).unwrap();
    let version = store.save_evalset_version(&workload).await.unwrap();
    let slo = TRUTH.reference_slo();
    let fields: Vec<(String, String)> = [
        ("name", "capacity restart".to_string()),
        ("evalset_version", version.to_string()),
        ("candidate", candidate.to_string()),
        ("concurrency", "4".into()),
        ("repetitions", "1".into()),
        ("warmup_requests", "2".into()),
        ("max_tokens", TRUTH.tokens.to_string()),
        ("temperature", "0".into()),
        ("timeout_secs", "30".into()),
        ("retries", "0".into()),
        ("stream", "on".into()),
        ("load_shape", "capacity".into()),
        ("capacity_axis", "rate".into()),
        ("rate", (TRUTH.max_rate() * 0.4).round().to_string()),
        ("capacity_max_probes", MAX_PROBES.to_string()),
        ("requests_per_level", "80".into()),
        ("slo_ttft_ms", slo.ttft_ms.unwrap().to_string()),
        ("slo_target", "90".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    let first = Server::start(database_url, &[]);
    let run_id = start_run(&first.base_url, &fields).await;
    // Kill once the search has stored a probe and not yet ended.
    let before = crate::support::wait::until_some(&format!("{backend}: the first probe"), DEADLINE, || async {
        let searches = store.list_run_capacity(run_id).await.unwrap();
        let run = store.get_run(run_id).await.unwrap().unwrap();
        assert!(!run.status.is_terminal(), "{backend}: the run ended before the kill");
        searches
            .into_iter()
            .next()
            .filter(|s| !s.probes.is_empty() && s.outcome.is_none())
    })
    .await;
    first.kill();
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(
        run.status,
        RunStatus::Running,
        "{backend}: a killed run is left running"
    );

    let second = Server::start(database_url, &[]);
    wait_until(&store, run_id, "the resumed search to finish", |status, _| {
        status.is_terminal()
    })
    .await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{backend}: {:?}", run.error);
    let after = store.list_run_capacity(run_id).await.unwrap();
    assert_eq!(after.len(), 1, "{backend}: one search, not a second one");
    let after = &after[0];
    // The probes stored before the kill are the resumed search's first, unchanged.
    assert!(after.probes.len() >= before.probes.len(), "{backend}");
    let kept: Vec<_> = after.probes[..before.probes.len()]
        .iter()
        .map(|p| p.probe.clone())
        .collect();
    let stored: Vec<_> = before.probes.iter().map(|p| p.probe.clone()).collect();
    assert_eq!(kept, stored, "{backend}: the probes before the kill are kept");
    assert!(
        after.probes.len() <= MAX_PROBES,
        "{backend}: {} probes",
        after.probes.len()
    );
    let outcome = after.outcome.as_ref().expect("the resumed search ended");
    if let Some(c) = outcome.capacity {
        assert!(outcome.lower.is_none_or(|l| l <= c), "{backend}: {outcome:?}");
        assert!(outcome.upper.is_none_or(|u| c <= u), "{backend}: {outcome:?}");
    }
    let events = store.list_run_events(run_id).await.unwrap();
    assert!(
        events.iter().any(|e| e.message.starts_with("resumed")),
        "{backend}: the event log says the run was resumed: {events:?}"
    );
    drop(second);
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_search_killed_with_sigkill_resumes_with_its_probes_on_sqlite() {
    let (url, _guard) = sqlite_url();
    capacity_kill_and_resume(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_search_killed_with_sigkill_resumes_with_its_probes_on_postgres() {
    let (url, _guard) = postgres_url().await;
    capacity_kill_and_resume(&url, "postgres").await;
}

// ------------------------------------------------------------------ conversations (issue 46)

const CONVERSATIONS: usize = 6;
const CONVERSATION_TURNS: usize = 4;

/// Six conversations of four turns: turn 1 states a fact, the later ones ask it back.
fn conversation_set() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"restart-conv","task":"generation","system":"Answer briefly.","history":"own","graders":[{"kind":"exact"}],"max_tokens":24}"#,
    );
    for i in 0..CONVERSATIONS {
        text.push_str(&format!(
            "\n{{\"id\":\"talk-{i}\",\"turns\":[\
             {{\"user\":\"Remember the number {i}.\",\"expected\":\"Noted number {i}\"}},\
             {{\"user\":\"Which number was it?\",\"expected\":\"It was {i}\"}},\
             {{\"user\":\"Add one to it.\",\"expected\":\"That makes {}\"}},\
             {{\"user\":\"Say it in words.\",\"expected\":\"Number {i} plus one\"}}]}}",
            i + 1
        ));
    }
    EvalSetFile::parse("restart-conv.jsonl", &text).expect("the conversation set parses")
}

/// Stored turns of each conversation (measured records), by conversation id.
fn turns_stored(records: &[RequestRecord]) -> BTreeMap<String, BTreeSet<usize>> {
    let mut out: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for r in records {
        if let Some((case, turn)) = bakeoff::domain::evalset::conversation::split_turn_key(&r.case_id) {
            out.entry(case.to_string()).or_default().insert(turn);
        }
    }
    out
}

/// A conversation run killed with SIGKILL mid-conversation resumes each conversation from the
/// turn it reached: the turns stored are kept, the next one is sent with the stored replies as
/// its history (the server's prompt tokens say so, token-exact), no turn is sent twice.
async fn conversation_kill_and_resume(database_url: &str, backend: &str) {
    let file = conversation_set();
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 60.0,
            inter_token_ms: Some(15.0),
            tokens_per_chunk: 1,
            jitter: 0.0,
            ..ModelProfile::named("talker")
        }],
        answer_keys: vec![file.clone()],
        seed: 11,
    })
    .await;
    let store = crate::support::db::open(database_url).await;
    let version = store.save_evalset_version(&file).await.expect("saving the set");
    let spec = CandidateDraft {
        name: "talker".into(),
        provider: "openai-chat".into(),
        base_url: mock.base_url(),
        model: "talker".into(),
        ..Default::default()
    }
    .validate(None)
    .expect("a valid candidate");
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .expect("saving the candidate");
    let fields: Vec<(String, String)> = [
        ("name", "conversation restart"),
        ("evalset_version", &version.to_string()),
        ("candidate", &candidate.to_string()),
        ("concurrency", "2"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("max_tokens", "24"),
        ("timeout_secs", "20"),
        ("retries", "0"),
        ("stream", "on"),
        ("think_time", "fixed 40"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();

    let first = Server::start(database_url, &[]);
    let run_id = start_run(&first.base_url, &fields).await;
    // Kill once a conversation is stored past its first turn but not to its last.
    crate::support::wait::until(&format!("{backend}: a conversation half done"), DEADLINE, || async {
        let stored = turns_stored(&measured(&store, run_id).await);
        stored.values().any(|t| (2..CONVERSATION_TURNS).contains(&t.len()))
    })
    .await;
    first.kill();
    let before = measured(&store, run_id).await;
    let cut: BTreeMap<String, usize> = turns_stored(&before)
        .into_iter()
        .filter(|(_, t)| t.len() < CONVERSATION_TURNS)
        .map(|(c, t)| (c, t.len()))
        .collect();
    assert!(
        cut.values().any(|&n| n >= 1),
        "{backend}: the kill came mid-conversation: {cut:?}"
    );
    for (conversation, n) in &cut {
        let turns = &turns_stored(&before)[conversation];
        assert_eq!(
            turns.iter().copied().collect::<Vec<_>>(),
            (1..=*n).collect::<Vec<_>>(),
            "{backend}: {conversation}: turns are stored in order"
        );
    }

    let second = Server::start(database_url, &[]);
    wait_until(&store, run_id, "the resumed run to finish", |status, _| {
        status.is_terminal()
    })
    .await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{backend}: {:?}", run.error);
    let after = measured(&store, run_id).await;
    // Every turn of every conversation exactly once: none restarted, none lost.
    let mut keys = BTreeSet::new();
    for r in &after {
        assert!(r.succeeded(), "{backend}: {}: {:?}", r.case_id, r.error_detail());
        assert!(
            keys.insert(r.case_id.to_string()),
            "{backend}: {} sent twice",
            r.case_id
        );
    }
    assert_eq!(keys.len(), CONVERSATIONS * CONVERSATION_TURNS, "{backend}");
    for r in &before {
        assert!(
            after.iter().any(|a| a == r),
            "{backend}: a turn stored before the kill ({}) changed or vanished",
            r.case_id
        );
    }
    // The history carried on: each turn's prompt is the previous turn's, its reply (the one
    // stored before the kill, for the turn the resumed run sent first) and the new message, as
    // the server counted them (4 framing tokens a message).
    let by_key: BTreeMap<&str, &RequestRecord> = after.iter().map(|r| (r.case_id.as_ref(), r)).collect();
    let count = bakeoff::mock::tokens::count_tokens;
    for case in &file.cases {
        for k in 2..=CONVERSATION_TURNS {
            let prev = by_key[format!("{}#{}", case.id, k - 1).as_str()];
            let this = by_key[format!("{}#{k}", case.id).as_str()];
            let user = case.turns[k - 1].user_message(&case.vars);
            assert_eq!(
                this.input_tokens.unwrap(),
                prev.input_tokens.unwrap() + count(prev.output()) + 4 + count(&user) + 4,
                "{backend}: {} turn {k}: the history sent is the stored one",
                case.id
            );
            // Right answers all along: the model saw its own right replies as history.
            assert_eq!(
                bakeoff::domain::grading::case_passed(&this.grades),
                Some(true),
                "{backend}"
            );
        }
        if let Some(&n) = cut.get(&case.id) {
            let resumed = by_key[format!("{}#{}", case.id, n + 1).as_str()];
            let killed_at = before.iter().map(|r| r.sent_at_us).max().unwrap();
            assert!(
                resumed.sent_at_us > killed_at,
                "{backend}: {} turn {} was sent by the resumed run",
                case.id,
                n + 1
            );
        }
    }
    let events = store.list_run_events(run_id).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("go on from the turn they reached")),
        "{backend}: the event log says the conversations went on: {events:?}"
    );
    drop(second);
    mock.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_run_killed_mid_conversation_goes_on_from_the_turn_reached_on_sqlite() {
    let (url, _guard) = sqlite_url();
    conversation_kill_and_resume(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_conversation_run_killed_mid_conversation_goes_on_from_the_turn_reached_on_postgres() {
    let (url, _guard) = postgres_url().await;
    conversation_kill_and_resume(&url, "postgres").await;
}
