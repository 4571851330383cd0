//! `bakeoff serve`: open the store, load first-start content, optionally start the demo mock,
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
    single_user_bind(args.listen).map_err(anyhow::Error::msg)?;
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
    crate::domain::candidate::allow_key_envs(&args.allow_key_env);
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
    let runner = Runner::with_caps(store.clone(), args.caps());
    tracing::info!(caps = %runner.caps().describe(), "run admission");
    let resumed = runner.resume_unfinished().await?;
    crate::app::verdicts::spawn(store.clone(), runner.clone());
    if resumed > 0 {
        tracing::info!(resumed, "resuming unfinished runs");
    }
    let state = AppState {
        store,
        runner,
        demo_mock_url: demo_mock_url.map(Arc::from),
        security: Arc::new(Security::new(public_url, server_key.csrf_key())),
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(
        "bakeoff {} listening on {} (public URL {})",
        crate::VERSION,
        listener.local_addr()?,
        state.security.public_url.origin()
    );
    axum::serve(listener, build_app(state))
        .with_graceful_shutdown(crate::app::shutdown::signal())
        .await?;
    tracing::info!("stopped");
    Ok(())
}

/// Without accounts bakeoff runs in single-user mode, which is only safe where nobody else can
/// connect: a loopback address. Any other address is refused before anything starts.
pub fn single_user_bind(listen: std::net::SocketAddr) -> Result<(), String> {
    if listen.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {listen}: bakeoff runs in single-user mode (no accounts), where anyone who \
         can reach the address can change thresholds and use the stored API keys. Listen on 127.0.0.1 \
         (the default) and reach it from elsewhere through an SSH tunnel, e.g. \
         `ssh -L 8080:127.0.0.1:8080 this-host`."
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn single_user_mode_is_only_served_on_loopback() {
        for ok in ["127.0.0.1:8080", "[::1]:8080", "127.0.0.2:1"] {
            assert!(super::single_user_bind(ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in ["0.0.0.0:8080", "[::]:8080", "192.168.1.5:8080"] {
            let e = super::single_user_bind(bad.parse().unwrap()).unwrap_err();
            assert!(e.contains("127.0.0.1") && e.contains("refusing"), "{bad}: {e}");
        }
    }
}
