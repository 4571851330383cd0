//! Conversation cases under load (issue 46) against the built-in mock, whose ground truth says
//! what it received and did for every turn: context growth token-exact, the prefix cache's
//! tokens as reported, TTFT against the server's own clock, think time against the schedule,
//! own history compounding an early error while golden history isolates each turn.
use std::collections::HashMap;
use std::time::Duration;

use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::conversation::{ThinkTime, figures};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::evalset::conversation::{HistoryMode, split_turn_key};
use bakeoff::domain::run::{NewRun, RequestRecord, RunConfig, RunStatus};
use bakeoff::engine::run::conversation::TURN_ID_SHIFT;
use bakeoff::mock::tokens::count_tokens;
use bakeoff::mock::{MockConfig, ModelProfile};
use bakeoff::store::DynStore;

use crate::support::db::sqlite_store;
use crate::support::runs::{ground_truth, run_to_end_within, start_mock};

const TURNS: usize = 4;

/// `n` conversations of four turns: turn 1 states a fact, the later ones ask it back.
fn conversations(n: usize, history: HistoryMode) -> EvalSetFile {
    let mut text = format!(
        r#"{{"bakeoff_evalset":1,"name":"conv-test","task":"generation","system":"Answer briefly.","history":"{}","graders":[{{"kind":"exact"}}],"max_tokens":24}}"#,
        history.as_str()
    );
    for i in 0..n {
        text.push_str(&format!(
            "\n{{\"id\":\"k{i:03}\",\"vars\":{{\"x\":{i}}},\"turns\":[\
             {{\"user\":\"Remember the number {{{{x}}}} for me.\",\"expected\":\"Noted number {i} carefully\"}},\
             {{\"user\":\"Which number was it?\",\"expected\":\"It was {i}\"}},\
             {{\"user\":\"Add one to it.\",\"expected\":\"That makes {}\"}},\
             {{\"user\":\"Say it in words please.\",\"expected\":\"Number {i} plus one\"}}]}}",
            i + 1
        ));
    }
    EvalSetFile::parse("conv-test.jsonl", &text).expect("the test set parses")
}

fn spec(base_url: &str, model: &str) -> CandidateSpec {
    CandidateSpec {
        api_key: Some(Secret::new("sk-conv-test")),
        ..CandidateSpec::openai_chat(model, base_url, model)
    }
}

fn config(users: u32, think: ThinkTime) -> RunConfig {
    RunConfig {
        concurrency: users,
        repetitions: 1,
        warmup_requests: 0,
        retries: 0,
        stream: true,
        timeout_secs: 120,
        staged_rollout: false,
        think_time: Some(think),
        ..RunConfig::default()
    }
}

async fn create_run(store: &DynStore, file: &EvalSetFile, spec: &CandidateSpec, config: RunConfig) -> i64 {
    let version = store.save_evalset_version(file).await.unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(spec))
        .await
        .unwrap();
    store
        .create_run(&NewRun {
            name: "conversations".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config,
        })
        .await
        .unwrap()
}

/// The x-request-id of a turn's record: the turn sits above the case index.
fn request_id(r: &RequestRecord, file: &EvalSetFile) -> String {
    let (case, turn) = split_turn_key(&r.case_id).expect("a turn key");
    let index = file.cases.iter().position(|c| c.id == case).expect("a case of the set");
    bakeoff::engine::run::pool::request_id(
        r.run_id,
        r.candidate_id,
        r.phase,
        index | (turn << TURN_ID_SHIFT),
        r.repetition,
        r.attempt,
    )
}

fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    bakeoff::domain::stats::quantile(&mut v, q)
}

