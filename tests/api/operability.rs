//! Operability probes over real HTTP against mock profiles built to pass every probe and to
//! fail every probe; the operability page (probe now, checklist versions, score) in the app.
use std::collections::BTreeMap;
use std::time::Duration;

use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::operability::{ProbeKind, ProbeOutcome, ProbeReport};
use bakeoff::engine::probes::{ProbeOptions, run_probes};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile, OverlongBehaviour};

use crate::support::app::spawn_app;

/// The key given to every probed candidate: it must never appear in a report.
const KEY: &str = "sk-probe-secret-7f3a9";

async fn mock(profiles: Vec<ModelProfile>) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: vec![],
        seed: 7,
    })
    .await
}

fn spec(base_url: &str, model: &str) -> CandidateSpec {
    CandidateSpec {
        api_key: Some(Secret::new(KEY)),
        ..CandidateSpec::openai_chat(format!("probe {model}"), base_url, model)
    }
}

/// A quick, well-behaved model: one slot (so held capacity would show), a small context window
/// (so the over-long prompt stays small), fast tokens.
fn good(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 5.0,
        tokens_per_second: 400.0,
        slots: Some(1),
        context_length: 2048,
        ..ModelProfile::named(name)
    }
}

fn options() -> ProbeOptions {
    ProbeOptions {
        timeout: Duration::from_secs(4),
        ..ProbeOptions::default()
    }
}

fn outcomes(report: &ProbeReport) -> BTreeMap<&'static str, ProbeOutcome> {
    report.results.iter().map(|r| (r.kind.key(), r.outcome)).collect()
}

fn assert_no_key(report: &ProbeReport) {
    let json = serde_json::to_string(report).unwrap();
    assert!(!json.contains(KEY), "the API key leaked into the report");
}

