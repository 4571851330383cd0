//! The web layer through real HTTP (and in-process with `oneshot` where that is enough):
//! pages render, forms validate and store nothing on bad input, keys are never shown, model
//! output is escaped, lists paginate, static files carry their types.
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{ErrorClass, RequestRecord, RunStatus, TimingClock};
use tower::ServiceExt;

use crate::support::app::{Page, TestApp, record, spawn_app, spawn_app_with, text_of};

/// A base URL nothing listens on (port 1), for candidates that must never be reached.
const DEAD_URL: &str = "http://127.0.0.1:1/v1";

fn valid_candidate(name: &str) -> Vec<(&str, &str)> {
    vec![
        ("name", name),
        ("provider", "openai-chat"),
        ("base_url", "http://127.0.0.1:9/v1"),
        ("model", "m-1"),
        ("hardware", "1× H100"),
        ("claimed_tps", "2158"),
        ("claimed_caliber", "per-stream decode"),
        ("claimed_conditions", "batch 1"),
    ]
}

fn location(r: &reqwest::Response) -> String {
    r.headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

async fn seeded_run(app: &TestApp) -> (i64, i64, i64) {
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("alpha", DEAD_URL).await;
    let run = app.create_run("seeded", version, &[candidate]).await;
    (version, candidate, run)
}

#[tokio::test]
async fn every_page_renders_with_the_layout() {
    let app = spawn_app().await;
    let (version, candidate, run) = seeded_run(&app).await;
    let pages = [
        ("/", "Overview"),
        ("/candidates", "Candidates"),
        ("/candidates/new", "Add a candidate"),
        (&format!("/candidates/{candidate}/edit"), "Edit candidate alpha"),
        ("/evalsets", "Eval sets"),
        (&format!("/evalsets/{version}"), "tiny"),
        ("/runs", "Runs"),
        ("/runs/new", "Start a run"),
        (&format!("/runs/{run}"), "Run #"),
        ("/measure", "How we measure"),
        ("/audit", "Audit log"),
        ("/workers", "Workers"),
        ("/workloads", "Workloads"),
    ];
    for (path, title) in pages {
        let page = app.get_html(path).await;
        assert_eq!(page.status, 200, "GET {path}");
        assert!(page.title().contains(title), "GET {path}: title {:?}", page.title());
        assert_eq!(
            page.texts("header nav .nav-links a"),
            [
                "Overview",
                "Candidates",
                "Eval sets",
                "Thresholds",
                "Runs",
                "Archive",
                "Scorecards",
                "Schedules",
                "Workloads",
                "Workers",
                "Audit",
                "How we measure"
            ],
            "GET {path}: nav"
        );
        assert!(
            page.text("footer").contains(bakeoff::VERSION),
            "GET {path}: footer names the version"
        );
    }
    let runs = app.get_html("/runs").await;
    assert_eq!(runs.text("nav a[aria-current=page]"), "Runs");
}

#[tokio::test]
async fn measure_page_publishes_every_definition_in_process() {
    let app = spawn_app().await;
    let response = app
        .router()
        .oneshot(Request::get("/measure").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let page = Page::parse(200, &String::from_utf8_lossy(&body));
    let labels = page.texts("table.defs tbody td code");
    for label in [
        "TTFT",
        "TTFA",
        "E2E",
        "ICL",
        "ITL",
        "TPOT",
        "decode tok/s/stream",
        "e2e tok/s/stream",
    ] {
        assert!(labels.iter().any(|l| l == label), "missing {label:?} in {labels:?}");
    }
    assert!(
        labels.iter().any(|l| l == "aggregate tok/s @c=8 (steady window)"),
        "{labels:?}"
    );
    assert!(
        labels.iter().any(|l| l == "aggregate tok/s @c=8 (whole run)"),
        "{labels:?}"
    );
}

#[tokio::test]
async fn overview_counts_and_demo_note() {
    let app = spawn_app_with(Some("http://127.0.0.1:7777/v1")).await;
    seeded_run(&app).await;
    let page = app.get_html("/").await;
    assert_eq!(page.status, 200);
    let counts = page.texts(".counts .count");
    assert!(counts.contains(&"1 candidate".to_string()), "{counts:?}");
    assert!(counts.contains(&"1 run".to_string()), "{counts:?}");
    assert!(page.text(".notice").contains("http://127.0.0.1:7777/v1"));
    assert_eq!(page.count(".recent-runs table.list tbody tr"), 1, "recent runs");

    let plain = spawn_app().await;
    assert_eq!(
        plain.get_html("/").await.count(".notice"),
        0,
        "no demo note without the mock"
    );
}

#[tokio::test]
async fn candidate_created_through_the_form_is_listed() {
    let app = spawn_app().await;
    let r = app.post_form("/candidates", &valid_candidate("vllm-llama")).await;
    assert_eq!(r.status(), 303);
    assert!(location(&r).starts_with("/candidates?added="), "{}", location(&r));
    assert_eq!(app.candidate_count().await, 1);

    let page = app.get_html("/candidates").await;
    let rows = page.select("table.candidates tbody tr");
    assert_eq!(rows.len(), 1);
    let row = text_of(&rows[0]);
    for needle in [
        "vllm-llama",
        "openai-chat",
        "m-1",
        "http://127.0.0.1:9/v1",
        "1× H100",
        "2158 tok/s, per-stream decode, batch 1",
        "none",
    ] {
        assert!(row.contains(needle), "row lacks {needle:?}: {row}");
    }
}

#[tokio::test]
async fn bad_candidate_input_is_shown_next_to_each_field_and_nothing_is_stored() {
    let app = spawn_app().await;
    let mut fields = valid_candidate("");
    fields.retain(|(k, _)| *k != "base_url");
    fields.push(("base_url", "ftp://files.example"));
    fields.push(("temperature", "7"));
    let page = app.post_form_html("/candidates", &fields).await;
    assert_eq!(page.status, 422);
    assert!(page.text(".form-errors").contains("Nothing was saved"));
    assert_eq!(page.attr("#f-name", "aria-invalid").as_deref(), Some("true"));
    assert_eq!(page.text("#f-name-error"), "⚠ Name is required".replace("⚠ ", ""));
    assert!(page.text("#f-base_url-error").contains("http:// or https://"));
    assert!(page.text("#f-temperature-error").contains("between 0 and 2"));
    // What was typed is kept, and valid fields are not marked.
    assert_eq!(
        page.attr("#f-base_url", "value").as_deref(),
        Some("ftp://files.example")
    );
    assert_eq!(page.attr("#f-model", "value").as_deref(), Some("m-1"));
    assert_eq!(page.attr("#f-model", "aria-invalid"), None);
    assert!(
        page.attr("#f-name", "aria-describedby")
            .unwrap()
            .contains("f-name-error")
    );
    assert_eq!(app.candidate_count().await, 0);
}

#[tokio::test]
async fn overlong_field_is_refused_by_domain_validation() {
    let app = spawn_app().await;
    let notes = "n".repeat(10_001);
    let mut fields = valid_candidate("long-notes");
    fields.push(("notes", &notes));
    let page = app.post_form_html("/candidates", &fields).await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-notes-error").contains("at most 10000"),
        "{}",
        page.text("#f-notes-error")
    );
    assert_eq!(app.candidate_count().await, 0);
}

#[tokio::test]
async fn a_ten_megabyte_form_gets_a_clear_413_page_and_stores_nothing() {
    let app = spawn_app().await;
    let huge = "x".repeat(10 * 1024 * 1024);
    let mut fields = valid_candidate("huge");
    fields.push(("notes", &huge));
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&fields)
        .finish();

    // In process: the exact page.
    let [(_, cookie), (_, token)] = app.browser_headers();
    let response = app
        .router()
        .oneshot(
            Request::post("/candidates")
                .header("cookie", &cookie)
                .header("x-csrf-token", &token)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(body.clone()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"),
        "413 is an HTML page, not axum's bare text"
    );
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let page = Page::parse(413, &String::from_utf8_lossy(&bytes));
    assert!(
        page.text("main p:not(.muted)")
            .contains("The form was larger than 1 MiB; nothing was stored."),
        "{}",
        page.text("main")
    );

    // Over the wire, on both forms. The server may close the connection before the client has
    // written all 10 MB; when the response does arrive it must be the 413.
    for path in ["/candidates", "/runs"] {
        match app
            .client
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
            .await
        {
            Ok(r) => assert_eq!(r.status(), 413, "POST {path}"),
            Err(e) => eprintln!("POST {path}: connection closed before the response was read ({e})"),
        }
    }
    assert_eq!(app.candidate_count().await, 0);
    assert_eq!(app.run_count().await, 0);
}

#[tokio::test]
async fn duplicate_candidate_name_is_a_form_error() {
    let app = spawn_app().await;
    app.create_candidate("taken", DEAD_URL).await;
    let page = app.post_form_html("/candidates", &valid_candidate("taken")).await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-name-error").contains("already used"),
        "{}",
        page.text("#f-name-error")
    );
    assert_eq!(app.candidate_count().await, 1);

    // Renaming another candidate onto a taken name is refused the same way.
    let other = app.create_candidate("other", DEAD_URL).await;
    let page = app
        .post_form_html(&format!("/candidates/{other}/edit"), &valid_candidate("taken"))
        .await;
    assert_eq!(page.status, 422);
    assert!(page.text("#f-name-error").contains("already used"));
    let stored = app.store.get_candidate(other).await.unwrap().unwrap();
    assert_eq!(stored.spec.name, "other");
}

