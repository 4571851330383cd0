//! How often the capacity search's reported bracket covers the true capacity of the truth
//! server (`mock::truth::REFERENCE`, judged by its reference SLO), and how many probe levels it
//! takes.
//!
//! `cargo bench --bench capacity` (env `BAKEOFF_CAPACITY_REPEATS`, default 40;
//! `BAKEOFF_CAPACITY_HTTP_REPEATS`, default 3)
//!
//! Two parts, each printing coverage (share of searches whose bracket holds the truth), the
//! share whose reported capacity is within ±5 % of it, and probe levels used:
//! 1. simulated: the search driven by exact simulations of each probe (the same queue the mock
//!    serves, no network): the statistics of the method itself, 40 repeats in seconds;
//! 2. HTTP: whole searches against the real mock over loopback, through the executor, as a user
//!    runs them (each probe a stored run; about half a minute per search).
use std::time::Instant;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::capacity::{CapacityOutcome, SearchSettings};
use bakeoff::domain::run::RunConfig;
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::engine::run::capacity::{CapacityPlan, find_capacity};
use bakeoff::mock::MockConfig;
use bakeoff::mock::truth::{REFERENCE, REFERENCE_PROBE_REQUESTS};

fn repeats(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Tally {
    searches: u64,
    covered: u64,
    within_5: u64,
    probes: Vec<usize>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            searches: 0,
            covered: 0,
            within_5: 0,
            probes: Vec::new(),
        }
    }

    fn add(&mut self, outcome: &CapacityOutcome, probes: usize, truth: f64) {
        self.searches += 1;
        self.covered += u64::from(outcome.covers(truth));
        self.within_5 += u64::from(outcome.capacity.is_some_and(|c| (c - truth).abs() <= 0.05 * truth));
        self.probes.push(probes);
    }

    fn print(&self, what: &str) {
        let pct = |n: u64| 100.0 * n as f64 / self.searches.max(1) as f64;
        println!(
            "{what}: {} searches; bracket covers the truth in {} ({:.1} %); capacity within ±5 % in {} ({:.1} %); \
             probe levels min {} / mean {:.1} / max {}",
            self.searches,
            self.covered,
            pct(self.covered),
            self.within_5,
            pct(self.within_5),
            self.probes.iter().min().unwrap_or(&0),
            self.probes.iter().sum::<usize>() as f64 / self.probes.len().max(1) as f64,
            self.probes.iter().max().unwrap_or(&0),
        );
    }
}

fn main() {
    let slo = REFERENCE.reference_slo();
    let target = slo.target_attainment.expect("the reference SLO has a target");
    let truth = REFERENCE
        .capacity_at_rate(&slo, target, REFERENCE_PROBE_REQUESTS)
        .expect("the reference SLO can be met");
    let settings = SearchSettings {
        start: 15.0,
        ..SearchSettings::default()
    };
    println!(
        "truth server: {} slots × {} ms, SLO TTFT ≤ {} ms for {} % of {} requests per probe: true capacity {truth:.2} \
         req/s",
        REFERENCE.slots,
        REFERENCE.service_ms(),
        slo.ttft_ms.unwrap_or_default(),
        target * 100.0,
        REFERENCE_PROBE_REQUESTS
    );

    let started = Instant::now();
    let mut simulated = Tally::new();
    for seed in 0..repeats("BAKEOFF_CAPACITY_REPEATS", 40) {
        let (search, outcome) = REFERENCE.simulated_search(settings, &slo, REFERENCE_PROBE_REQUESTS, seed);
        simulated.add(&outcome, search.probes.len(), truth);
    }
    simulated.print(&format!("simulated ({:.1} s)", started.elapsed().as_secs_f64()));

    let http_repeats = repeats("BAKEOFF_CAPACITY_HTTP_REPEATS", 3);
    if http_repeats == 0 {
        return;
    }
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
                profiles: vec![REFERENCE.profile("truth")],
                answer_keys: Vec::new(),
                seed: 5,
            },
            listener,
        )
        .await
        .expect("the mock");
        let spec = CandidateSpec::openai_chat("truth server", mock.base_url(), "truth");
        let new = bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec, false)
            .expect("an admin may store it");
        let candidate_id = store.create_candidate(&new).await.expect("the candidate");
        let workload = synthetic_evalset(&[16], 40, REFERENCE.tokens).expect("the workload");
        let version = store
            .save_evalset_version(&workload)
            .await
            .expect("the workload stored");
        let mut http = Tally::new();
        let started = Instant::now();
        for repeat in 0..http_repeats {
            let plan = CapacityPlan {
                name: format!("capacity bench {repeat}"),
                evalset_version_id: version,
                candidate_ids: vec![candidate_id],
                config: RunConfig {
                    concurrency: 1,
                    warmup_requests: 4,
                    max_tokens: Some(REFERENCE.tokens),
                    timeout_secs: 30,
                    retries: 0,
                    stream: true,
                    staged_rollout: false,
                    requests_per_level: Some(REFERENCE_PROBE_REQUESTS),
                    slo,
                    ..RunConfig::default()
                },
                settings,
            };
            let found = find_capacity(&store, &plan, Cancel::never())
                .await
                .expect("the search ran")
                .remove(0);
            let outcome = found.outcome.expect("the search ended");
            println!("  HTTP search {}: {}", repeat + 1, outcome.describe(settings.axis));
            http.add(&outcome, found.probes.len(), truth);
        }
        http.print(&format!("HTTP ({:.1} s)", started.elapsed().as_secs_f64()));
        mock.shutdown().await.expect("the mock stopped");
    });
}
