//! The storage layer, one suite run against every backend (`support::db::each_backend!`):
//! SQLite always, PostgreSQL when `BAKEOFF_TEST_POSTGRES_URL` is set (ignored otherwise).
use std::sync::Arc;

use bakeoff::domain::candidate::{CandidateSpec, ClaimedFigure, Conditions, Pricing, ProviderKind, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::Grade;
use bakeoff::domain::run::{ErrorClass, NewRun, Phase, RecordTexts, RequestRecord, RunConfig, RunStatus, TokenSource};
use bakeoff::domain::thresholds::templates::batch_default_rules;
use bakeoff::domain::thresholds::{Comparator, ThresholdRule};
use bakeoff::store::{self, Backend, DynStore, EvalCaseKey, StoreError};

use crate::support::db::{TestStore, each_backend};

// ---------------------------------------------------------------- builders

fn candidate(name: &str) -> CandidateSpec {
    CandidateSpec::openai_chat(name, "http://127.0.0.1:9000/v1", "mock-fast")
}

/// A candidate with every optional field filled, to check nothing is lost on the way.
fn full_candidate(name: &str) -> CandidateSpec {
    let mut extra = serde_json::Map::new();
    extra.insert("top_p".into(), serde_json::json!(0.9));
    extra.insert("stop".into(), serde_json::json!(["\n\n", "。"]));
    CandidateSpec {
        provider: ProviderKind::Anthropic,
        api_key: Some(Secret::new("sk-test-secret-123")),
        api_key_env: Some("VENDOR_KEY".into()),
        max_tokens: Some(512),
        temperature: Some(0.25),
        extra_body: extra,
        conditions: Conditions {
            hardware: Some("1× H100 80GB".into()),
            framework: Some("vLLM 0.6".into()),
            quantization: Some("fp8".into()),
            context_length: Some(32_768),
        },
        pricing: Pricing {
            input_per_mtok: Some(0.15),
            output_per_mtok: Some(0.6),
            ..Default::default()
        },
        claimed: Some(ClaimedFigure {
            tokens_per_second: 2158.0,
            caliber: "per-stream decode".into(),
            conditions: Some("H100, batch 1".into()),
        }),
        notes: Some("快速模型 — fast".into()),
        tokenize: None,
        tls_ca_file: None,
        wire: Default::default(),
        ..candidate(name)
    }
}

fn evalset_text(name: &str, answers: &[(&str, &str)]) -> String {
    let mut text = format!(
        r#"{{"bakeoff_evalset":1,"name":"{name}","task":"classification","description":"sentiment","prompt":"Label: {{{{text}}}}","graders":[{{"kind":"exact"}}]}}"#
    );
    for (id, expected) in answers {
        text.push('\n');
        text.push_str(&format!(
            r#"{{"id":"{id}","vars":{{"text":"text {id}"}},"expected":"{expected}","tags":["t"]}}"#
        ));
    }
    text.push('\n');
    text
}

fn evalset(name: &str, answers: &[(&str, &str)]) -> EvalSetFile {
    EvalSetFile::parse("test.jsonl", &evalset_text(name, answers)).expect("test eval set parses")
}

fn record(run_id: i64, candidate_id: i64, case_id: &str, attempt: u32, sent_at_us: i64) -> RequestRecord {
    RequestRecord {
        run_id,
        candidate_id,
        attempt,
        concurrency: 4,
        sent_at_us,
        client_queue_us: 12,
        connect_us: Some(150).into(),
        connection_reused: Some(false),
        headers_us: Some(2_000).into(),
        first_chunk_us: Some(2_100).into(),
        first_content_us: Some(2_200).into(),
        last_token_us: Some(9_000).into(),
        end_us: Some(9_100).into(),
        chunks: vec![(2_200, 1), (5_000, 2), (9_000, 1)].into(),
        input_tokens: Some(21),
        output_tokens: Some(4),
        output_tokens_source: Some(TokenSource::Usage),
        canonical_tokens: Some(4),
        output_chars: 8,
        grades: vec![Grade {
            reason: "matches the expected text".into(),
            ..Grade::test_exact(true)
        }],
        ..RequestRecord::test_quality(case_id).with_output("positive")
    }
}

fn failed_record(run_id: i64, candidate_id: i64, case_id: &str, sent_at_us: i64) -> RequestRecord {
    RequestRecord {
        first_chunk_us: None.into(),
        first_content_us: None.into(),
        last_token_us: None.into(),
        chunks: Default::default(),
        http_status: Some(503),
        finish_reason: None,
        output_tokens: None,
        output_tokens_source: None,
        canonical_tokens: None,
        output_chars: 0,
        texts: RecordTexts {
            output: String::new(),
            error_detail: Some("503: overloaded".into()),
            ..Default::default()
        }
        .into(),
        error_class: Some(ErrorClass::HttpServerError),
        grades: Vec::new(),
        ..record(run_id, candidate_id, case_id, 0, sent_at_us)
    }
}

/// An eval set, `candidates` candidates and a queued run over them.
async fn seeded_run(store: &DynStore, candidates: usize) -> (i64, Vec<i64>) {
    let version_id = store
        .save_evalset_version(&evalset("sentiment", &[("a", "positive"), ("b", "negative")]))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..candidates {
        ids.push(
            store
                .create_candidate(&crate::support::checked::admin_new(&candidate(&format!("cand-{i}"))))
                .await
                .unwrap(),
        );
    }
    let run_id = store
        .create_run(&NewRun {
            name: "nightly".into(),
            evalset_version_id: version_id,
            candidate_ids: ids.clone(),
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    (run_id, ids)
}

// ---------------------------------------------------------------- migrations and connect

each_backend!(migrations_apply_from_empty_and_reapply_idempotently);
async fn migrations_apply_from_empty_and_reapply_idempotently(
    TestStore {
        backend, store, url, ..
    }: TestStore,
) {
    let expected = if backend == "sqlite" {
        Backend::Sqlite
    } else {
        Backend::Postgres
    };
    assert_eq!(store.backend(), expected, "{backend}");
    let id = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("kept")))
        .await
        .unwrap();

    // Opening the same database again re-runs the migrator: nothing changes, nothing is lost.
    let again = crate::support::db::open(&url).await;
    let kept = again
        .get_candidate(id)
        .await
        .unwrap()
        .expect("candidate survives re-migration");
    assert_eq!(kept.spec.name, "kept", "{backend}");
    assert!(again.list_runs(10, 0).await.unwrap().is_empty(), "{backend}");
}

each_backend!(migrations_are_recorded_once);
async fn migrations_are_recorded_once(t: TestStore) {
    let applied = t.fetch_i64("SELECT COUNT(*) FROM _sqlx_migrations").await.unwrap();
    assert!(applied >= 1, "{}: no migration recorded", t.backend);
    drop(crate::support::db::open(&t.url).await);
    let after = t.fetch_i64("SELECT COUNT(*) FROM _sqlx_migrations").await.unwrap();
    assert_eq!(after, applied, "{}: re-connecting applied migrations again", t.backend);
}

#[tokio::test]
async fn connect_accepts_in_memory_sqlite_and_refuses_unknown_schemes() {
    let store = store::connect("sqlite::memory:").await.unwrap();
    let id = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("in-memory")))
        .await
        .unwrap();
    assert_eq!(store.list_candidates().await.unwrap()[0].id, id);

    let err = store::connect("mysql://localhost/db")
        .await
        .err()
        .expect("mysql is refused");
    assert!(matches!(err, StoreError::UnsupportedUrl(_)), "{err:?}");
}

