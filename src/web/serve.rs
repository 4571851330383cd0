//! `bakeoff serve`: open the store, load first-start content, optionally start the demo mock,
//! resume unfinished runs, and serve until Ctrl-C / SIGTERM.
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use super::{AppState, build_app};
use crate::config::ServeArgs;
use crate::engine::run::Runner;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
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
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(
        "bakeoff {} listening on http://{}",
        crate::VERSION,
        listener.local_addr()?
    );
    axum::serve(listener, build_app(state))
        .with_graceful_shutdown(crate::app::shutdown::signal())
        .await?;
    tracing::info!("stopped");
    Ok(())
}
