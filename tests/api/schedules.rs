//! Schedules (issue 52): a due time is claimed once in the database with the run it starts,
//! on both backends; a due time missed while no server ran is run once at the next start and
//! says so; a restarted server, or a second one on the same database, never runs it again.
use std::time::Duration;

use bakeoff::app::schedules::{self, ScheduleRequest};
use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::presets::LoadDraft;
use bakeoff::domain::run::{NewRun, RunConfig, RunDraft, RunStatus};
use bakeoff::domain::schedule::Firing;
use bakeoff::engine::run::Runner;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::db::{TestStore, each_backend, open, postgres_url, sqlite_url};
use crate::support::serve::Server;
use crate::support::wait;

const DEADLINE: Duration = Duration::from_secs(90);

/// Four classification cases the mock answers from its key.
fn evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"nightly","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":8}"#,
    );
    text.push('\n');
    for i in 0..4 {
        let label = if i % 2 == 0 { "positive" } else { "negative" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":\"{label}\"}}\n"
        ));
    }
    EvalSetFile::parse("nightly.jsonl", &text).expect("the eval set parses")
}

async fn mock(file: &EvalSetFile) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile::named("watched")],
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await
}

/// The eval set and one candidate on `base_url`; (eval set id, version id, candidate id).
async fn seed(store: &DynStore, file: &EvalSetFile, base_url: &str) -> (i64, i64, i64) {
    let version = store.save_evalset_version(file).await.expect("saving the eval set");
    let evalset = store
        .get_evalset_version_head(version)
        .await
        .unwrap()
        .expect("the version")
        .evalset_id;
    let spec = CandidateDraft {
        name: "watched".into(),
        provider: "openai-chat".into(),
        base_url: base_url.into(),
        model: "watched".into(),
        ..Default::default()
    }
    .validate(None)
    .expect("a valid candidate");
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .expect("saving the candidate");
    (evalset, version, candidate)
}

/// A schedule of the run form's defaults, yearly on 1 January 00:00 UTC: its latest due time
/// is always long past, so a scheduler owes it as missed as soon as its counting starts
/// before that.
fn yearly(name: &str, evalset: i64, candidate: i64) -> ScheduleRequest {
    let config = RunConfig {
        staged_rollout: false,
        warmup_requests: 0,
        ..RunConfig::default()
    };
    ScheduleRequest {
        name: name.into(),
        evalset: evalset.to_string(),
        evalset_version: "latest".into(),
        candidates: vec![candidate.to_string()],
        draft: RunDraft::from_config(&config),
        load: LoadDraft::from_config(&config),
        cadence: "0 0 1 1 *".into(),
        time_zone: "UTC".into(),
        ..Default::default()
    }
}

/// Moves a schedule's counting start back two years (as if it had been saved then).
async fn saved_long_ago(db: &impl RawSql, schedule: i64) {
    let two_years_ago = Timestamp::now().0 - 2 * 366 * 86_400_000;
    db.raw(&format!(
        "UPDATE schedules SET counting_since = {two_years_ago} WHERE id = {schedule}"
    ))
    .await;
}

/// Raw SQL on a database by URL (the store's traits never move a counting start back).
trait RawSql {
    async fn raw(&self, sql: &str);
}

impl RawSql for TestStore {
    async fn raw(&self, sql: &str) {
        self.execute_raw(sql).await.expect("raw SQL");
    }
}

