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
                tool_mode: mode.into(),
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

/// The mock's truth per (model, case id, sent in prompt mode): the tool fault it put in its
/// answer (None: right). In a `both` run the two modes of one model hit the same mock model.
async fn mock_truth_by_mode(root_url: &str) -> HashMap<(String, String, bool), Option<String>> {
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
            out.insert(
                (
                    r["model"].as_str().unwrap().to_string(),
                    case["case_id"].as_str().unwrap().to_string(),
                    case["tool_mode"] == "prompt",
                ),
                case["tool_fault"].as_str().map(str::to_string),
            );
        }
    }
    out
}

/// Issue 45's done-criterion: one run, tool mode `both`, started from the run form at c = 16
/// against the demo mock. Each candidate is measured natively and, right after it at the same
/// load, as its prompt-mode variant "NAME (prompt mode)" (a candidate of the run of its own, kept
/// out of the candidate lists); every answer is graded as the mock's ground truth says it was
/// made in that mode; the run page's tool table and the scorecard show both modes side by side,
/// each with its own verdict under the agent profile. Run again, the variants are reused.
async fn both_tool_modes_run_side_by_side_with_a_verdict_each(t: crate::support::db::TestStore) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::app::demo::start_mock(listener).await.unwrap();
    let app = crate::support::app::spawn_app_on(t).await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), Some(&mock.base_url()))
        .await
        .unwrap();
    let version = app
        .store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == TOOL_SET)
        .expect("the tool set ships")
        .latest_version_id;
    let listed = app.store.list_candidates().await.unwrap();
    let chosen: Vec<_> = ["steady-32b", "relay-8b"]
        .iter()
        .map(|m| listed.iter().find(|c| c.spec.model == *m).unwrap().clone())
        .collect();
    let (version_text, first, second) = (version.to_string(), chosen[0].id.to_string(), chosen[1].id.to_string());
    let r = app
        .post_form(
            "/runs",
            &[
                ("evalset_version", version_text.as_str()),
                ("candidate", first.as_str()),
                ("candidate", second.as_str()),
                ("concurrency", "16"),
                ("repetitions", "2"),
                ("warmup_requests", "0"),
                ("retries", "0"),
                ("timeout_secs", "30"),
                ("stream", "on"),
                ("tool_mode", "both"),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    let run = app.store.list_runs(1, 0).await.unwrap()[0].run.clone();
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(run.id))
        .await
        .expect("the run ended in time");
    let run = app.store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(run.status, bakeoff::domain::run::RunStatus::Finished, "{:?}", run.error);
    assert_eq!(run.config.tool_mode, bakeoff::domain::tool_calls::RunToolMode::Both);
    // Each candidate, then its variant; the variants are the run's, not the team's list.
    assert_eq!(run.candidate_ids.len(), 4);
    assert_eq!(
        run.config.prompt_mode_candidates,
        [run.candidate_ids[1], run.candidate_ids[3]]
    );
    assert_eq!(run.candidate_ids[0], chosen[0].id);
    assert_eq!(run.candidate_ids[2], chosen[1].id);
    assert_eq!(app.store.list_candidates().await.unwrap().len(), listed.len());
    let in_run = app.store.run_candidates(run.id).await.unwrap();
    let names: Vec<&str> = in_run.iter().map(|c| c.spec.name.as_str()).collect();
    let variant_name = |i: usize| format!("{} (prompt mode)", chosen[i].spec.name);
    assert_eq!(
        names,
        [
            chosen[0].spec.name.as_str(),
            variant_name(0).as_str(),
            chosen[1].spec.name.as_str(),
            variant_name(1).as_str()
        ]
    );

    // Every answer graded as the mock made it, in the mode its column says.
    let truth = mock_truth_by_mode(&mock.root_url()).await;
    let records = app.store.list_request_records(run.id).await.unwrap();
    let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
    assert_eq!(measured.len(), 4 * 20 * 2, "every case twice per candidate and mode");
    let mut graded = HashMap::new();
    for r in measured.iter().filter(|r| r.succeeded()) {
        let prompt = run.config.prompt_mode_candidates.contains(&r.candidate_id);
        let turn = r.tool_turn().expect("a tool case's record keeps its tool turn");
        assert_eq!(turn.mode.as_str(), if prompt { "prompt" } else { "native" });
        let model = &in_run.iter().find(|c| c.id == r.candidate_id).unwrap().spec.model;
        let fault = truth
            .get(&(model.clone(), r.case_id.to_string(), prompt))
            .unwrap_or_else(|| panic!("no mock truth for {model} {} prompt={prompt}", r.case_id));
        let grade = r.grades.iter().find(|g| &*g.grader == TOOL_GRADER).unwrap();
        assert_eq!(
            grade.passed,
            fault.is_none(),
            "{model} {} prompt={prompt}: mock fault {fault:?}, grade {}",
            r.case_id,
            grade.reason
        );
        *graded.entry(r.candidate_id).or_insert(0) += 1;
    }
    for id in &run.candidate_ids {
        assert!(graded.get(id).copied().unwrap_or(0) >= 30, "candidate {id}: {graded:?}");
    }

    // The run page: one tool table, both modes, a row per candidate and mode at c=16.
    let (page, _) = app.page(&format!("/runs/{}", run.id)).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.attr(".tool-levels", "data-tool-mode").as_deref(), Some("both"));
    assert_eq!(page.count(".tool-levels [data-both-modes]"), 1);
    let rows: Vec<String> = page
        .select(".tool-levels-table tbody tr")
        .iter()
        .map(|r| r.value().attr("data-candidate").unwrap().to_string())
        .collect();
    assert_eq!(rows, names, "each candidate beside its prompt mode");
    assert_eq!(
        page.count("button[data-tool-mode]"),
        0,
        "both modes are in this run already"
    );

    // The scorecard: a verdict per candidate and mode, each with its own tool figures.
    let profile = app
        .store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == AGENT_PROFILE_NAME)
        .expect("the agent profile ships")
        .id;
    let (card, _) = app.page(&format!("/runs/{}/scorecard?profile={profile}", run.id)).await;
    assert_eq!(card.status, 200);
    for (c, name) in run.candidate_ids.iter().zip(&names) {
        let sel = format!(".verdict-card[data-candidate=\"{c}\"]");
        assert_eq!(card.text(&format!("{sel} h3")), *name);
        let verdict = card.text(&format!("{sel} .verdict"));
        assert!(
            ["GO", "NO-GO", "INCONCLUSIVE"].contains(&verdict.as_str()),
            "{name}: {verdict}"
        );
    }
    // relay-8b fumbles its calls in either mode: NO-GO natively and in prompt mode.
    for c in &run.candidate_ids[2..] {
        let verdict = card.text(&format!(".verdict-card[data-candidate=\"{c}\"] .verdict"));
        assert_eq!(verdict, "NO-GO", "candidate {c}");
    }
    let table = card.text(".scorecard-table");
    for name in &names {
        assert!(table.contains(name), "the scorecard table has a column for {name}");
    }
    for label in ["tool-call accuracy", "malformed-call rate", "tool-call argument F1"] {
        assert!(table.contains(label), "no {label} row");
    }
    assert!(card.text("body").contains("tool calls in both modes"));

    // Run again: the same variants, brought up to date, not new ones.
    let r = app.post_form(&format!("/runs/{}/again", run.id), &[]).await;
    assert_eq!(r.status(), 303);
    let again = app.store.list_runs(1, 0).await.unwrap()[0].run.clone();
    assert_ne!(again.id, run.id);
    assert_eq!(again.candidate_ids, run.candidate_ids);
    assert_eq!(again.config.prompt_mode_candidates, run.config.prompt_mode_candidates);
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(again.id))
        .await
        .expect("the second run ended in time");
    mock.shutdown().await.unwrap();
}

