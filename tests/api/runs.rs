//! Runs: presets and the estimate on the form, live progress over server-sent events, the
//! drill-down, the archive with comparisons and history, export and import.
use std::time::Duration;

use bakeoff::domain::run::{ErrorClass, RunStatus};
use futures_util::StreamExt;

use crate::support::app::{Page, TestApp, record, spawn_app};
use crate::support::cli;
use crate::support::db::{TestStore, each_backend_pair};

const DEAD_URL: &str = "http://127.0.0.1:1/v1";
/// Longest a test waits for a server-sent event.
const EVENT_WAIT: Duration = Duration::from_secs(20);

async fn seeded_run(app: &TestApp) -> (i64, i64, i64) {
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("alpha", DEAD_URL).await;
    let run = app.create_run("seeded", version, &[candidate]).await;
    (version, candidate, run)
}

// ------------------------------------------------------------------ presets and the estimate

#[tokio::test]
async fn presets_fill_the_form_without_javascript() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    app.create_candidate("alpha", DEAD_URL).await;

    let page = app.get_html(&format!("/runs/new?evalset_version={version}")).await;
    assert_eq!(page.count(".preset-list li"), 5);
    let href = page
        .attr("[data-preset=concurrency-sweep] a", "href")
        .expect("a link per preset");
    assert!(href.contains("preset=concurrency-sweep") && href.contains(&format!("evalset_version={version}")));

    let sweep = app.get_html(&href).await;
    assert_eq!(sweep.status, 200);
    assert_eq!(sweep.attr("#f-concurrency", "value").as_deref(), Some("1"));
    assert_eq!(sweep.attr("#f-repetitions", "value").as_deref(), Some("3"));
    assert_eq!(sweep.attr("#f-temperature", "value").as_deref(), Some("0.2"));
    assert_eq!(sweep.attr("#f-timeout_secs", "value").as_deref(), Some("60"));
    assert_eq!(sweep.attr("#f-retries", "value").as_deref(), Some("1"));
    assert_eq!(
        sweep.attr("#f-load_shape option[selected]", "value").as_deref(),
        Some("sweep")
    );
    assert_eq!(sweep.attr("#f-sweep_max", "value").as_deref(), Some("32"));
    assert!(sweep.attr("#f-staged_rollout", "checked").is_some());
    assert_eq!(
        sweep.attr("input[name=preset]", "value").as_deref(),
        Some("concurrency-sweep")
    );
    assert_eq!(
        sweep
            .attr("[data-preset=concurrency-sweep] a", "aria-current")
            .as_deref(),
        Some("true")
    );

    let quick = app.get_html("/runs/new?preset=quick-check").await;
    assert_eq!(quick.attr("#f-case_limit", "value").as_deref(), Some("10"));
    assert_eq!(quick.attr("#f-concurrency", "value").as_deref(), Some("1"));
    assert_eq!(app.get_html("/runs/new?preset=nope").await.status, 400);
}

#[tokio::test]
async fn the_estimate_counts_requests_and_states_its_assumptions() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    // A priced candidate.
    let mut spec = app.store.get_candidate(alpha).await.unwrap().unwrap().spec;
    spec.pricing.input_per_mtok = Some(1.0);
    spec.pricing.output_per_mtok = Some(2.0);
    app.store
        .update_candidate(&crate::support::checked::admin_change(app.store.as_ref(), alpha, &spec).await)
        .await
        .unwrap();
    let beta = app.create_candidate("beta", DEAD_URL).await;

    // The form's "update the estimate" GET: 3 cases × 2 repetitions + 1 warm-up, no rollout.
    let query = format!(
        "/runs/new?evalset_version={version}&candidate={alpha}&candidate={beta}&concurrency=1&repetitions=2\
         &warmup_requests=1&timeout_secs=60&retries=0&load_shape=fixed&stream=on"
    );
    let page = app.get_html(&query).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.texts("#estimate [data-estimate=requests]"), ["7", "7"]);
    assert_eq!(page.text("#estimate [data-estimate=total-requests]"), "14");
    let costs = page.texts("#estimate [data-estimate=cost]");
    assert!(costs[0].starts_with("up to $"), "{costs:?}");
    assert_eq!(costs[1], "no price stated");
    assert!(
        page.text("#estimate .muted").contains("beta"),
        "unpriced candidates are named"
    );
    assert!(page.count("#estimate .assumptions li") >= 4);
    // The typed values are kept (unchecked rollout stays unchecked).
    assert!(page.attr("#f-staged_rollout", "checked").is_none());
    assert_eq!(page.attr("#f-repetitions", "value").as_deref(), Some("2"));

    // The fragment alone, as htmx asks for it.
    let fragment = app.get(&query.replace("/runs/new?", "/runs/estimate?")).await;
    assert_eq!(fragment.status(), 200);
    let body = fragment.text().await.unwrap();
    assert!(!body.contains("<html"));
    let fragment = Page::parse(200, &body);
    assert_eq!(fragment.texts("#estimate [data-estimate=requests]"), ["7", "7"]);

    // A typed error shows on the form and replaces the estimate with a hint.
    let bad = app.get_html(&query.replace("repetitions=2", "repetitions=0")).await;
    assert!(bad.count("#f-repetitions-error") == 1);
    assert!(bad.text("#estimate .empty").contains("Correct the fields"));
}

