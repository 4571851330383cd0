//! Humans in the loop (issue 50): the review queue's store on every backend, the queue filled
//! from a run's graders, labels through the API, labels saved as the next eval-set version that a
//! re-run is graded against (the old run keeping its version), and roles.
use std::time::Duration;

use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::Grade;
use bakeoff::domain::review::pairwise::{Choice, Preference};
use bakeoff::domain::review::{ItemStatus, LabelBody, NewReviewItem, Reason, Verdict};
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::{DynStore, StoreError};

use crate::support::app::{TINY_EVALSET, record, spawn_app};
use crate::support::db::{TestStore, each_backend};

async fn candidate_named(store: &DynStore, name: &str, base_url: &str) -> i64 {
    store
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            name, base_url, name,
        )))
        .await
        .unwrap()
}

fn run_config() -> RunConfig {
    RunConfig {
        concurrency: 4,
        warmup_requests: 0,
        temperature: Some(0.0),
        retries: 0,
        staged_rollout: false,
        ..RunConfig::default()
    }
}

async fn new_run(store: &DynStore, version: i64, candidates: &[i64], name: &str) -> i64 {
    store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
            config: run_config(),
        })
        .await
        .unwrap()
}

fn item(run_id: i64, candidate_id: i64, case_id: &str, reasons: Vec<Reason>) -> NewReviewItem {
    NewReviewItem {
        run_id,
        candidate_id,
        case_id: case_id.into(),
        repetition: 0,
        reasons,
        detail: "exact failed <b>not markup</b> 中文".into(),
        added_by: "auto".into(),
    }
}

