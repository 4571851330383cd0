//! `GET /runs/{id}/cases`: the drill-down. A case × candidate grid (each cell the outcome of
//! the candidate's final attempts, in words and colour, linking to them), then every case of
//! the page with its input and expected value and its measured attempts, one line each that
//! expands to the output (escaped, like all model text), grader results and reasons, timings,
//! token counts with their source and the request's token timeline. Filters (candidate,
//! outcome, failures only, error class, tag, text, outputs that differ between candidates) and
//! pagination run on the server: the filters test each case's marks (`domain::case_index`;
//! a terminal run's are stored when it ends, so the store answers a page of them by their key,
//! an unfinished run's are computed from light per-attempt facts; the text search is one
//! query), the shown page's cases are read as outlines (outcome and score, no text), and only
//! the attempts listed (at most `ATTEMPTS_PER_CASE` a case) are read whole. A troubleshooting
//! panel groups the run's failures by class with the ordered checks (symptom → input →
//! environment → parameters → framework limits).
use crate::domain::format::visible_controls;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, RawQuery, State};
use serde::{Deserialize, Serialize};

use crate::domain::calibers::LagSpikes;
use crate::domain::case_index::{CaseQuery, IndexedCase, Mark, MarkKind, MarkTest, NO_CANDIDATE, Outcome, matches};
use crate::domain::evalset::EvalSetFile;
use crate::domain::grading::{case_passed, case_score};
use crate::domain::run::{ErrorClass, Phase, RequestRecord, Run};
use crate::store::{EvalCaseKey, RecordFact, RecordOutline};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id, parse_page};
use crate::web::views::{FormBody, NOT_MEASURED, Pagination, ms, short_hash};

/// Cases per page.
pub const CASES_PER_PAGE: u32 = 10;
/// Most attempts shown per case (failed ones first): a case of a run with many repetitions
/// would otherwise make a page of thousands of outputs.
pub const ATTEMPTS_PER_CASE: usize = 24;

#[derive(Template, WebTemplate)]
#[template(path = "runs/cases.html")]
pub struct CasesPage {
    pub nav: &'static str,
    pub run_id: i64,
    pub run_name: String,
    pub evalset_name: String,
    pub evalset_hash: String,
    pub filters: Filters,
    /// (value, label) of every error class seen in the run, for the filter.
    pub error_classes: Vec<(String, String)>,
    /// Every tag of the run's cases.
    pub tags: Vec<String>,
    /// (id, name) of every candidate of the run, for the filter.
    pub candidates: Vec<(String, String)>,
    pub multi_candidate: bool,
    pub matching: usize,
    pub total_cases: usize,
    /// The grid's column heads (the candidates shown) and its rows (the page's cases).
    pub columns: Vec<String>,
    pub grid: Vec<GridRow>,
    pub cases: Vec<CaseView>,
    pub pager: Pagination,
    pub troubleshooting: Vec<TroubleGroup>,
}

/// The filters as typed (echoed back into the form).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    pub failures: bool,
    pub error_class: String,
    pub tag: String,
    pub differs: bool,
    /// A candidate's id (checked against the run's candidates by the page).
    pub candidate: String,
    /// `pass`, `fail` or `error`: cases where a (the chosen) candidate's final attempts ended so.
    pub outcome: String,
    /// Searched in the case id, its stored input and expected value, and the outputs.
    pub text: String,
}

/// Longest text search accepted (characters).
pub const TEXT_MAX: usize = 200;

impl Filters {
    fn from_query(q: &FormBody) -> Result<Filters, WebError> {
        let on = |name: &str| matches!(q.get(name), Some("on" | "1" | "true"));
        let f = Filters {
            failures: on("failures"),
            error_class: q.get("error_class").unwrap_or_default().trim().to_string(),
            tag: q.get("tag").unwrap_or_default().trim().to_string(),
            differs: on("differs"),
            candidate: q.get("candidate").unwrap_or_default().trim().to_string(),
            outcome: q.get("outcome").unwrap_or_default().trim().to_string(),
            text: q.get("q").unwrap_or_default().trim().to_string(),
        };
        if !f.outcome.is_empty() && Outcome::parse_filter(&f.outcome).is_none() {
            return Err(WebError::BadRequest(format!(
                "outcome: there is no outcome {:?}; choose pass, fail or error.",
                crate::domain::validation::truncate(&f.outcome, 40)
            )));
        }
        if f.text.chars().count() > TEXT_MAX {
            return Err(WebError::BadRequest(format!(
                "q (text search): at most {TEXT_MAX} characters, got {}.",
                f.text.chars().count()
            )));
        }
        if !f.error_class.is_empty() && f.error_class != WRONG_ANSWER && ErrorClass::parse(&f.error_class).is_none() {
            return Err(WebError::BadRequest(format!(
                "There is no error class {:?}; choose one from the list.",
                crate::domain::validation::truncate(&f.error_class, 40)
            )));
        }
        Ok(f)
    }

