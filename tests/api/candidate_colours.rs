//! One colour per candidate on every page (issue 54): a candidate's colour follows the candidate
//! (`domain::palette`), not its place in a run, so two runs listing the same candidates in
//! different orders draw each in the same colour on the run page, the scorecard and compare —
//! in the server's SVG charts (each point's mark names its colour), the charts' tables the
//! interactive charts are drawn from, and the chips beside the names.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bakeoff::domain::palette::CandidateColours;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::mock::{MockConfig, ModelProfile};

use crate::support::app::{Page, TestApp, spawn_app_on};
use crate::support::db::{TestStore, each_backend};

const NAMES: [&str; 3] = ["alpha-one", "beta-two", "gamma-three"];

fn fast(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 3.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named(name)
    }
}

/// The colour of every candidate named in `page`'s SVG point marks (`circle.point-title`), by
/// name: one entry per colour seen, so a candidate drawn in two colours shows two.
fn svg_colours(page: &Page) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for mark in page.select("circle.point-title[data-colour]") {
        let label = mark.value().attr("aria-label").unwrap_or_default();
        let colour = mark.value().attr("data-colour").unwrap_or_default().to_string();
        for name in NAMES.iter().filter(|n| label.contains(**n)) {
            out.entry(name.to_string()).or_default().insert(colour.clone());
        }
    }
    out
}

/// `attr` of the elements matching `css` (each naming a candidate in `name_attr`), by name.
fn attr_colours(page: &Page, css: &str, name_attr: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in page.select(css) {
        let name = e.value().attr(name_attr).unwrap_or_default().to_string();
        let colour = e.value().attr("data-colour").unwrap_or_default().to_string();
        out.entry(name).or_default().insert(colour);
    }
    out
}

async fn finished_run(app: &TestApp, version: i64, ids: &[i64], name: &str) -> i64 {
    let run = app
        .store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: ids.to_vec(),
            config: RunConfig {
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                repetitions: 2,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let ended = crate::support::runs::run_to_end_within(&app.store, run, Duration::from_secs(60)).await;
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    run
}

each_backend!(a_candidate_has_one_colour_on_the_run_page_the_scorecard_and_compare);
async fn a_candidate_has_one_colour_on_the_run_page_the_scorecard_and_compare(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None)
        .await
        .expect("profiles");
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: NAMES.iter().map(|n| fast(&format!("{n}-model"))).collect(),
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await;
    let version = app.create_evalset().await;
    let mut ids = Vec::new();
    for name in NAMES {
        ids.push(app.create_candidate(name, &mock.base_url()).await);
    }
    let expected = CandidateColours::of(ids.iter().copied());
    let want: BTreeMap<String, BTreeSet<String>> = NAMES
        .iter()
        .zip(&ids)
        .map(|(n, id)| (n.to_string(), BTreeSet::from([expected.hex(*id).to_string()])))
        .collect();
    let distinct: BTreeSet<&str> = ids.iter().map(|id| expected.hex(*id)).collect();
    assert_eq!(distinct.len(), 3, "{b}: three candidates, three colours");
    // The same candidates, listed in two orders.
    let first = finished_run(&app, version, &ids, "in order").await;
    let second = finished_run(&app, version, &[ids[2], ids[0], ids[1]], "reordered").await;

    for run in [first, second] {
        let (page, body) = app.page(&format!("/runs/{run}")).await;
        if std::env::var("UI54_DUMP").is_ok() {
            std::fs::write(format!("/tmp/ui54-run-{run}.html"), &body).unwrap();
        }
        assert_eq!(
            attr_colours(&page, "table.over-time tbody tr[data-colour]", "data-candidate"),
            want,
            "{b}: run #{run}'s over-time table"
        );
        assert_eq!(svg_colours(&page), want, "{b}: run #{run}'s charts");
        let chips = attr_colours(&page, ".verdict-chip[data-colour]", "data-candidate");
        assert!(
            chips.iter().all(|(name, c)| want.get(name) == Some(c)),
            "{b}: run #{run}'s verdict chips: {chips:?}"
        );

        let (card, _) = app.page(&format!("/runs/{run}/scorecard")).await;
        assert_eq!(svg_colours(&card), want, "{b}: run #{run}'s scorecard charts");
        assert_eq!(
            attr_colours(&card, "table.chart-data tbody tr[data-colour]", "data-series"),
            want,
            "{b}: the tables the interactive charts are drawn from"
        );
        let cards: BTreeMap<String, BTreeSet<String>> =
            attr_colours(&card, "article.verdict-card[data-colour]", "data-candidate")
                .into_iter()
                .map(|(id, c)| {
                    let i = ids
                        .iter()
                        .position(|x| x.to_string() == id)
                        .expect("a candidate's card");
                    (NAMES[i].to_string(), c)
                })
                .collect();
        assert_eq!(cards, want, "{b}: run #{run}'s verdict cards");
    }
    let (compare, _) = app.page(&format!("/archive/compare?runs={first},{second}")).await;
    assert_eq!(
        attr_colours(&compare, "th[data-group][data-colour]", "data-group"),
        want,
        "{b}: compare's candidate groups"
    );
    mock.shutdown().await.unwrap();
}

