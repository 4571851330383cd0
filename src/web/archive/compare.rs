//! `GET /archive/compare?runs=1,2[,…]&baseline=RUN:CANDIDATE`: runs side by side. Every
//! (run, candidate) is a column; figures carry their intervals and are marked better or worse
//! than the baseline's only beyond the noise; every case is marked improved, regressed or the
//! same against the baseline. Runs on different eval-set versions are compared by case id and
//! the page says so at the top.
use std::collections::{HashMap, HashSet};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{RawQuery, State};

use super::{run_figures, with_interval};
use crate::domain::calibers::definitions::{AGGREGATE_STEADY, AGGREGATE_WHOLE_RUN};
use crate::domain::compare::{
    AttemptOutcome, Better, CaseOutcome, Figures, Mark, case_outcomes, improved_beyond_noise, mark,
    regressed_beyond_noise,
};
use crate::domain::format;
use crate::domain::stats::Interval;
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
    pub baseline: usize,
    /// Set when the runs used different eval-set versions.
    pub version_warning: Option<String>,
    pub figures: Vec<FigureRow>,
    pub cases: Vec<CaseRow>,
    pub pager: Pagination,
    /// Cases compared in all (over every page).
    pub case_count: usize,
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
}

#[derive(Debug, Clone)]
pub struct FigureRow {
    pub label: String,
    pub caliber: &'static str,
    /// (text, mark) per entry; mark is "better", "worse" or "".
    pub cells: Vec<(String, &'static str)>,
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
    outcomes: HashMap<String, CaseOutcome>,
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

pub async fn page(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<ComparePage, WebError> {
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    let run_ids = parse_runs(&q)?;
    let page = parse_page(q.get("page"))?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut views: Vec<EntryView> = Vec::new();
    let mut case_order: Vec<String> = Vec::new();
    let mut versions = super::Versions::default();
    let mut seen: HashSet<String> = HashSet::new();
    for &run_id in &run_ids {
        let run = state
            .store
            .get_run(run_id)
            .await?
            .ok_or_else(|| WebError::NotFound(format!("run #{run_id}")))?;
        let version = versions.get(&state, run.evalset_version_id).await?;
        if let Some(v) = &version {
            for c in &v.file.cases {
                if seen.insert(c.id.clone()) {
                    case_order.push(c.id.clone());
                }
            }
        }
        let figures = run_figures(&state, &run, version.as_deref()).await?;
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
                    case_order.push(case.clone());
                }
            }
            views.push(EntryView {
                key: format!("{run_id}:{candidate_id}"),
                run_id,
                candidate: names
                    .get(&candidate_id)
                    .cloned()
                    .unwrap_or_else(|| format!("candidate #{candidate_id}")),
                evalset: version.as_ref().map(|v| v.file.header.name.clone()).unwrap_or_default(),
                version: version
                    .as_ref()
                    .map(|v| short_hash(&v.content_hash).to_string())
                    .unwrap_or_default(),
                created: run.created_at.display(),
                tally: (0, 0, 0, 0),
                baseline_href: String::new(),
            });
            entries.push(Entry {
                version_id: run.evalset_version_id,
                figures: figures.get(i).cloned().unwrap_or_default(),
                outcomes,
            });
        }
    }
    if entries.is_empty() {
        return Err(WebError::BadRequest("These runs have no candidates to compare.".into()));
    }

    let baseline = match q.get("baseline").map(str::trim).filter(|b| !b.is_empty()) {
        None => 0,
        Some(key) => views.iter().position(|v| v.key == key).ok_or_else(|| {
            WebError::BadRequest(format!(
                "The baseline {:?} is not one of the compared runs' candidates.",
                crate::domain::validation::truncate(key, 30)
            ))
        })?,
    };
    let runs_param = run_ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    for v in views.iter_mut() {
        v.baseline_href = format!("/archive/compare?runs={runs_param}&baseline={}", v.key);
    }

    let versions: HashSet<i64> = entries.iter().map(|e| e.version_id).collect();
    let version_warning = (versions.len() > 1).then(|| {
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
    });