#[tokio::test]
async fn every_probe_passes_against_a_well_behaved_endpoint() {
    let server = mock(vec![good("good")]).await;
    let report = run_probes(&spec(&server.base_url(), "good"), &options()).await;
    assert_eq!(report.results.len(), ProbeKind::ALL.len());
    for r in &report.results {
        assert_eq!(
            r.outcome,
            ProbeOutcome::Pass,
            "{}: {} {:?}",
            r.kind.key(),
            r.summary,
            r.evidence
        );
        assert!(r.evidence.excerpt.chars().count() <= 300);
    }
    assert!(
        report
            .provenance
            .iter()
            .any(|(k, v)| k == "server" && v.starts_with("bakeoff-mock/")),
        "{:?}",
        report.provenance
    );
    let overlong = report.result(ProbeKind::OverlongPrompt4xx).unwrap();
    assert!(
        overlong.summary.contains("naming the context length"),
        "{}",
        overlong.summary
    );
    assert!(
        overlong.evidence.notes[0].contains("stated by the server"),
        "{:?}",
        overlong.evidence.notes
    );
    assert_no_key(&report);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_probe_fails_against_a_badly_behaved_endpoint() {
    let bad = ModelProfile {
        tokens_per_second: 100.0, // an abandoned 256-token stream holds its slot ~2.5 s
        no_metrics: true,
        no_health: true,
        unlisted: true,
        no_usage_in_stream: true,
        ignore_max_tokens: true,
        invalid_param_status: 500,
        overlong_prompt_behaviour: OverlongBehaviour::ServerError,
        hold_slot_after_cancel: true,
        no_rate_limit_headers: true,
        reported_model: Some("gpt-4o-mini".into()),
        ..good("bad")
    };
    let server = mock(vec![bad]).await;
    // The server does not list the model, so its context length is declared on the candidate.
    let mut s = spec(&server.base_url(), "bad");
    s.conditions.context_length = Some(2048);
    let report = run_probes(&s, &options()).await;
    let got = outcomes(&report);
    for kind in ProbeKind::ALL {
        let want = if kind == ProbeKind::VersionHeaders {
            ProbeOutcome::Pass // the server header is still there: provenance, not a defect
        } else {
            ProbeOutcome::Fail
        };
        let r = report.result(kind).unwrap();
        assert_eq!(got[kind.key()], want, "{}: {} {:?}", kind.key(), r.summary, r.evidence);
    }
    let say = |k: ProbeKind| report.result(k).unwrap().summary.clone();
    assert!(
        say(ProbeKind::MaxTokensHonoured).contains("got 11"),
        "{}",
        say(ProbeKind::MaxTokensHonoured)
    );
    assert!(
        say(ProbeKind::InvalidParam4xx).contains("HTTP 500"),
        "{}",
        say(ProbeKind::InvalidParam4xx)
    );
    assert!(
        say(ProbeKind::OverlongPrompt4xx).contains("HTTP 500"),
        "{}",
        say(ProbeKind::OverlongPrompt4xx)
    );
    assert!(
        say(ProbeKind::ModelFieldMatches).contains("gpt-4o-mini"),
        "{}",
        say(ProbeKind::ModelFieldMatches)
    );
    assert!(
        say(ProbeKind::CancelFreesCapacity).contains("still hold capacity"),
        "{}",
        say(ProbeKind::CancelFreesCapacity)
    );
    assert_no_key(&report);
}

#[tokio::test]
async fn overlong_prompts_that_hang_or_truncate_fail_and_an_undeclared_window_is_not_judged() {
    let server = mock(vec![
        ModelProfile {
            overlong_prompt_behaviour: OverlongBehaviour::Hang,
            ..good("hangs")
        },
        ModelProfile {
            overlong_prompt_behaviour: OverlongBehaviour::Truncate,
            ..good("truncates")
        },
        ModelProfile {
            overlong_prompt_behaviour: OverlongBehaviour::Truncate,
            unlisted: true,
            ..good("unstated")
        },
    ])
    .await;
    let quick = ProbeOptions {
        timeout: Duration::from_secs(2),
        ..ProbeOptions::default()
    };
    let started = std::time::Instant::now();
    let hang = run_probes(&spec(&server.base_url(), "hangs"), &quick).await;
    let r = hang.result(ProbeKind::OverlongPrompt4xx).unwrap();
    assert_eq!(r.outcome, ProbeOutcome::Fail, "{}", r.summary);
    assert!(r.summary.contains("no answer within 2.0 s"), "{}", r.summary);
    assert!(started.elapsed() < Duration::from_secs(20), "every probe is bounded");

    let cut = run_probes(&spec(&server.base_url(), "truncates"), &quick).await;
    let r = cut.result(ProbeKind::OverlongPrompt4xx).unwrap();
    assert_eq!(r.outcome, ProbeOutcome::Fail, "{}", r.summary);
    assert!(r.summary.contains("silently truncated"), "{}", r.summary);

    // Neither the server nor the candidate states a window: a 200 proves nothing.
    let unknown = run_probes(&spec(&server.base_url(), "unstated"), &quick).await;
    let r = unknown.result(ProbeKind::OverlongPrompt4xx).unwrap();
    assert_eq!(r.outcome, ProbeOutcome::NotApplicable, "{}", r.summary);
}

#[tokio::test]
async fn an_unreachable_endpoint_fails_quickly_with_the_transport_error() {
    // Bind and drop a listener: nothing answers on that port.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let started = std::time::Instant::now();
    let report = run_probes(&spec(&format!("http://127.0.0.1:{port}/v1"), "m"), &options()).await;
    assert!(started.elapsed() < Duration::from_secs(15));
    let got = outcomes(&report);
    assert_eq!(got["models_lists_model"], ProbeOutcome::Fail);
    assert_eq!(got["version_headers"], ProbeOutcome::NotApplicable);
    assert!(
        report.results.iter().all(|r| r.outcome != ProbeOutcome::Pass),
        "{:?}",
        got
    );
    let models = report.result(ProbeKind::ModelsListsModel).unwrap();
    assert!(models.summary.to_lowercase().contains("refused"), "{}", models.summary);
    assert_no_key(&report);
}

#[tokio::test]
async fn the_operability_page_runs_probes_versions_the_checklist_and_scores() {
    let server = mock(vec![good("good")]).await;
    let app = spawn_app().await;
    let id = app.create_candidate("ops", &server.base_url()).await;
    // Point the candidate at the mock's model and give it a key that must never be shown.
    let mut c = app.store.get_candidate(id).await.unwrap().unwrap();
    c.spec.model = "good".into();
    c.spec.api_key = Some(Secret::new(KEY));
    app.store
        .update_candidate(&crate::support::checked::admin_change(app.store.as_ref(), id, &c.spec).await)
        .await
        .unwrap();

    let page = app.get_html(&format!("/candidates/{id}/operability")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.text(".score-value"), "not measured");
    let list = app.get_html("/candidates").await;
    assert_eq!(list.count(&format!("a[href='/candidates/{id}/operability']")), 1);

    let r = app
        .post_form(&format!("/candidates/{id}/operability/probes"), &[])
        .await;
    assert_eq!(r.status(), 303);
    // The probes run in the background (issue 54): the answer is at once, the page follows them.
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(to, format!("/candidates/{id}/operability?probing=1#probes"));
    crate::support::wait::until("the background probes are saved", Duration::from_secs(60), || async {
        !app.store.list_probe_runs(id, 1).await.unwrap().is_empty()
    })
    .await;
    // Once saved (and ended), the live notice tells htmx to reload the page.
    crate::support::wait::until(
        "the probes' live notice says they ended",
        Duration::from_secs(10),
        || async {
            app.get(&format!("/candidates/{id}/operability/probes/live"))
                .await
                .headers()
                .contains_key("hx-refresh")
        },
    )
    .await;
    let body = app
        .get(&format!("/candidates/{id}/operability?probing=1"))
        .await
        .text()
        .await
        .unwrap();
    assert!(!body.contains(KEY), "the key is never shown");
    let page = bakeoff_page(&body);
    assert_eq!(page.count("#probed"), 1, "the ended probes are confirmed");
    assert_eq!(page.count("tr[data-probe]"), ProbeKind::ALL.len());
    assert_eq!(page.count("tr[data-outcome='pass']"), ProbeKind::ALL.len());
    assert_eq!(page.text(".score-value"), "100 %", "probes only so far");

    // An invalid checklist changes nothing and names the field.
    let bad = app
        .post_form_html(
            &format!("/candidates/{id}/operability/checklist"),
            &[("answer_logging", "maybe"), ("changed_by", "")],
        )
        .await;
    assert_eq!(bad.status, 422);
    assert!(bad.count("[aria-invalid='true']") >= 2);
    assert!(app.store.checklist_history(id).await.unwrap().is_empty());

    let mut fields = vec![("changed_by", "Mei"), ("rationale", "first pass")];
    fields.extend([
        ("answer_hardware_recorded", "yes"),
        ("answer_runtime_pinned", "yes"),
        ("answer_model_files_complete", "yes"),
        ("answer_ports_permissions", "yes"),
        ("answer_logging", "no"),
        ("notes_logging", "stdout <b>only</b>"),
        ("answer_monitoring", "yes"),
        ("answer_upgrade_rollback", "na"),
        ("answer_access_control", "yes"),
    ]);
    let r = app
        .post_form(&format!("/candidates/{id}/operability/checklist"), &fields)
        .await;
    assert_eq!(r.status(), 303);
    let r = app
        .post_form(
            &format!("/candidates/{id}/operability/checklist"),
            &[
                ("changed_by", "Bo"),
                ("rationale", "logs shipped"),
                ("answer_hardware_recorded", "yes"),
                ("answer_runtime_pinned", "yes"),
                ("answer_model_files_complete", "yes"),
                ("answer_ports_permissions", "yes"),
                ("answer_logging", "yes"),
                ("notes_logging", "Loki"),
                ("answer_monitoring", "yes"),
                ("answer_upgrade_rollback", "na"),
                ("answer_access_control", "no"),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    let page = app.get_html(&format!("/candidates/{id}/operability?saved=1")).await;
    // Probes 11/11, checklist 6 yes of 7 applicable → (1 + 6/7) / 2 = 93 %.
    assert_eq!(page.text(".score-value"), "93 %");
    assert_eq!(page.count("#checklist-v1"), 1);
    assert_eq!(page.count("#checklist-v2"), 1);
    let v2 = page.text("#checklist-v2");
    assert!(
        v2.contains("Bo") && v2.contains("Logging: no → yes") && v2.contains("Access control: yes → no"),
        "{v2}"
    );
    // Notes are escaped, and the form shows the current answers.
    assert!(page.text("#checklist-v1").contains("stdout <b>only</b>"));
    assert_eq!(
        page.attr("input[name='answer_access_control'][value='no']", "checked"),
        Some(String::new())
    );
    let history = app.store.checklist_history(id).await.unwrap();
    assert_eq!((history[0].version, history[0].changed_by.as_str()), (2, "Bo"));

    assert_eq!(app.get("/candidates/999999/operability").await.status(), 404);
    server.shutdown().await.unwrap();
}

fn bakeoff_page(body: &str) -> crate::support::app::Page {
    crate::support::app::Page::parse(200, body)
}

#[tokio::test]
async fn the_demo_candidates_differ_in_their_probe_results() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = bakeoff::app::demo::start_mock(listener).await.unwrap();
    let candidates = bakeoff::app::demo::demo_candidates(&server.base_url());
    let options = ProbeOptions {
        timeout: Duration::from_secs(3),
        ..ProbeOptions::default()
    };
    let reports = futures_util::future::join_all(candidates.iter().map(|c| run_probes(c, &options))).await;
    let failed = |i: usize| -> Vec<&'static str> {
        let failed: Vec<_> = reports[i]
            .results
            .iter()
            .filter(|r| r.outcome == ProbeOutcome::Fail)
            .collect();
        for r in &failed {
            eprintln!(
                "{}: {}: {} {:?}",
                candidates[i].model,
                r.kind.key(),
                r.summary,
                r.evidence
            );
        }
        failed.iter().map(|r| r.kind.key()).collect()
    };
    let by_model = |model: &str| candidates.iter().position(|c| c.model == model).unwrap();
    assert_eq!(
        failed(by_model("steady-32b")),
        Vec::<&str>::new(),
        "{:?}",
        reports[by_model("steady-32b")]
    );
    assert_eq!(
        failed(by_model("swift-7b")),
        vec!["overlong_prompt_4xx", "rate_limit_headers", "model_field_matches"]
    );
    assert_eq!(
        failed(by_model("sage-70b")),
        vec!["overlong_prompt_4xx", "cancel_frees_capacity"]
    );
}

#[tokio::test]
async fn a_server_that_echoes_the_key_never_gets_it_into_the_report() {
    use axum::http::HeaderMap;
    // Every URL answers with the credential it was sent, in the body and in headers.
    async fn echo(headers: HeaderMap) -> axum::response::Response {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        axum::response::Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .header("x-ratelimit-echo", auth.clone())
            .header("server", auth.clone())
            .body(axum::body::Body::from(format!(
                "{{\"error\":{{\"message\":\"bad key {auth}\"}},\"model\":\"{auth}\"}}"
            )))
            .unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().fallback(echo)).await.unwrap();
    });
    let report = run_probes(&spec(&format!("http://{addr}/v1"), "m"), &options()).await;
    assert!(
        report.results.iter().any(|r| r.evidence.excerpt.contains("bad key")),
        "the bodies were seen"
    );
    assert_no_key(&report);
    server.abort();
}

