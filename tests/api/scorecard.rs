//! The scorecard end to end: the demo's three candidates run against the built-in mock and are
//! judged by the default profile; pages and exports are checked by CSS selectors and parsers.
use std::collections::HashMap;
use std::time::Duration;

use bakeoff::domain::pipeline::PipelineSpec;
use bakeoff::domain::run::{NewRun, RunConfig};
use bakeoff::domain::scorecard::{self, ScorecardInput, Verdict};
use bakeoff::engine::Runner;
use bakeoff::store::DynStore;

use crate::support::db::sqlite_store;

/// Longest the demo run may take before the test fails instead of hanging.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

/// Bootstraps the demo (eval sets, profiles, three mock-backed candidates), runs them with the
/// run form's defaults and waits for the end. Returns (run id, mock) — keep the mock alive.
async fn demo_run(store: &DynStore) -> (i64, bakeoff::mock::MockServer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the mock");
    let mock = bakeoff::demo::start_mock(listener)
        .await
        .expect("starting the demo mock");
    bakeoff::demo::bootstrap(store.as_ref(), Some(&mock.base_url()))
        .await
        .expect("bootstrapping the demo");
    let version = store.list_evalsets().await.unwrap()[0].latest_version_id;
    let candidate_ids: Vec<i64> = store.list_candidates().await.unwrap().iter().map(|c| c.id).collect();
    let run = store
        .create_run(&NewRun {
            name: "demo bake-off".into(),
            evalset_version_id: version,
            candidate_ids,
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    let runner = Runner::new(store.clone());
    runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, runner.wait(run))
        .await
        .expect("the demo run ended in time");
    (run, mock)
}

#[tokio::test]
async fn the_demo_candidates_get_a_go_a_no_go_and_an_inconclusive() {
    let (store, _db) = sqlite_store().await;
    let (run_id, mock) = demo_run(&store).await;
    let run = store.get_run(run_id).await.unwrap().unwrap();
    let records = store.list_request_records(run_id).await.unwrap();
    let candidates: Vec<_> = store
        .list_candidates()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| run.candidate_ids.contains(&c.id))
        .collect();
    let profile = store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == bakeoff::demo::DEFAULT_PROFILE)
        .expect("the default profile is created on first start");
    let card = scorecard::build(&ScorecardInput {
        run_concurrency: run.config.concurrency,
        candidates: &candidates,
        records: &records,
        weights: &HashMap::new(),
        rules: &profile.rules,
        incumbent: None,
        pipeline: &PipelineSpec::default(),
    });
    let verdict = |model: &str| {
        card.columns
            .iter()
            .find(|c| c.name.contains(model))
            .unwrap_or_else(|| panic!("no column for {model}"))
    };
    let (swift, steady, sage) = (verdict("swift-7b"), verdict("steady-32b"), verdict("sage-70b"));
    assert_eq!(swift.verdict, Verdict::NoGo, "{:#?}", swift.reasons);
    assert!(swift.reasons[0].starts_with("accuracy "), "{:?}", swift.reasons);
    assert_eq!(steady.verdict, Verdict::Inconclusive, "{:#?}", steady.reasons);
    assert!(
        steady.reasons[0].contains("straddles the threshold") && steady.reasons[0].contains("more cases"),
        "{:?}",
        steady.reasons
    );
    assert_eq!(sage.verdict, Verdict::Go, "{:#?}", sage.reasons);
    mock.shutdown().await.expect("stopping the mock");
}
