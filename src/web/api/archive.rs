//! `/api/v1/archive`: ended runs with the archive page's filters (eval set, candidate, status,
//! created from/to, threshold profile, verdict) and each candidate's recorded verdict by the
//! shown profile (the filtered one, else the default profile), read by the page's own filter.
//! `/api/v1/archive/compare`: runs side by side as the compare page shows them (each column's
//! conditions, every figure with the page's text and mark, what was not compared and why, and
//! the per-case marks paged), from the page's own computation. `/api/v1/archive/history`: one
//! candidate's figures on one eval set run after run, in series of like conditions, as the
//! history page lists them (without its charts).
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::runs::RunListItem;
use super::{ApiResult, PageInfo, Params, ok};
use crate::domain::compare::Figures;
use crate::domain::stats::Interval;
use crate::web::AppState;
use crate::web::archive::list::{ArchiveFilters, resolve, verdicts_of};
use crate::web::archive::{compare, history};
use crate::web::views::FormBody;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/archive", get(query))
        .route("/api/v1/archive/compare", get(compare_runs))
        .route("/api/v1/archive/history", get(history_of))
}

/// The profile whose verdicts the answer carries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShownProfileView {
    pub id: i64,
    pub name: String,
    pub current_version: u32,
}

/// One candidate's recorded verdict.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VerdictView {
    pub candidate_id: i64,
    /// GO, NO-GO or INCONCLUSIVE.
    pub verdict: String,
    /// The profile version that judged (older than current when the profile changed since).
    pub profile_version: u32,
    /// The saved scorecard it was read from, when one was saved.
    pub scorecard_id: Option<i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArchiveRun {
    #[serde(flatten)]
    pub run: RunListItem,
    /// Verdicts by the shown profile, in the run's candidate order; empty when not judged yet.
    pub verdicts: Vec<VerdictView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArchivePage {
    #[serde(flatten)]
    pub page: PageInfo,
    pub profile: Option<ShownProfileView>,
    /// Newest first.
    pub items: Vec<ArchiveRun>,
}

/// Ended runs (finished, failed, cancelled), filtered as on the archive page.
#[utoipa::path(get, operation_id = "query_archive", path = "/api/v1/archive", tag = "archive",
    params(
        ("evalset" = Option<i64>, Query, description = "An eval set's id"),
        ("candidate" = Option<i64>, Query, description = "A candidate's id"),
        ("status" = Option<String>, Query, description = "finished, failed or cancelled"),
        ("from" = Option<String>, Query, description = "Created on or after this day (YYYY-MM-DD, UTC)"),
        ("to" = Option<String>, Query, description = "Created on or before this day (YYYY-MM-DD, UTC)"),
        ("profile" = Option<i64>, Query, description = "The threshold profile whose verdicts are shown and filtered"),
        ("verdict" = Option<String>, Query, description = "GO, NO-GO or INCONCLUSIVE (by `profile`, else the default profile)"),
        super::PageParams,
    ),
    responses((status = 200, description = "A page of archived runs", body = ArchivePage)))]
pub async fn query(State(state): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let params = Params::parse(query);
    let (limit, offset) = params.page()?;
    let mut filters = ArchiveFilters::read(|name| params.text(name).unwrap_or_default());
    let profiles = state.store.list_threshold_profiles().await?;
    let (filter, shown) = resolve(&state, &mut filters, &profiles).await?;
    let total = state.store.count_runs_filtered(&filter).await?;
    let items = state.store.list_runs_filtered(&filter, limit, offset).await?;
    let verdicts = verdicts_of(&state, &items, shown.as_ref()).await?;
    let items = items
        .into_iter()
        .map(|item| ArchiveRun {
            verdicts: item
                .run
                .candidate_ids
                .iter()
                .filter_map(|c| {
                    verdicts
                        .iter()
                        .find(|v| v.run_id == item.run.id && v.candidate_id == *c)
                })
                .map(|v| VerdictView {
                    candidate_id: v.candidate_id,
                    verdict: v.verdict.as_str().to_string(),
                    profile_version: v.profile_version,
                    scorecard_id: v.scorecard_id,
                })
                .collect(),
            run: RunListItem::from(item),
        })
        .collect();
    ok(&ArchivePage {
        page: PageInfo { total, limit, offset },
        profile: shown.map(|p| ShownProfileView {
            id: p.id,
            name: p.name,
            current_version: p.current_version,
        }),
        items,
    })
}

