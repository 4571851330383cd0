//! Tool-turn timing at two load levels (issue 45's closing note): the shipped `zh-en-tool-calls`
//! set against the demo mock's `steady-32b` at c=1 and c=16, in one run whose tool mode is
//! `both` (the model natively, then as "… (prompt mode)" at the same levels), timed by the run's
//! own code paths and reduced as the run page's tool table reduces them.
//!
//! `cargo bench --bench tool_turns` (env `BAKEOFF_TOOL_TURNS_REPEATS`, default 3 repetitions of
//! every case per level; `BAKEOFF_TOOL_TURNS_MODEL`, default `steady-32b`)
//!
//! Absolute milliseconds depend on the machine and the mock's set latency, so each figure is
//! also printed as a ratio against a reference measured in the same run: the level's own TTFT
//! p50 (for the first argument piece) and E2E p50 (for the complete call), c=16 against c=1,
//! and prompt mode against native at the same level.
use std::collections::BTreeMap;

use bakeoff::domain::calibers::run_figures;
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{NewRun, RunConfig};
use bakeoff::domain::stability::final_attempts;
use bakeoff::domain::tool_calls::RunToolMode;
use bakeoff::domain::tool_calls::levels::{COMPLETE_CALIBER, FIRST_ARGUMENT_CALIBER, ToolLevel, tool_levels};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::run::executor::execute;

const TOOL_SET: &str = "zh-en-tool-calls";
const LEVELS: [u32; 2] = [1, 16];

/// One (mode, level) row: the tool figures and the level's TTFT and E2E p50 (ms).
struct Row {
    tools: ToolLevel,
    ttft_p50: Option<f64>,
    e2e_p50: Option<f64>,
}

fn ms(v: Option<f64>) -> String {
    v.map_or("—".to_string(), |v| format!("{v:.1} ms"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "—".to_string(),
    }
}

fn share(m: &bakeoff::domain::scorecard::Measurement) -> String {
    m.value.map_or("—".to_string(), |v| format!("{:.1} %", 100.0 * v))
}

fn main() {
    let repeats: u32 = std::env::var("BAKEOFF_TOOL_TURNS_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let model = std::env::var("BAKEOFF_TOOL_TURNS_MODEL").unwrap_or_else(|_| "steady-32b".to_string());
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
        let mock = bakeoff::app::demo::start_mock(listener).await.expect("the demo mock");
        bakeoff::app::demo::bootstrap(store.as_ref(), Some(&mock.base_url()))
            .await
            .expect("the demo data");
        let version = store
            .list_evalsets()
            .await
            .expect("the eval sets")
            .into_iter()
            .find(|s| s.name == TOOL_SET)
            .expect("the tool set ships")
            .latest_version_id;
        let candidate = store
            .list_candidates()
            .await
            .expect("the candidates")
            .into_iter()
            .find(|c| c.spec.model == model)
            .unwrap_or_else(|| panic!("no demo candidate serves {model:?}"));
        let config = RunConfig {
            load: LoadShape::Levels {
                levels: LEVELS.to_vec(),
            },
            repetitions: repeats,
            warmup_requests: 2,
            staged_rollout: false,
            stream: true,
            tool_mode: RunToolMode::Both,
            ..RunConfig::default()
        };
        let run = bakeoff::app::runs::with_prompt_mode_variants(
            &store,
            NewRun {
                name: "tool-turn timing".into(),
                evalset_version_id: version,
                candidate_ids: vec![candidate.id],
                config,
            },
        )
        .await
        .expect("the prompt-mode variant");
        let run_id = store.create_run(&run).await.expect("the run stored");
        execute(store.clone(), run_id, Cancel::never())
            .await
            .expect("the run ran");
        let stored = store.get_run(run_id).await.expect("the run").expect("the run");
        let records = store.list_request_records(run_id).await.expect("the records");
        let names: BTreeMap<i64, String> = store
            .run_candidates(run_id)
            .await
            .expect("the run's candidates")
            .into_iter()
            .map(|c| (c.id, c.spec.name))
            .collect();
        // (candidate, level) -> row, candidates in the run's order.
        let mut rows: Vec<(i64, Vec<Row>)> = Vec::new();
        for &id in &stored.candidate_ids {
            let figures = run_figures(&records, &stored.config, id, |_| None);
            let levels = tool_levels(&final_attempts(&records, id))
                .into_iter()
                .map(|tools| {
                    let speed = figures.levels.iter().find(|l| {
                        matches!(l.load, bakeoff::domain::load::Load::Concurrency { concurrency } if concurrency == tools.concurrency)
                    });
                    Row {
                        ttft_p50: speed.and_then(|l| l.ttft_ms.as_ref()).map(|d| d.p50),
                        e2e_p50: speed.and_then(|l| l.e2e_ms.as_ref()).map(|d| d.p50),
                        tools,
                    }
                })
                .collect();
            rows.push((id, levels));
        }
        println!(
            "tool-turn timing, run #{run_id}: {TOOL_SET} on {model}, levels c={:?}, {repeats} repetitions, tool mode both",
            LEVELS
        );
        println!("first argument piece = {FIRST_ARGUMENT_CALIBER}");
        println!("complete call = {COMPLETE_CALIBER}\n");
        for (id, levels) in &rows {
            println!("{}:", names.get(id).map_or("?", String::as_str));
            for r in levels {
                let t = &r.tools;
                println!(
                    "  c={:<2} answers {:>3} · accuracy {} · malformed {} · first argument p50 {} p95 {} ({} of TTFT p50 {}) · \
                     complete call p50 {} p95 {} ({} of E2E p50 {})",
                    t.concurrency,
                    t.answers,
                    share(&t.accuracy),
                    share(&t.malformed),
                    ms(t.first_argument.p50_ms),
                    ms(t.first_argument.p95_ms),
                    ratio(t.first_argument.p50_ms, r.ttft_p50),
                    ms(r.ttft_p50),
                    ms(t.complete.p50_ms),
                    ms(t.complete.p95_ms),
                    ratio(t.complete.p50_ms, r.e2e_p50),
                    ms(r.e2e_p50),
                );
            }
            if let [low, high] = levels.as_slice() {
                println!(
                    "  c={} against c={}: first argument p50 {}, complete call p50 {}",
                    high.tools.concurrency,
                    low.tools.concurrency,
                    ratio(high.tools.first_argument.p50_ms, low.tools.first_argument.p50_ms),
                    ratio(high.tools.complete.p50_ms, low.tools.complete.p50_ms),
                );
            }
        }
        if let [(_, native), (_, prompt)] = rows.as_slice() {
            for (n, p) in native.iter().zip(prompt) {
                println!(
                    "prompt mode against native at c={}: first argument p50 {}, complete call p50 {}",
                    n.tools.concurrency,
                    ratio(p.tools.first_argument.p50_ms, n.tools.first_argument.p50_ms),
                    ratio(p.tools.complete.p50_ms, n.tools.complete.p50_ms),
                );
            }
        }
        mock.shutdown().await.expect("the mock stopped");
    });
}
