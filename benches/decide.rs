//! Stop when decided against fixed length: the same 3-candidate × 6-level run measured both
//! ways, repeatedly; how often every level's verdict agrees and how much wall time is saved.
//!
//! `cargo bench --bench decide` (env `BAKEOFF_DECIDE_REPEATS`, default 20)
//!
//! Candidates: three truth servers (`mock::truth`) of 2, 6 and 12 slots, 40 ms of service each;
//! levels: concurrency 1, 2, 4, 8, 16, 32, 120 requests each; SLO: TTFT ≤ first token + 25 ms
//! for 90 % of requests. A level's verdict (`domain::capacity::LevelVerdict`: its attainment's
//! 95 % interval as every page shows it, Wilson's and batch means' hull, against the target) is
//! compared between the fixed-length run and the run with `stop_when_decided` (which stops a
//! level once the same interval, at 99 %, over the outcomes so far is on one side).
use std::time::Instant;

use bakeoff::domain::calibers::run_figures;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::capacity::LevelVerdict;
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{NewRun, RunConfig, Slo};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::engine::run::executor::execute;
use bakeoff::mock::MockConfig;
use bakeoff::mock::truth::TruthServer;
use bakeoff::store::DynStore;

const LEVELS: [u32; 6] = [1, 2, 4, 8, 16, 32];
const REQUESTS: u32 = 120;
const SLOTS: [u32; 3] = [2, 6, 12];

fn server(slots: u32) -> TruthServer {
    TruthServer {
        slots,
        first_token_ms: 10.0,
        inter_token_ms: 15.0,
        tokens: 3,
    }
}

fn config(stop_when_decided: bool) -> RunConfig {
    RunConfig {
        concurrency: 1,
        warmup_requests: 2,
        max_tokens: Some(3),
        timeout_secs: 30,
        retries: 0,
        stream: true,
        staged_rollout: false,
        load: LoadShape::Levels {
            levels: LEVELS.to_vec(),
        },
        requests_per_level: Some(REQUESTS),
        slo: Slo {
            ttft_ms: Some(35.0),
            target_attainment: Some(0.9),
            ..Slo::default()
        },
        stop_when_decided,
        // Both ways measure every level, so that their verdicts compare level by level.
        measure_past_saturation: true,
        ..RunConfig::default()
    }
}

/// Runs the plan once; returns its wall time and every (candidate, level) verdict.
async fn measure(store: &DynStore, version: i64, candidates: &[i64], stop: bool) -> (f64, Vec<LevelVerdict>) {
    let config = config(stop);
    let run_id = store
        .create_run(&NewRun {
            name: format!("decide bench, stop when decided: {stop}"),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
            config: config.clone(),
        })
        .await
        .expect("the run stored");
    let started = Instant::now();
    execute(store.clone(), run_id, Cancel::never())
        .await
        .expect("the run ran");
    let wall = started.elapsed().as_secs_f64();
    let records = store.list_request_records(run_id).await.expect("the records");
    let verdicts = candidates
        .iter()
        .flat_map(|&id| {
            let figures = run_figures(&records, &config, id, |_| None);
            figures
                .levels
                .iter()
                .map(|l| LevelVerdict::by(l.slo_attainment_interval, 0.9))
                .collect::<Vec<_>>()
        })
        .collect();
    (wall, verdicts)
}

fn main() {
    let repeats: u64 = std::env::var("BAKEOFF_DECIDE_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let store = bakeoff::store::connect(&url).await.expect("the store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let mock = bakeoff::mock::spawn(
            MockConfig {
                profiles: SLOTS.iter().map(|&s| server(s).profile(&format!("slots-{s}"))).collect(),
                answer_keys: Vec::new(),
                seed: 5,
            },
            listener,
        )
        .await
        .expect("the mock");
        let mut candidates = Vec::new();
        for s in SLOTS {
            let spec = CandidateSpec::openai_chat(format!("{s} slots"), mock.base_url(), format!("slots-{s}"));
            let new = bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec, false)
                .expect("an admin may store it");
            candidates.push(store.create_candidate(&new).await.expect("the candidate"));
        }
        let workload = synthetic_evalset(&[16], 40, 3).expect("the workload");
        let version = store.save_evalset_version(&workload).await.expect("the workload stored");
        let (mut fixed_s, mut decided_s, mut same_runs, mut same_levels, mut levels) = (0.0, 0.0, 0u64, 0u64, 0u64);
        for repeat in 0..repeats {
            let (fixed_wall, fixed) = measure(&store, version, &candidates, false).await;
            let (decided_wall, decided) = measure(&store, version, &candidates, true).await;
            let agree = fixed.iter().zip(&decided).filter(|(a, b)| a == b).count() as u64;
            same_levels += agree;
            levels += fixed.len() as u64;
            same_runs += u64::from(agree == fixed.len() as u64 && fixed.len() == decided.len());
            fixed_s += fixed_wall;
            decided_s += decided_wall;
            println!(
                "repeat {}: fixed {fixed_wall:.1} s, decided {decided_wall:.1} s; verdicts agree at {agree} of {} levels \
                 (fixed {:?}, decided {:?})",
                repeat + 1,
                fixed.len(),
                fixed.iter().map(LevelVerdict::as_str).collect::<Vec<_>>(),
                decided.iter().map(LevelVerdict::as_str).collect::<Vec<_>>()
            );
        }
        println!(
            "{repeats} repeats of 3 candidates × 6 levels: every verdict the same in {same_runs} runs ({:.1} %), {same_levels} \
             of {levels} levels ({:.1} %); wall time fixed {fixed_s:.1} s, stop when decided {decided_s:.1} s: {:.1} % less",
            100.0 * same_runs as f64 / repeats.max(1) as f64,
            100.0 * same_levels as f64 / levels.max(1) as f64,
            100.0 * (1.0 - decided_s / fixed_s.max(1e-9))
        );
        mock.shutdown().await.expect("the mock stopped");
    });
}
