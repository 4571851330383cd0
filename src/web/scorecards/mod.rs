//! Scorecards: a run assessed by a threshold-profile version (`/runs/{id}/scorecard`), its
//! exports (JSON, CSV, Markdown, print), and the archive of saved scorecards (`/scorecards`),
//! each of which can be re-assessed against its profile's current version. The assessment itself
//! is `app::scorecard::assemble`; these handlers read the query and present it.
use axum::Router;
use axum::routing::{get, post};

use super::AppState;
use super::error::WebError;
use crate::app::scorecard::{RunScorecard, ScorecardChoice};
use crate::domain::pipeline::PipelineDraft;

pub(crate) mod archive;
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

/// Reads the scorecard URL's query: `?profile=…&version=…&incumbent=…&stage_name=…&
/// stage_seconds=…&model_share=…` (stage fields repeat). Malformed ids are a bad request that
/// names the parameter.
pub fn parse_query(raw: Option<&str>) -> Result<ScorecardChoice, WebError> {
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
    Ok(ScorecardChoice {
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
pub fn query_string(s: &RunScorecard) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("profile", &s.profile.id.to_string());
    q.append_pair("version", &s.profile.version.to_string());
    if let Some(i) = s.incumbent {
        q.append_pair("incumbent", &i.to_string());
    }
    for stage in &s.pipeline.stages {
        q.append_pair("stage_name", &stage.name);
        q.append_pair("stage_seconds", &stage.seconds_per_item.to_string());
    }
    if let Some(share) = s.pipeline.model_share {
        q.append_pair("model_share", &(share * 100.0).to_string());
    }
    q.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_keeps_repeated_stages_and_refuses_bad_ids() {
        let q = parse_query(Some(
            "profile=2&version=1&incumbent=&stage_name=prep&stage_seconds=1.5&stage_name=post&stage_seconds=0.5",
        ))
        .unwrap();
        assert_eq!((q.profile, q.version, q.incumbent), (Some(2), Some(1), None));
        assert_eq!(q.pipeline.stage_names, ["prep", "post"]);
        assert!(parse_query(Some("profile=abc")).is_err());
        assert!(parse_query(Some("incumbent=-1")).is_err());
        assert_eq!(parse_query(None).unwrap(), ScorecardChoice::default());
    }
}