impl RawSql for String {
    async fn raw(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        if self.starts_with("sqlite") {
            let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(self)
                .await
                .unwrap();
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        } else {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(self).await.unwrap();
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
    }
}

async fn a_due_time_is_claimed_once_with_its_run(db: TestStore) {
    let store = &db.store;
    let (evalset, version, candidate) = seed(store, &evalset(), "http://127.0.0.1:9/v1").await;
    let id = schedules::save(store, None, &yearly("claims", evalset, candidate), "ada")
        .await
        .expect("saving the schedule");
    let firing = Firing {
        schedule_id: id,
        due_at: Timestamp(1_800_000_000_000),
        fired_at: Timestamp::now(),
        run_id: None,
        missed: false,
        note: "on time".into(),
    };
    let run = NewRun {
        name: "claims · 1".into(),
        evalset_version_id: version,
        candidate_ids: vec![candidate],
        config: RunConfig::default(),
    };
    // Two stores on one database claim the same due time at once: one wins, with its run.
    let other = open(&db.url).await;
    let (a, b) = tokio::join!(
        store.claim_firing(&firing, Some(&run)),
        other.claim_firing(&firing, Some(&run))
    );
    let won: Vec<Firing> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(won.len(), 1, "{}: exactly one claim wins", db.backend);
    let run_id = won[0].run_id.expect("the winner created the run");
    assert_eq!(store.count_runs().await.unwrap(), 1, "{}", db.backend);
    assert_eq!(store.get_run(run_id).await.unwrap().unwrap().status, RunStatus::Queued);
    // Claimed again later: nothing.
    assert!(store.claim_firing(&firing, Some(&run)).await.unwrap().is_none());
    let firings = store.list_firings(id, 10).await.unwrap();
    assert_eq!(firings.len(), 1);
    assert_eq!(firings[0].run_id, Some(run_id));
    assert_eq!(
        store.firing_of_run(run_id).await.unwrap().map(|f| f.schedule_id),
        Some(id)
    );
    assert_eq!(store.last_firing_due(id).await.unwrap(), Some(firing.due_at));
    // A firing that starts no run (over budget, say) is claimed all the same.
    let skipped = Firing {
        due_at: Timestamp(1_900_000_000_000),
        note: "skipped: over budget".into(),
        ..firing.clone()
    };
    let claimed = store.claim_firing(&skipped, None).await.unwrap().expect("claimed");
    assert_eq!(claimed.run_id, None);
    assert_eq!(store.count_runs().await.unwrap(), 1);
    // Deleting the schedule keeps its run.
    assert!(store.delete_schedule(id).await.unwrap());
    assert!(store.get_run(run_id).await.unwrap().is_some());
    assert!(store.list_firings(id, 10).await.unwrap().is_empty());
}
each_backend!(a_due_time_is_claimed_once_with_its_run);

async fn a_missed_due_time_runs_once_and_a_second_scheduler_never_again(db: TestStore) {
    let file = evalset();
    let mock = mock(&file).await;
    let store = db.store.clone();
    let (evalset, _, candidate) = seed(&store, &file, &mock.base_url()).await;
    let id = schedules::save(&store, None, &yearly("yearly", evalset, candidate), "ada")
        .await
        .unwrap();
    saved_long_ago(&db, id).await;
    let now = Timestamp::now();
    let runner = Runner::new(store.clone());
    let fired = schedules::tick(&store, &runner, now).await.unwrap();
    assert_eq!(fired.len(), 1, "{}: {fired:?}", db.backend);
    assert!(fired[0].missed, "{fired:?}");
    assert!(
        fired[0].note.contains("missed while no scheduler was running"),
        "{}",
        fired[0].note
    );
    let run_id = fired[0].run_id.expect("a run");
    let run = wait::run_ended(&store, run_id, DEADLINE).await;
    assert_eq!(run.status, RunStatus::Finished, "{}", db.backend);
    let events = store.list_run_events(run_id).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("scheduled by \"yearly\"") && e.message.contains("missed")),
        "{events:?}"
    );
    // The same scheduler later, and another process's scheduler on the same database: nothing.
    assert!(
        schedules::tick(&store, &runner, Timestamp(now.0 + 60_000))
            .await
            .unwrap()
            .is_empty()
    );
    let other = open(&db.url).await;
    let other_runner = Runner::new(other.clone());
    assert!(schedules::tick(&other, &other_runner, now).await.unwrap().is_empty());
    assert_eq!(store.count_runs().await.unwrap(), 1, "{}", db.backend);

    // Paused: nothing owed; resumed: counting starts again, so the paused time is not owed.
    schedules::set_paused(&store, id, true, "ada").await.unwrap();
    saved_long_ago(&db, id).await;
    db.execute_raw(&format!("DELETE FROM schedule_firings WHERE schedule_id = {id}"))
        .await
        .unwrap();
    assert!(schedules::tick(&store, &runner, now).await.unwrap().is_empty());
    schedules::set_paused(&store, id, false, "ada").await.unwrap();
    assert!(
        schedules::tick(&store, &runner, Timestamp::now())
            .await
            .unwrap()
            .is_empty()
    );

    // A budget the run would exceed: the due time is claimed, no run, the note says why.
    let mut over = yearly("over budget", evalset, candidate);
    over.max_requests = "2".into();
    let over_id = schedules::save(&store, None, &over, "ada").await.unwrap();
    saved_long_ago(&db, over_id).await;
    let fired = schedules::tick(&store, &runner, Timestamp::now()).await.unwrap();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0].run_id, None);
    assert!(
        fired[0].note.contains("would send 4 requests, over the budget of 2"),
        "{}",
        fired[0].note
    );
    assert_eq!(store.count_runs().await.unwrap(), 1);
}
each_backend!(
    a_missed_due_time_runs_once_and_a_second_scheduler_never_again,
    flavor = "multi_thread",
    worker_threads = 2
);

