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
        // Think time against the mock's ground truth: from the reply's end (bakeoff's record,
        // the kernel's receive time of its last bytes) to the next turn's arrival at the server
        // (the kernel's receive time there), on the machine's one wall clock. Never early; how
        // late is reported (the bound is the bench's to show on a quiet machine, not a test's).
        let mut truth_think_error = Vec::new();
        for case in &file.cases {
            for k in 2..=TURNS as u32 {
                let (prev, this) = (by_key[&(case.id.clone(), k - 1)], by_key[&(case.id.clone(), k)]);
                let scheduled_us = this.turn.as_ref().unwrap().think_scheduled_us.unwrap() as f64;
                let reply_end_us = (prev.sent_at_us + prev.end_us.get().unwrap()) as f64;
                let arrived_us = truth[&request_id(this, &file)]["received_unix_ms"].as_f64().unwrap() * 1000.0;
                let waited_us = arrived_us - reply_end_us;
                assert!(
                    waited_us >= scheduled_us - 50.0,
                    "{} turn {k}: sent {:.0} µs before its think time was over",
                    case.id,
                    scheduled_us - waited_us
                );
                truth_think_error.push((waited_us - scheduled_us) / 1000.0);
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
            "{users} users, {} turns: |TTFT − mock truth| p50 {:.3} ms, p99 {:.3} ms; |think waited − scheduled| p50 {:.3} ms, p99 {:.3} ms over {} waits (bakeoff's records), reply end → server receipt − scheduled p50 {:.3} ms, p99 {:.3} ms (mock's ground truth)",
            records.len(),
            quantile(ttft_error.clone(), 0.5),
            quantile(ttft_error.clone(), 0.99),
            quantile(think_error.clone(), 0.5),
            quantile(think_error.clone(), 0.99),
            think_error.len(),
            quantile(truth_think_error.clone(), 0.5),
            quantile(truth_think_error.clone(), 0.99),
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

/// A fast profile whose answers come from the set's key.
fn quick(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 3.0,
        inter_token_ms: Some(0.5),
        tokens_per_chunk: 1,
        ..ModelProfile::named(name)
    }
}

/// The mock's record of every turn of a finished run, by (conversation, turn), with the turn's
/// own record: (record, the mock's ground truth).
async fn turns_with_truth(
    store: &DynStore,
    run_id: i64,
    file: &EvalSetFile,
    mock: &bakeoff::mock::MockServer,
) -> Vec<(RequestRecord, serde_json::Value)> {
    let truth = ground_truth(mock).await;
    store
        .list_request_records(run_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.is_warmup)
        .map(|r| {
            let t = truth
                .get(&request_id(&r, file))
                .unwrap_or_else(|| panic!("the mock saw {}", r.case_id))
                .clone();
            (r, t)
        })
        .collect()
}

#[tokio::test]
async fn each_user_keeps_one_connection_for_all_its_turns_and_no_two_users_share_one() {
    let file = conversations(24, HistoryMode::Own);
    let mock = start_mock(MockConfig {
        profiles: vec![quick("sticky")],
        answer_keys: vec![file.clone()],
        seed: 3,
    })
    .await;
    let (store, _guard) = sqlite_store().await;
    let users = 6;
    let run_id = create_run(
        &store,
        &file,
        &spec(&mock.base_url(), "sticky"),
        config(
            users,
            ThinkTime::Uniform {
                min_ms: 1.0,
                max_ms: 4.0,
            },
        ),
    )
    .await;
    let run = run_to_end_within(&store, run_id, Duration::from_secs(120)).await;
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
    let turns = turns_with_truth(&store, run_id, &file, &mock).await;
    assert_eq!(turns.len(), 24 * TURNS);
    // The mock's ground truth: which connection (and client port) each turn came on.
    let mut by_user: HashMap<u32, std::collections::BTreeSet<u64>> = HashMap::new();
    let mut user_of_connection: HashMap<u64, u32> = HashMap::new();
    let mut peer_of_connection: HashMap<u64, String> = HashMap::new();
    let mut by_conversation: HashMap<String, std::collections::BTreeSet<u64>> = HashMap::new();
    for (r, t) in &turns {
        let facts = r.turn.as_deref().unwrap();
        let connection = t["connection"].as_u64().expect("the mock numbers each connection");
        let peer = t["peer"]
            .as_str()
            .expect("the mock records the client's address")
            .to_string();
        assert!(peer.starts_with("127.0.0.1:"), "{peer}");
        by_user.entry(facts.user).or_default().insert(connection);
        by_conversation
            .entry(facts.conversation.clone())
            .or_default()
            .insert(connection);
        let owner = *user_of_connection.entry(connection).or_insert(facts.user);
        assert_eq!(
            owner, facts.user,
            "connection {connection} carried turns of users {owner} and {}",
            facts.user
        );
        let first_peer = peer_of_connection.entry(connection).or_insert_with(|| peer.clone());
        assert_eq!(*first_peer, peer, "one connection, one client port");
    }
    assert_eq!(by_user.len(), users as usize, "every user worked");
    for (user, connections) in &by_user {
        assert_eq!(
            connections.len(),
            1,
            "user {user} kept one connection for all its turns: {connections:?}"
        );
    }
    for (conversation, connections) in &by_conversation {
        assert_eq!(connections.len(), 1, "{conversation}: every turn on one connection");
    }
    // Different users, different connections (and client ports).
    let ports: std::collections::BTreeSet<&String> = peer_of_connection.values().collect();
    assert_eq!(user_of_connection.len(), users as usize);
    assert_eq!(ports.len(), users as usize);
    // The records agree: only each user's first turn opened a connection.
    let opened = turns.iter().filter(|(r, _)| r.connection_reused == Some(false)).count();
    assert_eq!(opened, users as usize, "one new connection per user");
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn turns_sent_before_every_user_started_are_graded_but_left_out_of_the_speed_figures() {
    let file = conversations(48, HistoryMode::Own);
    let mock = start_mock(MockConfig {
        profiles: vec![ModelProfile {
            accuracy: 0.8,
            ..quick("ramped")
        }],
        answer_keys: vec![file.clone()],
        seed: 9,
    })
    .await;
    let (store, _guard) = sqlite_store().await;
    let users = 12u32;
    // Users start spread over 4 turns × 10 ms: the last one 37 ms after the first.
    let config = config(users, ThinkTime::Fixed { ms: 10.0 });
    let run_id = create_run(&store, &file, &spec(&mock.base_url(), "ramped"), config.clone()).await;
    let run = run_to_end_within(&store, run_id, Duration::from_secs(120)).await;
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
    let turns = turns_with_truth(&store, run_id, &file, &mock).await;
    assert_eq!(turns.len(), 48 * TURNS);
    let ramp: Vec<&(RequestRecord, serde_json::Value)> = turns.iter().filter(|(r, _)| r.in_ramp()).collect();
    let measured = turns.len() - ramp.len();
    assert!(
        !ramp.is_empty() && measured > ramp.len(),
        "{} ramp turns of {}",
        ramp.len(),
        turns.len()
    );
    // Each user's ramp turns come before its measured ones: the ramp ends once for all.
    let mut by_user: HashMap<u32, Vec<&RequestRecord>> = HashMap::new();
    for (r, _) in &turns {
        by_user.entry(r.turn.as_ref().unwrap().user).or_default().push(r);
    }
    assert_eq!(by_user.len(), users as usize);
    for (user, rs) in &mut by_user {
        rs.sort_by_key(|r| r.sent_at_us);
        let flags: Vec<bool> = rs.iter().map(|r| r.in_ramp()).collect();
        assert!(
            flags.windows(2).all(|w| w[0] || !w[1]),
            "user {user}: ramp turns first, then measured ones: {flags:?}"
        );
    }
    // Against the mock's receipts: the ramp is the time before the last user's first turn
    // arrived. (A few ms either way: a turn marked just before that user started may reach the
    // server just after its first turn does.)
    let first_arrival = |user: u32| {
        turns
            .iter()
            .filter(|(r, _)| r.turn.as_ref().unwrap().user == user)
            .map(|(_, t)| t["received_unix_ms"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min)
    };
    let all_started_ms = (0..users).map(first_arrival).fold(f64::NEG_INFINITY, f64::max);
    for (r, t) in &ramp {
        let at = t["received_unix_ms"].as_f64().unwrap();
        assert!(
            at <= all_started_ms + 5.0,
            "{}: a ramp turn reached the server {:.3} ms after every user had started",
            r.case_id,
            at - all_started_ms
        );
    }
    let late_measured = turns
        .iter()
        .filter(|(r, t)| !r.in_ramp() && t["received_unix_ms"].as_f64().unwrap() < all_started_ms - 5.0)
        .count();
    assert_eq!(late_measured, 0, "no turn before the ramp's end is measured");
    // Graded like any turn: the ramp's turns carry their grades and count for accuracy.
    assert!(ramp.iter().all(|(r, _)| !r.grades.is_empty()));
    let records: Vec<RequestRecord> = turns.iter().map(|(r, _)| r.clone()).collect();
    let f = figures(records.iter(), 0.95);
    assert_eq!(f.ramp_turns, ramp.len());
    let graded: u64 = f.turns.iter().map(|t| t.accuracy.graded).sum();
    assert_eq!(graded, (48 * TURNS) as u64, "every turn graded, the ramp's too");
    assert_eq!(f.conversations.graded, 48);
    for row in &f.turns {
        let in_ramp = ramp
            .iter()
            .filter(|(r, _)| r.turn.as_ref().unwrap().turn == row.turn)
            .count();
        assert_eq!(row.ramp, in_ramp, "turn {}", row.turn);
        assert_eq!(
            row.ttft_ms.n,
            row.requests - in_ramp,
            "turn {}: speed past the ramp only",
            row.turn
        );
    }
    assert_eq!(f.points.len(), measured);
    // The level's figures (run page, scorecard) count the measured turns only.
    let candidate = records[0].candidate_id;
    let level = bakeoff::domain::calibers::run_figures(records.iter(), &config, candidate, |_| None);
    assert_eq!(level.levels.len(), 1);
    assert_eq!(level.levels[0].requests as usize, measured);
    assert_eq!(level.levels[0].ttft_ms.as_ref().unwrap().n as usize, measured);
    let at_c = bakeoff::domain::calibers::figures_at_concurrency(records.iter(), users, &[]).unwrap();
    assert_eq!(at_c.requests as usize, measured);
    // The window starts no earlier than the ramp's end: no ramp turn was sent inside it.
    let window = at_c.repetitions[0].window.expect("a steady window");
    let first_measured_send = records
        .iter()
        .filter(|r| !r.in_ramp())
        .map(|r| r.sent_at_us)
        .min()
        .unwrap();
    assert!(window.start_us >= first_measured_send, "{window:?}");
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_turns_llm_judge_grader_judges_each_turn_after_the_load() {
    // Turns 1, 2 and 4 take the header's graders (exact and a judge); turn 3 only its own judge.
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"conv-judged","task":"generation","system":"Answer briefly.","graders":[{"kind":"exact"},{"kind":"llm-judge","judge":"judge","rubric":"Is it the expected reply?"}],"max_tokens":24}"#,
    );
    for i in 0..6 {
        text.push_str(&format!(
            "\n{{\"id\":\"j{i}\",\"turns\":[\
             {{\"user\":\"Remember {i}.\",\"expected\":\"Noted {i}\"}},\
             {{\"user\":\"Which number?\",\"expected\":\"It was {i}\"}},\
             {{\"user\":\"Add one.\",\"expected\":\"That makes {}\",\"graders\":[{{\"kind\":\"llm-judge\",\"judge\":\"judge\",\"rubric\":\"Does it add one?\"}}]}},\
             {{\"user\":\"In words?\",\"expected\":\"Number {i} plus one\"}}]}}",
            i + 1
        ));
    }
    let file = EvalSetFile::parse("conv-judged.jsonl", &text).expect("the test set parses");
    let mock = start_mock(MockConfig {
        profiles: vec![
            ModelProfile {
                accuracy: 0.7,
                ..quick("m")
            },
            quick("j"),
        ],
        answer_keys: vec![file.clone()],
        seed: 17,
    })
    .await;
    let (store, _guard) = sqlite_store().await;
    let judge = store
        .create_candidate(&crate::support::checked::admin_new(&spec(&mock.base_url(), "j")))
        .await
        .unwrap();
    let mut config = config(2, ThinkTime::Fixed { ms: 1.0 });
    config.judge = Some(bakeoff::domain::run::JudgeConfig {
        override_id: Some(judge),
        ..Default::default()
    });
    let run_id = create_run(&store, &file, &spec(&mock.base_url(), "m"), config).await;
    let run = run_to_end_within(&store, run_id, Duration::from_secs(120)).await;
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
    let all = store.list_request_records(run_id).await.unwrap();
    let judge_calls: Vec<&RequestRecord> = all
        .iter()
        .filter(|r| r.phase == bakeoff::domain::run::Phase::Judge)
        .collect();
    let truth = ground_truth(&mock).await;
    let turns: Vec<&RequestRecord> = all.iter().filter(|r| r.turn.is_some()).collect();
    assert_eq!(
        turns.len(),
        6 * TURNS,
        "every turn sent (a wrong reply does not stop one)"
    );
    let mut right_and_wrong = (0, 0);
    for r in &turns {
        let k = r.turn.as_ref().unwrap().turn;
        let graders: Vec<&str> = r.grades.iter().map(|g| &*g.grader).collect();
        let correct = truth[&request_id(r, &file)]["case"]["correct"].as_bool().unwrap();
        let judged = r
            .grades
            .iter()
            .find(|g| &*g.grader == "llm-judge")
            .unwrap_or_else(|| panic!("{}: a judge grade on every turn: {graders:?}", r.case_id));
        if k == 3 {
            assert_eq!(graders, ["llm-judge"], "{}: turn 3's own graders", r.case_id);
        } else {
            assert_eq!(graders, ["exact", "llm-judge"], "{}", r.case_id);
        }
        // The mock judge gives 5/5 to the turn's expected reply, 2/5 to anything else.
        assert_eq!(judged.passed, correct, "{}: {}", r.case_id, judged.reason);
        assert_eq!(
            bakeoff::domain::grading::case_passed(&r.grades),
            Some(correct),
            "{}",
            r.case_id
        );
        if correct {
            right_and_wrong.0 += 1;
        } else {
            right_and_wrong.1 += 1;
        }
        // Its judge call is recorded under the turn's key, apart from every figure.
        assert_eq!(
            judge_calls.iter().filter(|c| c.case_id == r.case_id).count(),
            1,
            "{}",
            r.case_id
        );
    }
    assert!(right_and_wrong.0 > 0 && right_and_wrong.1 > 0, "{right_and_wrong:?}");
    assert_eq!(judge_calls.len(), turns.len());
    assert!(judge_calls.iter().all(|c| c.is_warmup && c.succeeded()));
    // The judge grades count in the figures by turn and whole conversations.
    let f = figures(turns.iter().copied(), 0.95);
    assert_eq!(f.turns[2].accuracy.graded, 6, "turn 3 is graded by its judge alone");
    let passed: u64 = f.turns.iter().map(|t| t.accuracy.passed).sum();
    assert_eq!(passed, right_and_wrong.0 as u64);
    mock.shutdown().await.unwrap();
}