/// One column of a comparison: a candidate in a run.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompareEntry {
    /// `RUN:CANDIDATE`, what `baseline` takes.
    pub key: String,
    pub run_id: i64,
    pub candidate: String,
    pub evalset: String,
    /// The eval-set version's short content hash.
    pub version: String,
    pub created: String,
    /// Cases against the baseline (all zero for the baseline itself).
    pub improved: usize,
    pub regressed: usize,
    pub same: usize,
    pub not_comparable: usize,
}

/// One condition the entries were measured under (caliber, load, max tokens, …).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompareCondition {
    pub name: String,
    /// Per entry, in the order of `entries`.
    pub cells: Vec<ConditionCell>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConditionCell {
    pub text: String,
    /// Differs from the baseline's.
    pub differs: bool,
}

/// One figure across the entries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompareFigure {
    /// As the page labels it, e.g. `TTFT p50 @c=4`.
    pub label: String,
    /// How it is measured.
    pub caliber: String,
    /// Per entry, in the order of `entries`.
    pub cells: Vec<FigureCellView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FigureCellView {
    /// The page's text: the value with its interval, formatted, or `—`.
    pub text: String,
    /// The value unformatted (a share as a fraction, ms, tok/s).
    pub value: Option<f64>,
    /// Its 95 % interval (`lo`, `hi`, `confidence`).
    #[schema(value_type = Option<Object>)]
    pub interval: Option<Interval>,
    /// `better` or `worse` than the baseline beyond the noise, or empty.
    pub mark: String,
    /// `baseline`, `yes` (compared with it), `no` (see `not_compared`), or empty (a count).
    pub compared: String,
    /// The change from the entry's baseline (`Δ +3.1 pp` for a share, `Δ −12 %` otherwise),
    /// when compared; else empty.
    pub delta: String,
}

/// What was not compared against the baseline, and why.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NotComparedView {
    /// `RUN:CANDIDATE` of the entry.
    pub key: String,
    pub entry: String,
    pub text: String,
}

/// One case across the entries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompareCase {
    pub case_id: String,
    /// Per entry, in the order of `entries`.
    pub cells: Vec<CaseCell>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CaseCell {
    /// Passed / graded final attempts, or `—`.
    pub text: String,
    /// `baseline`, `improved`, `regressed`, `same` or `not comparable`.
    pub mark: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Comparison {
    /// Grouped by candidate (first appearance), each candidate's entries oldest run first.
    pub entries: Vec<CompareEntry>,
    /// The index into `entries` of the chosen baseline (0 when none was chosen).
    pub baseline: usize,
    /// Each entry's baseline, an index into `entries`: the chosen one; else the oldest run
    /// of the same candidate when it has several; else the first entry.
    pub baselines: Vec<usize>,
    /// Set when the runs used different eval-set versions (cases are matched by id).
    pub version_warning: Option<String>,
    pub conditions: Vec<CompareCondition>,
    pub figures: Vec<CompareFigure>,
    pub not_compared: Vec<NotComparedView>,
    /// Paging of `cases` (`total`: every case compared).
    pub cases_page: PageInfo,
    pub cases: Vec<CompareCase>,
}

/// Runs side by side.
///
/// Every (run, candidate) is an entry with its conditions; figures are compared with the
/// baseline's only when measured alike, and marked better or worse only beyond the noise;
/// `not_compared` says what was left out and why. The figures and marks are the compare page's.
#[utoipa::path(get, operation_id = "compare_runs", path = "/api/v1/archive/compare", tag = "archive",
    params(
        ("runs" = String, Query, description = "The runs' ids, comma-separated (at most 10)"),
        ("baseline" = Option<String>, Query, description = "`RUN:CANDIDATE`, the entry every other is compared with (default: each with the oldest run of its own candidate, else the first entry)"),
        ("limit" = Option<i64>, Query, description = "Cases per page (default 50, at most 500)"),
        ("offset" = Option<i64>, Query, description = "Cases to skip (default 0)"),
    ),
    responses((status = 200, description = "The comparison", body = Comparison)))]
