//! Sign-in through an OpenID Connect provider (issue 52, point 4), against a small provider on
//! loopback started by each test (`support::oidc`): an admin configures it on the Users page; a
//! sign-in is the code flow with PKCE, state and nonce; forged ID tokens (bad signature, wrong
//! audience, expired, replayed nonce, wrong issuer) and a replayed or foreign callback are
//! refused, naming the check; roles follow the mapped claim or wait for an admin; the last local
//! admin is kept. The Chromium journey is in `an_editor_signs_in_through_the_provider_in_chromium`.
use bakeoff::domain::accounts::Role;
use fantoccini::Locator;

use crate::browser::{browser_binaries, failure_report, start_browser, start_driver, wait_for};
use crate::support::app::{Page, TestApp, spawn_app};
use crate::support::oidc::{CLIENT_ID, CLIENT_SECRET, Forgery, OidcProvider};

/// The app in accounts mode (a local admin "root") with the provider configured by root
/// through the Users page: `ml-team` members are editors, `ml-leads` admins, others wait.
async fn configured() -> (TestApp, OidcProvider, reqwest::Client) {
    let app = spawn_app().await;
    let password = app.add_user("root", Role::Admin).await;
    let provider = OidcProvider::start().await;
    let (root, _) = app.login("root", &password).await;
    let r = form(
        &root,
        &app.url("/users/oidc"),
        &[
            ("issuer", provider.issuer.as_str()),
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
            ("role_claim", "groups"),
            ("role_map", "ml-team = editor\nml-leads = admin"),
            ("default_role", "none"),
        ],
    )
    .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    (app, provider, root)
}

