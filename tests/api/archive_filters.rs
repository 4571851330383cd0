//! The archive filtered by threshold profile and verdict: verdicts stored per (run, profile,
//! candidate) on both stores, replaced by saved scorecards, brought over from scorecards saved
//! before they existed; judged by the background worker when runs finish against the mock; and
//! the page's filters, explanation and errors.
use std::time::Duration;

use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::pipeline::PipelineSpec;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::domain::scorecard::{NewScorecard, RecordedVerdict, Verdict};
use bakeoff::domain::thresholds::key::MetricKey;
use bakeoff::domain::thresholds::{Comparator, ThresholdRule};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::{DynStore, RunFilter, RunListItem};
use tokio::net::TcpListener;

use crate::support::app::spawn_app;
use crate::support::db::{TestStore, each_backend};

const DEADLINE: Duration = Duration::from_secs(90);

fn accuracy_at_least(value: f64) -> Vec<ThresholdRule> {
    vec![ThresholdRule {
        metric: "accuracy".into(),
        comparator: Comparator::AtLeast,
        value,
        unit: MetricKey::parse("accuracy")
            .unwrap()
            .def()
            .unit
            .stored_name()
            .to_string(),
        rationale: "test".into(),
    }]
}

fn verdict(candidate_id: i64, v: Verdict) -> RecordedVerdict {
    RecordedVerdict {
        candidate_id,
        candidate: format!("#{candidate_id}"),
        verdict: v,
    }
}

fn ids(items: Vec<RunListItem>) -> Vec<i64> {
    items.into_iter().map(|i| i.run.id).collect()
}

