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
use std::collections::{HashMap, HashSet};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, RawQuery, State};

pub use crate::app::pages::case_index::WRONG_ANSWER;
use crate::app::pages::case_index::{case_index, failure_class};
use crate::app::pages::run_page::candidate_name;
use crate::domain::calibers::LagSpikes;
use crate::domain::candidate::Candidate;
use crate::domain::case_index::{CaseQuery, Outcome};
use crate::domain::evalset::EvalSetFile;
use crate::domain::grading::{case_passed, case_score};
use crate::domain::run::{ErrorClass, Phase, RequestRecord, Run};
use crate::store::{RecordFact, RecordOutline};
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
    let only_candidate = only_candidate(&run, &filters)?;
    // The version's header only: the page's own cases are read below, so a 100,000-case set is
    // never read whole for a page of ten.
    let version = state.store.get_evalset_version_head(run.evalset_version_id).await?;
    // As the run measured them (its snapshot), not as they are now.
    let candidates = state.store.run_candidates(run.id).await?;
    let name_of = |id: i64| candidate_name(&candidates, id);
    let index = case_index(&state.store, &state.views.case_index, &run, filters.differs).await?;
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
            &state.store,
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
    let (shown_cases, whole) =
        ShownCases::read(&state, &run, version.as_ref(), &shown, &filters, only_candidate).await?;
    let (grid, cases) = shown_cases.views(&run, &candidates, &shown, whole);
    let columns = shown_cases.columns;

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
        error_classes: error_classes(&index.head.classes, &filters),
        troubleshooting: troubleshooting(run.id, &index.head.classes),
        filters,
        tags: index.head.tags,
        candidates: run.candidate_ids.iter().map(|&c| (c.to_string(), name_of(c))).collect(),
        multi_candidate: run.candidate_ids.len() > 1,
        matching: matching as usize,
        total_cases: index.head.total,
        columns: columns.iter().map(|&c| name_of(c)).collect(),
        grid,
        cases,
        pager,
    })
}

/// The candidate the filters name (None: every one); one the run does not have is refused.
fn only_candidate(run: &Run, filters: &Filters) -> Result<Option<i64>, WebError> {
    match filters.candidate.as_str() {
        "" => Ok(None),
        raw => match raw.parse::<i64>().ok().filter(|c| run.candidate_ids.contains(c)) {
            Some(c) => Ok(Some(c)),
            None => Err(WebError::BadRequest(format!(
                "candidate: run #{} has no candidate {:?}; choose one from the list.",
                run.id,
                crate::domain::validation::truncate(raw, 40)
            ))),
        },
    }
}

/// The troubleshooting panel: the run's failures by class (`classes`: class, failed attempts,
/// cases), each with what to check, in order.
fn troubleshooting(run_id: i64, classes: &[(String, usize, usize)]) -> Vec<TroubleGroup> {
    classes
        .iter()
        .map(|(class, attempts, cases)| TroubleGroup {
            class: class.clone(),
            attempts: *attempts,
            cases: *cases,
            href: format!("/runs/{run_id}/cases?error_class={class}"),
            checks: checks_for(class),
        })
        .collect()
}

/// The error-class filter's choices: the run's classes, and the one asked for if it has none.
fn error_classes(classes: &[(String, usize, usize)], filters: &Filters) -> Vec<(String, String)> {
    let mut choices: Vec<(String, String)> = classes.iter().map(|(c, _, _)| (c.clone(), c.clone())).collect();
    if !filters.error_class.is_empty() && !classes.iter().any(|(c, _, _)| *c == filters.error_class) {
        choices.push((filters.error_class.clone(), filters.error_class.clone()));
    }
    choices
}

/// What the page's shown cases are drawn from: their attempts as outlines (a case may hold
/// thousands) and their eval-set cases.
struct ShownCases {
    /// The shown cases' eval-set file (its header and those cases alone).
    file: Option<EvalSetFile>,
    harness: Option<crate::domain::calibers::HarnessReport>,
    outlines: Vec<RecordOutline>,
    /// The candidates shown, as the grid's columns.
    columns: Vec<i64>,
    filters: Filters,
}

impl ShownCases {
    async fn read(
        state: &AppState,
        run: &Run,
        version: Option<&crate::store::EvalSetVersionHead>,
        shown: &[String],
        filters: &Filters,
        only_candidate: Option<i64>,
    ) -> Result<(ShownCases, HashMap<i64, RequestRecord>), WebError> {
        // The shown cases' attempts as outlines; only the few listed below are read whole.
        let outlines = state.store.list_case_outlines(run.id, shown).await?;
        let file = match version {
            Some(v) => Some(EvalSetFile {
                header: v.header.clone(),
                cases: state.store.list_eval_cases_by_ids(v.id, shown).await?,
            }),
            None => None,
        };
        let harness = state.store.get_run_harness(run.id).await?;
        let columns: Vec<i64> = run
            .candidate_ids
            .iter()
            .copied()
            .filter(|&c| only_candidate.is_none_or(|o| o == c))
            .collect();
        let shown_cases = ShownCases {
            file,
            harness,
            outlines,
            columns,
            filters: filters.clone(),
        };
        let kept_ids: Vec<i64> = shown_cases
            .chosen(run, shown)
            .iter()
            .flat_map(|c| c.kept.iter().map(|o| o.id))
            .collect();
        // The listed attempts, read whole, by record id.
        let whole = state
            .store
            .list_records_by_id(run.id, &kept_ids)
            .await?
            .into_iter()
            .collect();
        Ok((shown_cases, whole))
    }

