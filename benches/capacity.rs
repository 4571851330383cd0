//! How often the capacity search's reported interval covers the true capacity of the truth
//! server (`mock::truth::REFERENCE`, judged by its reference SLO), how close its estimate comes,
//! and how many probe levels it takes. Every figure is printed as a ratio against the truth
//! computed in the same run.
//!
//! `cargo bench --bench capacity`, env:
//! - `BAKEOFF_CAPACITY_REPEATS` (default 40): simulated searches;
//! - `BAKEOFF_CAPACITY_HTTP_REPEATS` (default 1), `BAKEOFF_CAPACITY_HTTP_REQUESTS` (requests per
//!   probe over HTTP, default 1000: a probe of 4,000 at 15 req/s takes over four minutes).
//!
//! Two parts:
//! 1. simulated: the search driven by exact simulations of each probe (the queue the mock
//!    serves, no network), 4,000 requests per probe: the statistics of the method itself;
//! 2. HTTP: whole searches against the real mock over loopback, through the executor, as a user
//!    runs them (each probe a stored run). Loopback and the client add to every TTFT, so the
//!    truth here is simulated with each request's added time drawn from those measured in the
//!    same run by a probe at a light load (TTFT less the server's first-token time).
use std::time::Instant;

use bakeoff::domain::calibers::RequestFigures;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::capacity::{CapacityOutcome, SearchSettings};
use bakeoff::domain::run::RunConfig;
use bakeoff::domain::stats::quantile;
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::engine::run::capacity::{CapacityPlan, find_capacity};
use bakeoff::mock::MockConfig;
use bakeoff::mock::truth::{REFERENCE, REFERENCE_PROBE_REQUESTS};