/// A firing skipped over budget is told like a failed run (once, linked to the schedule); an
/// eval set, candidate or profile a schedule uses cannot be deleted from under it: the refusal
/// names the schedule and nothing is deleted.
async fn a_skipped_firing_is_told_and_what_a_schedule_uses_is_not_deleted(db: TestStore) {
    use bakeoff::app::retirement;
    use bakeoff::domain::retirement::ItemKind;
    let store = db.store.clone();
    let (evalset, _, candidate) = seed(&store, &evalset(), "http://127.0.0.1:9/v1").await;
    let mut over = yearly("over budget", evalset, candidate);
    over.max_requests = "2".into();
    let id = schedules::save(&store, None, &over, "ada").await.unwrap();
    saved_long_ago(&db, id).await;
    let receiver = Receiver::start(0).await;
    bakeoff::app::notify::save_target(
        &store,
        &bakeoff::domain::notify::TargetSpec {
            name: "on-call".into(),
            kind: bakeoff::domain::notify::TargetKind::Webhook,
            url: receiver.url.clone(),
            secret: Some("a-webhook-secret-of-the-team".into()),
            schedule_id: Some(id),
            profile_id: None,
        },
        "admin",
    )
    .await
    .unwrap();
    let runner = Runner::new(store.clone());
    let fired = schedules::tick(&store, &runner, Timestamp::now()).await.unwrap();
    assert_eq!((fired.len(), fired[0].run_id), (1, None), "{fired:?}");
    let notify = |at| bakeoff::app::notify::queue_news(&store, at, Some("http://bakeoff.example"));
    assert_eq!(notify(Timestamp::now()).await.unwrap(), 1, "{}", db.backend);
    assert_eq!(notify(Timestamp::now()).await.unwrap(), 0, "queued once");
    let client = bakeoff::app::notify::client();
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, Timestamp::now())
            .await
            .unwrap(),
        1
    );
    let got = receiver.received();
    assert_eq!(got.len(), 1);
    let message: bakeoff::domain::notify::WebhookBody = serde_json::from_slice(&got[0].1).unwrap();
    assert_eq!(message.event, "run.skipped");
    assert!(
        message.text.starts_with("over budget: no run for ")
            && message.text.contains("would send 4 requests, over the budget of 2"),
        "{}",
        message.text
    );
    assert_eq!(
        message.link.as_deref(),
        Some(format!("http://bakeoff.example/schedules/{id}").as_str())
    );

    for (kind, item) in [(ItemKind::EvalSet, evalset), (ItemKind::Candidate, candidate)] {
        let err = retirement::delete_unused(&store, kind, item)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot be deleted: schedule \"over budget\" uses it"),
            "{}: {err}",
            db.backend
        );
    }
    assert!(store.get_schedule(id).await.unwrap().is_some(), "the schedule is kept");
    assert!(store.list_evalsets().await.unwrap().iter().any(|e| e.id == evalset));
    // Once the schedule is gone, the eval set can go.
    schedules::delete(&store, id, "ada").await.unwrap();
    retirement::delete_unused(&store, ItemKind::EvalSet, evalset)
        .await
        .unwrap();
}
/// An email target: a scheduled run that failed is mailed once through an SMTP server on
/// loopback (the one line as subject and text, the run's link below it, signed in with the
/// sealed password), retried after the server's "try again later", never again after.
async fn a_failed_run_is_emailed_once_retried_after_a_refusal(db: TestStore) {
    use bakeoff::domain::notify::{DeliveryStatus, TargetKind, TargetSpec};
    let store = db.store.clone();
    let (evalset, version, candidate) = seed(&store, &evalset(), "http://127.0.0.1:9/v1").await;
    let id = schedules::save(&store, None, &yearly("nightly", evalset, candidate), "ada")
        .await
        .unwrap();
    let receiver = crate::support::smtp::SmtpReceiver::start(1).await;
    let password = "the-smtp-password-9";
    let target = bakeoff::app::notify::save_target(
        &store,
        &TargetSpec {
            name: "team mail".into(),
            kind: TargetKind::Email,
            url: format!(
                "smtp://alerts@127.0.0.1:{}?tls=none&from=bakeoff@team.example&to=oncall@team.example",
                receiver.port
            ),
            secret: Some(password.into()),
            schedule_id: Some(id),
            profile_id: None,
        },
        "admin",
    )
    .await
    .unwrap();
    let firing = Firing {
        schedule_id: id,
        due_at: Timestamp(1_800_000_000_000),
        fired_at: Timestamp::now(),
        run_id: None,
        missed: false,
        note: "started on time".into(),
    };
    let run = NewRun {
        name: "nightly · 1".into(),
        evalset_version_id: version,
        candidate_ids: vec![candidate],
        config: RunConfig::default(),
    };
    let run_id = store
        .claim_firing(&firing, Some(&run))
        .await
        .unwrap()
        .unwrap()
        .run_id
        .unwrap();
    store
        .set_run_status(run_id, RunStatus::Failed, Some("every candidate failed"))
        .await
        .unwrap();
    let notify = bakeoff::app::notify::queue_news(&store, Timestamp::now(), Some("http://bakeoff.example"));
    assert_eq!(notify.await.unwrap(), 1, "{}", db.backend);
    let client = bakeoff::app::notify::client();
    let now = Timestamp::now();
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, now).await.unwrap(),
        0
    );
    let log = store.list_deliveries(Some(target), 10).await.unwrap();
    assert_eq!(log[0].status, DeliveryStatus::Pending);
    let error = log[0].last_error.clone().unwrap_or_default();
    assert!(error.contains("451") || error.contains("try again"), "{error}");
    let later = Timestamp(log[0].next_attempt_at.0 + 1);
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, later).await.unwrap(),
        1
    );
    let far = Timestamp(later.0 + 86_400_000);
    assert_eq!(bakeoff::app::notify::queue_news(&store, far, None).await.unwrap(), 0);
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, far).await.unwrap(),
        0
    );

    assert_eq!(receiver.refused(), 1);
    let mails = receiver.accepted();
    assert_eq!(mails.len(), 1, "delivered once");
    let mail = &mails[0];
    assert_eq!(mail.from, "bakeoff@team.example");
    assert_eq!(mail.to, ["oncall@team.example"]);
    assert_eq!(mail.auth.as_deref(), Some(format!("alerts\0{password}").as_str()));
    let line = format!("nightly: run #{run_id} ended failed: every candidate failed");
    assert!(mail.data.contains(&format!("Subject: {line}\r\n")), "{}", mail.data);
    let text = mail.data.split_once("\r\n\r\n").map(|(_, t)| t).unwrap_or_default();
    assert_eq!(
        text.trim_end(),
        format!("{line}\r\nhttp://bakeoff.example/runs/{run_id}"),
        "the line, and the link on the next"
    );
    // The password is nowhere but sealed: not in the listing, the log or the audit.
    let listed = store.list_targets().await.unwrap();
    assert!(listed.iter().all(|t| !t.url_shown.contains(password)));
    let audit = store
        .list_audit(&bakeoff::domain::audit::AuditFilter::default(), 100, 0)
        .await
        .unwrap();
    assert!(audit.iter().any(|e| e.action == "notification.delivered"), "{audit:?}");
    assert!(audit.iter().all(|e| !e.detail.contains(password)));
}
each_backend!(a_failed_run_is_emailed_once_retried_after_a_refusal);