#[tokio::test]
async fn a_run_started_from_a_preset_stores_its_load_shape() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let version_s = version.to_string();
    let alpha_s = alpha.to_string();
    let r = app
        .post_form(
            "/runs",
            &[
                ("preset", "concurrency-sweep"),
                ("evalset_version", version_s.as_str()),
                ("candidate", alpha_s.as_str()),
                ("concurrency", "1"),
                ("repetitions", "3"),
                ("warmup_requests", "2"),
                ("temperature", "0.2"),
                ("timeout_secs", "60"),
                ("retries", "1"),
                ("stream", "on"),
                ("load_shape", "sweep"),
                ("sweep_max", "8"),
                ("staged_rollout", "on"),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303);
    let runs = app.store.list_runs(10, 0).await.unwrap();
    let run = &runs[0].run;
    app.state.runner.cancel(run.id);
    assert_eq!(run.config.pool_size(), 8);
    assert!(run.config.staged_rollout);
    assert_eq!(run.config.repetitions, 3);

    let bad = app
        .post_form_html(
            "/runs",
            &[
                ("evalset_version", version_s.as_str()),
                ("candidate", alpha_s.as_str()),
                ("concurrency", "1"),
                ("repetitions", "1"),
                ("load_shape", "levels"),
                ("levels", "1, two"),
            ],
        )
        .await;
    assert_eq!(bad.status, 422);
    assert!(bad.text("#f-levels-error").contains("\"two\""));
}

// ------------------------------------------------------------------ live progress (SSE)

/// Reads server-sent events until `stop` says so or the stream ends; returns (event, data) pairs.
async fn read_events(
    response: reqwest::Response,
    mut stop: impl FnMut(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout(EVENT_WAIT, stream.next())
            .await
            .expect("an event within the deadline");
        let Some(chunk) = next else { return events };
        buffer.push_str(&String::from_utf8_lossy(&chunk.expect("reading the event stream")));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut name = String::from("message");
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                }
            }
            if !data.is_empty() {
                events.push((name, data.join("\n")));
            }
            if stop(&events) {
                return events;
            }
        }
    }
}

#[tokio::test]
async fn progress_is_pushed_as_server_sent_events_until_the_run_ends() {
    let app = spawn_app().await;
    let (_, candidate, run) = seeded_run(&app).await;
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();

    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(
        page.attr("#live-stream", "sse-connect"),
        Some(format!("/runs/{run}/events"))
    );
    assert_eq!(page.attr("#live-stream", "sse-swap").as_deref(), Some("progress"));
    assert_eq!(page.attr("#live-stream", "sse-close").as_deref(), Some("done"));
    assert_eq!(page.count("script[src^='/static/vendor/htmx-ext-sse']"), 1);
    // Until the first push arrives (or if the stream cannot connect) the fragment polls.
    assert_eq!(page.attr("#live", "hx-trigger").as_deref(), Some("every 1s"));

    let response = app.get(&format!("/runs/{run}/events")).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // The first event is the current fragment; a stored record makes a second one.
    let store = app.store.clone();
    let mut pushed = false;
    let events = read_events(response, |events| {
        if events.len() == 1 && !pushed {
            pushed = true;
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .append_request_records(&[record(run, candidate, "c1", "positive", true)])
                    .await
                    .unwrap();
                store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
            });
        }
        events.iter().any(|(name, _)| name == "done")
    })
    .await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"progress"));
    assert_eq!(names.last(), Some(&"done"));
    let first = Page::parse(200, &events[0].1);
    assert_eq!(first.attr("#live", "data-terminal").as_deref(), Some("false"));
    assert_eq!(
        first.attr("#live", "hx-trigger"),
        None,
        "a pushed fragment stops the fallback polling"
    );
    let last_progress = events.iter().rev().find(|(n, _)| n == "progress").unwrap();
    let last = Page::parse(200, &last_progress.1);
    assert_eq!(
        last.attr("[data-run-status]", "data-run-status").as_deref(),
        Some("finished")
    );
    assert_eq!(last.attr("#live progress", "value").as_deref(), Some("1"));

    // A finished run's page has no stream; its event stream says done at once.
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.count("#live-stream"), 0);
    let events = read_events(app.get(&format!("/runs/{run}/events")).await, |_| false).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["progress", "done"], "and then the stream ends");
    assert_eq!(app.get("/runs/999/events").await.status(), 404);
}

#[tokio::test]
async fn live_figures_show_speed_latency_errors_and_time_left() {
    let app = spawn_app().await;
    let (_, candidate, run) = seeded_run(&app).await;
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();
    let mut failed = record(run, candidate, "c2", "", false);
    failed.error_class = Some(ErrorClass::HttpServerError);
    failed.texts.get_mut().error_detail = Some("HTTP 500".into());
    failed.grades.clear();
    app.store
        .append_request_records(&[record(run, candidate, "c1", "positive", true), failed])
        .await
        .unwrap();
    let page = app.get_html(&format!("/runs/{run}")).await;
    let row = |figure: &str| page.text(&format!("table.live-figures [data-figure={figure}]"));
    assert!(row("tok_s").ends_with("tok/s"), "{}", row("tok_s"));
    assert_eq!(row("ttft"), "40.0 ms");
    assert!(row("errors").contains("http_5xx × 1"));
    assert!(row("eta").starts_with("about") || row("eta") == "—", "{}", row("eta"));
}

// ------------------------------------------------------------------ drill-down

/// Two candidates over the tiny set: c1 answered differently by each, c2 failed by beta with a
/// 5xx, c3 answered with markup by alpha and wrongly by beta.
async fn drill_down_run(app: &TestApp) -> (i64, i64, i64) {
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let beta = app.create_candidate("beta", DEAD_URL).await;
    let run = app.create_run("drill", version, &[alpha, beta]).await;
    let mut failed = record(run, beta, "c2", "", false);
    failed.error_class = Some(ErrorClass::HttpServerError);
    failed.texts.get_mut().error_detail = Some("HTTP 500: <b>overloaded</b>".into());
    failed.grades.clear();
    let mut markup = record(run, alpha, "c3", "<script>alert(1)</script>neutral", true);
    markup.grades[0].reason = "matched <i>after</i> normalising".into();
    app.store
        .append_request_records(&[
            record(run, alpha, "c1", "positive", true),
            record(run, beta, "c1", "Positive!", false),
            record(run, alpha, "c2", "negative", true),
            failed,
            markup,
            record(run, beta, "c3", "neutral", true),
        ])
        .await
        .unwrap();
    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    (run, alpha, beta)
}

