//! The pages and API of measurement workers (docs/workers.md), on SQLite and PostgreSQL: the
//! workers page and `GET /api/v1/workers` list every worker that beat (live or silent, labels,
//! units, CPU), the run page shows which worker measured which unit with each unit's harness
//! report, and a candidate's worker labels are set from its page or `PUT
//! /api/v1/candidates/{id}/worker-labels` — refused with 422 and nothing changed when a label is
//! bad, audited when they change.
use bakeoff::domain::Timestamp;
use bakeoff::domain::audit::AuditFilter;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::domain::workers::WorkerStatus;
use serde_json::{Value, json};

use crate::support::app::{TestApp, spawn_app_on};
use crate::support::db::{TestStore, each_backend};
use crate::support::runs::RUN_DEADLINE;

fn worker(name: &str, labels: &[&str], embedded: bool) -> WorkerStatus {
    WorkerStatus {
        name: name.into(),
        labels: labels.iter().map(|l| l.to_string()).collect(),
        version: "9.9.9".into(),
        host: "<b>lab</b>".into(),
        pid: 4242,
        capacity: 2,
        embedded,
        started_at: Timestamp(0),
        heartbeat_at: Timestamp(0),
        lease_ms: 10_000,
        units_held: 1,
        cpu_share: Some(0.37),
        load_avg: Some(0.52),
    }
}

/// Audit entries of `action`, newest first.
async fn audited(app: &TestApp, action: &str) -> Vec<bakeoff::domain::audit::AuditEntry> {
    let filter = AuditFilter {
        action: Some(action.into()),
        ..Default::default()
    };
    app.store.list_audit(&filter, 100, 0).await.unwrap()
}

each_backend!(the_workers_page_and_api_list_every_worker_that_beat_live_or_silent);
async fn the_workers_page_and_api_list_every_worker_that_beat_live_or_silent(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let (page, _) = app.page("/workers").await;
    assert_eq!(page.count("#no-workers"), 1, "{b}: the empty state says so");
    assert_eq!(page.count("table.workers"), 0, "{b}");
    assert!(page.text("#worker-caps").contains("at most 4 runs at once"), "{b}");
    let me = app.state.runner.identity().name.clone();
    assert!(
        page.text("#this-worker").contains(&me),
        "{b}: this server's worker is named"
    );
    assert_eq!(
        page.attr("li.nav-secondary a[href='/workers']", "aria-current")
            .as_deref(),
        Some("page")
    );

    app.store
        .worker_beat(&worker("eu-1", &["eu", "gpu-a"], false), 10_000)
        .await
        .unwrap();
    // A lease of 1 ms, then silence: it has lost its leases.
    app.store.worker_beat(&worker("gone", &[], true), 1).await.unwrap();
    crate::support::wait::until(
        "the 1 ms lease to run out",
        std::time::Duration::from_secs(10),
        || async {
            let now = app.store.database_now().await.unwrap();
            let workers = app.store.list_workers().await.unwrap();
            !workers.iter().find(|w| w.name == "gone").unwrap().is_live(now)
        },
    )
    .await;

    let (page, body) = app.page("/workers").await;
    assert_eq!(page.count("#no-workers"), 0, "{b}");
    let eu = "tr[data-worker='eu-1']";
    assert_eq!(page.attr(eu, "data-live").as_deref(), Some("true"), "{b}");
    assert_eq!(page.text(&format!("{eu} td[data-labels]")), "eu, gpu-a", "{b}");
    assert_eq!(page.text(&format!("{eu} td[data-units]")), "1 / 2", "{b}");
    assert_eq!(page.text(&format!("{eu} td[data-cpu]")), "37 % of one core", "{b}");
    assert_eq!(page.text(&format!("{eu} td[data-load]")), "0.52", "{b}");
    let row = page.text(eu);
    assert!(row.contains("bakeoff worker") && row.contains("9.9.9"), "{b}: {row}");
    let beat = page.text(&format!("{eu} td[data-heartbeat]"));
    assert!(beat.starts_with("live") && beat.contains(" s ago"), "{b}: {beat}");
    assert!(row.contains("<b>lab</b> (4242)"), "{b}: the host as text: {row}");
    assert!(!body.contains("<b>lab</b>"), "{b}: the host is escaped");
    let gone = "tr[data-worker='gone']";
    assert_eq!(page.attr(gone, "data-live").as_deref(), Some("false"), "{b}");
    assert!(page.text(gone).contains("silent"), "{b}");
    assert!(page.text(gone).contains("embedded (serve)"), "{b}");
    assert!(page.text("main").contains("1 of 2 workers live"), "{b}");

    let api: Value = app.get("/api/v1/workers").await.json().await.unwrap();
    assert_eq!(api["this_server"]["name"], me.as_str(), "{b}: {api}");
    assert_eq!(api["this_server"]["measures"], true);
    assert_eq!(api["caps"]["max_runs"], 4);
    let items = api["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{b}: {api}");
    let eu = items.iter().find(|w| w["name"] == "eu-1").unwrap();
    assert_eq!(eu["labels"], json!(["eu", "gpu-a"]));
    assert_eq!(eu["live"], true);
    assert_eq!(eu["embedded"], false);
    assert_eq!(eu["units_held"], 1);
    assert_eq!(eu["cpu_share"], 0.37);
    assert!(eu["since_heartbeat_ms"].as_i64().unwrap() >= 0, "{eu}");
    let gone = items.iter().find(|w| w["name"] == "gone").unwrap();
    assert_eq!(gone["live"], false, "{gone}");
}

