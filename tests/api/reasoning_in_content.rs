//! Reasoning in the content (issue 53, item 3) end to end: the mock sends its reasoning inside
//! `content` as `<think>…</think>\n\n` (a server with no reasoning parser) and logs when the first
//! answer token went out. A candidate left on `auto` gets the answer's time (TTFA), the answer
//! alone graded, the reasoning counted and the case page saying what was recognised; the same
//! server under `never` shows what bakeoff measured before: the thinking taken for the answer.
use std::collections::HashMap;
use std::time::Duration;

use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::reasoning::{Delimiter, Recognised};
use bakeoff::domain::run::RequestRecord;
use bakeoff::engine::run::pool::request_id;
use bakeoff::mock::{MockConfig, ModelProfile};
use serde_json::Value;

use crate::support::app::spawn_app;

const EVALSET: &str = r#"{"bakeoff_evalset":1,"name":"think","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact","ignore_case":true}]}
{"id":"a","vars":{"text":"I love it"},"expected":"positive"}
{"id":"b","vars":{"text":"It broke"},"expected":"negative"}
{"id":"c","vars":{"text":"Fine I guess"},"expected":"neutral"}
"#;

/// The mock's record of every request, by the client's request id.
async fn ground_truth(root: &str) -> HashMap<String, Value> {
    let page: Value = reqwest::get(format!("{root}/mock/requests"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["client_request_id"].as_str()?.to_string(), r.clone())))
        .collect()
}

fn truth_of<'a>(truth: &'a HashMap<String, Value>, file: &EvalSetFile, r: &RequestRecord) -> &'a Value {
    let index = file.cases.iter().position(|c| *c.id == *r.case_id).unwrap();
    let id = request_id(r.run_id, r.candidate_id, r.phase, index, r.repetition, r.attempt);
    truth.get(&id).unwrap_or_else(|| panic!("ground truth for {id}"))
}

#[tokio::test]
async fn think_in_content_gives_the_answers_time_and_grades_the_answer_alone() {
    let app = spawn_app().await;
    let file = EvalSetFile::parse("think.jsonl", EVALSET).unwrap();
    // Six reasoning tokens, 30 ms apart, then the answer: the answer's first token comes
    // ~150 ms after the first token, far more than any measurement error.
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 5.0,
            inter_token_ms: Some(30.0),
            reasoning_tokens: 6,
            reasoning_in_content: true,
            ..ModelProfile::named("thinker")
        }],
        answer_keys: vec![file.clone()],
        seed: 53,
    })
    .await;
    let version = app.store.save_evalset_version(&file).await.unwrap().to_string();
    let mut ids = Vec::new();
    for mode in ["auto", "never"] {
        let spec = CandidateDraft {
            name: format!("thinker {mode}"),
            provider: "openai-chat".into(),
            base_url: mock.base_url(),
            model: "thinker".into(),
            reasoning_in_content: mode.into(),
            ..Default::default()
        }
        .validate(None)
        .unwrap();
        let id = app
            .store
            .create_candidate(&crate::support::checked::admin_new(&spec))
            .await
            .unwrap();
        ids.push(id.to_string());
    }
    let mut form = vec![
        ("evalset_version", version.as_str()),
        ("candidate", ids[0].as_str()),
        ("candidate", ids[1].as_str()),
        ("concurrency", "1"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("retries", "0"),
        ("stream", "on"),
        ("load_shape", "fixed"),
        ("timeout_secs", "20"),
    ];
    form.push(("max_tokens", "40"));
    let r = app.post_form("/runs", &form).await;
    assert_eq!(r.status(), 303);
    let run = app.store.list_runs(1, 0).await.unwrap()[0].run.clone();
    tokio::time::timeout(Duration::from_secs(90), app.state.runner.wait(run.id))
        .await
        .expect("the run ended in time");
    let records = app.store.list_request_records(run.id).await.unwrap();
    let truth = ground_truth(&mock.root_url()).await;
    let auto_id: i64 = ids[0].parse().unwrap();
    let mut seen = (0, 0);
    for r in records.iter().filter(|r| !r.is_warmup) {
        let t = truth_of(&truth, &file, r);
        assert_eq!(
            t["reasoning_in_content"], true,
            "the mock sent the reasoning in the content"
        );
        let case = file.cases.iter().find(|c| *c.id == *r.case_id).unwrap();
        let expected = case.expected_text().unwrap();
        let (first_token, first_answer) = (
            t["first_token_ms"].as_f64().unwrap(),
            t["first_content_ms"].as_f64().unwrap(),
        );
        // The mock's gap between its first token and its first answer token, and ours.
        let server_gap = first_answer - first_token;
        let ttft = r.ttft_us().unwrap() as f64 / 1000.0;
        let ttfa = r.first_content_us.get().unwrap() as f64 / 1000.0;
        assert!(r.succeeded(), "{:?} {:?}", r.error_class, r.error_detail());
        if r.candidate_id == auto_id {
            seen.0 += 1;
            assert_eq!(r.output(), expected, "the answer alone");
            let reasoning = r.reasoning().unwrap();
            assert!(!reasoning.contains("<think>") && !reasoning.contains("</think>"));
            assert_eq!(bakeoff::mock::tokens::count_tokens(reasoning), 6, "{reasoning:?}");
            assert_eq!(
                r.content_reasoning(),
                Some(Recognised {
                    delimiter: Some(Delimiter::Think),
                    opened: true,
                    closed: true
                })
            );
            assert!(r.grades[0].passed, "the answer alone is graded: {:?}", r.grades);
            // TTFA trails TTFT by what the server's answer trailed its first token (one read
            // may carry both, so allow a few ms either way).
            assert!(
                ((ttfa - ttft) - server_gap).abs() < 25.0,
                "TTFA − TTFT {} ms vs the mock's {server_gap} ms",
                ttfa - ttft
            );
            assert!(server_gap >= 100.0, "the mock's own gap {server_gap}");
            // The server's usage says nothing of reasoning: its share is estimated by o200k.
            let sent = t["tokens_sent"].as_u64().unwrap() as u32;
            assert_eq!(r.output_tokens, Some(sent));
            let reasoning_tokens = r.reasoning_tokens.unwrap();
            assert!(
                (5..=7).contains(&reasoning_tokens),
                "reasoning tokens {reasoning_tokens} vs the mock's 6"
            );
        } else {
            seen.1 += 1;
            // Never: the thinking is the answer, timed and graded as such.
            assert!(r.output().starts_with("<think>"), "{:?}", r.output());
            assert_eq!(r.content_reasoning(), None);
            assert_eq!(ttft, ttfa);
            assert!(!r.grades[0].passed, "{:?}", r.grades);
        }
    }
    assert_eq!(seen, (3, 3));

    // The case page says what was recognised.
    let page = app.get_html(&format!("/runs/{}/cases", run.id)).await;
    let notes = page.texts("[data-content-reasoning]");
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(
        notes[0].contains("<think>…</think> at the start of the content"),
        "{notes:?}"
    );
}