fn case_ids(page: &Page) -> Vec<String> {
    page.select("article.case")
        .iter()
        .map(|a| a.value().attr("data-case").unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn the_drill_down_shows_every_case_with_input_outputs_grades_and_timings() {
    let app = spawn_app().await;
    let (run, _, _) = drill_down_run(&app).await;
    let page = app.get_html(&format!("/runs/{run}/cases")).await;
    assert_eq!(page.status, 200);
    assert_eq!(case_ids(&page), ["c1", "c2", "c3"]);
    assert_eq!(page.text("#matching"), "3 of 3 cases match.");
    // Input as sent, expected value, one section per attempt.
    assert!(
        page.text("#case-c1 .case-input pre.prompt:not(.expected)")
            .contains("Label: great")
    );
    assert_eq!(page.text("#case-c1 pre.expected"), "positive");
    assert_eq!(page.count("#case-c1 section.attempt"), 2);
    assert_eq!(
        page.texts("#case-c1 section.attempt pre.output"),
        ["positive", "Positive!"]
    );
    assert_eq!(page.text("#case-c1 [data-candidate=beta] .grades .badge"), "✗ fail");
    // Timings and token counts with their source.
    let tokens = page.texts("#case-c1 [data-candidate=alpha] .tokens dd");
    assert!(tokens.iter().any(|t| t == "20 (from usage)"), "{tokens:?}");
    let timings = page.texts("#case-c1 [data-candidate=alpha] .timings dd");
    assert!(timings.iter().any(|t| t == "40.0 ms"), "{timings:?}");
    // The failure's class and detail.
    assert_eq!(page.text("#case-c2 [data-candidate=beta] h3 .badge.fail"), "http_5xx");
    assert!(page.text("#case-c2 .error-detail").contains("<b>overloaded</b>"));

    // Model output, error details and reasons are text, never markup.
    assert_eq!(page.count("article.case script"), 0);
    assert_eq!(page.count("article.case b"), 0);
    assert_eq!(page.count("article.case .grades i"), 0);
    assert_eq!(
        page.text("#case-c3 [data-candidate=alpha] pre.output"),
        "<script>alert(1)</script>neutral",
        "shown as the text it is"
    );
    let body = app.get(&format!("/runs/{run}/cases")).await.text().await.unwrap();
    assert!(!body.contains("<script>alert"));

    // The troubleshooting panel groups failures by class, checks in order.
    let groups: Vec<String> = page
        .select(".trouble-group")
        .iter()
        .map(|g| g.value().attr("data-class").unwrap().to_string())
        .collect();
    assert_eq!(groups, ["http_5xx", "wrong_answer"]);
    let checks = page.texts(".trouble-group[data-class=http_5xx] ol.checks li");
    assert_eq!(checks.len(), 5);
    assert!(checks[0].starts_with("symptom") && checks[4].starts_with("framework limits"));
}

#[tokio::test]
async fn drill_down_filters_and_pages_on_the_server() {
    let app = spawn_app().await;
    let (run, _, _) = drill_down_run(&app).await;
    let ids = |q: &str| {
        let app = &app;
        let path = format!("/runs/{run}/cases{q}");
        async move { case_ids(&app.get_html(&path).await) }
    };
    assert_eq!(
        ids("?failures=on").await,
        ["c1", "c2"],
        "c1 answered wrong by beta, c2 failed"
    );
    assert_eq!(ids("?error_class=http_5xx").await, ["c2"]);
    assert_eq!(ids("?error_class=wrong_answer").await, ["c1"]);
    assert_eq!(ids("?tag=en").await, ["c1"]);
    assert_eq!(
        ids("?differs=on").await,
        ["c1", "c3"],
        "c2 has one successful output only"
    );
    assert_eq!(ids("?failures=on&tag=en").await, ["c1"]);
    let page = app.get_html(&format!("/runs/{run}/cases?failures=on")).await;
    assert!(page.attr("#f-failures", "checked").is_some(), "filters are echoed back");
    assert_eq!(
        app.get_html(&format!("/runs/{run}/cases?error_class=nope"))
            .await
            .status,
        400
    );
    assert_eq!(app.get_html(&format!("/runs/{run}/cases?page=2")).await.status, 404);
    assert_eq!(app.get_html("/runs/999/cases").await.status, 404);
}

#[tokio::test]
async fn drill_down_pages_keep_their_filters() {
    let app = spawn_app().await;
    // Twelve cases, all failing: two pages of ten and two.
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"many","task":"classification","prompt":"{{x}}","graders":[{"kind":"exact"}]}"#,
    );
    text.push('\n');
    for i in 0..12 {
        text.push_str(&format!(
            "{{\"id\":\"k{i:02}\",\"vars\":{{\"x\":\"{i}\"}},\"expected\":\"y\"}}\n"
        ));
    }
    let file = bakeoff::domain::evalset::EvalSetFile::parse("many.jsonl", &text).unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let run = app.create_run("many", version, &[alpha]).await;
    let records: Vec<_> = (0..12)
        .map(|i| record(run, alpha, &format!("k{i:02}"), "n", false))
        .collect();
    app.store.append_request_records(&records).await.unwrap();
    let first = app.get_html(&format!("/runs/{run}/cases?failures=on")).await;
    assert_eq!(case_ids(&first).len(), 10);
    let next = first.attr("a[rel=next]", "href").expect("a next link");
    assert_eq!(next, format!("/runs/{run}/cases?failures=on&page=2"));
    let second = app.get_html(&next).await;
    assert_eq!(case_ids(&second), ["k10", "k11"]);
}

