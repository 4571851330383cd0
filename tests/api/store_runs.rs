//! Store: archive filters, record facts, per-case records, differing outputs, restored runs and
//! cached summaries — on every available backend.
use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::{Grade, case_passed, case_score};
use bakeoff::domain::run::{ErrorClass, NewRun, RunConfig, RunEvent, RunStatus};
use bakeoff::store::{DynStore, OUTLINE_SELECT, RestoredRun, RunFilter, StoreError};

use crate::support::app::{TINY_EVALSET, record};
use crate::support::db::{TestStore, each_backend};

async fn candidate(store: &DynStore, name: &str) -> i64 {
    let spec = CandidateDraft {
        name: name.into(),
        provider: "openai-chat".into(),
        base_url: "http://127.0.0.1:1/v1".into(),
        model: format!("{name}-model"),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap()
}

async fn run(store: &DynStore, version: i64, candidates: &[i64], name: &str) -> i64 {
    store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
            config: RunConfig::default(),
        })
        .await
        .unwrap()
}

each_backend!(store_filters_runs_by_evalset_candidate_status_and_date);
async fn store_filters_runs_by_evalset_candidate_status_and_date(t: TestStore) {
    let s = &t.store;
    let tiny = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let other_text = TINY_EVALSET.replace("\"name\":\"tiny\"", "\"name\":\"other\"");
    let other = s
        .save_evalset_version(&EvalSetFile::parse("other.jsonl", &other_text).unwrap())
        .await
        .unwrap();
    let a = candidate(s, "a").await;
    let b = candidate(s, "b").await;
    let r1 = run(s, tiny, &[a], "r1").await;
    let r2 = run(s, tiny, &[a, b], "r2").await;
    let r3 = run(s, other, &[b], "r3").await;
    s.set_run_status(r1, RunStatus::Finished, None).await.unwrap();
    s.set_run_status(r2, RunStatus::Cancelled, None).await.unwrap();

    let ids = |items: Vec<bakeoff::store::RunListItem>| items.iter().map(|i| i.run.id).collect::<Vec<_>>();
    let all = RunFilter::default();
    assert_eq!(
        ids(s.list_runs_filtered(&all, 10, 0).await.unwrap()),
        [r3, r2, r1],
        "{}",
        t.backend
    );
    assert_eq!(s.count_runs_filtered(&all).await.unwrap(), 3);

    let evalsets = s.list_evalsets().await.unwrap();
    let tiny_set = evalsets.iter().find(|e| e.name == "tiny").unwrap().id;
    let f = RunFilter {
        evalset_id: Some(tiny_set),
        ..Default::default()
    };
    assert_eq!(
        ids(s.list_runs_filtered(&f, 10, 0).await.unwrap()),
        [r2, r1],
        "{}",
        t.backend
    );
    let f = RunFilter {
        candidate_id: Some(b),
        ..Default::default()
    };
    let items = s.list_runs_filtered(&f, 10, 0).await.unwrap();
    assert_eq!(ids(items.clone()), [r3, r2], "{}", t.backend);
    assert_eq!(
        items[1].candidate_names,
        ["a", "b"],
        "every candidate of a matching run is listed"
    );
    let f = RunFilter {
        terminal_only: true,
        ..Default::default()
    };
    assert_eq!(s.count_runs_filtered(&f).await.unwrap(), 2, "{}", t.backend);
    let f = RunFilter {
        status: Some(RunStatus::Finished),
        candidate_id: Some(a),
        ..Default::default()
    };
    assert_eq!(
        ids(s.list_runs_filtered(&f, 10, 0).await.unwrap()),
        [r1],
        "{}",
        t.backend
    );
    let future = Timestamp(Timestamp::now().0 + 60_000);
    let f = RunFilter {
        created_from: Some(future),
        ..Default::default()
    };
    assert_eq!(s.count_runs_filtered(&f).await.unwrap(), 0, "{}", t.backend);
    let f = RunFilter {
        created_before: Some(future),
        ..Default::default()
    };
    assert_eq!(s.count_runs_filtered(&f).await.unwrap(), 3, "{}", t.backend);
    // Pagination.
    assert_eq!(
        ids(s.list_runs_filtered(&all, 2, 2).await.unwrap()),
        [r1],
        "{}",
        t.backend
    );
}

