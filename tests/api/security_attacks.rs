//! Issue 44, as an attacker (or a careless team member) sends it, over real HTTP on both
//! databases: a run import that would point a server key variable at a recording listener, a
//! read-only token minting an admin token, bursts of wrong passwords, floods of anonymous
//! logins, hostile imported names, and each of the smaller holes (tokens after a password
//! change, the audit log under REPLACE/TRUNCATE, file modes, the server's own variables,
//! racing admins, redirects, caching, proxies in single-user mode, confusable names, login
//! addresses, copied sealed keys, the candidate origin allow-list).
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bakeoff::app::accounts as accounts_app;
use bakeoff::domain::accounts::{self, Role};
use bakeoff::domain::audit::AuditFilter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::app::{Page, TestApp, browser_client, spawn_app, spawn_app_on};
use crate::support::db::{TestStore, each_backend};
use crate::support::serve::Server;

/// A TCP listener on 127.0.0.1 that keeps the head (request line and headers, lower-cased) of
/// every request it gets and answers each with `answer` (a 500, or a redirect).
struct Recorder {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    async fn answering(answer: impl Fn(SocketAddr) -> String + Send + Sync + 'static) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = heads.clone();
        let answer = Arc::new(answer);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let kept = kept.clone();
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 1 << 16 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    kept.lock().unwrap().push(String::from_utf8_lossy(&head).to_lowercase());
                    let _ = stream.write_all(answer(addr).as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Recorder { addr, heads, task }
    }

    /// Answers every request with a 500.
    async fn start() -> Recorder {
        Recorder::answering(|_| {
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
        })
        .await
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// No request head that reached `recorder` carries a credential (or `secret` anywhere).
fn no_credential_in(heads: &[String], secret: &str) {
    for head in heads {
        assert!(
            !head.contains(&secret.to_lowercase())
                && !head.contains("\r\nauthorization:")
                && !head.contains("\r\nx-api-key:"),
            "a credential reached the listener:\n{head}"
        );
    }
}

fn form(fields: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

fn bearer_client(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

async fn post(client: &reqwest::Client, url: String, body: String) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// A multipart upload of `bytes` as the archive's import form sends it.
async fn upload(client: &reqwest::Client, base_url: &str, bytes: Vec<u8>) -> reqwest::Response {
    const BOUNDARY: &str = "bakeoff-test-boundary-44";
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"run.json\"\r\n\
         Content-Type: application/json\r\n\r\n"
    )
    .into_bytes();
    body.extend(bytes);
    body.extend(format!("\r\n--{BOUNDARY}--\r\n").into_bytes());
    client
        .post(format!("{base_url}/archive/import"))
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The value of cookie `name` a response sets.
fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .map(str::to_string)
}

/// A client holding what a browser holds after loading the login page of the server at
/// `base_url` (a server with accounts shows anonymous browsers nothing else): its browser cookie
/// and the page's CSRF token.
async fn login_page_client(base_url: &str) -> reqwest::Client {
    let r = reqwest::Client::new()
        .get(format!("{base_url}/login"))
        .send()
        .await
        .unwrap();
    let cookie = format!(
        "bakeoff_browser={}",
        set_cookie(&r, "bakeoff_browser").expect("a browser cookie")
    );
    let page = Page::parse(200, &r.text().await.unwrap());
    let token = page
        .attr("body", "hx-headers")
        .and_then(|h| serde_json::from_str::<serde_json::Value>(&h).ok())
        .and_then(|v| v["X-CSRF-Token"].as_str().map(str::to_string))
        .filter(|t| !t.is_empty())
        .expect("the login page carries a CSRF token");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("cookie", cookie.parse().unwrap());
    headers.insert("x-csrf-token", token.parse().unwrap());
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

/// Logs in at the server at `base_url` as a browser does; a client holding the session cookie
/// and its pages' CSRF token.
async fn login_at(base_url: &str, name: &str, password: &str) -> reqwest::Client {
    let browser = login_page_client(base_url).await;
    let r = post(
        &browser,
        format!("{base_url}/login"),
        form(&[("username", name), ("password", password), ("next", "/")]),
    )
    .await;
    let status = r.status();
    let secret = set_cookie(&r, "bakeoff_session");
    assert_eq!(status, 303, "logging in as {name}: {}", r.text().await.unwrap());
    let secret = secret.expect("a session cookie");
    crate::support::app::session_client_at(base_url, &secret).await
}

/// An export of a finished run made on another installation, as JSON, changed by `edit`.
async fn foreign_export(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let source = spawn_app().await;
    let run = source.finished_run("attacker", None).await;
    let export = bakeoff::app::transfer::export_run(source.store.as_ref(), run)
        .await
        .unwrap();
    let mut json = serde_json::to_value(&export).unwrap();
    edit(&mut json);
    serde_json::to_vec(&json).unwrap()
}

/// Waits (polling the database, at most a minute) until run `id` has ended.
async fn until_ended(store: &bakeoff::store::DynStore, id: i64) {
    crate::support::wait::run_ended(store, id, Duration::from_secs(60)).await;
}

const KEY_VAR: &str = "BAKEOFF_KEY_ISSUE44";
const PLANTED: &str = "sk-planted-server-secret-44";

each_backend!(a_run_import_gives_no_candidate_a_key_and_no_credential_reaches_its_server);
async fn a_run_import_gives_no_candidate_a_key_and_no_credential_reaches_its_server(db: TestStore) {
    let b = db.backend;
    let recorder = Recorder::start().await;
    let export = foreign_export(|json| {
        json["candidates"][0]["base_url"] = format!("http://{}/v1", recorder.addr).into();
        json["candidates"][0]["api_key_env"] = KEY_VAR.into();
    })
    .await;
    accounts_app::add_user(db.store.as_ref(), "test", "root", Role::Admin, "root password 12345")
        .await
        .unwrap();
    accounts_app::add_user(db.store.as_ref(), "test", "ed", Role::Editor, "editor password 12345")
        .await
        .unwrap();
    // The server holds a key in its environment, under an allowed name.
    let server = Server::start(&db.url, &[(KEY_VAR, PLANTED)]);
    let editor = login_at(&server.base_url, "ed", "editor password 12345").await;

    let r = upload(&editor, &server.base_url, export).await;
    assert_eq!(r.status(), 303, "{b}: {}", r.text().await.unwrap());
    let imported: i64 = r.headers()["location"]
        .to_str()
        .unwrap()
        .trim_start_matches("/runs/")
        .parse()
        .unwrap();
    let candidate = db
        .store
        .list_candidates()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.spec.name == "attacker")
        .expect("the import created the candidate");
    assert_eq!(
        candidate.spec.api_key_env, None,
        "{b}: the import took the key variable"
    );
    assert!(candidate.spec.api_key.is_none());
    // Audited as a candidate created by the editor, saying what was not taken.
    let created = db
        .store
        .list_audit(
            &AuditFilter {
                action: Some("candidate.created".into()),
                ..Default::default()
            },
            10,
            0,
        )
        .await
        .unwrap();
    assert!(
        created.iter().any(|e| e.actor == "ed"
            && e.target.contains(&format!("#{}", candidate.id))
            && e.detail.contains(KEY_VAR)
            && e.detail.contains("not taken")),
        "{b}: {created:?}"
    );

    // The editor starts a run on it: requests reach the listener, never with a credential.
    let version = db.store.get_run(imported).await.unwrap().unwrap().evalset_version_id;
    let (version, id) = (version.to_string(), candidate.id.to_string());
    let r = post(
        &editor,
        format!("{}/runs", server.base_url),
        form(&[
            ("name", "send my key"),
            ("evalset_version", &version),
            ("candidate", &id),
            ("concurrency", "1"),
            ("repetitions", "1"),
            ("warmup_requests", "0"),
            ("timeout_secs", "5"),
            ("retries", "0"),
            ("case_limit", "1"),
            ("stream", "on"),
            ("load_shape", "fixed"),
        ]),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}: {}", r.text().await.unwrap());
    let run: i64 = r.headers()["location"]
        .to_str()
        .unwrap()
        .trim_start_matches("/runs/")
        .parse()
        .unwrap();
    until_ended(&db.store, run).await;
    let heads = recorder.heads();
    assert!(!heads.is_empty(), "{b}: the run sent nothing to the candidate");
    no_credential_in(&heads, PLANTED);
}

each_backend!(a_scoped_token_never_mints_more_than_itself_nor_revokes_its_accounts_other_tokens);
async fn a_scoped_token_never_mints_more_than_itself_nor_revokes_its_accounts_other_tokens(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    app.add_user("root", Role::Admin).await;
    let root = app.store.find_user("root").await.unwrap().unwrap();
    let (other, _) = accounts_app::create_token(app.store.as_ref(), "test", &root, "deploy", Some(Role::Admin))
        .await
        .unwrap();
    let (read, secret) = accounts_app::create_token(app.store.as_ref(), "test", &root, "read", Some(Role::Viewer))
        .await
        .unwrap();
    let token = bearer_client(&secret);
    let tokens = || async { app.store.list_api_tokens(Some(root.id)).await.unwrap() };
    let before = tokens().await.len();

    // Asking for an admin (or editor) token with a viewer token: refused, nothing created.
    for role in ["admin", "editor"] {
        let r = post(
            &token,
            app.url("/account/tokens"),
            form(&[("name", "mine"), ("role", role)]),
        )
        .await;
        assert_eq!(r.status(), 403, "{b}: a viewer token asked for {role}");
    }
    assert_eq!(tokens().await.len(), before, "{b}");
    // Nor can it create an admin user.
    let r = post(
        &token,
        app.url("/users"),
        form(&[
            ("username", "mallory"),
            ("role", "admin"),
            ("password", "mallory password 1"),
        ]),
    )
    .await;
    assert_eq!(r.status(), 403, "{b}");
    assert!(app.store.find_user("mallory").await.unwrap().is_none());
    // A viewer token it may make; the account page offers nothing above viewer.
    let r = post(
        &token,
        app.url("/account/tokens"),
        form(&[("name", "mine"), ("role", "viewer")]),
    )
    .await;
    assert_eq!(r.status(), 200, "{b}");
    let page = token
        .get(app.url("/account"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let page = Page::parse(200, &page);
    assert_eq!(page.texts("#f-token-role option"), ["viewer"], "{b}");

    // It may not revoke the account's other tokens, only itself.
    let r = post(
        &token,
        app.url(&format!("/account/tokens/{}/revoke", other.id)),
        String::new(),
    )
    .await;
    assert_eq!(r.status(), 403, "{b}");
    assert!(
        tokens()
            .await
            .iter()
            .any(|t| t.id == other.id && t.revoked_at.is_none()),
        "{b}: the other token was revoked"
    );

    // What it did is audited under the token's id.
    let created = app
        .store
        .list_audit(
            &AuditFilter {
                action: Some("token.created".into()),
                ..Default::default()
            },
            1,
            0,
        )
        .await
        .unwrap();
    assert_eq!(created[0].actor, format!("root (token #{})", read.id), "{b}");
    let r = post(
        &token,
        app.url(&format!("/account/tokens/{}/revoke", read.id)),
        String::new(),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}");
    assert_eq!(token.get(app.url("/account")).send().await.unwrap().status(), 401);
}

/// How many attempts past the free ones the backoff (1 s, 2 s, 4 s, …) lets through in `elapsed`.
fn allowed_after_free(elapsed: Duration) -> usize {
    let mut waited = 0.0;
    let mut n = 0;
    while waited + f64::from(1u32 << n) <= elapsed.as_secs_f64() {
        waited += f64::from(1u32 << n);
        n += 1;
    }
    n
}

each_backend!(a_parallel_burst_of_wrong_passwords_is_counted_before_any_is_checked);
async fn a_parallel_burst_of_wrong_passwords_is_counted_before_any_is_checked(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    app.add_user("ada", Role::Admin).await;
    let started = Instant::now();
    let burst = (0..20).map(|_| app.post_form("/login", &[("username", "ada"), ("password", "not her password")]));
    let statuses: Vec<u16> = futures_util::future::join_all(burst)
        .await
        .iter()
        .map(|r| r.status().as_u16())
        .collect();
    let elapsed = started.elapsed();
    let count = |s: u16| statuses.iter().filter(|x| **x == s).count();
    let (checked, throttled, busy) = (count(401), count(429), count(503));
    assert_eq!(checked + throttled + busy, 20, "{b}: {statuses:?}");
    let most = accounts::FREE_LOGIN_FAILURES as usize + allowed_after_free(elapsed);
    assert!(
        checked <= most && throttled >= 20 - most - busy,
        "{b}: {checked} of 20 parallel attempts were checked in {elapsed:?} (at most {most} may be): {statuses:?}"
    );
    // The database counted exactly the attempts that were checked.
    let (failures, _) = app.store.login_failures("ada", "127.0.0.1").await.unwrap().unwrap();
    assert_eq!(failures as usize, checked, "{b}");

    // Counts untouched for a day are pruned (an unknown name leaves one each).
    let old = bakeoff::domain::Timestamp::now().0 - 2 * accounts::LOGIN_FAILURES_KEPT_MS;
    app.execute_raw(&format!(
        "INSERT INTO login_failures (username, address, failures, last_failure_at) VALUES ('ghost', '10.9.9.9', 3, {old})"
    ))
    .await;
    let r = app
        .post_form("/login", &[("username", "nobody"), ("password", "whatever it is")])
        .await;
    assert_eq!(r.status(), 401, "{b}");
    assert_eq!(
        app.store.login_failures("ghost", "10.9.9.9").await.unwrap(),
        None,
        "{b}"
    );
}

/// A client posting the login form from `local` (another loopback address), as a browser that
/// loaded a page.
fn client_from(app: &TestApp, local: std::net::IpAddr) -> reqwest::Client {
    let (cookie, token) = app.state.security.browser_credentials();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("cookie", cookie.parse().unwrap());
    headers.insert("x-csrf-token", token.parse().unwrap());
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(local)
        .default_headers(headers)
        .build()
        .unwrap()
}

each_backend!(throttling_slows_strangers_not_a_known_browser_and_unlock_reset_and_passwd_clear_it);
async fn throttling_slows_strangers_not_a_known_browser_and_unlock_reset_and_passwd_clear_it(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let root_password = app.add_user("root", Role::Admin).await;
    let password = app.add_user("ada", Role::Editor).await;
    let ada = app.store.find_user("ada").await.unwrap().unwrap();
    let (browser, token) = app.state.security.browser_credentials();
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = |name: &'static str, password: String, device: Option<String>| {
        let body = form(&[("username", name), ("password", &password)]);
        // The browser's cookie, and the device cookie when it holds one.
        let cookies = match device {
            Some(device) => format!("{browser}; bakeoff_device={device}"),
            None => browser.clone(),
        };
        let request = plain
            .post(app.url("/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", cookies)
            .header("x-csrf-token", &token)
            .body(body);
        async move { request.send().await.unwrap() }
    };
    // Ada logs in from her browser once: it is known for her name from then on.
    let first = login("ada", password.clone(), None).await;
    let status = first.status();
    let device = set_cookie(&first, "bakeoff_device");
    assert_eq!(status, 303, "{b}: {}", first.text().await.unwrap());
    let device = device.expect("a device cookie");
    // Someone at the same address (a shared proxy) guesses: at most the free failures (and
    // what the backoff lets through in the time taken) are checked, the rest throttled.
    let started = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(login("ada", "a wrong guess!".into(), None).await.status().as_u16());
    }
    let checked = statuses.iter().filter(|s| **s == 401).count();
    let most = accounts::FREE_LOGIN_FAILURES as usize + allowed_after_free(started.elapsed());
    assert!(checked <= most && statuses.contains(&429), "{b}: {statuses:?}");
    // From here on the wait is pinned far from any test's pace: 20 failures, the last now.
    pin(&app, "ada", "127.0.0.1").await;
    // A stranger's browser is slowed, and told why and what helps…
    let r = login("ada", password.clone(), None).await;
    assert_eq!(r.status(), 429, "{b}");
    assert!(r.headers().contains_key("retry-after"));
    assert!(r.text().await.unwrap().contains("unlock"), "{b}");
    // …but Ada's own browser is not.
    assert_eq!(
        login("ada", password.clone(), Some(device.clone())).await.status(),
        303,
        "{b}"
    );
    // Throttled attempts are audited (not each one: at most one a minute per limit).
    let throttled = app
        .store
        .list_audit(
            &AuditFilter {
                action: Some("session.login_throttled".into()),
                ..Default::default()
            },
            100,
            0,
        )
        .await
        .unwrap();
    assert_eq!(throttled.len(), 1, "{b}: {throttled:?}");
    assert!(throttled[0].target.contains("ada") && throttled[0].detail.contains("127.0.0.1"));

    // An admin unlocks the name: the stranger's browser may try again at once.
    let (admin, _) = app.login("root", &root_password).await;
    let r = post(&admin, app.url(&format!("/users/{}/unlock", ada.id)), String::new()).await;
    assert_eq!(r.status(), 303, "{b}");
    assert_eq!(login("ada", password.clone(), None).await.status(), 303, "{b}");

    // Throttled again; an admin's password reset clears it too.
    pin(&app, "ada", "127.0.0.1").await;
    assert_eq!(login("ada", password.clone(), None).await.status(), 429, "{b}");
    let r = post(
        &admin,
        app.url(&format!("/users/{}/password", ada.id)),
        form(&[("password", "a new password for ada")]),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}");
    assert_eq!(
        login("ada", "a new password for ada".into(), None).await.status(),
        303,
        "{b}"
    );

    // And `bakeoff user passwd`.
    pin(&app, "ada", "127.0.0.1").await;
    assert_eq!(
        login("ada", "a new password for ada".into(), None).await.status(),
        429,
        "{b}"
    );
    let url = app.db_url().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(["user", "passwd", "ada", "--database-url", &url])
        .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
        .env("BAKEOFF_USER_PASSWORD", "the terminal's password for ada")
        .env("BAKEOFF_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        login("ada", "the terminal's password for ada".into(), None)
            .await
            .status(),
        303,
        "{b}"
    );

    // Spraying one name over many addresses is counted per account too, each address once.
    let bob_password = app.add_user("bob", Role::Viewer).await;
    let (bob_browser, bob_token) = app.state.security.browser_credentials();
    let first = plain
        .post(app.url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", &bob_browser)
        .header("x-csrf-token", &bob_token)
        .body(form(&[("username", "bob"), ("password", &bob_password)]))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 303, "{b}");
    let bob_device = set_cookie(&first, "bakeoff_device").unwrap();
    for i in 2..=13u8 {
        let from = client_from(&app, std::net::IpAddr::from([127, 0, 0, i]));
        post(
            &from,
            app.url("/login"),
            form(&[("username", "bob"), ("password", "a wrong guess!")]),
        )
        .await;
    }
    let (account, _) = app.store.login_failures("bob", "*").await.unwrap().unwrap();
    assert!(
        account >= 10,
        "{b}: {account} failures counted for bob over every address"
    );
    let per_address = app.store.login_failures("bob", "127.0.0.2").await.unwrap().map(|c| c.0);
    assert_eq!(per_address, Some(1), "{b}: each address failed once");
    // Once over its budget (pinned: long past it, the last failure now), bob from an address
    // that never failed is slowed — told to wait at most a minute, never locked out…
    pin(&app, "bob", "*").await;
    let from = client_from(&app, std::net::IpAddr::from([127, 0, 0, 20]));
    let r = post(
        &from,
        app.url("/login"),
        form(&[("username", "bob"), ("password", &bob_password)]),
    )
    .await;
    assert_eq!(r.status(), 429, "{b}");
    let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait <= 60, "{b}: told to wait {wait} s");
    // …and his own browser not at all.
    let r = plain
        .post(app.url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", format!("{bob_browser}; bakeoff_device={bob_device}"))
        .header("x-csrf-token", &bob_token)
        .body(form(&[("username", "bob"), ("password", &bob_password)]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{b}");
}

/// Sets the failed logins counted for (`name`, `address`) to 20, the last one now: whatever
/// its limit, the next attempt waits (the part of a test that is not about the pace).
async fn pin(app: &TestApp, name: &str, address: &str) {
    let now = bakeoff::domain::Timestamp::now().0;
    app.execute_raw(&format!(
        "INSERT INTO login_failures (username, address, failures, last_failure_at) VALUES ('{name}', '{address}', 20, {now}) \
         ON CONFLICT (username, address) DO UPDATE SET failures = 20, last_failure_at = {now}"
    ))
    .await;
}

/// VmRSS or VmHWM (peak) of process `pid`, in KiB.
fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[tokio::test]
async fn a_flood_of_anonymous_logins_is_bounded_refused_with_503_and_memory_stays_flat() {
    let (url, _dir) = crate::support::db::sqlite_url();
    let store = crate::support::db::open(&url).await;
    accounts_app::add_user(store.as_ref(), "test", "root", Role::Admin, "root password 12345")
        .await
        .unwrap();
    let server = Server::start(&url, &[]);
    let pid = server.pid();
    let base = server.base_url.clone();
    // One login first, so the decoy hash and the first arena are already there.
    let warm = login_page_client(&base).await;
    let r = post(
        &warm,
        format!("{base}/login"),
        form(&[("username", "warm"), ("password", "x")]),
    )
    .await;
    assert_eq!(r.status(), 401);
    // The peak from now on (start-up's own peak is not the logins').
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = memory_kib(pid, "VmRSS");

    // 64 anonymous logins at once, each for another unknown name.
    let clients: Vec<reqwest::Client> = futures_util::future::join_all((0..64).map(|_| login_page_client(&base))).await;
    let burst = clients.iter().enumerate().map(|(i, c)| {
        post(
            c,
            format!("{base}/login"),
            form(&[("username", &format!("nobody-{i}")), ("password", "a guess at it")]),
        )
    });
    let responses = futures_util::future::join_all(burst).await;
    let peak = memory_kib(pid, "VmHWM");
    let statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
    let busy: Vec<&reqwest::Response> = responses.iter().filter(|r| r.status() == 503).collect();
    assert!(statuses.iter().all(|s| [401, 429, 503].contains(s)), "{statuses:?}");
    assert!(!busy.is_empty(), "no login was refused as busy: {statuses:?}");
    assert!(busy.iter().all(|r| r.headers().contains_key("retry-after")));
    // At most HASHING_AT_ONCE argon2id hashes (19 MiB each) run at once: the peak stays within
    // them and some slack, where an unbounded server grew by 19 MiB per login.
    let grown_mib = peak.saturating_sub(before) / 1024;
    let at_once = *accounts_app::HASHING_AT_ONCE as u64;
    let bound_mib = at_once * 19 + 96;
    eprintln!(
        "login flood: RSS {} MiB before, peak {} MiB during 64 parallel logins (+{grown_mib} MiB; bound {bound_mib} MiB, \
         {at_once} hashes at once); {} answered 503",
        before / 1024,
        peak / 1024,
        busy.len()
    );
    assert!(
        grown_mib <= bound_mib,
        "the server grew by {grown_mib} MiB (bound {bound_mib})"
    );
}

/// A change made to an export before it is imported.
type Edit = Box<dyn FnOnce(&mut serde_json::Value)>;

each_backend!(imported_names_follow_the_forms_rules);
async fn imported_names_follow_the_forms_rules(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let long = "n".repeat(200_000);
    let cases: Vec<(&str, Edit)> = vec![
        (
            "run name with a bidi override",
            Box::new(|j| j["run"]["name"] = "run\u{202E}gnp.exe".into()),
        ),
        (
            "run name with a line break",
            Box::new(|j| j["run"]["name"] = "line one\nline two".into()),
        ),
        (
            "a 200 000-character run name",
            Box::new(move |j| j["run"]["name"] = long.into()),
        ),
        (
            "candidate name with a zero-width space",
            Box::new(|j| j["candidates"][0]["name"] = "gpt\u{200B}-4o".into()),
        ),
        (
            "eval set name with a line break",
            Box::new(|j| j["evalset"]["name"] = "set\nname".into()),
        ),
        (
            "case id of a record with a bidi isolate",
            Box::new(|j| j["records"][0]["case_id"] = "c1\u{2067}".into()),
        ),
    ];
    for (what, edit) in cases {
        let export = foreign_export(edit).await;
        let runs = app.run_count().await;
        let candidates = app.candidate_count().await;
        let r = upload(&app.client, &app.base_url, export).await;
        assert_eq!(r.status(), 422, "{b}: {what}");
        assert_eq!(
            (app.run_count().await, app.candidate_count().await),
            (runs, candidates),
            "{b}: {what}"
        );
    }
    // The same export with ordinary names imports.
    let r = upload(&app.client, &app.base_url, foreign_export(|_| {}).await).await;
    assert_eq!(r.status(), 303, "{b}");
}

each_backend!(tokens_end_when_the_password_is_changed_or_reset);
async fn tokens_end_when_the_password_is_changed_or_reset(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let root_password = app.add_user("root", Role::Admin).await;
    let password = app.add_user("ada", Role::Editor).await;
    let ada = app.store.find_user("ada").await.unwrap().unwrap();
    let (client, _) = app.login("ada", &password).await;
    let (_, secret) = accounts_app::create_token(app.store.as_ref(), "test", &ada, "ci", None)
        .await
        .unwrap();
    let token = bearer_client(&secret);
    assert_eq!(token.get(app.url("/runs")).send().await.unwrap().status(), 200);
    let r = post(
        &client,
        app.url("/account/password"),
        form(&[
            ("current_password", &password),
            ("new_password", "ada's new password 1"),
            ("confirm_password", "ada's new password 1"),
        ]),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}");
    assert_eq!(
        token.get(app.url("/runs")).send().await.unwrap().status(),
        401,
        "{b}: after a change"
    );
    // The account page says so beside the form.
    let page = client
        .get(app.url("/account"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        Page::parse(200, &page)
            .text("#password-effects")
            .contains("revokes every API token")
    );

    let (_, secret) = accounts_app::create_token(app.store.as_ref(), "test", &ada, "ci 2", None)
        .await
        .unwrap();
    let token = bearer_client(&secret);
    let (admin, _) = app.login("root", &root_password).await;
    let r = post(
        &admin,
        app.url(&format!("/users/{}/password", ada.id)),
        form(&[("password", "reset by the admin 1")]),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}");
    assert_eq!(
        token.get(app.url("/runs")).send().await.unwrap().status(),
        401,
        "{b}: after a reset"
    );
    let reset = app
        .store
        .list_audit(
            &AuditFilter {
                action: Some("user.password_reset".into()),
                ..Default::default()
            },
            1,
            0,
        )
        .await
        .unwrap();
    assert!(reset[0].detail.contains("token(s) revoked (#"), "{b}: {reset:?}");
}

each_backend!(key_variable_changes_and_token_actions_are_audited_with_what_and_which);
async fn key_variable_changes_and_token_actions_are_audited_with_what_and_which(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let password = app.add_user("root", Role::Admin).await;
    let (admin, _) = app.login("root", &password).await;
    let id = app.create_candidate("keyed", "http://127.0.0.1:1/v1").await;
    let r = post(
        &admin,
        app.url(&format!("/candidates/{id}/edit")),
        form(&[
            ("name", "keyed"),
            ("provider", "openai-chat"),
            ("base_url", "http://127.0.0.1:1/v1"),
            ("model", "keyed-model"),
            ("api_key_env", "BAKEOFF_KEY_OPENAI"),
        ]),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}");
    let entries = app.store.list_audit(&Default::default(), 20, 0).await.unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e.action == "candidate.key_env_changed" && e.detail.contains("BAKEOFF_KEY_OPENAI")),
        "{b}: {entries:?}"
    );
    let root = app.store.find_user("root").await.unwrap().unwrap();
    let (t1, _) = accounts_app::create_token(app.store.as_ref(), "test", &root, "a", None)
        .await
        .unwrap();
    let (t2, _) = accounts_app::create_token(app.store.as_ref(), "test", &root, "b", None)
        .await
        .unwrap();
    let r = post(
        &admin,
        app.url(&format!("/users/{}/tokens/revoke", root.id)),
        String::new(),
    )
    .await;
    assert_eq!(r.status(), 303, "{b}");
    let revoked = app
        .store
        .list_audit(
            &AuditFilter {
                action: Some("token.revoked".into()),
                ..Default::default()
            },
            1,
            0,
        )
        .await
        .unwrap();
    assert!(
        revoked[0].detail.contains(&format!("#{}", t1.id)) && revoked[0].detail.contains(&format!("#{}", t2.id)),
        "{b}: {revoked:?}"
    );
}

each_backend!(the_audit_log_refuses_replace_and_truncate);
async fn the_audit_log_refuses_replace_and_truncate(db: TestStore) {
    let b = db.backend;
    accounts_app::add_user(db.store.as_ref(), "test", "root", Role::Admin, "root password 12345")
        .await
        .unwrap();
    let first: i64 = db.fetch_i64("SELECT MIN(id) FROM audit_log").await.unwrap();
    let rewrite = if b == "sqlite" {
        format!(
            "INSERT OR REPLACE INTO audit_log (id, at, actor, action, target, detail) VALUES ({first}, 0, 'nobody', 'x', 'y', '')"
        )
    } else {
        "TRUNCATE audit_log".to_string()
    };
    assert!(db.execute_raw(&rewrite).await.is_err(), "{b}: {rewrite}");
    if b == "sqlite" {
        let replace = format!(
            "REPLACE INTO audit_log (id, at, actor, action, target, detail) VALUES ({first}, 0, 'n', 'x', 'y', '')"
        );
        assert!(db.execute_raw(&replace).await.is_err(), "{b}: {replace}");
    }
    let actors = db.fetch_texts("SELECT actor FROM audit_log ORDER BY id").await.unwrap();
    assert_eq!(actors.first().map(String::as_str), Some("test"), "{b}: {actors:?}");
}

#[tokio::test]
async fn the_sqlite_database_and_its_wal_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let (url, _dir) = crate::support::db::sqlite_url();
    let path = url.strip_prefix("sqlite://").unwrap().to_string();
    let store = crate::support::db::open(&url).await;
    accounts_app::add_user(store.as_ref(), "test", "root", Role::Admin, "root password 12345")
        .await
        .unwrap();
    for file in [path.clone(), format!("{path}-wal"), format!("{path}-shm")] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file} is {mode:o}");
    }
    drop(store);
    // A database others could read (made by an older version) is made owner-only when opened.
    let older = format!("{}/older.db", std::path::Path::new(&path).parent().unwrap().display());
    std::fs::write(&older, b"").unwrap();
    std::fs::set_permissions(&older, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _store = crate::support::db::open(&format!("sqlite://{older}")).await;
    assert_eq!(std::fs::metadata(&older).unwrap().permissions().mode() & 0o777, 0o600);
}

#[tokio::test]
async fn allow_key_env_refuses_the_servers_own_secrets() {
    let (url, _dir) = crate::support::db::sqlite_url();
    for name in [
        "BAKEOFF_SECRET_KEY",
        "BAKEOFF_ADMIN_PASSWORD",
        "DATABASE_URL",
        "PGPASSWORD",
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                &url,
                "--allow-key-env",
            ])
            .arg(format!("OPENAI_API_KEY,{name}"))
            .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
            .env("BAKEOFF_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // It must stop on its own (polled, at most 30 s); one still serving allowed the name.
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let serving = child.try_wait().unwrap().is_none();
        if serving {
            child.kill().unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!serving && !out.status.success(), "{name} was allowed");
        assert!(
            stderr.contains(name) && stderr.contains("never send it"),
            "{name}: {stderr}"
        );
    }
    // And a stored candidate naming one is never read, whatever was allowed.
    assert!(!bakeoff::domain::candidate::key_env_allowed("BAKEOFF_ADMIN_PASSWORD"));
    assert!(bakeoff::domain::candidate::key_env_allowed("BAKEOFF_KEY_OPENAI"));
}

each_backend!(two_admins_demoting_each_other_at_once_leave_an_admin);
async fn two_admins_demoting_each_other_at_once_leave_an_admin(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let pa = app.add_user("anne", Role::Admin).await;
    let pb = app.add_user("bert", Role::Admin).await;
    let anne = app.store.find_user("anne").await.unwrap().unwrap();
    let bert = app.store.find_user("bert").await.unwrap().unwrap();
    let (a, _) = app.login("anne", &pa).await;
    let (bc, _) = app.login("bert", &pb).await;
    for round in 0..10 {
        let (ra, rb) = tokio::join!(
            post(
                &a,
                app.url(&format!("/users/{}/role", bert.id)),
                form(&[("role", "viewer")])
            ),
            post(
                &bc,
                app.url(&format!("/users/{}/role", anne.id)),
                form(&[("role", "viewer")])
            ),
        );
        let admins = app
            .store
            .list_users()
            .await
            .unwrap()
            .into_iter()
            .filter(|u| u.role == Role::Admin && u.is_active())
            .count();
        assert_eq!(admins, 1, "{b}: round {round}: {} and {}", ra.status(), rb.status());
        // The one demoted gets the admin role back from the other (as the terminal would).
        for u in app.store.list_users().await.unwrap() {
            if u.role != Role::Admin {
                app.store.set_user_role(u.id, Role::Admin).await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn no_credential_follows_a_redirect() {
    let recorder = Recorder::start().await;
    let target = format!("http://{}/tokenize", recorder.addr);
    let redirector = Recorder::answering(move |_| {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    })
    .await;
    // A candidate whose own server's tokenize endpoint redirects elsewhere; an Anthropic key
    // travels as x-api-key, which reqwest keeps across hosts when it follows.
    let mut spec = bakeoff::domain::candidate::CandidateSpec::openai_chat(
        "redirecting",
        format!("http://{}/v1", redirector.addr),
        "m",
    );
    spec.provider = bakeoff::domain::candidate::ProviderKind::Anthropic;
    spec.api_key = Some(bakeoff::domain::candidate::Secret::new(PLANTED));
    spec.tokenize = Some(bakeoff::domain::candidate::TokenizeEndpoint {
        kind: bakeoff::domain::candidate::TokenizeKind::LlamaCpp,
        path: "/tokenize".into(),
    });
    let mut tokenizer = bakeoff::engine::tokens::server_tokenizer::ServerTokenizer::new(&spec)
        .unwrap()
        .unwrap();
    let refused = tokenizer.calibrate().await;
    assert!(refused.is_err(), "a redirect is an error, not followed");
    assert!(!redirector.heads().is_empty(), "the tokenizer asked its own server");
    assert!(
        recorder.heads().is_empty(),
        "the redirect was followed: {:?}",
        recorder.heads()
    );
}

#[tokio::test]
async fn pages_that_need_a_login_are_never_stored_by_a_cache() {
    let app = spawn_app().await;
    let password = app.add_user("root", Role::Admin).await;
    let run = app.finished_run("cached", None).await;
    let (admin, _) = app.login("root", &password).await;
    for path in [
        "/".to_string(),
        "/runs".into(),
        "/audit/export.csv".into(),
        format!("/runs/{run}/export.json"),
        "/api/v1/runs".into(),
    ] {
        let r = admin.get(app.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(
            r.headers().get("cache-control").map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{path}"
        );
    }
    let r = admin.get(app.url("/static/app.css")).send().await.unwrap();
    assert_ne!(
        r.headers().get("cache-control").map(|v| v.to_str().unwrap()),
        Some("no-store")
    );
}

#[tokio::test]
async fn single_user_mode_refuses_requests_that_came_through_a_proxy() {
    let app = spawn_app().await;
    assert_eq!(app.get("/").await.status(), 200);
    for (header, value) in [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9"),
        ("via", "1.1 proxy"),
    ] {
        let r = app.client.get(app.url("/")).header(header, value).send().await.unwrap();
        assert_eq!(r.status(), 403, "{header}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("--public-url") && text.contains("bakeoff user add"),
            "{header}: {text}"
        );
        let r = app
            .client
            .post(app.url("/candidates"))
            .header(header, value)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[
                ("name", "via-proxy"),
                ("provider", "openai-chat"),
                ("base_url", "http://127.0.0.1:1/v1"),
                ("model", "m"),
            ]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{header}");
    }
    assert_eq!(app.candidate_count().await, 0);
}

#[tokio::test]
async fn confusable_candidate_names_are_refused() {
    let app = spawn_app().await;
    let create = |name: &'static str| {
        let app = &app;
        async move {
            let fields = [
                ("name", name),
                ("provider", "openai-chat"),
                ("base_url", "http://127.0.0.1:1/v1"),
                ("model", "m"),
            ];
            app.post_form_html("/candidates", &fields).await
        }
    };
    assert_eq!(create("gpt-4o").await.status, 303);
    for name in ["g\u{0440}t-4o", "GPT-4o", "gpt-4o\u{200B}", "gp\u{200D}t-4o"] {
        let page = create(name).await;
        assert_eq!(page.status, 422, "{name:?}");
    }
    // A word mixing scripts reads as another name even with nothing to be confused with.
    assert_eq!(create("p\u{0430}ypal").await.status, 422);
    assert_eq!(create("gpt-4o-mini").await.status, 303);
    assert_eq!(app.candidate_count().await, 2);
}

each_backend!(viewers_do_not_see_where_others_log_in_from);
async fn viewers_do_not_see_where_others_log_in_from(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let root_password = app.add_user("root", Role::Admin).await;
    let password = app.add_user("vic", Role::Viewer).await;
    let (admin, _) = app.login("root", &root_password).await;
    let (viewer, _) = app.login("vic", &password).await;
    let logins = |client: reqwest::Client| {
        let url = app.url("/audit/export.json?action=session.logged_in");
        async move {
            let json: serde_json::Value = client.get(url).send().await.unwrap().json().await.unwrap();
            json["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["target"].as_str().unwrap().to_string(),
                        e["detail"].as_str().unwrap().to_string(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let seen = logins(viewer.clone()).await;
    assert!(
        seen.iter().any(|(t, d)| t.contains("vic") && d.contains("127.0.0.1")),
        "{b}: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|(t, d)| !t.contains("root") || !d.contains("127.0.0.1")),
        "{b}: a viewer sees the admin's address: {seen:?}"
    );
    let page = viewer
        .get(app.url("/audit?action=session.logged_in"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(bakeoff::domain::audit::ADDRESS_HIDDEN) || !page.contains("root"),
        "{b}"
    );
    let all = logins(admin).await;
    assert!(all.iter().all(|(_, d)| d.contains("127.0.0.1")), "{b}: {all:?}");
}

each_backend!(a_sealed_key_copied_to_another_candidate_does_not_open_there);
async fn a_sealed_key_copied_to_another_candidate_does_not_open_there(db: TestStore) {
    let b = db.backend;
    let s = db.store.clone();
    let mut keyed = bakeoff::domain::candidate::CandidateSpec::openai_chat("openai", "https://api.openai.com/v1", "m");
    keyed.api_key = Some(bakeoff::domain::candidate::Secret::new(PLANTED));
    let a = s
        .create_candidate(&crate::support::checked::admin_new(&keyed))
        .await
        .unwrap();
    let plain = bakeoff::domain::candidate::CandidateSpec::openai_chat("mine", "http://127.0.0.1:1/v1", "m");
    let other = s
        .create_candidate(&crate::support::checked::admin_new(&plain))
        .await
        .unwrap();
    db.execute_raw(&format!(
        "UPDATE candidates SET api_key = (SELECT api_key FROM candidates WHERE id = {a}) WHERE id = {other}"
    ))
    .await
    .unwrap();
    match s.get_candidate(other).await {
        Err(bakeoff::store::StoreError::Key(_)) => {}
        Ok(c) => panic!(
            "{b}: the copied key opened: {:?}",
            c.map(|c| c.spec.api_key.map(|k| k.expose() == PLANTED))
        ),
        Err(e) => panic!("{b}: {e}"),
    }
    assert_eq!(
        s.get_candidate(a)
            .await
            .unwrap()
            .unwrap()
            .spec
            .api_key
            .unwrap()
            .expose(),
        PLANTED
    );
    // A key sealed before keys were bound to their candidate is re-sealed for its row on open.
    let sealer = bakeoff::domain::sealed::KeySealer::new(
        &bakeoff::store::server_key::ServerKey::from_bytes(crate::support::db::TEST_SERVER_KEY).sealing_key(),
    );
    db.execute_raw(&format!(
        "UPDATE candidates SET api_key = '{}' WHERE id = {other}",
        sealer.seal("sk-sealed-by-an-older-version")
    ))
    .await
    .unwrap();
    let reopened = crate::support::db::open(&db.url).await;
    let c = reopened.get_candidate(other).await.unwrap().unwrap();
    assert_eq!(c.spec.api_key.unwrap().expose(), "sk-sealed-by-an-older-version", "{b}");
    let stored = db
        .fetch_texts(&format!("SELECT api_key FROM candidates WHERE id = {other}"))
        .await
        .unwrap();
    assert!(stored[0].starts_with("sealed:v2:"), "{b}: {stored:?}");
}

#[tokio::test]
async fn candidate_origins_can_be_restricted_to_an_allow_list() {
    let (url, _dir) = crate::support::db::sqlite_url();
    let server = Server::start(
        &url,
        &[(
            "BAKEOFF_CANDIDATE_ORIGINS",
            "http://127.0.0.1:9, https://api.openai.com",
        )],
    );
    let client = browser_client(&server.base_url).await;
    let create = |name: &'static str, base_url: &'static str| {
        post(
            &client,
            format!("{}/candidates", server.base_url),
            form(&[
                ("name", name),
                ("provider", "openai-chat"),
                ("base_url", base_url),
                ("model", "m"),
            ]),
        )
    };
    let r = create("internal", "http://169.254.169.254/latest").await;
    assert_eq!(r.status(), 422);
    let text = r.text().await.unwrap();
    assert!(text.contains("candidate-origins"), "{text}");
    assert_eq!(create("allowed", "http://127.0.0.1:9/v1").await.status(), 303);
    assert_eq!(create("vendor", "https://api.openai.com/v1").await.status(), 303);
}