#[tokio::test]
async fn sqlite_creates_the_file_when_missing() {
    let (url, guard) = crate::support::db::sqlite_url();
    let path = url.trim_start_matches("sqlite://").to_string();
    assert!(!std::path::Path::new(&path).exists());
    let _store = crate::support::db::open(&url).await;
    assert!(std::path::Path::new(&path).exists(), "{path} was not created");
    drop(guard);
}

// ---------------------------------------------------------------- candidates

each_backend!(candidate_crud_round_trips_every_field_and_the_secret);
async fn candidate_crud_round_trips_every_field_and_the_secret(TestStore { backend, store, .. }: TestStore) {
    let spec = full_candidate("fast");
    let id = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let got = store.get_candidate(id).await.unwrap().expect("created candidate");
    assert_eq!(got.spec, spec, "{backend}");
    assert_eq!(
        got.spec.api_key.as_ref().map(Secret::expose),
        Some("sk-test-secret-123"),
        "{backend}"
    );
    assert!(got.created_at.0 > 0 && got.updated_at >= got.created_at, "{backend}");

    let mut changed = spec.clone();
    changed.name = "fast-v2".into();
    changed.api_key = None;
    changed.claimed = None;
    changed.temperature = None;
    store
        .update_candidate(&crate::support::checked::admin_change(store.as_ref(), id, &changed).await)
        .await
        .unwrap();
    let got = store.get_candidate(id).await.unwrap().unwrap();
    assert_eq!(got.spec, changed, "{backend}");

    let other = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("slow")))
        .await
        .unwrap();
    let names: Vec<String> = store
        .list_candidates()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.spec.name)
        .collect();
    assert_eq!(names, ["fast-v2", "slow"], "{backend}");
    assert!(store.get_candidate(other + 1000).await.unwrap().is_none(), "{backend}");
}

