//! Cache hits counted right (issue 48): runs over HTTP against the mock's prefix cache, whose
//! request log says what it read from and wrote to its cache for every request, in both usage
//! shapes (OpenAI `prompt_tokens_details.cached_tokens`; Anthropic `cache_read_input_tokens`,
//! `cache_creation_input_tokens` and an `input_tokens` without them).
use std::collections::HashMap;

use bakeoff::app::pages::report::levels_view;
use bakeoff::app::telemetry::run_telemetry;
use bakeoff::domain::calibers::run_figures;
use bakeoff::domain::candidate::{CandidateSpec, ProviderKind, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::prompt_cache::NOT_REPORTED;
use bakeoff::domain::run::{NewRun, RequestRecord, RunConfig, RunStatus};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;
use serde_json::Value;

use crate::support::db::sqlite_store;
use crate::support::runs::{ground_truth, run_to_end, start_mock};

/// `cases` cases sharing a long system prompt, each with its own short question.
fn shared_prefix_set(cases: usize) -> EvalSetFile {
    let system: String = (0..120)
        .map(|i| format!("Rule {i}: answer politely and briefly."))
        .collect::<Vec<_>>()
        .join(" ");
    let mut text = format!(
        r#"{{"bakeoff_evalset":1,"name":"shared-prefix","task":"generation","system":"{system}","prompt":"Question number {{{{n}}}}, please?","graders":[{{"kind":"exact"}}],"max_tokens":12}}"#
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"q{i:03}\",\"vars\":{{\"n\":{i}}},\"expected\":\"Answer {i}\"}}"
        ));
    }
    EvalSetFile::parse("shared-prefix.jsonl", &text).expect("the test set parses")
}

fn profile() -> ModelProfile {
    ModelProfile {
        ttft_ms: 5.0,
        prefill_ms_per_token: 0.01,
        inter_token_ms: Some(1.0),
        tokens_per_chunk: 2,
        prefix_cache: true,
        prefix_cache_ttl_ms: Some(600_000.0),
        ..ModelProfile::named("cachey")
    }
}

fn spec(mock: &MockServer, provider: ProviderKind) -> CandidateSpec {
    CandidateSpec {
        provider,
        api_key: Some(Secret::new("sk-cache-test")),
        metrics_url: Some(format!("{}/metrics", mock.root_url())),
        ..CandidateSpec::openai_chat("cachey", mock.base_url(), "cachey")
    }
}

async fn run(store: &DynStore, file: &EvalSetFile, spec: &CandidateSpec, concurrency: u32) -> i64 {
    let version = store.save_evalset_version(file).await.unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(spec))
        .await
        .unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "prompt cache".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency,
                load: LoadShape::Levels {
                    levels: vec![concurrency],
                },
                repetitions: 1,
                warmup_requests: 0,
                retries: 0,
                stream: true,
                staged_rollout: false,
                timeout_secs: 60,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(store, run_id).await, RunStatus::Finished);
    run_id
}

fn truth_of<'a>(truth: &'a HashMap<String, Value>, r: &RequestRecord, file: &EvalSetFile) -> &'a Value {
    let index = file
        .cases
        .iter()
        .position(|c| *c.id == *r.case_id)
        .expect("a case of the set");
    let id = bakeoff::engine::run::pool::request_id(r.run_id, r.candidate_id, r.phase, index, r.repetition, r.attempt);
    truth.get(&id).unwrap_or_else(|| panic!("the mock saw {}", r.case_id))
}

fn n(v: &Value) -> Option<u32> {
    v.as_u64().map(|n| n as u32)
}

