//! The app on a random loopback port with a fresh SQLite store (or one store of `each_store`),
//! plus domain helpers for tests.
//!
//! `spawn_app()` binds 127.0.0.1:0 first and hands the listener to the server task, so the app
//! is reachable as soon as the function returns: no sleeping, no retry loops.
use axum::Router;
use bakeoff::app::state::App;
use bakeoff::domain::Timestamp;
use bakeoff::domain::calibers::HarnessReport;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::Distribution;
use bakeoff::domain::run::{NewRun, RequestRecord, RunConfig, RunStatus, TokenSource};
use bakeoff::engine::run::Runner;
use bakeoff::store::DynStore;
use bakeoff::web::security::Security;
use bakeoff::web::{AppState, build_app};

use super::db::{TempDirGuard, TestStore, sqlite_store};

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub base_url: String,
    /// Does not follow redirects, so tests can see the 303s.
    pub client: reqwest::Client,
    pub store: DynStore,
    pub state: AppState,
    /// "sqlite" or "postgres", for assertion messages.
    pub backend: &'static str,
    server: tokio::task::JoinHandle<()>,
    _db: DbGuard,
}

/// Keeps the app's database alive as long as the app.
enum DbGuard {
    Dir(#[allow(dead_code)] TempDirGuard),
    Store(#[allow(dead_code)] TestStore),
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A parsed page, to query with CSS selectors.
pub struct Page {
    pub status: u16,
    pub html: scraper::Html,
}

impl Page {
    pub fn parse(status: u16, body: &str) -> Page {
        Page {
            status,
            html: scraper::Html::parse_document(body),
        }
    }

    fn selector(css: &str) -> scraper::Selector {
        scraper::Selector::parse(css).unwrap_or_else(|e| panic!("bad selector {css:?}: {e}"))
    }

    /// Every element matching `css`.
    pub fn select<'a>(&'a self, css: &str) -> Vec<scraper::ElementRef<'a>> {
        self.html.select(&Self::selector(css)).collect()
    }

    /// The text of every element matching `css`, whitespace-collapsed.
    pub fn texts(&self, css: &str) -> Vec<String> {
        self.select(css).into_iter().map(|e| text_of(&e)).collect()
    }

    /// The text of the one element matching `css`; panics if there is not exactly one.
    pub fn text(&self, css: &str) -> String {
        let all = self.texts(css);
        assert_eq!(
            all.len(),
            1,
            "expected one element for {css:?}, found {}: {all:?}",
            all.len()
        );
        all.into_iter().next().unwrap_or_default()
    }

    pub fn count(&self, css: &str) -> usize {
        self.select(css).len()
    }

    /// An attribute of the one element matching `css`.
    pub fn attr(&self, css: &str, name: &str) -> Option<String> {
        let all = self.select(css);
        assert_eq!(all.len(), 1, "expected one element for {css:?}, found {}", all.len());
        all[0].value().attr(name).map(str::to_string)
    }

    /// The page title.
    pub fn title(&self) -> String {
        self.text("title")
    }
}

/// An element's text with whitespace collapsed.
pub fn text_of(e: &scraper::ElementRef<'_>) -> String {
    e.text()
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The app as `bakeoff serve` builds it, over a fresh SQLite store (no demo mock).
pub async fn spawn_app() -> TestApp {
    spawn_app_with(None).await
}

/// Same, with `demo_mock_url` set (as `--demo` does).
pub async fn spawn_app_with(demo_mock_url: Option<&str>) -> TestApp {
    let (store, db) = sqlite_store().await;
    serve(store, demo_mock_url, "sqlite", DbGuard::Dir(db)).await
}

/// The app over one store of `each_store()` (SQLite or PostgreSQL), no demo mock.
pub async fn spawn_app_on(db: TestStore) -> TestApp {
    let (store, backend) = (db.store.clone(), db.backend);
    serve(store, None, backend, DbGuard::Store(db)).await
}

async fn serve(store: DynStore, demo_mock_url: Option<&str>, backend: &'static str, db: DbGuard) -> TestApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the test app to a free port");
    let addr = listener.local_addr().expect("the test app's address");
    let state = AppState {
        app: App::new(store.clone(), Runner::new(store.clone())),
        demo_mock_url: demo_mock_url.map(Into::into),
        security: std::sync::Arc::new(Security::for_loopback(addr)),
    };
    let app = build_app(state.clone());
    let server = tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, app).await.expect("serving the test app");
    });
    // The client holds what a browser holds after loading a page: its cookie and CSRF token.
    let (cookie, token) = state.security.browser_credentials();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::COOKIE, cookie.parse().expect("a cookie header"));
    headers.insert("x-csrf-token", token.parse().expect("a token header"));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .expect("building the test HTTP client");
    TestApp {
        addr,
        base_url: format!("http://{addr}"),
        client,
        store,
        state,
        backend,
        server,
        _db: db,
    }
}

