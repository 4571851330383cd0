//! First-start content: the shipped eval sets and a default threshold profile (loaded at every
//! start, idempotently), and with `--demo` three candidates served by the in-process mock.
use anyhow::Context;

use crate::domain::accounts::Role;
use crate::domain::candidate::{CandidateSpec, ClaimedFigure, Conditions, Pricing};
use crate::domain::credentials::{check_change, check_new};
use crate::domain::evalset::EvalSetFile;
use crate::domain::thresholds::templates::{DEMO_PROFILE_NAME, shipped_profiles};
use crate::mock::{MockConfig, MockServer};
use crate::store::Store;

/// The shipped eval set the demo candidates are meant to be run on (the mock knows its answers);
/// the run form preselects it in demo mode by this name, not by its place in any list.
pub const DEMO_EVALSET: &str = "support-ticket-triage";

/// Name of the default threshold profile (the scorecard judges by it unless told otherwise).
pub const DEFAULT_PROFILE: &str = DEMO_PROFILE_NAME;

/// The shipped eval sets, parsed. A shipped file that does not parse is a build defect.
pub fn shipped_evalset_files() -> anyhow::Result<Vec<EvalSetFile>> {
    crate::shipped::shipped_evalsets()
        .into_iter()
        .map(|(name, text)| EvalSetFile::parse(&name, &text).with_context(|| format!("shipped eval set {name}")))
        .collect()
}

/// Starts the in-process mock with the demo profiles and the shipped eval sets as answer keys.
pub async fn start_mock(listener: tokio::net::TcpListener) -> anyhow::Result<MockServer> {
    let config = MockConfig {
        profiles: crate::mock::demo_profiles(),
        answer_keys: shipped_evalset_files()?,
        seed: 42,
    };
    let server = crate::mock::spawn(config, listener)
        .await
        .context("starting the demo mock")?;
    tracing::info!("demo mock serving at {}", server.base_url());
    Ok(server)
}

/// Loads the shipped eval sets and the default threshold profile (idempotent), and registers or
/// re-points the demo candidates when `demo_mock_url` is given.
pub async fn bootstrap(store: &dyn Store, demo_mock_url: Option<&str>) -> anyhow::Result<()> {
    for file in shipped_evalset_files()? {
        store
            .save_evalset_version(&file)
            .await
            .with_context(|| format!("loading eval set {}", file.header.name))?;
    }
    // Each shipped profile is created once, by name; the team's later edits are never overwritten.
    let existing = store.list_threshold_profiles().await?;
    for (name, description, rules) in shipped_profiles() {
        if !existing.iter().any(|p| p.name == name) {
            store
                .save_threshold_profile(
                    name,
                    description,
                    &rules,
                    "bakeoff (first start)",
                    "starting point; edit to your workload",
                )
                .await?;
        }
    }
    // Each shipped profile judges the shipped eval set it was written for, unless the team chose
    // otherwise (or the set is not there).
    let profiles = store.list_threshold_profiles().await?;
    let sets = store.list_evalsets().await?;
    for (set, profile) in crate::domain::thresholds::templates::SHIPPED_PROFILE_SETS {
        let key = crate::profiles::evalset_profile_setting(set);
        if store.get_setting(&key).await?.is_none()
            && sets.iter().any(|e| e.name == *set)
            && let Some(p) = profiles.iter().find(|p| p.name == *profile)
        {
            store
                .set_setting(&key, &p.id.to_string(), "bakeoff (first start)")
                .await?;
        }
    }
    if let Some(url) = demo_mock_url {
        let existing = store.list_candidates().await?;
        for spec in demo_candidates(url) {
            match existing.iter().find(|c| c.spec.name == spec.name) {
                // The mock's port changes between starts: re-point, keep the team's edits otherwise.
                // Only the base URL changes, which no role is needed for; a key an admin added
                // since follows its server (dropped when the mock's port moved).
                Some(c) => {
                    let mut updated = c.spec.clone();
                    updated.base_url = spec.base_url;
                    let mut change = check_change(Role::Viewer, c, updated, false)
                        .map_err(|e| anyhow::anyhow!("re-pointing demo candidate {:?}: {}", c.spec.name, e.0))?;
                    change.drop_credentials_if_moved(false);
                    if change.changes_anything() {
                        store.update_candidate(&change).await?;
                    }
                }
                // Demo candidates carry no credentials.
                None => {
                    let new = check_new(Role::Viewer, spec, false)
                        .map_err(|e| anyhow::anyhow!("a demo candidate with credentials: {}", e.0))?;
                    store.create_candidate(&new).await?;
                }
            }
        }
    }
    Ok(())
}

/// Four demo candidates with clearly different trade-offs, one per mock demo profile.
pub fn demo_candidates(mock_base_url: &str) -> Vec<CandidateSpec> {
    let candidate =
        |name: &str, model: &str, hardware: &str, price: (f64, f64), claim: Option<ClaimedFigure>, notes: &str| {
            CandidateSpec {
                conditions: Conditions {
                    hardware: Some(hardware.to_string()),
                    framework: Some("bakeoff built-in mock".to_string()),
                    quantization: None,
                    context_length: Some(8192),
                },
                pricing: Pricing {
                    input_per_mtok: Some(price.0),
                    output_per_mtok: Some(price.1),
                    ..Default::default()
                },
                claimed: claim,
                notes: Some(notes.to_string()),
                ..CandidateSpec::openai_chat(name, mock_base_url, model)
            }
        };
    vec![
        candidate(
            "Demo · swift-7b (fast, sloppy)",
            "swift-7b",
            "simulated: 1× small GPU",
            (0.05, 0.20),
            Some(ClaimedFigure {
                tokens_per_second: 2158.0,
                caliber: "per-stream decode".to_string(),
                conditions: Some("vendor benchmark, batch 1, short prompts".to_string()),
            }),
            "Tops the speed ranking; answers are often wrong and some streams fail.",
        ),
        candidate(
            "Demo · steady-32b (balanced)",
            "steady-32b",
            "simulated: 2× mid GPU",
            (0.30, 1.20),
            None,
            "The middle road.",
        ),
        candidate(
            "Demo · sage-70b (slow, accurate)",
            "sage-70b",
            "simulated: 4× large GPU",
            (0.90, 3.60),
            None,
            "Thinks before answering (reasoning tokens); few slots, queues under load.",
        ),
        candidate(
            "Demo · relay-8b (fast, fumbles tool calls)",
            "relay-8b",
            "simulated: 1× small GPU",
            (0.06, 0.24),
            None,
            "Quick and right on text; run the zh-en-tool-calls set to see its tool calls.",
        ),
    ]
}