each_backend!(runs_filter_by_profile_and_verdict_on_both_stores);
async fn runs_filter_by_profile_and_verdict_on_both_stores(t: TestStore) {
    let s = &t.store;
    let b = t.backend;
    let file = EvalSetFile::parse("tiny.jsonl", crate::support::app::TINY_EVALSET).unwrap();
    let version = s.save_evalset_version(&file).await.unwrap();
    let mut cands = Vec::new();
    for name in ["a", "b"] {
        let spec = bakeoff::domain::candidate::CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            model: name.into(),
            ..Default::default()
        }
        .validate(None)
        .unwrap();
        cands.push(
            s.create_candidate(&crate::support::checked::admin_new(&spec))
                .await
                .unwrap(),
        );
    }
    let (a, bb) = (cands[0], cands[1]);
    let mut runs = Vec::new();
    for (name, candidates, status) in [
        ("both", vec![a, bb], RunStatus::Finished),
        ("a only", vec![a], RunStatus::Finished),
        ("b failed", vec![bb], RunStatus::Failed),
    ] {
        let id = s
            .create_run(&NewRun {
                name: name.into(),
                evalset_version_id: version,
                candidate_ids: candidates,
                config: RunConfig::default(),
            })
            .await
            .unwrap();
        s.set_run_status(id, status, None).await.unwrap();
        runs.push(id);
    }
    let (both, a_only, failed) = (runs[0], runs[1], runs[2]);
    let (p, _) = s
        .save_threshold_profile("strict", "", &accuracy_at_least(0.9), "ana", "first")
        .await
        .unwrap();
    let (q, _) = s
        .save_threshold_profile("lenient", "", &accuracy_at_least(0.5), "ana", "first")
        .await
        .unwrap();
    let unjudged = s.unjudged_runs(100).await.unwrap();
    assert_eq!(
        unjudged,
        [(both, p), (both, q), (a_only, p), (a_only, q)],
        "{b}: finished runs only, oldest first"
    );

    s.save_run_verdicts(both, p, 1, &[verdict(a, Verdict::Go), verdict(bb, Verdict::NoGo)])
        .await
        .unwrap();
    s.save_run_verdicts(a_only, p, 1, &[verdict(a, Verdict::Inconclusive)])
        .await
        .unwrap();
    let f = |profile: Option<i64>, v: Option<Verdict>, candidate: Option<i64>| RunFilter {
        profile_id: profile,
        verdict: v,
        candidate_id: candidate,
        terminal_only: true,
        ..Default::default()
    };
    let list = |filter: RunFilter| async move { ids(s.list_runs_filtered(&filter, 10, 0).await.unwrap()) };
    assert_eq!(list(f(Some(p), None, None)).await, [a_only, both], "{b}");
    assert_eq!(list(f(Some(q), None, None)).await, Vec::<i64>::new(), "{b}");
    assert_eq!(list(f(Some(p), Some(Verdict::Go), None)).await, [both], "{b}");
    assert_eq!(list(f(Some(p), Some(Verdict::NoGo), None)).await, [both], "{b}");
    assert_eq!(
        list(f(Some(p), Some(Verdict::NoGo), Some(a))).await,
        Vec::<i64>::new(),
        "{b}: the verdict is the filtered candidate's"
    );
    assert_eq!(
        list(f(Some(p), Some(Verdict::Inconclusive), Some(a))).await,
        [a_only],
        "{b}"
    );
    assert_eq!(
        s.count_runs_filtered(&f(Some(p), Some(Verdict::Go), None))
            .await
            .unwrap(),
        1,
        "{b}"
    );
    // Server-side pagination holds with the new filters.
    assert_eq!(
        ids(s.list_runs_filtered(&f(Some(p), None, None), 1, 1).await.unwrap()),
        [both],
        "{b}"
    );
    let pending = |profile: i64| RunFilter {
        not_judged_by: Some(profile),
        ..Default::default()
    };
    assert_eq!(s.count_runs_filtered(&pending(p)).await.unwrap(), 0, "{b}");
    assert_eq!(
        ids(s.list_runs_filtered(&pending(q), 10, 0).await.unwrap()),
        [a_only, both],
        "{b}: finished runs not judged by q"
    );
    let stored = s.list_run_verdicts(&[both, a_only, failed], p).await.unwrap();
    assert_eq!(stored.len(), 3, "{b}");
    assert!(
        stored
            .iter()
            .all(|v| v.scorecard_id.is_none() && v.profile_version == 1)
    );

    // Saving a scorecard replaces the run's verdicts by that profile.
    let card = s
        .save_scorecard(&NewScorecard {
            run_id: both,
            profile_id: p,
            profile_version: 1,
            incumbent: Some(a),
            pipeline: PipelineSpec::default(),
            created_by: "ana".into(),
            note: String::new(),
            verdicts: vec![verdict(a, Verdict::NoGo), verdict(bb, Verdict::NoGo)],
        })
        .await
        .unwrap();
    assert_eq!(
        list(f(Some(p), Some(Verdict::Go), None)).await,
        Vec::<i64>::new(),
        "{b}"
    );
    let stored = s.list_run_verdicts(&[both], p).await.unwrap();
    assert_eq!(stored.len(), 2, "{b}");
    assert!(
        stored
            .iter()
            .all(|v| v.scorecard_id == Some(card) && v.verdict == Verdict::NoGo)
    );
    assert!(
        s.list_run_verdicts(&[both], q).await.unwrap().is_empty(),
        "{b}: other profiles untouched"
    );
    assert_eq!(s.unjudged_runs(100).await.unwrap(), [(both, q), (a_only, q)], "{b}");

    // Unknown runs or profiles are refused, nothing stored.
    assert!(
        s.save_run_verdicts(9_999, p, 1, &[verdict(a, Verdict::Go)])
            .await
            .is_err()
    );
    assert!(
        s.save_run_verdicts(both, 9_999, 1, &[verdict(a, Verdict::Go)])
            .await
            .is_err()
    );

    // A database whose scorecards predate the verdicts table gets their verdicts on migration.
    t.execute_raw("DROP TABLE run_verdicts").await.unwrap();
    t.execute_raw("DELETE FROM _sqlx_migrations WHERE version = 9")
        .await
        .unwrap();
    let again = crate::support::db::open(&t.url).await;
    let backfilled = again.list_run_verdicts(&[both, a_only], p).await.unwrap();
    assert_eq!(backfilled.len(), 2, "{b}: only the scorecard's verdicts come back");
    assert!(
        backfilled
            .iter()
            .all(|v| v.run_id == both && v.scorecard_id == Some(card) && v.verdict == Verdict::NoGo),
        "{b}: {backfilled:?}"
    );
}