#[tokio::test]
async fn users_with_think_time_match_the_mocks_ground_truth_turn_by_turn() {
    // Prefill 0.5 ms a prompt token, a prefix cache, no slot limit: each turn's TTFT is known
    // exactly from its uncached prompt tokens, whatever else is in flight.
    let profile = ModelProfile {
        ttft_ms: 15.0,
        prefill_ms_per_token: 0.5,
        inter_token_ms: Some(2.0),
        tokens_per_chunk: 1,
        prefix_cache: true,
        ..ModelProfile::named("conv")
    };
    let mut report = Vec::new();
    for (users, n) in [(64u32, 128usize), (256, 512)] {
        let file = conversations(n, HistoryMode::Own);
        let mock = start_mock(MockConfig {
            profiles: vec![profile.clone()],
            answer_keys: vec![file.clone()],
            seed: 11,
        })
        .await;
        let (store, _guard) = sqlite_store().await;
        let think = ThinkTime::Exponential { mean_ms: 40.0 };
        let run_id = create_run(&store, &file, &spec(&mock.base_url(), "conv"), config(users, think)).await;
        let run = run_to_end_within(&store, run_id, Duration::from_secs(300)).await;
        assert_eq!(run.status, RunStatus::Finished, "{users} users: {:?}", run.error);
        let records = store.list_request_records(run_id).await.unwrap();
        assert_eq!(
            records.len(),
            n * TURNS,
            "{users} users: every turn of every conversation, once"
        );
        let truth = ground_truth(&mock).await;
        let mut by_key: HashMap<(String, u32), &RequestRecord> = HashMap::new();
        let (mut ttft_error, mut think_error) = (Vec::new(), Vec::new());
        for r in &records {
            assert!(r.succeeded(), "{}: {:?}", r.case_id, r.error_detail());
            let facts = r.turn.as_deref().expect("a turn record carries its facts");
            assert!(facts.user < users, "{facts:?}");
            by_key.insert((facts.conversation.clone(), facts.turn), r);
            let t = truth
                .get(&request_id(r, &file))
                .unwrap_or_else(|| panic!("the mock saw {}", r.case_id));
            // Context: bakeoff's recorded prompt tokens are the server's, exactly.
            assert_eq!(
                r.input_tokens,
                t["prompt_tokens"].as_u64().map(|n| n as u32),
                "{}",
                r.case_id
            );
            assert_eq!(
                r.prompt_cache.map(|c| c.read_tokens),
                t["cached_prompt_tokens"].as_u64().map(|n| n as u32),
                "{}: cached tokens as the server reported them",
                r.case_id
            );
            assert_eq!(t["case"]["turn"].as_u64(), Some(u64::from(facts.turn)));
            let measured_ms = r.ttft_us().unwrap() as f64 / 1000.0;
            ttft_error.push((measured_ms - t["first_token_ms"].as_f64().unwrap()).abs());
            if let (Some(s), Some(w)) = (facts.think_scheduled_us, facts.think_waited_us) {
                assert!(w >= s - 200, "{}: waited {w} µs of a scheduled {s} µs", r.case_id);
                think_error.push((w - s).abs() as f64 / 1000.0);
            }
        }
        // Context growth, token-exact: turn k's prompt is turn k-1's plus the reply it got and
        // the new user message (each with the mock's framing of 4 tokens a message); everything
        // turn k-1 sent is in the prefix cache.
        for case in &file.cases {
            for k in 2..=TURNS as u32 {
                let (prev, this) = (by_key[&(case.id.clone(), k - 1)], by_key[&(case.id.clone(), k)]);
                let user = case.turns[k as usize - 1].user_message(&case.vars);
                assert_eq!(
                    this.input_tokens.unwrap(),
                    prev.input_tokens.unwrap() + count_tokens(prev.output()) + 4 + count_tokens(&user) + 4,
                    "{} turn {k}",
                    case.id
                );
                assert_eq!(
                    this.prompt_cache.unwrap().read_tokens,
                    (prev.input_tokens.unwrap() - 3) / 16 * 16,
                    "{} turn {k}: the previous prompt, without its reply priming, was cached (whole 16-token blocks)",
                    case.id
                );
            }
        }
        // The users were staggered: someone sent a turn 2 before the last user's first turn.
        let first_turn_2 = records
            .iter()
            .filter(|r| r.turn.as_ref().unwrap().turn == 2)
            .map(|r| r.sent_at_us)
            .min()
            .unwrap();
        let mut first_by_user: HashMap<u32, i64> = HashMap::new();
        for r in &records {
            let e = first_by_user.entry(r.turn.as_ref().unwrap().user).or_insert(i64::MAX);
            *e = (*e).min(r.sent_at_us);
        }
        assert_eq!(first_by_user.len(), users as usize, "every user worked");
        assert!(
            first_by_user.values().max().unwrap() > &first_turn_2,
            "{users} users: turns are staggered"
        );
        let f = figures(records.iter(), 0.95);
        assert_eq!(f.turns.len(), TURNS);
        assert_eq!(f.conversations.graded, n as u64);
        let line = format!(
            "{users} users, {} turns: |TTFT − mock truth| p50 {:.3} ms, p99 {:.3} ms; |think waited − scheduled| p50 {:.3} ms, p99 {:.3} ms over {} waits",
            records.len(),
            quantile(ttft_error.clone(), 0.5),
            quantile(ttft_error.clone(), 0.99),
            quantile(think_error.clone(), 0.5),
            quantile(think_error.clone(), 0.99),
            think_error.len()
        );
        eprintln!("{line}");
        report.push(line.clone());
        assert!(quantile(ttft_error, 0.5) <= 1.0, "{line}");
        mock.shutdown().await.unwrap();
    }
    eprintln!("{}", report.join("\n"));
}