each_backend!(
    a_run_measured_by_this_servers_worker_shows_it_on_the_workers_page_and_per_unit_on_the_run_page,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn a_run_measured_by_this_servers_worker_shows_it_on_the_workers_page_and_per_unit_on_the_run_page(
    db: TestStore,
) {
    let mock = crate::gate::mock().await;
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let version = app.create_evalset().await;
    let spec = CandidateDraft {
        name: "right".into(),
        provider: "openai-chat".into(),
        base_url: mock.base_url(),
        model: "right".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let candidate = app
        .store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = app
        .store
        .create_run(&NewRun {
            name: "measured by a worker".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                warmup_requests: 0,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    // Before it is admitted, a run has no units and its page no units section.
    let (page, _) = app.page(&format!("/runs/{run}")).await;
    assert_eq!(page.count(".run-units"), 0, "{b}");

    app.state.runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(run))
        .await
        .expect("the run ended in time");
    assert_eq!(
        app.store.get_run(run).await.unwrap().unwrap().status,
        RunStatus::Finished,
        "{b}"
    );
    let me = app.state.runner.identity().name.clone();

    let (page, _) = app.page("/workers").await;
    let row = format!("tr[data-worker='{me}']");
    assert_eq!(
        page.count(&row),
        1,
        "{b}: this server's worker beat: {}",
        page.text("main")
    );
    assert_eq!(page.attr(&row, "data-live").as_deref(), Some("true"), "{b}");
    assert!(page.text(&row).contains("(this server)"), "{b}");
    assert!(page.text(&row).contains(bakeoff::VERSION), "{b}");

    let (page, body) = app.page(&format!("/runs/{run}")).await;
    assert_eq!(
        page.count(".run-units tr[data-unit]"),
        2,
        "{b}: one unit per candidate, then the closing step"
    );
    let first = "tr[data-unit='0']";
    assert_eq!(page.text(&format!("{first} th")), "right", "{b}");
    assert_eq!(page.attr(first, "data-unit-status").as_deref(), Some("done"), "{b}");
    assert_eq!(page.text(&format!("{first} td[data-unit-worker]")), me, "{b}");
    assert_eq!(
        page.attr(&format!("{first} td[data-claims]"), "data-claims").as_deref(),
        Some("1")
    );
    assert!(!page.text(first).contains("taken over"), "{b}");
    let cpu = page.text(&format!("{first} [data-unit-harness='cpu_s']"));
    assert!(cpu.contains("s wall"), "{b}: the unit's harness report: {cpu}");
    let verdict = page.text(&format!("{first} [data-unit-harness='verdict']"));
    assert!(verdict.contains("reliable"), "{b}: {verdict}");
    assert!(page.text("tr[data-unit='1'] th").contains("closing step"), "{b}");
    assert_eq!(page.text("tr[data-unit='1'] td[data-unit-worker]"), me, "{b}");
    assert!(body.contains("href=\"/workers\""), "{b}");

    // A unit taken over (claimed twice) says so.
    app.execute_raw(&format!(
        "UPDATE run_units SET claims = 2 WHERE run_id = {run} AND seq = 0"
    ))
    .await;
    let (page, _) = app.page(&format!("/runs/{run}")).await;
    assert!(page.text(first).contains("2 taken over"), "{b}: {}", page.text(first));
}

each_backend!(the_labels_form_saves_refuses_bad_labels_with_422_and_audits_each_change);
async fn the_labels_form_saves_refuses_bad_labels_with_422_and_audits_each_change(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let id = app.create_candidate("far-away", "http://127.0.0.1:1/v1").await;
    let path = format!("/candidates/{id}/worker-labels");
    let (page, _) = app.page(&format!("/candidates/{id}")).await;
    assert!(page.text("#worker-labels").contains("any worker"), "{b}");
    assert_eq!(page.attr("#f-labels", "value").as_deref(), Some(""), "{b}");

    let r = app.post_form(&path, &[("labels", "GPU-a, eu eu")]).await;
    assert_eq!(r.status(), 303, "{b}");
    assert_eq!(r.headers()["location"], format!("/candidates/{id}").as_str());
    let stored = app.store.candidate_worker_labels().await.unwrap();
    assert_eq!(stored, vec![(id, vec!["eu".to_string(), "gpu-a".to_string()])], "{b}");
    let (page, _) = app.page(&format!("/candidates/{id}")).await;
    assert_eq!(page.text("#worker-labels"), "eu, gpu-a", "{b}");
    assert_eq!(page.attr("#f-labels", "value").as_deref(), Some("eu, gpu-a"), "{b}");
    let (list, _) = app.page("/candidates").await;
    assert_eq!(
        list.attr("[data-worker-labels]", "data-worker-labels").as_deref(),
        Some("eu, gpu-a"),
        "{b}"
    );
    let entries = audited(&app, "candidate.worker_labels").await;
    assert_eq!(entries.len(), 1, "{b}");
    assert!(entries[0].target.contains("far-away"), "{b}: {:?}", entries[0]);
    assert!(
        entries[0].detail.contains("eu,gpu-a") && entries[0].detail.contains("was none"),
        "{b}: {:?}",
        entries[0]
    );

    // A bad label: 422, the page says which and keeps what was typed, nothing changes.
    let page = app.post_form_html(&path, &[("labels", "eu, <script>x</script>")]).await;
    assert_eq!(page.status, 422, "{b}");
    let error = page.text("#f-labels-error");
    assert!(
        error.contains("<script>x</script>") && error.contains("Nothing was changed"),
        "{b}: {error}"
    );
    assert_eq!(page.attr("#f-labels", "aria-invalid").as_deref(), Some("true"));
    assert_eq!(
        page.attr("#f-labels", "value").as_deref(),
        Some("eu, <script>x</script>"),
        "{b}: what was typed, escaped"
    );
    assert_eq!(page.count("script:not([src])"), 0, "{b}: nothing typed runs");
    assert_eq!(app.store.candidate_worker_labels().await.unwrap(), stored, "{b}");
    assert_eq!(audited(&app, "candidate.worker_labels").await.len(), 1, "{b}");

    // The same labels again change nothing and are not audited; blank clears them.
    assert_eq!(app.post_form(&path, &[("labels", "eu,gpu-a")]).await.status(), 303);
    assert_eq!(audited(&app, "candidate.worker_labels").await.len(), 1, "{b}");
    assert_eq!(app.post_form(&path, &[("labels", "  ")]).await.status(), 303);
    assert!(app.store.candidate_worker_labels().await.unwrap().is_empty(), "{b}");
    let entries = audited(&app, "candidate.worker_labels").await;
    assert_eq!(entries.len(), 2, "{b}");
    assert!(entries[0].detail.contains("none (any worker)"), "{b}: {:?}", entries[0]);

    // Unknown candidate: 404.
    assert_eq!(
        app.post_form("/candidates/999999/worker-labels", &[("labels", "eu")])
            .await
            .status(),
        404
    );
}

each_backend!(the_worker_labels_api_sets_refuses_and_audits);
async fn the_worker_labels_api_sets_refuses_and_audits(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let id = app.create_candidate("near", "http://127.0.0.1:1/v1").await;
    let url = app.url(&format!("/api/v1/candidates/{id}/worker-labels"));
    let put = |body: Value| {
        app.client
            .put(url.clone())
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let r = put(json!({"labels": ["eu", "GPU-A", "eu"]})).await.unwrap();
    assert_eq!(r.status(), 200, "{b}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"labels": ["eu", "gpu-a"]}), "{b}");
    let one: Value = app.get(&format!("/api/v1/candidates/{id}")).await.json().await.unwrap();
    assert_eq!(one["worker_labels"], json!(["eu", "gpu-a"]), "{b}: {one}");
    let all: Value = app.get("/api/v1/candidates").await.json().await.unwrap();
    assert_eq!(all["items"][0]["worker_labels"], json!(["eu", "gpu-a"]), "{b}");
    assert_eq!(audited(&app, "candidate.worker_labels").await.len(), 1, "{b}");

    // Refused, naming the item; nothing changed.
    let r = put(json!({"labels": ["ok", "a b", "x/y"]})).await.unwrap();
    assert_eq!(r.status(), 422, "{b}");
    let problem: Value = r.json().await.unwrap();
    let fields: Vec<&str> = problem["field_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["labels[1]", "labels[2]"], "{b}: {problem}");
    assert_eq!(put(json!({"labels": "eu"})).await.unwrap().status(), 400, "{b}");
    assert_eq!(
        app.store.candidate_worker_labels().await.unwrap(),
        vec![(id, vec!["eu".to_string(), "gpu-a".to_string()])],
        "{b}"
    );
    assert_eq!(audited(&app, "candidate.worker_labels").await.len(), 1, "{b}");

    let r = app
        .client
        .put(app.url("/api/v1/candidates/999999/worker-labels"))
        .header("content-type", "application/json")
        .body(json!({"labels": []}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "{b}");
}