#[tokio::test]
async fn api_key_is_never_shown_and_blank_keeps_it() {
    const KEY: &str = "sk-test-SECRET-7f3a9c1e5b";
    let app = spawn_app().await;
    let mut fields = valid_candidate("keyed");
    fields.push(("api_key", KEY));
    assert_eq!(app.post_form("/candidates", &fields).await.status(), 303);
    let id = app.store.list_candidates().await.unwrap()[0].id;
    let version = app.create_evalset().await;
    app.create_run("keyed run", version, &[id]).await;

    // A re-shown form does not echo a typed key either.
    let mut bad = fields.clone();
    bad.retain(|(k, _)| *k != "name");
    bad.push(("name", ""));
    let rejected = app.post_form("/candidates", &bad).await;
    assert_eq!(rejected.status(), 422);
    assert!(!rejected.text().await.unwrap().contains("SECRET"));

    let run_id = app.store.list_runs(1, 0).await.unwrap()[0].run.id;
    for path in [
        "/".to_string(),
        "/candidates".to_string(),
        format!("/candidates/{id}/edit"),
        "/runs".to_string(),
        "/runs/new".to_string(),
        format!("/runs/{run_id}"),
        format!("/runs/{run_id}/live"),
    ] {
        let body = app.get(&path).await.text().await.unwrap();
        assert!(!body.contains("SECRET"), "GET {path} shows the key");
    }
    let list = app.get_html("/candidates").await;
    assert_eq!(list.text("table.candidates td.key"), "set · last 4 1e5b");
    let edit = app.get_html(&format!("/candidates/{id}/edit")).await;
    assert_eq!(edit.attr("#f-api_key", "value").as_deref(), Some(""));
    assert!(edit.text(".key-status").contains("set"));

    // Saving with the key field blank keeps the stored key.
    let mut renamed = valid_candidate("keyed-2");
    renamed.push(("api_key", ""));
    let r = app.post_form(&format!("/candidates/{id}/edit"), &renamed).await;
    assert_eq!(r.status(), 303);
    let stored = app.store.get_candidate(id).await.unwrap().unwrap();
    assert_eq!(stored.spec.name, "keyed-2");
    assert_eq!(stored.spec.api_key.as_ref().map(|k| k.expose()), Some(KEY));

    // "Remove the stored key" clears it.
    let mut cleared = valid_candidate("keyed-2");
    cleared.push(("clear_key", "on"));
    assert_eq!(
        app.post_form(&format!("/candidates/{id}/edit"), &cleared)
            .await
            .status(),
        303
    );
    assert!(
        app.store
            .get_candidate(id)
            .await
            .unwrap()
            .unwrap()
            .spec
            .api_key
            .is_none()
    );
    assert_eq!(
        app.get_html("/candidates").await.text("table.candidates td.key"),
        "none"
    );
}

