//! Every page a team uses, in headless Chromium at 1400 px and 700 px wide, on a demo app that
//! holds what a team's would: a finished run of four candidates, a second run to compare it
//! with, two versions of an eval set. Each page must fit its width (no horizontal page overflow:
//! wide tables scroll inside their own box), and pass axe-core (vendored from the npm registry,
//! injected into the page) with no serious or critical violation. Screenshots of every page at
//! both widths are saved under target/tmp/page-screenshots/ for review.
use std::time::Duration;

use fantoccini::Client;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};

use crate::browser::{browser_binaries, spawn_demo_app, start_browser, start_driver};
use crate::support::runs::run_to_end_within;

const AXE: &str = include_str!("../vendor/axe-core/axe.min.js");
const WIDTHS: [u32; 2] = [1400, 700];

/// What one page showed at one width that it must not.
#[derive(Debug)]
struct Problem {
    page: String,
    width: u32,
    what: String,
}

/// What the walk keeps alive besides the app: the prefix-caching mock its prompt-cache run used.
struct Seeded {
    pages: Vec<(String, String)>,
    _cache_mock: bakeoff::mock::MockServer,
}

async fn seed(app: &crate::browser::DemoApp) -> Seeded {
    let store = &app.store;
    let evalsets = store.list_evalsets().await.unwrap();
    let triage = evalsets.iter().find(|e| e.name == "support-ticket-triage").unwrap();
    let version = store
        .get_evalset_version(triage.latest_version_id)
        .await
        .unwrap()
        .unwrap();
    // A second version: one case dropped, one added, one changed, so the diff has all three.
    let mut file = version.file.clone();
    file.cases.remove(0);
    let mut added = file.cases[0].clone();
    added.id = format!("{}-copy", added.id);
    file.cases.push(added);
    file.cases[1].tags.push("reviewed".into());
    let second = store.save_evalset_version(&file).await.unwrap();

    let mut candidates = store.list_candidates().await.unwrap();
    candidates.sort_by_key(|c| c.id);
    // A fourth candidate with a long name, as teams name them.
    let fourth = store
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            "steady-32b on the staging cluster behind the gateway",
            &app.mock_url,
            "steady-32b",
        )))
        .await
        .unwrap();
    let mut ids: Vec<i64> = candidates.iter().map(|c| c.id).collect();
    ids.push(fourth);
    let mut runs = Vec::new();
    for (name, concurrency) in [("four candidates", 4), ("four candidates again, c=2", 2)] {
        let run_id = store
            .create_run(&NewRun {
                name: name.into(),
                evalset_version_id: triage.latest_version_id,
                candidate_ids: ids.clone(),
                config: RunConfig {
                    concurrency,
                    warmup_requests: 1,
                    retries: 0,
                    ..RunConfig::default()
                },
            })
            .await
            .unwrap();
        let run = run_to_end_within(store, run_id, Duration::from_secs(120)).await;
        assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
        runs.push(run_id);
    }
    // A concurrency sweep of one candidate at two prompt sizes: its page charts throughput and
    // latency vs load, a curve per size (the second a shade and dash of the candidate's colour).
    let synthetic = bakeoff::engine::endpoint_measure::synthetic_evalset(&[16, 48], 8, 16).unwrap();
    let synthetic = store.save_evalset_version(&synthetic).await.unwrap();
    let sweep = store
        .create_run(&NewRun {
            name: "sweep to c=4".into(),
            evalset_version_id: synthetic,
            candidate_ids: vec![ids[0]],
            config: RunConfig {
                concurrency: 1,
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                load: bakeoff::domain::load::LoadShape::Sweep {
                    max_concurrency: 4,
                    ttft_factor: 2.0,
                    min_gain: 0.05,
                },
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let ended = run_to_end_within(store, sweep, Duration::from_secs(120)).await;
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    // A capacity search (its block on the run page and the scorecard): a few short probes.
    let capacity = store
        .create_run(&NewRun {
            name: "capacity at the SLO".into(),
            evalset_version_id: synthetic,
            candidate_ids: vec![ids[0]],
            config: RunConfig {
                concurrency: 1,
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                requests_per_level: Some(12),
                slo: bakeoff::domain::run::Slo {
                    ttft_ms: Some(500.0),
                    target_attainment: Some(0.9),
                    ..Default::default()
                },
                load: bakeoff::domain::load::LoadShape::FindCapacity {
                    axis: bakeoff::domain::capacity::LoadAxis::Concurrency,
                    start: 2.0,
                    width: 0.5,
                    max_probes: 3,
                    max_load: Some(8.0),
                },
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let ended = run_to_end_within(store, capacity, Duration::from_secs(120)).await;
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    // A run against a server that reports its prompt cache (the prompt-cache block).
    let cache_mock = crate::support::runs::start_mock(bakeoff::mock::MockConfig {
        profiles: vec![bakeoff::mock::ModelProfile {
            ttft_ms: 3.0,
            inter_token_ms: Some(1.0),
            prefix_cache: true,
            prefix_cache_ttl_ms: Some(600_000.0),
            ..bakeoff::mock::ModelProfile::named("cachey")
        }],
        answer_keys: Vec::new(),
        seed: 3,
    })
    .await;
    let cachey = store
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            "cachey",
            cache_mock.base_url(),
            "cachey",
        )))
        .await
        .unwrap();
    let cached = store
        .create_run(&NewRun {
            name: "prompt cache".into(),
            evalset_version_id: synthetic,
            candidate_ids: vec![cachey],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 0,
                retries: 0,
                staged_rollout: false,
                load: bakeoff::domain::load::LoadShape::Levels { levels: vec![2] },
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let ended = run_to_end_within(store, cached, Duration::from_secs(120)).await;
    assert_eq!(ended.status, RunStatus::Finished, "{:?}", ended.error);
    // A stored workload (its own page).
    let workload = bakeoff::domain::workload::generate::SharedPrefixSpec {
        name: "support-chat-prefixes".into(),
        description: String::new(),
        requests: 60,
        per_second: 20.0,
        poisson: true,
        seed: 1,
        system_tokens: 40,
        prefixes: vec![bakeoff::domain::workload::generate::PoolPrefix {
            tokens: 20,
            weight: 1.0,
        }],
        suffix_min: 1,
        suffix_max: 20,
        output_tokens: 6,
        cache_bust: false,
        block_tokens: 16,
    }
    .generate("spec")
    .unwrap();
    let (workload, _) = store.save_workload_version(&workload).await.unwrap();
    // The blocks the walk is there to check are on their pages.
    for (path, css) in [
        (format!("/runs/{capacity}"), "section.capacity"),
        (format!("/runs/{capacity}/scorecard"), "section.capacity"),
        (format!("/runs/{cached}"), "table.levels-cache"),
        (format!("/runs/{cached}/scorecard"), "table.levels-cache"),
        (format!("/workloads/versions/{workload}"), "#chart-arrivals"),
        ("/workloads".to_string(), "form[action=\"/workloads/generate\"]"),
    ] {
        let body = reqwest::get(format!("{}{path}", app.base_url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let page = crate::support::app::Page::parse(200, &body);
        assert!(page.count(css) > 0, "{path} shows no {css}");
    }
    let profile = store.list_threshold_profiles().await.unwrap()[0].id;
    let (run, other) = (runs[0], runs[1]);
    let (candidate, v) = (ids[0], triage.latest_version_id);
    let review = seed_review(store, run, ids[0], ids[1]).await;
    // A schedule (its list, page and editor) and a scorecard saved to the archive.
    let config = RunConfig::default();
    let schedule = bakeoff::app::schedules::save(
        store,
        None,
        &bakeoff::app::schedules::ScheduleRequest {
            name: "nightly triage".into(),
            evalset: triage.id.to_string(),
            evalset_version: "latest".into(),
            candidates: vec![candidate.to_string(), ids[1].to_string()],
            draft: bakeoff::domain::run::RunDraft::from_config(&config),
            load: bakeoff::domain::presets::LoadDraft::from_config(&config),
            cadence: "0 6 * * 1-5".into(),
            time_zone: "Europe/Berlin".into(),
            ..Default::default()
        },
        "test",
    )
    .await
    .unwrap();
    let saved = store
        .save_scorecard(&bakeoff::domain::scorecard::NewScorecard {
            run_id: run,
            profile_id: profile,
            profile_version: 1,
            incumbent: None,
            pipeline: Default::default(),
            created_by: "Ana".into(),
            note: "Monday's decision".into(),
            verdicts: vec![],
        })
        .await
        .unwrap();
    let pages = [
        ("overview", "/".to_string()),
        ("candidates", "/candidates".into()),
        ("candidate-new", "/candidates/new".into()),
        ("candidate", format!("/candidates/{candidate}")),
        ("candidate-edit", format!("/candidates/{candidate}/edit")),
        ("operability", format!("/candidates/{candidate}/operability")),
        ("evalsets", "/evalsets".into()),
        ("evalset-import", "/evalsets/import".into()),
        ("evalset", format!("/evalsets/{v}")),
        ("evalset-diff", format!("/evalsets/{v}/diff/{second}")),
        ("case-new", format!("/evalsets/{v}/cases/new")),
        ("case-edit", format!("/evalsets/{v}/cases/1/edit")),
        ("thresholds", "/thresholds".into()),
        ("threshold-new", "/thresholds/new".into()),
        ("threshold", format!("/thresholds/{profile}")),
        ("threshold-edit", format!("/thresholds/{profile}/edit")),
        ("runs", "/runs".into()),
        ("run-new", "/runs/new".into()),
        ("run", format!("/runs/{run}")),
        ("run-cases", format!("/runs/{run}/cases")),
        ("run-cases-failures", format!("/runs/{run}/cases?failures=on")),
        (
            "run-cases-candidate",
            format!("/runs/{run}/cases?candidate={candidate}&q=a"),
        ),
        // Every attempt opened: the full output, grades, timings and token timeline.
        ("run-cases-expanded", format!("/runs/{run}/cases")),
        ("run-sweep", format!("/runs/{sweep}")),
        ("run-sweep-cases-expanded", format!("/runs/{sweep}/cases")),
        ("scorecard", format!("/runs/{run}/scorecard")),
        ("run-capacity", format!("/runs/{capacity}")),
        ("scorecard-capacity", format!("/runs/{capacity}/scorecard")),
        ("run-prompt-cache", format!("/runs/{cached}")),
        ("scorecard-prompt-cache", format!("/runs/{cached}/scorecard")),
        // The workloads: the list with its upload and generate forms, one workload.
        ("workloads", "/workloads".into()),
        ("workload", format!("/workloads/versions/{workload}")),
        ("scorecard-print", format!("/runs/{run}/scorecard/print")),
        ("archive", "/archive".into()),
        ("compare", format!("/archive/compare?runs={run},{other}")),
        (
            "history",
            format!("/archive/history?candidate={candidate}&evalset={}", triage.id),
        ),
        ("scorecards", "/scorecards".into()),
        ("scorecard-saved", format!("/scorecards/{saved}")),
        ("telemetry", format!("/runs/{run}/telemetry")),
        ("schedules", "/schedules".into()),
        ("schedule-new", "/schedules/new".into()),
        ("schedule", format!("/schedules/{schedule}")),
        ("schedule-edit", format!("/schedules/{schedule}/edit")),
        ("notifications", "/notifications".into()),
        // Human review (issue 50): the queues, labelling one item, the blind comparison and a
        // judge's calibration.
        ("review-queues", "/review".into()),
        ("review-queue", format!("/runs/{run}/review")),
        ("review-item", format!("/review/items/{}?run={run}", review.item)),
        (
            "review-labelled",
            format!("/review/items/{}?run={run}", review.labelled),
        ),
        (
            "review-compare",
            format!("/runs/{run}/review/compare?a={}&b={}", ids[0], ids[1]),
        ),
        ("judge-calibration", format!("/judges/{}/calibration", review.judge)),
        ("audit", "/audit".into()),
        ("workers", "/workers".into()),
        ("how-we-measure", "/measure".into()),
    ]
    .into_iter()
    .map(|(name, path)| (name.to_string(), path))
    .collect();
    Seeded {
        pages,
        _cache_mock: cache_mock,
    }
}

/// What the walk's review pages show: an item to label, one labelled by two people who
/// disagree (with a correction), and a judge that compared the run's first two candidates.
struct ReviewSeed {
    item: i64,
    labelled: i64,
    judge: String,
}

/// Queues two of the run's answers (one labelled twice), and records blind comparisons of the
/// first two candidates by a person and by a judge (both orders), so the review pages show
/// labels, disagreement, win rates and a calibration.
async fn seed_review(store: &bakeoff::store::DynStore, run: i64, a: i64, b: i64) -> ReviewSeed {
    use bakeoff::domain::Timestamp;
    use bakeoff::domain::review::pairwise::{Choice, Preference};
    use bakeoff::domain::review::{LabelBody, NewReviewItem, Reason, Verdict};
    let records = store.list_request_records(run).await.unwrap();
    let answers: Vec<_> = records
        .iter()
        .filter(|r| r.candidate_id == a && !r.is_warmup && r.phase == bakeoff::domain::run::Phase::Quality)
        .take(2)
        .collect();
    let items: Vec<NewReviewItem> = answers
        .iter()
        .map(|r| NewReviewItem {
            run_id: run,
            candidate_id: a,
            case_id: r.case_id.to_string(),
            repetition: r.repetition,
            reasons: vec![Reason::GraderDisagreement, Reason::Manual],
            detail: "exact failed, json-fields passed".into(),
            added_by: "walk".into(),
        })
        .collect();
    store.add_review_items(&items, Timestamp::now()).await.unwrap();
    let queued = store.list_review_items_page(Some(run), 0, 2).await.unwrap();
    let (item, labelled) = (queued[0].id, queued[1].id);
    for (who, verdict, correction) in [
        ("ana", Verdict::Pass, None),
        ("bob", Verdict::Fail, Some("a corrected <b>answer</b>".to_string())),
    ] {
        let body = LabelBody {
            verdict,
            score: None,
            corrected_expected: correction,
            note: "checked by hand".into(),
        };
        store
            .save_review_label(labelled, who, &body, Timestamp::now())
            .await
            .unwrap();
    }
    let judge = "walk-judge".to_string();
    for (i, answer) in records
        .iter()
        .filter(|r| r.candidate_id == a && !r.is_warmup && r.phase == bakeoff::domain::run::Phase::Quality)
        .take(12)
        .enumerate()
    {
        for (left, right, picker, choice) in [
            (
                a,
                b,
                "ana".to_string(),
                if i % 3 == 0 { Choice::Tie } else { Choice::Left },
            ),
            (a, b, format!("judge:{judge}"), Choice::Left),
            (b, a, format!("judge:{judge}"), Choice::Left),
        ] {
            let p = Preference {
                case_id: answer.case_id.to_string(),
                left_candidate: left,
                right_candidate: right,
                choice,
                picker,
                left_chars: 40,
                right_chars: 60,
            };
            store.save_preference(run, &p, Timestamp::now()).await.unwrap();
        }
    }
    ReviewSeed { item, labelled, judge }
}

/// The page's width against its viewport's, and the widest element that sticks out (by its
/// tag, id and class, to say what to fix).
const OVERFLOW: &str = r#"
const doc = document.documentElement;
const width = doc.clientWidth;
let culprit = null;
if (doc.scrollWidth > width + 1) {
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.right > width + 1 && !el.closest('.table-wrap, .scroll-x')) {
      culprit = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
        (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '') +
        ' (right edge ' + Math.round(r.right) + ' px)';
    }
  }
}
// Tables that scroll inside their box (a last resort), and how tall the nav is.
const scrolled = [...document.querySelectorAll('.table-wrap')]
  .filter(w => w.scrollWidth > w.clientWidth + 1)
  .map(w => (w.querySelector('table') || w).className + ' (' + w.scrollWidth + ' px in ' + w.clientWidth + ')');
const nav = document.querySelector('.site-header nav');
// Decisive values (a candidate's verdict or rule cell, a rule's Value, a row's actions) must be
// on screen, not in a box scrolled sideways out of view.
const decisive = [...document.querySelectorAll('[data-decisive]')]
  .filter(e => e.getClientRects().length > 0)
  .filter(e => { const r = e.getBoundingClientRect(); return r.left < -1 || r.right > width + 1; })
  .map(e => (e.getAttribute('data-label') || e.className) + ' (' + Math.round(e.getBoundingClientRect().left) + '–' + Math.round(e.getBoundingClientRect().right) + ' px)');
return [doc.scrollWidth, width, culprit, scrolled, nav ? nav.getBoundingClientRect().height : 0, decisive];
"#;

/// At the wide width, side-by-side tables must fit without scrolling; at the narrow one they may
/// scroll inside their box.
const FITS_AT: u32 = 1400;

const RUN_AXE: &str = r#"
const done = arguments[arguments.length - 1];
axe.run(document, { resultTypes: ['violations'] }).then(r => done(
  r.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => v.impact + ' ' + v.id + ': ' + v.help + ' — ' +
      v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | '))
)).catch(e => done(['axe failed: ' + e]));
"#;

async fn check_page(c: &Client, base: &str, name: &str, path: &str, width: u32, problems: &mut Vec<Problem>) {
    let problem = |what: String| Problem {
        page: format!("{name} ({path})"),
        width,
        what,
    };
    if let Err(e) = c.goto(&format!("{base}{path}")).await {
        problems.push(problem(format!("did not load: {e}")));
        return;
    }
    let status_ok = c
        .execute("return !document.querySelector('article.error-page')", vec![])
        .await
        .map(|v| v.as_bool().unwrap_or(false))
        .unwrap_or(false);
    if !status_ok {
        problems.push(problem("shows an error page".into()));
    }
    if name.ends_with("-expanded") {
        let _ = c
            .execute(
                "document.querySelectorAll('details').forEach(d => d.open = true); return true;",
                vec![],
            )
            .await;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("page-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(dir.join(format!("{name}-{width}.png")), png);
    }
    // Charts and the case grid sit below the first screen: each gets its own screenshot.
    for (part, css) in [
        ("charts", ".run-charts"),
        ("grid", "table.case-grid"),
        ("quality", "section.quality"),
        ("timeline", ".token-timeline"),
    ] {
        let script = format!(
            "const e = document.querySelector('{css}'); if (!e) return false; e.scrollIntoView(); return true;"
        );
        if c.execute(&script, vec![]).await.ok().and_then(|v| v.as_bool()) == Some(true)
            && let Ok(png) = c.screenshot().await
        {
            let _ = std::fs::write(dir.join(format!("{name}-{width}-{part}.png")), png);
        }
    }
    match c.execute(OVERFLOW, vec![]).await {
        Ok(v) => {
            let (scroll, client) = (v[0].as_u64().unwrap_or(0), v[1].as_u64().unwrap_or(0));
            if scroll > client + 1 {
                problems.push(problem(format!(
                    "page is {scroll} px wide in a {client} px viewport; sticking out: {}",
                    v[2].as_str().unwrap_or("?")
                )));
            }
            let scrolled: Vec<&str> = v[3]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str())
                .collect();
            if width >= FITS_AT && !scrolled.is_empty() {
                problems.push(problem(format!("tables scroll sideways: {}", scrolled.join(", "))));
            }
            let outside: Vec<&str> = v[5]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str())
                .collect();
            if !outside.is_empty() {
                problems.push(problem(format!(
                    "decisive values outside the viewport: {}",
                    outside.join(", ")
                )));
            }
            let nav_height = v[4].as_f64().unwrap_or(0.0);
            if nav_height > 80.0 {
                problems.push(problem(format!("the nav wraps ({nav_height:.0} px tall)")));
            }
        }
        Err(e) => problems.push(problem(format!("overflow check failed: {e}"))),
    }
    // axe is injected once per page load (the page's CSP does not apply to WebDriver scripts).
    if let Err(e) = c.execute(&format!("{AXE}\nreturn true;"), vec![]).await {
        problems.push(problem(format!("could not inject axe: {e}")));
        return;
    }
    match c.execute_async(RUN_AXE, vec![]).await {
        Ok(serde_json::Value::Array(violations)) => {
            for v in violations {
                problems.push(problem(v.as_str().unwrap_or_default().to_string()));
            }
        }
        Ok(other) => problems.push(problem(format!("axe answered {other}"))),
        Err(e) => problems.push(problem(format!("axe failed: {e}"))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_browser),
    ignore = "needs chromium and chromedriver on PATH: run scripts/install-browser.sh"
)]
async fn every_page_fits_1400_and_700_px_and_passes_axe() {
    let (chromium, chromedriver) = browser_binaries();
    let app = spawn_demo_app().await;
    let seeded = seed(&app).await;
    let pages = &seeded.pages;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = start_browser(&driver, &chromium, profile.path()).await;
    c.update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
        Some(Duration::from_secs(30)),
        Some(Duration::from_secs(30)),
        Some(Duration::from_secs(0)),
    ))
    .await
    .unwrap();
    load_fields_follow_the_shape(&c, &app.base_url).await;
    let mut problems = Vec::new();
    for width in WIDTHS {
        c.set_window_size(width, 1000).await.unwrap();
        for (name, path) in pages {
            check_page(&c, &app.base_url, name, path, width, &mut problems).await;
        }
    }
    // Accounts mode (a user added): the login page, then signed in as an admin the pages only
    // it has (the account with its tokens, the users) and the overview with the user menu.
    let password = "a long enough password for the walk";
    bakeoff::app::accounts::add_user(
        app.store.as_ref(),
        "test",
        "grace",
        bakeoff::domain::accounts::Role::Admin,
        password,
    )
    .await
    .unwrap();
    for width in WIDTHS {
        c.set_window_size(width, 1000).await.unwrap();
        check_page(&c, &app.base_url, "login", "/login?next=/", width, &mut problems).await;
    }
    c.goto(&format!("{}/login?next=/", app.base_url)).await.unwrap();
    let form = c.form(fantoccini::Locator::Css("#login-form")).await.unwrap();
    form.set_by_name("username", "grace").await.unwrap();
    form.set_by_name("password", password).await.unwrap();
    form.submit().await.unwrap();
    crate::support::wait::until(
        "the login to lead back to the overview",
        Duration::from_secs(20),
        || async { c.current_url().await.unwrap().path() == "/" },
    )
    .await;
    for width in WIDTHS {
        c.set_window_size(width, 1000).await.unwrap();
        for (name, path) in [
            ("overview-signed-in", "/"),
            ("account", "/account"),
            ("users", "/users"),
        ] {
            check_page(&c, &app.base_url, name, path, width, &mut problems).await;
        }
    }
    c.close().await.ok();
    let report: Vec<String> = problems
        .iter()
        .map(|p| format!("{} @ {} px: {}", p.page, p.width, p.what))
        .collect();
    assert!(report.is_empty(), "{} problems:\n{}", report.len(), report.join("\n"));
}

/// The run form shows only the chosen load shape's fields: no sweep maximum or rate for a fixed
/// concurrency; choosing a sweep shows its maximum.
async fn load_fields_follow_the_shape(c: &Client, base: &str) {
    c.goto(&format!("{base}/runs/new")).await.unwrap();
    let shown = |id: &'static str| async move {
        c.find(fantoccini::Locator::Css(id))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap()
    };
    assert!(!shown("#f-levels").await && !shown("#f-sweep_max").await && !shown("#f-rate").await);
    assert!(shown("#f-requests_per_level").await, "fields every shape uses stay");
    c.find(fantoccini::Locator::Css("#f-load_shape option[value='sweep']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(shown("#f-sweep_max").await && !shown("#f-rate").await);
}