// ----------------------------------------------------------------- through the app

fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"verdict-test","task":"generation","prompt":"Say {{n}}","graders":[{"kind":"exact"}],"max_tokens":32}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"answer number {i}\"}}"
        ));
    }
    EvalSetFile::parse("verdict-test.jsonl", &text).unwrap()
}

async fn start_mock(key: &EvalSetFile) -> MockServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let right = ModelProfile {
        ttft_ms: 5.0,
        accuracy: 1.0,
        ..ModelProfile::named("right")
    };
    let wrong = ModelProfile {
        ttft_ms: 5.0,
        accuracy: 0.0,
        ..ModelProfile::named("wrong")
    };
    bakeoff::mock::spawn(
        MockConfig {
            profiles: vec![right, wrong],
            answer_keys: vec![key.clone()],
            seed: 3,
        },
        listener,
    )
    .await
    .unwrap()
}

fn spec(name: &str, base_url: &str) -> CandidateSpec {
    CandidateSpec {
        api_key: Some(Secret::new("sk-verdict-test")),
        ..CandidateSpec::openai_chat(name, base_url, name)
    }
}

async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::wait::until(what, DEADLINE, check).await;
}

async fn run_on(store: &DynStore, version: i64, name: &str, candidate: i64) -> i64 {
    store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 4,
                warmup_requests: 0,
                temperature: Some(0.0),
                retries: 0,
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn finished_runs_are_judged_and_the_archive_filters_by_verdict() {
    let app = spawn_app().await;
    let file = evalset(10);
    let mock = start_mock(&file).await;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let right = app
        .store
        .create_candidate(&crate::support::checked::admin_new(&spec("right", &mock.base_url())))
        .await
        .unwrap();
    let wrong = app
        .store
        .create_candidate(&crate::support::checked::admin_new(&spec("wrong", &mock.base_url())))
        .await
        .unwrap();
    // 10 / 10 has a one-sided 95 % lower bound above 50 %; 0 / 10 an upper bound below it.
    let (profile, _) = app
        .store
        .save_threshold_profile("half right", "", &accuracy_at_least(0.5), "ana", "test")
        .await
        .unwrap();
    let good = run_on(&app.store, version, "good", right).await;
    let bad = run_on(&app.store, version, "bad", wrong).await;
    app.state.runner.start(good);
    app.state.runner.start(bad);
    for id in [good, bad] {
        tokio::time::timeout(DEADLINE, app.state.runner.wait(id)).await.unwrap();
        assert_eq!(
            app.store.get_run(id).await.unwrap().unwrap().status,
            RunStatus::Finished
        );
    }
    // Not judged yet (the worker starts below): the page says how many are left out.
    let page = app.get_html("/archive?verdict=GO").await;
    assert_eq!(page.count("tr[data-run]"), 0);
    assert!(
        page.text("#verdicts-pending")
            .contains("2 finished runs are not judged by half right yet"),
        "{}",
        page.text("#verdicts-pending")
    );
    bakeoff::app::verdicts::spawn(app.state.store.clone(), app.state.runner.clone());
    until("both runs are judged", || async {
        app.store.list_run_verdicts(&[good, bad], profile).await.unwrap().len() == 2
    })
    .await;

    let page = app.get_html(&format!("/archive?profile={profile}&verdict=GO")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.count("tr[data-run]"), 1);
    assert_eq!(page.attr("tr[data-run]", "data-run"), Some(good.to_string()));
    let cell = page.text("tr[data-run] .run-verdicts");
    assert!(cell.contains("right GO by half right v1"), "{cell}");
    assert!(page.text("#verdict-source").contains("half right"));
    assert!(page.text("#verdict-source").contains("when it ends"));
    assert_eq!(
        page.attr("tr[data-run] .run-verdicts a.verdict", "href"),
        Some(format!("/runs/{good}/scorecard?profile={profile}&version=1"))
    );

    let page = app.get_html(&format!("/archive?profile={profile}&verdict=NO-GO")).await;
    assert_eq!(page.attr("tr[data-run]", "data-run"), Some(bad.to_string()));
    assert!(page.text("tr[data-run] .run-verdicts").contains("wrong NO-GO"));
    // A verdict without a profile is judged by the default (here the only) profile, shown chosen.
    let page = app.get_html("/archive?verdict=NO-GO").await;
    assert_eq!(page.attr("tr[data-run]", "data-run"), Some(bad.to_string()));
    assert_eq!(
        page.attr("#f-profile option[selected]", "value"),
        Some(profile.to_string())
    );
    let page = app
        .get_html(&format!("/archive?profile={profile}&verdict=INCONCLUSIVE"))
        .await;
    assert_eq!(page.count("tr[data-run]"), 0);
    // Unfiltered, the verdict column still shows each run's verdicts.
    let page = app.get_html("/archive").await;
    assert_eq!(page.count("tr[data-run]"), 2);
    assert_eq!(page.count("#verdicts-pending"), 0, "every finished run is judged");
    assert_eq!(page.count(".run-verdicts .verdict"), 2);
    // The runs list and the overview show the same verdicts, and how long each run took.
    for path in ["/runs", "/"] {
        let page = app.get_html(path).await;
        assert_eq!(page.count(".run-verdicts .verdict"), 2, "{path}");
        assert!(
            page.texts(".run-verdicts").iter().any(|t| t.contains("wrong NO-GO")),
            "{path}"
        );
        // The runs table (the overview also has its table of recent decisions).
        let header: Vec<String> = page.texts("table.list:not(.decisions-table) thead th");
        let at = header.iter().position(|h| h == "Duration").expect("a Duration column");
        let durations: Vec<String> = page
            .select("table.list:not(.decisions-table) tbody tr")
            .iter()
            .map(|tr| {
                crate::support::app::text_of(&tr.select(&scraper::Selector::parse("td").unwrap()).nth(at).unwrap())
            })
            .collect();
        assert!(
            durations.iter().all(|d| d.ends_with('s') || d.ends_with("min")),
            "{path}: {durations:?}"
        );
    }
    // The nav bar leads to the archive and marks it current.
    assert_eq!(
        page.attr("nav a[href=\"/archive\"]", "aria-current").as_deref(),
        Some("page")
    );

    // A scorecard saved for the run with this profile replaces the verdict, and says so.
    let card = app
        .store
        .save_scorecard(&NewScorecard {
            run_id: good,
            profile_id: profile,
            profile_version: 1,
            incumbent: None,
            pipeline: PipelineSpec::default(),
            created_by: "ana".into(),
            note: "judged by hand".into(),
            verdicts: vec![verdict(right, Verdict::NoGo)],
        })
        .await
        .unwrap();
    let page = app.get_html(&format!("/archive?profile={profile}&verdict=NO-GO")).await;
    assert_eq!(page.count("tr[data-run]"), 2);
    let cell = page.text(&format!("tr[data-run=\"{good}\"] .run-verdicts"));
    assert!(
        cell.contains(&format!("NO-GO by half right v1, saved scorecard #{card}")),
        "{cell}"
    );
    assert_eq!(
        page.attr(&format!("tr[data-run=\"{good}\"] a.verdict"), "href"),
        Some(format!("/scorecards/{card}"))
    );
    assert_eq!(
        app.get_html(&format!("/archive?profile={profile}&verdict=GO"))
            .await
            .count("tr[data-run]"),
        0
    );

    // Bad filters name the field and change nothing.
    let bad_verdict = app.get_html("/archive?verdict=MAYBE").await;
    assert_eq!(bad_verdict.status, 400);
    assert!(bad_verdict.html.html().contains("verdict filter"));
    assert_eq!(app.get_html("/archive?profile=abc").await.status, 400);
    assert_eq!(app.get_html("/archive?profile=999").await.status, 404);
}
