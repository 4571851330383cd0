//! `GET /archive/compare?runs=1,2[,…]&baseline=RUN:CANDIDATE`: runs side by side. Every
//! (run, candidate) is a column; figures carry their intervals and are marked better or worse
//! than the baseline's only beyond the noise; every case is marked improved, regressed or the
//! same against the baseline. Runs on different eval-set versions are compared by case id and
//! the page says so at the top. Like with like only: every column shows its conditions, a
//! figure is compared only with a baseline measured under the same conditions (speed figures
//! level by level, at the levels both measured), and the page lists what was not compared and
//! why (docs/measurement.md "Comparing runs").
use std::collections::{HashMap, HashSet};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{RawQuery, State};

use super::with_interval;
use crate::app::pages::figures::run_figures;
use crate::app::runs::{RunRecords, RunVersion};
use crate::domain::calibers::definitions::{AGGREGATE_STEADY, AGGREGATE_WHOLE_RUN};
use crate::domain::compare::{
    AttemptOutcome, Better, CaseOutcome, Conditions, Figures, LevelAggregate, Mark, Scope, case_outcomes,
    improved_beyond_noise, mark, regressed_beyond_noise,
};
use crate::domain::format;
use crate::domain::palette::CandidateColours;
use crate::domain::stats::Interval;
use crate::domain::thresholds::ThresholdRule;
use crate::web::AppState;
use crate::web::error::{WebError, parse_page};
use crate::web::views::{FormBody, NOT_MEASURED, Pagination, ms, short_hash, tok_s};

/// Most runs on one page.
pub const MAX_RUNS: usize = 10;
pub const CASES_PER_PAGE: u32 = 50;

#[derive(Template, WebTemplate)]
#[template(path = "archive/compare.html")]
pub struct ComparePage {
    pub nav: &'static str,
    pub entries: Vec<EntryView>,
    /// Each entry's baseline (an index into `entries`; its own index when it is one).
    pub baselines: Vec<usize>,
    /// Candidates with their columns' span, in column order: the header's groups.
    pub groups: Vec<CandidateGroup>,
    /// Set when the runs used different eval-set versions.
    pub version_warning: Option<String>,
    /// One row per condition, a cell per entry.
    pub conditions: Vec<ConditionRow>,
    pub figures: Vec<FigureRow>,
    /// What was not compared against the baseline, and why.
    pub not_compared: Vec<NotCompared>,
    pub cases: Vec<CaseRow>,
    pub pager: Pagination,
    /// Cases compared in all (over every page).
    pub case_count: usize,
    /// Each entry's verdict by the eval set's own threshold profile (else the archive's
    /// default), when judged.
    pub verdicts: Vec<Option<super::list::VerdictCell>>,
    /// Per entry: "worse" / "better" when its verdict moved against its baseline's, else "".
    pub verdict_marks: Vec<&'static str>,
    /// The profile those verdicts are by.
    pub verdict_profile: Option<String>,
    /// Accuracy, TTFT and decode across the columns, with the profile's rules as threshold lines.
    pub charts: Vec<super::history::Chart>,
}

impl ComparePage {
    /// Conditions that differ between the compared entries: shown in the table.
    pub fn differing_conditions(&self) -> Vec<&ConditionRow> {
        self.conditions
            .iter()
            .filter(|c| c.cells.iter().any(|(_, d)| *d))
            .collect()
    }

    /// Whether entry `i` is a baseline (its own).
    pub fn is_baseline(&self, i: &usize) -> bool {
        self.baselines.get(*i) == Some(i)
    }