#[tokio::test]
async fn a_finished_run_page_is_computed_once_and_served_from_its_summary() {
    let app = spawn_app().await;
    let (run, _, _) = drill_down_run(&app).await;
    assert_eq!(
        app.store
            .get_run_summary(run, bakeoff::app::pages::summaries::KINDS[0])
            .await
            .unwrap(),
        None
    );
    let first = app.get(&format!("/runs/{run}")).await.text().await.unwrap();
    let cached = app
        .store
        .get_run_summary(run, bakeoff::app::pages::summaries::KINDS[0])
        .await
        .unwrap();
    assert!(
        cached.is_some_and(|body| body.contains("accuracy")),
        "the results were kept"
    );
    let second = app.get(&format!("/runs/{run}")).await.text().await.unwrap();
    assert_eq!(first, second, "the cached page is the computed page");
    // An unfinished run is never cached (its records still change).
    let version = app.create_evalset().await;
    let alpha = app.store.list_candidates().await.unwrap()[0].id;
    let open = app.create_run("open", version, &[alpha]).await;
    app.get(&format!("/runs/{open}")).await;
    assert_eq!(
        app.store
            .get_run_summary(open, bakeoff::app::pages::summaries::KINDS[0])
            .await
            .unwrap(),
        None
    );
}

// ------------------------------------------------------------------ archive, compare, history

/// A finished run of `candidates` with one final record per (candidate, case): `passes` says,
/// per candidate, which cases pass.
async fn finished_run(app: &TestApp, version: i64, candidates: &[i64], passes: &[&[&str]], cases: &[&str]) -> i64 {
    let run = app.create_run("archived", version, candidates).await;
    let mut records = Vec::new();
    for (c, pass) in candidates.iter().zip(passes) {
        for case in cases {
            records.push(record(run, *c, case, "x", pass.contains(case)));
        }
    }
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    run
}

#[tokio::test]
async fn the_archive_lists_finished_runs_with_filters_and_pages() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let beta = app.create_candidate("beta", DEAD_URL).await;
    let mut alpha_runs = Vec::new();
    for i in 0..28 {
        let who = if i % 2 == 0 { alpha } else { beta };
        let run = finished_run(&app, version, &[who], &[&["c1"]], &["c1"]).await;
        if who == alpha {
            alpha_runs.push(run);
        }
    }
    let cancelled = app.create_run("cancelled", version, &[alpha]).await;
    app.store
        .set_run_status(cancelled, RunStatus::Cancelled, None)
        .await
        .unwrap();
    let _running = app.create_run("running", version, &[alpha]).await;

    let page = app.get_html("/archive").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.text("#archive-count"),
        "29 runs.",
        "unfinished runs are not archived"
    );
    assert_eq!(page.count("table.archive tbody tr"), 25);
    assert_eq!(page.attr("a[rel=next]", "href").as_deref(), Some("/archive?page=2"));
    let second = app.get_html("/archive?page=2").await;
    assert_eq!(second.count("table.archive tbody tr"), 4);

    let filtered = app
        .get_html(&format!("/archive?candidate={alpha}&status=finished"))
        .await;
    assert_eq!(filtered.text("#archive-count"), "14 runs match.");
    let shown: Vec<String> = filtered
        .select("table.archive tbody tr")
        .iter()
        .map(|tr| tr.value().attr("data-run").unwrap().to_string())
        .collect();
    let mut expected: Vec<String> = alpha_runs.iter().rev().map(|id| id.to_string()).collect();
    expected.truncate(25);
    assert_eq!(shown, expected, "newest first");
    assert_eq!(
        filtered.attr("#f-candidate option[selected]", "value"),
        Some(alpha.to_string())
    );
    let cancelled_only = app.get_html("/archive?status=cancelled").await;
    assert_eq!(cancelled_only.text("#archive-count"), "1 run matches.");
    let today = bakeoff::domain::Timestamp::now().display()[..10].to_string();
    assert_eq!(
        app.get_html(&format!("/archive?from={today}&to={today}"))
            .await
            .text("#archive-count"),
        "29 runs match."
    );
    assert_eq!(
        app.get_html("/archive?from=2000-01-01&to=2000-01-02")
            .await
            .count("table.archive tbody tr"),
        0
    );
    assert_eq!(app.get_html("/archive?from=yesterday").await.status, 400);
    assert_eq!(app.get_html("/archive?status=running").await.status, 400);
    assert_eq!(app.get_html("/archive?page=9").await.status, 404);
    // Each candidate links to its history on the set; each run to its export.
    assert!(page.count("table.archive a[href^='/archive/history?candidate=']") >= 25);
    assert_eq!(page.count("table.archive a[href$='/export.json']"), 25);
}