/// `tls=starttls` (the default) never falls back to plain SMTP: a server that offers no
/// STARTTLS gets neither the message nor the password, and the delivery log says why.
#[tokio::test]
async fn an_email_target_requiring_starttls_sends_nothing_to_a_server_without_it() {
    use bakeoff::domain::notify::{DeliveryStatus, TargetKind, TargetSpec};
    let db = crate::support::db::sqlite_test_store().await;
    let store = db.store.clone();
    let (evalset, _, candidate) = seed(&store, &evalset(), "http://127.0.0.1:9/v1").await;
    let id = schedules::save(&store, None, &yearly("nightly", evalset, candidate), "ada")
        .await
        .unwrap();
    let receiver = crate::support::smtp::SmtpReceiver::start(0).await;
    let target = bakeoff::app::notify::save_target(
        &store,
        &TargetSpec {
            name: "team mail".into(),
            kind: TargetKind::Email,
            url: format!(
                "smtp://alerts@127.0.0.1:{}?from=bakeoff@team.example&to=oncall@team.example",
                receiver.port
            ),
            secret: Some("the-smtp-password-9".into()),
            schedule_id: Some(id),
            profile_id: None,
        },
        "admin",
    )
    .await
    .unwrap();
    bakeoff::app::notify::queue_test(&store, target, "admin", None)
        .await
        .unwrap();
    let client = bakeoff::app::notify::client();
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, Timestamp::now())
            .await
            .unwrap(),
        0
    );
    let log = store.list_deliveries(Some(target), 10).await.unwrap();
    assert_eq!(log[0].status, DeliveryStatus::Pending);
    assert!(
        log[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("the mail server")),
        "{log:?}"
    );
    assert!(receiver.accepted().is_empty(), "nothing sent in the clear");
}

each_backend!(
    a_skipped_firing_is_told_and_what_a_schedule_uses_is_not_deleted,
    flavor = "multi_thread",
    worker_threads = 2
);

async fn a_schedule_with_bad_fields_is_refused_naming_each(db: TestStore) {
    let store = &db.store;
    let (evalset, _, candidate) = seed(store, &evalset(), "http://127.0.0.1:9/v1").await;
    let mut bad = yearly("bad", evalset, candidate);
    bad.cadence = "0 25 * * *".into();
    bad.time_zone = "Mars/Olympus".into();
    bad.max_cost_usd = "-1".into();
    bad.candidates = vec![];
    bad.draft.concurrency = "0".into();
    let Err(bakeoff::app::AppError::Fields(errors)) = schedules::save(store, None, &bad, "ada").await else {
        panic!("refused with field errors");
    };
    let fields: Vec<&str> = errors.0.iter().map(|e| e.field.as_str()).collect();
    for field in ["cadence", "time_zone", "max_cost_usd", "candidates", "concurrency"] {
        assert!(fields.contains(&field), "{field} not named: {errors:?}");
    }
    assert!(store.list_schedules().await.unwrap().is_empty(), "nothing saved");
}
each_backend!(a_schedule_with_bad_fields_is_refused_naming_each);