    /// "worse" / "better" / "": how entry `i`'s verdict moved against its baseline's.
    pub fn verdict_moved(&self, i: &usize) -> &'static str {
        self.verdict_marks.get(*i).copied().unwrap_or("")
    }

    /// Conditions every entry shares: folded under the table, once each.
    pub fn same_conditions(&self) -> Vec<(&'static str, &str)> {
        self.conditions
            .iter()
            .filter(|c| !c.cells.iter().any(|(_, d)| *d))
            .map(|c| (c.name, c.cells.first().map_or("", |(t, _)| t.as_str())))
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct EntryView {
    /// `RUN:CANDIDATE`, the baseline parameter.
    pub key: String,
    pub run_id: i64,
    pub candidate: String,
    pub evalset: String,
    pub version: String,
    pub created: String,
    /// (improved, regressed, same, not comparable) cases against the baseline.
    pub tally: (usize, usize, usize, usize),
    pub baseline_href: String,
    /// "measured in 2 segments (the run was resumed); …", or "one" (as on the run page).
    pub segments: String,
    /// "#4 alpha": the entry this one is compared with; None for a baseline.
    pub compared_with: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ConditionRow {
    pub name: &'static str,
    /// (text, differs from the baseline's) per entry.
    pub cells: Vec<(String, bool)>,
}

#[derive(Debug, Clone)]
pub struct FigureRow {
    pub label: String,
    pub caliber: &'static str,
    pub cells: Vec<FigureCell>,
}

#[derive(Debug, Clone)]
pub struct FigureCell {
    pub text: String,
    /// The figure `text` shows, unformatted (a share as a fraction, ms, tok/s), with its interval.
    pub value: Option<f64>,
    pub interval: Option<Interval>,
    /// "better", "worse" or "".
    pub mark: &'static str,
    /// "baseline", "yes" (compared with the baseline) or "no" (see the not-compared list).
    pub compared: &'static str,
    /// The change from the baseline's value ("+3.1 pp", "−12 %"), when compared.
    pub delta: String,
}

#[derive(Debug, Clone)]
pub struct NotCompared {
    /// `RUN:CANDIDATE` of the entry.
    pub key: String,
    pub entry: String,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct CaseRow {
    pub case_id: String,
    /// (text, mark) per entry.
    pub cells: Vec<(String, &'static str)>,
}

struct Entry {
    version_id: i64,
    figures: Figures,
    conditions: Conditions,
    outcomes: HashMap<String, CaseOutcome>,
}

impl Entry {
    /// The entry's figures level by level (`c=4` …); a run without closed-loop levels (an open
    /// loop) is one level, its load, with the run's pooled figures.
    fn levels(&self) -> Vec<(String, LevelAggregate)> {
        let f = &self.figures;
        if f.levels.is_empty() {
            let label = self.conditions.levels.first().cloned().unwrap_or_default();
            return vec![(
                label,
                LevelAggregate {
                    concurrency: 0,
                    steady_tok_s: f.aggregate_tok_s,
                    whole_run_tok_s: None,
                    ttft_p50_ms: f.ttft_p50_ms,
                    ttft_ci: f.ttft_ci,
                    e2e_p50_ms: f.e2e_p50_ms,
                    e2e_ci: f.e2e_ci,
                    decode_p50_tok_s: f.decode_p50_tok_s,
                    decode_ci: f.decode_ci,
                    segments: f.segments,
                    downtime_s: f.downtime_s,
                },
            )];
        }
        f.levels
            .iter()
            .map(|l| (format!("c={}", l.concurrency), l.clone()))
            .collect()
    }
}

fn parse_runs(q: &FormBody) -> Result<Vec<i64>, WebError> {
    let mut raw: Vec<String> = q.all("run").into_iter().map(str::to_string).collect();
    if let Some(list) = q.get("runs") {
        raw.extend(list.split(',').map(str::to_string));
    }
    let mut ids = Vec::new();
    for r in raw.iter().map(|r| r.trim()).filter(|r| !r.is_empty()) {
        let id = r.parse::<i64>().map_err(|_| {
            WebError::BadRequest(format!(
                "{:?} is not a run id.",
                crate::domain::validation::truncate(r, 20)
            ))
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return Err(WebError::BadRequest(
            "Choose the runs to compare (tick them in the archive, or give ?runs=1,2).".into(),
        ));
    }
    if ids.len() > MAX_RUNS {
        return Err(WebError::BadRequest(format!(
            "Compare at most {MAX_RUNS} runs at once."
        )));
    }
    Ok(ids)
}

/// Runs side by side, every case row included: what the page shows a page of, and what the
/// JSON API answers (`/api/v1/archive/compare`).
pub(crate) struct Comparison {
    /// Grouped by candidate (first appearance), each candidate's columns oldest run first.
    pub entries: Vec<EntryView>,
    /// The baseline the query chose, or the first entry.
    pub baseline: usize,
    /// Each entry's baseline: the one chosen, else the oldest run of the same candidate (so
    /// run B of a model is read against run A of the same model), else the first entry.
    pub baselines: Vec<usize>,
    pub version_warning: Option<String>,
    pub conditions: Vec<ConditionRow>,
    pub figures: Vec<FigureRow>,
    pub not_compared: Vec<NotCompared>,
    pub cases: Vec<CaseRow>,
    /// `1,2,…` (and `&baseline=RUN:CANDIDATE` when one was chosen): the runs as the page's
    /// links name them.
    pub runs_param: String,
}

pub async fn page(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<ComparePage, WebError> {
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    let page = parse_page(q.get("page"))?;
    let c = compare(&state, &q).await?;
    let pager = Pagination::new(
        format!("/archive/compare?runs={}", c.runs_param),
        page,
        CASES_PER_PAGE,
        c.cases.len() as i64,
    );
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!("page {page} of this comparison's cases")));
    }
    let case_count = c.cases.len();
    let cases = c
        .cases
        .into_iter()
        .skip(pager.offset() as usize)
        .take(CASES_PER_PAGE as usize)
        .collect();
    let (verdicts, profile) = entry_verdicts(&state, &c.entries).await?;
    let verdict_marks = verdict_marks(&verdicts, &c.baselines);
    let rules = super::history::judging_rules(&state, profile.as_ref()).await?;
    Ok(ComparePage {
        verdicts,
        verdict_marks,
        verdict_profile: profile.map(|p| p.name),
        charts: compare_charts(&c.entries, &c.figures, &rules),
        nav: "archive",
        groups: groups(&c.entries),
        entries: c.entries,
        baselines: c.baselines,
        version_warning: c.version_warning,
        conditions: c.conditions,
        figures: c.figures,
        not_compared: c.not_compared,
        cases,
        pager,
        case_count,
    })
}

/// Each entry's verdict by the default profile (the one the archive shows), in entry order.
async fn entry_verdicts(
    state: &AppState,
    entries: &[EntryView],
) -> Result<(Vec<Option<super::list::VerdictCell>>, Option<super::list::ShownProfile>), WebError> {
    // The set's own profile when every column is on one set that has one.
    let sets: HashSet<&str> = entries.iter().map(|e| e.evalset.as_str()).collect();
    let set = (sets.len() == 1).then(|| entries[0].evalset.as_str());
    let Some(p) = super::list::profile_for_evalset(state, set).await? else {
        return Ok((vec![None; entries.len()], None));
    };
    let mut runs: Vec<i64> = entries.iter().map(|e| e.run_id).collect();
    runs.dedup();
    let all = state.store.list_run_verdicts(&runs, p.id).await?;
    let cells = entries
        .iter()
        .map(|e| {
            let candidate: i64 = e.key.split_once(':').and_then(|(_, c)| c.parse().ok())?;
            super::list::verdict_cells(&p, &[candidate], std::slice::from_ref(&e.candidate), e.run_id, &all)
                .into_iter()
                .next()
        })
        .collect();
    Ok((cells, Some(p)))
}

/// Accuracy, and TTFT p50 and decode p50 at the first level compared, across the columns: each
/// candidate in its colour, its runs joined oldest to newest, with the judging profile's rule on
/// that figure as a threshold line ("did it get worse", and against what bar).
fn compare_charts(
    entries: &[EntryView],
    figures: &[FigureRow],
    rules: &(String, Vec<ThresholdRule>),
) -> Vec<super::history::Chart> {
    use super::history::{Column, column_chart, scale, threshold_line};
    let colours = CandidateColours::of(entries.iter().filter_map(|e| candidate_of(&e.key)));
    let labels: Vec<String> = entries
        .iter()
        .map(|e| format!("{} #{}", e.candidate, e.run_id))
        .collect();
    let level = figures
        .iter()
        .find_map(|r| r.label.strip_prefix("TTFT p50 @"))
        .map(str::to_string);
    let chart = |id: &'static str, title: String, row: String, k: f64, metric: &str, y_desc: &str| {
        let row = figures.iter().find(|r| r.label == row)?;
        let columns: Vec<Column> = row
            .cells
            .iter()
            .zip(entries)
            .enumerate()
            .filter_map(|(x, (cell, e))| {
                let candidate = candidate_of(&e.key)?;
                Some(Column {
                    x,
                    value: cell.value? * k,
                    interval: cell.interval.map(|i| scale(i, k)),
                    line: usize::try_from(candidate).ok()?,
                    slot: colours.slot(candidate),
                })
            })
            .collect();
        column_chart(
            id,
            title,
            "compared column (candidate #run, each model's runs oldest first)",
            &labels,
            &columns,
            y_desc,
            threshold_line(rules, metric, k),
        )
    };
    let mut charts = vec![chart(
        "chart-accuracy",
        "Accuracy (95 % interval)".into(),
        "accuracy".into(),
        100.0,
        "accuracy",
        "accuracy %",
    )];
    if let Some(level) = level {
        charts.push(chart(
            "chart-ttft",
            format!("TTFT p50 @{level} (95 % interval of the median)"),
            format!("TTFT p50 @{level}"),
            1.0,
            "ttft_p50_ms",
            "TTFT ms",
        ));
        charts.push(chart(
            "chart-decode",
            format!("Decode tok/s per stream p50 @{level} (95 % interval)"),
            format!("decode tok/s/stream p50 @{level}"),
            1.0,
            "decode_tok_s_p50",
            "tok/s",
        ));
    }
    charts.into_iter().flatten().collect()
}

/// The comparison the query asks for (`runs`/`run`, `baseline`).
pub(crate) async fn compare(state: &AppState, q: &FormBody) -> Result<Comparison, WebError> {
    let run_ids = parse_runs(q)?;
    let Compared {
        entries,
        views,
        case_order,
    } = read_entries(state, &run_ids).await?;
    if entries.is_empty() {
        return Err(WebError::BadRequest("These runs have no candidates to compare.".into()));
    }
    let (entries, mut views) = grouped_by_candidate(entries, views);

    let chosen = match q.get("baseline").map(str::trim).filter(|b| !b.is_empty()) {
        None => None,
        Some(key) => Some(views.iter().position(|v| v.key == key).ok_or_else(|| {
            WebError::BadRequest(format!(
                "The baseline {:?} is not one of the compared runs' candidates.",
                crate::domain::validation::truncate(key, 30)
            ))
        })?),
    };
    let baselines = baselines(&views, chosen);
    let mut runs_param = run_ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let links = runs_param.clone();
    if let Some(b) = chosen {
        // The page's own links (the pager) keep the chosen baseline.
        runs_param = format!("{runs_param}&baseline={}", views[b].key);
    }
    for i in 0..views.len() {
        let b = baselines[i];
        views[i].compared_with = (b != i).then(|| format!("#{} {}", views[b].run_id, views[b].candidate));
        views[i].baseline_href = format!("/archive/compare?runs={links}&baseline={}", views[i].key);
    }
    let version_warning = version_warning(&entries, &views);
    let cases = case_rows(&entries, &baselines, &case_order, &mut views);
    let mut not_compared = Vec::new();
    let figures = figure_rows(&entries, &baselines, &views, &mut not_compared);
    Ok(Comparison {
        conditions: condition_rows(&entries, &baselines),
        figures,
        not_compared,
        entries: views,
        baseline: chosen.unwrap_or(0),
        baselines,
        version_warning,
        cases,
        runs_param,
    })
}

/// The candidate id in an entry's `RUN:CANDIDATE` key.
fn candidate_of(key: &str) -> Option<i64> {
    key.split_once(':').and_then(|(_, c)| c.parse().ok())
}

/// The entries grouped by candidate (in order of first appearance), each candidate's columns
/// in run order (oldest first): run A and run B of a model side by side.
fn grouped_by_candidate(entries: Vec<Entry>, views: Vec<EntryView>) -> (Vec<Entry>, Vec<EntryView>) {
    let mut first_seen: Vec<Option<i64>> = Vec::new();
    for v in &views {
        let c = candidate_of(&v.key);
        if !first_seen.contains(&c) {
            first_seen.push(c);
        }
    }
    let mut order: Vec<usize> = (0..views.len()).collect();
    order.sort_by_key(|&i| {
        let group = first_seen.iter().position(|c| *c == candidate_of(&views[i].key));
        (group, views[i].run_id)
    });
    let mut slots: Vec<Option<(Entry, EntryView)>> = entries.into_iter().zip(views).map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).unzip()
}

/// Each entry's baseline: the chosen one for all; else the first (oldest) column of the same
/// candidate when the candidate has several, else the first column.
fn baselines(views: &[EntryView], chosen: Option<usize>) -> Vec<usize> {
    if let Some(b) = chosen {
        return vec![b; views.len()];
    }
    views
        .iter()
        .map(|v| {
            let same = |w: &&EntryView| candidate_of(&w.key) == candidate_of(&v.key);
            match views.iter().filter(same).count() {
                1 => 0,
                _ => views.iter().position(|w| same(&w)).unwrap_or(0),
            }
        })
        .collect()
}

/// One candidate's group of columns in the header.
#[derive(Debug, Clone)]
pub struct CandidateGroup {
    pub name: String,
    /// Its columns.
    pub span: usize,
    /// The candidate's colour (`domain::palette`, settled among the page's candidates: the same
    /// as on its runs' pages and scorecards).
    pub colour: &'static str,
}

/// The header's candidate groups, in column order.
fn groups(views: &[EntryView]) -> Vec<CandidateGroup> {
    let colours = crate::domain::palette::CandidateColours::of(views.iter().filter_map(|v| candidate_of(&v.key)));
    let mut out: Vec<(Option<i64>, CandidateGroup)> = Vec::new();
    for v in views {
        let id = candidate_of(&v.key);
        match out.last_mut() {
            Some((c, g)) if *c == id => g.span += 1,
            _ => out.push((
                id,
                CandidateGroup {
                    name: v.candidate.clone(),
                    span: 1,
                    colour: id.map_or(crate::domain::palette::PALETTE[0], |id| colours.hex(id)),
                },
            )),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
}

/// "worse" / "better" where an entry's verdict moved against its baseline's (GO above
/// INCONCLUSIVE above NO-GO), else "".
fn verdict_marks(verdicts: &[Option<super::list::VerdictCell>], baselines: &[usize]) -> Vec<&'static str> {
    let rank = |v: &Option<super::list::VerdictCell>| v.as_ref().map(|v| v.outcome.rank());
    baselines
        .iter()
        .enumerate()
        .map(|(i, &b)| match (rank(&verdicts[b]), rank(&verdicts[i])) {
            (Some(base), Some(here)) if b != i && here < base => "worse",
            (Some(base), Some(here)) if b != i && here > base => "better",
            _ => "",
        })
        .collect()
}

/// Every compared (run, candidate): what is compared and its column, and every case id in
/// the order first seen (eval-set order, then recorded cases the versions do not list).
struct Compared {
    entries: Vec<Entry>,
    views: Vec<EntryView>,
    case_order: Vec<String>,
}

/// Reads each run's figures, facts and candidates: one entry per candidate of each run.
async fn read_entries(state: &AppState, run_ids: &[i64]) -> Result<Compared, WebError> {
    let mut out = Compared {
        entries: Vec::new(),
        views: Vec::new(),
        case_order: Vec::new(),
    };
    let mut versions = super::Versions::default();
    let mut seen: HashSet<String> = HashSet::new();
    let profiles = judged_by(state, run_ids).await?;
    for &run_id in run_ids {
        let run = state
            .store
            .get_run(run_id)
            .await?
            .ok_or_else(|| WebError::NotFound(format!("run #{run_id}")))?;
        let version = versions.get(state, run.evalset_version_id).await?;
        if let Some(v) = &version {
            for c in &v.file.cases {
                if seen.insert(c.id.clone()) {
                    out.case_order.push(c.id.clone());
                }
            }
        }
        let (records, run_version) = (RunRecords::of(run.id), RunVersion::of(&run));
        let figures = run_figures(&state.store, &state.views.figures, &run, &run_version, &records).await?;
        let facts = state.store.list_record_facts(run.id).await?;
        // Each candidate as this run measured it (its snapshot's name).
        let names: HashMap<i64, String> = state
            .store
            .run_candidates(run.id)
            .await?
            .into_iter()
            .map(|c| (c.id, c.spec.name))
            .collect();
        for (i, &candidate_id) in run.candidate_ids.iter().enumerate() {
            let outcomes = case_outcomes(
                facts
                    .iter()
                    .filter(|f| f.candidate_id == candidate_id && !f.is_warmup)
                    .map(|f| AttemptOutcome {
                        case_id: &f.case_id,
                        phase: f.phase,
                        repetition: f.repetition,
                        attempt: f.attempt,
                        failed: f.error_class.is_some(),
                        passed: f.passed,
                    }),
            );
            for case in outcomes.keys() {
                if seen.insert(case.clone()) {
                    out.case_order.push(case.clone());
                }
            }
            let short = version.as_ref().map(|v| short_hash(&v.content_hash));
            out.views.push(EntryView {
                key: format!("{run_id}:{candidate_id}"),
                run_id,
                candidate: names
                    .get(&candidate_id)
                    .cloned()
                    .unwrap_or_else(|| format!("candidate #{candidate_id}")),
                evalset: version.as_ref().map(|v| v.file.header.name.clone()).unwrap_or_default(),
                version: short.unwrap_or_default().to_string(),
                created: run.created_at.display(),
                tally: (0, 0, 0, 0),
                baseline_href: String::new(),
                segments: figures.get(i).map(segments_text).unwrap_or_default(),
                compared_with: None,
            });
            let figures = figures.get(i).cloned().unwrap_or_default();
            let judged = profiles.get(&(run_id, candidate_id)).cloned().unwrap_or_default();
            let conditions = Conditions::of(&run.config, short.unwrap_or("unknown"), &figures, judged);
            out.entries.push(Entry {
                version_id: run.evalset_version_id,
                figures,
                conditions,
                outcomes,
            });
        }
    }
    Ok(out)
}

/// Said when the runs used different eval-set versions.
fn version_warning(entries: &[Entry], views: &[EntryView]) -> Option<String> {
    let versions: HashSet<i64> = entries.iter().map(|e| e.version_id).collect();
    (versions.len() > 1).then(|| {
        let list: Vec<String> = views
            .iter()
            .map(|v| format!("run #{} uses {} version {}", v.run_id, v.evalset, v.version))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        format!(
            "These runs used different eval-set versions ({}). Cases are matched by id; a case missing from a version is marked not comparable, and accuracy figures are not directly comparable.",
            {
                let mut l = list;
                l.sort();
                l.join("; ")
            }
        )
    })
}

/// Per-case marks against the baseline, each entry's tally counted in `views`; a case is
/// marked only between answers generated alike (same max_tokens and temperature).
fn case_rows(entries: &[Entry], baselines: &[usize], case_order: &[String], views: &mut [EntryView]) -> Vec<CaseRow> {
    let cases_alike: Vec<bool> = entries
        .iter()
        .zip(baselines)
        .map(|(e, &b)| {
            e.conditions
                .differences(&entries[b].conditions, Scope::Cases)
                .is_empty()
        })
        .collect();
    let mut all_rows = Vec::with_capacity(case_order.len());
    for case in case_order {
        let cells = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let o = e.outcomes.get(case);
                let text = match o {
                    Some(o) if o.graded > 0 => format!("{}/{}", o.passed, o.graded),
                    _ => NOT_MEASURED.to_string(),
                };
                let m = if baselines[i] == i {
                    None
                } else if !cases_alike[i] {
                    Some(Mark::NotComparable)
                } else {
                    Some(mark(entries[baselines[i]].outcomes.get(case), o))
                };
                if let Some(m) = m {
                    let t = &mut views[i].tally;
                    match m {
                        Mark::Improved => t.0 += 1,
                        Mark::Regressed => t.1 += 1,
                        Mark::Same => t.2 += 1,
                        Mark::NotComparable => t.3 += 1,
                    }
                }
                (text, m.map(|m| m.as_str()).unwrap_or("baseline"))
            })
            .collect();
        all_rows.push(CaseRow {
            case_id: case.clone(),
            cells,
        });
    }
    all_rows
}

/// The threshold profiles (name and version) that judged each (run, candidate).
async fn judged_by(state: &AppState, run_ids: &[i64]) -> Result<HashMap<(i64, i64), Vec<String>>, WebError> {
    let mut out: HashMap<(i64, i64), Vec<String>> = HashMap::new();
    for profile in state.store.list_threshold_profiles().await? {
        for v in state.store.list_run_verdicts(run_ids, profile.id).await? {
            out.entry((v.run_id, v.candidate_id))
                .or_default()
                .push(format!("{} v{}", profile.name, v.profile_version));
        }
    }
    Ok(out)
}

/// What the compare and history pages say of a column's segments: a resumed run's aggregates
/// are per segment, its downtime left out.
pub(super) fn segments_text(f: &Figures) -> String {
    crate::app::pages::report::resumed_text(f.segments, f.downtime_s).unwrap_or_else(|| "one".to_string())
}

fn condition_rows(entries: &[Entry], baselines: &[usize]) -> Vec<ConditionRow> {
    let rows: Vec<Vec<(&'static str, String)>> = entries.iter().map(|e| e.conditions.rows()).collect();
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|k| ConditionRow {
            name: first[k].0,
            cells: rows
                .iter()
                .zip(baselines)
                .map(|(r, &b)| (r[k].1.clone(), r[k].1 != rows[b][k].1))
                .collect(),
        })
        .collect()
}

type Pick = fn(&Figures) -> (Option<f64>, Option<Interval>);
type LevelPick = fn(&LevelAggregate) -> (Option<f64>, Option<Interval>);
/// (label, caliber, which way is better, the figure and its interval, its format, what may
/// keep it from being compared).
type RunRow = (&'static str, &'static str, Better, Pick, fn(f64) -> String, Scope);
/// Same for a figure per level; no direction (`None`): never marked (it has no interval).
type LevelRow = (&'static str, &'static str, Option<Better>, LevelPick, fn(f64) -> String);

/// How a figure's change from its baseline is said: in percentage points (a share) or
/// relative to the baseline's value (ms, tok/s).
#[derive(Clone, Copy)]
enum Change {
    Points,
    Relative,
}

/// "Δ +3.1 pp" / "Δ −12 %": the change from the baseline's value; empty without both values
/// (or a zero baseline for a relative change).
fn delta(base: Option<f64>, value: Option<f64>, change: Change) -> String {
    let (Some(b), Some(v)) = (base, value) else {
        return String::new();
    };
    let text = match change {
        Change::Points => format!("{:+.1} pp", (v - b) * 100.0),
        Change::Relative if b != 0.0 => format!("{:+.0} %", (v - b) / b.abs() * 100.0),
        Change::Relative => return String::new(),
    };
    format!("Δ {}", text.replace('-', "−"))
}

/// ▲/▼ of `value` against the baseline's, beyond the noise.
fn noise_mark(base: Option<&Interval>, value: Option<&Interval>, better: Better) -> &'static str {
    if regressed_beyond_noise(base, value, better) {
        "worse"
    } else if improved_beyond_noise(base, value, better) {
        "better"
    } else {
        ""
    }
}