    /// The query string of these filters (without the page), for pager links.
    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if self.failures {
            q.append_pair("failures", "on");
        }
        if !self.error_class.is_empty() {
            q.append_pair("error_class", &self.error_class);
        }
        if !self.tag.is_empty() {
            q.append_pair("tag", &self.tag);
        }
        if self.differs {
            q.append_pair("differs", "on");
        }
        if !self.candidate.is_empty() {
            q.append_pair("candidate", &self.candidate);
        }
        if !self.outcome.is_empty() {
            q.append_pair("outcome", &self.outcome);
        }
        if !self.text.is_empty() {
            q.append_pair("q", &self.text);
        }
        q.finish()
    }

    pub fn any(&self) -> bool {
        *self != Filters::default()
    }
}

/// The pseudo error class of attempts that succeeded but failed a grader.
pub const WRONG_ANSWER: &str = "wrong_answer";

#[derive(Debug, Clone)]
pub struct CaseView {
    pub id: String,
    pub tags: Vec<String>,
    /// (role, content) of every message sent.
    pub input: Vec<(String, String)>,
    pub expected: Option<String>,
    /// One line, e.g. "2 of 3 attempts failed".
    pub outcome: String,
    pub failed: bool,
    pub attempts: Vec<AttemptView>,
}

#[derive(Debug, Clone)]
pub struct AttemptView {
    pub candidate_id: i64,
    pub candidate: String,
    /// The id a grid cell links to (the candidate's first attempt listed in the case).
    pub anchor: Option<String>,
    /// `score 1.00 · TTFT 40.0 ms · E2E 120 ms · 20 tokens`: the one line shown folded.
    pub summary: String,
    /// Token arrivals over the request (SVG), when it streamed two chunks or more.
    pub token_timeline: Option<String>,
    /// Where its token timeline is drawn when it is not drawn here (`/runs/{id}/timeline?…`).
    pub timeline_href: Option<String>,
    pub phase: &'static str,
    /// The repetition within its load level (the stored number holds level and cycle too).
    pub repetition: u32,
    /// `c=4 · cycle 2` for a load-shape run's attempt; empty for a plain eval run.
    pub level: String,
    pub attempt: u32,
    pub is_final: bool,
    /// Its span (send → end) overlapped one of the harness's lag spikes: its timings may be
    /// late (the harness report says how many were).
    pub lag_spike: bool,
    /// "ok" or the error class.
    pub status: String,
    pub error_detail: Option<String>,
    pub passed: Option<bool>,
    pub grades: Vec<GradeView>,
    /// (label, value) timings.
    pub timings: Vec<(&'static str, String)>,
    /// (label, value) token counts, each with its source.
    pub tokens: Vec<(&'static str, String)>,
    pub finish_reason: String,
    pub http_status: String,
    pub output: String,
    pub reasoning: Option<String>,
    /// What was recognised as reasoning in the content (delimiter, length), if anything.
    pub content_reasoning: Option<String>,
}

#[derive(Debug, Clone)]
pub struct GradeView {
    pub grader: String,
    pub score: String,
    pub passed: bool,
    pub reason: String,
    /// The grade's structured detail, pretty-printed JSON.
    pub detail: Option<String>,
}

/// Failures of one class across the run, with what to check, in order.
#[derive(Debug, Clone)]
pub struct TroubleGroup {
    pub class: String,
    pub attempts: usize,
    pub cases: usize,
    /// Link that filters the drill-down to this class.
    pub href: String,
    pub checks: Vec<String>,
}

pub async fn page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<CasesPage, WebError> {
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    let page = parse_page(q.get("page"))?;
    let filters = Filters::from_query(&q)?;
    let id = parse_id(&raw, "run")?;
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{id}")))?;
    let only_candidate: Option<i64> = match filters.candidate.as_str() {
        "" => None,
        raw => match raw.parse::<i64>().ok().filter(|c| run.candidate_ids.contains(c)) {
            Some(c) => Some(c),
            None => {
                return Err(WebError::BadRequest(format!(
                    "candidate: run #{} has no candidate {:?}; choose one from the list.",
                    run.id,
                    crate::domain::validation::truncate(raw, 40)
                )));
            }
        },
    };
    // The version's header only: the page's own cases are read below, so a 100,000-case set is
    // never read whole for a page of ten.
    let version = state.store.get_evalset_version_head(run.evalset_version_id).await?;
    // As the run measured them (its snapshot), not as they are now.
    let candidates = state.store.run_candidates(run.id).await?;
    let name_of = |id: i64| {
        candidates
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.spec.name.clone())
            .unwrap_or_else(|| format!("candidate #{id}"))
    };
    let index = case_index(&state, &run, filters.differs).await?;
    let found: Option<HashSet<String>> = if filters.text.is_empty() {
        None
    } else {
        Some(
            state
                .store
                .search_run_cases(run.id, run.evalset_version_id, &filters.text)
                .await?
                .into_iter()
                .collect(),
        )
    };
    let chosen = |c: i64| only_candidate.is_none_or(|o| o == c);
    let query = CaseQuery {
        failures: filters.failures,
        error_class: Some(filters.error_class.clone()).filter(|c| !c.is_empty()),
        tag: Some(filters.tag.clone()).filter(|t| !t.is_empty()),
        differs: filters.differs,
        outcome: Outcome::parse_filter(&filters.outcome),
        candidate_id: only_candidate,
    };
    let offset = u64::from(page.saturating_sub(1)) * u64::from(CASES_PER_PAGE);
    let (matching, shown) = index
        .page(
            &state,
            run.id,
            &query.tests(),
            found.as_ref(),
            offset,
            u64::from(CASES_PER_PAGE),
        )
        .await?;

    let base = match filters.query() {
        q if q.is_empty() => format!("/runs/{}/cases", run.id),
        q => format!("/runs/{}/cases?{q}", run.id),
    };
    let pager = Pagination::new(base, page, CASES_PER_PAGE, matching as i64);
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!(
            "page {page} of this run's cases (there are {} pages)",
            pager.pages
        )));
    }
    // The shown cases' attempts as outlines (a case may hold thousands); only the few listed
    // below are read whole.
    let outlines = state.store.list_case_outlines(run.id, &shown).await?;
    let shown_file = match &version {
        Some(v) => Some(EvalSetFile {
            header: v.header.clone(),
            cases: state.store.list_eval_cases_by_ids(v.id, &shown).await?,
        }),
        None => None,
    };
    let set_cases = shown_file.as_ref().map(|f| f.cases.as_slice()).unwrap_or(&[]);
    let harness = state.store.get_run_harness(run.id).await?;
    let spikes = harness.as_ref().map(|h| &h.lag_spikes);
    let mut outlines_by_case: HashMap<&str, Vec<&RecordOutline>> = HashMap::new();
    for o in outlines.iter().filter(|o| !o.fact.is_warmup) {
        outlines_by_case.entry(o.fact.case_id.as_ref()).or_default().push(o);
    }
    let load_run = !matches!(run.config.load, crate::domain::load::LoadShape::Fixed);
    let columns: Vec<i64> = run.candidate_ids.iter().copied().filter(|&c| chosen(c)).collect();

    // Which attempts each case lists, chosen from the outlines.
    let chosen_by_case: Vec<ChosenAttempts> = shown
        .iter()
        .map(|id| {
            let mut mine = outlines_by_case.remove(id.as_str()).unwrap_or_default();
            mine.retain(|o| chosen(o.fact.candidate_id));
            mine.sort_by_key(|o| {
                let f = &o.fact;
                (
                    run.candidate_ids.iter().position(|&c| c == f.candidate_id),
                    f.phase.as_str(),
                    f.repetition,
                    f.attempt,
                )
            });
            // "Failures only" and an error class filter the attempts listed too.
            let listed = |f: &RecordFact| {
                let class = failure_class(f);
                (!filters.failures || class.is_some())
                    && (filters.error_class.is_empty() || class.as_deref() == Some(filters.error_class.as_str()))
            };
            let all: Vec<(&RecordOutline, bool)> = mine
                .iter()
                .filter(|o| listed(&o.fact))
                .map(|o| (*o, failure_class(&o.fact).is_some()))
                .collect();
            // Failed attempts first (up to the cap), then the rest in order; shown in order.
            let mut keep: Vec<usize> = (0..all.len()).filter(|&i| all[i].1).take(ATTEMPTS_PER_CASE).collect();
            keep.extend(
                (0..all.len())
                    .filter(|&i| !all[i].1)
                    .take(ATTEMPTS_PER_CASE - keep.len()),
            );
            keep.sort_unstable();
            ChosenAttempts {
                listed: all.len(),
                kept: keep.into_iter().map(|i| all[i].0).collect(),
                mine,
            }
        })
        .collect();
    let kept_ids: Vec<i64> = chosen_by_case
        .iter()
        .flat_map(|c| c.kept.iter().map(|o| o.id))
        .collect();
    let mut whole: HashMap<i64, RequestRecord> = state
        .store
        .list_records_by_id(run.id, &kept_ids)
        .await?
        .into_iter()
        .collect();

    let mut grid = Vec::new();
    let cases = shown
        .iter()
        .zip(chosen_by_case)
        .enumerate()
        .map(|(row, (id, picked))| {
            let case = set_cases.iter().find(|c| c.id == *id);
            let ChosenAttempts { mine, kept, listed } = picked;
            // The final attempt of each (candidate, phase, repetition) is the one that counts.
            let mut last: HashMap<(i64, Phase, u32), u32> = HashMap::new();
            for o in &mine {
                let f = &o.fact;
                let e = last.entry((f.candidate_id, f.phase, f.repetition)).or_insert(0);
                *e = (*e).max(f.attempt);
            }
            let is_final = |f: &RecordFact| last.get(&(f.candidate_id, f.phase, f.repetition)) == Some(&f.attempt);
            let recorded = mine.len();
            let failed_attempts = mine.iter().filter(|o| failure_class(&o.fact).is_some()).count();
            // The first attempt listed draws its token timeline; the others link to theirs,
            // fetched when opened (a page of 24 attempts a case would otherwise weigh a megabyte).
            // A kept record deleted since its outline was read is left out.
            let attempts: Vec<AttemptView> = kept
                .iter()
                .filter_map(|o| whole.remove(&o.id).map(|r| (o, r)))
                .enumerate()
                .map(|(n, (o, r))| {
                    let linked = (n > 0 && r.chunks.len() >= crate::web::scorecards::charts::TIMELINE_MIN_CHUNKS)
                        .then(|| timeline_href(run.id, &r));
                    attempt_view(&r, name_of(r.candidate_id), is_final(&o.fact), spikes, load_run, linked)
                })
                .collect();
            let mut outcome = if recorded == 0 {
                "not sent yet".to_string()
            } else if failed_attempts == 0 {
                format!("all {recorded} attempts ok")
            } else {
                format!("{failed_attempts} of {recorded} attempts failed")
            };
            if listed < recorded {
                outcome.push_str(&format!(" · {listed} listed by the filters"));
            }
            if attempts.len() < listed {
                outcome.push_str(&format!(" · showing {} of them, failed ones first", attempts.len()));
            }
            let anchor = |c: i64| format!("a-{row}-{c}");
            grid.push(GridRow {
                case_id: id.clone(),
                href: format!("#case-{id}"),
                cells: columns
                    .iter()
                    .map(|&c| {
                        let finals: Vec<&RecordOutline> = mine
                            .iter()
                            .copied()
                            .filter(|o| o.fact.candidate_id == c && is_final(&o.fact))
                            .collect();
                        let linked = attempts.iter().any(|a| a.candidate_id == c);
                        grid_cell(name_of(c), &finals, linked.then(|| format!("#{}", anchor(c))))
                    })
                    .collect(),
            });
            let mut seen: HashSet<i64> = HashSet::new();
            let attempts = attempts
                .into_iter()
                .map(|mut a| {
                    // The first listed attempt of each candidate is where its grid cell leads.
                    if seen.insert(a.candidate_id) {
                        a.anchor = Some(anchor(a.candidate_id));
                    }
                    a
                })
                .collect();
            CaseView {
                id: id.clone(),
                tags: case.map(|c| c.tags.clone()).unwrap_or_default(),
                input: match (case, shown_file.as_ref()) {
                    (Some(c), Some(f)) => f
                        .messages_for(c)
                        .into_iter()
                        .map(|m| (m.role, visible_controls(&m.content).into_owned()))
                        .collect(),
                    _ => Vec::new(),
                },
                expected: case
                    .and_then(|c| c.expected_text())
                    .map(|e| visible_controls(&e).into_owned()),
                failed: failed_attempts > 0,
                outcome,
                attempts,
            }
        })
        .collect();

    let troubleshooting = index
        .head
        .classes
        .iter()
        .map(|(class, attempts, cases)| TroubleGroup {
            class: class.clone(),
            attempts: *attempts,
            cases: *cases,
            href: format!("/runs/{}/cases?error_class={class}", run.id),
            checks: checks_for(class),
        })
        .collect();
    let mut error_classes: Vec<(String, String)> = index
        .head
        .classes
        .iter()
        .map(|(c, _, _)| (c.clone(), c.clone()))
        .collect();
    if !filters.error_class.is_empty() && !index.head.classes.iter().any(|(c, _, _)| *c == filters.error_class) {
        error_classes.push((filters.error_class.clone(), filters.error_class.clone()));
    }

    Ok(CasesPage {
        nav: "runs",
        run_id: run.id,
        run_name: run.name.clone(),
        evalset_name: version
            .as_ref()
            .map(|v| v.header.name.clone())
            .unwrap_or_else(|| format!("eval set version #{}", run.evalset_version_id)),
        evalset_hash: version
            .as_ref()
            .map(|v| short_hash(&v.content_hash).to_string())
            .unwrap_or_default(),
        filters,
        error_classes,
        tags: index.head.tags,
        candidates: run.candidate_ids.iter().map(|&c| (c.to_string(), name_of(c))).collect(),
        multi_candidate: run.candidate_ids.len() > 1,
        matching: matching as usize,
        total_cases: index.head.total,
        columns: columns.iter().map(|&c| name_of(c)).collect(),
        grid,
        cases,
        pager,
        troubleshooting,
    })
}

