//! The team journey in a real headless Chromium: an anonymous visit is sent to the login page,
//! the user logs in, changes a threshold profile, finds the change in the audit log under their
//! own name, and logs out (after which the pages ask for a login again). Ignored, with the
//! reason, where build.rs found no Chromium (see browser.rs).
use bakeoff::domain::accounts::Role;
use fantoccini::{Client, Locator};

use crate::browser::{browser_binaries, failure_report, start_browser, start_driver, wait_for};
use crate::support::app::spawn_app;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_browser),
    ignore = "needs chromium and chromedriver on PATH: run scripts/install-browser.sh"
)]
async fn log_in_change_a_threshold_see_it_audited_log_out() {
    let (chromium, chromedriver) = browser_binaries();
    let app = spawn_app().await;
    app.add_user("root", Role::Admin).await;
    let password = app.add_user("grace", Role::Editor).await;
    // The shipped threshold profiles, as a first start loads them.
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let profile_id = app.store.list_threshold_profiles().await.unwrap()[0].id;
    let driver = start_driver(&chromedriver).await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_browser(&driver, &chromium, dir.path()).await;
    let result = journey(&c, &app.base_url, profile_id, &password).await;
    let report = match &result {
        Err(_) => failure_report(&c, "accounts-failure").await,
        Ok(()) => String::new(),
    };
    c.close().await.ok();
    if let Err(e) = result {
        panic!("{e}\n{report}");
    }
    let latest = app.store.list_audit(&Default::default(), 50, 0).await.unwrap();
    assert!(
        latest
            .iter()
            .any(|e| e.action == "threshold_profile.saved" && e.actor == "grace"),
        "{latest:?}"
    );
}

async fn journey(c: &Client, base: &str, profile: i64, password: &str) -> Result<(), Box<dyn std::error::Error>> {
    // Anonymous: sent to the login form, and back to the page afterwards.
    c.goto(&format!("{base}/thresholds/{profile}/edit")).await?;
    assert_eq!(c.current_url().await?.path(), "/login");
    let form = c.form(Locator::Css("#login-form")).await?;
    form.set_by_name("username", "grace").await?;
    form.set_by_name("password", password).await?;
    form.submit().await?;
    wait_for(c, Locator::Css("#f-change_rationale")).await?;
    assert_eq!(c.current_url().await?.path(), format!("/thresholds/{profile}/edit"));
    assert_eq!(c.find(Locator::Css("#user-name")).await?.text().await?, "grace");

    // Change the profile.
    let edit_form = format!("form[action='/thresholds/{profile}/edit']");
    let form = c.form(Locator::Css(&edit_form)).await?;
    form.set_by_name("description", "after: stricter for the release")
        .await?;
    form.set_by_name("changed_by", "Grace H.").await?;
    form.set_by_name("change_rationale", "tightened after the incident")
        .await?;
    form.submit().await?;
    let saved = wait_for(c, Locator::XPath("//*[contains(text(), 'Saved as version')]")).await?;
    // Shown as a success, not in the warning colours.
    assert!(saved.attr("class").await?.unwrap_or_default().contains("success"));

    // The audit log names the logged-in user.
    c.goto(&format!("{base}/audit?action=threshold_profile.saved")).await?;
    let row = wait_for(
        c,
        Locator::XPath("//table[contains(@class,'audit')]//tr[td[2][normalize-space()='grace']]"),
    )
    .await?;
    assert!(row.text().await?.contains("threshold_profile.saved"));

    // A new API token: revealed once, with a working "Copy" button (the clipboard, or the
    // text selected where the headless browser allows no clipboard).
    c.goto(&format!("{base}/account")).await?;
    let form = c.form(Locator::Css("#token-form")).await?;
    form.set_by_name("name", "ci").await?;
    form.submit().await?;
    let copy = wait_for(c, Locator::Css("button[data-copy='#new-token-secret']")).await?;
    assert!(copy.is_displayed().await?, "the script shows the copy button");
    copy.click().await?;
    let copied = wait_for(c, Locator::Css("button[data-copy][data-copied]")).await?;
    let how = copied.attr("data-copied").await?.unwrap_or_default();
    if how == "selected" {
        let selected = c.execute("return String(window.getSelection());", vec![]).await?;
        let secret = c.find(Locator::Css("#new-token-secret")).await?.text().await?;
        assert_eq!(selected.as_str(), Some(secret.as_str()));
    } else {
        assert_eq!(how, "yes");
    }

    // Log out: the pages ask for a login again.
    c.find(Locator::Css("#logout button")).await?.click().await?;
    wait_for(c, Locator::Css("#login-form")).await?;
    c.goto(&format!("{base}/audit")).await?;
    assert_eq!(c.current_url().await?.path(), "/login");
    Ok(())
}