crate::support::db::each_backend!(both_tool_modes_run_side_by_side_with_a_verdict_each);

/// The shipped tool set, parsed.
fn tool_set() -> bakeoff::domain::evalset::EvalSetFile {
    bakeoff::app::demo::shipped_evalset_files()
        .unwrap()
        .into_iter()
        .find(|f| f.header.name == TOOL_SET)
        .expect("the tool set ships")
}

/// A run of the tool set on `candidate` at c = 1 and c = 8 in `mode`, driven to its end.
async fn levels_run(app: &TestApp, version: i64, candidate: i64, mode: ToolMode) -> i64 {
    let run = app
        .store
        .create_run(&NewRun {
            name: format!("cuts, {} mode", mode.as_str()),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 1,
                load: bakeoff::domain::load::LoadShape::Levels { levels: vec![1, 8] },
                repetitions: 1,
                warmup_requests: 0,
                retries: 1,
                staged_rollout: false,
                error_budget: bakeoff::domain::run::ErrorBudget {
                    max_failed_percent: 100.0,
                    window: 20,
                },
                tool_mode: mode.into(),
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    app.state.app.runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, app.state.app.runner.wait(run))
        .await
        .expect("the run ended in time");
    run
}

/// Issue 45: a native stream cut mid-call (the mock's `tool_faults.stream_cut` breaks the
/// stream off halfway through the first call's arguments, or inside its `<tool_call>` block in
/// prompt mode) is a failed request AND a graded answer: `stream-cut`, malformed, on every
/// attempt of exactly the cases the mock cut. The run page and the scorecard show the tool
/// figures per load level (c=1 and c=8) with the cut answers in the malformed-call rate, and
/// the two modes' runs link each other side by side.
async fn a_stream_cut_mid_call_is_graded_and_shown_per_level(t: crate::support::db::TestStore) {
    use bakeoff::domain::run::ErrorClass;
    let file = tool_set();
    let cutter = bakeoff::mock::ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        accuracy: 1.0,
        tool_faults: bakeoff::mock::ToolFaults {
            stream_cut: 0.35,
            ..Default::default()
        },
        ..bakeoff::mock::ModelProfile::named("cutter")
    };
    let mock = crate::support::runs::start_mock(bakeoff::mock::MockConfig {
        profiles: vec![cutter],
        answer_keys: vec![file.clone()],
        seed: 45,
    })
    .await;
    let app = crate::support::app::spawn_app_on(t).await;
    // The shipped threshold profiles, so the scorecard can judge.
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let candidate = app
        .store
        .create_candidate(&crate::support::checked::admin_new(
            &bakeoff::domain::candidate::CandidateSpec {
                api_key: Some(bakeoff::domain::candidate::Secret::new("sk-tool-cut")),
                ..bakeoff::domain::candidate::CandidateSpec::openai_chat("cutter", mock.base_url(), "cutter")
            },
        ))
        .await
        .unwrap();

    let mut runs = Vec::new();
    for mode in [ToolMode::Native, ToolMode::Prompt] {
        let run = levels_run(&app, version, candidate, mode).await;
        let truth = mock_truth(&mock.root_url()).await;
        let records = app.store.list_request_records(run).await.unwrap();
        let (mut cut, mut right) = (0, 0);
        for r in records.iter().filter(|r| !r.is_warmup) {
            let (fault, _) = truth
                .get(&("cutter".to_string(), r.case_id.to_string()))
                .unwrap_or_else(|| panic!("no mock truth for {}", r.case_id));
            let grade = r.grades.iter().find(|g| &*g.grader == TOOL_GRADER);
            if fault.as_deref() == Some("stream_cut") {
                // A failed request, and a graded, malformed stream-cut call.
                assert_eq!(r.error_class, Some(ErrorClass::StreamCut), "{mode:?} {}", r.case_id);
                let grade = grade.unwrap_or_else(|| panic!("{mode:?} {}: the cut answer is not graded", r.case_id));
                let detail = ToolCallsDetail::from_grade(grade).unwrap();
                let kinds: Vec<&str> = detail.failures.iter().map(|f| f.kind()).collect();
                assert_eq!(kinds, ["stream-cut"], "{mode:?} {}: {}", r.case_id, grade.reason);
                assert!(detail.malformed && !grade.passed);
                assert!(
                    r.grades.iter().all(|g| &*g.grader == TOOL_GRADER),
                    "only the calls are graded"
                );
                cut += 1;
            } else {
                assert!(r.succeeded(), "{mode:?} {}: {:?}", r.case_id, r.error_detail());
                assert!(grade.is_some_and(|g| g.passed), "{mode:?} {}", r.case_id);
                right += 1;
            }
        }
        // Both levels, every case once; a cut case is retried (and cut again).
        assert!(
            cut >= 4 && right >= 10,
            "{mode:?}: {cut} cut attempts, {right} right answers"
        );
        runs.push(run);
    }

    let (native, prompt) = (runs[0], runs[1]);
    for (run, mode, other) in [(native, "native", prompt), (prompt, "prompt", native)] {
        for path in [format!("/runs/{run}"), format!("/runs/{run}/scorecard")] {
            let (page, _) = app.page(&path).await;
            assert_eq!(page.status, 200, "{path}");
            assert_eq!(
                page.attr(".tool-levels", "data-tool-mode").as_deref(),
                Some(mode),
                "{path}"
            );
            let rows = page.select(".tool-levels-table tbody tr");
            let loads: Vec<String> = rows
                .iter()
                .map(|r| r.value().attr("data-load").unwrap().to_string())
                .collect();
            assert_eq!(loads, ["c=1", "c=8"], "{path}");
            let malformed = page.texts(".tool-levels-table [data-figure=malformed_call_rate]");
            let cuts = page.texts(".tool-levels-table [data-figure=cut]");
            assert_eq!(cuts.len(), 2, "{path}: both levels have answers cut mid-call");
            for m in &malformed {
                // e.g. "25.0 % [11.2–46.9 %]": a share above zero with its interval.
                assert!(m.contains('[') && !m.starts_with("0.0 %"), "{path}: {m}");
            }
            // Tool-turn timing, with its caliber named.
            let caption = page.text(".tool-levels-table caption");
            assert!(
                caption.contains("send → first piece of a call's arguments"),
                "{caption}"
            );
            for p50 in page.texts(".tool-levels-table [data-figure=complete_p50]") {
                assert!(p50.ends_with(']') && p50.contains(" ms ["), "{path}: {p50}");
            }
            assert_eq!(
                page.attr(".tool-mode-pair", "data-other-run"),
                Some(other.to_string()),
                "{path}: the other mode's run is linked"
            );
        }
    }
    // The run page offers the other mode; the compare page shows the two modes side by side.
    let (page, _) = app.page(&format!("/runs/{native}")).await;
    assert_eq!(page.count("button[data-tool-mode=prompt]"), 1);
    let (compare, _) = app.page(&format!("/archive/compare?runs={native},{prompt}")).await;
    assert_eq!(compare.status, 200);
    let body = compare.text("body");
    assert!(body.contains("tool calls") && body.contains("native API") && body.contains("prompt mode"));
    mock.shutdown().await.unwrap();
}

