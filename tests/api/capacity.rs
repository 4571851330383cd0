//! Capacity at the SLO against the truth server (the mock with a known service capacity, whose
//! true capacity at an SLO is computed by exact simulation, `mock::truth`): the search over real
//! HTTP finds it within ±5 % in at most 8 probe levels; repeated searches (the search driven by
//! the simulated server, so many repeats are cheap) cover it with a loose bound; an overloaded
//! level is marked past saturation.
use std::time::Duration;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::capacity::{LevelVerdict, SearchSettings};
use bakeoff::domain::run::{RunConfig, Slo};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::engine::run::capacity::{CandidateCapacity, CapacityPlan, find_capacity};
use bakeoff::mock::truth::{REFERENCE, REFERENCE_PROBE_REQUESTS, TruthServer};
use bakeoff::mock::{MockConfig, MockServer};
use bakeoff::store::DynStore;

const TRUTH: TruthServer = REFERENCE;
const PROBE_REQUESTS: u32 = REFERENCE_PROBE_REQUESTS;

fn truth_slo() -> Slo {
    TRUTH.reference_slo()
}

const DEADLINE: Duration = Duration::from_secs(240);

async fn truth_mock() -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles: vec![TRUTH.profile("truth")],
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await
}

fn probe_config() -> RunConfig {
    RunConfig {
        concurrency: 1,
        repetitions: 1,
        warmup_requests: 4,
        max_tokens: Some(TRUTH.tokens),
        temperature: Some(0.0),
        timeout_secs: 30,
        retries: 0,
        stream: true,
        staged_rollout: false,
        requests_per_level: Some(PROBE_REQUESTS),
        slo: truth_slo(),
        ..RunConfig::default()
    }
}

/// Stores the truth candidate and a workload of prompts the mock does not know (so every answer
/// is `tokens` of filler), then searches.
async fn search(store: &DynStore, mock: &MockServer, settings: SearchSettings) -> CandidateCapacity {
    let spec = CandidateSpec::openai_chat("truth server", mock.base_url(), "truth");
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let workload = synthetic_evalset(&[16], 40, TRUTH.tokens).unwrap();
    let version = store.save_evalset_version(&workload).await.unwrap();
    let plan = CapacityPlan {
        name: "capacity test".into(),
        evalset_version_id: version,
        candidate_ids: vec![candidate_id],
        config: probe_config(),
        settings,
    };
    let mut found = tokio::time::timeout(DEADLINE, find_capacity(store, &plan, Cancel::never()))
        .await
        .expect("the search ended in time")
        .expect("the search ran");
    found.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_past_saturation_is_marked() {
    let (store, _guard) = crate::support::db::sqlite_store().await;
    let mock = truth_mock().await;
    let settings = SearchSettings {
        start: TRUTH.max_rate() * 2.0,
        max_probes: 1,
        ..SearchSettings::default()
    };
    let found = search(&store, &mock, settings).await;
    let probe = &found.probes[0];
    assert!(probe.probe.past_saturation, "{:?}", probe.signs);
    assert!(probe.signs.ttft_growth.is_some(), "{:?}", probe.signs);
    assert_ne!(probe.probe.verdict(0.9), LevelVerdict::Meets);
    let events = store.list_run_events(probe.run_id).await.unwrap();
    assert!(
        events.iter().any(|e| e.message.contains("past saturation")),
        "{events:?}"
    );
    mock.shutdown().await.unwrap();
}
