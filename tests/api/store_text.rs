//! Store: any text a server, a model or a person sent comes back exactly as it was sent —
//! NUL and every other control character, and the escape character PostgreSQL's encoding uses
//! (`store::text`) — on every available backend; and old PostgreSQL rows holding the escape
//! character still read as they were.
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{ErrorClass, NewRun, RunConfig, RunStatus};
use bakeoff::domain::scorecard::NewScorecard;
use bakeoff::store::text::ESCAPE;

use crate::support::app::{TINY_EVALSET, record};
use crate::support::db::{TestStore, each_backend};

/// Every C0 control character (U+0000–U+001F), DEL, the escape character alone, doubled and
/// next to a `0` (what an escaped NUL looks like), and some ordinary text.
fn awkward_text() -> String {
    let mut s: String = (0u8..0x20).map(char::from).collect();
    s.push('\u{7f}');
    s.push(ESCAPE);
    s.push_str(&format!("0{ESCAPE}{ESCAPE}0{ESCAPE}"));
    s.push_str(" ok \u{0}end é 漢");
    s
}

async fn run_with_candidate(t: &TestStore) -> (i64, i64) {
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let spec = CandidateDraft {
        name: "nul".into(),
        provider: "openai-chat".into(),
        base_url: "http://127.0.0.1:1/v1".into(),
        model: "m".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let candidate = s
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = s
        .create_run(&NewRun {
            name: "text".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    (run, candidate)
}

each_backend!(store_keeps_every_control_character_of_server_text);
async fn store_keeps_every_control_character_of_server_text(t: TestStore) {
    let s = &t.store;
    let (run, candidate) = run_with_candidate(&t).await;
    let text = awkward_text();

    let mut answered = record(run, candidate, "c1", &text, false);
    answered.texts.get_mut().reasoning = Some(format!("thinking{text}"));
    answered.finish_reason = Some(format!("stop{}", '\0').into());
    answered.grades[0].reason = format!("expected \"positive\", got {text:?} and {text}");
    let mut failed = record(run, candidate, "c2", "", false);
    failed.error_class = Some(ErrorClass::HttpServerError);
    failed.texts.get_mut().error_detail = Some(format!("HTTP 500: {text}"));
    failed.grades.clear();
    assert_eq!(
        s.append_request_records(&[answered.clone(), failed.clone()])
            .await
            .unwrap(),
        2,
        "{}",
        t.backend
    );
    // A retried batch is still recognised by its key (the text does not take part in it).
    assert_eq!(s.append_request_records(&[answered.clone()]).await.unwrap(), 0);

    let stored = s.list_request_records(run).await.unwrap();
    assert_eq!(stored.len(), 2, "{}", t.backend);
    let back = stored.iter().find(|r| &*r.case_id == "c1").unwrap();
    assert_eq!(back.output(), text, "{}: output", t.backend);
    assert_eq!(back.reasoning(), answered.reasoning(), "{}: reasoning", t.backend);
    assert_eq!(
        back.finish_reason, answered.finish_reason,
        "{}: finish reason",
        t.backend
    );
    assert_eq!(
        back.grades[0].reason, answered.grades[0].reason,
        "{}: grade reason",
        t.backend
    );
    let back = stored.iter().find(|r| &*r.case_id == "c2").unwrap();
    assert_eq!(back.error_detail(), failed.error_detail(), "{}: error body", t.backend);

    // The per-case read and the tokenizer's read decode the same way.
    let cases = s.list_case_records(run, &["c1".to_string()]).await.unwrap();
    assert_eq!(cases[0].output(), text, "{}", t.backend);
    let uncounted = s.uncounted_records(run, candidate).await.unwrap();
    assert!(
        uncounted.iter().all(|u| u.output == text || u.output.is_empty()),
        "{}",
        t.backend
    );

    // Event messages and the run's error (server error bodies end up in both).
    let message = format!("candidate failed: {text}");
    s.append_run_event(run, "error", &message).await.unwrap();
    s.set_run_status(run, RunStatus::Failed, Some(&message)).await.unwrap();
    let events = s.list_run_events(run).await.unwrap();
    assert_eq!(events.last().unwrap().message, message, "{}", t.backend);
    assert_eq!(
        s.get_run(run).await.unwrap().unwrap().error.as_deref(),
        Some(message.as_str())
    );
    let listed = s.list_runs(10, 0).await.unwrap();
    assert_eq!(listed[0].run.error.as_deref(), Some(message.as_str()), "{}", t.backend);

    // A person's note on a saved scorecard.
    let (profile, version) = s.save_threshold_profile("p", "", &[], "me", "first").await.unwrap();
    let id = s
        .save_scorecard(&NewScorecard {
            run_id: run,
            profile_id: profile,
            profile_version: version,
            incumbent: None,
            pipeline: Default::default(),
            created_by: "me".into(),
            note: text.clone(),
            verdicts: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(s.get_scorecard(id).await.unwrap().unwrap().note, text, "{}", t.backend);
    assert_eq!(s.list_run_scorecards(run).await.unwrap()[0].record.note, text);
}

each_backend!(outputs_differing_only_by_escaped_characters_are_told_apart);
async fn outputs_differing_only_by_escaped_characters_are_told_apart(t: TestStore) {
    let s = &t.store;
    let (run, a) = run_with_candidate(&t).await;
    let spec = CandidateDraft {
        name: "other".into(),
        provider: "openai-chat".into(),
        base_url: "http://127.0.0.1:2/v1".into(),
        model: "m".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let b = s
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    t.execute_raw(&format!(
        "INSERT INTO run_candidates (run_id, candidate_id, position) VALUES ({run}, {b}, 1)"
    ))
    .await
    .unwrap();
    let escaped_nul = format!("{ESCAPE}0");
    s.append_request_records(&[
        record(run, a, "c1", "\0", true),
        record(run, b, "c1", &escaped_nul, true),
        record(run, a, "c2", "\0x", true),
        record(run, b, "c2", "\0x", true),
    ])
    .await
    .unwrap();
    assert_eq!(
        s.cases_with_differing_outputs(run, &["c1".into(), "c2".into()])
            .await
            .unwrap(),
        ["c1"],
        "{}: NUL and an escape followed by 0 are different outputs",
        t.backend
    );
}

#[tokio::test]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn postgres_rows_written_before_the_encoding_read_as_they_were() {
    // A database migrated up to 0012 holding the escape character in an answer, as a row
    // written before migration 0013 would: after migrating it reads back unchanged.
    let (url, _guard) = crate::support::db::postgres_url().await;
    let older = sqlx::migrate::Migrator::new(std::path::Path::new("migrations/postgres"))
        .await
        .unwrap();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    let mut before = older;
    before.migrations = std::borrow::Cow::Owned(before.migrations.iter().filter(|m| m.version < 13).cloned().collect());
    before.run(&mut conn).await.unwrap();
    let old_answer = format!("legacy {ESCAPE}0 and {ESCAPE}{ESCAPE} and {ESCAPE}");
    for sql in [
        "INSERT INTO evalsets (id, name, task, created_at, updated_at) VALUES (1, 'e', 'classification', 0, 0)".to_string(),
        "INSERT INTO evalset_versions (id, evalset_id, content_hash, case_count, content, created_at) VALUES (1, 1, 'h', 0, '', 0)".to_string(),
        "INSERT INTO candidates (id, name, provider, base_url, model, created_at, updated_at) VALUES (1, 'c', 'openai-chat', 'http://x', 'm', 0, 0)".to_string(),
        "INSERT INTO runs (id, name, evalset_version_id, config, status, created_at) VALUES (1, 'r', 1, '{}', 'finished', 0)".to_string(),
        "INSERT INTO run_candidates (run_id, candidate_id, position) VALUES (1, 1, 0)".to_string(),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.unwrap();
    }
    sqlx::query("INSERT INTO run_events (run_id, at, level, message) VALUES (1, 0, 'info', $1)")
        .bind(&old_answer)
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let store = crate::support::db::open(&url).await;
    let events = store.list_run_events(1).await.unwrap();
    assert_eq!(events[0].message, old_answer);
}