#[tokio::test]
async fn own_history_compounds_an_early_mistake_and_golden_history_isolates_each_turn() {
    // Right on 70 % of turns (drawn per turn); forgets after turn 3.
    let profile = ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        accuracy: 0.7,
        memory_turns: Some(3),
        ..ModelProfile::named("forgetful")
    };
    let mut passed = HashMap::new();
    for history in [HistoryMode::Own, HistoryMode::Golden] {
        let file = conversations(30, history);
        let mock = start_mock(MockConfig {
            profiles: vec![profile.clone()],
            answer_keys: vec![file.clone()],
            seed: 5,
        })
        .await;
        let (store, _guard) = sqlite_store().await;
        let run_id = create_run(
            &store,
            &file,
            &spec(&mock.base_url(), "forgetful"),
            config(8, ThinkTime::Fixed { ms: 0.0 }),
        )
        .await;
        assert_eq!(
            run_to_end_within(&store, run_id, Duration::from_secs(120)).await.status,
            RunStatus::Finished
        );
        let records = store.list_request_records(run_id).await.unwrap();
        let truth = ground_truth(&mock).await;
        let mut wrong_before: HashMap<String, bool> = HashMap::new();
        let mut sorted: Vec<&RequestRecord> = records.iter().collect();
        sorted.sort_by_key(|r| {
            (
                r.turn.as_ref().unwrap().conversation.clone(),
                r.turn.as_ref().unwrap().turn,
            )
        });
        for r in sorted {
            let facts = r.turn.as_deref().unwrap();
            let t = &truth[&request_id(r, &file)];
            let graded_pass = bakeoff::domain::grading::case_passed(&r.grades);
            // Bakeoff's grade agrees with what the mock meant to answer.
            assert_eq!(graded_pass, t["case"]["correct"].as_bool(), "{}", r.case_id);
            let history_right = t["case"]["history_right"].as_bool().unwrap();
            let earlier_wrong = wrong_before.get(&facts.conversation).copied().unwrap_or(false);
            match history {
                // Own replies: a wrong one misleads every later turn.
                HistoryMode::Own => {
                    assert_eq!(history_right, !earlier_wrong, "{}", r.case_id);
                    if earlier_wrong {
                        assert_eq!(graded_pass, Some(false), "{}: compounded", r.case_id);
                    }
                }
                HistoryMode::Golden => assert!(history_right, "{}: golden history is always right", r.case_id),
            }
            if facts.turn == 4 {
                assert_eq!(graded_pass, Some(false), "{}: turn 4 is past its memory", r.case_id);
                assert_eq!(t["case"]["remembers"].as_bool(), Some(false));
            }
            *wrong_before.entry(facts.conversation.clone()).or_default() |= graded_pass == Some(false);
        }
        let f = figures(records.iter(), 0.95);
        passed.insert(
            history.as_str(),
            (f.turns[1].accuracy.passed, f.turns[1].accuracy.graded),
        );
        assert_eq!(f.conversations.passed, 0, "nobody remembers turn 4");
        mock.shutdown().await.unwrap();
    }
    // Turn 2 is right more often with golden history than with its own (errors compound).
    let (own, golden) = (passed["own"], passed["golden"]);
    assert!(own.0 < golden.0, "own {own:?} vs golden {golden:?}");
}

