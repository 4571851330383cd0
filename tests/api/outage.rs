//! Nothing lost when the database goes away mid-run: a TCP proxy between bakeoff and
//! PostgreSQL resets every connection for 10 s in the middle of a run; the writer holds the
//! records, tries again until the database answers, and the run finishes with every record
//! stored exactly once; a page asked for meanwhile answers 503 within a second or so.
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::engine::run::Runner;
use bakeoff::mock::{MockConfig, ModelProfile};

use crate::support::app::spawn_app_on;
use crate::support::proxy::FaultProxy;
use crate::support::runs::start_mock;

const CASES: usize = 120;
const OUTAGE: Duration = Duration::from_secs(10);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn postgres_reset_for_ten_seconds_mid_run_loses_nothing() {
    let server = url::Url::parse(&crate::support::db::postgres_server_url()).unwrap();
    let target = format!("{}:{}", server.host_str().unwrap(), server.port().unwrap_or(5432));
    let proxy = Arc::new(FaultProxy::start(target.parse().unwrap()).await);
    let t = crate::support::db::postgres_test_store_through(&proxy.addr.to_string()).await;
    // A second way in that the proxy never cuts, to watch the run from outside.
    let direct_url = t.url.replacen(&proxy.addr.to_string(), &target, 1);
    let direct = crate::support::db::open(&direct_url).await;

    let file = evalset();
    let mock = start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 40.0,
            inter_token_ms: Some(15.0),
            jitter: 0.0,
            ..ModelProfile::named("steady")
        }],
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await;
    let store = t.store.clone();
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
    let candidate = store.create_candidate(&spec).await.unwrap();
    let run = store
        .create_run(&NewRun {
            name: "outage".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 0,
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let app = spawn_app_on(t).await;
    let runner = Runner::new(store.clone());
    runner.start(run);

    // Cut once some records are stored and the run is well under way.
    let started = Instant::now();
    loop {
        let stored = direct.list_request_records(run).await.unwrap().len();
        if stored >= 10 {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "the run never got going");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before_cut = direct.list_request_records(run).await.unwrap().len();
    assert!(before_cut < CASES, "the run ended before the cut; make the mock slower");
    let cut = proxy.cut_in_background(OUTAGE);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A page meanwhile answers 503 fast instead of hanging.
    let asked = Instant::now();
    let page = app.get("/runs").await;
    let took = asked.elapsed();
    assert_eq!(page.status(), 503, "a page while the database is away");
    assert!(took < Duration::from_secs(3), "the 503 took {took:?}");
    assert!(page.text().await.unwrap().contains("database is not answering"));

    cut.await.unwrap();
    tokio::time::timeout(DEADLINE, runner.wait(run))
        .await
        .expect("the run ended in time");
    let ended = direct.get_run(run).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Finished, "the run finishes: {:?}", ended.error);
    let records = direct.list_request_records(run).await.unwrap();
    let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup && r.attempt == 0).collect();
    let cases: BTreeSet<&str> = measured.iter().map(|r| r.case_id.as_str()).collect();
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
