//! Think time kept under load (issue 46's closing figure): conversations of four turns sent by
//! 64 and then 256 users against the built-in mock in this process (the run on bakeoff's own
//! measurement runtime, as `bakeoff serve` runs it), each wait between a reply and the user's
//! next turn measured two ways against the seeded schedule:
//! - bakeoff's records: the turn's send − the previous reply's end (`think_waited_us`);
//! - the mock's ground truth: the turn's receipt at the server (the kernel's receive time) − the
//!   previous reply's end (the kernel's receive time at bakeoff), on the machine's one clock.
//!
//! The figure to hold: |waited − scheduled| p99 ≤ 1 ms on an idle machine, and no turn sent
//! early. Also printed: each turn's TTFT against the mock's (p50 ≤ 1 ms), and that every user
//! kept one connection (the mock's connection numbers).
//!
//! `cargo bench --profile dev --bench think_time -- --quick` (2 conversations per user,
//! exponential think time with a 50 ms mean) or without `--quick` (8 per user, 200 ms mean).
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::conversation::ThinkTime;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::evalset::conversation::split_turn_key;
use bakeoff::domain::metrics::Distribution;
use bakeoff::domain::run::{NewRun, RequestRecord, RunConfig, RunStatus};
use bakeoff::engine::run::Runner;
use bakeoff::engine::run::conversation::TURN_ID_SHIFT;
use bakeoff::engine::run::pool::request_id;
use bakeoff::mock::{MockConfig, ModelProfile};

const TURNS: usize = 4;
const LEVELS: [u32; 2] = [64, 256];

fn conversations(n: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"think-bench","task":"generation","system":"Answer briefly.","graders":[{"kind":"exact"}],"max_tokens":16}"#,
    );
    for i in 0..n {
        text.push_str(&format!(
            "\n{{\"id\":\"t{i:04}\",\"turns\":[\
             {{\"user\":\"Remember the number {i}.\",\"expected\":\"Noted {i}\"}},\
             {{\"user\":\"Which number?\",\"expected\":\"It was {i}\"}},\
             {{\"user\":\"Add one.\",\"expected\":\"That makes {}\"}},\
             {{\"user\":\"In words?\",\"expected\":\"Number {i} plus one\"}}]}}",
            i + 1
        ));
    }
    EvalSetFile::parse("think-bench.jsonl", &text).expect("the bench set parses")
}

fn show(what: &str, d: &Option<Distribution>) {
    match d {
        Some(d) => println!(
            "  {what:<46} p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>8.3} ms   (n = {})",
            d.p50, d.p99, d.max, d.n
        ),
        None => println!("  {what:<46} nothing measured"),
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (per_user, mean_ms) = if quick { (2, 50.0) } else { (8, 200.0) };
    // The mock's own runtime; the run goes on bakeoff's measurement runtime (the Runner's).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let store = bakeoff::store::connect(&url).await.expect("the store");
        println!(
            "think time kept: {TURNS}-turn conversations, {per_user} per user, think time exponential with a {mean_ms} ms mean"
        );
        for users in LEVELS {
            let n = users as usize * per_user;
            let file = conversations(n);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
            let mock = bakeoff::mock::spawn_with_log(
                MockConfig {
                    profiles: vec![ModelProfile {
                        ttft_ms: 20.0,
                        prefill_ms_per_token: 0.05,
                        inter_token_ms: Some(2.0),
                        tokens_per_chunk: 1,
                        prefix_cache: true,
                        ..ModelProfile::named("bench")
                    }],
                    answer_keys: vec![file.clone()],
                    seed: 46,
                },
                listener,
                n * TURNS + 100,
            )
            .await
            .expect("the mock");
            let version = store.save_evalset_version(&file).await.expect("the set stored");
            let spec = CandidateSpec::openai_chat(format!("bench-{users}"), mock.base_url(), "bench");
            let candidate = store
                .create_candidate(
                    &bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec, false)
                        .expect("an admin may set credentials"),
                )
                .await
                .expect("the candidate stored");
            let run_id = store
                .create_run(&NewRun {
                    name: format!("think time at {users} users"),
                    evalset_version_id: version,
                    candidate_ids: vec![candidate],
                    config: RunConfig {
                        concurrency: users,
                        repetitions: 1,
                        warmup_requests: 0,
                        retries: 0,
                        stream: true,
                        timeout_secs: 120,
                        staged_rollout: false,
                        think_time: Some(ThinkTime::Exponential { mean_ms }),
                        ..RunConfig::default()
                    },
                })
                .await
                .expect("the run stored");
            let runner = Runner::new(store.clone());
            runner.start(run_id);
            tokio::time::timeout(Duration::from_secs(1800), runner.wait(run_id))
                .await
                .expect("the run ended in time");
            let run = store.get_run(run_id).await.expect("the run").expect("the run");
            assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
            let records = store.list_request_records(run_id).await.expect("the records");
            report(users, &file, &records, &mock).await;
            mock.shutdown().await.expect("the mock stopped");
        }
    });
}