#[tokio::test]
async fn edit_of_unknown_candidate_is_404() {
    let app = spawn_app().await;
    assert_eq!(app.get_html("/candidates/999/edit").await.status, 404);
    assert_eq!(app.get_html("/candidates/abc/edit").await.status, 404);
    let r = app.post_form("/candidates/999/edit", &valid_candidate("x")).await;
    assert_eq!(r.status(), 404);
    assert_eq!(app.candidate_count().await, 0);
}

#[tokio::test]
async fn bad_run_input_is_shown_and_no_run_is_created() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("alpha", DEAD_URL).await;
    let (version_s, candidate_s) = (version.to_string(), candidate.to_string());

    let page = app
        .post_form_html(
            "/runs",
            &[
                ("evalset_version", &version_s),
                ("candidate", &candidate_s),
                ("concurrency", "-4"),
                ("repetitions", "1"),
                ("temperature", "hot"),
            ],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-concurrency-error").contains("must be"),
        "{}",
        page.text("#f-concurrency-error")
    );
    assert!(page.text("#f-temperature-error").contains("must be a number"));
    assert_eq!(page.attr("#f-concurrency", "value").as_deref(), Some("-4"));
    // The chosen eval set and candidate stay chosen.
    assert_eq!(
        page.attr(&format!("#f-candidate-{candidate}"), "checked").as_deref(),
        Some("")
    );
    assert_eq!(page.count("#f-evalset_version option[selected]"), 1);

    let page = app
        .post_form_html(
            "/runs",
            &[
                ("evalset_version", &version_s),
                ("concurrency", "4"),
                ("repetitions", "1"),
            ],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-candidates-error")
            .contains("choose at least one candidate")
    );

    let page = app
        .post_form_html(
            "/runs",
            &[
                ("evalset_version", "99999"),
                ("candidate", &candidate_s),
                ("concurrency", "4"),
                ("repetitions", "1"),
            ],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(page.text("#f-evalset_version-error").contains("not a known eval set"));

    let page = app
        .post_form_html(
            "/runs",
            &[
                ("evalset_version", &version_s),
                ("candidate", "4242"),
                ("concurrency", "4"),
                ("repetitions", "1"),
            ],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(page.text("#f-candidates-error").contains("unknown candidate"));
    assert_eq!(app.run_count().await, 0);
}

#[tokio::test]
async fn new_run_form_shows_the_default_conditions() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    app.create_candidate("alpha", DEAD_URL).await;
    let page = app.get_html(&format!("/runs/new?evalset_version={version}")).await;
    let d = bakeoff::domain::run::RunConfig::default();
    assert_eq!(page.attr("#f-concurrency", "value"), Some(d.concurrency.to_string()));
    assert_eq!(page.attr("#f-repetitions", "value"), Some(d.repetitions.to_string()));
    assert_eq!(
        page.attr("#f-warmup_requests", "value"),
        Some(d.warmup_requests.to_string())
    );
    assert_eq!(page.attr("#f-timeout_secs", "value"), Some(d.timeout_secs.to_string()));
    assert_eq!(page.attr("#f-stream", "checked").is_some(), d.stream);
    assert_eq!(
        page.attr("#f-evalset_version option[selected]", "value"),
        Some(version.to_string())
    );
}

