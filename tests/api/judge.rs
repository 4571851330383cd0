//! `llm-judge` graders run by the engine against the built-in mock, whose judge answers are
//! deterministic (5/5 when the output is the reference, 2/5 otherwise): grades stored with
//! reasons on the judged records, judge calls recorded apart and in no figure, priced at the
//! judge's prices, resumable, and nothing at all when judging is off (the default).

use bakeoff::domain::candidate::{CandidateSpec, Pricing};
use bakeoff::domain::cost::TokenTotals;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::{JUDGE_GRADE_POSITION, case_passed, case_score};
use bakeoff::domain::metrics::summarise_candidate;
use bakeoff::domain::run::{JudgeConfig, NewRun, Phase, RequestRecord, RunConfig, RunStatus};
use bakeoff::domain::scorecard::{JudgeInput, judge_costs};
use bakeoff::engine::run::Runner;
use bakeoff::engine::wire::client::{Exchange, RecordIdentity};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::support::app::spawn_app;
use crate::support::db::{TestStore, each_backend, sqlite_store};
use crate::support::runs::{RUN_DEADLINE, run_to_end};

/// Six cases graded by `exact` (weight 2) and a required 1-5 judge named `judge`.
fn evalset(judge: &str) -> EvalSetFile {
    let mut text = format!(
        r#"{{"bakeoff_evalset":1,"name":"judged","task":"generation","prompt":"Say {{{{n}}}}","graders":[{{"kind":"exact","weight":2}},{{"kind":"llm-judge","judge":"{judge}","rubric":"Is it the expected sentence?"}}],"max_tokens":32}}"#
    );
    for i in 0..6 {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i}\",\"vars\":{{\"n\":{i}}},\"expected\":\"the answer is number {i}\"}}"
        ));
    }
    EvalSetFile::parse("judged.jsonl", &text).expect("test eval set parses")
}

fn spec(name: &str, base_url: &str, model: &str, price: f64) -> CandidateSpec {
    CandidateSpec {
        pricing: Pricing {
            input_per_mtok: Some(price),
            output_per_mtok: Some(price),
            ..Default::default()
        },
        ..CandidateSpec::openai_chat(name, base_url, model)
    }
}

async fn start_mock(key: &EvalSetFile) -> MockServer {
    let fast = |name: &str, accuracy: f64| ModelProfile {
        ttft_ms: 2.0,
        inter_token_ms: Some(0.5),
        accuracy,
        ..ModelProfile::named(name)
    };
    crate::support::runs::start_mock(MockConfig {
        // The measured model is right about half the time; the judge model judges.
        profiles: vec![fast("m", 0.5), fast("j", 1.0)],
        answer_keys: vec![key.clone()],
        seed: 11,
    })
    .await
}

fn config(judge: Option<JudgeConfig>) -> RunConfig {
    RunConfig {
        concurrency: 3,
        warmup_requests: 1,
        temperature: Some(0.0),
        timeout_secs: 20,
        retries: 1,
        staged_rollout: false,
        judge,
        ..RunConfig::default()
    }
}

struct Setup {
    store: DynStore,
    mock: MockServer,
    file: EvalSetFile,
    run_id: i64,
    measured: i64,
    judge: i64,
    _guard: Box<dyn std::any::Any + Send>,
}

/// The eval set, the measured candidate `m` ($1/M), the judge candidate `judge` ($10/M, not in
/// the run) and a queued run.
async fn setup(judge_name: &str, judge: Option<JudgeConfig>) -> Setup {
    let file = evalset(judge_name);
    let mock = start_mock(&file).await;
    let (store, guard) = sqlite_store().await;
    let version = store.save_evalset_version(&file).await.unwrap();
    let measured = store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            "m",
            &mock.base_url(),
            "m",
            1.0,
        )))
        .await
        .unwrap();
    let judge_id = store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            "judge",
            &mock.base_url(),
            "j",
            10.0,
        )))
        .await
        .unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "judged".into(),
            evalset_version_id: version,
            candidate_ids: vec![measured],
            config: config(judge),
        })
        .await
        .unwrap();
    Setup {
        store,
        mock,
        file,
        run_id,
        measured,
        judge: judge_id,
        _guard: Box::new(guard),
    }
}

