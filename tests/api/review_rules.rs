//! Human review in the verdict (issue 50): "challenger not worse than incumbent at 95 %" as a
//! threshold-profile rule judged from blind comparisons recorded through the API, and a flagged
//! LLM judge named in every scorecard export.
use std::time::Duration;

use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::Grade;
use bakeoff::domain::review::pairwise::{Choice, Preference};
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::app::{Page, TestApp, record, spawn_app};

const CASES: usize = 30;
const DEADLINE: Duration = Duration::from_secs(120);

fn evalset(name: &str, graders: &str) -> EvalSetFile {
    let mut text = format!(
        r#"{{"bakeoff_evalset":1,"name":"{name}","task":"generation","prompt":"Say answer {{{{n}}}}","graders":{graders},"max_tokens":16}}"#
    );
    for i in 1..=CASES {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i}\",\"vars\":{{\"n\":{i}}},\"expected\":\"answer number {i}\"}}"
        ));
    }
    EvalSetFile::parse(&format!("{name}.jsonl"), &text).unwrap()
}

async fn start_mock(key: &EvalSetFile, names: &[&str]) -> MockServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    bakeoff::mock::spawn(
        MockConfig {
            profiles: names
                .iter()
                .map(|n| ModelProfile {
                    ttft_ms: 2.0,
                    // The incumbent is right half the time; the others always.
                    accuracy: if *n == "incumbent-x" { 0.5 } else { 1.0 },
                    ..ModelProfile::named(*n)
                })
                .collect(),
            answer_keys: vec![key.clone()],
            seed: 50,
        },
        listener,
    )
    .await
    .unwrap()
}

async fn candidate_named(store: &DynStore, name: &str, base_url: &str) -> i64 {
    store
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            name, base_url, name,
        )))
        .await
        .unwrap()
}