#[tokio::test]
async fn a_soak_with_out_of_range_values_reshows_the_form_with_every_error_and_starts_nothing() {
    let app = spawn_app().await;
    let id = app.create_candidate("soaked", "http://127.0.0.1:9").await;
    let version = app.create_evalset().await.to_string();
    let page = app
        .post_form_html(
            &format!("/candidates/{id}/operability/soak"),
            &[
                ("evalset_version_id", version.as_str()),
                ("seconds", "-3"),
                ("concurrency", "700"),
            ],
        )
        .await;
    assert_eq!(page.status, 422);
    assert_eq!(
        page.texts(".soak-form .field-error"),
        [
            "Seconds must be a whole number from 5 to 600, got -3",
            "Concurrency must be between 1 and 64, got 700",
        ]
    );
    // The form as typed, the chosen set still chosen.
    assert_eq!(
        page.attr(".soak-form input[name='seconds']", "value").as_deref(),
        Some("-3")
    );
    assert_eq!(
        page.attr(".soak-form input[name='concurrency']", "value").as_deref(),
        Some("700")
    );
    assert_eq!(page.attr(".soak-form option[selected]", "value"), Some(version));

    let page = app
        .post_form_html(
            &format!("/candidates/{id}/operability/soak"),
            &[("evalset_version_id", "999999"), ("seconds", "30")],
        )
        .await;
    assert_eq!(page.status, 422);
    assert_eq!(
        page.texts(".soak-form .field-error"),
        ["Eval set must be one of the eval sets listed"]
    );
    assert!(app.store.list_runs(10, 0).await.unwrap().is_empty(), "nothing started");
}
