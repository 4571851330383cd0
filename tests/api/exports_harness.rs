//! Scorecard exports (JSON, CSV, Markdown, print) carry the harness's "speed figures
//! unreliable" flag and its reasons when the run was flagged, say "reliable" when it was not,
//! and stay silent when the run has no harness report; on SQLite and PostgreSQL.
use bakeoff::domain::calibers::HarnessReport;

use crate::support::app::{Page, harness_report, spawn_app_on};
use crate::support::db::{TestStore, each_backend};

const REASON: &str = "p99 client queue wait 31.0 ms exceeds 10 ms: bakeoff could not keep the asked concurrency";

fn harness(unreliable: bool) -> HarnessReport {
    harness_report(unreliable, 31.0)
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

each_backend!(every_scorecard_export_carries_the_harness_flag_and_its_reasons);
async fn every_scorecard_export_carries_the_harness_flag_and_its_reasons(db: TestStore) {
    let app = spawn_app_on(db).await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None)
        .await
        .expect("profiles");
    let b = app.backend;
    let flagged = app.finished_run("flagged", Some(&harness(true))).await;
    let fine = app.finished_run("fine", Some(&harness(false))).await;
    let none = app.finished_run("none", None).await;

    // JSON: a harness object, and the warning on every speed row and no other.
    let doc: serde_json::Value =
        serde_json::from_str(&app.text_ok(&format!("/runs/{flagged}/scorecard/export.json")).await).unwrap();
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
        serde_json::from_str(&app.text_ok(&format!("/runs/{fine}/scorecard/export.json")).await).unwrap();
    assert_eq!(doc["harness"]["speed_figures_reliable"], true, "{b}");
    assert!(
        doc["rows"].as_array().unwrap().iter().all(|r| r["warning"].is_null()),
        "{b}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&app.text_ok(&format!("/runs/{none}/scorecard/export.json")).await).unwrap();
    assert!(doc["harness"].is_null(), "{b}: no report, no claim either way");

    // CSV: a harness line, and the speed rows' reason starts with the flag.
    let csv = csv_lines(&app.text_ok(&format!("/runs/{flagged}/scorecard/export.csv")).await);
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
    let csv = csv_lines(&app.text_ok(&format!("/runs/{fine}/scorecard/export.csv")).await);
    let line = csv.iter().find(|l| l[0] == "harness").expect("a harness line");
    assert_eq!(line[13], "reliable", "{b}");
    assert!(csv.iter().all(|l| !l[16].contains("UNRELIABLE")), "{b}");
    let csv = csv_lines(&app.text_ok(&format!("/runs/{none}/scorecard/export.csv")).await);
    assert!(csv.iter().all(|l| l[0] != "harness"), "{b}");

    // Markdown: a banner under the title and a row in the speed section.
    let md = app.text_ok(&format!("/runs/{flagged}/scorecard/export.md")).await;
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
    let md = app.text_ok(&format!("/runs/{fine}/scorecard/export.md")).await;
    assert!(!md.contains("UNRELIABLE"), "{b}");

    // Print: the banner above the verdicts and the speed section's warning.
    let print = Page::parse(200, &app.text_ok(&format!("/runs/{flagged}/scorecard/print")).await);
    let w = print.text(".speed-warning");
    assert!(w.contains("UNRELIABLE") && w.contains(REASON), "{b}: {w}");
    let w = print.text(".section-throughput .section-warning");
    assert!(w.contains(REASON), "{b}: {w}");
    let print = Page::parse(200, &app.text_ok(&format!("/runs/{fine}/scorecard/print")).await);
    assert_eq!(
        print.count(".speed-warning") + print.count(".section-warning"),
        0,
        "{b}"
    );
}