/// In Chromium: each candidate's colour on the interactive scorecard charts (uPlot's legend) is
/// the one its table row names, the same for both runs whatever their candidate order; hovering
/// a point of the accuracy chart shows the figure exactly as the chart's table words it; clicking
/// a name in the legend hides that candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_browser),
    ignore = "needs chromium and chromedriver on PATH: run scripts/install-browser.sh"
)]
async fn in_the_browser_colours_hold_and_scorecard_charts_hover_as_their_tables_say() {
    use crate::browser::{browser_binaries, spawn_demo_app, start_browser, start_driver};
    use fantoccini::actions::{InputSource, MouseActions, PointerAction};
    let (chromium, chromedriver) = browser_binaries();
    let app = spawn_demo_app().await;
    let store = &app.store;
    let set = store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.name == "support-ticket-triage")
        .unwrap();
    let mut ids: Vec<i64> = store.list_candidates().await.unwrap().iter().map(|c| c.id).collect();
    ids.sort_unstable();
    let mut reversed = ids.clone();
    reversed.reverse();
    let mut runs = Vec::new();
    for (name, order) in [("in order", &ids), ("reversed", &reversed)] {
        let run = store
            .create_run(&NewRun {
                name: name.into(),
                evalset_version_id: set.latest_version_id,
                candidate_ids: order.clone(),
                config: RunConfig {
                    concurrency: 2,
                    warmup_requests: 0,
                    retries: 0,
                    case_limit: Some(8),
                    ..RunConfig::default()
                },
            })
            .await
            .unwrap();
        let ended = crate::support::runs::run_to_end_within(store, run, Duration::from_secs(120)).await;
        assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
        runs.push(run);
    }
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = start_browser(&driver, &chromium, profile.path()).await;
    c.set_window_size(1400, 1000).await.unwrap();
    let mut legends = Vec::new();
    for run in &runs {
        c.goto(&format!("{}/runs/{run}/scorecard", app.base_url)).await.unwrap();
        // uPlot draws once the deferred scripts ran: wait for it (bounded).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let on = c
                .execute(
                    "return !!document.querySelector('#chart-accuracy[data-interactive=on] .uplot-holder');",
                    vec![],
                )
                .await
                .unwrap();
            if on == true {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the accuracy chart never became interactive"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Each legend entry's marker colour against its table row's.
        let seen = c
            .execute(
                "const fig = document.querySelector('#chart-accuracy');
                 const rgb = h => 'rgb(' + [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16)).join(', ') + ')';
                 const rows = [...document.querySelectorAll('table.chart-data[data-chart=chart-accuracy] tbody tr')];
                 const out = {};
                 [...fig.querySelectorAll('.u-legend .u-series')].slice(1).forEach(s => {
                   const name = s.querySelector('.u-label').textContent.trim();
                   const row = rows.find(r => r.getAttribute('data-series') === name);
                   out[name] = { legend: getComputedStyle(s.querySelector('.u-marker')).borderColor,
                                 table: row ? rgb(row.getAttribute('data-colour')) : null };
                 });
                 return out;",
                vec![],
            )
            .await
            .unwrap();
        let seen = seen.as_object().expect("legend entries").clone();
        assert_eq!(seen.len(), ids.len(), "a legend entry per candidate: {seen:?}");
        for (name, v) in &seen {
            assert_eq!(v["legend"], v["table"], "{name} on run #{run}'s scorecard: {v}");
        }
        legends.push(seen);
    }
    assert_eq!(
        legends[0], legends[1],
        "the same colours whatever the run's candidate order"
    );

    // A real pointer hover over the first point: the legend shows its table row's words.
    let at = c
        .execute(
            "const fig = document.querySelector('#chart-accuracy');
             const u = fig.querySelector('.uplot-holder').uplot;
             const row = document.querySelector('table.chart-data[data-chart=chart-accuracy] tbody tr');
             const x = parseFloat(row.getAttribute('data-x')), y = parseFloat(row.getAttribute('data-y'));
             fig.scrollIntoView({ block: 'center' });
             const box = u.over.getBoundingClientRect();
             const k = [...fig.querySelectorAll('.u-legend .u-series')].slice(1)
               .findIndex(s => s.querySelector('.u-label').textContent.trim() === row.getAttribute('data-series'));
             return { x: box.left + u.valToPos(x, 'x'), y: box.top + u.valToPos(y, 'y'), k,
               table: row.querySelector('[data-figure]').textContent.trim() + ' at ' + row.querySelector('td').textContent.trim() };",
            vec![],
        )
        .await
        .unwrap();
    let mouse = MouseActions::new("mouse".into()).then(PointerAction::MoveTo {
        duration: None,
        x: at["x"].as_f64().unwrap().round(),
        y: at["y"].as_f64().unwrap().round(),
    });
    c.perform_actions(mouse).await.unwrap();
    let k = at["k"].as_u64().expect("the row's candidate is in the legend") as usize;
    let shown = c
        .execute(
            "const s = [...document.querySelectorAll('#chart-accuracy .u-legend .u-series')][arguments[0] + 1];
             const value = s.querySelector('.u-value').textContent;
             s.querySelector('.u-label').click();
             const u = document.querySelector('#chart-accuracy .uplot-holder').uplot;
             return { value, hidden: !u.series[arguments[0] + 1].show,
               svg: !!document.querySelector('#chart-accuracy a.chart-svg-download[download]') };",
            vec![serde_json::json!(k)],
        )
        .await
        .unwrap();
    assert_eq!(
        shown["value"], at["table"],
        "hovering shows the table's figure: {shown} vs {at}"
    );
    assert_eq!(shown["hidden"], true, "a legend click hides the candidate");
    assert_eq!(shown["svg"], true, "the SVG stays downloadable");
    c.close().await.ok();
}