each_backend!(store_reads_record_facts_case_records_and_differing_outputs);
async fn store_reads_record_facts_case_records_and_differing_outputs(t: TestStore) {
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate(s, "a").await;
    let b = candidate(s, "b").await;
    let r = run(s, version, &[a, b], "r").await;
    let mut failed = record(r, b, "c2", "", false);
    failed.error_class = Some(ErrorClass::StreamCut);
    failed.grades.clear();
    let mut warm = record(r, a, "c3", "warm", true);
    warm.is_warmup = true;
    warm.grades.clear();
    s.append_request_records(&[
        record(r, a, "c1", "positive", true),
        record(r, b, "c1", "Positive!", false),
        record(r, a, "c2", "negative", true),
        failed,
        warm,
    ])
    .await
    .unwrap();

    let facts = s.list_record_facts(r).await.unwrap();
    assert_eq!(facts.len(), 5, "{}", t.backend);
    let fact = |cand: i64, case: &str, warm: bool| {
        facts
            .iter()
            .find(|f| f.candidate_id == cand && &*f.case_id == case && f.is_warmup == warm)
            .unwrap()
            .clone()
    };
    assert_eq!(fact(a, "c1", false).passed, Some(true), "{}", t.backend);
    assert_eq!(fact(b, "c1", false).passed, Some(false), "{}", t.backend);
    assert_eq!(fact(b, "c2", false).passed, None);
    assert_eq!(fact(b, "c2", false).error_class, Some(ErrorClass::StreamCut));
    assert!(fact(a, "c3", true).is_warmup);

    let records = s.list_case_records(r, &["c1".to_string()]).await.unwrap();
    assert_eq!(records.len(), 2, "{}", t.backend);
    assert!(records.iter().all(|r| &*r.case_id == "c1" && r.grades.len() == 1));
    assert!(s.list_case_records(r, &[]).await.unwrap().is_empty());

    // Outlines: each record's fact, with its pass and score as the domain rules give them
    // from the whole record (weighted and optional grades included), in send order; the
    // records read whole by their ids are the same records.
    let mut weighted = record(r, a, "c4", "maybe", true);
    weighted.grades[0].weight = 3.0;
    weighted.grades.push(Grade {
        grader: "judge".into(),
        score: 0.25,
        passed: false,
        reason: "a reason that outlines never read".into(),
        detail: None,
        weight: 1.0,
        required: false,
    });
    s.append_request_records(&[weighted]).await.unwrap();
    let cases = ["c2".to_string(), "c4".to_string(), "c3".to_string()];
    let outlines = s.list_case_outlines(r, &cases).await.unwrap();
    let whole = s.list_case_records(r, &cases).await.unwrap();
    assert_eq!(outlines.len(), 4, "{}", t.backend);
    for (o, w) in outlines.iter().zip(&whole) {
        assert_eq!(
            (o.fact.candidate_id, o.fact.case_id.as_ref()),
            (w.candidate_id, w.case_id.as_ref())
        );
        assert_eq!(o.fact.passed, case_passed(&w.grades), "{} {}", t.backend, w.case_id);
        assert_eq!(o.score, case_score(&w.grades), "{} {}", t.backend, w.case_id);
        assert_eq!(o.fact.error_class, w.error_class);
        assert_eq!(o.fact.is_warmup, w.is_warmup);
    }
    let c4 = outlines.iter().find(|o| &*o.fact.case_id == "c4").unwrap();
    assert_eq!((c4.fact.passed, c4.score), (Some(true), Some(0.8125)), "{}", t.backend);
    assert_eq!(
        outlines
            .iter()
            .find(|o| &*o.fact.case_id == "c2" && o.fact.candidate_id == b)
            .unwrap()
            .score,
        None
    );
    assert!(s.list_case_outlines(r, &[]).await.unwrap().is_empty());
    // A grade appended later (a judge's) moves the record's outline with it.
    let mut judged = whole
        .iter()
        .find(|w| &*w.case_id == "c2" && w.candidate_id == a)
        .unwrap()
        .clone();
    let judge = Grade {
        grader: "judge".into(),
        score: 0.0,
        passed: false,
        reason: "judged later".into(),
        detail: None,
        weight: 1.0,
        required: true,
    };
    s.append_grades(&judged, 7, std::slice::from_ref(&judge)).await.unwrap();
    judged.grades.push(judge);
    let outlines = s.list_case_outlines(r, &cases).await.unwrap();
    let whole = s.list_case_records(r, &cases).await.unwrap();
    let c2 = outlines
        .iter()
        .find(|o| &*o.fact.case_id == "c2" && o.fact.candidate_id == a)
        .unwrap();
    assert_eq!(
        (c2.fact.passed, c2.score),
        (case_passed(&judged.grades), case_score(&judged.grades)),
        "{}",
        t.backend
    );
    assert_eq!((c2.fact.passed, c2.score), (Some(false), Some(0.5)), "{}", t.backend);

    // Records stored before migration 0025 get their outcome from its backfill: the same rules
    // in SQL give the same outlines.
    let migration = std::fs::read_to_string(format!("migrations/{}/0025_outline_indexes.sql", t.backend)).unwrap();
    let backfill = migration
        .split(';')
        .map(|statement| {
            statement
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .find(|statement| statement.trim_start().starts_with("UPDATE request_records"))
        .expect("migration 0025 backfills case_passed and case_score");
    t.execute_raw("UPDATE request_records SET case_passed = NULL, case_score = NULL")
        .await
        .unwrap();
    t.execute_raw(&backfill).await.unwrap();
    assert_eq!(
        s.list_case_outlines(r, &cases).await.unwrap(),
        outlines,
        "{}",
        t.backend
    );

    // Outlines are read from one index alone (a page of cases at 500 repetitions reads 10,000
    // of them; each record row visited would be a page of the table). On PostgreSQL that needs
    // the pages marked all-visible, which the end-of-run refresh does.
    s.refresh_record_statistics().await.unwrap();
    let plan = t
        .plan_of(&format!(
            "{OUTLINE_SELECT} WHERE run_id = {r} AND case_id IN ('c2', 'c4')"
        ))
        .await
        .unwrap();
    let covering = match t.backend {
        "sqlite" => "USING COVERING INDEX request_records_outline_by_case",
        _ => "Index Only Scan using request_records_outline_by_case",
    };
    assert!(plan.contains(covering), "{}: {plan}", t.backend);
    let ids: Vec<i64> = outlines.iter().rev().map(|o| o.id).collect();
    let read: Vec<_> = s
        .list_records_by_id(r, &ids)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, rec)| rec)
        .collect();
    assert_eq!(read, whole, "{}: read by id, in send order", t.backend);
    let other = run(s, version, &[a], "other").await;
    assert!(
        s.list_records_by_id(other, &ids).await.unwrap().is_empty(),
        "{}",
        t.backend
    );

    // c1: "positive" vs "Positive!"; c2: b failed, so nothing to compare. Only the cases asked
    // are answered.
    let cases_of_run: Vec<String> = ["c4", "c3", "c2", "c1"].map(String::from).to_vec();
    assert_eq!(
        s.cases_with_differing_outputs(r, &cases_of_run).await.unwrap(),
        ["c1"],
        "{}",
        t.backend
    );
    assert!(
        s.cases_with_differing_outputs(r, &cases_of_run[..3])
            .await
            .unwrap()
            .is_empty(),
        "{}",
        t.backend
    );
    assert!(s.cases_with_differing_outputs(r, &[]).await.unwrap().is_empty());
}

