//! The demo path in a real headless Chromium (Debian's `chromium` + `chromium-driver`, installed
//! by scripts/install-browser.sh): open the app, add a candidate, start a run, watch it finish
//! without reloading, read its table and its reports (harness, quality with a confusion matrix
//! and per-grader pass rates), then reach the run in the archive through the nav. Ignored, with
//! the reason, where build.rs found no Chromium; under BAKEOFF_TEST_REQUIRE_ALL (CI) it always
//! runs, and a missing browser fails it.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use bakeoff::engine::run::Runner;
use bakeoff::web::security::Security;
use bakeoff::web::{AppState, build_app};

/// The app as `bakeoff serve --demo` starts it: a fresh SQLite file, the mock in-process, the
/// shipped eval sets and demo candidates, served on a free loopback port.
pub(crate) struct DemoApp {
    pub(crate) base_url: String,
    pub(crate) mock_url: String,
    pub(crate) store: bakeoff::store::DynStore,
    _mock: bakeoff::mock::MockServer,
    _dir: tempfile::TempDir,
}

pub(crate) async fn spawn_demo_app() -> DemoApp {
    let dir = tempfile::tempdir().unwrap();
    let store = bakeoff::store::connect(&format!("sqlite://{}", dir.path().join("bakeoff.db").display()))
        .await
        .unwrap();
    let mock_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::app::demo::start_mock(mock_listener).await.unwrap();
    let mock_url = mock.base_url();
    bakeoff::app::demo::bootstrap(store.as_ref(), Some(&mock_url))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let state = AppState {
        app: bakeoff::app::state::App::new(store.clone(), Runner::new(store.clone())),
        demo_mock_url: Some(mock_url.as_str().into()),
        security: std::sync::Arc::new(Security::for_loopback(listener.local_addr().unwrap())),
    };
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, build_app(state)).await });
    DemoApp {
        base_url,
        mock_url,
        store,
        _mock: mock,
        _dir: dir,
    }
}