#[tokio::test]
async fn an_anthropic_write_turn_then_read_turn_gives_the_true_hit_rate_not_the_inflated_one() {
    let file = shared_prefix_set(2);
    let mock = start_mock(MockConfig {
        profiles: vec![profile()],
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await;
    let (store, _guard) = sqlite_store().await;
    // One at a time: the first request writes the shared prefix, the second reads it.
    let run_id = run(&store, &file, &spec(&mock, ProviderKind::Anthropic), 1).await;
    let records = store.list_request_records(run_id).await.unwrap();
    assert_eq!(records.len(), 2);
    let truth = ground_truth(&mock).await;
    let (mut read, mut whole, mut input_excluding) = (0u64, 0u64, 0u64);
    for r in &records {
        assert!(r.succeeded(), "{:?}", r.error_detail());
        let t = truth_of(&truth, r, &file);
        let (t_read, t_written, t_prompt) = (
            n(&t["cached_prompt_tokens"]).unwrap(),
            n(&t["cache_creation_tokens"]).unwrap(),
            n(&t["prompt_tokens"]).unwrap(),
        );
        let c = r.prompt_cache.expect("the Anthropic usage carried cache fields");
        assert_eq!(
            (c.read_tokens, c.creation_tokens),
            (t_read, Some(t_written)),
            "{}",
            r.case_id
        );
        assert_eq!(r.input_tokens, Some(t_prompt), "whole prompt = input + read + creation");
        read += u64::from(t_read);
        whole += u64::from(t_prompt);
        input_excluding += u64::from(t_prompt - t_read - t_written);
    }
    let write_turn = records
        .iter()
        .find(|r| r.prompt_cache.unwrap().read_tokens == 0)
        .unwrap();
    let read_turn = records
        .iter()
        .find(|r| r.prompt_cache.unwrap().read_tokens > 0)
        .unwrap();
    assert!(
        write_turn.prompt_cache.unwrap().creation_tokens.unwrap() > 0,
        "turn 1 wrote the prefix"
    );
    assert!(read_turn.sent_at_us > write_turn.sent_at_us);
    let run = store.get_run(run_id).await.unwrap().unwrap();
    let figures = run_figures(records.iter(), &run.config, run.candidate_ids[0], |_| None);
    let cache = &figures.levels[0].prompt_cache;
    let true_rate = read as f64 / whole as f64;
    let inflated = read as f64 / (input_excluding + read) as f64;
    assert_eq!(cache.token_hit_rate(), Some(true_rate));
    assert!(
        true_rate < 0.5 && inflated > 0.9,
        "true {true_rate}, inflated {inflated}"
    );
    assert_eq!((cache.requests_with_hit, cache.reported), (1, 2));
    assert_eq!(cache.ttft_cold_ms.as_ref().map(|d| d.n), Some(1));
    assert_eq!(cache.ttft_warm_ms.as_ref().map(|d| d.n), Some(1));
    // The run page's per-level table says it with its caliber.
    let view = levels_view(&run, vec![("cachey".into(), figures)]).expect("a per-level table");
    assert!(view.cache_reported);
    let cells = &view.rows[0].cache;
    assert_eq!(
        cells[0],
        format!("{} %", bakeoff::domain::format::significant(true_rate * 100.0))
    );
    assert!(cells[1].contains("(1 of 2)"), "{cells:?}");
    assert!(view.cache_columns[0].caliber.contains("cache creation"));
}

#[tokio::test]
async fn a_shared_prefix_run_at_concurrency_agrees_with_the_mocks_ground_truth_exactly() {
    for provider in [ProviderKind::OpenAiChat, ProviderKind::Anthropic] {
        let file = shared_prefix_set(96);
        let mock = start_mock(MockConfig {
            profiles: vec![profile()],
            answer_keys: vec![file.clone()],
            seed: 9,
        })
        .await;
        let (store, _guard) = sqlite_store().await;
        let run_id = run(&store, &file, &spec(&mock, provider), 16).await;
        let records = store.list_request_records(run_id).await.unwrap();
        assert_eq!(records.len(), 96);
        let truth = ground_truth(&mock).await;
        let (mut read, mut whole, mut written, mut hits) = (0u64, 0u64, 0u64, 0u64);
        for r in &records {
            assert!(r.succeeded(), "{provider:?} {}: {:?}", r.case_id, r.error_detail());
            let t = truth_of(&truth, r, &file);
            let t_read = n(&t["cached_prompt_tokens"]).unwrap();
            let t_written = n(&t["cache_creation_tokens"]).unwrap();
            let c = r.prompt_cache.expect("usage carried the cache");
            assert_eq!(r.input_tokens, n(&t["prompt_tokens"]), "{provider:?} {}", r.case_id);
            assert_eq!(c.read_tokens, t_read, "{provider:?} {}", r.case_id);
            // OpenAI's usage has no field for tokens written; Anthropic's does.
            let expected_written = (provider == ProviderKind::Anthropic).then_some(t_written);
            assert_eq!(c.creation_tokens, expected_written, "{provider:?} {}", r.case_id);
            read += u64::from(t_read);
            whole += u64::from(r.input_tokens.unwrap());
            written += u64::from(expected_written.unwrap_or(0));
            hits += u64::from(t_read > 0);
        }
        assert!(
            hits > 0,
            "{provider:?}: the shared system prompt was read from the cache"
        );
        let run = store.get_run(run_id).await.unwrap().unwrap();
        let figures = run_figures(records.iter(), &run.config, run.candidate_ids[0], |_| None);
        let cache = &figures.levels[0].prompt_cache;
        assert_eq!(
            (
                cache.read_tokens,
                cache.prompt_tokens,
                cache.creation_tokens,
                cache.requests_with_hit
            ),
            (read, whole, written, hits),
            "{provider:?}"
        );
        assert_eq!(cache.token_hit_rate(), Some(read as f64 / whole as f64));
        // The server's own counters (vllm:prefix_cache_*), scraped at the level's bounds, beside
        // bakeoff's figure from usage: the mock counts exactly what it reported.
        let t = run_telemetry(&store, run_id).await.unwrap();
        let level = &t.candidates[0].levels[0];
        let (server, ours) = (level.server_prefix_hit_rate(), level.bakeoff_prefix_hit_rate);
        assert_eq!(ours, cache.token_hit_rate(), "{provider:?}");
        let gap = (server.expect("the mock's counters were scraped") - ours.unwrap()).abs();
        assert!(gap < 1e-9, "{provider:?}: server {server:?} vs bakeoff {ours:?}");
        let row = &t.rows()[0];
        assert!(
            row.prefix_hit_rate.contains("bakeoff − server +0.0 pp"),
            "{}",
            row.prefix_hit_rate
        );
    }
}

#[tokio::test]
async fn a_server_without_cache_fields_is_not_reported_never_zero() {
    let file = shared_prefix_set(4);
    let mock = start_mock(MockConfig {
        profiles: vec![ModelProfile {
            prefix_cache: false,
            ..profile()
        }],
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await;
    let (store, _guard) = sqlite_store().await;
    let run_id = run(&store, &file, &spec(&mock, ProviderKind::OpenAiChat), 2).await;
    let records = store.list_request_records(run_id).await.unwrap();
    assert!(records.iter().all(|r| r.succeeded() && r.prompt_cache.is_none()));
    let run = store.get_run(run_id).await.unwrap().unwrap();
    let figures = run_figures(records.iter(), &run.config, run.candidate_ids[0], |_| None);
    assert_eq!(figures.levels[0].prompt_cache.token_hit_rate(), None);
    let view = levels_view(&run, vec![("cachey".into(), figures)]).unwrap();
    assert!(!view.cache_reported);
    assert!(view.rows[0].cache.iter().all(|c| c == NOT_REPORTED));
}
