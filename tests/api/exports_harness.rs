//! Scorecard exports (JSON, CSV, Markdown, print) carry the harness's "speed figures
//! unreliable" flag and its reasons when the run was flagged, say "reliable" when it was not,
//! and stay silent when the run has no harness report; on SQLite and PostgreSQL.
use bakeoff::domain::calibers::HarnessReport;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::Distribution;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::engine::Runner;
use bakeoff::store::DynStore;
use bakeoff::web::{AppState, build_app};

use crate::support::app::{Page, TINY_EVALSET, record};
use crate::support::db::{TestStore, each_store};

const REASON: &str = "p99 client queue wait 31.0 ms exceeds 10 ms: bakeoff could not keep the asked concurrency";

struct App {
    base_url: String,
    store: DynStore,
    backend: &'static str,
    server: tokio::task::JoinHandle<()>,
    _db: TestStore,
}

impl Drop for App {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl App {
    async fn on(db: TestStore) -> App {
        let store = db.store.clone();
        bakeoff::demo::bootstrap(store.as_ref(), None).await.expect("profiles");
        let state = AppState {
            store: store.clone(),
            runner: Runner::new(store.clone()),
            demo_mock_url: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the app");
        let addr = listener.local_addr().expect("the app's address");
        let app = build_app(state);
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serving the app");
        });
        App {
            base_url: format!("http://{addr}"),
            store,
            backend: db.backend,
            server,
            _db: db,
        }
    }

    async fn get(&self, path: &str) -> String {
        let r = reqwest::get(format!("{}{path}", self.base_url))
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = r.status().as_u16();
        let body = r.text().await.expect("a body");
        assert_eq!(status, 200, "{} GET {path}: {body}", self.backend);
        body
    }

    /// A finished run with three graded records and the given harness report.
    async fn finished_run(&self, name: &str, report: Option<&HarnessReport>) -> i64 {
        let file = EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap();
        let version = self.store.save_evalset_version(&file).await.unwrap();
        let spec = CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            model: "alpha-model".into(),
            ..Default::default()
        }
        .validate(None)
        .expect("a valid candidate");
        let alpha = self.store.create_candidate(&spec).await.unwrap();
        let run = self
            .store
            .create_run(&NewRun {
                name: format!("exports {name}"),
                evalset_version_id: version,
                candidate_ids: vec![alpha],
                config: RunConfig::default(),
            })
            .await
            .unwrap();
        let records = vec![
            record(run, alpha, "c1", "positive", true),
            record(run, alpha, "c2", "negative", true),
            record(run, alpha, "c3", "positive", false),
        ];
        self.store.append_request_records(&records).await.unwrap();
        if let Some(h) = report {
            self.store.set_run_harness(run, h).await.unwrap();
        }
        self.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
        run
    }
}

fn harness(unreliable: bool) -> HarnessReport {
    let dist = |p50: f64, p99: f64| Distribution {
        n: 40,
        min: p50 / 2.0,
        p50,
        p90: p99 * 0.8,
        p95: p99 * 0.9,
        p99,
        max: p99 * 2.0,
        mean: p50,
        cv: Some(0.5),
    };
    HarnessReport {
        bakeoff_version: "9.9.9-test".into(),
        host: "bench-host".into(),
        cores: 8,
        wall_s: 12.0,
        cpu_s: Some(1.5),
        cpu_share: Some(1.5 / 96.0),
        streamed_tokens: 60_000,
        cpu_s_per_million_tokens: Some(25.0),
        open_loop: false,
        schedule_lag_ms: None,
        client_queue_ms: Some(if unreliable { dist(3.0, 31.0) } else { dist(0.2, 0.9) }),
        runtime_lag_ms: Some(dist(0.4, 1.2)),
        lag_bound_ms: 10.0,
        unreliable,
        reasons: if unreliable { vec![REASON.into()] } else { Vec::new() },
    }
}

/// The CSV's lines as fields (no field of these runs holds a line break).
fn csv_lines(body: &str) -> Vec<Vec<String>> {
    body.split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|line| {
            // Minimal RFC 4180 split: enough for quoted fields with commas and doubled quotes.
            let mut fields = vec![String::new()];
            let mut quoted = false;
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, quoted) {
                    ('"', true) if chars.peek() == Some(&'"') => {
                        chars.next();
                        fields.last_mut().unwrap().push('"');
                    }
                    ('"', _) => quoted = !quoted,
                    (',', false) => fields.push(String::new()),
                    (c, _) => fields.last_mut().unwrap().push(c),
                }
            }
            fields
        })
        .collect()
}