#[tokio::test]
async fn comparisons_mark_cases_against_a_chosen_baseline_and_flag_other_versions() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let beta = app.create_candidate("beta", DEAD_URL).await;
    let cases = ["c1", "c2", "c3"];
    let first = finished_run(&app, version, &[alpha], &[&["c1", "c3"]], &cases).await;
    let second = finished_run(
        &app,
        version,
        &[alpha, beta],
        &[&["c2", "c3"], &["c1", "c2", "c3"]],
        &cases,
    )
    .await;

    let page = app.get_html(&format!("/archive/compare?runs={first},{second}")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.count(".version-warning"), 0);
    assert_eq!(page.count(".same-version"), 1);
    assert_eq!(page.count("table.compare-entries thead th[data-entry]"), 3);
    assert_eq!(
        page.attr("[data-baseline]", "data-baseline"),
        Some(format!("{first}:{alpha}"))
    );
    let marks = |page: &Page, case: &str| -> Vec<String> {
        page.select(&format!("table.compare-cases tr[data-case={case}] td[data-mark]"))
            .iter()
            .map(|td| td.value().attr("data-mark").unwrap().to_string())
            .collect()
    };
    assert_eq!(marks(&page, "c1"), ["baseline", "regressed", "same"]);
    assert_eq!(marks(&page, "c2"), ["baseline", "improved", "improved"]);
    assert_eq!(marks(&page, "c3"), ["baseline", "same", "same"]);
    assert_eq!(
        page.text(&format!("[data-tally='{second}:{alpha}']")),
        "1 improved · 1 regressed · 1 same"
    );
    assert_eq!(page.text("table.compare-cases tr[data-case=c1] td:nth-child(2)"), "1/1");

    // Another baseline, chosen from the page's own link.
    let href = page
        .select("table.compare-entries a")
        .iter()
        .filter_map(|a| a.value().attr("href"))
        .find(|h| h.contains(&format!("baseline={second}:{beta}")))
        .unwrap()
        .to_string();
    let rebased = app.get_html(&href).await;
    assert_eq!(marks(&rebased, "c1"), ["same", "regressed", "baseline"]);

    // A run on another version of the set is compared by case id, with a warning.
    let text = crate::support::app::TINY_EVALSET.replace("meh <b>bold</b>", "so-so");
    let file = bakeoff::domain::evalset::EvalSetFile::parse("tiny.jsonl", &text).unwrap();
    let other_version = app.store.save_evalset_version(&file).await.unwrap();
    let third = finished_run(&app, other_version, &[alpha], &[&["c1"]], &["c1"]).await;
    let mixed = app.get_html(&format!("/archive/compare?run={first}&run={third}")).await;
    assert_eq!(mixed.status, 200);
    assert!(mixed.text(".version-warning").contains("different eval-set versions"));
    assert_eq!(marks(&mixed, "c2"), ["baseline", "not comparable"]);

    assert_eq!(app.get_html("/archive/compare").await.status, 400);
    assert_eq!(app.get_html("/archive/compare?runs=999").await.status, 404);
    assert_eq!(
        app.get_html(&format!("/archive/compare?runs={first}&baseline=1:999"))
            .await
            .status,
        400
    );
}

