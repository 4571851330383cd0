//! What the cases page's filters know of a run's cases without reading its records: every
//! case's marks (tags, failure classes, outcomes, differing outputs) and the counts beside the
//! filters. A terminal run's is stored once (`Store::save_run_cases`), an unfinished run's
//! computed from its records' facts and shared by its views.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::AppError;
use crate::domain::case_index::{IndexedCase, Mark, MarkKind, MarkTest, NO_CANDIDATE, Outcome, matches};
use crate::domain::run::Run;
use crate::live::Live;
use crate::store::{DynStore, EvalCaseKey, RecordFact};

/// The failure class of an answer a grader failed.
pub const WRONG_ANSWER: &str = "wrong_answer";

/// A measured attempt's failure class: its error class, `wrong_answer` when a grader failed
/// it, None when it did not fail.
pub fn failure_class(f: &RecordFact) -> Option<String> {
    match (f.error_class, f.passed) {
        (Some(c), _) => Some(c.as_str().to_string()),
        (None, Some(false)) => Some(WRONG_ANSWER.to_string()),
        _ => None,
    }
}

/// What the filters know of a run's cases, without its records.
#[derive(Clone)]
pub struct CaseIndex {
    pub head: CaseIndexHead,
    /// Every case with its marks, in page order; None when they are stored (a terminal run's
    /// whose index was computed before: read a page at a time by the store).
    pub cases: Option<std::sync::Arc<Vec<IndexedCase>>>,
}

/// The part of a run's case index kept whole: small however many cases the run has.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CaseIndexHead {
    /// (class, failed attempts, cases), by class name.
    pub classes: Vec<(String, usize, usize)>,
    /// Every tag of the eval set version's cases, sorted.
    pub tags: Vec<String>,
    /// The run's cases: its eval set's (its case limit applied) and any recorded case the
    /// version does not list.
    pub total: usize,
}

/// Cache kind of a terminal run's [`CaseIndexHead`]; its cases are stored beside it
/// ([`crate::store::Store::save_run_cases`]).
pub const CASE_INDEX_KIND: &str = "case-index/3";

impl CaseIndex {
    /// The cases passing every test and found by the text search (None: no search), in page
    /// order: how many, and the ids of those from `offset` on (at most `most`).
    pub async fn page(
        &self,
        store: &DynStore,
        run_id: i64,
        tests: &[MarkTest],
        found: Option<&HashSet<String>>,
        offset: u64,
        most: u64,
    ) -> Result<(u64, Vec<String>), AppError> {
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
            (None, None) => store.page_run_cases(run_id, tests, Some((offset, most))).await?,
            // The text search has read the whole run already: its matches are paged here.
            (None, Some(_)) => {
                let (_, all) = store.page_run_cases(run_id, tests, None).await?;
                page_of(all.into_iter().filter(searched).collect())
            }
        })
    }
}

/// The run's case index: stored for a terminal run (computed in full once), computed from the
/// stored facts for an unfinished one (the differing-outputs query only when asked).
pub async fn case_index(
    store: &DynStore,
    live: &[Live<CaseIndex>; 2],
    run: &Run,
    want_differing: bool,
) -> Result<CaseIndex, AppError> {
    let cacheable = crate::runs::summaries_are_stored(run);
    if cacheable && let Some(body) = store.get_run_summary(run.id, CASE_INDEX_KIND).await? {
        match serde_json::from_str::<CaseIndexHead>(&body) {
            Ok(head) => return Ok(CaseIndex { head, cases: None }),
            Err(e) => tracing::warn!(run_id = run.id, error = %e, "stored case index unreadable; recomputing"),
        }
    }
    // An unfinished run's is read from every record's facts: shared by its views (apart with
    // and without the differing-outputs marks, which cost a query of their own).
    live[usize::from(want_differing)]
        .for_run(run, computed_case_index(store, run, want_differing))
        .await
}

/// The run's case index from its records' facts; stored for a terminal run.
async fn computed_case_index(store: &DynStore, run: &Run, want_differing: bool) -> Result<CaseIndex, AppError> {
    // Every record's facts are a read as big as a candidate's records: it takes their place.
    let _place = crate::runs::record_holder_place().await;
    let cacheable = crate::runs::summaries_are_stored(run);
    let facts: Vec<RecordFact> = store
        .list_record_facts(run.id)
        .await?
        .into_iter()
        .filter(|f| !f.is_warmup)
        .collect();
    let keys = store.list_eval_case_keys(run.evalset_version_id).await?;
    let differing = if cacheable || want_differing {
        Some(differing_cases(store, run.id, &facts).await?)
    } else {
        None
    };
    let limit = run.config.case_limit.map(|n| n as usize).unwrap_or(usize::MAX);
    let (head, cases) = index_cases(&keys, limit, &facts, differing.as_deref());
    if cacheable {
        match serde_json::to_string(&head) {
            Ok(body) => store.save_run_cases(run.id, &cases, CASE_INDEX_KIND, &body).await?,
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
async fn differing_cases(store: &DynStore, run_id: i64, facts: &[RecordFact]) -> Result<Vec<String>, AppError> {
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
            differing.extend(store.cases_with_differing_outputs(run_id, &batch).await?);
            batch.clear();
            attempts = 0;
        }
        batch.push(case.to_string());
        attempts += n;
    }
    differing.extend(store.cases_with_differing_outputs(run_id, &batch).await?);
    Ok(differing)
}