/// The real `bakeoff serve`: started after a due time passed, it runs the schedule once and
/// says it was missed; killed and started again, it does not run it again.
async fn missed_run_through_a_restart(url: &str, backend: &str) {
    let file = evalset();
    let mock = mock(&file).await;
    let store = open(url).await;
    let (evalset, _, candidate) = seed(&store, &file, &mock.base_url()).await;
    let first = schedules::save(&store, None, &yearly("a-first", evalset, candidate), "ada")
        .await
        .unwrap();
    saved_long_ago(&url.to_string(), first).await;

    let server = Server::start(url, &[]);
    let run_id = wait::until_some("the missed due time to be fired", DEADLINE, || async {
        store
            .list_firings(first, 10)
            .await
            .unwrap()
            .first()
            .and_then(|f| f.run_id)
    })
    .await;
    let run = wait::run_ended(&store, run_id, DEADLINE).await;
    assert_eq!(run.status, RunStatus::Finished, "{backend}");
    drop(server);

    // While it is down, a second schedule falls due; the restarted server fires it in the same
    // look at the schedules as it reconsiders the first, which it must not fire again.
    let second = schedules::save(&store, None, &yearly("b-second", evalset, candidate), "ada")
        .await
        .unwrap();
    saved_long_ago(&url.to_string(), second).await;
    let _server = Server::start(url, &[]);
    let second_run = wait::until_some("the second schedule to fire after the restart", DEADLINE, || async {
        store
            .list_firings(second, 10)
            .await
            .unwrap()
            .first()
            .and_then(|f| f.run_id)
    })
    .await;
    wait::run_ended(&store, second_run, DEADLINE).await;
    let firings = store.list_firings(first, 10).await.unwrap();
    assert_eq!(
        firings.len(),
        1,
        "{backend}: fired once, not again after the restart: {firings:?}"
    );
    assert!(firings[0].missed, "{backend}");
    assert_eq!(store.count_runs().await.unwrap(), 2, "{backend}: one run per schedule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_schedule_runs_once_through_a_restart_on_sqlite() {
    let (url, _guard) = sqlite_url();
    missed_run_through_a_restart(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn a_missed_schedule_runs_once_through_a_restart_on_postgres() {
    let (url, _guard) = postgres_url().await;
    missed_run_through_a_restart(&url, "postgres").await;
}

/// Twenty classification cases, enough for intervals that tell 100 % from 30 % apart.
fn twenty_cases() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"regression","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":8}"#,
    );
    text.push('\n');
    for i in 0..20 {
        let label = if i % 2 == 0 { "positive" } else { "negative" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:02}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":\"{label}\"}}\n"
        ));
    }
    EvalSetFile::parse("regression.jsonl", &text).expect("the eval set parses")
}

/// The same model name served fast and accurate, or slow and mostly wrong (the provider's
/// silent update between two scheduled runs).
async fn served_as(file: &EvalSetFile, ttft_ms: f64, accuracy: f64) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms,
            inter_token_ms: Some(2.0),
            jitter: 0.0,
            accuracy,
            ..ModelProfile::named("watched")
        }],
        answer_keys: vec![file.clone()],
        seed: 9,
    })
    .await
}