pub async fn compare_runs(State(state): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let (limit, offset) = Params::parse(query.clone()).page()?;
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    let c = compare::compare(&state, &q).await?;
    let total = c.cases.len() as i64;
    ok(&Comparison {
        entries: c
            .entries
            .into_iter()
            .map(|e| CompareEntry {
                key: e.key,
                run_id: e.run_id,
                candidate: e.candidate,
                evalset: e.evalset,
                version: e.version,
                created: e.created,
                improved: e.tally.0,
                regressed: e.tally.1,
                same: e.tally.2,
                not_comparable: e.tally.3,
            })
            .collect(),
        baseline: c.baseline,
        baselines: c.baselines,
        version_warning: c.version_warning,
        conditions: c
            .conditions
            .into_iter()
            .map(|r| CompareCondition {
                name: r.name.to_string(),
                cells: r
                    .cells
                    .into_iter()
                    .map(|(text, differs)| ConditionCell { text, differs })
                    .collect(),
            })
            .collect(),
        figures: c
            .figures
            .into_iter()
            .map(|f| CompareFigure {
                label: f.label,
                caliber: f.caliber.to_string(),
                cells: f
                    .cells
                    .into_iter()
                    .map(|cell| FigureCellView {
                        text: cell.text,
                        value: cell.value,
                        interval: cell.interval,
                        mark: cell.mark.to_string(),
                        compared: cell.compared.to_string(),
                        delta: cell.delta,
                    })
                    .collect(),
            })
            .collect(),
        not_compared: c
            .not_compared
            .into_iter()
            .map(|n| NotComparedView {
                key: n.key,
                entry: n.entry,
                text: n.text,
            })
            .collect(),
        cases_page: PageInfo { total, limit, offset },
        cases: c
            .cases
            .into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(limit as usize)
            .map(|row| CompareCase {
                case_id: row.case_id,
                cells: row
                    .cells
                    .into_iter()
                    .map(|(text, mark)| CaseCell {
                        text,
                        mark: mark.to_string(),
                    })
                    .collect(),
            })
            .collect(),
    })
}

/// One set of conditions the runs were measured under: a series.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistorySeries {
    /// 1-based, as the rows name it.
    pub number: usize,
    pub label: String,
    pub runs: usize,
}

/// One run in the history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryPoint {
    pub run_id: i64,
    pub run_name: String,
    pub date: String,
    /// The eval-set version's short content hash.
    pub version: String,
    /// The series (set of conditions) it belongs to, 1-based.
    pub series: usize,
    /// The page's texts: each figure with its 95 % interval.
    pub concurrency: String,
    pub accuracy: String,
    pub failure_rate: String,
    pub ttft: String,
    pub decode: String,
    pub aggregate: String,
    /// Against the previous run of its series: `regression`, `improvement` or `not-compared`,
    /// each with its words.
    pub flags: Vec<HistoryFlag>,
    /// The figures unformatted (shares as fractions, ms, tok/s, with their intervals).
    #[schema(value_type = Object)]
    pub figures: Figures,
    /// The candidate's verdict in this run (`GO`, `NO-GO`, `INCONCLUSIVE`) by the history's
    /// `verdict_profile`; absent when that run was not judged by it.
    pub verdict: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryFlag {
    pub kind: String,
    pub text: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct History {
    pub candidate_id: i64,
    pub candidate: String,
    pub evalset_id: i64,
    pub evalset: String,
    pub series: Vec<HistorySeries>,
    /// Finished runs, oldest first (the newest 200).
    pub runs: Vec<HistoryPoint>,
    /// Set when older runs were left out.
    pub note: Option<String>,
    /// The threshold profile the runs' verdicts are by: the eval set's own, else the default.
    pub verdict_profile: Option<String>,
}

/// One candidate's figures on one eval set, run after run.
///
/// Finished runs oldest first, each in the series of its conditions and flagged against the
/// previous run of that series only beyond the noise, as on the history page.
#[utoipa::path(get, operation_id = "archive_history", path = "/api/v1/archive/history", tag = "archive",
    params(
        ("candidate" = i64, Query, description = "The candidate's id"),
        ("evalset" = i64, Query, description = "The eval set's id"),
    ),
    responses((status = 200, description = "The history", body = History)))]
pub async fn history_of(State(state): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    let h = history::read(&state, &q, false).await?;
    ok(&History {
        candidate_id: h.candidate_id,
        candidate: h.candidate,
        evalset_id: h.evalset_id,
        evalset: h.evalset,
        series: h
            .series
            .into_iter()
            .map(|s| HistorySeries {
                number: s.number,
                label: s.label,
                runs: s.runs,
            })
            .collect(),
        runs: h
            .rows
            .into_iter()
            .map(|r| HistoryPoint {
                run_id: r.run_id,
                run_name: r.run_name,
                date: r.date,
                version: r.version,
                series: r.series,
                concurrency: r.concurrency,
                accuracy: r.accuracy,
                failure_rate: r.failure_rate,
                ttft: r.ttft,
                decode: r.decode,
                aggregate: r.aggregate,
                flags: r
                    .flags
                    .into_iter()
                    .map(|(kind, text)| HistoryFlag {
                        kind: kind.to_string(),
                        text,
                    })
                    .collect(),
                figures: r.figures,
                verdict: r.verdict.map(|v| v.verdict.to_string()),
            })
            .collect(),
        note: h.note,
        verdict_profile: h.verdict_profile,
    })
}