each_backend!(candidate_name_conflicts_and_missing_ids_are_reported);
async fn candidate_name_conflicts_and_missing_ids_are_reported(TestStore { backend, store, .. }: TestStore) {
    let first = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("x")))
        .await
        .unwrap();
    let second = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("y")))
        .await
        .unwrap();

    match store
        .create_candidate(&crate::support::checked::admin_new(&candidate("x")))
        .await
    {
        Err(StoreError::Conflict(msg)) => assert_eq!(msg, r#"a candidate named "x" already exists"#, "{backend}"),
        other => panic!("{backend}: expected a conflict, got {other:?}"),
    }
    match store
        .update_candidate(&crate::support::checked::admin_change(store.as_ref(), second, &candidate("x")).await)
        .await
    {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains(r#""x""#), "{backend}: {msg}"),
        other => panic!("{backend}: expected a conflict, got {other:?}"),
    }
    match store
        .update_candidate(
            &crate::support::checked::admin_change(store.as_ref(), first + second + 100, &candidate("z")).await,
        )
        .await
    {
        Err(StoreError::NotFound(what)) => assert!(what.contains("candidate"), "{backend}: {what}"),
        other => panic!("{backend}: expected not found, got {other:?}"),
    }
    // The failed writes changed nothing.
    assert_eq!(store.list_candidates().await.unwrap().len(), 2, "{backend}");
}

// ---------------------------------------------------------------- eval sets

each_backend!(evalset_versions_are_content_addressed_and_reparse_to_the_original);
async fn evalset_versions_are_content_addressed_and_reparse_to_the_original(
    TestStore { backend, store, .. }: TestStore,
) {
    let v1_file = evalset("sentiment", &[("a", "positive"), ("b", "negative")]);
    let v1 = store.save_evalset_version(&v1_file).await.unwrap();
    // The same content (even re-serialised with another key order) is the same version.
    let reordered = EvalSetFile::parse("again.jsonl", &v1_file.normalised()).unwrap();
    assert_eq!(store.save_evalset_version(&reordered).await.unwrap(), v1, "{backend}");

    let mut v2_file = evalset("sentiment", &[("a", "positive"), ("b", "negative"), ("c", "neutral")]);
    v2_file.header.description = Some("sentiment, three classes".into());
    let v2 = store.save_evalset_version(&v2_file).await.unwrap();
    assert_ne!(v2, v1, "{backend}");
    // Re-saving the old content does not make it the newest again.
    assert_eq!(store.save_evalset_version(&v1_file).await.unwrap(), v1, "{backend}");

    let sets = store.list_evalsets().await.unwrap();
    assert_eq!(sets.len(), 1, "{backend}");
    let set = &sets[0];
    assert_eq!(
        (
            set.name.as_str(),
            set.latest_version_id,
            set.case_count,
            set.version_count
        ),
        ("sentiment", v2, 3, 2),
        "{backend}"
    );
    assert_eq!(set.latest_hash, v2_file.content_hash(), "{backend}");
    assert_eq!(
        set.description.as_deref(),
        Some("sentiment, three classes"),
        "{backend}"
    );

    let stored = store.get_evalset_version(v1).await.unwrap().expect("version 1");
    assert_eq!(stored.file, v1_file, "{backend}");
    assert_eq!(stored.content_hash, v1_file.content_hash(), "{backend}");
    assert_eq!(stored.evalset_id, set.id, "{backend}");

    let versions = store.list_evalset_versions(set.id).await.unwrap();
    let ids: Vec<i64> = versions.iter().map(|v| v.id).collect();
    assert_eq!(ids, [v2, v1], "{backend}: newest first");
    assert_eq!(versions[0].file, v2_file, "{backend}");
    assert!(
        store.get_evalset_version(v2 + 100).await.unwrap().is_none(),
        "{backend}"
    );
}

each_backend!(a_page_of_cases_is_read_without_the_whole_version);
async fn a_page_of_cases_is_read_without_the_whole_version(TestStore { backend, store, .. }: TestStore) {
    let mut file = evalset("paged", &[("a", "x"), ("b", "y"), ("c", "z"), ("d", "w")]);
    // A case with its own graders, tags, weight and messages keeps them; the others' graders
    // are the header's defaults, left out as in the file.
    file.cases[2].graders = vec![serde_json::from_str(r#"{"kind":"contains"}"#).unwrap()];
    file.cases[2].tags = vec!["hard".into()];
    file.cases[2].weight = Some(2.5);
    let file = EvalSetFile::parse("paged.jsonl", &file.normalised()).unwrap();
    let version = store.save_evalset_version(&file).await.unwrap();
    let head = store
        .get_evalset_version_head(version)
        .await
        .unwrap()
        .expect("the head");
    assert_eq!(head.header, file.header, "{backend}");
    assert_eq!(head.case_count, 4, "{backend}");
    assert_eq!(head.content_hash, file.content_hash(), "{backend}");
    let page = store.list_eval_cases_page(version, 1, 2).await.unwrap();
    assert_eq!(
        page,
        file.cases[1..3].to_vec(),
        "{backend}: cases 2 and 3, as in the file"
    );
    assert_eq!(
        store.list_eval_cases_page(version, 3, 2).await.unwrap(),
        file.cases[3..].to_vec(),
        "{backend}: the last page holds what is left"
    );
    assert_eq!(
        store.list_eval_cases_page(version, 4, 2).await.unwrap(),
        vec![],
        "{backend}"
    );
    // Another version's cases (positions 0..n-1 too) never join the page.
    let other = evalset("other", &[("e", "v"), ("f", "u")]);
    let other = EvalSetFile::parse("other.jsonl", &other.normalised()).unwrap();
    store.save_evalset_version(&other).await.unwrap();
    assert_eq!(
        store.list_eval_cases_page(version, 0, 10).await.unwrap(),
        file.cases,
        "{backend}"
    );
    // Every case's key (what a run's summaries and its cases page read), in file order,
    // again without the other version's.
    let keys = store.list_eval_case_keys(version).await.unwrap();
    let expected: Vec<EvalCaseKey> = file
        .cases
        .iter()
        .map(|c| EvalCaseKey {
            id: c.id.clone(),
            tags: c.tags.clone(),
            weight: c.weight(),
        })
        .collect();
    assert_eq!(keys, expected, "{backend}");
    assert_eq!((keys[2].weight, keys[0].weight), (2.5, 1.0), "{backend}");
    let links = store.list_evalset_version_links(head.evalset_id).await.unwrap();
    assert_eq!(links.len(), 1, "{backend}");
    assert_eq!((links[0].id, links[0].case_count), (version, 4), "{backend}");
    assert!(store.get_evalset_version_head(version + 100).await.unwrap().is_none());
}

each_backend!(evalset_cases_are_stored_one_row_each);
async fn evalset_cases_are_stored_one_row_each(t: TestStore) {
    let file = evalset("cases", &[("a", "x"), ("b", "y"), ("c", "z")]);
    let version = t.store.save_evalset_version(&file).await.unwrap();
    let count = t
        .fetch_i64(&format!("SELECT COUNT(*) FROM eval_cases WHERE version_id = {version}"))
        .await
        .unwrap();
    assert_eq!(count, 3, "{}", t.backend);
    let position_of_c = t
        .fetch_i64(&format!(
            "SELECT position FROM eval_cases WHERE version_id = {version} AND case_id = 'c'"
        ))
        .await
        .unwrap();
    assert_eq!(position_of_c, 2, "{}", t.backend);
    // Versions are immutable.
    let refused = t
        .execute_raw(&format!(
            "UPDATE evalset_versions SET case_count = 0 WHERE id = {version}"
        ))
        .await;
    assert!(refused.is_err(), "{}: a version was updated", t.backend);
}

// ---------------------------------------------------------------- threshold profiles

each_backend!(threshold_profiles_keep_their_history);
async fn threshold_profiles_keep_their_history(TestStore { backend, store, .. }: TestStore) {
    let rules = batch_default_rules();
    let (id, v1) = store
        .save_threshold_profile("batch", "overnight jobs", &rules, "ana", "from the article")
        .await
        .unwrap();
    assert_eq!(v1, 1, "{backend}");

    let mut stricter = rules.clone();
    stricter[1].value = 0.97;
    stricter.push(ThresholdRule {
        metric: "ttft_p95_ms".into(),
        comparator: Comparator::AtMost,
        value: 800.0,
        unit: "ms".into(),
        rationale: "dashboards wait".into(),
    });
    let (same_id, v2) = store
        .save_threshold_profile("batch", "overnight jobs, stricter", &stricter, "bo", "QA found errors")
        .await
        .unwrap();
    assert_eq!((same_id, v2), (id, 2), "{backend}");
    let (other, other_v) = store
        .save_threshold_profile("online", "", &rules[..1], "ana", "first cut")
        .await
        .unwrap();
    assert_ne!(other, id, "{backend}");
    assert_eq!(other_v, 1, "{backend}");

    let profiles = store.list_threshold_profiles().await.unwrap();
    assert_eq!(profiles.len(), 2, "{backend}");
    let batch = profiles.iter().find(|p| p.id == id).unwrap();
    assert_eq!(batch.version, 2, "{backend}");
    assert_eq!(batch.rules, stricter, "{backend}");
    assert_eq!(batch.description, "overnight jobs, stricter", "{backend}");

    let history = store.threshold_profile_history(id).await.unwrap();
    let summary: Vec<(u32, &str, &str)> = history
        .iter()
        .map(|c| (c.version, c.changed_by.as_str(), c.rationale.as_str()))
        .collect();
    assert_eq!(
        summary,
        [(2, "bo", "QA found errors"), (1, "ana", "from the article")],
        "{backend}: newest first"
    );
    assert_eq!(history[1].rules, rules, "{backend}");
    assert!(history[0].at >= history[1].at, "{backend}");
}

// ---------------------------------------------------------------- runs

each_backend!(run_lifecycle_sets_timestamps_and_tracks_unfinished_runs);
async fn run_lifecycle_sets_timestamps_and_tracks_unfinished_runs(TestStore { backend, store, .. }: TestStore) {
    let (run_id, candidates) = seeded_run(&store, 2).await;
    let run = store.get_run(run_id).await.unwrap().expect("created run");
    assert_eq!(run.status, RunStatus::Queued, "{backend}");
    assert_eq!(run.candidate_ids, candidates, "{backend}");
    assert_eq!(run.config, RunConfig::default(), "{backend}");
    assert_eq!((run.started_at, run.finished_at), (None, None), "{backend}");
    assert_eq!(store.unfinished_runs().await.unwrap(), [run_id], "{backend}");

    store.set_run_status(run_id, RunStatus::Running, None).await.unwrap();
    let running = store.get_run(run_id).await.unwrap().unwrap();
    let started = running.started_at.expect("started_at set on running");
    assert!(started >= run.created_at, "{backend}");
    assert_eq!(running.finished_at, None, "{backend}");

    // Running again (a resume) keeps the first start.
    store.set_run_status(run_id, RunStatus::Running, None).await.unwrap();
    assert_eq!(
        store.get_run(run_id).await.unwrap().unwrap().started_at,
        Some(started),
        "{backend}"
    );
    assert_eq!(store.unfinished_runs().await.unwrap(), [run_id], "{backend}");

    store
        .set_run_status(run_id, RunStatus::Failed, Some("candidate unreachable"))
        .await
        .unwrap();
    let failed = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "{backend}");
    assert_eq!(failed.error.as_deref(), Some("candidate unreachable"), "{backend}");
    assert!(
        failed.finished_at.expect("finished_at set on a terminal state") >= started,
        "{backend}"
    );
    assert!(store.unfinished_runs().await.unwrap().is_empty(), "{backend}");

    match store.set_run_status(run_id + 100, RunStatus::Running, None).await {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("{backend}: expected not found, got {other:?}"),
    }
    assert!(store.get_run(run_id + 100).await.unwrap().is_none(), "{backend}");

    store
        .append_run_event(run_id, "info", "phase quality started")
        .await
        .unwrap();
    store
        .append_run_event(run_id, "warn", "schedule lag 12 ms")
        .await
        .unwrap();
    let events = store.list_run_events(run_id).await.unwrap();
    let lines: Vec<(&str, &str)> = events.iter().map(|e| (e.level.as_str(), e.message.as_str())).collect();
    assert_eq!(
        lines,
        [("info", "phase quality started"), ("warn", "schedule lag 12 ms")],
        "{backend}"
    );
    assert!(
        matches!(
            store.append_run_event(run_id + 100, "info", "x").await,
            Err(StoreError::NotFound(_))
        ),
        "{backend}"
    );
}

each_backend!(create_run_refuses_missing_references);
async fn create_run_refuses_missing_references(TestStore { backend, store, .. }: TestStore) {
    let (_, candidates) = seeded_run(&store, 1).await;
    let missing_version = store
        .create_run(&NewRun {
            name: "bad".into(),
            evalset_version_id: 9_999,
            candidate_ids: candidates.clone(),
            config: RunConfig::default(),
        })
        .await;
    assert!(
        matches!(missing_version, Err(StoreError::NotFound(_))),
        "{backend}: {missing_version:?}"
    );
    assert_eq!(store.count_runs().await.unwrap(), 1, "{backend}: nothing half-created");
}

each_backend!(list_runs_pages_newest_first_with_names_and_counts);
async fn list_runs_pages_newest_first_with_names_and_counts(TestStore { backend, store, .. }: TestStore) {
    let (first, candidates) = seeded_run(&store, 2).await;
    let version = store.get_run(first).await.unwrap().unwrap().evalset_version_id;
    let mut ids = vec![first];
    for i in 1..5 {
        let id = store
            .create_run(&NewRun {
                name: format!("run {i}"),
                evalset_version_id: version,
                // Reversed order must be kept.
                candidate_ids: candidates.iter().rev().copied().collect(),
                config: RunConfig::default(),
            })
            .await
            .unwrap();
        ids.push(id);
    }
    store
        .append_request_records(&[
            record(first, candidates[0], "a", 0, 1),
            record(first, candidates[1], "a", 0, 2),
        ])
        .await
        .unwrap();
    assert_eq!(store.count_runs().await.unwrap(), 5, "{backend}");

    let page1 = store.list_runs(2, 0).await.unwrap();
    let page3 = store.list_runs(2, 4).await.unwrap();
    let all = store.list_runs(100, 0).await.unwrap();
    let order: Vec<i64> = all.iter().map(|r| r.run.id).collect();
    let newest_first: Vec<i64> = ids.iter().rev().copied().collect();
    assert_eq!(order, newest_first, "{backend}");
    assert_eq!(
        page1.iter().map(|r| r.run.id).collect::<Vec<_>>(),
        newest_first[..2],
        "{backend}"
    );
    assert_eq!(page3.iter().map(|r| r.run.id).collect::<Vec<_>>(), [first], "{backend}");
    assert!(store.list_runs(2, 10).await.unwrap().is_empty(), "{backend}");

    let oldest = &page3[0];
    assert_eq!(oldest.evalset_name, "sentiment", "{backend}");
    assert_eq!(oldest.candidate_names, ["cand-0", "cand-1"], "{backend}");
    assert_eq!(oldest.run.candidate_ids, candidates, "{backend}");
    assert_eq!(oldest.record_count, 2, "{backend}");
    assert_eq!(page1[0].candidate_names, ["cand-1", "cand-0"], "{backend}");
    assert_eq!(page1[0].record_count, 0, "{backend}");
}

// ---------------------------------------------------------------- raw records

each_backend!(a_repeated_batch_is_stored_exactly_once_with_its_grades);
async fn a_repeated_batch_is_stored_exactly_once_with_its_grades(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 2).await;
    let mut retry = failed_record(run_id, c[0], "b", 3_000);
    retry.attempt = 0;
    let mut second_try = record(run_id, c[0], "b", 1, 4_000);
    second_try.grades.push(Grade {
        grader: "json".into(),
        score: 0.5,
        passed: false,
        reason: "missing field \"label\"".into(),
        detail: Some(Box::new(serde_json::json!({"expected": "billing", "predicted": null}))),
        weight: 1.0,
        required: true,
    });
    let mut reasoning = record(run_id, c[1], "a", 0, 1_500);
    reasoning.first_reasoning_us = Some(1_900).into();
    reasoning.texts.get_mut().reasoning = Some("思考…".into());
    reasoning.reasoning_tokens = Some(3);
    reasoning.connection_reused = None;
    let batch = vec![record(run_id, c[0], "a", 0, 2_000), retry, second_try, reasoning];

    assert_eq!(store.append_request_records(&batch).await.unwrap(), 4, "{backend}");
    assert_eq!(
        store.append_request_records(&batch).await.unwrap(),
        0,
        "{backend}: retried batch"
    );
    // A batch mixing old and new keys stores only the new ones.
    let mut mixed = batch[..2].to_vec();
    mixed.push(record(run_id, c[1], "b", 0, 5_000));
    assert_eq!(store.append_request_records(&mixed).await.unwrap(), 1, "{backend}");
    assert_eq!(store.append_request_records(&[]).await.unwrap(), 0, "{backend}");

    let stored = store.list_request_records(run_id).await.unwrap();
    let order: Vec<i64> = stored.iter().map(|r| r.sent_at_us).collect();
    assert_eq!(order, [1_500, 2_000, 3_000, 4_000, 5_000], "{backend}: send order");
    // Every field, grades included, comes back exactly as written.
    assert_eq!(stored[0], batch[3], "{backend}");
    assert_eq!(stored[1], batch[0], "{backend}");
    assert_eq!(stored[2], batch[1], "{backend}");
    assert_eq!(stored[3], batch[2], "{backend}");
    assert_eq!(stored[3].grades.len(), 2, "{backend}: grades attached once, in order");
    assert!(stored[2].grades.is_empty(), "{backend}");
}

/// `written` (one candidate's records of one run) stored, then read back as the end step reads
/// a candidate's.
async fn written_then_read_for_summaries(store: &DynStore, written: &[RequestRecord]) -> Vec<RequestRecord> {
    store.append_request_records(written).await.unwrap();
    let mut feed = |_: &mut RequestRecord| {};
    store
        .candidate_records_for_summaries(written[0].run_id, written[0].candidate_id, &mut feed)
        .await
        .unwrap()
}

each_backend!(records_read_together_share_their_grader_names_and_finish_reasons);
async fn records_read_together_share_their_grader_names_and_finish_reasons(
    TestStore { backend, store, .. }: TestStore,
) {
    let (run_id, c) = seeded_run(&store, 1).await;
    let mut written: Vec<RequestRecord> = (0..3)
        .map(|i| record(run_id, c[0], &format!("c{i}"), 0, 1_000 + i))
        .collect();
    written[2].finish_reason = Some("length".into());
    let read = written_then_read_for_summaries(&store, &written).await;
    assert_eq!(read.len(), 3, "{backend}");
    let grader = |r: &RequestRecord| r.grades[0].grader.clone();
    let finish = |r: &RequestRecord| r.finish_reason.clone().unwrap();
    // One allocation a distinct text, not one a record: the end step holds a million.
    assert!(Arc::ptr_eq(&grader(&read[0]), &grader(&read[1])), "{backend}");
    assert!(Arc::ptr_eq(&grader(&read[0]), &grader(&read[2])), "{backend}");
    assert!(Arc::ptr_eq(&finish(&read[0]), &finish(&read[1])), "{backend}");
    assert_eq!(
        (&*finish(&read[0]), &*finish(&read[2])),
        ("stop", "length"),
        "{backend}"
    );
    // Each record's grades hold their exact room: no record holds room for grades it has not.
    assert!(read.iter().all(|r| r.grades.capacity() == r.grades.len()), "{backend}");
    // Shared or not, what was written comes back.
    let whole = store.list_request_records(run_id).await.unwrap();
    assert_eq!(whole, written, "{backend}");
}

each_backend!(a_case_read_in_several_pages_holds_one_copy_of_its_id);
async fn a_case_read_in_several_pages_holds_one_copy_of_its_id(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 1).await;
    // More records than one page of the read (5,000): each case once in repetition 0, then the
    // first case again in repetition 1, sent last.
    let cases = 5_000;
    let mut written: Vec<RequestRecord> = (0..cases)
        .map(|i| record(run_id, c[0], &format!("case-{i}"), 0, 1_000 + i as i64))
        .collect();
    let mut again = record(run_id, c[0], "case-0", 0, 1_000_000);
    again.repetition = 1;
    written.push(again);
    let read = written_then_read_for_summaries(&store, &written).await;
    assert_eq!(read.len(), cases + 1, "{backend}");
    let (first, last) = (&read[0], &read[cases]);
    assert_eq!((&*first.case_id, &*last.case_id), ("case-0", "case-0"), "{backend}");
    assert!(Arc::ptr_eq(&first.case_id, &last.case_id), "{backend}");
    // So do the facts of the run's records (what its case index and a resume read).
    let facts = store.list_record_facts(run_id).await.unwrap();
    assert_eq!(facts.len(), cases + 1, "{backend}");
    let (first, last) = (&facts[0], &facts[cases]);
    assert_eq!((&*first.case_id, &*last.case_id), ("case-0", "case-0"), "{backend}");
    assert!(Arc::ptr_eq(&first.case_id, &last.case_id), "{backend}");
}