fn figure_rows(
    entries: &[Entry],
    baselines: &[usize],
    views: &[EntryView],
    notes: &mut Vec<NotCompared>,
) -> Vec<FigureRow> {
    let levels: Vec<Vec<(String, LevelAggregate)>> = entries.iter().map(Entry::levels).collect();
    let alike = Alike::of(entries, baselines, views, &levels, notes);
    let mut out = run_figure_rows(entries, baselines, &alike);
    out.extend(level_figure_rows(entries, baselines, &levels, &alike));
    out.push(FigureRow {
        label: "requests".into(),
        caliber: "measured final attempts (warm-ups excluded)",
        cells: entries
            .iter()
            .enumerate()
            .map(|(i, e)| FigureCell {
                text: e.figures.requests.to_string(),
                value: Some(e.figures.requests as f64),
                interval: None,
                mark: "",
                compared: if baselines[i] == i { "baseline" } else { "" },
                delta: String::new(),
            })
            .collect(),
    });
    out
}

/// Per entry: may its quality / speed figures be compared with the baseline's?
struct Alike {
    quality: Vec<bool>,
    speed: Vec<bool>,
}

impl Alike {
    /// Whether each entry's figures compare with the baseline's; what keeps one from being
    /// compared is said in `notes`.
    fn of(
        entries: &[Entry],
        baselines: &[usize],
        views: &[EntryView],
        levels: &[Vec<(String, LevelAggregate)>],
        notes: &mut Vec<NotCompared>,
    ) -> Alike {
        let mut quality_alike = vec![true; entries.len()];
        let mut speed_alike = vec![true; entries.len()];
        for (i, e) in entries.iter().enumerate() {
            let baseline = baselines[i];
            if i == baseline {
                continue;
            }
            let (base, base_levels) = (&entries[baseline], &levels[baseline]);
            let mut note = |text: String| {
                notes.push(NotCompared {
                    key: views[i].key.clone(),
                    entry: format!("#{} {}", views[i].run_id, views[i].candidate),
                    text,
                })
            };
            let quality = e.conditions.differences(&base.conditions, Scope::Quality);
            if !quality.is_empty() {
                quality_alike[i] = false;
                note(format!("accuracy not compared: {}", quality.join("; ")));
            }
            let speed = e.conditions.differences(&base.conditions, Scope::Speed);
            if !speed.is_empty() {
                speed_alike[i] = false;
                note(format!(
                    "speed figures and failure rate not compared at any level: {}",
                    speed.join("; ")
                ));
                continue;
            }
            let missing: Vec<&str> = levels[i]
                .iter()
                .map(|(l, _)| l.as_str())
                .filter(|l| !base_levels.iter().any(|(b, _)| b == l))
                .collect();
            if !missing.is_empty() {
                note(format!(
                    "{} not compared: the baseline (#{} {}) was not measured at {}",
                    missing.join(", "),
                    views[baseline].run_id,
                    views[baseline].candidate,
                    if missing.len() == 1 {
                        "this level"
                    } else {
                        "these levels"
                    }
                ));
            }
            if e.conditions.levels != base.conditions.levels {
                note(format!(
                    "failure rate not compared: measured over other load levels ({} vs {})",
                    base.conditions.load_text(),
                    e.conditions.load_text()
                ));
            }
        }
        Alike {
            quality: quality_alike,
            speed: speed_alike,
        }
    }
}

