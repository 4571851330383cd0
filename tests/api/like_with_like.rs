//! Compare and history only like with like (issue 14 item 7), on runs measured against the mock:
//! a sweep beside a c=4 run is compared at c=4 only and the other levels are named as not
//! compared; a streamed run beside a non-streamed one has no speed marks and says why; the
//! history of one candidate under two sets of conditions draws two labelled series.
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};

use crate::support::app::{Page, TestApp, spawn_app};
use crate::support::runs::{run_to_end, start_mock};

async fn mock() -> MockServer {
    start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 5.0,
            inter_token_ms: Some(1.0),
            ..ModelProfile::named("quick")
        }],
        answer_keys: Vec::new(),
        seed: 7,
    })
    .await
}

fn config(levels: Vec<u32>, stream: bool) -> RunConfig {
    RunConfig {
        concurrency: 1,
        repetitions: 1,
        warmup_requests: 0,
        max_tokens: Some(12),
        temperature: Some(0.0),
        timeout_secs: 30,
        retries: 0,
        stream,
        load: LoadShape::Levels { levels },
        staged_rollout: false,
        requests_per_level: Some(8),
        ..RunConfig::default()
    }
}

/// A finished run of the candidate on the version under `config`.
async fn measured(app: &TestApp, version: i64, candidate: i64, config: RunConfig) -> i64 {
    let run = app
        .store
        .create_run(&NewRun {
            name: "like with like".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config,
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(&app.store, run).await, RunStatus::Finished);
    run
}

/// The compare page's cell of `entry` (0-based column) in the figure row `label`:
/// (text, data-compared, data-mark).
fn cell(page: &Page, label: &str, entry: usize) -> (String, Option<String>, Option<String>) {
    let rows = page.select(&format!("tr[data-figure=\"{label}\"]"));
    let row = rows.first().unwrap_or_else(|| panic!("a row {label}"));
    let td = row
        .select(&scraper::Selector::parse("td").unwrap())
        .nth(entry)
        .unwrap_or_else(|| panic!("{label}: column {entry}"));
    (
        crate::support::app::text_of(&td),
        td.value().attr("data-compared").map(str::to_string),
        td.value().attr("data-mark").map(str::to_string),
    )
}

async fn setup() -> (TestApp, MockServer, i64, i64) {
    let app = spawn_app().await;
    let mock = mock().await;
    let file = synthetic_evalset(&[16], 8, 12).unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let candidate = app
        .store
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            "alpha",
            mock.base_url(),
            "quick",
        )))
        .await
        .unwrap();
    (app, mock, version, candidate)
}

#[tokio::test]
async fn a_sweep_beside_a_c4_run_is_compared_at_c4_only() {
    let (app, _mock, version, alpha) = setup().await;
    let sweep = measured(&app, version, alpha, config(vec![1, 2, 4], true)).await;
    let fixed = measured(&app, version, alpha, config(vec![4], true)).await;

    let page = app.get_html(&format!("/archive/compare?runs={sweep},{fixed}")).await;
    assert_eq!(page.status, 200);
    // The conditions of each column, the load marked as differing from the baseline's.
    let load = page.texts("tr[data-condition=load] td");
    assert_eq!(load[0], "3 levels: c=1, c=2, c=4");
    assert!(load[1].starts_with("c=4"), "{load:?}");
    assert_eq!(page.count("tr[data-condition=load] td[data-differs]"), 1);
    for name in [
        "caliber",
        "prompts",
        "max tokens",
        "streaming",
        "eval-set version",
        "profile version",
    ] {
        // A condition every column shares is said once, folded under the table (issue 54).
        assert_eq!(page.count(&format!("tr[data-condition=\"{name}\"]")), 0, "{name}");
        assert_eq!(
            page.count(&format!(".same-conditions [data-condition=\"{name}\"]")),
            1,
            "{name}"
        );
    }
    assert_eq!(page.texts(".same-conditions [data-condition=streaming] dd"), ["on"]);
    // c=4 is compared; c=1 and c=2 are not, and carry no mark.
    for label in ["TTFT p50 @c=4", "E2E p50 @c=4", "aggregate tok/s @c=4 (steady window)"] {
        let (text, compared, _) = cell(&page, label, 1);
        assert_eq!(compared.as_deref(), Some("yes"), "{label}: {text}");
        assert_eq!(cell(&page, label, 0).1.as_deref(), Some("baseline"));
    }
    for c in [1, 2] {
        for label in [format!("TTFT p50 @c={c}"), format!("decode tok/s/stream p50 @c={c}")] {
            let (text, compared, mark) = cell(&page, &label, 1);
            assert_eq!(compared.as_deref(), Some("no"), "{label}");
            assert_eq!(mark, None, "{label}");
            assert!(text.starts_with('—'), "{label}: {text}");
        }
    }
    // The pooled failure rate of three levels is not set beside one level's.
    assert_eq!(cell(&page, "failure rate", 1).1.as_deref(), Some("no"));
    let notes = page.texts(&format!("ul.not-compared li[data-entry=\"{fixed}:{alpha}\"]"));
    assert!(
        notes.iter().any(|n| n.contains("failure rate not compared")),
        "{notes:?}"
    );
    // Against the c=4 run as baseline, the sweep's other levels are named as not compared.
    let rebased = app
        .get_html(&format!(
            "/archive/compare?runs={sweep},{fixed}&baseline={fixed}:{alpha}"
        ))
        .await;
    let notes = rebased.texts(&format!("ul.not-compared li[data-entry=\"{sweep}:{alpha}\"]"));
    assert!(
        notes.iter().any(|n| n.contains("c=1, c=2 not compared")
            && n.contains(&format!(
                "the baseline (#{fixed} alpha) was not measured at these levels"
            ))),
        "{notes:?}"
    );
    assert_eq!(cell(&rebased, "TTFT p50 @c=4", 0).1.as_deref(), Some("yes"));
    assert_eq!(cell(&rebased, "TTFT p50 @c=1", 0).1.as_deref(), Some("no"));
    // No mark anywhere outside a compared cell.
    assert_eq!(
        rebased.count("td[data-mark=better]:not([data-compared=yes])")
            + rebased.count("td[data-mark=worse]:not([data-compared=yes])"),
        0
    );
}

