//! Blind pairwise comparison of two candidates of a run: the answers side by side, sides drawn
//! at random (`domain::review::pairwise::a_on_left`), names hidden; the choice is posted as the
//! side picked and the server works out whose answer it was. Results are win rates with exact
//! intervals and the "challenger not worse than incumbent at 95 %" rule.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::response::Redirect;
use serde::Deserialize;

use crate::app::review::{self as use_case, PairView};
use crate::domain::review::pairwise::{self, Choice, NOT_WORSE_MARGIN};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::views::FormBody;

/// One ordered pair's win rate as the queue page lists it.
#[derive(Debug, Clone)]
pub struct WinRateRow {
    pub challenger: String,
    pub incumbent: String,
    pub wins: u64,
    pub losses: u64,
    pub ties: u64,
    pub rate: String,
    pub interval: String,
    pub p_value: String,
    pub not_worse: &'static str,
}

pub async fn win_rate_rows(
    state: &AppState,
    run_id: i64,
    names: &[(i64, String)],
) -> Result<Vec<WinRateRow>, WebError> {
    let name = |id: i64| {
        names
            .iter()
            .find(|(c, _)| *c == id)
            .map_or_else(|| format!("#{id}"), |(_, n)| n.clone())
    };
    Ok(use_case::win_rates(&state.store, run_id, false)
        .await?
        .into_iter()
        .map(|w| WinRateRow {
            challenger: name(w.challenger),
            incumbent: name(w.incumbent),
            wins: w.wins,
            losses: w.losses,
            ties: w.ties,
            rate: w
                .rate
                .map_or_else(|| "—".to_string(), |r| format!("{:.0} %", r * 100.0)),
            interval: w.interval.map_or_else(
                || "—".to_string(),
                |i| format!("{:.0}–{:.0} %", i.lo * 100.0, i.hi * 100.0),
            ),
            p_value: format!("{:.3}", w.p_value),
            not_worse: w.not_worse.as_str(),
        })
        .collect())
}

#[derive(Debug, Deserialize, Default)]
pub struct PairQuery {
    #[serde(default)]
    pub a: Option<i64>,
    #[serde(default)]
    pub b: Option<i64>,
}

#[derive(Template, WebTemplate)]
#[template(path = "review/compare.html")]
pub struct ComparePage {
    pub nav: &'static str,
    pub run_id: i64,
    pub run_name: String,
    pub candidates: Vec<(i64, String)>,
    pub a: Option<i64>,
    pub b: Option<i64>,
    /// None once every case both answered is compared (or no pair is chosen).
    pub pair: Option<PairView>,
    pub margin_pct: f64,
}

pub async fn page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Query(q): Query<PairQuery>,
) -> Result<ComparePage, WebError> {
    let id = parse_id(&raw, "run")?;
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{id}")))?;
    let candidates: Vec<(i64, String)> = state
        .store
        .run_candidates(id)
        .await?
        .into_iter()
        .map(|c| (c.id, c.spec.name))
        .collect();
    let pair = match (q.a, q.b) {
        (Some(a), Some(b)) if a != b => {
            use_case::next_pair(&state.store, id, a, b, &crate::web::security::actor()).await?
        }
        _ => None,
    };
    Ok(ComparePage {
        nav: "runs",
        run_id: id,
        run_name: run.name,
        candidates,
        a: q.a,
        b: q.b,
        pair,
        margin_pct: NOT_WORSE_MARGIN * 100.0,
    })
}

fn candidate_field(form: &FormBody, name: &str) -> Result<i64, WebError> {
    form.get(name)
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| WebError::BadRequest(format!("The form lacks the candidate `{name}`.")))
}

/// Records the side picked: the sides are worked out again from the run, the case and the pair,
/// so the page never carries which candidate was shown where.
pub async fn choose(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    form: FormBody,
) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    let (a, b) = (candidate_field(&form, "a")?, candidate_field(&form, "b")?);
    let case_id = form
        .get("case_id")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| WebError::BadRequest("The form lacks the case compared.".into()))?;
    let choice = form
        .get("choice")
        .and_then(Choice::parse)
        .ok_or_else(|| WebError::BadRequest("Choose left, right or tie.".into()))?;
    let (left, right) = if pairwise::a_on_left(id as u64, case_id, a, b) {
        (a, b)
    } else {
        (b, a)
    };
    use_case::record_preference(
        &state.store,
        id,
        case_id,
        left,
        right,
        choice,
        &crate::web::security::actor(),
    )
    .await?;
    Ok(Redirect::to(&format!("/runs/{id}/review/compare?a={a}&b={b}")))
}

/// Has an LLM judge compare two candidates blind, each case in both orders.
pub async fn judge_pairs(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    form: FormBody,
) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    let (a, b) = (candidate_field(&form, "a")?, candidate_field(&form, "b")?);
    let judge = form
        .get("judge")
        .map(str::trim)
        .filter(|j| !j.is_empty())
        .ok_or_else(|| WebError::BadRequest("Name the judge candidate.".into()))?;
    let most = form
        .get("most")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(50)
        .clamp(1, 500);
    use_case::judge_pairs(&state.store, id, a, b, judge, most, &crate::web::security::actor()).await?;
    Ok(Redirect::to(&super::calibration_href(judge)))
}