    /// Which attempts each shown case lists, chosen from the outlines.
    fn chosen(&self, run: &Run, shown: &[String]) -> Vec<ChosenAttempts<'_>> {
        let mut outlines_by_case: HashMap<&str, Vec<&RecordOutline>> = HashMap::new();
        for o in self.outlines.iter().filter(|o| !o.fact.is_warmup) {
            outlines_by_case.entry(o.fact.case_id.as_ref()).or_default().push(o);
        }
        shown
            .iter()
            .map(|id| {
                let mut mine = outlines_by_case.remove(id.as_str()).unwrap_or_default();
                mine.retain(|o| self.columns.contains(&o.fact.candidate_id));
                mine.sort_by_key(|o| {
                    let f = &o.fact;
                    (
                        run.candidate_ids.iter().position(|&c| c == f.candidate_id),
                        f.phase.as_str(),
                        f.repetition,
                        f.attempt,
                    )
                });
                ChosenAttempts::of(mine, &self.filters)
            })
            .collect()
    }

    /// The grid's rows and the shown cases, in page order.
    fn views(
        &self,
        run: &Run,
        candidates: &[Candidate],
        shown: &[String],
        mut whole: HashMap<i64, RequestRecord>,
    ) -> (Vec<GridRow>, Vec<CaseView>) {
        let mut grid = Vec::with_capacity(shown.len());
        let mut cases = Vec::with_capacity(shown.len());
        for (row, (id, picked)) in shown.iter().zip(self.chosen(run, shown)).enumerate() {
            let (grid_row, case) = self.case_view(run, candidates, row, id, picked, &mut whole);
            grid.push(grid_row);
            cases.push(case);
        }
        (grid, cases)
    }

    /// One shown case: its row of the grid and its view with the attempts listed.
    fn case_view(
        &self,
        run: &Run,
        candidates: &[Candidate],
        row: usize,
        id: &str,
        picked: ChosenAttempts<'_>,
        whole: &mut HashMap<i64, RequestRecord>,
    ) -> (GridRow, CaseView) {
        let name_of = |id: i64| candidate_name(candidates, id);
        let set_cases = self.file.as_ref().map(|f| f.cases.as_slice()).unwrap_or(&[]);
        let case = set_cases.iter().find(|c| c.id == id);
        let spikes = self.harness.as_ref().map(|h| &h.lag_spikes);
        let load_run = !matches!(run.config.load, crate::domain::load::LoadShape::Fixed);
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
                let linked = (n > 0 && r.chunks.len() >= crate::app::pages::charts::TIMELINE_MIN_CHUNKS)
                    .then(|| timeline_href(run.id, &r));
                attempt_view(&r, name_of(r.candidate_id), is_final(&o.fact), spikes, load_run, linked)
            })
            .collect();
        let outcome = outcome_line(recorded, failed_attempts, listed, attempts.len());
        let anchor = |c: i64| format!("a-{row}-{c}");
        let grid_row = GridRow {
            case_id: id.to_string(),
            href: format!("#case-{id}"),
            cells: self
                .columns
                .iter()
                .map(|&c| {
                    let finals: Vec<&RecordOutline> = mine
                        .iter()
                        .copied()
                        .filter(|o| o.fact.candidate_id == c && is_final(&o.fact))
                        .collect();
                    let listed = attempts.iter().find(|a| a.candidate_id == c);
                    let mut cell = grid_cell(name_of(c), &finals, listed.map(|_| format!("#{}", anchor(c))));
                    // Expected vs got: the answer itself, not only pass or fail.
                    if let Some(a) = listed.filter(|a| !a.output.trim().is_empty()) {
                        let (short, cut) = grid_text(&a.output);
                        cell.answer = Some(short);
                        cell.answer_full = cut.then(|| a.output.clone());
                    }
                    cell
                })
                .collect(),
            expected: case
                .and_then(|c| c.expected_text())
                .map(|e| grid_text(&visible_controls(&e)).0),
        };
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
        let view = CaseView {
            id: id.to_string(),
            tags: case.map(|c| c.tags.clone()).unwrap_or_default(),
            input: match (case, self.file.as_ref()) {
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
        };
        (grid_row, view)
    }
}