/// The attempts of one shown case: every measured one (the page's candidates, in order) and
/// the ones listed, of which `kept` are shown.
struct ChosenAttempts<'a> {
    mine: Vec<&'a RecordOutline>,
    /// How many the filters list.
    listed: usize,
    kept: Vec<&'a RecordOutline>,
}

/// A measured attempt's failure class: its error class, `wrong_answer` when a grader failed
/// it, None when it did not fail.
fn failure_class(f: &RecordFact) -> Option<String> {
    match (f.error_class, f.passed) {
        (Some(c), _) => Some(c.as_str().to_string()),
        (None, Some(false)) => Some(WRONG_ANSWER.to_string()),
        _ => None,
    }
}

/// One case of the grid: a cell per candidate shown.
#[derive(Debug, Clone)]
pub struct GridRow {
    pub case_id: String,
    pub href: String,
    pub cells: Vec<GridCell>,
}

/// A candidate's final attempts at a case, in words (never colour alone).
#[derive(Debug, Clone)]
pub struct GridCell {
    pub candidate: String,
    /// `pass`, `fail`, `error`, `ungraded` or `none` (nothing sent): the cell's colour.
    pub outcome: &'static str,
    /// `✓ pass`, `✗ fail`, `⚠ http_5xx`, `not graded`, `not sent`.
    pub label: String,
    /// `score 1.00`, `2 of 3 passed · score 0.67`; empty when there is no score.
    pub detail: String,
    /// Where its attempts are listed on this page (None: filtered out or none).
    pub href: Option<String>,
}

