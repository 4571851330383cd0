//! The attacks of issue 12, tried over real HTTP against the app on a loopback port: foreign
//! Origin and Host, forms without a CSRF token, `api_key_env` naming a server variable, a key
//! following its candidate to another server, invisible or bidi names, and formula/markup
//! injection through exports.
use crate::support::app::{TestApp, spawn_app, spawn_app_on};
use crate::support::db::{TestStore, each_backend};

/// One representative request for every state-changing route of the router.
async fn every_form(app: &TestApp) -> Vec<(String, Vec<(&'static str, String)>)> {
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("target", "http://127.0.0.1:1/v1").await;
    let run = app.finished_run("judged", None).await;
    let v = version.to_string();
    let c = candidate.to_string();
    vec![
        (
            "/candidates".into(),
            vec![
                ("name", "planted".into()),
                ("provider", "openai-chat".into()),
                ("base_url", "http://evil.example/v1".into()),
                ("model", "m".into()),
            ],
        ),
        (
            format!("/candidates/{c}/edit"),
            vec![
                ("name", "target".into()),
                ("provider", "openai-chat".into()),
                ("base_url", "http://evil.example/v1".into()),
                ("model", "m".into()),
            ],
        ),
        (format!("/candidates/{c}/operability/probes"), vec![]),
        (
            format!("/candidates/{c}/operability/checklist"),
            vec![("changed_by", "mallory".into()), ("rationale", "x".into())],
        ),
        (
            format!("/candidates/{c}/operability/soak"),
            vec![
                ("seconds", "5".into()),
                ("concurrency", "1".into()),
                ("evalset_version_id", v.clone()),
            ],
        ),
        (
            "/thresholds".into(),
            vec![("name", "planted".into()), ("changed_by", "mallory".into())],
        ),
        ("/thresholds/1/edit".into(), vec![("name", "planted".into())]),
        (
            "/runs".into(),
            vec![("evalset_version_id", v.clone()), ("candidate", c.clone())],
        ),
        (format!("/runs/{run}/cancel"), vec![]),
        (
            format!("/runs/{run}/scorecard/save"),
            vec![("created_by", "mallory".into())],
        ),
        (format!("/evalsets/{v}/cases/new"), vec![("id", "planted".into())]),
        (format!("/evalsets/{v}/cases/1/edit"), vec![("id", "planted".into())]),
        (format!("/evalsets/{v}/cases/1/delete"), vec![]),
        ("/evalsets/import".into(), vec![]),
        ("/evalsets/import/save".into(), vec![]),
        ("/archive/import".into(), vec![]),
    ]
}

/// What the store holds that a form could have changed.
async fn fingerprint(app: &TestApp) -> String {
    let s = &app.store;
    let candidates: Vec<String> = s
        .list_candidates()
        .await
        .unwrap()
        .iter()
        .map(|c| format!("{}={}", c.spec.name, c.spec.base_url))
        .collect();
    format!(
        "{candidates:?} runs={} sets={} profiles={} scorecards={} probes={}",
        s.count_runs().await.unwrap(),
        s.list_evalsets()
            .await
            .unwrap()
            .iter()
            .map(|e| e.version_count)
            .sum::<usize>(),
        s.list_threshold_profiles().await.unwrap().len(),
        s.count_scorecards().await.unwrap(),
        s.list_probe_runs(1, 100).await.unwrap().len(),
    )
}

/// `profile=ID` of a threshold profile with no rules (created once per app).
async fn profile_query(app: &TestApp) -> String {
    let existing = app.store.list_threshold_profiles().await.unwrap();
    let id = match existing.first() {
        Some(p) => p.id,
        None => {
            app.store
                .save_threshold_profile("empty", "", &[], "test", "test")
                .await
                .unwrap()
                .0
        }
    };
    format!("profile={id}")
}

fn form_body(fields: &[(&str, String)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

each_backend!(a_foreign_origin_host_or_missing_token_changes_nothing_on_any_form);
async fn a_foreign_origin_host_or_missing_token_changes_nothing_on_any_form(db: TestStore) {
    let app = spawn_app_on(db).await;
    let forms = every_form(&app).await;
    let before = fingerprint(&app).await;
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (path, fields) in &forms {
        let body = form_body(fields);
        // The app's own client carries the browser cookie and token: the refusals below come
        // from Origin / Host / the token alone.
        let foreign_origin = app
            .client
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", "http://evil.example")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(
            foreign_origin.status(),
            403,
            "{} Origin evil.example on {path}",
            app.backend
        );
        let foreign_referer = app
            .client
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("referer", "http://evil.example/attack.html")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(foreign_referer.status(), 403, "Referer evil.example on {path}");
        let rebound = app
            .client
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("host", "evil.example")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(rebound.status(), 421, "Host evil.example on {path}");
        // No token: a page on another site can make the browser post, not read the token.
        let no_token = plain
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", app.base_url.as_str())
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(no_token.status(), 403, "no token on {path}");
        let (cookie, _) = app.state.security.browser_credentials();
        let wrong_token = plain
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", cookie)
            .body(format!("{body}&_csrf=00ff"))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong_token.status(), 403, "a forged token on {path}");
        let text = wrong_token.text().await.unwrap();
        assert!(text.contains("Reload the page"), "{text}");
    }
    assert_eq!(fingerprint(&app).await, before, "a refused request changed something");
    // Reading pages from a rebinding name is refused too.
    let r = app
        .client
        .get(app.url("/candidates"))
        .header("host", "evil.example:80")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
}

#[tokio::test]
async fn every_page_form_carries_the_token_and_it_is_accepted() {
    let app = spawn_app().await;
    let run = app.finished_run("alpha", None).await;
    let candidate = app.store.list_candidates().await.unwrap()[0].id;
    let version = app.store.list_evalsets().await.unwrap()[0].latest_version_id;
    for path in [
        "/candidates/new".to_string(),
        format!("/candidates/{candidate}/edit"),
        format!("/candidates/{candidate}/operability"),
        "/thresholds/new".to_string(),
        "/runs/new".to_string(),
        format!("/runs/{run}/scorecard?{}", profile_query(&app).await),
        format!("/evalsets/{version}/cases/new"),
        format!("/evalsets/{version}/cases/1/edit"),
        "/evalsets/import".to_string(),
        "/archive".to_string(),
    ] {
        let (page, _) = app.page(&path).await;
        let forms = page.select("form[method=post]");
        assert!(!forms.is_empty(), "{path} has a form");
        for form in forms {
            let action = form.value().attr("action").unwrap_or_default();
            let has_field = form
                .select(&scraper::Selector::parse("input[type=hidden][name=_csrf]").unwrap())
                .any(|i| i.value().attr("value").is_some_and(|v| v.len() == 64));
            assert!(
                has_field || action.contains("_csrf="),
                "a form on {path} ({action}) has no CSRF token"
            );
        }
    }
    // A browser that loaded a page can post with the token from it.
    let client = crate::support::app::browser_client(&app.base_url).await;
    let r = client
        .post(app.url("/candidates"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", app.base_url.as_str())
        .body("name=fine&provider=openai-chat&base_url=http%3A%2F%2F127.0.0.1%3A9%2Fv1&model=m")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
}

#[tokio::test]
async fn every_page_states_single_user_mode() {
    let app = spawn_app().await;
    for path in ["/", "/candidates", "/runs", "/measure", "/no-such-page"] {
        let page = app.get_html(path).await;
        let banner = page.text("#mode");
        assert!(banner.contains("Single-user mode"), "{path}: {banner}");
        assert!(banner.contains(&app.base_url), "{path}: {banner}");
    }
}

#[tokio::test]
async fn security_headers_are_on_every_response() {
    let app = spawn_app().await;
    for path in ["/", "/static/app.css", "/no-such-page"] {
        let r = app.get(path).await;
        let h = r.headers();
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "same-origin");
        assert_eq!(h["x-frame-options"], "DENY");
    }
}

each_backend!(api_key_env_cannot_name_a_server_variable);
async fn api_key_env_cannot_name_a_server_variable(db: TestStore) {
    let app = spawn_app_on(db).await;
    for var in ["HOME", "PATH", "BAKEOFF_DATABASE_URL", "BAKEOFF_SECRET_KEY"] {
        let page = app
            .post_form_html(
                "/candidates",
                &[
                    ("name", "exfil"),
                    ("provider", "openai-chat"),
                    ("base_url", "http://evil.example/v1"),
                    ("model", "m"),
                    ("api_key_env", var),
                ],
            )
            .await;
        assert_eq!(page.status, 422, "{var}");
        assert!(page.text("#f-api_key_env-error").contains("BAKEOFF_KEY_"), "{var}");
    }
    assert_eq!(app.candidate_count().await, 0);
}

each_backend!(a_stored_key_is_dropped_when_the_candidate_moves_to_another_server);
async fn a_stored_key_is_dropped_when_the_candidate_moves_to_another_server(db: TestStore) {
    let app = spawn_app_on(db).await;
    let fields = |url: &'static str| {
        vec![
            ("name", "keyed"),
            ("provider", "openai-chat"),
            ("base_url", url),
            ("model", "m"),
        ]
    };
    let mut with_key = fields("http://127.0.0.1:9/v1");
    with_key.push(("api_key", "sk-planted-0123456789"));
    assert_eq!(app.post_form("/candidates", &with_key).await.status(), 303);
    let id = app.store.list_candidates().await.unwrap()[0].id;
    // Same server, another path: kept.
    let r = app
        .post_form(&format!("/candidates/{id}/edit"), &fields("http://127.0.0.1:9/v2"))
        .await;
    assert_eq!(r.headers()["location"], format!("/candidates?saved={id}").as_str());
    assert!(
        app.store
            .get_candidate(id)
            .await
            .unwrap()
            .unwrap()
            .spec
            .api_key
            .is_some()
    );
    // Another server with the key field blank: dropped, and the list says so.
    let r = app
        .post_form(&format!("/candidates/{id}/edit"), &fields("http://evil.example/v1"))
        .await;
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(to, format!("/candidates?key_dropped={id}"));
    assert!(
        app.store
            .get_candidate(id)
            .await
            .unwrap()
            .unwrap()
            .spec
            .api_key
            .is_none()
    );
    let (page, body) = app.page(&to).await;
    assert!(page.text("#key-dropped").contains("stored API key"));
    assert!(!body.contains("sk-planted"));
}

each_backend!(names_made_of_invisible_bidi_or_control_characters_are_refused);
async fn names_made_of_invisible_bidi_or_control_characters_are_refused(db: TestStore) {
    let app = spawn_app_on(db).await;
    for (name, says) in [
        ("\u{200B}\u{200B}", "visible"),
        ("\u{200D}\u{FEFF}", "visible"),
        ("gpt\u{202E}4-fast", "bidirectional"),
        ("a\u{2066}b", "bidirectional"),
        ("nul\0name", "control"),
    ] {
        let page = app
            .post_form_html(
                "/candidates",
                &[
                    ("name", name),
                    ("provider", "openai-chat"),
                    ("base_url", "http://127.0.0.1:9/v1"),
                    ("model", "m"),
                ],
            )
            .await;
        assert_eq!(page.status, 422, "{name:?}");
        assert!(page.text("#f-name-error").contains(says), "{name:?}");
    }
    assert_eq!(app.candidate_count().await, 0);
}

each_backend!(scorecard_exports_neutralise_formulas_and_markup);
async fn scorecard_exports_neutralise_formulas_and_markup(db: TestStore) {
    let app = spawn_app_on(db).await;
    let name = "=HYPERLINK(\"http://evil.example\",\"x\")<script>alert(1)</script>";
    let run = app.finished_run(name, None).await;
    let q = profile_query(&app).await;
    let csv = app.text_ok(&format!("/runs/{run}/scorecard/export.csv?{q}")).await;
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let names: Vec<String> = reader.records().map(|r| r.unwrap()[3].to_string()).collect();
    assert!(!names.is_empty());
    for cell in &names {
        assert!(!cell.starts_with(['=', '+', '-', '@']), "formula cell {cell:?}");
        assert!(cell.starts_with("'="), "{cell:?}");
    }
    let md = app.text_ok(&format!("/runs/{run}/scorecard/export.md?{q}")).await;
    assert!(!md.contains("<script"), "{md}");
    assert!(md.contains("&lt;script&gt;"), "{md}");
}

/// Every `api_key` value in the candidates table, read raw (what a database dump holds).
async fn stored_keys(url: &str, backend: &str) -> Vec<String> {
    use sqlx::Connection;
    let sql = "SELECT api_key FROM candidates WHERE api_key IS NOT NULL ORDER BY id";
    if backend == "sqlite" {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
    }
}

/// The body of GET `path`, its status, and whether it answered at all; the run's event stream
/// is read for at most a few seconds (it stays open while a page watches).
async fn crawl(client: &reqwest::Client, url: String) -> (u16, String) {
    let mut r = client.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let mut body = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        while let Ok(Some(chunk)) = r.chunk().await {
            body.extend_from_slice(&chunk);
        }
    })
    .await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