each_backend!(store_keeps_review_items_labels_and_preferences);
async fn store_keeps_review_items_labels_and_preferences(t: TestStore) {
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate_named(s, "a", "http://127.0.0.1:9/v1").await;
    let b = candidate_named(s, "b", "http://127.0.0.1:9/v1").await;
    let r = new_run(s, version, &[a, b], "r").await;
    let now = Timestamp(1_700_000_000_000);
    let added = s
        .add_review_items(
            &[
                item(r, a, "c1", vec![Reason::Flip, Reason::GraderDisagreement]),
                item(r, b, "c2", vec![Reason::Manual]),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(added, 2, "{}", t.backend);
    // The same answer again (another reason) is not a second item.
    assert_eq!(
        s.add_review_items(&[item(r, a, "c1", vec![Reason::Manual])], now)
            .await
            .unwrap(),
        0
    );
    let missing = s.add_review_items(&[item(r + 100, a, "c1", vec![])], now).await;
    assert!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");

    let items = s.list_review_items(Some(r), 100).await.unwrap();
    assert_eq!(items.len(), 2);
    let (first, second) = (&items[0], &items[1]);
    assert_eq!(first.reasons, vec![Reason::Flip, Reason::GraderDisagreement]);
    assert_eq!(first.detail, "exact failed <b>not markup</b> 中文");
    assert_eq!((first.status, first.created_at), (ItemStatus::Open, now));
    assert_eq!(s.list_review_items(None, 1).await.unwrap().len(), 1, "limit");

    // Claims: one labeller at a time; assignment keeps others out.
    assert!(s.claim_review_item(first.id, "ana").await.unwrap());
    assert!(!s.claim_review_item(first.id, "bob").await.unwrap(), "claimed by ana");
    assert!(
        !s.skip_review_item(first.id, "bob").await.unwrap(),
        "only ana may put it aside"
    );
    assert!(s.assign_review_item(second.id, Some("bob")).await.unwrap());
    assert!(!s.claim_review_item(second.id, "ana").await.unwrap(), "assigned to bob");
    assert!(s.skip_review_item(second.id, "bob").await.unwrap());
    let second_now = s.get_review_item(second.id).await.unwrap().unwrap();
    assert_eq!(
        (second_now.status, second_now.assignee.as_deref()),
        (ItemStatus::Skipped, Some("bob"))
    );

    // Labels: each labeller's latest; saving marks the item labelled and releases the claim.
    let body = |verdict, fix: Option<&str>| LabelBody {
        verdict,
        score: Some(0.5),
        corrected_expected: fix.map(str::to_string),
        note: "NUL\u{0} and <script>".into(),
    };
    s.save_review_label(first.id, "ana", &body(Verdict::Pass, None), now)
        .await
        .unwrap();
    s.save_review_label(
        first.id,
        "ana",
        &body(Verdict::Fail, Some("negative!")),
        Timestamp(now.0 + 1),
    )
    .await
    .unwrap();
    s.save_review_label(first.id, "bob", &body(Verdict::Pass, None), Timestamp(now.0 + 2))
        .await
        .unwrap();
    let labelled = s.get_review_item(first.id).await.unwrap().unwrap();
    assert_eq!((labelled.status, labelled.claimed_by), (ItemStatus::Labelled, None));
    assert!(!s.claim_review_item(first.id, "ana").await.unwrap(), "labelled");
    let labels = s.list_review_labels(Some(r)).await.unwrap();
    assert_eq!(labels.len(), 2, "{}: {labels:?}", t.backend);
    let ana = labels.iter().find(|l| l.labeller == "ana").unwrap();
    assert_eq!(
        (ana.verdict, ana.corrected_expected.as_deref(), ana.note.as_str()),
        (Verdict::Fail, Some("negative!"), "NUL\u{0} and <script>")
    );
    assert!(matches!(
        s.save_review_label(9_999_999, "ana", &body(Verdict::Pass, None), now)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Preferences: append-only, with the sides as shown.
    let p = Preference {
        case_id: "c1".into(),
        left_candidate: b,
        right_candidate: a,
        choice: Choice::Right,
        picker: "judge:sage".into(),
        left_chars: 10,
        right_chars: 30,
    };
    s.save_preference(r, &p, now).await.unwrap();
    s.save_preference(
        r,
        &Preference {
            choice: Choice::Tie,
            ..p.clone()
        },
        now,
    )
    .await
    .unwrap();
    let prefs = s.list_preferences(Some(r)).await.unwrap();
    assert_eq!(
        prefs,
        vec![
            p.clone(),
            Preference {
                choice: Choice::Tie,
                ..p
            }
        ]
    );
    // A deleted run takes its queue, labels and comparisons with it.
    s.delete_run(r).await.unwrap();
    assert!(s.list_review_items(Some(r), 100).await.unwrap().is_empty());
    assert!(s.list_preferences(None).await.unwrap().is_empty());
}

each_backend!(the_queue_fills_from_the_graders_once);
async fn the_queue_fills_from_the_graders_once(t: TestStore) {
    let s = &t.store;
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate_named(s, "a", "http://127.0.0.1:9/v1").await;
    let r = new_run(s, version, &[a], "r").await;
    let mut disagree = record(r, a, "c1", "positive", true);
    disagree.grades.push(Grade {
        grader: "regex".into(),
        ..Grade::test_exact(false)
    });
    let mut flip_pass = record(r, a, "c2", "negative", true);
    flip_pass.repetition = 0;
    let mut flip_fail = record(r, a, "c2", "positive", false);
    flip_fail.repetition = 1;
    let mut flip_fail_again = record(r, a, "c2", "positive", false);
    flip_fail_again.repetition = 2;
    let steady = record(r, a, "c3", "neutral", true);
    s.append_request_records(&[disagree, flip_pass, flip_fail, flip_fail_again, steady])
        .await
        .unwrap();
    let added = bakeoff::app::review::fill_queue(s, r, "ana").await.unwrap();
    assert_eq!(added, 2, "{}", t.backend);
    let items = s.list_review_items(Some(r), 100).await.unwrap();
    let got: Vec<_> = items
        .iter()
        .map(|i| (i.case_id.as_str(), i.repetition, i.reasons.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("c1", 0, vec![Reason::GraderDisagreement]),
            ("c2", 0, vec![Reason::Flip]),
        ]
    );
    assert_eq!(
        bakeoff::app::review::fill_queue(s, r, "ana").await.unwrap(),
        0,
        "filled once"
    );
}

fn evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"review-e2e","task":"classification","prompt":"Say answer {{n}}","graders":[{"kind":"exact"}],"max_tokens":16}"#,
    );
    for i in 1..=4 {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i}\",\"vars\":{{\"n\":{i}}},\"expected\":\"answer number {i}\"}}"
        ));
    }
    EvalSetFile::parse("review-e2e.jsonl", &text).unwrap()
}