#[tokio::test]
async fn starting_a_run_stores_it_starts_it_and_redirects_to_its_page() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let a = app.create_candidate("alpha", DEAD_URL).await;
    let b = app.create_candidate("beta", DEAD_URL).await;
    let r = app
        .post_form(
            "/runs",
            &[
                ("name", "first look"),
                ("evalset_version", &version.to_string()),
                ("candidate", &a.to_string()),
                ("candidate", &b.to_string()),
                ("concurrency", "2"),
                ("repetitions", "1"),
                ("warmup_requests", "0"),
                ("retries", "0"),
                ("timeout_secs", "5"),
                ("case_limit", "1"),
                ("stream", "on"),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    let runs = app.store.list_runs(10, 0).await.unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0].run;
    assert_eq!(location(&r), format!("/runs/{}", run.id));
    assert_eq!(run.name, "first look");
    assert_eq!(run.candidate_ids, vec![a, b]);
    assert_eq!(
        (run.config.concurrency, run.config.case_limit, run.config.stream),
        (2, Some(1), true)
    );

    // The runner has it: it ends (every request is refused) without anyone polling.
    crate::support::wait::run_ended(&app.store, run.id, std::time::Duration::from_secs(60)).await;
    let page = app.get_html(&format!("/runs/{}", run.id)).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.attr("#live", "hx-trigger"), None, "a finished run stops polling");
}