async fn a_scripted_regression_names_the_flipped_rule_and_the_moved_figure(db: TestStore) {
    use bakeoff::domain::regression::ChangeKind;
    use bakeoff::domain::thresholds::{Comparator, ThresholdRule};

    let file = twenty_cases();
    let (good, bad) = (served_as(&file, 10.0, 1.0).await, served_as(&file, 400.0, 0.3).await);
    let store = db.store.clone();
    let (evalset, _, candidate) = seed(&store, &file, &good.base_url()).await;
    let rule = |metric: &str, comparator, value: f64, unit: &str| ThresholdRule {
        metric: metric.into(),
        comparator,
        value,
        unit: unit.into(),
        rationale: String::new(),
    };
    let (profile, _) = store
        .save_threshold_profile(
            "watch",
            "",
            // Accuracy only: a speed rule can be inconclusive on a busy machine (the harness
            // flags its own lag), and the first run must pass to be the baseline.
            &[rule("accuracy", Comparator::AtLeast, 0.8, "fraction")],
            "ada",
            "scheduled watch",
        )
        .await
        .unwrap();
    let mut request = yearly("watch", evalset, candidate);
    request.profile = profile.to_string();
    request.draft.concurrency = "4".into();
    let id = schedules::save(&store, None, &request, "ada").await.unwrap();
    saved_long_ago(&db, id).await;
    let runner = Runner::new(store.clone());

    // First firing: the model as it was. Nothing to compare with yet.
    let first = schedules::tick(&store, &runner, Timestamp::now()).await.unwrap();
    let first_run = first[0].run_id.expect("a run");
    assert_eq!(
        wait::run_ended(&store, first_run, DEADLINE).await.status,
        RunStatus::Finished
    );
    let changes = bakeoff::app::baseline::changes_of_run(&store, first_run)
        .await
        .unwrap()
        .expect("a scheduled run has changes since baseline");
    assert_eq!(changes.baseline_run_id, None);
    assert!(changes.changes.is_empty(), "{changes:?}");

    // The provider swaps the model behind the same name: slower and mostly wrong.
    let mut spec = store.get_candidate(candidate).await.unwrap().unwrap().spec;
    spec.base_url = bad.base_url();
    let change = crate::support::checked::admin_change(store.as_ref(), candidate, &spec).await;
    store.update_candidate(&change).await.unwrap();

    // The next due time (1 January next year) as the scheduler sees it then.
    let schedule = store.get_schedule(id).await.unwrap().unwrap();
    let next = schedule.next_due(first[0].due_at).expect("a next due time");
    let second = schedules::tick(&store, &runner, Timestamp(next.0 + 1_000))
        .await
        .unwrap();
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(!second[0].missed, "on time: {second:?}");
    let second_run = second[0].run_id.expect("a run");
    assert_eq!(
        wait::run_ended(&store, second_run, DEADLINE).await.status,
        RunStatus::Finished
    );
    let changes = bakeoff::app::baseline::changes_of_run(&store, second_run)
        .await
        .unwrap()
        .expect("changes");
    assert_eq!(changes.baseline_run_id, Some(first_run), "{changes:?}");
    let texts = |kind: ChangeKind| -> Vec<String> {
        changes
            .changes
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.text.clone())
            .collect()
    };
    assert_eq!(texts(ChangeKind::Verdict), ["verdict GO → NO-GO"], "{changes:?}");
    let flipped = texts(ChangeKind::RuleFlipped);
    assert!(
        flipped
            .iter()
            .any(|t| t.starts_with("accuracy") && t.contains("pass → fail")),
        "{flipped:?}"
    );
    let moved = texts(ChangeKind::Regressed);
    assert!(
        moved.iter().any(|t| t.starts_with("TTFT p50 worse beyond the noise")),
        "{moved:?}"
    );
    assert!(
        moved.iter().any(|t| t.starts_with("accuracy worse beyond the noise")),
        "{moved:?}"
    );
    // Stored with the run: read again, the same.
    let again = bakeoff::app::baseline::changes_of_run(&store, second_run)
        .await
        .unwrap();
    assert_eq!(again.as_ref(), Some(&changes));

    // A signed webhook for this schedule: told once about the change, after one failure.
    let receiver = Receiver::start(1).await;
    let secret = "a-webhook-secret-of-the-team";
    let target = bakeoff::app::notify::save_target(
        &store,
        &bakeoff::domain::notify::TargetSpec {
            name: "on-call".into(),
            kind: bakeoff::domain::notify::TargetKind::Webhook,
            url: receiver.url.clone(),
            secret: Some(secret.into()),
            schedule_id: Some(id),
            profile_id: None,
        },
        "admin",
    )
    .await
    .unwrap();
    let client = bakeoff::app::notify::client();
    let queued = bakeoff::app::notify::queue_news(&store, Timestamp::now(), Some("http://bakeoff.example"))
        .await
        .unwrap();
    assert_eq!(queued, 1, "{}: one message, about the second run only", db.backend);
    let now = Timestamp::now();
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, now).await.unwrap(),
        0
    );
    let log = store.list_deliveries(Some(target), 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].status, bakeoff::domain::notify::DeliveryStatus::Pending);
    assert_eq!(
        log[0].last_error.as_deref(),
        Some("the receiver answered 500 Internal Server Error")
    );
    // Queued again (another scheduler, a later tick): nothing new.
    assert_eq!(bakeoff::app::notify::queue_news(&store, now, None).await.unwrap(), 0);
    // After the backoff, retried and delivered; then never again.
    let later = Timestamp(log[0].next_attempt_at.0 + 1);
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, later).await.unwrap(),
        1
    );
    let far = Timestamp(later.0 + 86_400_000);
    assert_eq!(bakeoff::app::notify::queue_news(&store, far, None).await.unwrap(), 0);
    assert_eq!(
        bakeoff::app::notify::deliver_due(&store, &client, far).await.unwrap(),
        0
    );
    let got = receiver.received();
    assert_eq!(got.len(), 2, "one failed attempt, one delivered");
    for (headers, body) in &got {
        let header = headers.get("x-bakeoff-signature").expect("signed").to_str().unwrap();
        assert!(
            bakeoff::domain::notify::verify(secret, header, body, Timestamp::now(), 300_000),
            "a correct signature: {header}"
        );
        assert!(!bakeoff::domain::notify::verify(
            "another-secret-entirely",
            header,
            body,
            Timestamp::now(),
            300_000
        ));
    }
    assert_eq!(
        got[0].0.get("x-bakeoff-delivery"),
        got[1].0.get("x-bakeoff-delivery"),
        "one delivery id"
    );
    let message: bakeoff::domain::notify::WebhookBody = serde_json::from_slice(&got[1].1).unwrap();
    assert_eq!(message.event, "run.changes");
    assert_eq!(
        message.link.as_deref(),
        Some(format!("http://bakeoff.example/runs/{second_run}").as_str())
    );
    assert!(message.text.contains("verdict GO → NO-GO"), "{}", message.text);
    assert!(!message.text.contains('\n'), "one line: {}", message.text);
    let log = store.list_deliveries(Some(target), 10).await.unwrap();
    assert_eq!(
        (log[0].status, log[0].attempts),
        (bakeoff::domain::notify::DeliveryStatus::Delivered, 2)
    );
    // Audited, without the secret.
    let audit = store
        .list_audit(&bakeoff::domain::audit::AuditFilter::default(), 100, 0)
        .await
        .unwrap();
    assert!(audit.iter().any(|e| e.action == "notification.delivered"), "{audit:?}");
    assert!(
        audit.iter().all(|e| !e.detail.contains(secret)),
        "no secret in the audit log"
    );
}
each_backend!(
    a_scripted_regression_names_the_flipped_rule_and_the_moved_figure,
    flavor = "multi_thread",
    worker_threads = 2
);

