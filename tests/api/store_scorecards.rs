//! Store additions for the scorecard: profile versions by number and archived scorecards, on
//! every backend (`each_backend!`: SQLite always, PostgreSQL when configured, ignored otherwise).
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::pipeline::{PipelineSpec, Stage};
use bakeoff::domain::run::{NewRun, RunConfig};
use bakeoff::domain::scorecard::{NewScorecard, RecordedVerdict, Verdict};
use bakeoff::domain::thresholds::Comparator;
use bakeoff::domain::thresholds::templates::{batch_default_rules, demo_default_rules};
use bakeoff::store::{DynStore, StoreError};

use crate::support::db::{TestStore, each_backend};

fn candidate(name: &str) -> CandidateSpec {
    CandidateSpec::openai_chat(name, "http://127.0.0.1:9/v1", "m")
}

/// A run with two candidates; returns (run id, candidate ids).
async fn seeded_run(store: &DynStore) -> (i64, Vec<i64>) {
    let file = EvalSetFile::parse(
        "s.jsonl",
        "{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"classification\",\"prompt\":\"{{t}}\",\"graders\":[{\"kind\":\"exact\"}]}\n\
         {\"id\":\"a\",\"vars\":{\"t\":\"x\"},\"expected\":\"y\"}\n",
    )
    .unwrap();
    run_of(store, &file).await
}

