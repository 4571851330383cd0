//! One validation of a run's configuration (`app::runs::run_config`): the run form and the API
//! refuse a concurrency or a sweep maximum past `domain::load::MAX_CONCURRENCY` with an error
//! naming the field, store nothing, and take the largest allowed. (Settings files and
//! `bakeoff measure`'s flags are held to the same limits by the unit tests of
//! `app::files::settings` and `cli::measure_endpoint`.)
use bakeoff::domain::accounts::Role;
use bakeoff::domain::load::MAX_CONCURRENCY;
use serde_json::json;

use crate::api_v1::Api;
use crate::support::app::spawn_app;

fn form<'a>(version: &'a str, candidate: &'a str, load: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut fields = vec![
        ("evalset_version", version),
        ("candidate", candidate),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("retries", "0"),
        ("timeout_secs", "10"),
        ("stream", "on"),
    ];
    fields.extend_from_slice(load);
    fields
}

#[tokio::test]
async fn the_run_form_refuses_a_concurrency_or_sweep_past_the_limit_naming_the_field() {
    let app = spawn_app().await;
    let version = app.create_evalset().await.to_string();
    let candidate = app.create_candidate("alpha", "http://127.0.0.1:9/v1").await.to_string();
    let over = (MAX_CONCURRENCY + 1).to_string();

    let page = app
        .post_form_html("/runs", &form(&version, &candidate, &[("concurrency", &over)]))
        .await;
    assert_eq!(page.status, 422);
    let error = page.text("#f-concurrency-error");
    assert!(error.contains(&MAX_CONCURRENCY.to_string()), "{error}");

    let sweep = [
        ("concurrency", "1"),
        ("load_shape", "sweep"),
        ("sweep_max", over.as_str()),
    ];
    let page = app.post_form_html("/runs", &form(&version, &candidate, &sweep)).await;
    assert_eq!(page.status, 422);
    let error = page.text("#f-sweep_max-error");
    assert!(error.contains(&MAX_CONCURRENCY.to_string()), "{error}");
    assert_eq!(app.run_count().await, 0, "nothing stored");
}

#[tokio::test]
async fn the_api_refuses_a_concurrency_or_sweep_past_the_limit_naming_the_field() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("alpha", "http://127.0.0.1:9/v1").await;
    let api = Api::new(&app, "editor", Role::Editor).await;
    let over = MAX_CONCURRENCY + 1;
    for (settings, field) in [
        (json!({"concurrency": over}), "settings.concurrency"),
        (
            json!({"load": {"shape": "sweep", "sweep_max": over}}),
            "settings.load.sweep_max",
        ),
    ] {
        let a = api
            .post(
                "/api/v1/runs",
                &json!({"evalset_version_id": version, "candidate_ids": [candidate], "settings": settings}),
            )
            .await;
        assert_eq!(a.status, 422, "{a:?}");
        let fields: Vec<&str> = a.body["field_errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap())
            .collect();
        assert_eq!(fields, [field], "{a:?}");
    }
    assert_eq!(app.run_count().await, 0, "nothing stored");
}