fn grid_cell(candidate: String, finals: &[&RecordOutline], href: Option<String>) -> GridCell {
    let succeeded = |o: &RecordOutline| o.fact.error_class.is_none();
    let outcome = finals.iter().map(|o| Outcome::of(!succeeded(o), o.fact.passed)).max();
    let label = match outcome {
        None => "not sent".to_string(),
        Some(Outcome::Pass) => "✓ pass".into(),
        Some(Outcome::Fail) => "✗ fail".into(),
        Some(Outcome::Ungraded) => "not graded".into(),
        Some(Outcome::Error) => format!(
            "⚠ {}",
            finals
                .iter()
                .find_map(|o| o.fact.error_class)
                .map_or("error", |c| c.as_str())
        ),
    };
    // Graded: a failed request counts as a wrong answer scoring 0 (as on the scorecard); a
    // case without graders has no pass count or score to give.
    let graded = finals.iter().any(|o| succeeded(o) && o.fact.passed.is_some());
    let mut detail = Vec::new();
    if graded {
        if finals.len() > 1 {
            let passed = finals
                .iter()
                .filter(|o| succeeded(o) && o.fact.passed == Some(true))
                .count();
            detail.push(format!("{passed} of {} passed", finals.len()));
        }
        let scores: Vec<f64> = finals
            .iter()
            .filter_map(|o| if succeeded(o) { o.score } else { Some(0.0) })
            .collect();
        if !scores.is_empty() {
            detail.push(format!("score {:.2}", scores.iter().sum::<f64>() / scores.len() as f64));
        }
    } else if finals.len() > 1 {
        let failed = finals.iter().filter(|o| !succeeded(o)).count();
        detail.push(format!("{failed} of {} failed", finals.len()));
    }
    GridCell {
        candidate,
        outcome: outcome.map_or("none", Outcome::as_str),
        label,
        detail: detail.join(" · "),
        href,
    }
}

