//! `GET /runs/{id}/cases`: the drill-down. Every case of the run with its input and expected
//! value, then every measured attempt of every candidate: output (escaped, like all model text),
//! grader results and reasons, timings and token counts with their source. Filters (failures
//! only, error class, tag, outputs that differ between candidates) and pagination run on the
//! server: the filters read light per-attempt facts, and only the shown page's records are
//! loaded whole. A troubleshooting panel groups the run's failures by class with the ordered
//! checks (symptom → input → environment → parameters → framework limits).
use crate::domain::format::visible_controls;
use std::collections::{BTreeMap, HashMap, HashSet};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, RawQuery, State};
use serde::{Deserialize, Serialize};

use crate::domain::calibers::LagSpikes;
use crate::domain::evalset::EvalSetFile;
use crate::domain::grading::case_passed;
use crate::domain::run::{ErrorClass, RequestRecord, Run};
use crate::store::RecordFact;
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
    pub multi_candidate: bool,
    pub matching: usize,
    pub total_cases: usize,
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
}

impl Filters {
    fn from_query(q: &FormBody) -> Result<Filters, WebError> {
        let on = |name: &str| matches!(q.get(name), Some("on" | "1" | "true"));
        let f = Filters {
            failures: on("failures"),
            error_class: q.get("error_class").unwrap_or_default().trim().to_string(),
            tag: q.get("tag").unwrap_or_default().trim().to_string(),
            differs: on("differs"),
        };
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
    pub candidate: String,
    pub phase: &'static str,
    pub repetition: u32,
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
    // The version's header and each case's id and tags only: the page's own cases are read
    // below, so a 100,000-case set is never parsed whole for a page of ten.
    let version = state.store.get_evalset_version_head(run.evalset_version_id).await?;
    let keys = match &version {
        Some(v) => state.store.list_eval_case_keys(v.id).await?,
        None => Vec::new(),
    };
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

    // The run's cases in eval-set order (its case limit applied), then any recorded case the
    // stored version does not list (kept visible rather than dropped).
    let limit = run.config.case_limit.map(|n| n as usize).unwrap_or(usize::MAX);
    let mut order: Vec<String> = keys.iter().take(limit).map(|(id, _)| id.clone()).collect();
    let listed: HashSet<&str> = keys.iter().map(|(id, _)| id.as_str()).collect();
    let mut extra: Vec<String> = index
        .recorded
        .iter()
        .filter(|id| !listed.contains(id.as_str()))
        .cloned()
        .collect();
    extra.sort();
    order.extend(extra);

    let tags_by_case: HashMap<&str, &[String]> = keys.iter().map(|(id, tags)| (id.as_str(), tags.as_slice())).collect();
    let tags_of = |id: &str| -> Vec<String> { tags_by_case.get(id).map(|t| t.to_vec()).unwrap_or_default() };
    let differing: HashSet<&str> = index.differing.iter().flatten().map(String::as_str).collect();
    let matching: Vec<&String> = order
        .iter()
        .filter(|id| {
            let classes = index.failures.get(id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            (!filters.failures || !classes.is_empty())
                && (filters.error_class.is_empty() || classes.contains(&filters.error_class))
                && (filters.tag.is_empty() || tags_by_case.get(id.as_str()).is_some_and(|t| t.contains(&filters.tag)))
                && (!filters.differs || differing.contains(id.as_str()))
        })
        .collect();

    let base = match filters.query() {
        q if q.is_empty() => format!("/runs/{}/cases", run.id),
        q => format!("/runs/{}/cases?{q}", run.id),
    };
    let pager = Pagination::new(base, page, CASES_PER_PAGE, matching.len() as i64);
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!(
            "page {page} of this run's cases (there are {} pages)",
            pager.pages
        )));
    }
    let shown: Vec<String> = matching
        .iter()
        .skip(pager.offset() as usize)
        .take(CASES_PER_PAGE as usize)
        .map(|id| id.to_string())
        .collect();
    let records = state.store.list_case_records(run.id, &shown).await?;
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
    let mut records_by_case: HashMap<&str, Vec<&RequestRecord>> = HashMap::new();
    for r in records.iter().filter(|r| !r.is_warmup) {
        records_by_case.entry(r.case_id.as_str()).or_default().push(r);
    }

    let cases = shown
        .iter()
        .map(|id| {
            let case = set_cases.iter().find(|c| c.id == *id);
            let mut mine = records_by_case.remove(id.as_str()).unwrap_or_default();
            mine.sort_by_key(|r| {
                (
                    run.candidate_ids.iter().position(|&c| c == r.candidate_id),
                    r.phase.as_str(),
                    r.repetition,
                    r.attempt,
                )
            });
            // The final attempt of each (candidate, phase, repetition) is the one that counts.
            let mut last: HashMap<(i64, &str, u32), u32> = HashMap::new();
            for r in &mine {
                let e = last
                    .entry((r.candidate_id, r.phase.as_str(), r.repetition))
                    .or_insert(0);
                *e = (*e).max(r.attempt);
            }
            let all: Vec<AttemptView> = mine
                .iter()
                .map(|r| {
                    let is_final = last.get(&(r.candidate_id, r.phase.as_str(), r.repetition)) == Some(&r.attempt);
                    attempt_view(r, name_of(r.candidate_id), is_final, spikes)
                })
                .collect();
            let total = all.len();
            let failed_attempts = all.iter().filter(|a| a.failed()).count();
            // Failed attempts first (up to the cap), then the rest in order; shown in order.
            let mut keep: Vec<usize> = (0..total)
                .filter(|&i| all[i].failed())
                .take(ATTEMPTS_PER_CASE)
                .collect();
            keep.extend(
                (0..total)
                    .filter(|&i| !all[i].failed())
                    .take(ATTEMPTS_PER_CASE - keep.len()),
            );
            keep.sort_unstable();
            let attempts: Vec<AttemptView> = keep.into_iter().map(|i| all[i].clone()).collect();
            let mut outcome = if total == 0 {
                "not sent yet".to_string()
            } else if failed_attempts == 0 {
                format!("all {total} attempts ok")
            } else {
                format!("{failed_attempts} of {total} attempts failed")
            };
            if attempts.len() < total {
                outcome.push_str(&format!(" · showing {} of them, failed ones first", attempts.len()));
            }
            CaseView {
                id: id.clone(),
                tags: tags_of(id),
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
    let mut error_classes: Vec<(String, String)> =
        index.classes.iter().map(|(c, _, _)| (c.clone(), c.clone())).collect();
    if !filters.error_class.is_empty() && !index.classes.iter().any(|(c, _, _)| *c == filters.error_class) {
        error_classes.push((filters.error_class.clone(), filters.error_class.clone()));
    }
    let mut tags: Vec<String> = keys
        .iter()
        .flat_map(|(_, tags)| tags.iter().cloned())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    tags.sort();

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
        tags,
        multi_candidate: run.candidate_ids.len() > 1,
        matching: matching.len(),
        total_cases: order.len(),
        cases,
        pager,
        troubleshooting,
    })
}

