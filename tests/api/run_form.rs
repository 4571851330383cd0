//! The run form through HTTP: an open-loop rate is offered as Poisson or constant arrivals (the
//! estimate, the stored configuration and the run's conditions follow the choice; a forged
//! value is a field error), and the eval set preselected when none is named is chosen on
//! purpose (the demo's set in demo mode, else the most recently changed), not by name order.
use std::time::Duration;

use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{Phase, RunStatus};
use bakeoff::mock::{MockConfig, ModelProfile};

use crate::support::app::{TINY_EVALSET, TestApp, spawn_app, spawn_app_with};

fn rate_form<'a>(version: &'a str, candidate: &'a str, arrivals: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("evalset_version", version),
        ("candidate", candidate),
        ("concurrency", "2"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("retries", "0"),
        ("timeout_secs", "10"),
        ("stream", "on"),
        ("load_shape", "rate"),
        ("rate", "50"),
        ("arrivals", arrivals),
        ("requests_per_level", "6"),
    ]
}

fn query(fields: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

#[tokio::test]
async fn a_rate_run_can_be_constant_or_poisson_and_says_which() {
    let app = spawn_app().await;
    let file = EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap();
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 2.0,
            inter_token_ms: Some(1.0),
            ..ModelProfile::named("alpha-model")
        }],
        answer_keys: vec![file],
        seed: 3,
    })
    .await;
    let version = app.create_evalset().await.to_string();
    let alpha = app.create_candidate("alpha", &mock.base_url()).await.to_string();

    // The form offers both, Poisson by default.
    let page = app.get_html(&format!("/runs/new?evalset_version={version}")).await;
    let options = page.texts("#f-arrivals option");
    assert_eq!(options.len(), 2, "{options:?}");
    assert!(page.text("#f-arrivals option[selected]").starts_with("Poisson"));

    // The estimate's assumptions follow the choice (50 req/s: one every 20 ms).
    for (arrivals, expected) in [
        ("poisson", "Poisson arrivals (random gaps averaging 20 ms)"),
        ("constant", "constant arrivals (one every 20 ms)"),
    ] {
        let fields = rate_form(&version, &alpha, arrivals);
        let fragment = app.get_html(&format!("/runs/estimate?{}", query(&fields))).await;
        let assumptions = fragment.texts(".assumptions li").join(" | ");
        assert!(assumptions.contains(expected), "{arrivals}: {assumptions}");
        // "Update the estimate" keeps the choice.
        let form = app.get_html(&format!("/runs/new?{}", query(&fields))).await;
        assert_eq!(
            form.attr("#f-arrivals option[selected]", "value").as_deref(),
            Some(arrivals)
        );
    }

    // A forged value is a field error and nothing is stored.
    let page = app
        .post_form_html("/runs", &rate_form(&version, &alpha, "bursty"))
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-arrivals-error").contains("\"bursty\""),
        "{}",
        page.text("#f-arrivals-error")
    );
    assert_eq!(app.run_count().await, 0);

    // Constant arrivals are stored, sent, and named in the run's conditions.
    for (arrivals, poisson, words) in [
        ("constant", false, "constant rate of 50 req/s"),
        ("poisson", true, "Poisson rate of 50 req/s"),
    ] {
        let r = app.post_form("/runs", &rate_form(&version, &alpha, arrivals)).await;
        assert_eq!(r.status(), 303, "{arrivals}");
        let run = app.store.list_runs(1, 0).await.unwrap()[0].run.clone();
        assert_eq!(
            run.config.load,
            LoadShape::Rate {
                per_second: 50.0,
                poisson
            }
        );
        tokio::time::timeout(Duration::from_secs(60), app.state.runner.wait(run.id))
            .await
            .expect("the run ended in time");
        let stored = app.store.get_run(run.id).await.unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::Finished, "{arrivals}: {:?}", stored.error);
        let records = app.store.list_request_records(run.id).await.unwrap();
        let measured = records.iter().filter(|r| r.phase == Phase::Throughput).count();
        assert_eq!(measured, 6, "{arrivals}: requests_per_level");
        let page = app.get_html(&format!("/runs/{}", run.id)).await;
        let conditions = page.text(".conditions");
        assert!(conditions.contains(words), "{arrivals}: {conditions}");
    }
}

/// Stores `name` as a one-case eval set; returns its version id.
async fn save_set(app: &TestApp, name: &str) -> i64 {
    let text = format!(
        "{{\"bakeoff_evalset\":1,\"name\":\"{name}\",\"task\":\"classification\",\"prompt\":\"{{{{t}}}}\",\"graders\":[{{\"kind\":\"exact\"}}]}}\n{{\"id\":\"a\",\"vars\":{{\"t\":\"x\"}},\"expected\":\"y\"}}\n"
    );
    let file = EvalSetFile::parse(&format!("{name}.jsonl"), &text).expect("the set parses");
    app.store.save_evalset_version(&file).await.unwrap()
}

#[tokio::test]
async fn the_preselected_eval_set_is_chosen_on_purpose_not_by_name_order() {
    let selected = |page: &crate::support::app::Page| page.attr("#f-evalset_version option[selected]", "value");

    // Demo mode: the demo's set, although another set sorts first and is newer.
    let app = spawn_app_with(Some("http://127.0.0.1:1/v1")).await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), Some("http://127.0.0.1:1/v1"))
        .await
        .unwrap();
    let first_by_name = save_set(&app, "aaa-first-by-name").await;
    let sets = app.store.list_evalsets().await.unwrap();
    assert_eq!(sets[0].latest_version_id, first_by_name, "the list is in name order");
    let demo = sets
        .iter()
        .find(|s| s.name == bakeoff::app::demo::DEMO_EVALSET)
        .expect("the demo set is shipped");
    let page = app.get_html("/runs/new").await;
    assert_eq!(selected(&page), Some(demo.latest_version_id.to_string()));
    let page = app.get_html("/runs/new?preset=soak").await;
    assert_eq!(
        selected(&page),
        Some(demo.latest_version_id.to_string()),
        "a preset too"
    );
    // A named version still wins.
    let page = app
        .get_html(&format!("/runs/new?evalset_version={first_by_name}"))
        .await;
    assert_eq!(selected(&page), Some(first_by_name.to_string()));

    // Without the demo: the set changed last (what the team just imported), not the first name.
    let app = spawn_app().await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    save_set(&app, "aaa-first-by-name").await;
    let latest = save_set(&app, "team-set").await;
    let page = app.get_html("/runs/new").await;
    assert_eq!(selected(&page), Some(latest.to_string()));
    let fragment = app.get_html("/runs/estimate?concurrency=1&repetitions=1").await;
    assert!(
        fragment.text("[data-estimate=requests]").starts_with('1'),
        "the estimate is for the same one-case set: {}",
        fragment.text("#estimate")
    );
}