// ------------------------------------------------------------------ the estimate's speeds

each_backend!(the_estimate_times_a_run_by_the_latest_finished_runs_measured_speed);
/// The run form's estimate times a candidate by its latest finished run's measured speeds
/// (issue 54: the "upper bound" was 2.4× low when it rested on a claim), and says so; before any
/// run it rests on the claim, and says that.
async fn the_estimate_times_a_run_by_the_latest_finished_runs_measured_speed(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![fast("alpha-one-model")],
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await;
    let version = app.create_evalset().await;
    let alpha = app.create_candidate("alpha-one", &mock.base_url()).await;
    let mut spec = app.store.get_candidate(alpha).await.unwrap().unwrap().spec;
    spec.claimed = Some(bakeoff::domain::candidate::ClaimedFigure {
        tokens_per_second: 2158.0,
        caliber: "per-stream decode".into(),
        conditions: None,
    });
    app.store
        .update_candidate(&crate::support::checked::admin_change(app.store.as_ref(), alpha, &spec).await)
        .await
        .unwrap();
    let query = format!(
        "/runs/estimate?evalset_version={version}&candidate={alpha}&concurrency=1&repetitions=1\
         &warmup_requests=0&timeout_secs=60&retries=0&load_shape=fixed&stream=on"
    );
    let before = app.get_html(&query).await;
    let said = before.text("#estimate [data-estimate=speed]");
    assert!(said.contains("claimed 2158 tok/s"), "{b}: {said}");

    let run = finished_run(&app, version, &[alpha], "measured").await;
    let after = app.get_html(&query).await;
    let said = after.text("#estimate [data-estimate=speed]");
    assert!(
        said.starts_with(&format!("time from run #{run}'s measured speed")),
        "{b}: {said}"
    );
    // The figures it names are the run's own (its history shows the same decode p50).
    let stored = app.store.get_run(run).await.unwrap().unwrap();
    let figures = bakeoff::app::pages::figures::run_figures(
        &app.store,
        &app.state.views.figures,
        &stored,
        &bakeoff::app::runs::RunVersion::of(&stored),
        &bakeoff::app::runs::RunRecords::of(run),
    )
    .await
    .unwrap();
    let decode = figures[0].decode_p50_tok_s.expect("a streamed run measures decode");
    assert!(
        said.contains(&format!(
            "decode {} tok/s/stream",
            bakeoff::domain::format::significant_trimmed(decode)
        )),
        "{b}: {said} (decode p50 {decode})"
    );
    mock.shutdown().await.unwrap();
}
