//! Store additions for operability: probe runs and versioned checklist answers, on every
//! backend (`each_backend!`: SQLite always, PostgreSQL when configured, ignored otherwise).
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::operability::{
    Answer, ChecklistAnswers, ChecklistItem, Evidence, ItemAnswer, ProbeKind, ProbeOutcome, ProbeReport, ProbeResult,
    diff_checklist,
};
use bakeoff::store::StoreError;

use crate::support::db::{TestStore, each_backend};

fn candidate(name: &str) -> CandidateSpec {
    CandidateSpec::openai_chat(name, "http://127.0.0.1:9/v1", "m")
}

fn report(passing: usize) -> ProbeReport {
    ProbeReport {
        results: ProbeKind::ALL
            .iter()
            .enumerate()
            .map(|(i, kind)| ProbeResult {
                kind: *kind,
                outcome: if i < passing {
                    ProbeOutcome::Pass
                } else {
                    ProbeOutcome::Fail
                },
                summary: format!("summary {i} <b>escaped later</b> 中文"),
                evidence: Evidence {
                    request: "GET http://127.0.0.1:9/v1/models".into(),
                    status: Some(200),
                    excerpt: "{\"data\":[]}".into(),
                    elapsed_ms: Some(1.5),
                    notes: vec!["note".into()],
                },
            })
            .collect(),
        provenance: vec![("server".into(), "vllm/0.6".into())],
        base_url: "http://127.0.0.1:9/v1".into(),
        model: "m".into(),
        elapsed_ms: 42.0,
    }
}

fn answers(pairs: &[(ChecklistItem, Answer, &str)]) -> ChecklistAnswers {
    ChecklistAnswers(
        pairs
            .iter()
            .map(|(item, answer, notes)| {
                (
                    *item,
                    ItemAnswer {
                        answer: *answer,
                        notes: notes.to_string(),
                    },
                )
            })
            .collect(),
    )
}

each_backend!(store_probe_runs_round_trip_newest_first);
async fn store_probe_runs_round_trip_newest_first(TestStore { backend, store, .. }: TestStore) {
    let a = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("a")))
        .await
        .unwrap();
    let b = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("b")))
        .await
        .unwrap();
    let first = store.save_probe_run(a, &report(3)).await.unwrap();
    let second = store.save_probe_run(a, &report(9)).await.unwrap();
    store.save_probe_run(b, &report(1)).await.unwrap();
    let runs = store.list_probe_runs(a, 10).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![second, first],
        "{backend}"
    );
    assert_eq!(runs[0].report, report(9), "{backend}: the report round-trips exactly");
    assert_eq!(runs[0].report.counts(), (9, 2, 0), "{backend}");
    assert_eq!(store.list_probe_runs(a, 1).await.unwrap().len(), 1, "{backend}");
    assert_eq!(store.list_probe_runs(b, 10).await.unwrap().len(), 1, "{backend}");
    let missing = store.save_probe_run(9999, &report(1)).await.unwrap_err();
    assert!(matches!(missing, StoreError::NotFound(_)), "{backend}: {missing}");
}

each_backend!(store_checklist_versions_keep_who_when_and_every_answer);
async fn store_checklist_versions_keep_who_when_and_every_answer(t: TestStore) {
    let (store, backend) = (&t.store, t.backend);
    let a = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("a")))
        .await
        .unwrap();
    assert!(store.checklist_history(a).await.unwrap().is_empty(), "{backend}");
    let v1 = answers(&[
        (ChecklistItem::Logging, Answer::No, "stdout only"),
        (
            ChecklistItem::HardwareRecorded,
            Answer::Yes,
            "1× L40S 48 GB, driver 550",
        ),
    ]);
    let v2 = answers(&[
        (ChecklistItem::Logging, Answer::Yes, "Loki, 30 days"),
        (
            ChecklistItem::HardwareRecorded,
            Answer::Yes,
            "1× L40S 48 GB, driver 550",
        ),
        (ChecklistItem::AccessControl, Answer::NotApplicable, ""),
    ]);
    assert_eq!(
        store.save_checklist(a, &v1, "Mei", "first pass").await.unwrap(),
        1,
        "{backend}"
    );
    assert_eq!(
        store.save_checklist(a, &v2, "Bo", "logging shipped").await.unwrap(),
        2,
        "{backend}"
    );
    let history = store.checklist_history(a).await.unwrap();
    assert_eq!(
        history.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![2, 1],
        "{backend}"
    );
    assert_eq!(
        (history[0].changed_by.as_str(), history[0].rationale.as_str()),
        ("Bo", "logging shipped")
    );
    assert_eq!(history[0].answers, v2, "{backend}");
    assert_eq!(history[1].answers, v1, "{backend}");
    let changes = diff_checklist(&history[1].answers, &history[0].answers);
    assert_eq!(changes.len(), 2, "{backend}: logging and access control changed");
    // Rows are never updated.
    let refused = t
        .execute_raw("UPDATE operability_checklists SET changed_by = 'x'")
        .await;
    assert!(refused.is_err(), "{backend}: the history is append-only");
    store.save_probe_run(a, &report(2)).await.unwrap();
    assert!(
        t.execute_raw("UPDATE operability_probe_runs SET passed = 0")
            .await
            .is_err(),
        "{backend}: probe runs are append-only"
    );
    let missing = store.save_checklist(9999, &v1, "Mei", "").await.unwrap_err();
    assert!(matches!(missing, StoreError::NotFound(_)), "{backend}: {missing}");
}

each_backend!(store_concurrent_checklist_saves_get_distinct_versions);
async fn store_concurrent_checklist_saves_get_distinct_versions(TestStore { backend, store, .. }: TestStore) {
    let a = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("a")))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let v = answers(&[(ChecklistItem::Monitoring, Answer::Yes, &format!("try {i}"))]);
            store.save_checklist(a, &v, "team", "").await
        }));
    }
    let mut versions = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(v) => versions.push(v),
            // A save that lost the race three times says so; nothing is half-written.
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("{backend}: {e}"),
        }
    }
    versions.sort_unstable();
    let n = versions.len() as u32;
    assert!(n >= 1, "{backend}");
    assert_eq!(
        versions,
        (1..=n).collect::<Vec<_>>(),
        "{backend}: versions are 1..n without gaps"
    );
    assert_eq!(
        store.checklist_history(a).await.unwrap().len(),
        versions.len(),
        "{backend}"
    );
}