fn env(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Tally {
    truth: f64,
    covered: u64,
    within_5: u64,
    open_ends: u64,
    probes: Vec<usize>,
    estimate: Vec<f64>,
    lower: Vec<f64>,
    upper: Vec<f64>,
    width: Vec<f64>,
}

impl Tally {
    fn new(truth: f64) -> Tally {
        Tally {
            truth,
            covered: 0,
            within_5: 0,
            open_ends: 0,
            probes: Vec::new(),
            estimate: Vec::new(),
            lower: Vec::new(),
            upper: Vec::new(),
            width: Vec::new(),
        }
    }

    fn add(&mut self, outcome: &CapacityOutcome, probes: usize) {
        let t = self.truth;
        self.covered += u64::from(outcome.covers(t));
        self.within_5 += u64::from(outcome.capacity.is_some_and(|c| (c / t - 1.0).abs() <= 0.05));
        self.open_ends += u64::from(outcome.lower.is_none() || outcome.upper.is_none());
        self.probes.push(probes);
        self.estimate.extend(outcome.capacity.map(|c| c / t));
        self.lower.extend(outcome.lower.map(|c| c / t));
        self.upper.extend(outcome.upper.map(|c| c / t));
        self.width.extend(outcome.relative_width());
    }

    fn print(&self, what: &str) {
        let n = self.probes.len() as u64;
        let pct = |k: u64| 100.0 * k as f64 / n.max(1) as f64;
        let spread = |v: &[f64]| {
            let mut v = v.to_vec();
            if v.is_empty() {
                return "—".to_string();
            }
            format!(
                "{:.3} / {:.3} / {:.3}",
                quantile(&mut v, 0.0),
                quantile(&mut v, 0.5),
                quantile(&mut v, 1.0)
            )
        };
        println!("{what}: {n} searches, true capacity {:.2} req/s", self.truth);
        println!(
            "  interval covers the truth: {} of {n} ({:.1} %); estimate within ±5 %: {} ({:.1} %); an end left open: {}",
            self.covered,
            pct(self.covered),
            self.within_5,
            pct(self.within_5),
            self.open_ends
        );
        println!("  ratios to the truth (min / median / max):");
        println!("    estimate     {}", spread(&self.estimate));
        println!("    lower end    {}", spread(&self.lower));
        println!("    upper end    {}", spread(&self.upper));
        println!("  interval width / estimate: {}", spread(&self.width));
        println!(
            "  probe levels: min {} / mean {:.1} / max {}",
            self.probes.iter().min().unwrap_or(&0),
            self.probes.iter().sum::<usize>() as f64 / n.max(1) as f64,
            self.probes.iter().max().unwrap_or(&0),
        );
    }
}

fn main() {
    let slo = REFERENCE.reference_slo();
    let target = slo.target_attainment.expect("the reference SLO has a target");
    let settings = SearchSettings {
        start: 15.0,
        ..SearchSettings::default()
    };
    let started = Instant::now();
    let truth = REFERENCE
        .capacity_at_rate(&slo, target, REFERENCE_PROBE_REQUESTS)
        .expect("the reference SLO can be met");
    println!(
        "truth server: {} slots × {} ms, SLO TTFT ≤ {} ms for {} % of {} requests per probe; search from {} req/s, \
         width {} %, at most {} probes",
        REFERENCE.slots,
        REFERENCE.service_ms(),
        slo.ttft_ms.unwrap_or_default(),
        target * 100.0,
        REFERENCE_PROBE_REQUESTS,
        settings.start,
        settings.width * 100.0,
        settings.max_probes
    );
    let mut simulated = Tally::new(truth);
    for seed in 0..env("BAKEOFF_CAPACITY_REPEATS", 40) {
        let (search, outcome) = REFERENCE.simulated_search(settings, &slo, REFERENCE_PROBE_REQUESTS, seed);
        simulated.add(&outcome, search.probes.len());
    }
    simulated.print(&format!("simulated ({:.1} s)", started.elapsed().as_secs_f64()));

    let http_repeats = env("BAKEOFF_CAPACITY_HTTP_REPEATS", 1);
    if http_repeats == 0 {
        return;
    }
    let requests = env("BAKEOFF_CAPACITY_HTTP_REQUESTS", 1000) as u32;
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
        let plan = |name: String, requests: u32, settings: SearchSettings| CapacityPlan {
            name,
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
                requests_per_level: Some(requests),
                slo,
                ..RunConfig::default()
            },
            settings,
        };
        // The time loopback and the client add, measured at a light load (5 req/s: no waits).
        let light = SearchSettings {
            start: 5.0,
            max_probes: 1,
            ..settings
        };
        let found = find_capacity(&store, &plan("overhead".into(), 200, light), Cancel::never())
            .await
            .expect("the light probe ran")
            .remove(0);
        let records = store
            .list_request_records(found.probes[0].run_id)
            .await
            .expect("the light probe's records");
        let overheads: Vec<f64> = records
            .iter()
            .filter(|r| !r.is_warmup)
            .filter_map(|r| Some((RequestFigures::of(r)?.ttft_ms - REFERENCE.first_token_ms).max(0.0)))
            .collect();
        let mut sorted = overheads.clone();
        let p50 = quantile(&mut sorted, 0.5);
        let p99 = quantile(&mut sorted, 0.99);
        let limit = REFERENCE.wait_limit_ms(&slo).expect("a wait limit");
        let truth = REFERENCE
            .capacity_with_overheads(limit, &overheads, target, requests)
            .expect("the SLO can still be met");
        println!(
            "HTTP: loopback and client add {p50:.2} ms to TTFT at the median, {p99:.2} ms at p99 ({} requests at 5 \
             req/s), drawn per request into the truth: true capacity for {requests} requests per probe {truth:.2} req/s",
            overheads.len()
        );
        let mut http = Tally::new(truth);
        let started = Instant::now();
        for repeat in 0..http_repeats {
            let found = find_capacity(
                &store,
                &plan(format!("capacity bench {repeat}"), requests, settings),
                Cancel::never(),
            )
            .await
            .expect("the search ran")
            .remove(0);
            let outcome = found.outcome.expect("the search ended");
            println!("  HTTP search {}: {}", repeat + 1, outcome.describe(settings.axis));
            for p in &found.probes {
                println!(
                    "    probe at {:.2} req/s: {} of {}{}",
                    p.probe.load,
                    p.probe.met,
                    p.probe.requests,
                    if p.probe.past_saturation { " (past saturation)" } else { "" }
                );
            }
            http.add(&outcome, found.probes.len());
        }
        http.print(&format!("HTTP ({:.1} s)", started.elapsed().as_secs_f64()));
        mock.shutdown().await.expect("the mock stopped");
    });
}