/// The models the mock was asked for, one per request it saw.
async fn models_seen(mock: &MockServer) -> Vec<String> {
    let page: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["requests"]
        .as_array()
        .expect("requests array")
        .iter()
        .map(|r| r["model"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn judge_calls(records: &[RequestRecord]) -> Vec<&RequestRecord> {
    records.iter().filter(|r| r.phase == Phase::Judge).collect()
}

#[tokio::test]
async fn judge_grades_are_stored_with_reasons_and_judge_calls_stay_out_of_every_figure() {
    let s = setup("judge", Some(JudgeConfig::default())).await;
    assert_eq!(run_to_end(&s.store, s.run_id).await, RunStatus::Finished);
    let records = s.store.list_request_records(s.run_id).await.unwrap();
    let measured: Vec<&RequestRecord> = records.iter().filter(|r| r.phase == Phase::Quality).collect();
    assert_eq!(measured.len(), 6);
    let mut right = 0;
    for r in &measured {
        assert!(r.succeeded(), "{:?}", r.error_detail());
        let graders: Vec<&str> = r.grades.iter().map(|g| &*g.grader).collect();
        assert_eq!(graders, ["exact", "llm-judge"], "{}", r.case_id);
        let (exact, judged) = (&r.grades[0], &r.grades[1]);
        assert_eq!((exact.weight, judged.weight), (2.0, 1.0));
        // The mock judge gives 5/5 to the reference answer and 2/5 to anything else.
        if exact.passed {
            right += 1;
            assert!(judged.passed && judged.score == 1.0, "{judged:?}");
            assert!(
                judged
                    .reason
                    .starts_with("judge 5/5 (pass ≥ 4): The response matches the reference."),
                "{}",
                judged.reason
            );
        } else {
            assert!(!judged.passed && judged.score == 0.25, "{judged:?}");
            assert!(judged.reason.starts_with("judge 2/5"), "{}", judged.reason);
            // Weighted case score: (2 × 0 + 1 × 0.25) / 3.
            assert!((case_score(&r.grades).unwrap() - 0.25 / 3.0).abs() < 1e-12);
        }
        assert_eq!(case_passed(&r.grades), Some(exact.passed));
    }
    assert!(0 < right && right < 6, "accuracy 0.5 gives some of each: {right}");

    // One judge call per measured output: recorded under the judged candidate, excluded.
    let calls = judge_calls(&records);
    assert_eq!(calls.len(), 6);
    for c in &calls {
        assert!(c.succeeded() && c.is_warmup && c.candidate_id == s.measured && c.attempt == 0);
        assert!(c.grades.is_empty() && c.output().contains("SCORE:"), "{}", c.output());
        assert!(c.input_tokens.is_some() && c.output_tokens.is_some());
    }
    let seen = models_seen(&s.mock).await;
    assert_eq!(seen.iter().filter(|m| *m == "j").count(), 6, "{seen:?}");
    assert_eq!(
        seen.iter().filter(|m| *m == "m").count(),
        7,
        "6 cases + 1 warm-up: {seen:?}"
    );

    // Every figure is the same with or without the judge calls.
    let without: Vec<RequestRecord> = records.iter().filter(|r| r.phase != Phase::Judge).cloned().collect();
    let weight = |_: &str| 1.0;
    assert_eq!(
        format!("{:?}", summarise_candidate(s.measured, &records, weight)),
        format!("{:?}", summarise_candidate(s.measured, &without, weight))
    );
    assert_eq!(TokenTotals::from_records(&records), TokenTotals::from_records(&without));

    // Judge cost: the calls' tokens at the judge's $10/M, not the measured candidate's $1/M.
    let all = s.store.list_candidates().await.unwrap();
    let run = s.store.get_run(s.run_id).await.unwrap().unwrap();
    let input = JudgeInput {
        file: &s.file,
        config: run.config.judge.as_ref(),
        all_candidates: &all,
    };
    let mine: Vec<_> = all.iter().filter(|c| c.id == s.measured).cloned().collect();
    let cost = judge_costs(&mine, &records, &input)[0].clone().expect("judge cost");
    let tokens: u64 = calls
        .iter()
        .map(|c| u64::from(c.input_tokens.unwrap() + c.output_tokens.unwrap()))
        .sum();
    assert_eq!(
        (cost.calls, cost.failed, cost.judges.clone()),
        (6, 0, vec!["judge".to_string()])
    );
    assert!((cost.usd.unwrap() - tokens as f64 * 10.0 / 1e6).abs() < 1e-12);

    let events = s.store.list_run_events(s.run_id).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.starts_with("llm-judge: 6 judge grades stored")),
        "{events:?}"
    );
    s.mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn judging_off_by_default_sends_and_stores_nothing_for_judge_graders() {
    let s = setup("judge", None).await;
    assert_eq!(RunConfig::default().judge, None);
    assert_eq!(run_to_end(&s.store, s.run_id).await, RunStatus::Finished);
    let records = s.store.list_request_records(s.run_id).await.unwrap();
    assert!(judge_calls(&records).is_empty());
    for r in records.iter().filter(|r| !r.is_warmup) {
        let graders: Vec<&str> = r.grades.iter().map(|g| &*g.grader).collect();
        assert_eq!(graders, ["exact"], "only the graders that need no model");
        assert_eq!(case_passed(&r.grades), Some(r.grades[0].passed));
    }
    let seen = models_seen(&s.mock).await;
    assert!(seen.iter().all(|m| m == "m"), "{seen:?}");
    let events = s.store.list_run_events(s.run_id).await.unwrap();
    assert!(
        events.iter().any(|e| e.message.contains("judging is off")),
        "{events:?}"
    );
    s.mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_missing_judge_fails_the_run_before_anything_is_sent() {
    let s = setup("nobody", Some(JudgeConfig::default())).await;
    assert_eq!(run_to_end(&s.store, s.run_id).await, RunStatus::Failed);
    let run = s.store.get_run(s.run_id).await.unwrap().unwrap();
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("names judge \"nobody\"") && error.contains("no candidate named"),
        "{error}"
    );
    assert!(s.store.list_request_records(s.run_id).await.unwrap().is_empty());
    assert!(models_seen(&s.mock).await.is_empty());

    // An override sends every judge grader to the chosen candidate instead.
    let version = s.store.get_run(s.run_id).await.unwrap().unwrap().evalset_version_id;
    let run_id = s
        .store
        .create_run(&NewRun {
            name: "overridden".into(),
            evalset_version_id: version,
            candidate_ids: vec![s.measured],
            config: config(Some(JudgeConfig {
                override_id: Some(s.judge),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(&s.store, run_id).await, RunStatus::Finished);
    let records = s.store.list_request_records(run_id).await.unwrap();
    assert_eq!(judge_calls(&records).len(), 6);
    s.mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restarted_run_judges_only_what_is_not_judged_yet() {
    let s = setup("judge", Some(JudgeConfig::default())).await;
    // As if killed during the judge phase: every case measured (c0–c5 answered right), c0
    // already judged, c1's judge reply stored but not its grade, c2's judge call failed once.
    let record = |case: &str, phase: Phase, attempt: u32, output: &str, failed: bool| {
        let mut x = Exchange {
            sent_at_us: 1_000,
            end_us: Some(10),
            output: output.into(),
            failure: failed.then(|| {
                bakeoff::engine::wire::failure::Failure::new(
                    bakeoff::domain::run::ErrorClass::HttpServerError,
                    "HTTP 503",
                )
            }),
            ..Default::default()
        };
        x.output_tokens = Some(3);
        x.input_tokens = Some(20);
        x.into_record(RecordIdentity {
            run_id: s.run_id,
            candidate_id: s.measured,
            case_id: case.into(),
            phase,
            repetition: 0,
            attempt,
            concurrency: 3,
            is_warmup: phase == Phase::Judge || phase == Phase::Warmup,
        })
    };
    let mut earlier: Vec<RequestRecord> = (0..6)
        .map(|i| {
            let mut r = record(
                &format!("c{i}"),
                Phase::Quality,
                0,
                &format!("the answer is number {i}"),
                false,
            );
            r.grades =
                vec![s.file.graders_for(&s.file.cases[i])[0].grade(r.output(), s.file.cases[i].expected.as_ref())];
            r
        })
        .collect();
    earlier.push(record("c0", Phase::Warmup, 0, "warm", false));
    earlier.push(record("c1", Phase::Judge, 0, "Looks right.\nSCORE: 3", false));
    earlier.push(record("c2", Phase::Judge, 0, "", true));
    s.store.append_request_records(&earlier).await.unwrap();
    let c0 = earlier[0].clone();
    let done = bakeoff::domain::grading::parse_judge_reply(Default::default(), None, "Fine.\nSCORE: 5");
    s.store.append_grades(&c0, JUDGE_GRADE_POSITION, &[done]).await.unwrap();
    // A repeated call adds nothing (grades are never updated).
    let again = bakeoff::domain::grading::parse_judge_reply(Default::default(), None, "SCORE: 1");
    assert_eq!(
        s.store
            .append_grades(&c0, JUDGE_GRADE_POSITION, &[again])
            .await
            .unwrap(),
        0
    );
    s.store
        .set_run_status(s.run_id, RunStatus::Running, None)
        .await
        .unwrap();

    let runner = Runner::new(s.store.clone());
    assert_eq!(runner.resume_unfinished().await.unwrap(), 1);
    tokio::time::timeout(RUN_DEADLINE, runner.wait(s.run_id)).await.unwrap();
    let run = s.store.get_run(s.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);

    // Only c2 (its retry) and c3–c5 went to the judge; nothing was measured again (a resumed
    // run only sends its warm-up again).
    let seen = models_seen(&s.mock).await;
    assert_eq!(seen.iter().filter(|m| *m == "j").count(), 4, "{seen:?}");
    assert_eq!(seen.iter().filter(|m| *m == "m").count(), 1, "{seen:?}");
    let records = s.store.list_request_records(s.run_id).await.unwrap();
    let judge_grade = |case: &str| {
        let r = records
            .iter()
            .find(|r| &*r.case_id == case && r.phase == Phase::Quality)
            .unwrap();
        let judged: Vec<_> = r.grades.iter().filter(|g| &*g.grader == "llm-judge").collect();
        assert_eq!(judged.len(), 1, "{case}: {:?}", r.grades);
        judged[0].clone()
    };
    assert!(
        judge_grade("c0").reason.starts_with("judge 5/5 (pass ≥ 4): Fine."),
        "{}",
        judge_grade("c0").reason
    );
    // c1's stored reply was read, not re-sent: 3/5 fails.
    let c1 = judge_grade("c1");
    assert!(
        !c1.passed && c1.reason.starts_with("judge 3/5 (pass ≥ 4): Looks right."),
        "{}",
        c1.reason
    );
    for case in ["c2", "c3", "c4", "c5"] {
        assert!(judge_grade(case).passed, "{case}: {:?}", judge_grade(case));
    }
    let c2: Vec<u32> = judge_calls(&records)
        .iter()
        .filter(|r| &*r.case_id == "c2")
        .map(|r| r.attempt)
        .collect();
    assert_eq!(c2, [0, 1], "c2 continued with its retry");
    s.mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_judge_that_keeps_failing_is_a_failed_grade_saying_why() {
    let s = setup("judge", Some(JudgeConfig::default())).await;
    // Point the judge at a port nothing listens on.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    s.store
        .update_candidate(
            &crate::support::checked::admin_change(s.store.as_ref(), s.judge, &spec("judge", &url, "j", 10.0)).await,
        )
        .await
        .unwrap();
    assert_eq!(run_to_end(&s.store, s.run_id).await, RunStatus::Finished);
    let records = s.store.list_request_records(s.run_id).await.unwrap();
    for r in records.iter().filter(|r| r.phase == Phase::Quality) {
        let g = r
            .grades
            .iter()
            .find(|g| &*g.grader == "llm-judge")
            .expect("a judge grade");
        assert!(!g.passed && g.score == 0.0);
        assert!(
            g.reason.starts_with("judge call failed: connect_refused"),
            "{}",
            g.reason
        );
        assert_eq!(case_passed(&r.grades), Some(false), "the judge is required");
    }
    // Two tries (retries = 1) per output, each recorded.
    assert_eq!(judge_calls(&records).len(), 12);
    s.mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_run_form_turns_judging_on_and_refuses_a_judge_it_cannot_find() {
    let app = spawn_app().await;
    let file = evalset("judge");
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let m = app.create_candidate("m", "http://127.0.0.1:9/v1").await;
    let version = version.to_string();
    let m = m.to_string();
    let form = |extra: &[(&'static str, String)]| {
        let mut f: Vec<(&'static str, String)> = vec![
            ("evalset_version", version.clone()),
            ("candidate", m.clone()),
            ("concurrency", "1".into()),
            ("repetitions", "1".into()),
            ("judge", "on".into()),
        ];
        f.extend_from_slice(extra);
        f
    };
    let as_refs = |f: &[(&'static str, String)]| f.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>();

    // No candidate is named "judge" yet, and none is chosen: refused, nothing stored.
    let fields = as_refs(&form(&[]));
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let page = app.post_form_html("/runs", &fields).await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-judge_candidate-error").contains("names judge \"judge\""),
        "{}",
        page.text("form")
    );
    assert_eq!(app.run_count().await, 0);

    // With a candidate of that name, the run keeps the resolved judge.
    let judge = app.create_candidate("judge", "http://127.0.0.1:9/v1").await;
    let page = app.post_form("/runs", &fields).await;
    assert_eq!(page.status().as_u16(), 303);
    let runs = app.store.list_runs(10, 0).await.unwrap();
    let run = runs[0].run.clone();
    let config = run.config.judge.expect("judging on");
    assert_eq!((config.judge_for("judge"), config.override_id), (Some(judge), None));
    app.state.runner.cancel(run.id);
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(run.id))
        .await
        .unwrap();

    // Off by default: the form's checkbox starts unticked.
    let page = app.get_html("/runs/new").await;
    assert_eq!(page.count("#f-judge[checked]"), 0);
    assert_eq!(page.count("#f-judge"), 1);
    // Ticked, the estimate says the judge calls are not in it.
    let page = app
        .get_html(&format!(
            "/runs/new?evalset_version={version}&candidate={m}&concurrency=1&repetitions=1&judge=on"
        ))
        .await;
    assert_eq!(page.count("#f-judge[checked]"), 1);
    assert!(
        page.text("#estimate").contains("Not included: the llm-judge calls"),
        "{}",
        page.text("#estimate")
    );
}

#[tokio::test]
async fn the_scorecard_shows_judge_cost_apart_and_the_quality_section_the_judge_grades() {
    let app = spawn_app().await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let file = evalset("judge");
    let mock = start_mock(&file).await;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let m = app
        .store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            "m",
            &mock.base_url(),
            "m",
            1.0,
        )))
        .await
        .unwrap();
    app.store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            "judge",
            &mock.base_url(),
            "j",
            10.0,
        )))
        .await
        .unwrap();
    let run = app
        .store
        .create_run(&NewRun {
            name: "judged".into(),
            evalset_version_id: version,
            candidate_ids: vec![m],
            config: config(Some(JudgeConfig::default())),
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(&app.store, run).await, RunStatus::Finished);

    let page = app.get_html(&format!("/runs/{run}/scorecard")).await;
    assert_eq!(page.status, 200);
    let cost = page.text("section.cost");
    assert!(
        cost.contains("Judge cost (llm-judge by judge): $") && cost.contains("6 calls"),
        "{cost}"
    );
    assert!(cost.contains("not included in this candidate's cost"), "{cost}");
    let md = app
        .get(&format!("/runs/{run}/scorecard/export.md"))
        .await
        .text()
        .await
        .unwrap();
    assert!(md.contains("Judge cost (llm-judge by judge)"), "{md}");
    let json: Value = app
        .get(&format!("/runs/{run}/scorecard/export.json"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(json["costs"][0]["judge"]["calls"], 6, "{}", json["costs"]);
    // Per 1,000 requests sent beside per 1,000 cases, in both exports as on the page.
    let cost = &json["costs"][0];
    let (total, attempts) = (cost["total_usd"].as_f64().unwrap(), cost["attempts"].as_f64().unwrap());
    let per_1k_requests = cost["per_1k_requests_usd"].as_f64().expect("per_1k_requests_usd");
    assert!((per_1k_requests - total / attempts * 1000.0).abs() < 1e-12, "{cost}");
    assert!(md.contains("| Per 1,000 cases | Per 1,000 requests |"), "{md}");
    let shown = page.texts("section.cost td.per-1k-requests");
    assert!(md.contains(&format!("| {} |", shown[0])), "{shown:?} not in {md}");

    // The run page's quality section has a row for the judge's grades, with failing reasons.
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert!(
        page.html.html().contains("llm-judge"),
        "no llm-judge row on the run page"
    );
    mock.shutdown().await.unwrap();
}

each_backend!(grades_keep_weight_and_required_and_judge_grades_are_appended_on_both_stores);
async fn grades_keep_weight_and_required_and_judge_grades_are_appended_on_both_stores(t: TestStore) {
    use bakeoff::domain::grading::Grade;
    let file = evalset("judge");
    let (backend, store) = (t.backend, &t.store);
    let version = store.save_evalset_version(&file).await.unwrap();
    let m = store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            "m",
            "http://127.0.0.1:9/v1",
            "m",
            1.0,
        )))
        .await
        .unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "grades".into(),
            evalset_version_id: version,
            candidate_ids: vec![m],
            config: config(Some(JudgeConfig::default())),
        })
        .await
        .unwrap();
    let grade = |passed: bool, weight: f64, required: bool| Grade {
        grader: "exact".into(),
        score: f64::from(u8::from(passed)),
        passed,
        reason: String::new(),
        detail: None,
        weight,
        required,
    };
    let mut r = Exchange {
        sent_at_us: 1,
        end_us: Some(5),
        output: "x".into(),
        ..Default::default()
    }
    .into_record(RecordIdentity {
        run_id,
        candidate_id: m,
        case_id: "c0".into(),
        phase: Phase::Quality,
        repetition: 0,
        attempt: 0,
        concurrency: 1,
        is_warmup: false,
    });
    // A passing required grade and a failing optional one: the case passes.
    r.grades = vec![grade(true, 2.0, true), grade(false, 0.5, false)];
    store.append_request_records(std::slice::from_ref(&r)).await.unwrap();
    let facts = store.list_record_facts(run_id).await.unwrap();
    assert_eq!(
        facts[0].passed,
        Some(true),
        "{backend}: optional grades never fail a case"
    );

    // The judge's grade arrives later, after the others; a second append adds nothing.
    let judged = Grade {
        grader: "llm-judge".into(),
        ..grade(false, 1.0, true)
    };
    assert_eq!(
        store
            .append_grades(&r, JUDGE_GRADE_POSITION, std::slice::from_ref(&judged))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store.append_grades(&r, JUDGE_GRADE_POSITION, &[judged]).await.unwrap(),
        0,
        "{backend}"
    );
    let stored = store.list_request_records(run_id).await.unwrap();
    let grades: Vec<(&str, f64, bool)> = stored[0]
        .grades
        .iter()
        .map(|g| (&*g.grader, g.weight, g.required))
        .collect();
    assert_eq!(
        grades,
        [("exact", 2.0, true), ("exact", 0.5, false), ("llm-judge", 1.0, true)],
        "{backend}"
    );
    assert_eq!(
        case_passed(&stored[0].grades),
        Some(false),
        "{backend}: the required judge failed"
    );
    let facts = store.list_record_facts(run_id).await.unwrap();
    assert_eq!(facts[0].passed, Some(false), "{backend}");
    let cases = store.list_case_records(run_id, &["c0".into()]).await.unwrap();
    assert_eq!(cases[0].grades, stored[0].grades, "{backend}");

    // A record that is not stored cannot be graded.
    let missing = RequestRecord {
        case_id: "c9".into(),
        ..r.clone()
    };
    assert!(
        store
            .append_grades(&missing, JUDGE_GRADE_POSITION, &[grade(true, 1.0, true)])
            .await
            .is_err()
    );
}

#[tokio::test]
async fn an_exported_judged_run_imports_with_its_judge_calls_and_grades() {
    use bakeoff::app::transfer::{export_run, import_run, parse_export};
    let s = setup("judge", Some(JudgeConfig::default())).await;
    assert_eq!(run_to_end(&s.store, s.run_id).await, RunStatus::Finished);
    let export = export_run(s.store.as_ref(), s.run_id).await.unwrap();
    let text = serde_json::to_string(&export).unwrap();
    let (other, _guard) = sqlite_store().await;
    let imported = import_run(other.as_ref(), &parse_export(&text).unwrap())
        .await
        .unwrap()
        .run_id();
    let before = s.store.list_request_records(s.run_id).await.unwrap();
    let after = other.list_request_records(imported).await.unwrap();
    let strip = |rs: &[RequestRecord]| {
        rs.iter()
            .map(|r| (r.case_id.clone(), r.phase, r.attempt, r.is_warmup, r.grades.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&before), strip(&after));
    assert_eq!(judge_calls(&after).len(), 6);
    let run = other.get_run(imported).await.unwrap().unwrap();
    assert!(run.config.judge.is_some());
    s.mock.shutdown().await.unwrap();
}