each_backend!(store_restores_runs_with_their_times_and_caches_summaries);
async fn store_restores_runs_with_their_times_and_caches_summaries(t: TestStore) {
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate(s, "a").await;
    let restored = RestoredRun {
        run: NewRun {
            name: "imported".into(),
            evalset_version_id: version,
            candidate_ids: vec![a],
            config: RunConfig::default(),
        },
        status: RunStatus::Finished,
        error: None,
        created_at: Timestamp(1_000),
        started_at: Some(Timestamp(2_000)),
        finished_at: Some(Timestamp(3_000)),
        events: vec![RunEvent {
            at: Timestamp(2_500),
            level: "info".into(),
            message: "started".into(),
        }],
    };
    let id = s.restore_run(&restored).await.unwrap();
    let half = s.get_run(id).await.unwrap().unwrap();
    assert_eq!(
        half.status,
        RunStatus::Failed,
        "{}: incomplete until completed",
        t.backend
    );
    assert!(half.error.unwrap().contains("import did not complete"));
    assert!(
        !s.unfinished_runs().await.unwrap().contains(&id),
        "an import is never resumed"
    );
    s.append_request_records(&[record(id, a, "c1", "positive", true)])
        .await
        .unwrap();
    s.complete_restore(id, &restored).await.unwrap();
    let run = s.get_run(id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished);
    assert_eq!(run.error, None);
    assert_eq!(
        (run.created_at, run.started_at, run.finished_at),
        (Timestamp(1_000), Some(Timestamp(2_000)), Some(Timestamp(3_000))),
        "{}",
        t.backend
    );
    let events = s.list_run_events(id).await.unwrap();
    assert_eq!(events, restored.events, "{}", t.backend);

    assert_eq!(s.get_run_summary(id, "results/1").await.unwrap(), None);
    s.save_run_summary(id, "results/1", "{\"a\":1}").await.unwrap();
    s.save_run_summary(id, "results/1", "{\"a\":2}").await.unwrap();
    assert_eq!(
        s.get_run_summary(id, "results/1").await.unwrap().as_deref(),
        Some("{\"a\":2}"),
        "{}",
        t.backend
    );
    assert!(matches!(
        s.save_run_summary(9_999, "results/1", "{}").await,
        Err(StoreError::NotFound(_))
    ));

    // Deleting a run takes its records, events and summaries with it.
    s.delete_run(id).await.unwrap();
    assert!(s.get_run(id).await.unwrap().is_none());
    assert!(s.list_request_records(id).await.unwrap().is_empty());
    assert_eq!(t.fetch_i64("SELECT COUNT(*) FROM run_summaries").await.unwrap(), 0);
    assert!(matches!(s.delete_run(id).await, Err(StoreError::NotFound(_))));
    // A missing eval set version is NotFound, not a raw database error.
    let bad = RestoredRun {
        run: NewRun {
            evalset_version_id: 9_999,
            ..restored.run.clone()
        },
        ..restored.clone()
    };
    assert!(
        matches!(s.restore_run(&bad).await, Err(StoreError::NotFound(_))),
        "{}",
        t.backend
    );
}