/// "Did it get worse": two runs of the same two models side by side read each model's second
/// run against its first (not against the other model), with each figure's change, a verdict
/// that fell is marked, and the history lists every run's verdict by the set's own profile.
#[tokio::test]
async fn a_comparison_reads_each_models_newer_run_against_its_older_one_and_history_shows_verdicts() {
    use bakeoff::domain::scorecard::{RecordedVerdict, Verdict};
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let beta = app.create_candidate("beta", DEAD_URL).await;
    let cases = ["c1", "c2", "c3"];
    let older = finished_run(
        &app,
        version,
        &[alpha, beta],
        &[&["c1", "c3"], &["c1", "c2", "c3"]],
        &cases,
    )
    .await;
    let newer = finished_run(&app, version, &[beta, alpha], &[&["c1"], &["c2", "c3"]], &cases).await;
    let rules = vec![bakeoff::domain::thresholds::ThresholdRule {
        metric: "accuracy".into(),
        comparator: bakeoff::domain::thresholds::Comparator::AtLeast,
        value: 0.5,
        unit: bakeoff::domain::thresholds::key::MetricKey::parse("accuracy")
            .unwrap()
            .def()
            .unit
            .stored_name()
            .to_string(),
        rationale: "test".into(),
    }];
    let (profile, _) = app
        .store
        .save_threshold_profile("tiny's own", "", &rules, "ana", "first")
        .await
        .unwrap();
    bakeoff::app::profiles::set_profile_for_evalset(&app.store, "tiny", profile, "ana")
        .await
        .unwrap();
    let verdict = |candidate_id, verdict| RecordedVerdict {
        candidate_id,
        candidate: String::new(),
        verdict,
    };
    for (run, a, b) in [(older, Verdict::Go, Verdict::Go), (newer, Verdict::NoGo, Verdict::Go)] {
        app.store
            .save_run_verdicts(run, profile, 1, &[verdict(alpha, a), verdict(beta, b)])
            .await
            .unwrap();
    }

    let page = app.get_html(&format!("/archive/compare?runs={newer},{older}")).await;
    assert_eq!(page.status, 200);
    let keys: Vec<String> = page
        .select("table.compare-entries thead th[data-entry]")
        .iter()
        .map(|th| th.value().attr("data-entry").unwrap().to_string())
        .collect();
    assert_eq!(
        keys,
        [
            format!("{older}:{beta}"),
            format!("{newer}:{beta}"),
            format!("{older}:{alpha}"),
            format!("{newer}:{alpha}")
        ],
        "grouped by candidate (first seen), oldest run first"
    );
    assert_eq!(page.texts("tr.candidate-groups th[data-group]"), ["beta", "alpha"]);
    assert_eq!(page.count("[data-baseline]"), 2, "each model's older run is a baseline");
    assert_eq!(
        page.text(&format!("[data-compared-with='{newer}:{alpha}']")),
        format!("vs #{older} alpha")
    );
    let marks = |case: &str| -> Vec<String> {
        page.select(&format!("table.compare-cases tr[data-case={case}] td[data-mark]"))
            .iter()
            .map(|td| td.value().attr("data-mark").unwrap().to_string())
            .collect()
    };
    assert_eq!(marks("c1"), ["baseline", "same", "baseline", "regressed"]);
    assert_eq!(marks("c2"), ["baseline", "regressed", "baseline", "improved"]);
    // Accuracy: beta 3/3 → 1/3, alpha 2/3 → 2/3; the change is in points against its own run.
    let accuracy_deltas = page.texts("tr[data-figure=accuracy] [data-delta]");
    assert_eq!(accuracy_deltas, ["Δ −66.7 pp", "Δ +0.0 pp"]);
    let moved: Vec<String> = page
        .select("[data-verdict-moved]")
        .iter()
        .map(|e| e.value().attr("data-verdict-moved").unwrap().to_string())
        .collect();
    assert_eq!(moved, ["worse"], "alpha fell from GO to NO-GO; beta held its GO");
    assert!(page.text("tr.verdict-row th").contains("tiny's own"));
    // Charts across the columns: accuracy with the profile's rule as its threshold line, each
    // column's point in its candidate's colour (beta's two runs, then alpha's), labelled by run.
    let chart = page.select("#chart-accuracy")[0].html();
    assert!(
        chart.contains("rule: accuracy ≥ 50 % (tiny&#39;s own)")
            || chart.contains("rule: accuracy ≥ 50 % (tiny's own)"),
        "no threshold line on compare's accuracy chart"
    );
    for label in [
        format!("beta #{older}"),
        format!("beta #{newer}"),
        format!("alpha #{newer}"),
    ] {
        assert!(chart.contains(&label), "{label} is a column of the chart");
    }
    let colour = |candidate: &str| {
        let group = page.select(&format!(
            "tr.candidate-groups th[data-group='{candidate}'] [data-colour]"
        ));
        group[0].value().attr("data-colour").unwrap().to_lowercase()
    };
    for candidate in ["beta", "alpha"] {
        let c = colour(candidate);
        assert!(
            chart.to_lowercase().contains(&c),
            "{candidate}'s colour {c} on the chart"
        );
    }
    // A baseline chosen for all still compares every column with it.
    let chosen = app
        .get_html(&format!(
            "/archive/compare?runs={newer},{older}&baseline={older}:{alpha}"
        ))
        .await;
    assert_eq!(chosen.count("[data-baseline]"), 1);

    let evalset = app.store.list_evalsets().await.unwrap()[0].id;
    let history = app
        .get_html(&format!("/archive/history?candidate={alpha}&evalset={evalset}"))
        .await;
    assert_eq!(history.status, 200);
    let verdicts: Vec<String> = history
        .select("table.history [data-verdict]")
        .iter()
        .map(|e| e.value().attr("data-verdict").unwrap().to_string())
        .collect();
    assert_eq!(verdicts, ["GO", "NO-GO"], "oldest first, by the set's own profile");
    // The accuracy chart draws that profile's rule as its threshold line, named in its legend;
    // a figure the profile sets no rule on has none.
    let accuracy = history.select("#chart-accuracy")[0].html();
    assert!(
        accuracy.contains("rule: accuracy ≥ 50 % (tiny&#39;s own)")
            || accuracy.contains("rule: accuracy ≥ 50 % (tiny's own)"),
        "no threshold line on the accuracy chart"
    );
    assert!(
        !history
            .select("#chart-ttft")
            .first()
            .is_some_and(|c| c.html().contains("rule:"))
    );
    let api: serde_json::Value = app
        .get(&format!("/api/v1/archive/history?candidate={alpha}&evalset={evalset}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(api["verdict_profile"], "tiny's own");
    assert_eq!(api["runs"][1]["verdict"], "NO-GO");
}

/// An eval set of `n` cases named k00…, graded exactly.
async fn big_evalset(app: &TestApp, n: usize) -> (i64, Vec<String>) {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"big","task":"classification","prompt":"{{x}}","graders":[{"kind":"exact"}]}"#,
    );
    text.push('\n');
    let ids: Vec<String> = (0..n).map(|i| format!("k{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        text.push_str(&format!(
            "{{\"id\":\"{id}\",\"vars\":{{\"x\":\"{i}\"}},\"expected\":\"y\"}}\n"
        ));
    }
    let file = bakeoff::domain::evalset::EvalSetFile::parse("big.jsonl", &text).unwrap();
    (app.store.save_evalset_version(&file).await.unwrap(), ids)
}

#[tokio::test]
async fn history_charts_figures_over_time_and_flags_only_changes_beyond_the_noise() {
    let app = spawn_app().await;
    let (version, ids) = big_evalset(&app, 40).await;
    let cases: Vec<&str> = ids.iter().map(String::as_str).collect();
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    // 40/40 → 38/40 (within the noise) → 10/40 (well beyond it).
    let r1 = finished_run(&app, version, &[alpha], &[&cases], &cases).await;
    let r2 = finished_run(&app, version, &[alpha], &[&cases[2..]], &cases).await;
    let r3 = finished_run(&app, version, &[alpha], &[&cases[30..]], &cases).await;
    let evalset_id = app
        .store
        .list_evalsets()
        .await
        .unwrap()
        .iter()
        .find(|e| e.name == "big")
        .unwrap()
        .id;

    let page = app
        .get_html(&format!("/archive/history?candidate={alpha}&evalset={evalset_id}"))
        .await;
    assert_eq!(page.status, 200);
    let runs: Vec<String> = page
        .select("table.history tbody tr")
        .iter()
        .map(|tr| tr.value().attr("data-run").unwrap().to_string())
        .collect();
    assert_eq!(runs, [r1, r2, r3].map(|r| r.to_string()), "oldest first");
    assert!(
        page.text(&format!("tr[data-run='{r1}'] td:nth-child(6)"))
            .starts_with("100.0 %")
    );
    let flags = |run: i64| -> Vec<String> { page.texts(&format!("tr[data-run='{run}'] [data-flag]")) };
    assert!(flags(r1).is_empty());
    assert!(
        flags(r2).is_empty(),
        "two fewer passes is within the noise: {:?}",
        flags(r2)
    );
    assert!(
        flags(r3)
            .iter()
            .any(|f| f == "regression: accuracy worse beyond the noise"),
        "{:?}",
        flags(r3)
    );
    // Server-drawn SVG charts, no script.
    assert!(page.count("figure.chart svg") >= 2, "accuracy and TTFT charts");
    assert_eq!(page.count("figure.chart script"), 0);
    assert!(page.text("#chart-accuracy figcaption").starts_with("Accuracy"));
    // Figures of finished runs are cached once computed.
    assert!(
        app.store
            .get_run_summary(r3, bakeoff::app::pages::figures::FIGURES_KIND)
            .await
            .unwrap()
            .is_some()
    );

    assert_eq!(app.get_html("/archive/history?candidate=1").await.status, 400);
    assert_eq!(
        app.get_html(&format!("/archive/history?candidate=999&evalset={evalset_id}"))
            .await
            .status,
        404
    );
}