/// What the filters know of a run's cases, without its records.
#[derive(Clone)]
pub(super) struct CaseIndex {
    head: CaseIndexHead,
    /// Every case with its marks, in page order; None when they are stored (a terminal run's
    /// whose index was computed before: read a page at a time by the store).
    cases: Option<std::sync::Arc<Vec<IndexedCase>>>,
}

/// The part of a run's case index kept whole: small however many cases the run has.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CaseIndexHead {
    /// (class, failed attempts, cases), by class name.
    classes: Vec<(String, usize, usize)>,
    /// Every tag of the eval set version's cases, sorted.
    tags: Vec<String>,
    /// The run's cases: its eval set's (its case limit applied) and any recorded case the
    /// version does not list.
    total: usize,
}

/// Cache kind of a terminal run's [`CaseIndexHead`]; its cases are stored beside it
/// ([`crate::store::Store::save_run_cases`]).
pub(crate) const CASE_INDEX_KIND: &str = "case-index/3";

impl CaseIndex {
    /// The cases passing every test and found by the text search (None: no search), in page
    /// order: how many, and the ids of those from `offset` on (at most `most`).
    async fn page(
        &self,
        state: &AppState,
        run_id: i64,
        tests: &[MarkTest],
        found: Option<&HashSet<String>>,
        offset: u64,
        most: u64,
    ) -> Result<(u64, Vec<String>), WebError> {
        let page_of = |ids: Vec<String>| {
            let shown = ids.iter().skip(offset as usize).take(most as usize).cloned().collect();
            (ids.len() as u64, shown)
        };
        let searched = |id: &String| found.is_none_or(|f| f.contains(id));
        Ok(match (&self.cases, found) {
            (Some(cases), _) => page_of(
                cases
                    .iter()
                    .filter(|c| matches(tests, c) && searched(&c.case_id))
                    .map(|c| c.case_id.clone())
                    .collect(),
            ),
            (None, None) => state.store.page_run_cases(run_id, tests, Some((offset, most))).await?,
            // The text search has read the whole run already: its matches are paged here.
            (None, Some(_)) => {
                let (_, all) = state.store.page_run_cases(run_id, tests, None).await?;
                page_of(all.into_iter().filter(searched).collect())
            }
        })
    }
}

/// The run's case index: stored for a terminal run (computed in full once), computed from the
/// stored facts for an unfinished one (the differing-outputs query only when asked).
pub(super) async fn case_index(state: &AppState, run: &Run, want_differing: bool) -> Result<CaseIndex, WebError> {
    let cacheable = crate::app::runs::summaries_are_stored(run);
    if cacheable && let Some(body) = state.store.get_run_summary(run.id, CASE_INDEX_KIND).await? {
        match serde_json::from_str::<CaseIndexHead>(&body) {
            Ok(head) => return Ok(CaseIndex { head, cases: None }),
            Err(e) => tracing::warn!(run_id = run.id, error = %e, "stored case index unreadable; recomputing"),
        }
    }
    // An unfinished run's is read from every record's facts: shared by its views (apart with
    // and without the differing-outputs marks, which cost a query of their own).
    use crate::app::live::Live;
    static LIVE: [Live<CaseIndex>; 2] = [Live::new(), Live::new()];
    LIVE[usize::from(want_differing)]
        .for_run(&state.store, run, computed_case_index(state, run, want_differing))
        .await
}