async fn start_mock(key: &EvalSetFile) -> MockServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    bakeoff::mock::spawn(
        MockConfig {
            profiles: vec![ModelProfile {
                ttft_ms: 5.0,
                accuracy: 1.0,
                ..ModelProfile::named("right")
            }],
            answer_keys: vec![key.clone()],
            seed: 5,
        },
        listener,
    )
    .await
    .unwrap()
}

const DEADLINE: Duration = Duration::from_secs(120);

/// The passed state of a run's one record of `case`.
async fn passed(store: &DynStore, run_id: i64, case: &str) -> bool {
    let records = store.list_case_records(run_id, &[case.to_string()]).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    records[0].grades.iter().all(|g| g.passed)
}

#[tokio::test]
async fn labels_from_the_queue_become_the_next_version_that_a_re_run_is_graded_against() {
    let app = spawn_app().await;
    let file = evalset();
    let mock = start_mock(&file).await;
    let v1 = app.store.save_evalset_version(&file).await.unwrap();
    let right = candidate_named(&app.store, "right", &mock.base_url()).await;
    let first = new_run(&app.store, v1, &[right], "before review").await;
    app.state.runner.start(first);
    tokio::time::timeout(DEADLINE, app.state.runner.wait(first))
        .await
        .unwrap();
    assert_eq!(
        app.store.get_run(first).await.unwrap().unwrap().status,
        RunStatus::Finished
    );
    assert!(passed(&app.store, first, "c3").await, "the mock answers the key");

    // Sent to the queue by hand from the case page; the queue page lists it.
    let r = app
        .client
        .post(app.url(&format!("/runs/{first}/review/add")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("candidate_id={right}&case_id=c3&repetition=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
    let (page, _) = app.page(&format!("/runs/{first}/review")).await;
    assert_eq!(page.count("tr[data-item]"), 1);

    // Labelled through the API, as a team's own tool would.
    let queue: serde_json::Value = app
        .get(&format!("/api/v1/runs/{first}/review"))
        .await
        .json()
        .await
        .unwrap();
    let item_id = queue["items"][0]["id"].as_i64().unwrap();
    let bad = app
        .client
        .post(app.url(&format!("/api/v1/review/items/{item_id}/label")))
        .json(&serde_json::json!({"verdict": "maybe", "score": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422, "refused field by field");
    let body = bad.text().await.unwrap();
    assert!(body.contains("verdict") && body.contains("score"), "{body}");
    let saved = app
        .client
        .post(app.url(&format!("/api/v1/review/items/{item_id}/label")))
        .json(&serde_json::json!({"verdict": "fail", "score": 0, "corrected_expected": "answer number 33", "note": "the key was wrong"}))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status().as_u16(), 200, "{}", saved.text().await.unwrap());
    let view: serde_json::Value = app
        .get(&format!("/api/v1/review/items/{item_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["item"]["status"], "labelled");
    assert_eq!(view["labels"][0]["labeller"], "local user (single-user mode)");
    assert_eq!(view["answer"], "answer number 3");

    // Saved as the next version: the diff shows what the humans changed.
    let r = app
        .client
        .post(app.url(&format!("/runs/{first}/review/ground-truth")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("x=y")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let diff = r.headers()["location"].to_str().unwrap().to_string();
    let (_, diff_text) = app.page(&diff).await;
    assert!(diff_text.contains("answer number 33"), "{diff}: {diff_text}");
    let v2 = app
        .store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "review-e2e")
        .unwrap()
        .latest_version_id;
    assert_ne!(v2, v1);
    let audited = app
        .store
        .list_audit(&Default::default(), 100, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect::<Vec<_>>();
    for action in ["review.queued", "review.labelled", "evalset.saved"] {
        assert!(audited.iter().any(|a| a == action), "{action}: {audited:?}");
    }

    // A re-run on the new version is graded against the correction; the old run keeps its own.
    let second = new_run(&app.store, v2, &[right], "after review").await;
    app.state.runner.start(second);
    tokio::time::timeout(DEADLINE, app.state.runner.wait(second))
        .await
        .unwrap();
    assert_eq!(
        app.store.get_run(second).await.unwrap().unwrap().status,
        RunStatus::Finished
    );
    assert!(
        !passed(&app.store, second, "c3").await,
        "graded against the corrected answer"
    );
    assert!(passed(&app.store, second, "c1").await, "the other cases are unchanged");
    assert_eq!(app.store.get_run(first).await.unwrap().unwrap().evalset_version_id, v1);
    assert!(passed(&app.store, first, "c3").await, "the old run keeps its grades");
}

/// What the API walk (`api_v1.rs`) needs to call every review path: an item of the run, and a
/// second candidate's answer to the same case for a blind comparison.
pub(crate) struct WalkReview {
    pub item: i64,
    pub case_id: String,
    pub second_candidate: i64,
}

/// Queues the first measured answer of `candidate` in `run` and stores a second candidate's
/// answer to its case.
pub(crate) async fn queue_for_walk(app: &crate::support::app::TestApp, run: i64, candidate: i64) -> WalkReview {
    let records = app.store.list_request_records(run).await.unwrap();
    let answer = records
        .iter()
        .find(|r| r.candidate_id == candidate && !r.is_warmup && r.phase == bakeoff::domain::run::Phase::Quality)
        .expect("a measured answer in the walk's run");
    let case_id = answer.case_id.to_string();
    app.store
        .add_review_items(
            &[NewReviewItem {
                run_id: run,
                candidate_id: candidate,
                case_id: case_id.clone(),
                repetition: answer.repetition,
                reasons: vec![Reason::Manual],
                detail: String::new(),
                added_by: "walk".into(),
            }],
            Timestamp::now(),
        )
        .await
        .unwrap();
    let item = app.store.list_review_items(Some(run), 1).await.unwrap()[0].id;
    let second_candidate = candidate_named(&app.store, "second-opinion", "http://127.0.0.1:9/v1").await;
    app.store
        .append_request_records(&[record(run, second_candidate, &case_id, "another answer", true)])
        .await
        .unwrap();
    WalkReview {
        item,
        case_id,
        second_candidate,
    }
}

#[tokio::test]
async fn viewers_read_the_queue_and_only_editors_label() {
    let app = spawn_app().await;
    let version = app
        .store
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = candidate_named(&app.store, "a", "http://127.0.0.1:9/v1").await;
    let r = new_run(&app.store, version, &[a], "r").await;
    app.store
        .append_request_records(&[record(r, a, "c1", "<i>positive</i>", true)])
        .await
        .unwrap();
    app.store
        .add_review_items(&[item(r, a, "c1", vec![Reason::Manual])], Timestamp::now())
        .await
        .unwrap();
    let item_id = app.store.list_review_items(Some(r), 1).await.unwrap()[0].id;
    let viewer = crate::api_v1::Api::new(&app, "vera", bakeoff::domain::accounts::Role::Viewer).await;
    let editor = crate::api_v1::Api::new(&app, "eddie", bakeoff::domain::accounts::Role::Editor).await;
    let read = viewer.get(&format!("/api/v1/review/items/{item_id}")).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(
        read.body["answer"], "<i>positive</i>",
        "raw in JSON, escaped where rendered"
    );
    let label = serde_json::json!({"verdict": "pass"});
    let refused = viewer
        .post(&format!("/api/v1/review/items/{item_id}/label"), &label)
        .await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(
        app.store.list_review_labels(Some(r)).await.unwrap().is_empty(),
        "nothing changed"
    );
    let saved = editor
        .post(&format!("/api/v1/review/items/{item_id}/label"), &label)
        .await;
    assert_eq!(saved.status, 200, "{saved:?}");
    let labels = app.store.list_review_labels(Some(r)).await.unwrap();
    assert_eq!(labels.len(), 1);
    assert_eq!(labels[0].labeller, "eddie");
}
