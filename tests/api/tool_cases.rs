//! Tool cases end to end (docs/tool-cases.md): the shipped `zh-en-tool-calls` set run against
//! the demo mock at concurrency 16, natively and in prompt mode. Every answer is graded as the
//! mock's ground truth says it was made, and the scorecard (the "Agent tool calls" profile)
//! judges both runs: the fast candidate that fumbles tool calls is a NO-GO for that reason.
use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use bakeoff::domain::run::{NewRun, RunConfig};
use bakeoff::domain::thresholds::templates::AGENT_PROFILE_NAME;
use bakeoff::domain::tool_calls::{TOOL_GRADER, ToolCallsDetail, ToolMode};
use bakeoff::store::DynStore;

use crate::support::app::{TestApp, spawn_app_with};

/// Longest one run may take before the test fails instead of hanging.
const RUN_DEADLINE: Duration = Duration::from_secs(180);
const TOOL_SET: &str = "zh-en-tool-calls";

/// Runs the tool set on the named demo models at c = 16 in `mode`; returns the run id.
async fn tool_run(app: &TestApp, models: &[&str], mode: ToolMode) -> i64 {
    let store: &DynStore = &app.store;
    let version = store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == TOOL_SET)
        .expect("the tool set ships")
        .latest_version_id;
    let candidate_ids: Vec<i64> = store
        .list_candidates()
        .await
        .unwrap()
        .iter()
        .filter(|c| models.iter().any(|m| c.spec.model == *m))
        .map(|c| c.id)
        .collect();
    assert_eq!(candidate_ids.len(), models.len());
    let run = store
        .create_run(&NewRun {
            name: format!("tools, {} mode", mode.as_str()),
            evalset_version_id: version,
            candidate_ids,
            config: RunConfig {
                concurrency: 16,
                repetitions: 2,
                warmup_requests: 0,
                tool_mode: mode,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    app.state.app.runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, app.state.app.runner.wait(run))
        .await
        .expect("the tool run ended in time");
    run
}

/// The mock's truth per (model, case id): the tool fault it put in its answer (None: right) and
/// how the calls were sent.
async fn mock_truth(root_url: &str) -> HashMap<(String, String), (Option<String>, String)> {
    let page: Value = reqwest::get(format!("{root_url}/mock/requests"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut out = HashMap::new();
    for r in page["requests"].as_array().unwrap() {
        let case = &r["case"];
        if case["set"] == TOOL_SET {
            let fault = case["tool_fault"].as_str().map(str::to_string);
            let mode = case["tool_mode"].as_str().unwrap_or_default().to_string();
            out.insert(
                (
                    r["model"].as_str().unwrap().to_string(),
                    case["case_id"].as_str().unwrap().to_string(),
                ),
                (fault, mode),
            );
        }
    }
    out
}

#[tokio::test]
async fn tool_cases_run_natively_and_in_prompt_mode_at_c16_graded_as_the_mock_made_them() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::app::demo::start_mock(listener).await.unwrap();
    let app = spawn_app_with(Some(&mock.base_url())).await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), Some(&mock.base_url()))
        .await
        .unwrap();
    let models = ["steady-32b", "relay-8b"];
    let native = tool_run(&app, &models, ToolMode::Native).await;
    let truth_native = mock_truth(&mock.root_url()).await;
    let prompt = tool_run(&app, &models, ToolMode::Prompt).await;
    let truth_prompt = mock_truth(&mock.root_url()).await;
    let candidates = app.store.list_candidates().await.unwrap();
    let model_of = |id: i64| candidates.iter().find(|c| c.id == id).unwrap().spec.model.clone();

    for (run, truth, mode) in [(native, &truth_native, "native"), (prompt, &truth_prompt, "prompt")] {
        let records = app.store.list_request_records(run).await.unwrap();
        let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
        assert_eq!(measured.len(), 2 * 20 * 2, "{mode}: every case twice per candidate");
        let (mut graded, mut malformed) = (0, 0);
        for r in measured.iter().filter(|r| r.succeeded()) {
            let turn = r.tool_turn().expect("a tool case's record keeps its tool turn");
            assert_eq!(turn.mode.as_str(), mode);
            let grade = r
                .grades
                .iter()
                .find(|g| &*g.grader == TOOL_GRADER)
                .unwrap_or_else(|| panic!("{mode}: {} has no tool-calls grade", r.case_id));
            let detail = ToolCallsDetail::from_grade(grade).unwrap();
            let (fault, sent) = truth
                .get(&(model_of(r.candidate_id), r.case_id.to_string()))
                .unwrap_or_else(|| panic!("no mock truth for {}", r.case_id));
            // Graded exactly as the mock made the answer: right when it made no mistake, and a
            // malformed call exactly when it garbled one.
            assert_eq!(
                grade.passed,
                fault.is_none(),
                "{mode} {} {}: mock fault {fault:?}, grade {}",
                model_of(r.candidate_id),
                r.case_id,
                grade.reason
            );
            let garbled = matches!(
                fault.as_deref(),
                Some("arguments_not_json" | "arguments_double_encoded" | "call_in_text")
            );
            assert_eq!(detail.malformed, garbled, "{mode} {}: {}", r.case_id, grade.reason);
            let expected_mode = match (mode, fault.as_deref()) {
                ("prompt", _) => "prompt",
                (_, Some("call_in_text")) => "in_text",
                _ => "native",
            };
            assert_eq!(sent, expected_mode, "{}", r.case_id);
            graded += 1;
            malformed += usize::from(detail.malformed);
            if mode == "native" && r.first_content_us.get().is_some() && !turn.calls.is_empty() {
                // A streamed native call is timed: first argument piece, then the complete call.
                let (first, complete) = (turn.first_argument_us.unwrap(), turn.complete_us.unwrap());
                assert!(
                    first <= complete && complete <= r.end_us.get().unwrap(),
                    "{}",
                    r.case_id
                );
            }
        }
        assert!(graded >= 70, "{mode}: only {graded} graded answers");
        assert!(malformed > 0, "{mode}: relay-8b garbles some calls");
    }

    // The scorecard judges both runs by the agent profile: relay-8b, fast and right on text,
    // fails on its tool calls; the page shows the tool figures for both modes.
    let profile = app
        .store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == AGENT_PROFILE_NAME)
        .expect("the agent profile ships")
        .id;
    for run in [native, prompt] {
        let (page, _) = app.page(&format!("/runs/{run}/scorecard?profile={profile}")).await;
        assert_eq!(page.status, 200);
        let card = page
            .select(".verdict-card")
            .into_iter()
            .find(|c| crate::support::app::text_of(c).contains("relay-8b"))
            .map(|c| crate::support::app::text_of(&c))
            .expect("a verdict card for relay-8b");
        assert!(card.contains("NO-GO"), "{card}");
        assert!(
            card.contains("tool-call accuracy") || card.contains("malformed-call rate"),
            "the NO-GO names the tool figures: {card}"
        );
        let table = page.text(".scorecard-table");
        for label in [
            "tool-call accuracy",
            "malformed-call rate",
            "tool-call argument F1",
            "tool abstention errors",
        ] {
            assert!(table.contains(label), "run {run}: no {label} row");
        }
    }
    mock.shutdown().await.unwrap();
}