fn find_binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// chromedriver on a free loopback port, killed on drop.
pub(crate) struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn start_driver(chromedriver: &PathBuf) -> Driver {
    // chromedriver cannot take a listener, so pick a free port and poll /status (bounded).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = reqwest::get(format!("{}/status", driver.url)).await
            && r.status().is_success()
        {
            return driver;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer on {} within 20 s",
            driver.url
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn start_browser(driver: &Driver, chromium: &PathBuf, profile_dir: &std::path::Path) -> Client {
    let caps = serde_json::json!({
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,1000",
                format!("--user-data-dir={}", profile_dir.display()),
            ]
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    ClientBuilder::native()
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("start headless chromium")
}

/// Chromium and chromedriver from PATH; panics with what to install when either is missing
/// (the test runs without them only when asked to run ignored tests, or under
/// BAKEOFF_TEST_REQUIRE_ALL).
pub(crate) fn browser_binaries() -> (PathBuf, PathBuf) {
    let chromium = find_binary(&["chromium", "chromium-browser", "google-chrome"]);
    let driver = find_binary(&["chromedriver"]);
    match (chromium, driver) {
        (Some(c), Some(d)) => (c, d),
        _ => panic!("this test needs chromium and chromedriver on PATH: run scripts/install-browser.sh"),
    }
}

pub(crate) async fn screenshot(client: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(png) = client.screenshot().await {
        let _ = std::fs::write(dir.join(format!("{name}.png")), png);
    }
}

/// What the browser showed when a journey failed: a screenshot under target/tmp, and the URL and
/// the start of the page's text for the test's message (CI keeps the log, not the screenshot).
pub(crate) async fn failure_report(client: &Client, name: &str) -> String {
    screenshot(client, name).await;
    let url = client.current_url().await.map(|u| u.to_string()).unwrap_or_default();
    let text = match client.find(Locator::Css("body")).await {
        Ok(body) => body.text().await.unwrap_or_default(),
        Err(e) => format!("(no body: {e})"),
    };
    let text: String = text.chars().take(1500).collect();
    format!("the browser was at {url}, showing:\n{text}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_browser),
    ignore = "needs chromium and chromedriver on PATH: run scripts/install-browser.sh"
)]
async fn demo_path_add_candidate_start_run_see_table() {
    let (chromium, chromedriver) = browser_binaries();
    let app = spawn_demo_app().await;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = start_browser(&driver, &chromium, profile.path()).await;
    let result = walk_demo_path(&c, &app.base_url, &app.mock_url).await;
    let report = match &result {
        Err(_) => failure_report(&c, "failure").await,
        Ok(()) => String::new(),
    };
    c.close().await.ok();
    if let Err(e) = result {
        panic!("{e}\n{report}");
    }
}

/// The element once it appears (bounded: 45 s — a page that needs a server round trip can take
/// that long while the rest of the suite, a llama server included, holds both cores).
pub(crate) async fn wait_for(
    c: &Client,
    locator: Locator<'_>,
) -> Result<fantoccini::elements::Element, fantoccini::error::CmdError> {
    c.wait().at_most(Duration::from_secs(45)).for_element(locator).await
}

async fn walk_demo_path(c: &Client, base: &str, mock_url: &str) -> Result<(), Box<dyn std::error::Error>> {
    // Overview, then the nav to Candidates.
    c.goto(base).await?;
    assert!(c.title().await?.contains("bakeoff"));
    c.find(Locator::LinkText("Candidates")).await?.click().await?;
    assert!(c.current_url().await?.path().starts_with("/candidates"));

    // A bad submission shows a message and stores nothing.
    c.goto(&format!("{base}/candidates/new")).await?;
    let form = c.form(Locator::Css("form[method=post]")).await?;
    form.set_by_name("name", "")
        .await?
        .set_by_name("base_url", "not a url")
        .await?
        .submit()
        .await?;
    // Wait for the re-rendered form (a submit does not wait for the next page).
    let invalid = wait_for(c, Locator::Css("[aria-invalid=true]")).await?;
    assert_eq!(
        invalid.attr("name").await?.as_deref(),
        Some("name"),
        "first invalid field"
    );
    assert!(
        c.source().await?.contains("is required"),
        "no message for the empty name"
    );

    // Add a real candidate pointing at the demo mock.
    c.goto(&format!("{base}/candidates/new")).await?;
    let form = c.form(Locator::Css("form[method=post]")).await?;
    form.set_by_name("name", "browser-steady").await?;
    form.set_by_name("base_url", mock_url).await?;
    form.set_by_name("model", "steady-32b").await?;
    form.submit().await?;
    wait_for(c, Locator::XPath("//*[contains(text(), 'browser-steady')]")).await?;
    c.goto(&format!("{base}/candidates")).await?;
    assert!(c.source().await?.contains("browser-steady"));

    // Start a run of a shipped eval set over the new candidate and one demo candidate: the
    // labelled ticket set (its `label` grader draws a confusion matrix), its first 24 cases.
    c.goto(&format!("{base}/runs/new")).await?;
    let chosen = c
        .execute(
            "const s = document.querySelector('#f-evalset_version');
             const o = [...s.options].find(o => o.text.startsWith('zh-en-support-tickets'));
             s.value = o.value; return o.value;",
            vec![],
        )
        .await?;
    assert!(
        chosen.as_str().is_some_and(|v| !v.is_empty()),
        "no labelled set: {chosen}"
    );
    for label in ["browser-steady", "Demo · swift-7b (fast, sloppy)"] {
        let xpath = format!("//label[contains(normalize-space(.), '{label}')]//input[@type='checkbox']");
        c.find(Locator::XPath(&xpath)).await?.click().await?;
    }
    let form = c.form(Locator::Css("form[method=post]")).await?;
    form.set_by_name("concurrency", "4").await?;
    form.set_by_name("warmup_requests", "1").await?;
    form.set_by_name("case_limit", "24").await?;
    form.submit().await?;
    wait_for(c, Locator::Css("[data-run-status]")).await?;
    assert!(
        c.current_url().await?.path().starts_with("/runs/"),
        "not redirected to the run page"
    );
    screenshot(c, "run-started").await;

    // The page updates itself (htmx) until the run is finished: no reload here. Read the DOM in
    // one script call so a fragment swapped in between two WebDriver calls cannot go stale.
    let deadline = Instant::now() + Duration::from_secs(90);
    let status_js =
        "const e = document.querySelector('[data-run-status]'); return e && e.getAttribute('data-run-status');";
    loop {
        let status = c.execute(status_js, vec![]).await?;
        let status = status.as_str().unwrap_or_default().to_string();
        if status == "finished" {
            break;
        }
        assert!(
            !matches!(status.as_str(), "failed" | "cancelled"),
            "run ended {status:?}"
        );
        assert!(
            Instant::now() < deadline,
            "run did not finish within 90 s (status {status:?})"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_for(c, Locator::Css("table.results")).await?;
    let text = c
        .execute("return document.querySelector('table.results').innerText;", vec![])
        .await?;
    let text = text.as_str().unwrap_or_default().to_string();
    for needle in [
        "aggregate tok/s",
        "TTFT",
        "accuracy",
        "failure",
        "browser-steady",
        "swift-7b",
    ] {
        assert!(
            text.to_lowercase().contains(&needle.to_lowercase()),
            "results table lacks {needle:?}:\n{text}"
        );
    }
    // Requests really succeeded: TTFT p50 is a number in every column, not "—" (not measured).
    let cells = c
        .execute(
            "return [...document.querySelectorAll('table.results tr')]
                .filter(r => (r.querySelector('th')?.innerText || '').includes('TTFT p50'))
                .flatMap(r => [...r.querySelectorAll('td')].map(td => td.innerText));",
            vec![],
        )
        .await?;
    let cells: Vec<String> = serde_json::from_value(cells)?;
    assert_eq!(cells.len(), 2, "one TTFT p50 cell per candidate: {cells:?}");
    for text in cells {
        assert!(
            text.chars().any(|ch| ch.is_ascii_digit()),
            "TTFT p50 not measured: {text:?}"
        );
    }
    screenshot(c, "run-finished").await;
    let run_path = c.current_url().await?.path().to_string();
    check_reports(c).await?;
    check_archive(c, &run_path).await?;
    Ok(())
}

/// The run page's reports render visibly: the harness report (once opened) with its verdict, per candidate
/// the quality report with per-grader pass rates and a confusion matrix.
async fn check_reports(c: &Client) -> Result<(), Box<dyn std::error::Error>> {
    // How it was measured is folded under the results: the reader opens the harness report —
    // unless the harness flagged its own figures, when it is open already (a click would fold it).
    let details = c.find(Locator::Css("details.harness-details")).await?;
    if details.attr("open").await?.is_none() {
        c.find(Locator::Css("details.harness-details > summary"))
            .await?
            .click()
            .await?;
    }
    // One script call: what a reader sees (rendered boxes, their text), read at one moment.
    let seen = c
        .execute(
            "const shown = e => !!e && e.getClientRects().length > 0 && e.offsetHeight > 0;
             const h = document.querySelector('section.harness');
             const verdict = document.querySelector('[data-harness=verdict]');
             const cands = [...document.querySelectorAll('section.quality .quality-candidate')];
             return {
               harness: shown(h) ? h.querySelector('h2').innerText : null,
               verdict: shown(verdict) ? verdict.innerText : null,
               reliable: document.querySelector('section.harness [data-speed-reliable]')?.getAttribute('data-speed-reliable'),
               candidates: cands.map(q => ({
                 name: q.getAttribute('data-candidate'),
                 grader: shown(q.querySelector('table.graders tr[data-grader=label] .pass-rate'))
                   ? q.querySelector('table.graders tr[data-grader=label] .pass-rate').innerText : null,
                 matrix_rows: shown(q.querySelector('table.confusion'))
                   ? q.querySelectorAll('table.confusion tbody tr').length : 0,
                 diagonal: [...q.querySelectorAll('table.confusion td.diagonal')]
                   .reduce((n, td) => n + (parseInt(td.innerText, 10) || 0), 0),
               })),
             };",
            vec![],
        )
        .await?;
    assert_eq!(seen["harness"], "Harness report", "harness section not shown: {seen}");
    assert!(
        seen["verdict"].as_str().is_some_and(|v| !v.is_empty()),
        "no harness verdict: {seen}"
    );
    assert!(
        matches!(seen["reliable"].as_str(), Some("true" | "false")),
        "the harness says whether speed figures hold: {seen}"
    );
    let candidates = seen["candidates"].as_array().cloned().unwrap_or_default();
    assert_eq!(candidates.len(), 2, "a quality report per candidate: {seen}");
    for q in &candidates {
        let rate = q["grader"].as_str().unwrap_or_default();
        assert!(rate.ends_with('%'), "label pass rate shown as a percentage: {q}");
        assert!(
            q["matrix_rows"].as_u64().unwrap_or(0) >= 2,
            "confusion matrix drawn: {q}"
        );
        assert!(q["diagonal"].as_u64().unwrap_or(0) > 0, "some answers are right: {q}");
    }
    screenshot(c, "run-reports").await;
    Ok(())
}

/// The nav's Archive link leads to the archive, which lists the finished run.
async fn check_archive(c: &Client, run_path: &str) -> Result<(), Box<dyn std::error::Error>> {
    c.find(Locator::Css("nav a[href='/archive']")).await?.click().await?;
    wait_for(c, Locator::Css("#archive-count")).await?;
    assert_eq!(c.current_url().await?.path(), "/archive");
    let run_id = run_path.trim_start_matches("/runs/");
    let row = wait_for(c, Locator::Css(&format!("tr[data-run='{run_id}']"))).await?;
    let text = row.text().await?;
    assert!(text.contains("finished"), "archive row: {text}");
    row.find(Locator::Css(&format!("a[href='{run_path}']")))
        .await?
        .click()
        .await?;
    wait_for(c, Locator::Css("section.harness")).await?;
    assert_eq!(
        c.current_url().await?.path(),
        run_path,
        "the archive links back to the run"
    );
    Ok(())
}