#[tokio::test]
async fn run_page_escapes_model_output_and_shows_figures_with_calibers() {
    let app = spawn_app().await;
    let (_, alpha, _) = seeded_run(&app).await;
    let beta = app.create_candidate("beta <i>", DEAD_URL).await;
    let version = app.store.list_evalsets().await.unwrap()[0].latest_version_id;
    let run = app.create_run("two", version, &[alpha, beta]).await;
    let evil = r#"<script>alert("pwned")</script><img src=x onerror=alert(1)>"#;
    let mut failed = record(run, beta, "c2", "", false);
    failed.error_class = Some(ErrorClass::HttpServerError);
    failed.texts.get_mut().error_detail = Some("HTTP 500: <b>oops</b>".into());
    (failed.output_tokens, failed.output_tokens_source) = (None, None);
    (failed.first_content_us, failed.last_token_us) = (None.into(), None.into());
    failed.grades = vec![];
    // alpha's requests timed on the kernel's stamps; beta's on both clocks (one behind a proxy).
    let clocked = |mut r: RequestRecord, clock| {
        r.clock = Some(clock);
        r
    };
    failed.clock = Some(TimingClock::UserSpace);
    app.store
        .append_request_records(&[
            clocked(record(run, alpha, "c1", "positive", true), TimingClock::KernelStamp),
            clocked(record(run, alpha, "c2", evil, false), TimingClock::KernelStamp),
            clocked(record(run, beta, "c1", "positive", true), TimingClock::KernelStamp),
            failed,
        ])
        .await
        .unwrap();
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();
    app.store
        .append_run_event(run, "info", "phase <quality> started")
        .await
        .unwrap();

    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.status, 200);
    // Nothing from model output or names became markup.
    assert_eq!(page.count("#live script"), 0);
    assert_eq!(page.count("#live img"), 0);
    assert_eq!(page.count("main i"), 0);
    assert_eq!(page.count("#live b"), 0);
    let outputs = page.texts("table.cases td.output");
    assert!(
        outputs.iter().any(|o| o.contains(r#"<script>alert("pwned")</script>"#)),
        "{outputs:?}"
    );
    assert!(page.text("ol.events").contains("phase <quality> started"));

    // Candidates are columns; every figure's row names its caliber.
    let heads = page.texts("table.results thead th");
    assert_eq!(heads, ["Figure", "alpha", "beta <i>"]);
    let labels = page.texts("table.results tbody th .figure-label");
    for label in [
        "aggregate tok/s @c=4 (steady window)",
        "aggregate tok/s @c=4 (whole run)",
        "TTFT p50",
        "TTFT p95",
        "E2E p50",
        "decode tok/s/stream p50",
        "accuracy",
        "failure rate",
        "output tokens from",
    ] {
        assert!(labels.iter().any(|l| l == label), "missing row {label:?} in {labels:?}");
    }
    let row = |label: &str| -> Vec<String> {
        page.select("table.results tbody tr")
            .into_iter()
            .find(|tr| {
                tr.select(&scraper::Selector::parse(".figure-label").unwrap())
                    .any(|e| text_of(&e) == label)
            })
            .map(|tr| {
                tr.select(&scraper::Selector::parse("td").unwrap())
                    .map(|td| text_of(&td))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(row("TTFT p50"), ["40.0 ms", "40.0 ms"]);
    assert_eq!(row("accuracy"), ["50.0 % (n=2)", "50.0 % (n=2)"]);
    assert_eq!(row("failure rate"), ["0.0 % (n=2)", "50.0 % (n=2)"]);
    assert_eq!(row("output tokens from"), ["usage 2/2", "usage 1/2"]);
    assert_eq!(
        row("timed by"),
        ["kernel stamp", "mixed: 1 kernel stamp, 1 user space"],
        "a figure from both clocks says so"
    );
    // (20 − 1) tokens over 200 ms.
    assert_eq!(row("decode tok/s/stream p50"), ["95.0 tok/s", "95.0 tok/s"]);
    assert!(page.text("table.results caption").contains("concurrency 4"));
    assert!(page.text("table.results caption").contains("streaming on"));
    assert!(page.texts("table.cases td .badge.fail").iter().any(|t| t == "http_5xx"));
    assert!(page.texts("table.cases .badge.pass").iter().all(|t| t == "✓ pass"));

    // Conditions are all shown.
    let conditions = page.texts(".conditions dt");
    for c in [
        "concurrency",
        "streaming",
        "max_tokens",
        "temperature",
        "repetitions",
        "warm-ups (excluded)",
    ] {
        assert!(
            conditions.iter().any(|t| t == c),
            "missing condition {c:?} in {conditions:?}"
        );
    }
    // max_tokens comes from the eval set header when the run does not set it.
    assert!(page.text(".conditions").contains("16 (from the eval set)"));
}

#[tokio::test]
async fn a_running_run_polls_and_a_finished_one_does_not() {
    let app = spawn_app().await;
    let (_, candidate, run) = seeded_run(&app).await;
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();
    app.store
        .append_request_records(&[record(run, candidate, "c1", "positive", true)])
        .await
        .unwrap();

    let body = app.get(&format!("/runs/{run}")).await.text().await.unwrap();
    assert!(
        body.contains(r#"<noscript><meta http-equiv="refresh" content="2"></noscript>"#),
        "without JavaScript the running page refreshes itself"
    );
    let page = Page::parse(200, &body);
    assert_eq!(page.attr("#live", "hx-get"), Some(format!("/runs/{run}/live")));
    assert_eq!(page.attr("#live", "hx-trigger").as_deref(), Some("every 1s"));
    assert_eq!(
        page.attr("[data-run-status]", "data-run-status").as_deref(),
        Some("running")
    );
    // Progress: 1 of 3 cases × 1 repetition.
    assert_eq!(page.attr("#live progress", "value").as_deref(), Some("1"));
    assert_eq!(page.attr("#live progress", "max").as_deref(), Some("3"));
    assert!(page.text(".progress-text").starts_with("1 of 3 requests"));

    let fragment = app.get(&format!("/runs/{run}/live")).await;
    assert_eq!(fragment.status(), 200);
    let body = fragment.text().await.unwrap();
    assert!(!body.contains("<html"), "the live endpoint returns a fragment");
    let fragment = Page::parse(200, &body);
    assert_eq!(fragment.attr("#live", "hx-trigger").as_deref(), Some("every 1s"));

    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    let body = app.get(&format!("/runs/{run}")).await.text().await.unwrap();
    assert!(
        !body.contains("http-equiv=\"refresh\""),
        "a finished page does not refresh"
    );
    let page = Page::parse(200, &body);
    assert_eq!(page.attr("#live", "hx-trigger"), None);
    assert_eq!(page.attr("#live", "hx-get"), None);
    let fragment = Page::parse(200, &app.get(&format!("/runs/{run}/live")).await.text().await.unwrap());
    assert_eq!(fragment.attr("#live", "hx-trigger"), None);
    assert_eq!(
        fragment.attr("[data-run-status]", "data-run-status").as_deref(),
        Some("finished")
    );
}

#[tokio::test]
async fn runs_are_paginated_newest_first() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("alpha", DEAD_URL).await;
    let mut ids = Vec::new();
    for i in 0..25 {
        ids.push(app.create_run(&format!("run {i}"), version, &[candidate]).await);
    }
    let first = app.get_html("/runs").await;
    let rows = first.texts("table.list tbody tr td:first-child");
    assert_eq!(rows.len(), 20);
    assert_eq!(rows[0], format!("#{}", ids[24]), "newest first");
    assert!(first.text(".pager").contains("Page 1 of 2"));
    assert_eq!(
        first.attr(".pager a[rel=next]", "href").as_deref(),
        Some("/runs?page=2")
    );

    let second = app.get_html("/runs?page=2").await;
    let rows = second.texts("table.list tbody tr td:first-child");
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[4], format!("#{}", ids[0]));

    assert_eq!(app.get_html("/runs?page=3").await.status, 404);
    assert_eq!(app.get_html("/runs?page=abc").await.status, 400);
    assert_eq!(app.get_html("/runs?page=0").await.status, 400);
}

#[tokio::test]
async fn eval_set_detail_paginates_cases_and_downloads_the_normalised_file() {
    let app = spawn_app().await;
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"big set","task":"classification","system":"Be terse.","prompt":"Say {{x}}","graders":[{"kind":"exact","ignore_case":true}]}"#,
    );
    for i in 0..120 {
        text.push_str(&format!(
            "\n{{\"id\":\"case-{i:03}\",\"vars\":{{\"x\":\"<b>{i}</b>\"}},\"expected\":\"{i}\"}}"
        ));
    }
    let file = EvalSetFile::parse("big.jsonl", &text).unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();

    let list = app.get_html("/evalsets").await;
    let row = list.text("table.list tbody tr");
    assert!(
        row.contains("big set") && row.contains("120") && row.contains(&file.content_hash()[..12]),
        "{row}"
    );

    let page = app.get_html(&format!("/evalsets/{version}")).await;
    assert_eq!(page.count("table.cases tbody tr"), 50);
    assert_eq!(page.count("table.cases b"), 0, "case text is escaped");
    assert_eq!(page.texts("table.cases tbody tr td:nth-child(2)")[0], "Say <b>0</b>");
    assert!(
        page.texts("ul li")
            .iter()
            .any(|g| g == "exact (trim, collapse whitespace, ignore case)")
    );
    let last = app.get_html(&format!("/evalsets/{version}?page=3")).await;
    assert_eq!(last.count("table.cases tbody tr"), 20);
    assert_eq!(last.texts("table.cases tbody tr td code")[0], "case-100");
    assert_eq!(app.get_html(&format!("/evalsets/{version}?page=4")).await.status, 404);

    let href = page.attr("a[download]", "href").unwrap();
    let r = app.get(&href).await;
    assert_eq!(r.status(), 200);
    let disposition = r.headers()["content-disposition"].to_str().unwrap().to_string();
    assert_eq!(
        disposition,
        format!("attachment; filename=\"big-set-{}.jsonl\"", &file.content_hash()[..12])
    );
    assert_eq!(r.text().await.unwrap(), file.normalised());
    assert_eq!(app.get("/evalsets/999/download").await.status(), 404);
}

#[tokio::test]
async fn static_assets_are_served_with_types_and_cache_headers() {
    let app = spawn_app().await;
    for (path, ty) in [
        ("/static/app.css", "text/css"),
        ("/static/vendor/pico.min.css", "text/css"),
        ("/static/vendor/htmx.min.js", "text/javascript"),
        ("/static/vendor/htmx-ext-sse.min.js", "text/javascript"),
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status(), 200, "GET {path}");
        let h = r.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(ty),
            "GET {path}: {:?}",
            h["content-type"]
        );
        assert!(h["cache-control"].to_str().unwrap().contains("max-age=31536000"));
        let etag = h["etag"].clone();
        assert!(!r.bytes().await.unwrap().is_empty());
        let again = app
            .client
            .get(app.url(path))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "GET {path} with its ETag");
    }
    assert_eq!(app.get("/static/nope.css").await.status(), 404);
    // The layout links what is served.
    let page = app.get_html("/").await;
    for href in page
        .select("link[rel=stylesheet]")
        .iter()
        .filter_map(|l| l.value().attr("href"))
    {
        assert_eq!(app.get(href).await.status(), 200, "{href}");
    }
}