crate::support::db::each_backend!(a_stream_cut_mid_call_is_graded_and_shown_per_level);

/// A structured-output eval set: order records the answer must give as JSON of a schema.
fn structured_set(cases: usize) -> bakeoff::domain::evalset::EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"structured-orders","task":"extraction","prompt":"Order {{n}} as JSON","graders":[{"kind":"json-valid"}],"max_tokens":64}"#,
    );
    let format = r#"{"type":"json_schema","json_schema":{"name":"order","schema":{"type":"object","properties":{"id":{"type":"integer"},"status":{"enum":["open","shipped"]},"city":{"type":"string"}},"required":["id","status","city"],"additionalProperties":false}}}"#;
    for i in 0..cases {
        let status = if i % 2 == 0 { "open" } else { "shipped" };
        text.push_str(&format!(
            "\n{{\"id\":\"o{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":{{\"id\":{i},\"status\":\"{status}\",\"city\":\"Lisbon number {i}\"}},\"response_format\":{format}}}"
        ));
    }
    bakeoff::domain::evalset::EvalSetFile::parse("structured-orders.jsonl", &text).expect("the structured set parses")
}

/// Issue 45 point 6: cases with a `response_format` are sent with it (the mock honours it and
/// breaks a share of the JSON, its ground truth per request), every answer is graded against
/// the schema exactly as the mock made it, and with unconstrained twins the same cases are sent
/// without the constraint at the same load in the same run: the run page and the scorecard
/// show the schema-validity rate and TTFT and decode rate side by side with the difference.
async fn structured_output_is_graded_and_its_cost_measured_in_one_run(t: crate::support::db::TestStore) {
    use bakeoff::domain::tool_calls::structured::{SCHEMA_GRADER, twin_of};
    let file = structured_set(12);
    let shaper = bakeoff::mock::ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        accuracy: 1.0,
        invalid_json_rate: 0.3,
        constrained_decode_factor: 3.0,
        ..bakeoff::mock::ModelProfile::named("shaper")
    };
    let mock = crate::support::runs::start_mock(bakeoff::mock::MockConfig {
        profiles: vec![shaper],
        answer_keys: vec![file.clone()],
        seed: 6,
    })
    .await;
    let app = crate::support::app::spawn_app_on(t).await;
    // The shipped threshold profiles, so the scorecard can judge.
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();
    // The stored version keeps the format (read back from either database).
    let stored = app.store.get_evalset_version(version).await.unwrap().unwrap();
    assert_eq!(stored.file.cases[0].response_format, file.cases[0].response_format);
    let candidate = app
        .store
        .create_candidate(&crate::support::checked::admin_new(
            &bakeoff::domain::candidate::CandidateSpec {
                api_key: Some(bakeoff::domain::candidate::Secret::new("sk-structured")),
                ..bakeoff::domain::candidate::CandidateSpec::openai_chat("shaper", mock.base_url(), "shaper")
            },
        ))
        .await
        .unwrap();
    let run = app
        .store
        .create_run(&NewRun {
            name: "structured output".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 4,
                repetitions: 2,
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                unconstrained_twins: true,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    app.state.app.runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, app.state.app.runner.wait(run))
        .await
        .expect("the run ended in time");

    // The mock's truth per request id: whether it was asked with the constraint, and what it made.
    let page: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let truth: HashMap<String, Option<String>> = page["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["client_request_id"].as_str().unwrap_or_default().to_string(),
                r["case"]["structured"].as_str().map(str::to_string),
            )
        })
        .collect();
    let records = app.store.list_request_records(run).await.unwrap();
    let (mut constrained, mut twins, mut invalid) = (0, 0, 0);
    for r in records.iter().filter(|r| !r.is_warmup) {
        assert!(r.succeeded(), "{}: {:?}", r.case_id, r.error_detail());
        let id = bakeoff::engine::run::pool::request_id(
            run,
            candidate,
            r.phase,
            file.cases
                .iter()
                .position(|c| c.id == r.case_id.as_ref())
                .map(|p| p * 2)
                .or_else(|| {
                    let of = twin_of(&r.case_id)?;
                    file.cases.iter().position(|c| c.id == of).map(|p| p * 2 + 1)
                })
                .unwrap(),
            r.repetition,
            r.attempt,
        );
        let made = truth
            .get(&id)
            .unwrap_or_else(|| panic!("no mock truth for {id} ({})", r.case_id));
        let grade = r.grades.iter().find(|g| &*g.grader == SCHEMA_GRADER);
        if twin_of(&r.case_id).is_some() {
            // A twin: sent without the constraint, not graded against the schema.
            assert_eq!(made, &None, "{}", r.case_id);
            assert!(grade.is_none(), "{}", r.case_id);
            twins += 1;
        } else {
            let grade = grade.unwrap_or_else(|| panic!("{}: no response-format grade", r.case_id));
            assert_eq!(
                grade.passed,
                made.as_deref() == Some("valid"),
                "{}: mock made {made:?}, graded {}",
                r.case_id,
                grade.reason
            );
            constrained += 1;
            invalid += usize::from(!grade.passed);
        }
    }
    assert_eq!((constrained, twins), (24, 24), "every case and its twin, twice");
    assert!(
        invalid > 0 && invalid < constrained,
        "{invalid} invalid of {constrained}"
    );

    for path in [format!("/runs/{run}"), format!("/runs/{run}/scorecard")] {
        let (page, _) = app.page(&path).await;
        assert_eq!(page.status, 200, "{path}");
        let valid = page.text(".structured-table [data-figure=schema_valid_rate]");
        let expected = format!("{:.1} %", 100.0 * (constrained - invalid) as f64 / constrained as f64);
        assert!(
            valid.starts_with(&expected) && valid.contains('['),
            "{path}: {valid} (expected {expected})"
        );
        for figure in ["ttft_difference", "decode_difference"] {
            let cell = page.text(&format!(".structured-table [data-figure={figure}]"));
            assert!(cell.contains(" [") && cell.ends_with(']'), "{path}: {figure} {cell}");
        }
        for figure in ["decode_constrained", "decode_unconstrained"] {
            let cell = page.text(&format!(".structured-table [data-figure={figure}]"));
            assert!(cell.ends_with("tok/s"), "{path}: {figure} {cell}");
        }
    }
    mock.shutdown().await.unwrap();
}

crate::support::db::each_backend!(structured_output_is_graded_and_its_cost_measured_in_one_run);