async fn report(users: u32, file: &EvalSetFile, records: &[RequestRecord], mock: &bakeoff::mock::MockServer) {
    let page: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .expect("the mock's ground truth")
        .json()
        .await
        .expect("JSON");
    let truth: HashMap<String, serde_json::Value> = page["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| Some((r["client_request_id"].as_str()?.to_string(), r.clone())))
        .collect();
    let id_of = |r: &RequestRecord| {
        let (case, turn) = split_turn_key(&r.case_id).expect("a turn key");
        let index = file.cases.iter().position(|c| c.id == case).expect("a case");
        request_id(
            r.run_id,
            r.candidate_id,
            r.phase,
            index | (turn << TURN_ID_SHIFT),
            r.repetition,
            r.attempt,
        )
    };
    let by_key: HashMap<(String, u32), &RequestRecord> = records
        .iter()
        .filter_map(|r| Some(((r.turn.as_ref()?.conversation.clone(), r.turn.as_ref()?.turn), r)))
        .collect();
    let (mut own, mut ground, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
    let (mut early, mut failed, mut ramp) = (0, 0, 0);
    let mut connections: HashMap<u32, BTreeSet<u64>> = HashMap::new();
    for r in records {
        let Some(facts) = r.turn.as_deref() else { continue };
        if !r.succeeded() {
            failed += 1;
            continue;
        }
        ramp += usize::from(facts.ramp);
        let Some(t) = truth.get(&id_of(r)) else { continue };
        if let Some(c) = t["connection"].as_u64() {
            connections.entry(facts.user).or_default().insert(c);
        }
        if let (Some(ms), Some(server)) = (r.ttft_us(), t["first_token_ms"].as_f64()) {
            ttft.push(ms as f64 / 1000.0 - server);
        }
        let (Some(scheduled), Some(waited)) = (facts.think_scheduled_us, facts.think_waited_us) else {
            continue;
        };
        own.push((waited - scheduled) as f64 / 1000.0);
        let Some(prev) = by_key.get(&(facts.conversation.clone(), facts.turn - 1)) else {
            continue;
        };
        let reply_end_us = (prev.sent_at_us + prev.end_us.get().unwrap_or(0)) as f64;
        let arrived_us = t["received_unix_ms"].as_f64().unwrap_or(0.0) * 1000.0;
        let error_ms = (arrived_us - reply_end_us - scheduled as f64) / 1000.0;
        early += usize::from(error_ms < 0.0);
        ground.push(error_ms);
    }
    let one_each = connections.values().all(|c| c.len() == 1);
    let distinct: BTreeSet<u64> = connections.values().flatten().copied().collect();
    println!(
        "\n{users} users: {} turns ({failed} failed, {ramp} in the ramp); connections: {} users on {} connections, one each: {one_each}",
        records.len(),
        connections.len(),
        distinct.len()
    );
    show(
        "think waited − scheduled (bakeoff's records)",
        &Distribution::of(own.iter().copied()),
    );
    show(
        "think waited − scheduled (mock receipt)",
        &Distribution::of(ground.iter().copied()),
    );
    println!(
        "  sent early (mock receipt before the schedule): {early} of {}",
        ground.len()
    );
    show("TTFT − mock's TTFT", &Distribution::of(ttft.iter().copied()));
}