#[tokio::test]
async fn unknown_pages_get_the_404_page_and_errors_leak_nothing() {
    let app = spawn_app().await;
    for path in [
        "/nope",
        "/runs/999",
        "/runs/abc",
        "/runs/999/live",
        "/evalsets/999",
        "/evalsets/-1",
    ] {
        let page = app.get_html(path).await;
        assert_eq!(page.status, 404, "GET {path}");
        assert_eq!(page.text("main h1"), "Not found", "GET {path}");
        assert_eq!(page.count("header nav"), 1, "GET {path}: the 404 page has the layout");
    }
    let r = app.get("/").await;
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
}

#[tokio::test]
async fn progress_counts_requests_not_retries() {
    let app = spawn_app().await;
    let (_, candidate, run) = seeded_run(&app).await;
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();
    let mut first = record(run, candidate, "c1", "", false);
    (first.error_class, first.grades) = (Some(ErrorClass::RateLimited), vec![]);
    let mut retry = record(run, candidate, "c1", "positive", true);
    retry.attempt = 1;
    let mut warmup = record(run, candidate, "c2", "negative", true);
    warmup.is_warmup = true;
    app.store.append_request_records(&[first, retry, warmup]).await.unwrap();

    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.attr("#live progress", "value").as_deref(), Some("1"));
    assert_eq!(page.attr("#live progress", "max").as_deref(), Some("3"));
    assert_eq!(
        page.text(".progress-text"),
        "1 of 3 requests · 2 attempts · 1 failed attempt · 1 warm-up (excluded)"
    );
    // The retried case counts once, with its final attempt.
    let rows = page.select("table.results tbody tr");
    let requests = rows.iter().map(text_of).find(|t| t.starts_with("requests")).unwrap();
    assert!(requests.ends_with(" 1"), "{requests}");
}

#[tokio::test]
async fn an_unfinished_run_can_be_cancelled_from_its_page() {
    let app = spawn_app().await;
    let (_, _, run) = seeded_run(&app).await;
    let page = app.get_html(&format!("/runs/{run}")).await;
    let action = format!("/runs/{run}/cancel");
    assert_eq!(page.count(&format!("form[action=\"{action}\"] button")), 1);

    // Queued and not executing in this process: marked cancelled directly.
    let r = app.post_form(&action, &[]).await;
    assert_eq!(r.status(), 303);
    assert_eq!(location(&r), format!("/runs/{run}"));
    let stored = app.store.get_run(run).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Cancelled);
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.count(&format!("form[action=\"{action}\"]")), 0);
    assert!(page.text("ol.events").contains("cancelled"));
    assert_eq!(page.attr("#live", "hx-trigger"), None);

    // Cancelling again changes nothing; an unknown run is a 404.
    assert_eq!(app.post_form(&action, &[]).await.status(), 303);
    assert_eq!(app.post_form("/runs/999/cancel", &[]).await.status(), 404);
}
