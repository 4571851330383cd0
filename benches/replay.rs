//! Replay's send lag (issue 48's figure): a 10-minute, 100 req/s Poisson trace replayed at 2×
//! (5 minutes, 60,000 requests) against the built-in mock in this process, its lag measured two
//! ways — bakeoff's own (sent − due) and the mock's kernel receipt time − due — and every
//! request's lengths checked. The figure to hold: p99 ≤ 1 ms on an idle machine.
//!
//! `cargo bench --bench replay` (the whole trace) or `cargo bench --bench replay -- --quick`
//! (20 seconds of it). Receipts are matched to requests by order of arrival: requests sent
//! microseconds apart may swap, moving a lag by less than their gap.
use std::sync::Arc;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::metrics::Distribution;
use bakeoff::domain::workload::generate::{PoolPrefix, SharedPrefixSpec};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::replay::{ReplayOptions, replay};
use bakeoff::mock::{MockConfig, ModelProfile};

const RATE: f64 = 100.0;
const SPEED: f64 = 2.0;

fn show(what: &str, d: &Option<Distribution>) {
    match d {
        Some(d) => println!(
            "{what:<32} p50 {:>8.3} ms   p99 {:>8.3} ms   max {:>8.3} ms   (n = {})",
            d.p50, d.p99, d.max, d.n
        ),
        None => println!("{what:<32} nothing measured"),
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let seconds = if quick { 20.0 } else { 600.0 };
    let requests = (RATE * seconds) as u32;
    let workload = SharedPrefixSpec {
        name: "bench".into(),
        description: String::new(),
        requests,
        per_second: RATE,
        poisson: true,
        seed: 48,
        system_tokens: 64,
        prefixes: vec![
            PoolPrefix {
                tokens: 32,
                weight: 3.0,
            },
            PoolPrefix {
                tokens: 96,
                weight: 1.0,
            },
        ],
        suffix_min: 8,
        suffix_max: 64,
        output_tokens: 4,
        cache_bust: false,
        block_tokens: 32,
    }
    .generate("bench")
    .expect("a valid spec");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let profile = ModelProfile {
            ttft_ms: 1.0,
            inter_token_ms: Some(1.0),
            ..ModelProfile::named("bench")
        };
        let mock = bakeoff::mock::spawn_with_log(
            MockConfig {
                profiles: vec![profile],
                ..MockConfig::default()
            },
            listener,
            requests as usize + 100,
        )
        .await
        .unwrap();
        let spec = CandidateSpec::openai_chat("bench", mock.base_url(), "bench");
        let options = ReplayOptions {
            speed: SPEED,
            seed: 1,
            exact_output: true,
            ..ReplayOptions::default()
        };
        println!("replaying {requests} requests ({seconds} s at {RATE} req/s, Poisson) at {SPEED}× against the mock…");
        let reports = replay(&[spec], Arc::new(workload.clone()), &options, Cancel::never())
            .await
            .expect("replay");
        let r = &reports[0];
        let f = &r.fidelity;
        let failed = r.sent.iter().filter(|s| s.failure.is_some()).count();
        println!(
            "sent {}/{}, {failed} failed; input exact {}, max_tokens exact {}, output received exact {}",
            f.sent, f.requests, f.input_exact, f.output_exact, f.output_received_exact
        );
        show("send lag (bakeoff: sent − due)", &f.lag_ms);
        // Where the worst lags were: a burst (the machine) or one place (the harness).
        let mut worst: Vec<(i64, usize)> = r
            .sent
            .iter()
            .map(|s| (s.sent_unix_us - s.due_unix_us, s.index))
            .collect();
        worst.sort_unstable_by(|a, b| b.cmp(a));
        let shown: Vec<String> = worst
            .iter()
            .take(8)
            .map(|(lag, i)| format!("#{i} {:.1} ms", *lag as f64 / 1000.0))
            .collect();
        println!("worst sends: {}", shown.join(", "));
        let page: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut received: Vec<f64> = page["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|q| q["received_unix_ms"].as_f64())
            .collect();
        received.sort_by(f64::total_cmp);
        let mut due: Vec<f64> = r.sent.iter().map(|s| s.due_unix_us as f64 / 1000.0).collect();
        due.sort_by(f64::total_cmp);
        if received.len() == due.len() {
            show(
                "send lag (mock receipt − due)",
                &Distribution::of(received.iter().zip(&due).map(|(got, due)| got - due)),
            );
        } else {
            println!("the mock logged {} requests of {}", received.len(), due.len());
        }
        mock.shutdown().await.unwrap();
    });
}