/// What the receiver got: each delivery's headers and body.
type Deliveries = std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, Vec<u8>)>>>;

/// A webhook receiver on loopback: records every request (headers and body), answers 500 to
/// the first `failures`, then 200.
struct Receiver {
    url: String,
    got: Deliveries,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(failures: usize) -> Receiver {
        use axum::http::StatusCode;
        let got: Deliveries = Default::default();
        let seen = got.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let mut all = seen.lock().unwrap();
                    all.push((headers, body.to_vec()));
                    if all.len() <= failures {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            url,
            got,
            _server: server,
        }
    }

    fn received(&self) -> Vec<(axum::http::HeaderMap, Vec<u8>)> {
        self.got.lock().unwrap().clone()
    }
}

async fn a_schedules_file_round_trips_and_a_bad_one_changes_nothing(db: TestStore) {
    use bakeoff::app::files::schedules as file;
    let store = &db.store;
    let (evalset, _, candidate) = seed(store, &evalset(), "http://127.0.0.1:9/v1").await;
    let mut request = yearly("nightly", evalset, candidate);
    request.cadence = "0 6 * * 1-5".into();
    request.time_zone = "Europe/Berlin".into();
    request.max_requests = "500".into();
    request.draft.concurrency = "3".into();
    let id = schedules::save(store, None, &request, "ada").await.unwrap();
    let text = file::export(store, &[]).await.unwrap();
    assert!(text.contains("cadence = \"0 6 * * 1-5\""), "{text}");
    assert!(text.contains("evalset = \"nightly\""), "{text}");
    assert!(text.contains("candidates = [\"watched\"]"), "{text}");

    // Imported back: the same schedule, updated in place.
    let before = store.get_schedule(id).await.unwrap().unwrap();
    let done = file::import(store, "s.toml", &text, "ada").await.unwrap();
    assert_eq!(done, vec![(id, "nightly".to_string(), "updated")]);
    let after = store.get_schedule(id).await.unwrap().unwrap();
    assert_eq!(after.spec, before.spec, "{}", db.backend);

    // A new one and a broken one in one file: nothing stored, each problem placed.
    let bad = format!(
        "{text}\n[[schedule]]\nname = \"broken\"\nevalset = \"nightly\"\ncandidates = [\"nobody\"]\ncadence = \"0 6 * *\"\n\n[schedule.settings]\nconcurrency = 0\n\n[[schedule]]\nname = \"misspelt\"\nevalset = \"nightly\"\ncandidates = [\"watched\"]\ncadence = \"@daily\"\n[schedule.settings]\nconcurency = 4\n"
    );
    let line_of = |needle: &str| bad.lines().position(|l| l == needle).unwrap() + 1;
    let err = file::import(store, "s.toml", &bad, "ada")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("s.toml:"), "{err}");
    assert!(
        err.contains("schedule[1].candidates") && err.contains("no candidate is named \"nobody\""),
        "{err}"
    );
    assert!(
        err.contains("schedule[1].cadence") && err.contains("five fields"),
        "{err}"
    );
    assert!(err.contains("schedule[1].settings.concurrency"), "{err}");
    // Each problem on the line where it is written.
    for (line, field) in [
        (line_of("candidates = [\"nobody\"]"), "schedule[1].candidates"),
        (line_of("cadence = \"0 6 * *\""), "schedule[1].cadence"),
        (line_of("concurrency = 0"), "schedule[1].settings.concurrency"),
        (line_of("concurency = 4"), "schedule[2].settings.concurency"),
    ] {
        assert!(
            err.contains(&format!("s.toml:{line}: field `{field}`")),
            "{field} at {line}: {err}"
        );
    }
    assert_eq!(store.list_schedules().await.unwrap().len(), 1, "nothing stored");
    let wrong_version = text.replace("bakeoff_schedules = 1", "bakeoff_schedules = 2");
    let err = file::import(store, "s.toml", &wrong_version, "ada")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unsupported format version 2"), "{err}");
}
each_backend!(a_schedules_file_round_trips_and_a_bad_one_changes_nothing);