each_backend!(a_key_repeated_inside_one_batch_is_stored_once);
async fn a_key_repeated_inside_one_batch_is_stored_once(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 1).await;
    let first = record(run_id, c[0], "a", 0, 1_000);
    let mut duplicate = first.clone();
    duplicate.texts.get_mut().output = "other".into();
    assert_eq!(
        store.append_request_records(&[first.clone(), duplicate]).await.unwrap(),
        1,
        "{backend}"
    );
    assert_eq!(store.list_request_records(run_id).await.unwrap(), [first], "{backend}");
}

each_backend!(records_for_unknown_runs_or_candidates_are_refused_whole);
async fn records_for_unknown_runs_or_candidates_are_refused_whole(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 1).await;
    let stranger = store
        .create_candidate(&crate::support::checked::admin_new(&candidate("not in the run")))
        .await
        .unwrap();
    let batch = [record(run_id, c[0], "a", 0, 1), record(run_id, stranger, "a", 0, 2)];
    let err = store.append_request_records(&batch).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{backend}: {err:?}");
    assert!(
        store.list_request_records(run_id).await.unwrap().is_empty(),
        "{backend}: the batch is one transaction"
    );
}

each_backend!(request_records_and_grades_refuse_update_but_allow_delete);
async fn request_records_and_grades_refuse_update_but_allow_delete(t: TestStore) {
    let (run_id, c) = seeded_run(&t.store, 1).await;
    t.store
        .append_request_records(&[record(run_id, c[0], "a", 0, 1)])
        .await
        .unwrap();

    let update = t.execute_raw("UPDATE request_records SET output = 'tampered'").await;
    let err = update
        .expect_err("UPDATE of request_records must be refused")
        .to_string();
    assert!(err.contains("append-only"), "{}: {err}", t.backend);
    // Every column is guarded but the two kept from the grades (migration 0025): a column
    // added later and left out of the guard fails here.
    let columns_sql = match t.backend {
        "sqlite" => "SELECT name FROM pragma_table_info('request_records')",
        _ => {
            "SELECT column_name::TEXT FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = 'request_records'"
        }
    };
    let columns = t.fetch_texts(columns_sql).await.unwrap();
    assert!(columns.len() > 30, "{}: {columns:?}", t.backend);
    for column in &columns {
        let update = t
            .execute_raw(&format!("UPDATE request_records SET {column} = {column}"))
            .await;
        if ["case_passed", "case_score"].contains(&column.as_str()) {
            assert!(
                update.is_ok(),
                "{}: {column} is written when grades are appended",
                t.backend
            );
        } else {
            let err = update.expect_err(column).to_string();
            assert!(err.contains("append-only"), "{} {column}: {err}", t.backend);
        }
    }
    let update = t.execute_raw("UPDATE grades SET passed = FALSE").await;
    assert!(update.is_err(), "{}: UPDATE of grades must be refused", t.backend);
    assert_eq!(
        t.store.list_request_records(run_id).await.unwrap()[0].output(),
        "positive",
        "{}",
        t.backend
    );

    // Deleting the run removes its records, grades and events with it.
    t.store.append_run_event(run_id, "info", "x").await.unwrap();
    assert_eq!(
        t.execute_raw(&format!("DELETE FROM runs WHERE id = {run_id}"))
            .await
            .unwrap(),
        1,
        "{}",
        t.backend
    );
    for table in ["request_records", "grades", "run_events", "run_candidates"] {
        let left = t.fetch_i64(&format!("SELECT COUNT(*) FROM {table}")).await.unwrap();
        assert_eq!(left, 0, "{}: {table} not cascaded", t.backend);
    }
}