/// The run's case index from its records' facts; stored for a terminal run.
async fn computed_case_index(state: &AppState, run: &Run, want_differing: bool) -> Result<CaseIndex, WebError> {
    // Every record's facts are a read as big as a candidate's records: it takes their place.
    let _place = crate::app::runs::record_holder_place().await;
    let cacheable = crate::app::runs::summaries_are_stored(run);
    let facts: Vec<RecordFact> = state
        .store
        .list_record_facts(run.id)
        .await?
        .into_iter()
        .filter(|f| !f.is_warmup)
        .collect();
    let keys = state.store.list_eval_case_keys(run.evalset_version_id).await?;
    let differing = if cacheable || want_differing {
        Some(differing_cases(state, run.id, &facts).await?)
    } else {
        None
    };
    let limit = run.config.case_limit.map(|n| n as usize).unwrap_or(usize::MAX);
    let (head, cases) = index_cases(&keys, limit, &facts, differing.as_deref());
    if cacheable {
        match serde_json::to_string(&head) {
            Ok(body) => {
                state
                    .store
                    .save_run_cases(run.id, &cases, CASE_INDEX_KIND, &body)
                    .await?
            }
            Err(e) => tracing::warn!(run_id = run.id, error = %e, "could not store the case index"),
        }
    }
    Ok(CaseIndex {
        head,
        cases: Some(std::sync::Arc::new(cases)),
    })
}

/// The final attempt of each (case, candidate, phase, repetition): its highest, the first of
/// them given when several share it. Found on sorted pointers, not a map keyed by request: a
/// million facts' map, rehashed as it grew, held 129 MB; the pointers hold 8.
fn final_facts(facts: &[RecordFact]) -> impl Iterator<Item = &RecordFact> {
    fn request(f: &RecordFact) -> (&str, i64, &str, u32) {
        (&f.case_id, f.candidate_id, f.phase.as_str(), f.repetition)
    }
    let mut sorted: Vec<&RecordFact> = facts.iter().collect();
    // Within a request, the highest attempt first, and of equal ones the earliest given (the
    // facts are one slice: address order is the order given).
    sorted.sort_unstable_by(|a, b| {
        request(a)
            .cmp(&request(b))
            .then(b.attempt.cmp(&a.attempt))
            .then(std::ptr::from_ref(*a).cmp(&std::ptr::from_ref(*b)))
    });
    sorted.dedup_by(|later, kept| request(later) == request(kept));
    sorted.into_iter()
}

/// A run's cases in page order with their marks: the version's cases (`keys`, in eval-set
/// order) up to `limit`, then any recorded case the version does not list, by id
/// (kept visible rather than dropped); marked from the measured attempts' `facts` and the
/// cases whose outputs differ between candidates (None: not computed).
fn index_cases(
    keys: &[EvalCaseKey],
    limit: usize,
    facts: &[RecordFact],
    differing: Option<&[String]>,
) -> (CaseIndexHead, Vec<IndexedCase>) {
    let listed: HashSet<&str> = keys.iter().map(|k| k.id.as_str()).collect();
    let extra: BTreeSet<&str> = facts
        .iter()
        .map(|f| f.case_id.as_ref())
        .filter(|id| !listed.contains(id))
        .collect();
    let order: Vec<(&str, &[String])> = keys
        .iter()
        .take(limit)
        .map(|k| (k.id.as_str(), k.tags.as_slice()))
        .chain(extra.into_iter().map(|id| (id, &[] as &[String])))
        .collect();
    let place: HashMap<&str, usize> = order.iter().enumerate().map(|(i, (id, _))| (*id, i)).collect();
    let mut marks: Vec<BTreeSet<Mark>> = vec![BTreeSet::new(); order.len()];
    let mut mark = |case: &str, kind, value: &str, candidate_id| {
        // A recorded case past the run's case limit is not on the page.
        if let Some(&i) = place.get(case) {
            marks[i].insert(Mark {
                kind,
                value: value.to_string(),
                candidate_id,
            });
        }
    };
    for (id, tags) in &order {
        for tag in tags.iter() {
            mark(id, MarkKind::Tag, tag, NO_CANDIDATE);
        }
    }
    let mut classes: BTreeMap<String, (usize, HashSet<&str>)> = BTreeMap::new();
    for f in facts {
        let Some(class) = failure_class(f) else {
            continue;
        };
        mark(&f.case_id, MarkKind::Failure, &class, f.candidate_id);
        let entry = classes.entry(class).or_default();
        entry.0 += 1;
        entry.1.insert(f.case_id.as_ref());
    }
    let mut outcomes: HashMap<(&str, i64), Outcome> = HashMap::new();
    for f in final_facts(facts) {
        let outcome = Outcome::of(f.error_class.is_some(), f.passed);
        let worst = outcomes.entry((f.case_id.as_ref(), f.candidate_id)).or_insert(outcome);
        *worst = (*worst).max(outcome);
    }
    for ((case, candidate), outcome) in outcomes {
        mark(case, MarkKind::Outcome, outcome.as_str(), candidate);
    }
    for case in differing.into_iter().flatten() {
        mark(case, MarkKind::Differs, "", NO_CANDIDATE);
    }
    let tags: BTreeSet<&String> = keys.iter().flat_map(|k| &k.tags).collect();
    let head = CaseIndexHead {
        classes: classes
            .into_iter()
            .map(|(class, (attempts, cases))| (class, attempts, cases.len()))
            .collect(),
        tags: tags.into_iter().cloned().collect(),
        total: order.len(),
    };
    let cases = order
        .iter()
        .zip(marks)
        .map(|((id, _), marks)| IndexedCase {
            case_id: id.to_string(),
            marks: marks.into_iter().collect(),
        })
        .collect();
    (head, cases)
}