/// The pages: a schedule saved through the form reads its cadence in words, a bad one is
/// re-shown with its fields named and nothing saved; pause shows; a notification target's
/// secret is never shown back.
#[tokio::test]
async fn the_schedule_and_notification_pages_save_check_and_never_show_a_secret() {
    let app = crate::support::app::spawn_app().await;
    let version = app.create_evalset().await;
    let evalset = app
        .store
        .get_evalset_version_head(version)
        .await
        .unwrap()
        .unwrap()
        .evalset_id
        .to_string();
    let candidate = app.create_candidate("paged", "http://127.0.0.1:9/v1").await.to_string();
    let form = |cadence: &'static str, zone: &'static str| -> Vec<(&'static str, String)> {
        vec![
            ("name", "weekday watch".into()),
            ("evalset", evalset.clone()),
            ("evalset_version", "latest".into()),
            ("candidate", candidate.clone()),
            ("cadence", cadence.into()),
            ("time_zone", zone.into()),
            ("concurrency", "2".into()),
            ("repetitions", "1".into()),
            ("warmup_requests", "0".into()),
            ("timeout_secs", "30".into()),
            ("retries", "0".into()),
            ("error_budget_percent", "100".into()),
            ("error_budget_window", "20".into()),
            ("load_shape", "fixed".into()),
            ("stream", "on".into()),
        ]
    };
    fn as_refs<'a>(f: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        f.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    let bad = form("0 6 * *", "Mars/Base");
    let page = app.post_form_html("/schedules", &as_refs(&bad)).await;
    assert_eq!(page.status, 422);
    let errors = page.texts(".field-error").join(" | ");
    assert!(errors.contains("five fields") && errors.contains("IANA"), "{errors}");
    assert!(app.store.list_schedules().await.unwrap().is_empty());

    let good = form("0 6 * * 1-5", "Europe/Berlin");
    let r = app.post_form("/schedules", &as_refs(&good)).await;
    assert_eq!(r.status().as_u16(), 303);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let page = app.get_html(&location).await;
    assert_eq!(page.text("#cadence"), "every weekday at 06:00 (Europe/Berlin)");
    let list = app.get_html("/schedules").await;
    assert_eq!(list.text("[data-cadence]"), "every weekday at 06:00 (Europe/Berlin)");
    let r = app.post_form(&format!("{location}/pause"), &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    let page = app.get_html(&location).await;
    assert_eq!(page.text("#next-due"), "paused");

    let secret = "never-shown-secret-1234";
    let schedule_id = location.rsplit('/').next().unwrap().to_string();
    let short = app
        .post_form_html(
            "/notifications",
            &[
                ("name", "ops"),
                ("kind", "webhook"),
                ("url", "http://127.0.0.1:9/hook"),
                ("secret", "short"),
                ("schedule", &schedule_id),
            ],
        )
        .await;
    assert_eq!(short.status, 422);
    assert!(short.texts(".field-error").join(" ").contains("at least 16"));
    let r = app
        .post_form(
            "/notifications",
            &[
                ("name", "ops"),
                ("kind", "webhook"),
                ("url", "http://127.0.0.1:9/hook"),
                ("secret", secret),
                ("schedule", &schedule_id),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303);
    let html = app.text_ok("/notifications").await;
    assert!(html.contains("http://127.0.0.1:9/hook"));
    assert!(!html.contains(secret), "the secret is never shown back");
    let api = app.text_ok("/api/v1/notification-targets").await;
    assert!(api.contains("\"ops\"") && !api.contains(secret), "{api}");
    // "Send test" to a receiver that is not there: logged as pending with its error, retried later.
    let target = app.store.list_targets().await.unwrap()[0].id;
    let r = app.post_form(&format!("/notifications/{target}/test"), &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    let page = app.get_html("/notifications").await;
    assert_eq!(page.attr("[data-delivery]", "data-status").as_deref(), Some("pending"));
    assert!(
        page.text("[data-delivery]").contains("could not connect"),
        "{}",
        page.text("[data-delivery]")
    );
}