each_backend!(run_progress_counts_measured_warmup_and_failed_attempts);
async fn run_progress_counts_measured_warmup_and_failed_attempts(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 3).await;
    let mut warm = record(run_id, c[0], "a", 0, 1);
    warm.is_warmup = true;
    warm.phase = Phase::Warmup;
    let batch = vec![
        warm,
        record(run_id, c[0], "a", 0, 2),
        failed_record(run_id, c[0], "b", 3),
        record(run_id, c[0], "b", 1, 4),
        record(run_id, c[1], "a", 0, 5),
    ];
    store.append_request_records(&batch).await.unwrap();

    let progress = store.run_progress(run_id).await.unwrap();
    let counts: Vec<(i64, i64, i64, i64)> = progress
        .iter()
        .map(|p| {
            (
                p.candidate_id,
                p.measured_attempts,
                p.warmup_attempts,
                p.failed_attempts,
            )
        })
        .collect();
    assert_eq!(
        counts,
        [(c[0], 3, 1, 1), (c[1], 1, 0, 0), (c[2], 0, 0, 0)],
        "{backend}: every candidate of the run, in run order"
    );
    assert!(store.run_progress(run_id + 100).await.unwrap().is_empty(), "{backend}");
}

each_backend!(a_batch_of_hundreds_is_stored_in_one_call);
async fn a_batch_of_hundreds_is_stored_in_one_call(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 2).await;
    let batch: Vec<RequestRecord> = (0..600)
        .map(|i| record(run_id, c[i % 2], &format!("case-{}", i / 2), 0, i as i64))
        .collect();
    let started = std::time::Instant::now();
    assert_eq!(store.append_request_records(&batch).await.unwrap(), 600, "{backend}");
    let elapsed = started.elapsed();
    eprintln!("{backend}: appended 600 records with grades in {elapsed:?}");
    assert_eq!(store.append_request_records(&batch).await.unwrap(), 0, "{backend}");
    let stored = store.list_request_records(run_id).await.unwrap();
    assert_eq!(stored.len(), 600, "{backend}");
    assert_eq!(stored, batch, "{backend}");
    // Generous bound: this is a smoke check against row-at-a-time round trips gone wrong,
    // not a benchmark.
    assert!(elapsed.as_secs() < 30, "{backend}: 600 records took {elapsed:?}");
}