async fn new_run(store: &DynStore, version: i64, candidates: &[i64], name: &str) -> i64 {
    store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
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

async fn json(app: &TestApp, path: &str) -> serde_json::Value {
    let r = app.get(path).await;
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The state of `metric`'s rule for candidate `id` in a `bakeoff.scorecard/1` document.
fn state_of(card: &serde_json::Value, metric: &str, id: i64) -> (String, String) {
    let row = card["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"]["metric"] == metric)
        .unwrap_or_else(|| panic!("no row {metric}: {card}"));
    let cell = row["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["candidate_id"] == id)
        .unwrap();
    (
        cell["state"].as_str().unwrap().to_string(),
        cell["reason"].as_str().unwrap().to_string(),
    )
}

fn verdict_of(card: &serde_json::Value, id: i64) -> String {
    card["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["candidate_id"] == id)
        .unwrap()["verdict"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn not_worse_than_the_incumbent_is_a_profile_rule_judged_from_comparisons_recorded_through_the_api() {
    let app = spawn_app().await;
    let file = evalset("pairwise-e2e", r#"[{"kind":"exact"}]"#);
    let mock = start_mock(&file, &["incumbent-x", "challenger-y"]).await;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let incumbent = candidate_named(&app.store, "incumbent-x", &mock.base_url()).await;
    let challenger = candidate_named(&app.store, "challenger-y", &mock.base_url()).await;
    let run = new_run(&app.store, version, &[incumbent, challenger], "bake-off").await;
    app.state.runner.start(run);
    tokio::time::timeout(DEADLINE, app.state.runner.wait(run))
        .await
        .unwrap();
    assert_eq!(
        app.store.get_run(run).await.unwrap().unwrap().status,
        RunStatus::Finished
    );

    // The profile, as a team writes it: the challenger not worse than the named incumbent, and
    // (to see it fail) the incumbent not worse than the challenger.
    let profile = r#"bakeoff_profile = 1
name = "replace incumbent-x"

[[rule]]
metric = "blind_win_rate"
param = "incumbent-x"
comparator = ">="
value = 40
unit = "%"
rationale = "not worse than incumbent-x at 95 %, within 10 points of an even split"

[[rule]]
metric = "blind_win_rate"
param = "challenger-y"
comparator = ">="
value = 40
"#;
    let imported = app
        .client
        .post(app.url("/api/v1/profiles"))
        .header("content-type", "application/toml")
        .body(profile)
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status().as_u16(), 200, "{}", imported.text().await.unwrap());
    let imported: serde_json::Value = imported.json().await.unwrap();
    let profile_id = imported["profile"]["id"].as_i64().unwrap();
    assert_eq!(
        imported["profile"]["metric_keys"],
        serde_json::json!(["blind_win_rate:incumbent-x", "blind_win_rate:challenger-y"])
    );

    // A bad rule is refused with its place named, nothing stored.
    let bad = app
        .client
        .post(app.url("/api/v1/profiles"))
        .header("content-type", "application/toml")
        .body("bakeoff_profile = 1\nname = \"bad\"\n\n[[rule]]\nmetric = \"blind_win_rate\"\nparam = \"x\"\nat_concurrency = 4\ncomparator = \">=\"\nvalue = 40\n")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422);
    let body = bad.text().await.unwrap();
    assert!(
        body.contains("rule[0].at_concurrency") && body.contains("whole run"),
        "{body}"
    );

    // Before any comparison: not measured, so neither can be GO.
    let card_path = format!("/api/v1/runs/{run}/scorecard?profile={profile_id}");
    let card = json(&app, &card_path).await;
    let (state, reason) = state_of(&card, "blind_win_rate:incumbent-x", challenger);
    assert_eq!(state, "not measured", "{reason}");
    assert!(
        reason.contains("no decided blind comparison with incumbent-x"),
        "{reason}"
    );

    // People compare blind through the API: the challenger better in 22 cases, worse in 4, 4 ties.
    for i in 1..=CASES {
        let (left, right) = if i % 2 == 0 {
            (incumbent, challenger)
        } else {
            (challenger, incumbent)
        };
        let winner = match i {
            1..=22 => Some(challenger),
            23..=26 => Some(incumbent),
            _ => None,
        };
        let choice = match winner {
            None => "tie",
            Some(w) if w == left => "left",
            Some(_) => "right",
        };
        let r = app
            .client
            .post(app.url(&format!("/api/v1/runs/{run}/review/preferences")))
            .json(&serde_json::json!({"case_id": format!("c{i}"), "left_candidate": left, "right_candidate": right, "choice": choice}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    }

    // 22 of 26 decided: exact 90 % interval ≈ [68.2 %, 94.6 %] clears 40 % → PASS; the incumbent
    // wins 4 of 26, upper bound ≈ 32 % < 40 % → FAIL. Each is the other rule's reference.
    let card = json(&app, &card_path).await;
    let (state, reason) = state_of(&card, "blind_win_rate:incumbent-x", challenger);
    assert_eq!(state, "pass", "{reason}");
    assert!(
        reason.contains("22 wins, 4 losses, 4 ties against incumbent-x (people's blind comparisons)"),
        "{reason}"
    );
    assert!(reason.contains("n=26 decided comparisons"), "{reason}");
    assert_eq!(state_of(&card, "blind_win_rate:challenger-y", challenger).0, "pass");
    let (state, reason) = state_of(&card, "blind_win_rate:challenger-y", incumbent);
    assert_eq!(state, "fail", "{reason}");
    assert_eq!(verdict_of(&card, challenger), "GO");
    assert_eq!(verdict_of(&card, incumbent), "NO-GO");
    let row = card["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"]["metric"] == "blind_win_rate:incumbent-x")
        .unwrap();
    assert_eq!(row["label"], "blind win rate vs incumbent-x (humans)");
    assert!(row["caliber"].as_str().unwrap().contains("Clopper–Pearson"), "{row}");
    let lo = row["cells"][1]["interval"][0].as_f64().unwrap();
    assert!((lo - 0.680).abs() < 0.01, "{row}");

    // CI gating reads the same rule.
    let gate = json(&app, &format!("/api/v1/runs/{run}/verdict?profile={profile_id}")).await;
    assert_eq!(gate["verdict"], "NO-GO", "{gate}");
    let challenger_rules = gate["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "challenger-y")
        .unwrap()["rules"]
        .clone();
    assert_eq!(challenger_rules[0]["state"], "pass", "{challenger_rules}");

    // The scorecard page shows the row with its caliber; the CSV export carries it.
    let (page, _) = app.page(&format!("/runs/{run}/scorecard?profile={profile_id}")).await;
    let text = page.text("main");
    assert!(text.contains("blind win rate vs incumbent-x (humans)"), "{text}");
    assert!(
        text.contains("exact (Clopper–Pearson) interval"),
        "the caliber beside the rule: {text}"
    );
    let csv = app
        .text_ok(&format!("/runs/{run}/scorecard/export.csv?profile={profile_id}"))
        .await;
    assert!(
        csv.lines().any(|l| l.starts_with("quality,blind_win_rate:incumbent-x,")
            && l.contains(",challenger-y,")
            && l.contains(",pass,")),
        "{csv}"
    );
    // The editor offers the metric.
    let (form, _) = app.page("/thresholds/new").await;
    assert!(
        form.count("option[value=blind_win_rate]") > 0 && form.count("option[value=judge_win_rate]") > 0,
        "the profile editor offers the win-rate metrics"
    );
}

/// An `llm-judge` grade, as the engine records it.
fn judge_grade(passed: bool) -> Grade {
    serde_json::from_value(serde_json::json!({
        "grader": "llm-judge",
        "score": if passed { 1.0 } else { 0.0 },
        "passed": passed,
        "reason": "the judge said so",
    }))
    .unwrap()
}

#[tokio::test]
async fn a_flagged_judge_is_named_in_every_scorecard_export() {
    let app = spawn_app().await;
    let judged = evalset(
        "judged-flag",
        r#"[{"kind":"exact"},{"kind":"llm-judge","judge":"lenient-judge","rubric":"Is it right?"}]"#,
    );
    let version = app.store.save_evalset_version(&judged).await.unwrap();
    let a = candidate_named(&app.store, "alpha", "http://127.0.0.1:9/v1").await;
    let b = candidate_named(&app.store, "beta", "http://127.0.0.1:9/v1").await;
    let run = new_run(&app.store, version, &[a, b], "judged run").await;
    let mut records = Vec::new();
    for i in 1..=CASES {
        for c in [a, b] {
            let mut r = record(run, c, &format!("c{i}"), "an answer", true);
            r.grades.push(judge_grade(true));
            records.push(r);
        }
    }
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    let imported = app
        .client
        .post(app.url("/api/v1/profiles"))
        .header("content-type", "application/toml")
        .body("bakeoff_profile = 1\nname = \"quality\"\n\n[[rule]]\nmetric = \"accuracy\"\ncomparator = \">=\"\nvalue = 90\n")
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status().as_u16(), 200);
    // Not flagged yet: every export says nothing of it.
    let card = json(&app, &format!("/runs/{run}/scorecard/export.json")).await;
    assert_eq!(card["judge_flags"], serde_json::json!([]));

    // The judge compared each pair in both orders and always picked the answer shown first.
    for i in 1..=CASES {
        for (left, right) in [(a, b), (b, a)] {
            let p = Preference {
                case_id: format!("c{i}"),
                left_candidate: left,
                right_candidate: right,
                choice: Choice::Left,
                picker: "judge:lenient-judge".into(),
                left_chars: 9,
                right_chars: 9,
            };
            app.store.save_preference(run, &p, Timestamp::now()).await.unwrap();
        }
    }
    let card = json(&app, &format!("/runs/{run}/scorecard/export.json")).await;
    let flags = card["judge_flags"].as_array().unwrap();
    assert_eq!(flags.len(), 1, "{card}");
    assert_eq!(flags[0]["judge"], "lenient-judge");
    assert!(
        flags[0]["why"]
            .as_str()
            .unwrap()
            .contains("picks the answer shown first 100 %"),
        "{flags:?}"
    );
    let api = json(&app, &format!("/api/v1/runs/{run}/scorecard")).await;
    assert_eq!(api["judge_flags"], card["judge_flags"]);

    let csv = app.text_ok(&format!("/runs/{run}/scorecard/export.csv")).await;
    let line = csv
        .lines()
        .find(|l| l.starts_with("judge,judge_calibration,"))
        .unwrap_or_else(|| panic!("{csv}"));
    assert!(
        line.contains("LLM judge lenient-judge") && line.contains(",flagged,"),
        "{line}"
    );
    let md = app.text_ok(&format!("/runs/{run}/scorecard/export.md")).await;
    assert!(md.contains("> **JUDGE FLAGGED.** The LLM judge lenient-judge"), "{md}");
    for path in [format!("/runs/{run}/scorecard"), format!("/runs/{run}/scorecard/print")] {
        let page: Page = app.get_html(&path).await;
        assert_eq!(page.count(".judge-flag[data-judge=lenient-judge]"), 1, "{path}");
        assert_eq!(
            page.attr(".judge-flag a", "href").as_deref(),
            Some("/judges/lenient-judge/calibration")
        );
    }
    let profile = app.store.list_threshold_profiles().await.unwrap()[0].id;
    let gate = json(&app, &format!("/api/v1/runs/{run}/verdict?profile={profile}")).await;
    assert_eq!(gate["judge_flags"][0]["judge"], "lenient-judge", "{gate}");
}

#[tokio::test]
async fn the_judges_win_rate_reads_its_comparisons_in_both_orders_made_against_the_mock() {
    let app = spawn_app().await;
    let file = evalset("judged-pairs", r#"[{"kind":"exact"}]"#);
    let mock = start_mock(&file, &["incumbent-x", "challenger-y", "judge-j"]).await;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let incumbent = candidate_named(&app.store, "incumbent-x", &mock.base_url()).await;
    let challenger = candidate_named(&app.store, "challenger-y", &mock.base_url()).await;
    candidate_named(&app.store, "judge-j", &mock.base_url()).await;
    let run = new_run(&app.store, version, &[incumbent, challenger], "judged bake-off").await;
    app.state.runner.start(run);
    tokio::time::timeout(DEADLINE, app.state.runner.wait(run))
        .await
        .unwrap();
    assert_eq!(
        app.store.get_run(run).await.unwrap().unwrap().status,
        RunStatus::Finished
    );

    // The mock's judge prefers the answer that is the expected one, wherever it is shown:
    // the ground truth is which of the two candidates' answers are right.
    let right = |id: i64| {
        let store = app.store.clone();
        async move {
            let records = store.list_request_records(run).await.unwrap();
            let mut right = std::collections::BTreeMap::new();
            for r in records.iter().filter(|r| r.candidate_id == id && !r.is_warmup) {
                right.insert(r.case_id.to_string(), r.grades.iter().all(|g| g.passed));
            }
            right
        }
    };
    let (inc_right, chal_right) = (right(incumbent).await, right(challenger).await);
    let wins = chal_right.iter().filter(|(c, r)| **r && !inc_right[*c]).count();
    let losses = inc_right.iter().filter(|(c, r)| **r && !chal_right[*c]).count();
    let ties = CASES - wins - losses;

    let r = app
        .post_form(
            &format!("/runs/{run}/review/judge-pairs"),
            &[
                ("judge", "judge-j"),
                ("a", &challenger.to_string()),
                ("b", &incumbent.to_string()),
                ("most", "50"),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
    let judged = app.store.list_preferences(Some(run)).await.unwrap();
    assert_eq!(judged.len(), 2 * CASES, "each case in both orders");
    assert!(judged.iter().all(|p| p.picker == "judge:judge-j"));

    let profile = "bakeoff_profile = 1\nname = \"judged\"\n\n[[rule]]\nmetric = \"judge_win_rate\"\nparam = \"incumbent-x\"\ncomparator = \">=\"\nvalue = 40\n";
    let imported: serde_json::Value = app
        .client
        .post(app.url("/api/v1/profiles"))
        .header("content-type", "application/toml")
        .body(profile)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let profile_id = imported["profile"]["id"].as_i64().unwrap();
    let card = json(&app, &format!("/api/v1/runs/{run}/scorecard?profile={profile_id}")).await;
    let (state, reason) = state_of(&card, "judge_win_rate:incumbent-x", challenger);
    assert!(
        reason.contains(&format!(
            "{wins} wins, {losses} losses, {ties} ties against incumbent-x (cases an LLM judge compared in both orders)"
        )),
        "{reason}"
    );
    assert!(
        wins >= 5 && losses == 0,
        "the mock's challenger is always right: {wins} wins"
    );
    assert_eq!(state, "pass", "{reason}");
    // The judge picks by content, so its position lean is not flagged.
    let calibration = json(&app, "/api/v1/judges/judge-j/calibration").await;
    assert_eq!(calibration["flags"], serde_json::json!([]), "{calibration}");
}
