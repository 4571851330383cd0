//! `bakeoff serve`: open the store, settle the mode (single-user on loopback without users,
//! else accounts; a reachable server without any user refuses to start), load first-start content, optionally start the demo mock,
//! resume unfinished runs, and serve until Ctrl-C / SIGTERM.
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use super::{AppState, build_app};
use crate::config::ServeArgs;
use crate::engine::run::Runner;
use crate::store::server_key;
use crate::web::security::{PublicUrl, Security};

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let public_url = match &args.public_url {
        Some(raw) => PublicUrl::parse(raw).map_err(|e| anyhow::anyhow!("--public-url: {e}"))?,
        None => PublicUrl::from_listen(args.listen).with_context(|| {
            format!(
                "listening on {} does not say how people reach bakeoff: pass --public-url \
                 (BAKEOFF_PUBLIC_URL), e.g. --public-url http://bakeoff.example.com:{}",
                args.listen,
                args.listen.port()
            )
        })?,
    };
    crate::domain::candidate::allow_key_envs(&args.allow_key_env).map_err(anyhow::Error::msg)?;
    args.candidate_origins.apply()?;
    // From the environment only, never a flag: command lines are visible to other users.
    let key_file =
        (args.secret_key_file.clone()).unwrap_or_else(|| server_key::default_key_file(&args.database.database_url));
    let server_key = server_key::load(std::env::var("BAKEOFF_SECRET_KEY").ok().as_deref(), &key_file)?;
    let store = crate::store::connect_with_key(&args.database.database_url, &server_key)
        .await
        .with_context(|| {
            format!(
                "opening database {}",
                crate::domain::redact::url(&args.database.database_url)
            )
        })?;
    let reachable_from_elsewhere = !args.listen.ip().is_loopback() || !public_url.is_loopback();
    let users = first_start_accounts(store.as_ref(), reachable_from_elsewhere, args.listen, &public_url).await?;
    // The demo mock lives as long as the app: its handle is kept until shutdown.
    let demo_mock = if args.demo {
        let listener = TcpListener::bind(args.demo_mock_listen)
            .await
            .with_context(|| format!("binding the demo mock to {}", args.demo_mock_listen))?;
        Some(crate::app::demo::start_mock(listener).await?)
    } else {
        None
    };
    let demo_mock_url = demo_mock.as_ref().map(|m| m.base_url());
    crate::app::demo::bootstrap(store.as_ref(), demo_mock_url.as_deref()).await?;
    let runner = Runner::with_caps(store.clone(), args.caps())
        .with_writer(args.writer_settings())
        .with_identity(args.worker()?);
    tracing::info!(
        caps = %runner.caps().describe(),
        worker = %runner.identity().name,
        measures = runner.identity().measures,
        "run admission (caps shared by every worker of this database)"
    );
    let resumed = runner.resume_unfinished().await?;
    crate::app::verdicts::spawn(store.clone(), runner.clone());
    crate::app::schedules::spawn(store.clone(), runner.clone(), Some(public_url.origin().to_string()));
    if resumed > 0 {
        tracing::info!(resumed, "resuming unfinished runs");
    }
    let security = Security::new(public_url, server_key.csrf_key());
    if reachable_from_elsewhere || users > 0 {
        security.require_accounts();
    }
    let app = crate::app::state::App::new(store, runner);
    crate::app::pages::summaries::install(&app);
    let state = AppState {
        app,
        demo_mock_url: demo_mock_url.map(Arc::from),
        security: Arc::new(security),
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(
        "bakeoff {} listening on {} (public URL {}; {})",
        crate::VERSION,
        listener.local_addr()?,
        state.security.public_url.origin(),
        if reachable_from_elsewhere || users > 0 {
            "accounts mode: every page needs a login"
        } else {
            "single-user mode: no accounts, loopback only"
        }
    );
    // The peer address is what login throttling counts failures by.
    let app = build_app(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::app::shutdown::signal())
        .await?;
    tracing::info!("stopped");
    Ok(())
}

/// The variable holding the first admin's password on a first start (never a flag value).
pub const ADMIN_PASSWORD_ENV: &str = "BAKEOFF_ADMIN_PASSWORD";
/// The first admin's name (default `admin`).
pub const ADMIN_USER_ENV: &str = "BAKEOFF_ADMIN_USER";

/// How many users exist after creating the first admin from the environment when asked; refuses
/// to start a server reachable from other machines without any user.
async fn first_start_accounts(
    store: &dyn crate::store::Store,
    reachable_from_elsewhere: bool,
    listen: std::net::SocketAddr,
    public_url: &PublicUrl,
) -> anyhow::Result<i64> {
    if let Ok(password) = std::env::var(ADMIN_PASSWORD_ENV) {
        let name = std::env::var(ADMIN_USER_ENV).unwrap_or_else(|_| "admin".to_string());
        if let Some(user) = crate::app::accounts::first_admin(store, &name, &password)
            .await
            .map_err(|e| anyhow::anyhow!("{ADMIN_PASSWORD_ENV}: {e}"))?
        {
            tracing::info!(user = %user.username, "first start: created the admin from {ADMIN_PASSWORD_ENV}");
        }
    }
    let users = store.count_users().await?;
    if users == 0 && reachable_from_elsewhere {
        anyhow::bail!(no_user_refusal(listen, public_url));
    }
    Ok(users)
}

/// Why a server reachable from other machines does not start without a user, and what to do.
pub fn no_user_refusal(listen: std::net::SocketAddr, public_url: &PublicUrl) -> String {
    format!(
        "refusing to start: bakeoff would be reachable from other machines (listening on {listen}, public URL {}) \
         but has no user account, so anyone could change thresholds and use the stored API keys. Create the \
         first admin, then start again:\n  bakeoff user add NAME --role admin   (asks for the password)\n\
         or give the password on this first start: {ADMIN_PASSWORD_ENV}=… (and optionally {ADMIN_USER_ENV}=NAME, \
         default \"admin\").\nTo use bakeoff alone on this machine instead, listen on 127.0.0.1 (the default): \
         single-user mode needs no login.",
        public_url.origin()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_refusal_says_exactly_what_to_do() {
        let url = super::PublicUrl::parse("http://bakeoff.example.com:8080").unwrap();
        let e = super::no_user_refusal("0.0.0.0:8080".parse().unwrap(), &url);
        for needed in [
            "bakeoff user add NAME --role admin",
            "BAKEOFF_ADMIN_PASSWORD",
            "BAKEOFF_ADMIN_USER",
            "127.0.0.1",
        ] {
            assert!(e.contains(needed), "{needed}: {e}");
        }
        assert!(!url.is_loopback());
        assert!(super::PublicUrl::parse("http://localhost:8080").unwrap().is_loopback());
        assert!(super::PublicUrl::parse("http://[::1]:8080").unwrap().is_loopback());
    }
}