// ---------------------------------------------------------------- concurrency and corruption

each_backend!(concurrent_writers_neither_fail_nor_duplicate);
async fn concurrent_writers_neither_fail_nor_duplicate(TestStore { backend, store, .. }: TestStore) {
    let (run_id, c) = seeded_run(&store, 2).await;
    // Eight writers, each sending an overlapping batch (the same keys twice over).
    let mut writers = Vec::new();
    for w in 0..8_i64 {
        let store = store.clone();
        let c = c.clone();
        writers.push(tokio::spawn(async move {
            let batch: Vec<RequestRecord> = (0..50)
                .map(|i| record(run_id, c[(i % 2) as usize], &format!("case-{}", (w % 4) * 50 + i), 0, i))
                .collect();
            let stored = store.append_request_records(&batch).await?;
            let profile = store
                .save_threshold_profile("shared", "", &batch_default_rules(), "writer", "race")
                .await?;
            Ok::<_, StoreError>((stored, profile.1))
        }));
    }
    let mut stored_total = 0;
    let mut versions = Vec::new();
    for writer in writers {
        let (stored, version) = writer.await.unwrap().unwrap_or_else(|e| panic!("{backend}: {e}"));
        stored_total += stored;
        versions.push(version);
    }
    assert_eq!(stored_total, 200, "{backend}: 4 distinct batches of 50");
    assert_eq!(
        store.list_request_records(run_id).await.unwrap().len(),
        200,
        "{backend}"
    );
    versions.sort_unstable();
    assert_eq!(
        versions,
        (1..=8).collect::<Vec<u32>>(),
        "{backend}: one version per save"
    );
}