// ------------------------------------------------------------------ export and import

/// A finished run with a candidate that has a stored key, a failed record and a grade detail.
async fn exportable_run(store: &bakeoff::store::DynStore) -> (i64, usize) {
    use bakeoff::domain::candidate::CandidateDraft;
    let file = bakeoff::domain::evalset::EvalSetFile::parse("tiny.jsonl", crate::support::app::TINY_EVALSET).unwrap();
    let version = store.save_evalset_version(&file).await.unwrap();
    let spec = CandidateDraft {
        name: "keyed".into(),
        provider: "openai-chat".into(),
        base_url: "http://127.0.0.1:1/v1".into(),
        model: "m".into(),
        api_key: "sk-very-secret-key".into(),
        price_input: "1".into(),
        price_output: "2".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let keyed = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = store
        .create_run(&bakeoff::domain::run::NewRun {
            name: "to export".into(),
            evalset_version_id: version,
            candidate_ids: vec![keyed],
            config: bakeoff::domain::run::RunConfig::default(),
        })
        .await
        .unwrap();
    let mut failed = record(run, keyed, "c2", "", false);
    failed.error_class = Some(ErrorClass::StreamCut);
    failed.grades.clear();
    let mut graded = record(run, keyed, "c1", "positive", true);
    graded.grades[0].detail = Some(Box::new(serde_json::json!({"normalised": "positive"})));
    let records = vec![graded, failed, record(run, keyed, "c3", "<b>neutral</b>", false)];
    store.append_request_records(&records).await.unwrap();
    store.append_run_event(run, "info", "started").await.unwrap();
    store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    (run, records.len())
}

fn strip_ids(mut records: Vec<bakeoff::domain::run::RequestRecord>) -> Vec<bakeoff::domain::run::RequestRecord> {
    for r in &mut records {
        r.run_id = 0;
        r.candidate_id = 0;
    }
    records
}

each_backend_pair!(exports_round_trip_between_both_databases_without_keys);
/// Two separate installations: a fresh database on each side.
async fn exports_round_trip_between_both_databases_without_keys(from: TestStore, to: TestStore) {
    use bakeoff::app::transfer::{SCHEMA, export_run, import_run, parse_export};
    let (run, n) = exportable_run(&from.store).await;
    let export = export_run(from.store.as_ref(), run).await.unwrap();
    let json = serde_json::to_string(&export).unwrap();
    assert!(json.contains(&format!("\"schema\":\"{SCHEMA}\"")));
    assert!(
        !json.contains("sk-very-secret-key"),
        "{} → {}: no API key",
        from.backend,
        to.backend
    );

    let imported = import_run(to.store.as_ref(), &parse_export(&json).unwrap())
        .await
        .unwrap()
        .run_id();
    let a = from.store.get_run(run).await.unwrap().unwrap();
    let b = to.store.get_run(imported).await.unwrap().unwrap();
    assert_eq!((b.status, &b.config, &b.name), (a.status, &a.config, &a.name));
    assert_eq!(
        (b.created_at, b.started_at, b.finished_at),
        (a.created_at, a.started_at, a.finished_at)
    );
    let ra = strip_ids(from.store.list_request_records(run).await.unwrap());
    let rb = strip_ids(to.store.list_request_records(imported).await.unwrap());
    assert_eq!(rb.len(), n);
    assert_eq!(
        ra, rb,
        "{} → {}: every record, grade and timing",
        from.backend, to.backend
    );
    let va = from
        .store
        .get_evalset_version(a.evalset_version_id)
        .await
        .unwrap()
        .unwrap();
    let vb = to
        .store
        .get_evalset_version(b.evalset_version_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(va.content_hash, vb.content_hash);
    let cb = to.store.get_candidate(b.candidate_ids[0]).await.unwrap().unwrap();
    assert!(cb.spec.api_key.is_none(), "the imported candidate has no key");
    assert_eq!(cb.spec.pricing.output_per_mtok, Some(2.0));
    let events = to.store.list_run_events(imported).await.unwrap();
    assert_eq!(events[0].message, "started");
    assert!(events.last().unwrap().message.starts_with("imported from bakeoff"));
}

#[tokio::test]
async fn runs_export_and_import_over_http_and_bad_files_store_nothing() {
    let app = spawn_app().await;
    let (run, n) = exportable_run(&app.store).await;
    let response = app.get(&format!("/runs/{run}/export.json")).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains("bakeoff-run-")
    );
    let body = response.text().await.unwrap();
    assert!(!body.contains("sk-very-secret-key"));

    let upload = |bytes: Vec<u8>| {
        const BOUNDARY: &str = "bakeoff-test-boundary-7d1f";
        let mut body = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"run.json\"\r\n\
             Content-Type: application/json\r\n\r\n"
        )
        .into_bytes();
        body.extend(bytes);
        body.extend(format!("\r\n--{BOUNDARY}--\r\n").into_bytes());
        app.client
            .post(app.url("/archive/import"))
            .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
            .body(body)
            .send()
    };
    let r = upload(body.clone().into_bytes()).await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let imported: i64 = location.trim_start_matches("/runs/").parse().unwrap();
    assert_eq!(app.store.list_request_records(imported).await.unwrap().len(), n);
    // Importing again is recognised by the export's content hash: it says so, adds nothing.
    let candidates = app.candidate_count().await;
    let runs = app.run_count().await;
    let again = upload(body.clone().into_bytes()).await.unwrap();
    assert_eq!(again.status().as_u16(), 200);
    assert!(
        again
            .text()
            .await
            .unwrap()
            .contains(&format!("imported before, as run #{imported}"))
    );
    assert_eq!(app.candidate_count().await, candidates);
    assert_eq!(app.run_count().await, runs);

    let runs = app.run_count().await;
    let wrong_schema = body.replacen("bakeoff.run/1", "bakeoff.run/9", 1);
    let r = upload(wrong_schema.into_bytes()).await.unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let page = Page::parse(422, &r.text().await.unwrap());
    // The error leads the page (under its heading), not below the whole archive table.
    assert!(page.text("#import-error").contains("bakeoff.run/9"));
    let html = page.html.html();
    let at = |id: &str| html.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id}"));
    assert!(at("import-error") < at("import-heading"));
    let tampered = body.replacen("Label: {{text}}", "Label: {{text}}!", 1);
    let r = upload(tampered.into_bytes()).await.unwrap();
    assert_eq!(r.status().as_u16(), 422);
    assert!(
        Page::parse(422, &r.text().await.unwrap())
            .text(".form-errors")
            .contains("hash")
    );
    assert_eq!(upload(b"not json".to_vec()).await.unwrap().status().as_u16(), 422);
    assert_eq!(app.run_count().await, runs, "nothing stored from a bad file");

    // An unfinished run is not exported.
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let open = app.create_run("open", version, &[alpha]).await;
    assert_eq!(app.get(&format!("/runs/{open}/export.json")).await.status(), 400);
    assert_eq!(app.get("/runs/999/export.json").await.status(), 404);
}