#[tokio::test]
async fn every_scorecard_export_carries_the_harness_flag_and_its_reasons() {
    for db in each_store().await {
        let app = App::on(db).await;
        let b = app.backend;
        let flagged = app.finished_run("flagged", Some(&harness(true))).await;
        let fine = app.finished_run("fine", Some(&harness(false))).await;
        let none = app.finished_run("none", None).await;

        // JSON: a harness object, and the warning on every speed row and no other.
        let doc: serde_json::Value =
            serde_json::from_str(&app.get(&format!("/runs/{flagged}/scorecard/export.json")).await).unwrap();
        assert_eq!(
            doc["harness"]["speed_figures_reliable"], false,
            "{b}: {}",
            doc["harness"]
        );
        assert_eq!(doc["harness"]["reasons"][0], REASON, "{b}");
        assert_eq!(doc["harness"]["report"]["host"], "bench-host", "{b}");
        let rows = doc["rows"].as_array().expect("rows");
        let speed: Vec<&serde_json::Value> = rows.iter().filter(|r| r["dimension"] == "throughput").collect();
        assert!(!speed.is_empty(), "{b}: the default profile has speed rules");
        for r in &speed {
            let w = r["warning"]
                .as_str()
                .unwrap_or_else(|| panic!("{b}: speed row without warning: {r}"));
            assert!(w.contains(REASON), "{b}: {w}");
        }
        assert!(
            rows.iter()
                .filter(|r| r["dimension"] != "throughput")
                .all(|r| r["warning"].is_null()),
            "{b}: only speed rows are flagged"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&app.get(&format!("/runs/{fine}/scorecard/export.json")).await).unwrap();
        assert_eq!(doc["harness"]["speed_figures_reliable"], true, "{b}");
        assert!(
            doc["rows"].as_array().unwrap().iter().all(|r| r["warning"].is_null()),
            "{b}"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&app.get(&format!("/runs/{none}/scorecard/export.json")).await).unwrap();
        assert!(doc["harness"].is_null(), "{b}: no report, no claim either way");

        // CSV: a harness line, and the speed rows' reason starts with the flag.
        let csv = csv_lines(&app.get(&format!("/runs/{flagged}/scorecard/export.csv")).await);
        assert!(
            csv.iter().all(|l| l.len() == 17),
            "{b}: every line has the header's 17 fields"
        );
        let line = csv.iter().find(|l| l[0] == "harness").expect("a harness line");
        assert_eq!(
            (line[1].as_str(), line[13].as_str()),
            ("speed_figures", "unreliable"),
            "{b}"
        );
        assert!(line[16].contains(REASON), "{b}: {}", line[16]);
        let speed_rows: Vec<&Vec<String>> = csv.iter().filter(|l| l[0] == "throughput").collect();
        assert!(!speed_rows.is_empty(), "{b}");
        assert!(
            speed_rows
                .iter()
                .all(|l| l[16].starts_with("UNRELIABLE speed figure (harness: ") && l[16].contains(REASON)),
            "{b}: {speed_rows:?}"
        );
        assert!(
            csv.iter()
                .filter(|l| l[0] == "quality")
                .all(|l| !l[16].contains("UNRELIABLE")),
            "{b}: quality rows are not flagged"
        );
        let csv = csv_lines(&app.get(&format!("/runs/{fine}/scorecard/export.csv")).await);
        let line = csv.iter().find(|l| l[0] == "harness").expect("a harness line");
        assert_eq!(line[13], "reliable", "{b}");
        assert!(csv.iter().all(|l| !l[16].contains("UNRELIABLE")), "{b}");
        let csv = csv_lines(&app.get(&format!("/runs/{none}/scorecard/export.csv")).await);
        assert!(csv.iter().all(|l| l[0] != "harness"), "{b}");

        // Markdown: a banner under the title and a row in the speed section.
        let md = app.get(&format!("/runs/{flagged}/scorecard/export.md")).await;
        let banner = md
            .lines()
            .find(|l| l.starts_with("> **UNRELIABLE speed figures.**"))
            .unwrap_or_else(|| panic!("{b}: no banner in\n{md}"));
        assert!(banner.contains(REASON), "{b}: {banner}");
        assert!(
            md.find("> **UNRELIABLE").unwrap() < md.find("## Verdicts").unwrap(),
            "{b}: the banner comes before the verdicts"
        );
        let speed_section = md
            .split("\n## ")
            .find(|s| s.starts_with("Throughput and latency"))
            .unwrap_or_else(|| panic!("{b}: no speed section in\n{md}"));
        assert!(speed_section.contains("| **UNRELIABLE**: "), "{b}: {speed_section}");
        let quality = md.split("\n## ").find(|s| s.starts_with("Quality")).unwrap_or_default();
        assert!(!quality.contains("UNRELIABLE"), "{b}");
        let md = app.get(&format!("/runs/{fine}/scorecard/export.md")).await;
        assert!(!md.contains("UNRELIABLE"), "{b}");

        // Print: the banner above the verdicts and the speed section's warning.
        let print = Page::parse(200, &app.get(&format!("/runs/{flagged}/scorecard/print")).await);
        let w = print.text(".speed-warning");
        assert!(w.contains("UNRELIABLE") && w.contains(REASON), "{b}: {w}");
        let w = print.text(".section-throughput .section-warning");
        assert!(w.contains(REASON), "{b}: {w}");
        let print = Page::parse(200, &app.get(&format!("/runs/{fine}/scorecard/print")).await);
        assert_eq!(
            print.count(".speed-warning") + print.count(".section-warning"),
            0,
            "{b}"
        );
    }
}