each_backend!(unreadable_stored_data_is_reported_as_corrupt);
async fn unreadable_stored_data_is_reported_as_corrupt(t: TestStore) {
    let (run_id, _) = seeded_run(&t.store, 1).await;
    t.execute_raw(&format!("UPDATE runs SET config = 'not json' WHERE id = {run_id}"))
        .await
        .unwrap();
    match t.store.get_run(run_id).await {
        Err(StoreError::Corrupt(msg)) => assert!(msg.contains("runs.config of run"), "{}: {msg}", t.backend),
        other => panic!("{}: expected corrupt data, got {other:?}", t.backend),
    }
    t.execute_raw("UPDATE candidates SET provider = 'grpc'").await.unwrap();
    assert!(
        matches!(t.store.list_candidates().await, Err(StoreError::Corrupt(_))),
        "{}",
        t.backend
    );
}

#[tokio::test]
async fn sqlite_files_use_wal_and_enforce_foreign_keys() {
    use bakeoff::store::SqlBackend as _;
    let (url, _guard) = crate::support::db::sqlite_url();
    let sealer = bakeoff::domain::sealed::KeySealer::new(&[7; 32]);
    let store = bakeoff::store::sqlite::SqliteStore::connect(&url, sealer)
        .await
        .unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(fk, 1);
}