/// How a cell is compared: the baseline's own, compared, or not.
fn compared(i: usize, baselines: &[usize], alike: bool) -> &'static str {
    match (i == baselines[i], alike) {
        (true, _) => "baseline",
        (false, true) => "yes",
        (false, false) => "no",
    }
}

/// The figures of the whole run: accuracy and failure rate, with their intervals.
fn run_figure_rows(entries: &[Entry], baselines: &[usize], alike: &Alike) -> Vec<FigureRow> {
    let run_rows: [RunRow; 2] = [
        (
            "accuracy",
            "share of graded final attempts passed, 95 % Wilson interval",
            Better::Higher,
            |f| (f.accuracy, f.accuracy_ci),
            |v| format::percent(v, 1),
            Scope::Quality,
        ),
        (
            "failure rate",
            "failed final attempts over every level, 95 % Wilson interval",
            Better::Lower,
            |f| (f.failure_rate, f.failure_ci),
            |v| format::percent(v, 1),
            Scope::Speed,
        ),
    ];
    run_rows
        .iter()
        .map(|(label, caliber, better, pick, fmt, scope)| FigureRow {
            label: label.to_string(),
            caliber,
            cells: entries
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let base = &entries[baselines[i]];
                    let (base_v, base_ci) = pick(&base.figures);
                    let alike = match scope {
                        Scope::Quality | Scope::Cases => alike.quality[i],
                        Scope::Speed => alike.speed[i] && e.conditions.levels == base.conditions.levels,
                    };
                    let (v, ci) = pick(&e.figures);
                    let compared = compared(i, baselines, alike);
                    let yes = compared == "yes";
                    FigureCell {
                        text: with_interval(v, ci.as_ref(), fmt),
                        value: v,
                        interval: ci,
                        mark: if yes {
                            noise_mark(base_ci.as_ref(), ci.as_ref(), *better)
                        } else {
                            ""
                        },
                        compared,
                        delta: if yes {
                            delta(base_v, v, Change::Points)
                        } else {
                            String::new()
                        },
                    }
                })
                .collect(),
        })
        .collect()
}