/// A case's one-line outcome, e.g. "2 of 3 attempts failed · 2 listed by the filters".
fn outcome_line(recorded: usize, failed: usize, listed: usize, shown: usize) -> String {
    let mut outcome = if recorded == 0 {
        "not sent yet".to_string()
    } else if failed == 0 {
        format!("all {recorded} attempts ok")
    } else {
        format!("{failed} of {recorded} attempts failed")
    };
    if listed < recorded {
        outcome.push_str(&format!(" · {listed} listed by the filters"));
    }
    if shown < listed {
        outcome.push_str(&format!(" · showing {shown} of them, failed ones first"));
    }
    outcome
}

/// The attempts of one shown case: every measured one (the page's candidates, in order) and
/// the ones listed, of which `kept` are shown.
struct ChosenAttempts<'a> {
    mine: Vec<&'a RecordOutline>,
    /// How many the filters list.
    listed: usize,
    kept: Vec<&'a RecordOutline>,
}

impl<'a> ChosenAttempts<'a> {
    /// Of a case's attempts (`mine`, in page order), those the filters list: failed ones first
    /// up to [`ATTEMPTS_PER_CASE`], then the rest in order; kept in order.
    fn of(mine: Vec<&'a RecordOutline>, filters: &Filters) -> ChosenAttempts<'a> {
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
    }
}

/// One case of the grid: a cell per candidate shown.
#[derive(Debug, Clone)]
pub struct GridRow {
    pub case_id: String,
    pub href: String,
    /// The case's expected value, shortened (the whole one is in the case's Input below).
    pub expected: Option<String>,
    pub cells: Vec<GridCell>,
}

/// Characters of an answer or an expected value shown in a grid cell.
pub const GRID_TEXT_CHARS: usize = 80;

/// `text` shortened to [`GRID_TEXT_CHARS`] on one line, and whether anything was cut.
fn grid_text(text: &str) -> (String, bool) {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = one_line.chars().count() > GRID_TEXT_CHARS;
    (crate::domain::validation::truncate(&one_line, GRID_TEXT_CHARS), cut)
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
    /// Its listed answer (the first listed attempt's output), shortened; None when none is
    /// listed or it is empty.
    pub answer: Option<String>,
    /// The whole answer when `answer` is shortened (shown on request).
    pub answer_full: Option<String>,
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
        answer: None,
        answer_full: None,
    }
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
        svg: crate::app::pages::charts::token_timeline(&r.chunks, answer_start(&r)),
    })
}

/// Where a request's answer began, when it reasoned first (its first reasoning token came
/// before its first answer token).
fn answer_start(r: &RequestRecord) -> Option<i64> {
    match (r.first_reasoning_us.get(), r.first_content_us.get()) {
        (Some(reasoning), Some(answer)) if reasoning < answer => Some(answer),
        _ => None,
    }
}

fn attempt_view(
    r: &RequestRecord,
    candidate: String,
    is_final: bool,
    spikes: Option<&LagSpikes>,
    load_run: bool,
    timeline_href: Option<String>,
) -> AttemptView {
    let (_, repetition, _) = crate::domain::run::split_repetition(r.repetition);
    let msf = |us: Option<i64>| ms(us.map(|v| v as f64 / 1000.0));
    let count = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| NOT_MEASURED.to_string());
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
            None => crate::app::pages::charts::token_timeline(&r.chunks, answer_start(r)),
            Some(_) => None,
        },
        timeline_href,
        phase: r.phase.as_str(),
        repetition,
        level: level_text(r, load_run),
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
        grades: r.grades.iter().map(grade_view).collect(),
        timings: attempt_timings(r),
        tokens: attempt_tokens(r),
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

/// `c=4 · cycle 2` for a load-shape run's attempt; empty for a plain eval run's first cycle.
fn level_text(r: &RequestRecord, load_run: bool) -> String {
    let (level, _, cycle) = crate::domain::run::split_repetition(r.repetition);
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
    load.join(" · ")
}

/// One grade: the grader (with its weight and whether it is optional, where not the
/// defaults), the score, the reason and the structured detail.
fn grade_view(g: &crate::domain::grading::Grade) -> GradeView {
    GradeView {
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
    }
}

/// An attempt's timings from its send, each labelled.
fn attempt_timings(r: &RequestRecord) -> Vec<(&'static str, String)> {
    let msf = |us: Option<i64>| ms(us.map(|v| v as f64 / 1000.0));
    vec![
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
    ]
}

/// An attempt's token counts, each with its source.
fn attempt_tokens(r: &RequestRecord) -> Vec<(&'static str, String)> {
    let count = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| NOT_MEASURED.to_string());
    let source = r.output_tokens_source.map(|s| s.as_str()).unwrap_or("unknown");
    vec![
        ("input", format!("{} (server usage)", count(r.input_tokens))),
        ("output", format!("{} (from {source})", count(r.output_tokens))),
        (
            "output, o200k",
            format!("{} (bakeoff's tokenizer)", count(r.canonical_tokens)),
        ),
        ("reasoning", count(r.reasoning_tokens)),
        ("output characters", r.output_chars.to_string()),
        ("chunks", r.chunks.len().to_string()),
    ]
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
