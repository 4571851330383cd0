//! Scorecards: a run judged by a threshold-profile version (`/runs/{id}/scorecard`), its
//! exports (JSON, CSV, Markdown, print), and the archive of saved scorecards (`/scorecards`),
//! each of which can be re-judged against its profile's current version.
//!
//! Everything on these pages is recomputed from the run's raw records; a saved scorecard only
//! fixes the inputs (profile version, incumbent, stated pipeline).
use std::collections::HashMap;

use axum::Router;
use axum::routing::{get, post};

use super::AppState;
use super::error::WebError;
use crate::domain::candidate::Candidate;
use crate::domain::pipeline::{PipelineDraft, PipelineSpec};
use crate::domain::run::{RequestRecord, Run};
use crate::domain::scorecard::{self, Scorecard, ScorecardInput};
use crate::domain::thresholds::ThresholdProfile;
use crate::domain::validation::FieldErrors;
use crate::store::EvalSetVersion;

mod archive;
pub mod charts;
pub mod export;
mod page;
pub mod view;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/runs/{id}/scorecard", get(page::page))
        .route("/runs/{id}/scorecard/print", get(page::print))
        .route("/runs/{id}/scorecard/export.json", get(export::json))
        .route("/runs/{id}/scorecard/export.csv", get(export::csv))
        .route("/runs/{id}/scorecard/export.md", get(export::markdown))
        .route("/runs/{id}/scorecard/save", post(archive::save))
        .route("/scorecards", get(archive::list))
        .route("/scorecards/{id}", get(archive::detail))
}

/// What the scorecard URL's query says: `?profile=…&version=…&incumbent=…&stage_name=…&
/// stage_seconds=…&model_share=…` (stage fields repeat).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScorecardQuery {
    pub profile: Option<i64>,
    pub version: Option<u32>,
    pub incumbent: Option<i64>,
    pub pipeline: PipelineDraft,
}

impl ScorecardQuery {
    /// Parses the raw query; malformed ids are a bad request that names the parameter.
    pub fn parse(raw: Option<&str>) -> Result<ScorecardQuery, WebError> {
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
            .into_owned()
            .collect();
        let last = |name: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let all = |name: &str| {
            pairs
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        let id = |name: &str| -> Result<Option<i64>, WebError> {
            match last(name) {
                None => Ok(None),
                Some(v) => match v.parse::<i64>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(WebError::BadRequest(format!(
                        "The {name} must be a positive whole number, got {:?}.",
                        crate::domain::validation::truncate(&v, 20)
                    ))),
                },
            }
        };
        let version = match id("version")? {
            None => None,
            Some(v) => {
                Some(u32::try_from(v).map_err(|_| WebError::BadRequest("The version is out of range.".to_string()))?)
            }
        };
        Ok(ScorecardQuery {
            profile: id("profile")?,
            version,
            incumbent: id("incumbent")?,
            pipeline: PipelineDraft {
                stage_names: all("stage_name"),
                stage_seconds: all("stage_seconds"),
                model_share_percent: last("model_share").unwrap_or_default(),
            },
        })
    }

    /// The query string that reproduces this scorecard (for links and exports).
    pub fn to_query(&self, profile: &ThresholdProfile, pipeline: &PipelineSpec) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        q.append_pair("profile", &profile.id.to_string());
        q.append_pair("version", &profile.version.to_string());
        if let Some(i) = self.incumbent {
            q.append_pair("incumbent", &i.to_string());
        }
        for s in &pipeline.stages {
            q.append_pair("stage_name", &s.name);
            q.append_pair("stage_seconds", &s.seconds_per_item.to_string());
        }
        if let Some(share) = pipeline.model_share {
            q.append_pair("model_share", &(share * 100.0).to_string());
        }
        q.finish()
    }
}

/// Everything loaded for one judged run.
pub struct Judged {
    pub run: Run,
    pub version: Option<EvalSetVersion>,
    pub candidates: Vec<Candidate>,
    pub records: Vec<RequestRecord>,
    pub profile: ThresholdProfile,
    /// The profile's newest version (differs from `profile.version` when judging an old one).
    pub current_version: u32,
    pub profiles: Vec<ThresholdProfile>,
    pub pipeline: PipelineSpec,
    pub pipeline_errors: FieldErrors,
    pub incumbent: Option<i64>,
    pub card: Scorecard,
    pub query: String,
    /// The harness's report on the run: an unreliable one flags the speed rules.
    pub harness: Option<crate::domain::calibers::HarnessReport>,
}