#[tokio::test]
async fn the_cli_exports_and_imports_runs() {
    let (from_url, _a) = crate::support::db::sqlite_url();
    let (to_url, _b) = crate::support::db::sqlite_url();
    let from = crate::support::db::open(&from_url).await;
    let (run, n) = exportable_run(&from).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    cli::export_run(&from_url, run, &file);
    let id = cli::import_run(&to_url, &file);
    let to = crate::support::db::open(&to_url).await;
    assert_eq!(to.list_request_records(id).await.unwrap().len(), n);
    // Without --output (streamed to standard output): the same document as the file's.
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "run",
            "export",
            "--run-id",
            &run.to_string(),
            "--database-url",
            &from_url,
        ])
        .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    let printed = bakeoff::app::transfer::parse_export(&String::from_utf8(printed.stdout).unwrap()).unwrap();
    let written = bakeoff::app::transfer::parse_export(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(printed.records.len(), n);
    assert_eq!(printed.records, written.records);
    assert_eq!(printed.run, written.run);
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(["run", "export", "--run-id", "999", "--database-url", &from_url])
        .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("run #999"));
    // A file is written under its own name only when whole.
    let refused = dir.path().join("refused.json");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "run",
            "export",
            "--run-id",
            "999",
            "--database-url",
            &from_url,
            "--output",
        ])
        .arg(&refused)
        .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["run.json"], "only the finished export is there");
}

#[tokio::test]
async fn runs_that_overlapped_on_a_candidate_are_flagged() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let beta = app.create_candidate("beta", DEAD_URL).await;
    let first = app.create_run("first", version, &[alpha]).await;
    let second = app.create_run("second", version, &[alpha, beta]).await;
    let apart = app.create_run("apart", version, &[beta]).await;
    app.store.set_run_status(first, RunStatus::Running, None).await.unwrap();
    app.store
        .set_run_status(second, RunStatus::Running, None)
        .await
        .unwrap();
    let page = app.get_html(&format!("/runs/{first}")).await;
    assert_eq!(
        page.attr(".overlap-warning li", "data-overlap"),
        Some(second.to_string())
    );
    assert!(page.text(".overlap-warning li").contains("alpha"));
    // A run that never ran alongside is not flagged.
    assert_eq!(
        app.get_html(&format!("/runs/{apart}")).await.count(".overlap-warning"),
        0
    );
    app.state.runner.cancel(first);
}

#[tokio::test]
async fn a_case_with_many_attempts_shows_failed_ones_first_within_a_cap() {
    let app = spawn_app().await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha", DEAD_URL).await;
    let run = app.create_run("many reps", version, &[alpha]).await;
    let records: Vec<_> = (0..30u32)
        .map(|rep| {
            let mut r = record(run, alpha, "c1", "positive", rep != 27);
            r.repetition = rep;
            r
        })
        .collect();
    app.store.append_request_records(&records).await.unwrap();
    let page = app.get_html(&format!("/runs/{run}/cases")).await;
    assert_eq!(page.count("#case-c1 section.attempt"), 24);
    assert_eq!(
        page.count("#case-c1 section.attempt h3 .badge.fail"),
        1,
        "the failed repetition is shown"
    );
    assert!(
        page.text("#case-c1 h2 small")
            .contains("1 of 30 attempts failed · showing 24")
    );
}