#[tokio::test]
async fn a_streamed_run_beside_a_non_streamed_one_has_no_speed_marks() {
    let (app, _mock, version, alpha) = setup().await;
    let streamed = measured(&app, version, alpha, config(vec![4], true)).await;
    let whole = measured(&app, version, alpha, config(vec![4], false)).await;

    let page = app.get_html(&format!("/archive/compare?runs={streamed},{whole}")).await;
    assert_eq!(page.texts("tr[data-condition=streaming] td")[1], "off differs");
    assert_eq!(page.count("tr[data-condition=streaming] td[data-differs]"), 1);
    for label in [
        "TTFT p50 @c=4",
        "E2E p50 @c=4",
        "decode tok/s/stream p50 @c=4",
        "aggregate tok/s @c=4 (steady window)",
        "aggregate tok/s @c=4 (whole run)",
        "failure rate",
    ] {
        let (_, compared, mark) = cell(&page, label, 1);
        assert_eq!(compared.as_deref(), Some("no"), "{label}");
        assert_eq!(mark, None, "{label}");
    }
    // Answers do not depend on streaming: accuracy stays comparable.
    assert_eq!(cell(&page, "accuracy", 1).1.as_deref(), Some("yes"));
    let notes = page.texts(&format!("ul.not-compared li[data-entry=\"{whole}:{alpha}\"]"));
    assert!(
        notes
            .iter()
            .any(|n| n.contains("speed figures and failure rate not compared at any level: streaming: on vs off")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn history_draws_one_series_per_set_of_conditions() {
    let (app, _mock, version, alpha) = setup().await;
    let first = measured(&app, version, alpha, config(vec![4], true)).await;
    let whole = measured(&app, version, alpha, config(vec![4], false)).await;
    let again = measured(&app, version, alpha, config(vec![4], true)).await;
    let evalset = app
        .store
        .get_evalset_version(version)
        .await
        .unwrap()
        .unwrap()
        .evalset_id;

    let page = app
        .get_html(&format!("/archive/history?candidate={alpha}&evalset={evalset}"))
        .await;
    assert_eq!(page.status, 200);
    let series = page.texts("ol.series li");
    assert_eq!(series.len(), 2, "{series:?}");
    assert!(
        series[0].contains("series 1 (2 runs)") && series[0].contains("streaming on"),
        "{series:?}"
    );
    assert!(
        series[1].contains("series 2 (1 run)") && series[1].contains("streaming off"),
        "{series:?}"
    );
    let series_of = |run: i64| page.text(&format!("tr[data-run='{run}'] td[data-series]"));
    assert_eq!(
        [series_of(first), series_of(whole), series_of(again)],
        ["1", "2", "1"].map(String::from)
    );
    // Each run is set against the previous run of its own series only.
    let flags = |run: i64| page.texts(&format!("tr[data-run='{run}'] [data-flag]"));
    assert!(
        flags(whole)
            .iter()
            .any(|f| f == &format!("not compared with #{first}: streaming: on vs off")),
        "{:?}",
        flags(whole)
    );
    assert!(
        flags(again)
            .iter()
            .any(|f| f == &format!("not compared with #{whole}: streaming: off vs on")),
        "{:?}",
        flags(again)
    );
    // One line per series in the TTFT chart: two colours.
    let svg = page
        .select("#chart-ttft svg")
        .first()
        .map(|e| e.html())
        .expect("a TTFT chart");
    for colour in ["#0072B2", "#D55E00"] {
        assert!(svg.to_ascii_uppercase().contains(colour), "{colour} in the chart");
    }
}