/// Loads the run and the chosen profile version, and builds the scorecard.
pub async fn judge(state: &AppState, run_id: i64, q: &ScorecardQuery) -> Result<Judged, WebError> {
    let store = &state.store;
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{run_id}")))?;
    let profiles = store.list_threshold_profiles().await?;
    let chosen_id = match q.profile {
        Some(id) => id,
        None => profiles
            .iter()
            .find(|p| p.name == crate::demo::DEFAULT_PROFILE)
            .or(profiles.first())
            .map(|p| p.id)
            .ok_or_else(|| {
                WebError::BadRequest(
                    "There is no threshold profile yet: create one under Thresholds first.".to_string(),
                )
            })?,
    };
    let current = profiles
        .iter()
        .find(|p| p.id == chosen_id)
        .ok_or_else(|| WebError::NotFound(format!("threshold profile #{chosen_id}")))?;
    let profile = match q.version {
        Some(v) if v != current.version => store
            .get_threshold_profile(chosen_id, Some(v))
            .await?
            .ok_or_else(|| WebError::NotFound(format!("version {v} of threshold profile {:?}", current.name)))?,
        _ => current.clone(),
    };
    let current_version = current.version;
    let version = store.get_evalset_version(run.evalset_version_id).await?;
    let all = store.list_candidates().await?;
    let candidates: Vec<Candidate> = run
        .candidate_ids
        .iter()
        .filter_map(|id| all.iter().find(|c| c.id == *id).cloned())
        .collect();
    let incumbent = match q.incumbent {
        Some(id) if !run.candidate_ids.contains(&id) => {
            return Err(WebError::BadRequest(format!(
                "Candidate #{id} is not part of run #{run_id}, so it cannot be the incumbent."
            )));
        }
        other => other,
    };
    let (pipeline, pipeline_errors) = match q.pipeline.validate() {
        Ok(p) => (p, FieldErrors::default()),
        Err(e) => (PipelineSpec::default(), e),
    };
    let records = store.list_request_records(run.id).await?;
    let operability = crate::engine::verdicts::operability_evidence(store, &candidates).await?;
    let weights: HashMap<String, f64> = version
        .as_ref()
        .map(|v| v.file.cases.iter().map(|c| (c.id.clone(), c.weight())).collect())
        .unwrap_or_default();
    let card = scorecard::build(&ScorecardInput {
        run_concurrency: run.config.concurrency,
        candidates: &candidates,
        records: &records,
        weights: &weights,
        rules: &profile.rules,
        incumbent,
        pipeline: &pipeline,
        operability: &operability,
        judge: version.as_ref().map(|v| scorecard::JudgeInput {
            file: &v.file,
            config: run.config.judge.as_ref(),
            all_candidates: &all,
        }),
    });
    let query = ScorecardQuery { incumbent, ..q.clone() }.to_query(&profile, &pipeline);
    Ok(Judged {
        run,
        version,
        candidates,
        records,
        profile,
        current_version,
        profiles,
        pipeline,
        pipeline_errors,
        incumbent,
        card,
        query,
        harness: store.get_run_harness(run_id).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_keeps_repeated_stages_and_refuses_bad_ids() {
        let q = ScorecardQuery::parse(Some(
            "profile=2&version=1&incumbent=&stage_name=prep&stage_seconds=1.5&stage_name=post&stage_seconds=0.5",
        ))
        .unwrap();
        assert_eq!((q.profile, q.version, q.incumbent), (Some(2), Some(1), None));
        assert_eq!(q.pipeline.stage_names, ["prep", "post"]);
        assert!(ScorecardQuery::parse(Some("profile=abc")).is_err());
        assert!(ScorecardQuery::parse(Some("incumbent=-1")).is_err());
        assert_eq!(ScorecardQuery::parse(None).unwrap(), ScorecardQuery::default());
    }
}