/// A client holding what a browser holds after loading a page of the server at `base_url`: its
/// browser cookie, and the CSRF token the page carries (for servers started as a process).
pub async fn browser_client(base_url: &str) -> reqwest::Client {
    let plain = reqwest::Client::new();
    let r = plain
        .get(format!("{base_url}/measure"))
        .send()
        .await
        .expect("GET /measure");
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("bakeoff_browser="))
        .and_then(|v| v.split(';').next())
        .expect("the server sets its browser cookie")
        .to_string();
    let page = Page::parse(200, &r.text().await.expect("the page"));
    let token = page
        .attr("body", "hx-headers")
        .and_then(|h| serde_json::from_str::<serde_json::Value>(&h).ok())
        .and_then(|v| v["X-CSRF-Token"].as_str().map(str::to_string))
        .expect("the page carries a CSRF token");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::COOKIE, cookie.parse().expect("a cookie header"));
    headers.insert("x-csrf-token", token.parse().expect("a token header"));
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .expect("building the test HTTP client")
}

/// A client holding session `secret`'s cookie for the server at `base_url` and the CSRF token
/// of a page it loads.
pub async fn session_client_at(base_url: &str, secret: &str) -> reqwest::Client {
    let cookie = format!("bakeoff_session={secret}");
    let page = reqwest::Client::new()
        .get(format!("{base_url}/measure"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("GET /measure");
    assert_eq!(page.status(), 200, "a logged-in page");
    let page = Page::parse(200, &page.text().await.expect("the page"));
    let token = page
        .attr("body", "hx-headers")
        .and_then(|h| serde_json::from_str::<serde_json::Value>(&h).ok())
        .and_then(|v| v["X-CSRF-Token"].as_str().map(str::to_string))
        .expect("the page carries a CSRF token");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::COOKIE, cookie.parse().expect("a cookie header"));
    headers.insert("x-csrf-token", token.parse().expect("a token header"));
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .expect("building the test HTTP client")
}

/// A small eval set: three classification cases with the exact grader.
pub const TINY_EVALSET: &str = r#"{"bakeoff_evalset":1,"name":"tiny","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":16}
{"id":"c1","vars":{"text":"great"},"expected":"positive","tags":["en"]}
{"id":"c2","vars":{"text":"awful"},"expected":"negative"}
{"id":"c3","vars":{"text":"meh <b>bold</b>"},"expected":"neutral"}
"#;

impl TestApp {
    /// Creates a user (through the app layer, audited as the terminal would) with a password
    /// it returns.
    pub async fn add_user(&self, name: &str, role: bakeoff::domain::accounts::Role) -> String {
        let password = format!("password of {name} 12345");
        bakeoff::app::accounts::add_user(self.store.as_ref(), "test", name, role, &password)
            .await
            .unwrap_or_else(|e| panic!("adding user {name}: {e}"));
        password
    }

    /// Logs in through `/login` as a browser does and returns a client holding the session
    /// cookie and the CSRF token its pages carry, with the session secret.
    pub async fn login(&self, name: &str, password: &str) -> (reqwest::Client, String) {
        let r = self
            .post_form("/login", &[("username", name), ("password", password), ("next", "/")])
            .await;
        assert_eq!(r.status(), 303, "logging in as {name}");
        let secret = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("bakeoff_session="))
            .and_then(|v| v.split(';').next())
            .expect("login sets the session cookie")
            .to_string();
        (self.session_client(&secret).await, secret)
    }

    /// A client holding session `secret`'s cookie and the CSRF token of a page it loads.
    pub async fn session_client(&self, secret: &str) -> reqwest::Client {
        session_client_at(&self.base_url, secret).await
    }

    /// The database URL of an app opened with `spawn_app_on` (None for `spawn_app`'s own file).
    pub fn db_url(&self) -> Option<String> {
        match &self._db {
            DbGuard::Store(s) => Some(s.url.clone()),
            DbGuard::Dir(_) => None,
        }
    }

    /// Runs raw SQL on the database of an app opened with `spawn_app_on` (to poke below the trait).
    pub async fn execute_raw(&self, sql: &str) -> u64 {
        match &self._db {
            DbGuard::Store(s) => s.execute_raw(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")),
            DbGuard::Dir(_) => panic!("raw SQL needs an app opened with spawn_app_on"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// The router for in-process tests (`tower::ServiceExt::oneshot`), over the same state.
    pub fn router(&self) -> Router {
        build_app(self.state.clone())
    }

    /// The headers a browser that loaded one of our pages sends with a form (cookie, CSRF
    /// token), for in-process requests.
    pub fn browser_headers(&self) -> [(&'static str, String); 2] {
        let (cookie, token) = self.state.security.browser_credentials();
        [("cookie", cookie), ("x-csrf-token", token)]
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// GET what must answer 200 (the failure names the backend and shows the body); returns the body.
    pub async fn text_ok(&self, path: &str) -> String {
        let r = self.get(path).await;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_else(|e| panic!("GET {path} body: {e}"));
        assert_eq!(status, 200, "{} GET {path}: {body}", self.backend);
        body
    }

    /// GET a page that must answer 200; returns it parsed and as text.
    pub async fn page(&self, path: &str) -> (Page, String) {
        let body = self.text_ok(path).await;
        (Page::parse(200, &body), body)
    }

    /// GET a page and parse it (any status).
    pub async fn get_html(&self, path: &str) -> Page {
        let r = self.get(path).await;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_else(|e| panic!("GET {path} body: {e}"));
        Page::parse(status, &body)
    }

    /// POST a urlencoded form; returns the raw response (redirects are not followed).
    pub async fn post_form(&self, path: &str, fields: &[(&str, &str)]) -> reqwest::Response {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        self.client
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// POST a form and parse the page it returns (e.g. a form re-shown with errors).
    pub async fn post_form_html(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let r = self.post_form(path, fields).await;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_else(|e| panic!("POST {path} body: {e}"));
        Page::parse(status, &body)
    }

    /// Creates a candidate through the store (not the form); returns its id.
    pub async fn create_candidate(&self, name: &str, base_url: &str) -> i64 {
        let spec = CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: base_url.into(),
            model: format!("{name}-model"),
            ..Default::default()
        }
        .validate(None)
        .expect("a valid test candidate");
        self.store
            .create_candidate(&crate::support::checked::admin_new(&spec))
            .await
            .expect("storing a test candidate")
    }

    pub async fn candidate_count(&self) -> usize {
        self.store.list_candidates().await.expect("listing candidates").len()
    }

    pub async fn run_count(&self) -> i64 {
        self.store.count_runs().await.expect("counting runs")
    }

    /// Stores [`TINY_EVALSET`]; returns the version id.
    pub async fn create_evalset(&self) -> i64 {
        let file = EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).expect("the tiny eval set parses");
        self.store
            .save_evalset_version(&file)
            .await
            .expect("storing the tiny eval set")
    }

    /// Stores a run directly (the runner is not started); returns its id.
    pub async fn create_run(&self, name: &str, version_id: i64, candidate_ids: &[i64]) -> i64 {
        self.store
            .create_run(&NewRun {
                name: name.into(),
                evalset_version_id: version_id,
                candidate_ids: candidate_ids.to_vec(),
                config: RunConfig::default(),
            })
            .await
            .expect("storing a test run")
    }

    /// A finished run of [`TINY_EVALSET`] for one new candidate `name` (unique per app), with three
    /// graded records (c1 and c2 passed, c3 failed) and the given harness report.
    pub async fn finished_run(&self, name: &str, report: Option<&HarnessReport>) -> i64 {
        let version = self.create_evalset().await;
        let spec = CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            model: "alpha-model".into(),
            ..Default::default()
        }
        .validate(None)
        .expect("a valid test candidate");
        let alpha = self
            .store
            .create_candidate(&crate::support::checked::admin_new(&spec))
            .await
            .expect("storing a test candidate");
        let run = self.create_run(&format!("finished {name}"), version, &[alpha]).await;
        let records = vec![
            record(run, alpha, "c1", "positive", true),
            record(run, alpha, "c2", "negative", true),
            record(run, alpha, "c3", "positive", false),
        ];
        self.store
            .append_request_records(&records)
            .await
            .expect("storing records");
        if let Some(h) = report {
            self.store
                .set_run_harness(run, h)
                .await
                .expect("storing the harness report");
        }
        self.store
            .set_run_status(run, RunStatus::Finished, None)
            .await
            .expect("finishing the run");
        run
    }
}

/// A successful, graded, streamed record: TTFT `ttft_ms`, end at `end_ms`, `tokens` out.
pub fn record(run_id: i64, candidate_id: i64, case_id: &str, output: &str, passed: bool) -> RequestRecord {
    let sent_at_us = Timestamp::now().0 * 1000;
    RequestRecord {
        run_id,
        candidate_id,
        concurrency: 4,
        sent_at_us,
        connect_us: Some(300).into(),
        connection_reused: Some(false),
        headers_us: Some(20_000).into(),
        first_chunk_us: Some(40_000).into(),
        first_content_us: Some(40_000).into(),
        last_token_us: Some(240_000).into(),
        end_us: Some(250_000).into(),
        chunks: vec![(40_000, 1), (240_000, 19)].into(),
        input_tokens: Some(12),
        output_tokens: Some(20),
        output_tokens_source: Some(TokenSource::Usage),
        output_chars: output.chars().count() as u32,
        ..RequestRecord::test_quality(case_id)
    }
    .with_output(output)
    .graded_exact(passed)
}

/// A harness report as an 8-core "bench-host" would store it after 40 requests: reliable, or
/// flagged (`unreliable`) for a p99 client queue wait of `queue_p99_ms` over the 10 ms bound,
/// with the reason "p99 client queue wait {queue_p99_ms:.1} ms exceeds 10 ms: …".
pub fn harness_report(unreliable: bool, queue_p99_ms: f64) -> HarnessReport {
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
        client_queue_ms: Some(if unreliable {
            dist(3.0, queue_p99_ms)
        } else {
            dist(0.2, 0.9)
        }),
        runtime_lag_ms: Some(dist(0.4, 1.2)),
        lag_bound_ms: 10.0,
        unreliable,
        reasons: if unreliable {
            vec![format!(
                "p99 client queue wait {queue_p99_ms:.1} ms exceeds 10 ms: bakeoff could not keep the asked concurrency"
            )]
        } else {
            Vec::new()
        },
        lag_spikes: Default::default(),
        figure_shifts: Vec::new(),
        process_cpu_s: Some(1.6),
        peak_rss_bytes: Some(40_000_000),
    }
}