each_backend!(a_paused_run_is_stored_with_its_message_kept_and_resumed_on_restart);
async fn a_paused_run_is_stored_with_its_message_kept_and_resumed_on_restart(t: TestStore) {
    let s = &t.store;
    let tiny = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate(s, "a").await;
    let r = run(s, tiny, &[a], "paused").await;
    s.set_run_status(r, RunStatus::Running, None).await.unwrap();
    let message = "paused: the database did not answer for 31 s; 5 records measured, 5 stored, 0 pending";
    s.set_run_status(r, RunStatus::Paused, Some(message)).await.unwrap();
    let stored = s.get_run(r).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Paused, "{}", t.backend);
    assert_eq!(stored.error.as_deref(), Some(message), "{}", t.backend);
    assert!(
        stored.finished_at.is_none(),
        "{}: a paused run has not ended",
        t.backend
    );
    assert_eq!(
        s.unfinished_runs().await.unwrap(),
        vec![r],
        "{}: resumed on the next start",
        t.backend
    );
    // The runs table was rebuilt for the new status (SQLite): what refers to it still does.
    s.append_run_event(r, "info", "still here").await.unwrap();
    assert_eq!(s.list_run_events(r).await.unwrap().len(), 1, "{}", t.backend);
}

each_backend!(records_read_in_pages_of_send_order_come_once_each_across_equal_send_times);
/// The keyset pages of a run's records (the streamed export's and the whole-run read's): in
/// send order, every record once, where several records share a send time and a page ends
/// between them.
async fn records_read_in_pages_of_send_order_come_once_each_across_equal_send_times(t: TestStore) {
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate(s, "a").await;
    let r = run(s, version, &[a], "keyset").await;
    let other = run(s, version, &[a], "other").await;
    let base = Timestamp::now().0 * 1000;
    let mut records = Vec::new();
    for (n, sent) in [3, 1, 1, 1, 2, 2, 5, 4, 4].into_iter().enumerate() {
        let mut rec = record(r, a, "c1", "positive", true);
        rec.repetition = n as u32;
        rec.sent_at_us = base + sent;
        records.push(rec);
    }
    let mut elsewhere = record(other, a, "c1", "positive", true);
    elsewhere.sent_at_us = base + 2;
    records.push(elsewhere);
    s.append_request_records(&records).await.unwrap();

    let mut after = None;
    let mut read = Vec::new();
    loop {
        let page = s.list_request_records_sent_after(r, after, 2).await.unwrap();
        assert!(page.len() <= 2, "{}", t.backend);
        let Some((last, _)) = page.last() else { break };
        after = Some(*last);
        read.extend(page.into_iter().map(|(_, rec)| rec));
    }
    let whole = s.list_request_records(r).await.unwrap();
    assert_eq!(read, whole, "{}: the pages join into the whole read", t.backend);
    let sends: Vec<i64> = read.iter().map(|rec| rec.sent_at_us - base).collect();
    assert_eq!(sends, [1, 1, 1, 2, 2, 3, 4, 4, 5], "{}", t.backend);
    let mut reps: Vec<u32> = read.iter().map(|rec| rec.repetition).collect();
    reps.sort_unstable();
    assert_eq!(reps, (0..9).collect::<Vec<u32>>(), "{}: every record once", t.backend);
}