/// A form POST as a browser sends it.
async fn form(client: &reqwest::Client, url: &str, fields: &[(&str, &str)]) -> reqwest::Response {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    client
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

/// What a browser gets back from the callback.
struct Outcome {
    status: u16,
    session: Option<String>,
    location: Option<String>,
    message: String,
    callback: String,
}

fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// One sign-in as a browser makes it: to bakeoff, on to the provider, "Sign in", back to the
/// callback (with the state cookie unless `drop_cookie`).
async fn sign_in(app: &TestApp, provider: &OidcProvider, drop_cookie: bool) -> Outcome {
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = browser.get(app.url("/login/oidc?next=/runs")).send().await.unwrap();
    assert_eq!(r.status(), 303, "to the provider");
    let state_cookie = set_cookie(&r, "bakeoff_oidc_state").expect("the state cookie");
    let to_provider = url::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
    assert!(to_provider.as_str().starts_with(&provider.issuer), "{to_provider}");
    let pairs: Vec<(String, String)> = to_provider.query_pairs().into_owned().collect();
    let find = |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(find("redirect_uri"), app.url("/login/oidc/callback"));
    assert_eq!(find("code_challenge_method"), "S256");
    assert_eq!(find("state"), state_cookie, "the state the browser keeps");
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let back = form(&browser, &format!("{}/authorize", provider.issuer), &pairs).await;
    assert_eq!(back.status(), 303, "the provider sends the browser back");
    let callback = back.headers()["location"].to_str().unwrap().to_string();
    outcome(&browser, callback, (!drop_cookie).then_some(state_cookie)).await
}

async fn outcome(browser: &reqwest::Client, callback: String, state_cookie: Option<String>) -> Outcome {
    let mut request = browser.get(&callback);
    if let Some(state) = &state_cookie {
        request = request.header("cookie", format!("bakeoff_oidc_state={state}"));
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let session = set_cookie(&r, "bakeoff_session");
    let location = r.headers().get("location").map(|v| v.to_str().unwrap().to_string());
    let page = Page::parse(status, &r.text().await.unwrap());
    Outcome {
        status,
        session,
        location,
        // Empty on a success (a redirect has no page).
        message: page.texts("#login-error").join(" "),
        callback,
    }
}

#[tokio::test]
async fn forged_id_tokens_and_replayed_or_foreign_callbacks_are_refused_naming_the_check() {
    let (app, provider, _) = configured().await;
    provider.sign_in_as("u-7", "ana", &["ml-team"]);

    // A genuine sign-in: a session, back where the user was going, as an editor.
    let first = sign_in(&app, &provider, false).await;
    assert_eq!(first.status, 303, "{}", first.message);
    assert_eq!(first.location.as_deref(), Some("/runs"));
    assert!(first.session.is_some());
    let ana = app.store.find_user("ana").await.unwrap().expect("the account made");
    assert_eq!(ana.role, Role::Editor);
    let first_nonce = provider.nonces()[0].clone();

    // The same callback again (state and code replayed): the login was taken once.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let state = url::Url::parse(&first.callback)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned());
    let again = outcome(&browser, first.callback.clone(), state).await;
    assert_eq!((again.status, again.session.is_some()), (401, false));
    assert!(again.message.contains("already used"), "{}", again.message);

    // A callback in a browser that did not start the sign-in (login CSRF).
    let foreign = sign_in(&app, &provider, true).await;
    assert_eq!((foreign.status, foreign.session.is_some()), (401, false));
    assert!(
        foreign.message.contains("not started in this browser"),
        "{}",
        foreign.message
    );

    // Each forged token, refused with the check that failed; no session.
    for (forgery, expected) in [
        (Forgery::BadSignature, "signature does not verify"),
        (Forgery::WrongAudience, "for another client"),
        (Forgery::Expired, "expired"),
        (Forgery::Nonce(first_nonce.clone()), "nonce is not this login's"),
        (Forgery::WrongIssuer, "not the configured issuer"),
    ] {
        provider.forge_next(forgery.clone());
        let refused = sign_in(&app, &provider, false).await;
        assert_eq!(
            (refused.status, refused.session.is_some()),
            (401, false),
            "{forgery:?}: {}",
            refused.message
        );
        assert!(refused.message.contains(expected), "{forgery:?}: {}", refused.message);
    }
    // After them all, a genuine one still works (nothing was left half-done).
    let last = sign_in(&app, &provider, false).await;
    assert_eq!(last.status, 303, "{}", last.message);
    assert_eq!(
        app.store.list_users().await.unwrap().len(),
        2,
        "root and ana, no one else"
    );
}

#[tokio::test]
async fn a_new_user_without_a_mapped_group_waits_for_an_admin_and_the_last_local_admin_stays() {
    let (app, provider, root) = configured().await;

    // No mapped group and no default role: the account is made disabled, and says why.
    provider.sign_in_as("u-8", "bo", &["contractors"]);
    let waiting = sign_in(&app, &provider, false).await;
    assert_eq!((waiting.status, waiting.session.is_some()), (403, false));
    assert!(waiting.message.contains("waits for an admin"), "{}", waiting.message);
    let bo = app.store.find_user("bo").await.unwrap().unwrap();
    assert!(!bo.is_active());
    // The Users page marks the account as the provider's; the admin enables it: signed in.
    let users = Page::parse(
        200,
        &root.get(app.url("/users")).send().await.unwrap().text().await.unwrap(),
    );
    assert!(
        users
            .text("tr[data-user='bo'] td:first-child")
            .contains("(identity provider)")
    );
    assert_eq!(
        users.text("#oidc-redirect-uri"),
        app.url("/login/oidc/callback"),
        "what to register with the provider"
    );
    let r = form(&root, &app.url(&format!("/users/{}/enable", bo.id)), &[]).await;
    assert_eq!(r.status(), 303);
    let signed = sign_in(&app, &provider, false).await;
    assert_eq!(signed.status, 303, "{}", signed.message);

    // A lead: admin by the mapped group; still, the local admin cannot be demoted or removed
    // (the way back in when the provider is down), while the provider's admin can be.
    provider.sign_in_as("u-9", "lee", &["ml-team", "ml-leads"]);
    assert_eq!(sign_in(&app, &provider, false).await.status, 303);
    let lee = app.store.find_user("lee").await.unwrap().unwrap();
    assert_eq!(lee.role, Role::Admin);
    let root_user = app.store.find_user("root").await.unwrap().unwrap();
    let err = bakeoff::app::accounts::set_role(app.store.as_ref(), "lee", &root_user, Role::Viewer)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("admin"), "{err}");
    assert_eq!(app.store.find_user("root").await.unwrap().unwrap().role, Role::Admin);
    bakeoff::app::accounts::set_role(app.store.as_ref(), "root", &lee, Role::Editor)
        .await
        .unwrap();

    // Audited: the provider saved (never its secret), the accounts made, the sign-ins.
    let audit = app.store.list_audit(&Default::default(), 100, 0).await.unwrap();
    let saved = audit
        .iter()
        .find(|e| e.action == "oidc_provider.saved")
        .expect("audited");
    assert!(saved.detail.contains("client secret sealed"), "{}", saved.detail);
    assert!(audit.iter().all(|e| !e.detail.contains(CLIENT_SECRET)));
    assert!(audit.iter().any(|e| e.action == "session.logged_in" && e.actor == "bo"));
    let page = root.get(app.url("/users")).send().await.unwrap().text().await.unwrap();
    assert!(!page.contains(CLIENT_SECRET), "the client secret is never shown back");
}

#[tokio::test]
async fn a_bad_provider_form_is_refused_naming_its_fields_and_changes_nothing() {
    let app = spawn_app().await;
    let password = app.add_user("root", Role::Admin).await;
    let (root, _) = app.login("root", &password).await;
    let r = form(
        &root,
        &app.url("/users/oidc"),
        &[
            ("issuer", "http://login.example.com"),
            ("client_id", ""),
            ("client_secret", "s3cret-not-to-show"),
            ("role_claim", ""),
            ("role_map", "ml-team = boss"),
            ("default_role", "none"),
        ],
    )
    .await;
    assert_eq!(r.status(), 422);
    let body = r.text().await.unwrap();
    let page = Page::parse(422, &body);
    let error = page.text("#oidc-error");
    for field in ["Issuer", "Client id", "Role map"] {
        assert!(error.contains(field), "{field}: {error}");
    }
    assert!(!body.contains("s3cret-not-to-show"));
    assert!(app.store.oidc_provider().await.unwrap().is_none(), "nothing saved");
    // The login page offers no provider sign-in while none is configured.
    let login = Page::parse(
        200,
        &app.client
            .get(app.url("/login"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(login.count("#oidc-sign-in"), 0);
}

/// Chromium: the login page's "Sign in with your identity provider", the provider's page, and
/// back signed in as the mapped role, on the page the user was going to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_browser),
    ignore = "needs chromium and chromedriver on PATH: run scripts/install-browser.sh"
)]
async fn an_editor_signs_in_through_the_provider_in_chromium() {
    let (chromium, chromedriver) = browser_binaries();
    let (app, provider, _) = configured().await;
    provider.sign_in_as("u-42", "grace", &["ml-team"]);
    let driver = start_driver(&chromedriver).await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_browser(&driver, &chromium, dir.path()).await;
    let result = async {
        c.goto(&app.url("/runs")).await?;
        assert_eq!(c.current_url().await?.path(), "/login");
        c.find(Locator::Css("#oidc-sign-in a")).await?.click().await?;
        wait_for(&c, Locator::Css("#approve")).await?.click().await?;
        let name = wait_for(&c, Locator::Css("#user-name")).await?;
        assert_eq!(name.text().await?, "grace");
        assert_eq!(c.current_url().await?.path(), "/runs");
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    let report = match &result {
        Err(_) => failure_report(&c, "oidc-failure").await,
        Ok(()) => String::new(),
    };
    c.close().await.ok();
    if let Err(e) = result {
        panic!("{e}\n{report}");
    }
    let grace = app
        .store
        .find_user("grace")
        .await
        .unwrap()
        .expect("made on the first sign-in");
    assert_eq!(grace.role, Role::Editor);
}

/// Behind the reverse proxy of docs/teams.md (bakeoff on a private address, people at
/// `https://bakeoff.example.com`): the redirect URI the provider is given is the public URL's,
/// never the address bakeoff listens on, and the state cookie is `Secure`.
#[tokio::test]
async fn behind_the_reverse_proxy_the_redirect_uri_is_the_public_urls() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    let (store, _dir) = crate::support::db::sqlite_store().await;
    let provider = OidcProvider::start().await;
    bakeoff::app::accounts::add_user(store.as_ref(), "test", "root", Role::Admin, "password of root 12345")
        .await
        .unwrap();
    bakeoff::app::oidc::save_provider(
        store.as_ref(),
        &bakeoff::app::oidc::ProviderForm {
            issuer: provider.issuer.clone(),
            client_id: CLIENT_ID.into(),
            client_secret: CLIENT_SECRET.into(),
            default_role: "viewer".into(),
            ..Default::default()
        },
        "root",
    )
    .await
    .unwrap();
    let public = bakeoff::web::security::PublicUrl::parse("https://bakeoff.example.com").unwrap();
    let security = bakeoff::web::security::Security::new(public, bakeoff::web::security::random_key());
    security.require_accounts();
    let state = bakeoff::web::AppState {
        app: bakeoff::app::state::App::new(store.clone(), bakeoff::engine::run::Runner::new(store.clone())),
        demo_mock_url: None,
        security: std::sync::Arc::new(security),
    };
    // As the proxy forwards it: the public Host, and its forwarding headers.
    let request = Request::get("/login/oidc")
        .header("host", "bakeoff.example.com")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-for", "203.0.113.7")
        .body(Body::empty())
        .unwrap();
    let r = bakeoff::web::build_app(state).oneshot(request).await.unwrap();
    assert_eq!(r.status(), 303);
    let to = url::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
    let redirect = to
        .query_pairs()
        .find(|(k, _)| k == "redirect_uri")
        .map(|(_, v)| v.into_owned());
    assert_eq!(
        redirect.as_deref(),
        Some("https://bakeoff.example.com/login/oidc/callback")
    );
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cookie.starts_with("bakeoff_oidc_state=") && cookie.contains("; Secure"),
        "{cookie}"
    );
}