/// Attempts compared in one statement of [`differing_cases`] (or fewer: at most
/// `CASES_PER_DIFFERING_STATEMENT` cases, at least one case).
const ATTEMPTS_PER_DIFFERING_STATEMENT: usize = 5_000;
const CASES_PER_DIFFERING_STATEMENT: usize = 1_000;

/// The run's cases whose outputs differ between candidates, by case id, asked a batch of
/// cases at a time: one grouped read of all of a million-attempt run answered only after
/// reading all of it (1.2 s on PostgreSQL), a run or two from the bound on one answer.
async fn differing_cases(state: &AppState, run_id: i64, facts: &[RecordFact]) -> Result<Vec<String>, WebError> {
    let mut attempts_by_case: BTreeMap<&str, usize> = BTreeMap::new();
    for f in facts {
        *attempts_by_case.entry(f.case_id.as_ref()).or_default() += 1;
    }
    let mut differing = Vec::new();
    let mut batch: Vec<String> = Vec::new();
    let mut attempts = 0;
    for (case, n) in attempts_by_case {
        if !batch.is_empty()
            && (attempts + n > ATTEMPTS_PER_DIFFERING_STATEMENT || batch.len() == CASES_PER_DIFFERING_STATEMENT)
        {
            differing.extend(state.store.cases_with_differing_outputs(run_id, &batch).await?);
            batch.clear();
            attempts = 0;
        }
        batch.push(case.to_string());
        attempts += n;
    }
    differing.extend(state.store.cases_with_differing_outputs(run_id, &batch).await?);
    Ok(differing)
}

/// The ordered checks for a failure class; wrong answers get their own.
fn checks_for(class: &str) -> Vec<String> {
    let joined = match ErrorClass::parse(class) {
        Some(c) => crate::engine::run::rollout::checks(c),
        None => "(1) symptom: an answer came back but a grader failed it — read the reason beside each grade; \
                 (2) input: the prompt, the expected value and whether the grader fits the task (e.g. exact vs contains, number formats); \
                 (3) environment: the right model behind the endpoint (its reported name), a system prompt added by a proxy; \
                 (4) parameters: temperature, max_tokens cutting the answer (finish reason \"length\"), stop sequences; \
                 (5) framework limits: chat template, context truncation, quantization"
            .to_string(),
    };
    joined
        .split("; (")
        .map(|s| s.trim_start_matches('(').to_string())
        .map(|s| {
            // "1) symptom: …" → "symptom: …"
            match s.split_once(") ") {
                Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest.to_string(),
                _ => s,
            }
        })
        .collect()
}

/// The fragment URL of one attempt's token timeline.
fn timeline_href(run_id: i64, r: &RequestRecord) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("candidate", &r.candidate_id.to_string())
        .append_pair("case", &r.case_id)
        .append_pair("phase", r.phase.as_str())
        .append_pair("repetition", &r.repetition.to_string())
        .append_pair("attempt", &r.attempt.to_string());
    format!("/runs/{run_id}/timeline?{}", q.finish())
}

/// One attempt's token timeline, as the cases page draws it.
#[derive(Template, WebTemplate)]
#[template(path = "runs/timeline.html")]
pub struct TimelineFragment {
    /// None: the attempt streamed too few chunks to draw (said in words).
    pub svg: Option<String>,
}