/// The figures of each load level, level by level.
fn level_figure_rows(
    entries: &[Entry],
    baselines: &[usize],
    levels: &[Vec<(String, LevelAggregate)>],
    alike: &Alike,
) -> Vec<FigureRow> {
    let mut out = Vec::new();
    // Level by level, from the one level computation (the run page's and the scorecard's
    // figure for that level); an entry without the level shows "—".
    let mut labels: Vec<(u32, String)> = levels
        .iter()
        .flatten()
        .map(|(label, l)| (l.concurrency, label.clone()))
        .collect();
    labels.sort();
    labels.dedup();
    let level_rows: [LevelRow; 5] = [
        (
            "TTFT p50",
            "send → first token, 95 % interval of the median",
            Some(Better::Lower),
            |l| (l.ttft_p50_ms, l.ttft_ci),
            |v| ms(Some(v)),
        ),
        (
            "E2E p50",
            "send → end of stream, 95 % interval of the median",
            Some(Better::Lower),
            |l| (l.e2e_p50_ms, l.e2e_ci),
            |v| ms(Some(v)),
        ),
        (
            "decode tok/s/stream p50",
            "(output tokens − first chunk's tokens) / (last − first token), 95 % interval",
            Some(Better::Higher),
            |l| (l.decode_p50_tok_s, l.decode_ci),
            |v| tok_s(Some(v)),
        ),
        (
            "aggregate tok/s",
            AGGREGATE_STEADY,
            None,
            |l| (l.steady_tok_s, None),
            |v| tok_s(Some(v)),
        ),
        (
            "aggregate tok/s",
            AGGREGATE_WHOLE_RUN,
            None,
            |l| (l.whole_run_tok_s, None),
            |v| tok_s(Some(v)),
        ),
    ];
    for (_, level) in &labels {
        let at = |i: usize| levels[i].iter().find(|(l, _)| l == level).map(|(_, a)| a);
        for (k, (label, caliber, better, pick, fmt)) in level_rows.iter().enumerate() {
            let label = match k {
                3 => format!("{label} @{level} (steady window)"),
                4 => format!("{label} @{level} (whole run)"),
                _ => format!("{label} @{level}"),
            };
            out.push(FigureRow {
                label,
                caliber,
                cells: (0..entries.len())
                    .map(|i| {
                        let (here, base) = (at(i), at(baselines[i]));
                        let (v, ci) = here.map(pick).unwrap_or((None, None));
                        let (base_v, base_ci) = base.map(pick).unwrap_or((None, None));
                        let alike = alike.speed[i] && here.is_some() && base.is_some();
                        let compared = compared(i, baselines, alike);
                        let yes = compared == "yes";
                        FigureCell {
                            text: with_interval(v, ci.as_ref(), fmt),
                            value: v,
                            interval: ci,
                            mark: match better {
                                Some(b) if yes => noise_mark(base_ci.as_ref(), ci.as_ref(), *b),
                                _ => "",
                            },
                            compared,
                            delta: if yes {
                                delta(base_v, v, Change::Relative)
                            } else {
                                String::new()
                            },
                        }
                    })
                    .collect(),
            });
        }
    }
    out
}
