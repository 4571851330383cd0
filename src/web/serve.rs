//! `bakeoff serve`: open the store, load first-start content, optionally start the demo mock,
//! resume unfinished runs, and serve until Ctrl-C / SIGTERM.
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use super::{AppState, build_app};
use crate::app::server_key;
use crate::config::ServeArgs;
use crate::engine::run::Runner;
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
    crate::domain::candidate::allow_key_envs(&args.allow_key_env);
    // From the environment only, never a flag: command lines are visible to other users.
    let key_file =
        (args.secret_key_file.clone()).unwrap_or_else(|| server_key::default_key_file(&args.database.database_url));
    let server_key = server_key::load(std::env::var("BAKEOFF_SECRET_KEY").ok().as_deref(), &key_file)?;
    let store = crate::store::connect(&args.database.database_url)
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
