//! The demo is deterministic: the same demo run under different concurrency and runtime thread
//! counts gives the same per-case outcomes and the README's three verdicts (swift-7b NO-GO,
//! steady-32b INCONCLUSIVE, sage-70b GO), because every mock decision is tied to the case and the
//! seed, never to arrival order.
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bakeoff::domain::grading::case_passed;
use bakeoff::domain::pipeline::PipelineSpec;
use bakeoff::domain::run::{NewRun, Phase, RunConfig};
use bakeoff::domain::scorecard::{self, ScorecardInput, Verdict};

use crate::support::db::sqlite_store;
use crate::support::runs::run_to_end_within;

/// Longest one demo run may take before the test fails instead of hanging.
const RUN_DEADLINE: Duration = Duration::from_secs(180);

/// (model, case, phase, repetition, attempt) of one recorded request.
type Key = (String, String, String, u32, u32);

/// What a request came to: passed (None: ungraded), error class, output.
type Outcome = (Option<bool>, Option<String>, String);

/// One demo run at `concurrency` on a fresh store and mock: every record's outcome, and each
/// demo model's verdict by the default profile.
async fn demo_outcomes(concurrency: u32) -> (BTreeMap<Key, Outcome>, HashMap<String, (Verdict, Vec<String>)>) {
    let (store, _db) = sqlite_store().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::app::demo::start_mock(listener).await.unwrap();
    bakeoff::app::demo::bootstrap(store.as_ref(), Some(&mock.base_url()))
        .await
        .unwrap();
    let version = store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.name == bakeoff::app::demo::DEMO_EVALSET)
        .expect("the demo eval set is shipped")
        .latest_version_id;
    let candidates = store.list_candidates().await.unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: format!("demo at c={concurrency}"),
            evalset_version_id: version,
            candidate_ids: candidates.iter().map(|c| c.id).collect(),
            config: RunConfig {
                concurrency,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let run = run_to_end_within(&store, run_id, RUN_DEADLINE).await;
    let records = store.list_request_records(run_id).await.unwrap();
    let model_of: HashMap<i64, String> = candidates.iter().map(|c| (c.id, c.spec.model.clone())).collect();
    let outcomes = records
        .iter()
        .map(|r| {
            let key = (
                model_of[&r.candidate_id].clone(),
                r.case_id.to_string(),
                format!("{:?}", r.phase),
                r.repetition,
                r.attempt,
            );
            let error = r.error_class.map(|e| format!("{e:?}"));
            (key, (case_passed(&r.grades), error, r.output().to_string()))
        })
        .collect();
    let profile = store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == bakeoff::app::demo::DEFAULT_PROFILE)
        .unwrap();
    let card = scorecard::build(&ScorecardInput {
        run_concurrency: run.config.concurrency,
        candidates: &candidates,
        records: &records,
        weights: &HashMap::new(),
        rules: &profile.rules,
        incumbent: None,
        pipeline: &PipelineSpec::default(),
        operability: &[],
        judge: None,
        resumes: &[],
        preferences: &[],
    });
    let verdicts = candidates
        .iter()
        .zip(&card.columns)
        .map(|(c, column)| {
            assert_eq!(column.name, c.spec.name);
            (c.spec.model.clone(), (column.verdict, column.reasons.clone()))
        })
        .collect();
    mock.shutdown().await.unwrap();
    (outcomes, verdicts)
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().build().unwrap()
}

#[test]
fn the_demo_gives_the_same_cases_and_verdicts_whatever_the_concurrency_and_threads() {
    let (one_thread, verdicts_one) = runtime(1).block_on(demo_outcomes(4));
    let (four_threads, verdicts_four) = runtime(4).block_on(demo_outcomes(8));
    let verdicts = |v: &HashMap<String, (Verdict, Vec<String>)>| -> HashMap<String, Verdict> {
        v.iter().map(|(m, (verdict, _))| (m.clone(), *verdict)).collect()
    };
    let expected: HashMap<String, Verdict> = [
        ("swift-7b", Verdict::NoGo),
        ("steady-32b", Verdict::Inconclusive),
        ("sage-70b", Verdict::Go),
        // Right on text: a GO here, a NO-GO on the tool set (tool_cases.rs).
        ("relay-8b", Verdict::Go),
    ]
    .into_iter()
    .map(|(m, v)| (m.to_string(), v))
    .collect();
    assert_eq!(verdicts(&verdicts_one), expected, "{verdicts_one:#?}");
    assert_eq!(verdicts(&verdicts_four), expected, "{verdicts_four:#?}");
    // The measured cases of both runs, one by one (staged-start and warm-up requests too).
    let differing: Vec<_> = one_thread
        .iter()
        .filter(|(k, v)| four_threads.get(*k) != Some(*v))
        .map(|(k, v)| (k, v, four_threads.get(k)))
        .collect();
    assert!(differing.is_empty(), "{differing:#?}");
    assert_eq!(one_thread.len(), four_threads.len());
    assert!(one_thread.keys().any(|k| k.2 == format!("{:?}", Phase::Quality)));
}