/// `GET /runs/{id}/timeline?candidate=…&case=…&phase=…&repetition=…&attempt=…`: the token
/// timeline of one attempt (fetched when the attempt is opened on the cases page; readable on
/// its own without JavaScript). Reads only that case's records.
pub async fn timeline(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<TimelineFragment, WebError> {
    let id = parse_id(&raw, "run")?;
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    let number = |name: &str| -> Result<i64, WebError> {
        q.get(name)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .ok_or_else(|| WebError::BadRequest(format!("{name}: a whole number is needed.")))
    };
    let (candidate, repetition, attempt) = (number("candidate")?, number("repetition")?, number("attempt")?);
    let phase = q
        .get("phase")
        .and_then(Phase::parse)
        .ok_or_else(|| WebError::BadRequest("phase: there is no such phase.".into()))?;
    let case = q.get("case").unwrap_or_default().to_string();
    let missing = || WebError::NotFound(format!("that attempt of run #{id}"));
    // The case's outlines find the attempt; only that record is read whole.
    let outlines = state.store.list_case_outlines(id, std::slice::from_ref(&case)).await?;
    let wanted = outlines
        .iter()
        .find(|o| {
            let f = &o.fact;
            f.candidate_id == candidate
                && f.phase == phase
                && i64::from(f.repetition) == repetition
                && i64::from(f.attempt) == attempt
        })
        .ok_or_else(missing)?;
    let (_, r) = state
        .store
        .list_records_by_id(id, &[wanted.id])
        .await?
        .pop()
        .ok_or_else(missing)?;
    Ok(TimelineFragment {
        svg: crate::web::scorecards::charts::token_timeline(&r.chunks),
    })
}

fn attempt_view(
    r: &RequestRecord,
    candidate: String,
    is_final: bool,
    spikes: Option<&LagSpikes>,
    load_run: bool,
    timeline_href: Option<String>,
) -> AttemptView {
    let (level, repetition, cycle) = crate::domain::run::split_repetition(r.repetition);
    let mut load = Vec::new();
    if load_run {
        load.push(match r.concurrency {
            0 => format!("level {}", level + 1),
            c => format!("c={c}"),
        });
    }
    if cycle > 0 {
        load.push(format!("cycle {cycle}"));
    }
    let msf = |us: Option<i64>| ms(us.map(|v| v as f64 / 1000.0));
    let count = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| NOT_MEASURED.to_string());
    let source = r.output_tokens_source.map(|s| s.as_str()).unwrap_or("unknown");
    let mut summary = Vec::new();
    if let Some(score) = case_score(&r.grades).filter(|_| r.succeeded()) {
        summary.push(format!("score {score:.2}"));
    }
    summary.push(format!("TTFT {}", msf(r.ttft_us())));
    summary.push(format!("E2E {}", msf(r.end_us.get())));
    summary.push(format!("{} tokens", count(r.output_tokens)));
    AttemptView {
        candidate_id: r.candidate_id,
        candidate,
        anchor: None,
        summary: summary.join(" · "),
        // Drawn here unless it is linked (then drawn when opened).
        token_timeline: match timeline_href {
            None => crate::web::scorecards::charts::token_timeline(&r.chunks),
            Some(_) => None,
        },
        timeline_href,
        phase: r.phase.as_str(),
        repetition,
        level: load.join(" · "),
        attempt: r.attempt,
        is_final,
        lag_spike: spikes.is_some_and(|s| s.marks(r)),
        status: r
            .error_class
            .map(|c| c.as_str().to_string())
            .unwrap_or_else(|| "ok".into()),
        error_detail: r.error_detail().map(|d| visible_controls(d).into_owned()),
        passed: if r.succeeded() {
            case_passed(&r.grades)
        } else {
            Some(false)
        },
        grades: r
            .grades
            .iter()
            .map(|g| GradeView {
                // Weight and optional shown where they differ from the defaults.
                grader: match (g.weight != 1.0, g.required) {
                    (false, true) => g.grader.to_string(),
                    (true, true) => format!("{} · weight {}", g.grader, g.weight),
                    (false, false) => format!("{} · optional", g.grader),
                    (true, false) => format!("{} · weight {} · optional", g.grader, g.weight),
                },
                score: format!("{:.3}", g.score),
                passed: g.passed,
                reason: visible_controls(&g.reason).into_owned(),
                detail: g
                    .detail
                    .as_ref()
                    .map(|d| serde_json::to_string_pretty(d).unwrap_or_else(|_| d.to_string())),
            })
            .collect(),
        timings: vec![
            ("client queue", msf(Some(r.client_queue_us))),
            (
                "connect",
                match (r.connect_us.get(), r.connection_reused) {
                    (_, Some(true)) => "reused".to_string(),
                    (us, _) => msf(us),
                },
            ),
            ("headers", msf(r.headers_us.get())),
            ("TTFT", msf(r.ttft_us())),
            ("TTFA", msf(r.first_content_us.get())),
            ("last token", msf(r.last_token_us.get())),
            ("E2E", msf(r.end_us.get())),
        ],
        tokens: vec![
            ("input", format!("{} (server usage)", count(r.input_tokens))),
            ("output", format!("{} (from {source})", count(r.output_tokens))),
            (
                "output, o200k",
                format!("{} (bakeoff's tokenizer)", count(r.canonical_tokens)),
            ),
            ("reasoning", count(r.reasoning_tokens)),
            ("output characters", r.output_chars.to_string()),
            ("chunks", r.chunks.len().to_string()),
        ],
        finish_reason: r
            .finish_reason
            .as_deref()
            .map(|f| visible_controls(f).into_owned())
            .unwrap_or_else(|| NOT_MEASURED.into()),
        http_status: r
            .http_status
            .map(|s| s.to_string())
            .unwrap_or_else(|| NOT_MEASURED.into()),
        // Control characters made visible; askama escapes the rest.
        output: visible_controls(r.output()).into_owned(),
        reasoning: r
            .reasoning()
            .filter(|s| !s.is_empty())
            .map(|s| visible_controls(s).into_owned()),
        content_reasoning: r.content_reasoning().map(|c| {
            format!(
                "Reasoning recognised in the content: {}; {} characters of reasoning moved out of the answer \
                 (graders read the answer only unless the eval set sets grade_reasoning).",
                c.describe(),
                r.reasoning_chars()
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_come_in_the_five_steps_in_order_leaving_out_what_cannot_apply() {
        let steps = ["symptom", "input", "environment", "parameters", "framework"];
        for class in ErrorClass::ALL.iter().map(|c| c.as_str()).chain([WRONG_ANSWER]) {
            let checks = checks_for(class);
            let at: Vec<usize> = checks
                .iter()
                .map(|c| {
                    steps
                        .iter()
                        .position(|s| c.starts_with(s))
                        .unwrap_or_else(|| panic!("{class}: {c}"))
                })
                .collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{class}: in order: {checks:?}");
            assert!(
                at.starts_with(&[0]) && at.contains(&2),
                "{class}: symptom and environment: {checks:?}"
            );
        }
        assert_eq!(checks_for(WRONG_ANSWER).len(), 5);
        assert_eq!(checks_for("connect_refused").len(), 2, "nothing reached the server");
    }
}