#[tokio::test]
async fn the_demo_conversation_set_shows_relay_sharp_on_turn_1_and_lost_by_turn_4() {
    let shipped = bakeoff::app::demo::shipped_evalset_files().expect("the shipped sets parse");
    let file = shipped
        .into_iter()
        .find(|f| f.header.name == "zh-en-conversations")
        .expect("the demo conversation set ships");
    assert!(file.cases.iter().all(|c| c.turns.len() == TURNS));
    let langs: std::collections::BTreeSet<&str> = file
        .cases
        .iter()
        .flat_map(|c| c.tags.iter().map(String::as_str))
        .collect();
    assert_eq!(langs.into_iter().collect::<Vec<_>>(), ["en", "zh"], "bilingual");
    // The demo profiles as shipped, made fast: their answers, not their speed, are the point.
    let profiles: Vec<ModelProfile> = bakeoff::mock::demo_profiles()
        .into_iter()
        .filter(|p| p.name == "relay-8b" || p.name == "steady-32b")
        .map(|mut p| {
            p.ttft_ms = 2.0;
            p.prefill_ms_per_token = 0.0;
            p.tokens_per_second = 20_000.0;
            p.stall_probability = 0.0;
            p.error_429_rate = 0.0;
            p
        })
        .collect();
    let mock = start_mock(MockConfig {
        profiles: profiles.clone(),
        answer_keys: vec![file.clone()],
        seed: 42,
    })
    .await;
    let (store, _guard) = sqlite_store().await;
    let mut by_name = HashMap::new();
    let mut run_of = HashMap::new();
    for p in &profiles {
        let (store, file) = (&store, &file);
        let run_id = create_run(
            store,
            file,
            &spec(&mock.base_url(), &p.name),
            config(4, ThinkTime::Fixed { ms: 0.0 }),
        )
        .await;
        assert_eq!(
            run_to_end_within(store, run_id, Duration::from_secs(120)).await.status,
            RunStatus::Finished
        );
        let records = store.list_request_records(run_id).await.unwrap();
        by_name.insert(p.name.clone(), figures(records.iter(), 0.95));
        run_of.insert(p.name.clone(), run_id);
    }
    let relay = &by_name["relay-8b"];
    let rate = |f: &bakeoff::domain::conversation::ConversationFigures, k: usize| {
        f.turns[k - 1].accuracy.rate().unwrap_or(0.0)
    };
    assert!(rate(relay, 1) >= 0.8, "relay-8b turn 1: {:?}", relay.turns[0].accuracy);
    assert_eq!(
        relay.turns.get(3).map(|t| t.accuracy.passed).unwrap_or(0),
        0,
        "relay-8b forgets by turn 4"
    );
    assert_eq!(relay.conversations.passed, 0);
    let steady = &by_name["steady-32b"];
    assert!(
        steady.conversations.passed > 0,
        "steady-32b keeps some conversations whole"
    );
    // Both have a prefix cache: later turns read their history from it.
    assert!(steady.turns[1].cache_hit_rate.unwrap() > 0.5, "{:?}", steady.turns[1]);

    // The scorecard judges per-turn rules like any other: relay-8b's lost conversations fail
    // the conversation and last-turn rules; its turn-4 TTFT is measured and passes.
    let rule = |metric: &str, comparator, value| bakeoff::domain::thresholds::ThresholdRule {
        metric: metric.into(),
        comparator,
        value,
        unit: bakeoff::domain::thresholds::key::MetricKey::parse(metric)
            .unwrap()
            .def()
            .unit
            .stored_name()
            .to_string(),
        rationale: "per-turn rules".into(),
    };
    use bakeoff::domain::thresholds::Comparator::{AtLeast, AtMost};
    let rules = vec![
        rule("conversation_pass_rate", AtLeast, 0.5),
        rule("last_turn_accuracy", AtLeast, 0.5),
        rule("turn_ttft_p95:4", AtMost, 60_000.0),
    ];
    let (profile, _) = store
        .save_threshold_profile("conversations", "", &rules, "test", "per-turn rules")
        .await
        .unwrap();
    let choice = bakeoff::app::scorecard::ScorecardChoice {
        profile: Some(profile),
        ..Default::default()
    };
    use bakeoff::domain::scorecard::{RuleState, Verdict};
    let live = bakeoff::app::live::Live::new();
    let relay_card = bakeoff::app::scorecard::assemble(&store, &live, run_of["relay-8b"], &choice)
        .await
        .unwrap()
        .card;
    let states = |card: &bakeoff::domain::scorecard::Scorecard| -> Vec<(String, RuleState)> {
        card.rows
            .iter()
            .map(|r| (r.rule.metric.clone(), r.cells[0].assessment.state))
            .collect()
    };
    let relay_states = states(&relay_card);
    assert!(
        relay_states.contains(&("conversation_pass_rate".into(), RuleState::Fail))
            && relay_states.contains(&("last_turn_accuracy".into(), RuleState::Fail)),
        "{relay_states:?}"
    );
    assert_eq!(relay_card.columns[0].verdict, Verdict::NoGo);
    let turn4 = relay_card
        .rows
        .iter()
        .find(|r| r.rule.metric == "turn_ttft_p95:4")
        .unwrap();
    assert!(turn4.cells[0].measurement.value.is_some(), "turn 4 TTFT measured");
    assert_eq!(turn4.cells[0].assessment.state, RuleState::Pass);
    mock.shutdown().await.unwrap();
}
