//! Nothing distorted: the mock answers with NUL and every other control character, the run
//! finishes and stores every answer exactly as sent (SQLite and PostgreSQL), and pages show
//! the control characters as visible symbols.
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::mock::{MockConfig, ModelProfile};

use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend};
use crate::support::runs::{run_to_end, start_mock};

const CASES: usize = 10;

/// Case i's expected answer (which the mock, always right, sends back): printable text around
/// control character i*3 (U+0000, U+0003, …, U+001B), with U+0000 and the store's escape
/// character U+E000 in every one.
fn answer(i: usize) -> String {
    let c = char::from((i * 3) as u8);
    format!("ok{c}\u{0}mid\u{E000}0 end")
}

fn evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"nul","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":24}"#,
    );
    text.push('\n');
    for i in 0..CASES {
        let expected = serde_json::to_string(&answer(i)).unwrap();
        text.push_str(&format!(
            "{{\"id\":\"case-{i:02}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":{expected}}}\n"
        ));
    }
    EvalSetFile::parse("nul.jsonl", &text).expect("the NUL eval set parses")
}

each_backend!(answers_with_nul_and_control_characters_are_stored_exactly);
async fn answers_with_nul_and_control_characters_are_stored_exactly(t: TestStore) {
    let file = evalset();
    let mock = start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 5.0,
            inter_token_ms: Some(1.0),
            jitter: 0.0,
            ..ModelProfile::named("nul")
        }],
        answer_keys: vec![file.clone()],
        seed: 3,
    })
    .await;
    let store = t.store.clone();
    let version = store.save_evalset_version(&file).await.unwrap();
    let spec = CandidateDraft {
        name: "nul".into(),
        provider: "openai-chat".into(),
        base_url: mock.base_url(),
        model: "nul".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = store
        .create_run(&NewRun {
            name: "nul".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                warmup_requests: 0,
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let backend = t.backend;
    assert_eq!(run_to_end(&store, run).await, RunStatus::Finished, "{backend}");

    let records = store.list_request_records(run).await.unwrap();
    let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
    assert_eq!(measured.len(), CASES, "{backend}: {CASES} of {CASES} records stored");
    for r in &measured {
        let i: usize = r.case_id["case-".len()..].parse().unwrap();
        assert_eq!(
            r.output(),
            answer(i),
            "{backend}: {} exactly as the server sent it",
            r.case_id
        );
        assert!(
            r.grades.iter().all(|g| g.passed),
            "{backend}: {} graded on the exact text",
            r.case_id
        );
    }

    // Shown escaped: the NUL as ␀, never raw, and the HTML escaped as always.
    let app = spawn_app_on(t).await;
    let html = app.text_ok(&format!("/runs/{run}/cases")).await;
    assert!(!html.contains('\0'), "{backend}: no raw NUL in the page");
    assert!(!html.contains('\u{1b}'), "{backend}: no raw ESC in the page");
    assert!(
        html.contains("ok\u{2400}\u{2400}mid"),
        "{backend}: case 0's NUL shown as ␀"
    );
    assert!(
        html.contains("ok\u{241b}\u{2400}mid"),
        "{backend}: case 9's ESC shown as ␛"
    );
}