/// What the filters need to know about every case of a run, without its records.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct CaseIndex {
    /// Cases with at least one measured attempt.
    recorded: Vec<String>,
    /// Failure classes (error classes, or `wrong_answer`) seen per case; cases without
    /// failures are absent.
    failures: HashMap<String, Vec<String>>,
    /// (class, failed attempts, cases), by class name.
    classes: Vec<(String, usize, usize)>,
    /// Cases whose successful outputs differ between candidates (None when not computed).
    differing: Option<Vec<String>>,
}

/// Cache kind of a terminal run's [`CaseIndex`].
const CASE_INDEX_KIND: &str = "case-index/1";

/// The run's case index: cached for a terminal run (computed in full once), computed from
/// the stored facts for an unfinished one (the differing-outputs query only when asked).
pub(super) async fn case_index(state: &AppState, run: &Run, want_differing: bool) -> Result<CaseIndex, WebError> {
    let cacheable = run.status.is_terminal() && run.error.as_deref() != Some(crate::store::IMPORT_INCOMPLETE);
    if cacheable && let Some(body) = state.store.get_run_summary(run.id, CASE_INDEX_KIND).await? {
        match serde_json::from_str::<CaseIndex>(&body) {
            Ok(index) => return Ok(index),
            Err(e) => tracing::warn!(run_id = run.id, error = %e, "cached case index unreadable; recomputing"),
        }
    }
    let facts: Vec<RecordFact> = state
        .store
        .list_record_facts(run.id)
        .await?
        .into_iter()
        .filter(|f| !f.is_warmup)
        .collect();
    let mut recorded: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut failures: HashMap<String, Vec<String>> = HashMap::new();
    let mut classes: BTreeMap<String, (usize, HashSet<&str>)> = BTreeMap::new();
    for f in &facts {
        if seen.insert(f.case_id.as_str()) {
            recorded.push(f.case_id.clone());
        }
        let class = match (f.error_class, f.passed) {
            (Some(c), _) => c.as_str().to_string(),
            (None, Some(false)) => WRONG_ANSWER.to_string(),
            _ => continue,
        };
        let list = failures.entry(f.case_id.clone()).or_default();
        if !list.contains(&class) {
            list.push(class.clone());
        }
        let entry = classes.entry(class).or_default();
        entry.0 += 1;
        entry.1.insert(f.case_id.as_str());
    }
    let differing = if cacheable || want_differing {
        Some(state.store.cases_with_differing_outputs(run.id).await?)
    } else {
        None
    };
    let index = CaseIndex {
        recorded,
        classes: classes
            .into_iter()
            .map(|(class, (attempts, cases))| (class, attempts, cases.len()))
            .collect(),
        failures,
        differing,
    };
    if cacheable {
        match serde_json::to_string(&index) {
            Ok(body) => state.store.save_run_summary(run.id, CASE_INDEX_KIND, &body).await?,
            Err(e) => tracing::warn!(run_id = run.id, error = %e, "could not cache the case index"),
        }
    }
    Ok(index)
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

impl AttemptView {
    /// A request error or a wrong answer.
    pub fn failed(&self) -> bool {
        self.status != "ok" || self.passed == Some(false)
    }
}

fn attempt_view(r: &RequestRecord, candidate: String, is_final: bool, spikes: Option<&LagSpikes>) -> AttemptView {
    let msf = |us: Option<i64>| ms(us.map(|v| v as f64 / 1000.0));
    let count = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| NOT_MEASURED.to_string());
    let source = r.output_tokens_source.map(|s| s.as_str()).unwrap_or("unknown");
    AttemptView {
        candidate,
        phase: r.phase.as_str(),
        repetition: r.repetition,
        attempt: r.attempt,
        is_final,
        lag_spike: spikes.is_some_and(|s| s.marks(r)),
        status: r
            .error_class
            .map(|c| c.as_str().to_string())
            .unwrap_or_else(|| "ok".into()),
        error_detail: r.error_detail.as_deref().map(|d| visible_controls(d).into_owned()),
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
                    (false, true) => g.grader.clone(),
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
                match (r.connect_us, r.connection_reused) {
                    (_, Some(true)) => "reused".to_string(),
                    (us, _) => msf(us),
                },
            ),
            ("headers", msf(r.headers_us)),
            ("TTFT", msf(r.ttft_us())),
            ("TTFA", msf(r.first_content_us)),
            ("last token", msf(r.last_token_us)),
            ("E2E", msf(r.end_us)),
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
        output: visible_controls(&r.output).into_owned(),
        reasoning: r
            .reasoning
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| visible_controls(s).into_owned()),
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