/// A run of `file` with two new candidates, "a" and "b"; returns (run id, candidate ids).
async fn run_of(store: &DynStore, file: &EvalSetFile) -> (i64, Vec<i64>) {
    let version = store.save_evalset_version(file).await.unwrap();
    let a = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("a")))
        .await
        .unwrap();
    let b = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("b")))
        .await
        .unwrap();
    let run = store
        .create_run(&NewRun {
            name: "judged".into(),
            evalset_version_id: version,
            candidate_ids: vec![a, b],
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    (run, vec![a, b])
}

fn new_scorecard(run_id: i64, profile_id: i64, version: u32, incumbent: Option<i64>) -> NewScorecard {
    NewScorecard {
        run_id,
        profile_id,
        profile_version: version,
        incumbent,
        pipeline: PipelineSpec {
            stages: vec![Stage {
                name: "OCR <pre>".into(),
                seconds_per_item: 1.5,
            }],
            model_share: None,
        },
        created_by: "ana".into(),
        note: "before the vendor call".into(),
        verdicts: vec![RecordedVerdict {
            candidate_id: incumbent.unwrap_or(0),
            candidate: "a".into(),
            verdict: Verdict::Inconclusive,
        }],
    }
}

each_backend!(store_profiles_are_read_at_any_version);
async fn store_profiles_are_read_at_any_version(TestStore { backend, store, .. }: TestStore) {
    let (id, _) = store
        .save_threshold_profile("p", "first", &batch_default_rules(), "ana", "v1")
        .await
        .unwrap();
    let mut v2 = demo_default_rules();
    v2[0].comparator = Comparator::Above;
    store
        .save_threshold_profile("p", "second", &v2, "bo", "v2")
        .await
        .unwrap();

    let current = store.get_threshold_profile(id, None).await.unwrap().unwrap();
    assert_eq!(
        (current.version, current.description.as_str()),
        (2, "second"),
        "{backend}"
    );
    assert_eq!(current.rules, v2, "{backend}");
    let first = store.get_threshold_profile(id, Some(1)).await.unwrap().unwrap();
    assert_eq!((first.version, first.description.as_str()), (1, "first"), "{backend}");
    assert_eq!(first.rules, batch_default_rules(), "{backend}");
    assert_eq!(first.name, "p", "{backend}");
    assert!(
        store.get_threshold_profile(id, Some(3)).await.unwrap().is_none(),
        "{backend}"
    );
    assert!(
        store.get_threshold_profile(id + 100, None).await.unwrap().is_none(),
        "{backend}"
    );
}

each_backend!(store_scorecards_are_archived_listed_and_never_updated);
async fn store_scorecards_are_archived_listed_and_never_updated(t: TestStore) {
    let (store, backend) = (&t.store, t.backend);
    let (run, candidates) = seeded_run(store).await;
    let (profile, version) = store
        .save_threshold_profile("p", "", &demo_default_rules(), "ana", "v1")
        .await
        .unwrap();

    let first = new_scorecard(run, profile, version, Some(candidates[0]));
    let id = store.save_scorecard(&first).await.unwrap();
    let second = store
        .save_scorecard(&new_scorecard(run, profile, version, None))
        .await
        .unwrap();
    assert!(second > id, "{backend}");

    let got = store.get_scorecard(id).await.unwrap().unwrap();
    assert_eq!(
        (got.run_id, got.profile_id, got.profile_version, got.incumbent),
        (run, profile, version, Some(candidates[0])),
        "{backend}"
    );
    assert_eq!(got.pipeline, first.pipeline, "{backend}");
    assert_eq!(got.verdicts, first.verdicts, "{backend}");
    assert_eq!(
        (got.created_by.as_str(), got.note.as_str()),
        ("ana", "before the vendor call"),
        "{backend}"
    );
    assert!(store.get_scorecard(id + 100).await.unwrap().is_none(), "{backend}");

    assert_eq!(store.count_scorecards().await.unwrap(), 2, "{backend}");
    let listed = store.list_scorecards(10, 0).await.unwrap();
    assert_eq!(listed.len(), 2, "{backend}");
    assert_eq!(listed[0].record.id, second, "{backend}: newest first");
    assert_eq!(
        (listed[1].run_name.as_str(), listed[1].profile_name.as_str()),
        ("judged", "p"),
        "{backend}"
    );
    assert_eq!(store.list_scorecards(1, 1).await.unwrap()[0].record.id, id, "{backend}");
    let for_run = store.list_run_scorecards(run).await.unwrap();
    assert_eq!(for_run.len(), 2, "{backend}");
    assert!(
        store.list_run_scorecards(run + 100).await.unwrap().is_empty(),
        "{backend}"
    );

    // The archive is append-only.
    let refused = t
        .execute_raw(&format!("UPDATE scorecards SET note = 'edited' WHERE id = {id}"))
        .await;
    assert!(refused.is_err(), "{backend}: a scorecard was updated");
    assert_eq!(
        store.get_scorecard(id).await.unwrap().unwrap().note,
        "before the vendor call"
    );
}

each_backend!(store_scorecards_refuse_unknown_references);
async fn store_scorecards_refuse_unknown_references(TestStore { backend, store, .. }: TestStore) {
    let (run, candidates) = seeded_run(&store).await;
    let (profile, version) = store
        .save_threshold_profile("p", "", &demo_default_rules(), "ana", "v1")
        .await
        .unwrap();
    for bad in [
        new_scorecard(run + 100, profile, version, None),
        new_scorecard(run, profile + 100, version, None),
        new_scorecard(run, profile, version + 1, None),
        new_scorecard(run, profile, version, Some(candidates[1] + 100)),
    ] {
        match store.save_scorecard(&bad).await {
            Err(StoreError::NotFound(what)) => assert!(what.contains("run"), "{backend}: {what}"),
            other => panic!("{backend}: expected NotFound, got {other:?}"),
        }
    }
    assert_eq!(store.count_scorecards().await.unwrap(), 0, "{backend}: nothing stored");
}

each_backend!(scorecard_summaries_weigh_cases_by_the_stored_weights);
/// A terminal run's scorecard summaries read the case weights from the store (the eval set's
/// outline, not the whole version): weighted accuracy counts the heavy case eight times,
/// pass rate once, and the stored summaries read back say the same, paired case by case.
async fn scorecard_summaries_weigh_cases_by_the_stored_weights(TestStore { backend, store, .. }: TestStore) {
    use bakeoff::app::runs::{RunRecords, RunVersion};
    use bakeoff::app::scorecard::candidate_summaries;
    use bakeoff::domain::run::RunStatus;
    use bakeoff::domain::scorecard::Extras;
    use bakeoff::domain::thresholds::key::MetricKey;

    let weighted =
        crate::support::app::TINY_EVALSET.replace(r#""expected":"neutral""#, r#""expected":"neutral","weight":8"#);
    let file = EvalSetFile::parse("weighted.jsonl", &weighted).unwrap();
    let (run_id, ids) = run_of(&store, &file).await;
    let (a, b) = (ids[0], ids[1]);
    use crate::support::app::record;
    store
        .append_request_records(&[
            record(run_id, a, "c1", "positive", true),
            record(run_id, a, "c2", "negative", true),
            record(run_id, a, "c3", "positive", false),
            record(run_id, b, "c1", "negative", false),
            record(run_id, b, "c2", "negative", true),
            record(run_id, b, "c3", "neutral", true),
        ])
        .await
        .unwrap();
    store.set_run_status(run_id, RunStatus::Finished, None).await.unwrap();
    let run = store.get_run(run_id).await.unwrap().unwrap();
    let candidates = store.run_candidates(run_id).await.unwrap();
    let value = |s: &bakeoff::domain::scorecard::CandidateSummary, metric: &str| {
        let key = MetricKey::parse(metric).unwrap();
        s.measure(&key, run.config.concurrency, &Extras::default())
            .value
            .unwrap()
    };
    let summaries = || async {
        candidate_summaries(
            &store,
            &bakeoff::app::live::Live::new(),
            &run,
            &RunVersion::of(&run),
            &candidates,
            &RunRecords::of(run_id),
        )
        .await
        .unwrap()
    };
    let computed = summaries().await;
    let stored = summaries().await;
    assert_eq!(
        computed, stored,
        "{backend}: the stored summaries read back as computed"
    );
    let (sa, sb) = (&stored[0], &stored[1]);
    assert!(
        (value(sa, "accuracy") - 2.0 / 10.0).abs() < 1e-9,
        "{backend}: {}",
        value(sa, "accuracy")
    );
    assert!((value(sa, "pass_rate") - 2.0 / 3.0).abs() < 1e-9, "{backend}");
    assert!((value(sb, "accuracy") - 9.0 / 10.0).abs() < 1e-9, "{backend}");
    let paired = bakeoff::domain::paired::compare(&sa.correct_cases, &sb.correct_cases);
    assert_eq!(
        (
            paired.cases,
            paired.both_right,
            paired.only_a,
            paired.only_b,
            paired.both_wrong
        ),
        (3, 1, 1, 1, 0),
        "{backend}"
    );
}