    // Per-case marks against the baseline, and each entry's tally.
    let base = &entries[baseline];
    let mut all_rows = Vec::with_capacity(case_order.len());
    for case in &case_order {
        let cells = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let o = e.outcomes.get(case);
                let text = match o {
                    Some(o) if o.graded > 0 => format!("{}/{}", o.passed, o.graded),
                    _ => NOT_MEASURED.to_string(),
                };
                let m = if i == baseline {
                    None
                } else {
                    Some(mark(base.outcomes.get(case), o))
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
    let pager = Pagination::new(
        format!("/archive/compare?runs={runs_param}&baseline={}", views[baseline].key),
        page,
        CASES_PER_PAGE,
        all_rows.len() as i64,
    );
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!("page {page} of this comparison's cases")));
    }
    let case_count = all_rows.len();
    let cases = all_rows
        .into_iter()
        .skip(pager.offset() as usize)
        .take(CASES_PER_PAGE as usize)
        .collect();

    Ok(ComparePage {
        nav: "archive",
        figures: figure_rows(&entries, baseline),
        entries: views,
        baseline,
        version_warning,
        cases,
        pager,
        case_count,
    })
}

type Pick = fn(&Figures) -> (Option<f64>, Option<Interval>);
/// (label, caliber, which way is better, the figure and its interval, its format).
type FigureSpec = (&'static str, &'static str, Better, Pick, fn(f64) -> String);

fn figure_rows(entries: &[Entry], baseline: usize) -> Vec<FigureRow> {
    let rows: [FigureSpec; 5] = [
        (
            "accuracy",
            "share of graded final attempts passed, 95 % Wilson interval",
            Better::Higher,
            |f| (f.accuracy, f.accuracy_ci),
            |v| format::percent(v, 1),
        ),
        (
            "failure rate",
            "failed final attempts, 95 % Wilson interval",
            Better::Lower,
            |f| (f.failure_rate, f.failure_ci),
            |v| format::percent(v, 1),
        ),
        (
            "TTFT p50",
            "send → first token, 95 % interval of the median",
            Better::Lower,
            |f| (f.ttft_p50_ms, f.ttft_ci),
            |v| ms(Some(v)),
        ),
        (
            "E2E p50",
            "send → end of stream, 95 % interval of the median",
            Better::Lower,
            |f| (f.e2e_p50_ms, f.e2e_ci),
            |v| ms(Some(v)),
        ),
        (
            "decode tok/s/stream p50",
            "(output tokens − first chunk's tokens) / (last − first token), 95 % interval",
            Better::Higher,
            |f| (f.decode_p50_tok_s, f.decode_ci),
            |v| tok_s(Some(v)),
        ),
    ];
    let mut out: Vec<FigureRow> = rows
        .iter()
        .map(|(label, caliber, better, pick, fmt)| {
            let (_, base_ci) = pick(&entries[baseline].figures);
            FigureRow {
                label: label.to_string(),
                caliber,
                cells: entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let (v, ci) = pick(&e.figures);
                        let m = if i == baseline {
                            ""
                        } else if regressed_beyond_noise(base_ci.as_ref(), ci.as_ref(), *better) {
                            "worse"
                        } else if improved_beyond_noise(base_ci.as_ref(), ci.as_ref(), *better) {
                            "better"
                        } else {
                            ""
                        };
                        (with_interval(v, ci.as_ref(), fmt), m)
                    })
                    .collect(),
            }
        })
        .collect();
    // One row per load level, from the one level computation (the run page's and the
    // scorecard's figure for that level); a run without the level shows "—".
    let mut concurrencies: Vec<u32> = entries
        .iter()
        .flat_map(|e| e.figures.levels.iter().map(|l| l.concurrency))
        .collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    for c in concurrencies {
        let at = |e: &Entry| e.figures.levels.iter().find(|l| l.concurrency == c).cloned();
        out.push(FigureRow {
            label: format!("aggregate tok/s @c={c} (steady window)"),
            caliber: AGGREGATE_STEADY,
            cells: entries
                .iter()
                .map(|e| (tok_s(at(e).and_then(|l| l.steady_tok_s)), ""))
                .collect(),
        });
        out.push(FigureRow {
            label: format!("aggregate tok/s @c={c} (whole run)"),
            caliber: AGGREGATE_WHOLE_RUN,
            cells: entries
                .iter()
                .map(|e| (tok_s(at(e).and_then(|l| l.whole_run_tok_s)), ""))
                .collect(),
        });
    }
    out.push(FigureRow {
        label: "requests".into(),
        caliber: "measured final attempts (warm-ups excluded)",
        cells: entries.iter().map(|e| (e.figures.requests.to_string(), "")).collect(),
    });
    out
}