each_backend!(
    a_planted_key_is_only_ciphertext_at_rest_and_appears_on_no_get_route,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn a_planted_key_is_only_ciphertext_at_rest_and_appears_on_no_get_route(db: TestStore) {
    const PLANTED: &str = "sk-PLANTED-4e9c2a7d1b";
    let (url, backend) = (db.url.clone(), db.backend);
    let reopen = || async {
        bakeoff::store::connect_with_key(
            &url,
            &bakeoff::store::server_key::ServerKey::from_bytes(crate::support::db::TEST_SERVER_KEY),
        )
        .await
        .unwrap()
    };
    let mock = crate::gate::mock().await;
    let app = spawn_app_on(db).await;
    // An admin's session: every page, /users and /account included, is reachable.
    let password = app.add_user("root", bakeoff::domain::accounts::Role::Admin).await;
    let (admin, _) = app.login("root", &password).await;
    let post = |path: &str, fields: &[(&str, &str)]| {
        admin
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(
                &fields.iter().map(|(k, v)| (*k, v.to_string())).collect::<Vec<_>>(),
            ))
            .send()
    };
    let base_url = mock.base_url();
    let r = post(
        "/candidates",
        &[
            ("name", "keyed"),
            ("provider", "openai-chat"),
            ("base_url", &base_url),
            ("model", "right"),
            ("api_key", PLANTED),
            // A secret header is a credential too (issue 53): sealed, sent, never shown.
            ("secret_headers", "X-Gateway-Token: gw-PLANTED-header-77a1"),
            ("headers", "X-Team: search"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 303, "{backend}");
    let raw_headers = {
        use sqlx::Connection;
        let sql = "SELECT headers FROM candidates";
        let rows: Vec<Option<String>> = if backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
        } else {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
        };
        rows.into_iter().flatten().collect::<Vec<_>>().join("")
    };
    assert!(
        raw_headers.contains("sealed:v2:") && !raw_headers.contains("PLANTED") && raw_headers.contains("search"),
        "{backend}: the secret header is ciphertext at rest: {raw_headers}"
    );
    let candidate = app.store.list_candidates().await.unwrap()[0].id;
    assert_eq!(
        app.store
            .get_candidate(candidate)
            .await
            .unwrap()
            .unwrap()
            .spec
            .api_key
            .unwrap()
            .expose(),
        PLANTED
    );
    // The database holds ciphertext only.
    let raw = stored_keys(&url, backend).await;
    assert_eq!(raw.len(), 1);
    assert!(
        raw[0].starts_with("sealed:v2:") && !raw[0].contains("PLANTED"),
        "{backend}: {raw:?}"
    );

    // A run of it against the mock (which is sent the key), finished; a profile; a saved scorecard.
    let version = app.create_evalset().await;
    let r = post(
        "/runs",
        &[
            ("name", "keyed run"),
            ("evalset_version", &version.to_string()),
            ("candidate", &candidate.to_string()),
            ("concurrency", "2"),
            ("repetitions", "1"),
            ("warmup_requests", "0"),
            ("temperature", "0"),
            ("timeout_secs", "10"),
            ("retries", "0"),
            ("stream", "on"),
            ("load_shape", "fixed"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 303, "{backend}: {:?}", r.text().await);
    let run = app.store.list_runs(10, 0).await.unwrap()[0].run.id;
    let status = crate::support::wait::run_ended(&app.store, run, std::time::Duration::from_secs(90))
        .await
        .status;
    assert_eq!(status.as_str(), "finished", "{backend}");
    // The mock was sent both headers (it logs their names, never a value).
    let truth: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names = &truth["requests"].as_array().unwrap().last().unwrap()["header_names"];
    assert!(
        names.as_array().unwrap().iter().any(|n| n == "x-gateway-token") && names.to_string().contains("x-team"),
        "{backend}: {names}"
    );
    let profile = profile_query(&app).await;
    let profile: i64 = profile.trim_start_matches("profile=").parse().unwrap();
    let scorecard = app
        .store
        .save_scorecard(&bakeoff::domain::scorecard::NewScorecard {
            run_id: run,
            profile_id: profile,
            profile_version: 1,
            incumbent: None,
            pipeline: Default::default(),
            created_by: "test".into(),
            note: String::new(),
            verdicts: vec![],
        })
        .await
        .unwrap();
    let root = app.store.find_user("root").await.unwrap().unwrap();
    let (token, _) = bakeoff::app::accounts::create_token(app.store.as_ref(), "test", &root, "crawl", None)
        .await
        .unwrap();
    let evalset = crate::accounts::evalset_of(&app, version).await;
    let (schedule, review_item) = crate::accounts::schedule_and_review_item(&app, evalset, candidate, run).await;
    let ids = crate::accounts::Ids {
        candidate,
        version,
        run,
        profile,
        scorecard,
        user: root.id,
        token: token.id,
        evalset,
        timeline: crate::accounts::timeline_query(&app, run).await,
        schedule,
        review_item,
        workload: crate::accounts::seed_workload(&app).await,
    };

    // Every GET route of the router, pages, fragments, exports, the event stream and the JSON API.
    let mut crawled = 0;
    let anonymous = reqwest::Client::new();
    for (method, pattern, _) in bakeoff::web::access::ROUTES {
        if *method != "GET" {
            continue;
        }
        let path = crate::accounts::fill(pattern, &ids);
        // The login page is for those not logged in (the admin is sent on).
        let client = if *pattern == "/login" { &anonymous } else { &admin };
        let (status, body) = crawl(client, app.url(&path)).await;
        // Leaving for the identity provider and coming back from it are redirects or refusals
        // without one configured (tests/api/oidc.rs drives them); they show nothing stored either.
        if pattern.starts_with("/login/oidc") {
            assert!(matches!(status, 303 | 401), "{backend}: GET {path} answered {status}");
            assert!(!body.contains("PLANTED"), "{backend}: GET {path} shows the key");
            continue;
        }
        assert!(
            (200..300).contains(&status) && !body.is_empty(),
            "{backend}: GET {path} answered {status}: the crawl did not reach it"
        );
        assert!(!body.contains("PLANTED"), "{backend}: GET {path} shows the key");
        crawled += 1;
    }
    assert!(crawled >= 50, "{backend}: only {crawled} GET routes");

    // A key stored in plaintext by an older version is sealed when the database is opened.
    let reopened = reopen().await;
    let mut legacy = bakeoff::domain::candidate::CandidateSpec::openai_chat("legacy", "http://127.0.0.1:2/v1", "m");
    legacy.api_key = Some(bakeoff::domain::candidate::Secret::new("sk-LEGACY-plain-0001"));
    let id = reopened
        .create_candidate(&crate::support::checked::admin_new(&legacy))
        .await
        .unwrap();
    {
        use sqlx::Connection;
        let sql = format!("UPDATE candidates SET api_key = 'sk-LEGACY-plain-0001' WHERE id = {id}");
        if backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.unwrap();
        } else {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.unwrap();
        }
    }
    assert!(stored_keys(&url, backend).await.iter().any(|k| k.contains("LEGACY")));
    let migrated = reopen().await;
    let raw = stored_keys(&url, backend).await;
    assert!(
        raw.iter().all(|k| k.starts_with("sealed:v2:") && !k.contains("LEGACY")),
        "{raw:?}"
    );
    assert_eq!(
        migrated
            .get_candidate(id)
            .await
            .unwrap()
            .unwrap()
            .spec
            .api_key
            .unwrap()
            .expose(),
        "sk-LEGACY-plain-0001"
    );
}

each_backend!(changes_are_in_the_audit_log_which_filters_exports_and_is_append_only);
async fn changes_are_in_the_audit_log_which_filters_exports_and_is_append_only(db: TestStore) {
    let (url, backend) = (db.url.clone(), db.backend);
    let app = spawn_app_on(db).await;
    let fields = |url: &'static str, key: &'static str| {
        vec![
            ("name", "audited"),
            ("provider", "openai-chat"),
            ("base_url", url),
            ("model", "m"),
            ("api_key", key),
        ]
    };
    assert_eq!(
        app.post_form("/candidates", &fields("http://127.0.0.1:9/v1", "sk-audit-0123456789"))
            .await
            .status(),
        303
    );
    let id = app.store.list_candidates().await.unwrap()[0].id;
    // Moving it drops the key: logged as cleared, with why.
    let r = app
        .post_form(
            &format!("/candidates/{id}/edit"),
            &fields("http://other.example/v1", ""),
        )
        .await;
    assert_eq!(r.status(), 303);
    let (page, _) = app.page("/audit").await;
    let actions = page.texts("table.audit td:nth-child(3)");
    assert_eq!(
        actions,
        [
            "candidate.key_cleared",
            "candidate.updated",
            "candidate.key_set",
            "candidate.created"
        ],
        "{backend}"
    );
    let details = page.texts("table.audit td:nth-child(5)");
    assert!(details[0].contains("moved to another server"), "{details:?}");
    assert!(
        page.texts("table.audit td:nth-child(2)")
            .iter()
            .all(|a| a.contains("local user"))
    );

    // Filters: one action; a prefix for every action on candidates; a date range.
    let (page, _) = app.page("/audit?action=candidate.key_set").await;
    assert_eq!(page.count("table.audit tbody tr"), 1);
    let (page, _) = app.page("/audit?action=candidate.").await;
    assert_eq!(page.count("table.audit tbody tr"), 4);
    let (page, _) = app.page("/audit?to=2000-01-01").await;
    assert_eq!(page.count("table.audit tbody tr"), 0);

    // Exports carry the same entries, never the key.
    let csv = app.text_ok("/audit/export.csv?action=candidate.").await;
    assert_eq!(csv.lines().count(), 5, "{csv}");
    assert!(!csv.contains("sk-audit"));
    let json: serde_json::Value = app.get("/audit/export.json").await.json().await.unwrap();
    assert_eq!(json["entries"].as_array().unwrap().len(), 4);
    assert!(!json.to_string().contains("sk-audit"));

    // Append-only below the application too.
    use sqlx::Connection;
    for sql in ["UPDATE audit_log SET actor = 'mallory'", "DELETE FROM audit_log"] {
        let refused = if backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query(sql).execute(&mut conn).await.is_err()
        } else {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query(sql).execute(&mut conn).await.is_err()
        };
        assert!(refused, "{backend}: {sql} was allowed");
    }
    assert_eq!(app.store.count_audit(&Default::default()).await.unwrap(), 4);
}

/// A `MakeWriter` that keeps every log line in memory.
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn a_planted_key_appears_in_no_log_line() {
    const PLANTED: &str = "sk-PLANTED-log-5d8e1f";
    let logs = LogBuffer::default();
    // This thread's subscriber: the app runs on this test's single-threaded runtime.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app().await;
    let fields = |url: &'static str, key: &'static str| {
        vec![
            ("name", "logged"),
            ("provider", "openai-chat"),
            ("base_url", url),
            ("model", "m"),
            ("api_key", key),
            ("secret_headers", "X-Gateway-Token: gw-PLANTED-log-header"),
        ]
    };
    assert_eq!(
        app.post_form("/candidates", &fields("http://127.0.0.1:1/v1", PLANTED))
            .await
            .status(),
        303
    );
    let id = app.store.list_candidates().await.unwrap()[0].id;
    // A bad edit, probes against a dead endpoint, a key-dropping move: every path that logs.
    let bad = app
        .post_form_html(&format!("/candidates/{id}/edit"), &fields("ftp://x", PLANTED))
        .await;
    assert_eq!(bad.status, 422);
    app.post_form(&format!("/candidates/{id}/operability/probes"), &[])
        .await;
    app.post_form(&format!("/candidates/{id}/edit"), &fields("http://127.0.0.1:2/v1", ""))
        .await;
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    // The capture saw every path that logs (a line count would depend on other crates' tracing).
    for path in ["candidate created", "operability probes started", "candidate updated"] {
        assert!(text.contains(path), "no {path:?} line captured:\n{text}");
    }
    assert!(!text.contains("PLANTED"), "a log line carries the key");
}

each_backend!(terminal_imports_and_a_resume_are_audited_and_a_moved_import_says_what_it_dropped);
async fn terminal_imports_and_a_resume_are_audited_and_a_moved_import_says_what_it_dropped(db: TestStore) {
    use crate::gate::{bakeoff, stderr, stdout};
    let app = spawn_app_on(db).await;
    let url = app.db_url().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let latest = |action: &'static str| {
        let store = app.store.clone();
        async move {
            let filter = bakeoff::domain::audit::AuditFilter {
                action: Some(action.to_string()),
                ..Default::default()
            };
            store.list_audit(&filter, 1, 0).await.unwrap().into_iter().next()
        }
    };
    let by_terminal = |e: &bakeoff::domain::audit::AuditEntry| e.actor.ends_with("(terminal)");

    // `bakeoff evalset import`: the new version, by the terminal's user.
    let set = dir.path().join("gate-set.jsonl");
    std::fs::write(&set, crate::gate::evalset_text()).unwrap();
    let out = bakeoff(&["evalset", "import", set.to_str().unwrap()], &url);
    assert!(out.status.success(), "{}", stderr(&out));
    let e = latest("evalset.saved").await.expect("the import is audited");
    assert!(
        by_terminal(&e) && e.target.contains("gate-set"),
        "{}: {e:?}",
        app.backend
    );

    // `bakeoff run import` of an exported run.
    let run = app.finished_run("exported", None).await;
    let file = dir.path().join("run.json");
    let out = bakeoff(
        &[
            "run",
            "export",
            "--run-id",
            &run.to_string(),
            "--output",
            file.to_str().unwrap(),
        ],
        &url,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = bakeoff(&["run", "import", file.to_str().unwrap()], &url);
    assert!(out.status.success(), "{}", stderr(&out));
    let imported = stdout(&out).trim().to_string();
    let e = latest("run.imported").await.expect("the import is audited");
    assert!(by_terminal(&e) && e.target == format!("run #{imported}"), "{e:?}");

    // `POST /runs/{id}/resume` of a paused run.
    app.store
        .set_run_status(run, bakeoff::domain::run::RunStatus::Paused, None)
        .await
        .unwrap();
    assert_eq!(app.post_form(&format!("/runs/{run}/resume"), &[]).await.status(), 303);
    let e = latest("run.started").await.expect("the resume is audited");
    assert_eq!(e.target, format!("run #{run}"));
    assert!(e.detail.contains("resumed") && e.actor.contains("local user"), "{e:?}");

    // `bakeoff candidate import` moving a keyed candidate: the key and variable go, and it says so.
    let candidates = dir.path().join("c.toml");
    let write = |base_url: &str| {
        std::fs::write(
            &candidates,
            format!(
                "bakeoff_candidates = 1\n[[candidate]]\nname = \"moving\"\nprovider = \"openai-chat\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\napi_key_env = \"BAKEOFF_KEY_MOVING\"\n"
            ),
        )
        .unwrap()
    };
    write("http://127.0.0.1:9/v1");
    let out = bakeoff(&["candidate", "import", candidates.to_str().unwrap()], &url);
    assert!(
        out.status.success(),
        "the terminal sets a key variable: {}",
        stderr(&out)
    );
    let c = app
        .store
        .list_candidates()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.spec.name == "moving")
        .unwrap();
    let mut keyed = c.spec.clone();
    keyed.api_key = Some(bakeoff::domain::candidate::Secret::new("sk-terminal-0123456789"));
    app.store
        .update_candidate(&crate::support::checked::admin_change(app.store.as_ref(), c.id, &keyed).await)
        .await
        .unwrap();
    write("http://evil.example/v1");
    let out = bakeoff(&["candidate", "import", candidates.to_str().unwrap()], &url);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("updated") && stdout(&out).contains("stored API key and key variable were removed"),
        "{}",
        stdout(&out)
    );
    let moved = app.store.get_candidate(c.id).await.unwrap().unwrap().spec;
    assert_eq!((moved.api_key, moved.api_key_env), (None, None), "{}", app.backend);
    let e = latest("candidate.key_cleared").await.expect("the drop is audited");
    assert!(by_terminal(&e) && e.detail.contains("moved to another server"), "{e:?}");
}