each_backend!(a_runs_stored_cases_page_by_their_marks_as_the_domain_filters_them);
/// The store answers every filter of the cases page as `case_index::matches` does over the
/// same cases, in page order and a page at a time; saving again replaces the cases, and a
/// deleted run takes them with it.
async fn a_runs_stored_cases_page_by_their_marks_as_the_domain_filters_them(t: TestStore) {
    use bakeoff::domain::case_index::{CaseQuery, IndexedCase, Mark, MarkKind, NO_CANDIDATE, Outcome, matches};
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let (a, b) = (candidate(s, "a").await, candidate(s, "b").await);
    let id = run(s, version, &[a, b], "marked").await;
    let mark = |kind, value: &str, candidate_id| Mark {
        kind,
        value: value.into(),
        candidate_id,
    };
    // 37 cases (four pages of ten), marked in a pattern that makes every filter pick a
    // different subset; one tag holds a NUL and a quote (stored through the text codec).
    let cases: Vec<IndexedCase> = (0..37)
        .map(|i| {
            let mut marks = vec![mark(
                MarkKind::Tag,
                if i % 3 == 0 { "math" } else { "odd\0\"tag" },
                NO_CANDIDATE,
            )];
            for (who, shift) in [(a, 0), (b, 1)] {
                let outcome = [Outcome::Pass, Outcome::Fail, Outcome::Error, Outcome::Ungraded][(i + shift) % 4];
                marks.push(mark(MarkKind::Outcome, outcome.as_str(), who));
                match outcome {
                    Outcome::Fail => marks.push(mark(MarkKind::Failure, "wrong_answer", who)),
                    Outcome::Error => marks.push(mark(MarkKind::Failure, "timeout", who)),
                    _ => {}
                }
            }
            if i % 5 == 0 {
                marks.push(mark(MarkKind::Differs, "", NO_CANDIDATE));
            }
            IndexedCase {
                case_id: format!("case-{i:02}"),
                marks,
            }
        })
        .collect();
    s.save_run_cases(id, &cases, "case-index/test", "{}").await.unwrap();
    assert_eq!(
        s.get_run_summary(id, "case-index/test").await.unwrap().as_deref(),
        Some("{}"),
        "{}: the head is saved with the cases",
        t.backend
    );
    let mut queries = vec![CaseQuery::default()];
    for candidate_id in [None, Some(a), Some(b)] {
        let q = CaseQuery {
            candidate_id,
            ..CaseQuery::default()
        };
        queries.push(CaseQuery {
            failures: true,
            ..q.clone()
        });
        queries.push(CaseQuery {
            error_class: Some("timeout".into()),
            ..q.clone()
        });
        for outcome in [Outcome::Pass, Outcome::Fail, Outcome::Error] {
            queries.push(CaseQuery {
                outcome: Some(outcome),
                ..q.clone()
            });
        }
        queries.push(CaseQuery {
            failures: true,
            tag: Some("math".into()),
            differs: true,
            ..q.clone()
        });
    }
    queries.push(CaseQuery {
        tag: Some("odd\0\"tag".into()),
        ..CaseQuery::default()
    });
    queries.push(CaseQuery {
        tag: Some("absent".into()),
        ..CaseQuery::default()
    });
    for q in &queries {
        let tests = q.tests();
        let expected: Vec<String> = cases
            .iter()
            .filter(|c| matches(&tests, c))
            .map(|c| c.case_id.clone())
            .collect();
        let (n, all) = s.page_run_cases(id, &tests, None).await.unwrap();
        assert_eq!((n as usize, &all), (expected.len(), &expected), "{}: {q:?}", t.backend);
        for offset in [0, 10, 20, 30, 40] {
            let (n, page) = s.page_run_cases(id, &tests, Some((offset, 10))).await.unwrap();
            let want: Vec<String> = expected.iter().skip(offset as usize).take(10).cloned().collect();
            assert_eq!(
                (n as usize, page),
                (expected.len(), want),
                "{}: {q:?} from {offset}",
                t.backend
            );
        }
    }
    // The same run saved again (a recomputed index) replaces its cases and marks.
    s.save_run_cases(id, &cases[..3], "case-index/test", "{}")
        .await
        .unwrap();
    let (n, all) = s.page_run_cases(id, &[], None).await.unwrap();
    assert_eq!((n, all.len()), (3, 3), "{}", t.backend);
    let failures = CaseQuery {
        failures: true,
        ..CaseQuery::default()
    };
    let (n, _) = s.page_run_cases(id, &failures.tests(), None).await.unwrap();
    let want = cases[..3].iter().filter(|c| matches(&failures.tests(), c)).count();
    assert_eq!(
        n as usize, want,
        "{}: no mark of a case saved before is left",
        t.backend
    );
    s.delete_run(id).await.unwrap();
    for table in ["run_cases", "run_case_marks"] {
        let left = t
            .fetch_i64(&format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}"))
            .await
            .unwrap();
        assert_eq!(left, 0, "{}: {table} goes with its run", t.backend);
    }
}
