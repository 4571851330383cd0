//! Humans in the loop (issue 50; docs/review.md): filling a run's review queue from its graders,
//! the one view of an item the labelling page and the API show, saving labels (audited),
//! turning the labels' corrections into the next eval-set version, blind pairwise comparisons
//! and the calibration of an LLM judge against the labels.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::AppError;
use crate::domain::Timestamp;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::evalset::{EvalCase, EvalSetFile};
use crate::domain::grading::{GraderSpec, JudgeScale};
use crate::domain::review::calibration::{Calibration, JudgeFlag};
use crate::domain::review::pairwise::{self, Choice, JUDGE_PICKER, Preference, WinRate};
use crate::domain::review::{
    self as review, AUTO, Answer, Label, LabelInput, NewReviewItem, Progress, QueuePlace, Reason, ReviewItem,
    ScoreScale,
};
use crate::domain::run::{Phase, RequestRecord};
use crate::evalsets::{SavedVersion, save_version};
use crate::store::DynStore;

/// Records read at a time while filling a queue.
const FILL_PAGE: i64 = 2_000;

fn not_found_run(run_id: i64) -> AppError {
    AppError::NotFound(format!("run #{run_id}"))
}

/// The final attempt of each measured quality answer of a record page, keyed by (candidate,
/// case, repetition): (attempt, errored, grades).
type Finals = BTreeMap<(i64, String, u32), (u32, bool, Vec<crate::domain::grading::Grade>)>;

fn keep_final(finals: &mut Finals, r: RequestRecord) {
    if r.is_warmup || r.phase != Phase::Quality {
        return;
    }
    let key = (r.candidate_id, r.case_id.to_string(), r.repetition);
    if finals.get(&key).is_none_or(|(attempt, _, _)| *attempt <= r.attempt) {
        finals.insert(key, (r.attempt, r.error_class.is_some(), r.grades));
    }
}

/// The judge pass mark of a case's first 1–5 judge grader.
fn judge_pass_mark(file: &EvalSetFile, case: &EvalCase) -> Option<u8> {
    file.graders_for(case).iter().find_map(|g| match &g.spec {
        GraderSpec::LlmJudge {
            scale: JudgeScale::OneToFive,
            min,
            ..
        } => Some(min.unwrap_or(crate::domain::grading::DEFAULT_JUDGE_MIN)),
        _ => None,
    })
}

/// Adds to a run's queue every answer its graders cannot settle (`review::select_for_review`);
/// returns how many were new. A second fill adds only what is new, so pages call it freely.
pub async fn fill_queue(store: &DynStore, run_id: i64, actor: &str) -> Result<u64, AppError> {
    let run = store.get_run(run_id).await?.ok_or_else(|| not_found_run(run_id))?;
    let file = store.get_evalset_version(run.evalset_version_id).await?.map(|v| v.file);
    let mut finals = Finals::new();
    let mut after = 0;
    loop {
        let page = store.list_request_records_page(run_id, after, FILL_PAGE).await?;
        let Some((last, _)) = page.last() else { break };
        after = *last;
        for (_, record) in page {
            keep_final(&mut finals, record);
        }
    }
    let answers: Vec<Answer<'_>> = finals
        .iter()
        .map(|((candidate_id, case_id, repetition), (_, errored, grades))| Answer {
            candidate_id: *candidate_id,
            case_id,
            repetition: *repetition,
            errored: *errored,
            grades,
            judge_pass_mark: file.as_ref().and_then(|f| {
                let case = f.cases.iter().find(|c| &c.id == case_id)?;
                judge_pass_mark(f, case)
            }),
        })
        .collect();
    let items: Vec<NewReviewItem> = review::select_for_review(&answers)
        .into_iter()
        .map(|s| NewReviewItem {
            run_id,
            candidate_id: s.candidate_id,
            case_id: s.case_id,
            repetition: s.repetition,
            reasons: s.reasons,
            detail: s.detail,
            added_by: AUTO.to_string(),
        })
        .collect();
    let added = store.add_review_items(&items, Timestamp::now()).await?;
    if added > 0 {
        store
            .append_audit(&NewAuditEntry {
                actor: actor.to_string(),
                action: Action::ReviewQueued,
                target: format!("run #{run_id}"),
                detail: format!("{added} answers the graders cannot settle"),
            })
            .await?;
    }
    Ok(added)
}

/// Adds one answer to a run's queue by hand (from the case page); false when it was queued
/// already. The answer must be one the run recorded.
pub async fn add_by_hand(
    store: &DynStore,
    run_id: i64,
    candidate_id: i64,
    case_id: &str,
    repetition: u32,
    note: &str,
    actor: &str,
) -> Result<bool, AppError> {
    let records = store.list_case_records(run_id, &[case_id.to_string()]).await?;
    if !records
        .iter()
        .any(|r| r.candidate_id == candidate_id && r.repetition == repetition && !r.is_warmup)
    {
        return Err(AppError::NotFound(format!(
            "an answer of candidate #{candidate_id} to case {case_id:?}, repetition {repetition}, in run #{run_id}"
        )));
    }
    let item = NewReviewItem {
        run_id,
        candidate_id,
        case_id: case_id.to_string(),
        repetition,
        reasons: vec![Reason::Manual],
        detail: crate::domain::validation::truncate(note.trim(), 500),
        added_by: actor.to_string(),
    };
    let added = store.add_review_items(&[item], Timestamp::now()).await? > 0;
    if added {
        store
            .append_audit(&NewAuditEntry {
                actor: actor.to_string(),
                action: Action::ReviewQueued,
                target: format!("run #{run_id}"),
                detail: format!("case {case_id:?} of candidate #{candidate_id}, repetition {repetition}, by hand"),
            })
            .await?;
    }
    Ok(added)
}

/// One graded check of the answer, as shown beside it.
#[derive(Debug, Clone, Serialize)]
pub struct GradeLine {
    pub grader: String,
    pub passed: bool,
    pub reason: String,
}

/// Everything the labelling page shows of one item; model output and case text are raw here
/// and escaped where rendered.
#[derive(Debug, Clone, Serialize)]
pub struct ItemView {
    pub item: ReviewItem,
    pub run_name: String,
    pub candidate: String,
    /// (role, content) of the case's messages.
    pub input: Vec<(String, String)>,
    pub expected: Option<String>,
    /// The answer of the item's final attempt; None when it failed.
    pub answer: Option<String>,
    pub error: Option<String>,
    pub grades: Vec<GradeLine>,
    pub labels: Vec<Label>,
    /// The labellers disagree on pass/fail.
    pub disagreement: bool,
    pub scale: ScoreScale,
}

/// The view of one item, or NotFound.
pub async fn item_view(store: &DynStore, item_id: i64) -> Result<ItemView, AppError> {
    let item = store
        .get_review_item(item_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("review item #{item_id}")))?;
    let labels = store
        .list_review_labels_between(Some(item.run_id), item.id, item.id)
        .await?;
    view_of(store, item, labels).await
}

async fn view_of(store: &DynStore, item: ReviewItem, labels: Vec<Label>) -> Result<ItemView, AppError> {
    let run = store
        .get_run(item.run_id)
        .await?
        .ok_or_else(|| not_found_run(item.run_id))?;
    let candidate = store
        .run_candidates(item.run_id)
        .await?
        .into_iter()
        .find(|c| c.id == item.candidate_id)
        .map_or_else(|| format!("candidate #{}", item.candidate_id), |c| c.spec.name);
    let head = store.get_evalset_version_head(run.evalset_version_id).await?;
    let case = store
        .list_eval_cases_by_ids(run.evalset_version_id, std::slice::from_ref(&item.case_id))
        .await?
        .into_iter()
        .next();
    let (input, expected, scale) = match (head, case) {
        (Some(head), Some(case)) => {
            let file = EvalSetFile {
                header: head.header,
                cases: vec![case.clone()],
            };
            let input = file
                .messages_for(&case)
                .into_iter()
                .map(|m| (m.role, m.content))
                .collect();
            let scale = if judge_pass_mark(&file, &case).is_some() {
                ScoreScale::OneToFive
            } else {
                ScoreScale::Unit
            };
            (input, case.expected_text(), scale)
        }
        _ => (Vec::new(), None, ScoreScale::Unit),
    };
    let answer_record = store
        .list_case_records(item.run_id, std::slice::from_ref(&item.case_id))
        .await?
        .into_iter()
        .filter(|r| {
            r.candidate_id == item.candidate_id
                && r.repetition == item.repetition
                && !r.is_warmup
                && r.phase == Phase::Quality
        })
        .max_by_key(|r| r.attempt);
    let (answer, error, grades) = match answer_record {
        Some(r) => (
            r.error_class.is_none().then(|| r.output().to_string()),
            r.error_class
                .map(|c| format!("{}: {}", c.as_str(), r.error_detail().unwrap_or_default())),
            r.grades
                .iter()
                .map(|g| GradeLine {
                    grader: g.grader.to_string(),
                    passed: g.passed,
                    reason: g.reason.clone(),
                })
                .collect(),
        ),
        None => (None, Some("no recorded answer".to_string()), Vec::new()),
    };
    let disagreement = review::disagreement(&labels.iter().collect::<Vec<_>>());
    Ok(ItemView {
        item,
        run_name: run.name,
        candidate,
        input,
        expected,
        answer,
        error,
        grades,
        labels,
        disagreement,
        scale,
    })
}

/// One page of a queue (one run's, or every run's): its items with their labels, and the whole
/// queue's progress counted by the database. Nothing else of the queue is read.
#[derive(Debug, Clone)]
pub struct QueuePage {
    pub items: Vec<ReviewItem>,
    pub labels: Vec<Label>,
    pub progress: Progress,
}

/// The queue's items from `offset` on (by id), at most `limit`, with their labels and the
/// queue's progress.
pub async fn queue_page(store: &DynStore, run_id: Option<i64>, offset: i64, limit: i64) -> Result<QueuePage, AppError> {
    let progress = store.review_progress(run_id).await?;
    let items = store.list_review_items_page(run_id, offset, limit).await?;
    let labels = match (items.first(), items.last()) {
        (Some(first), Some(last)) => store.list_review_labels_between(run_id, first.id, last.id).await?,
        _ => Vec::new(),
    };
    Ok(QueuePage {
        items,
        labels,
        progress,
    })
}

/// The items offered to `who` next (one run's queue, or every run's), in the queue's order
/// after `after`'s place, at most `most`.
pub async fn offered(
    store: &DynStore,
    run_id: Option<i64>,
    who: &str,
    after: Option<QueuePlace>,
    most: usize,
) -> Result<Vec<ReviewItem>, AppError> {
    Ok(store
        .offered_review_items(run_id, who, after, i64::try_from(most).unwrap_or(i64::MAX))
        .await?)
}

/// An item's place in the queue's order as it stands now (None: no such item).
pub async fn place_of(store: &DynStore, item_id: i64) -> Result<Option<QueuePlace>, AppError> {
    Ok(store.get_review_item(item_id).await?.as_ref().map(QueuePlace::of))
}

/// The views of these items, in this order.
pub async fn item_views(store: &DynStore, items: Vec<ReviewItem>) -> Result<Vec<ItemView>, AppError> {
    let mut views = Vec::with_capacity(items.len());
    for item in items {
        let labels = store
            .list_review_labels_between(Some(item.run_id), item.id, item.id)
            .await?;
        views.push(view_of(store, item, labels).await?);
    }
    Ok(views)
}

/// Every item of a queue (one run's, or every run's) that has a label, with its labels, read a
/// page at a time and kept only when `keep` says so: what the ground truth and a judge's
/// calibration read, without holding the whole queue.
async fn labelled_items(
    store: &DynStore,
    run_id: Option<i64>,
    keep: impl Fn(&Label) -> bool,
) -> Result<(Vec<ReviewItem>, Vec<Label>), AppError> {
    let (mut items, mut labels) = (Vec::new(), Vec::new());
    let mut offset = 0;
    loop {
        let page = store.list_review_items_page(run_id, offset, LABELLED_PAGE).await?;
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            break;
        };
        let mine: Vec<Label> = store
            .list_review_labels_between(run_id, first.id, last.id)
            .await?
            .into_iter()
            .filter(|l| keep(l))
            .collect();
        offset += page.len() as i64;
        items.extend(page.into_iter().filter(|i| mine.iter().any(|l| l.item_id == i.id)));
        labels.extend(mine);
    }
    Ok((items, labels))
}

/// Items read at a time by [`labelled_items`].
const LABELLED_PAGE: i64 = 2_000;

/// Saves `actor`'s label on an item, checked against the case's score scale, with its audit
/// entry; returns the label's id.
pub async fn save_label(store: &DynStore, item_id: i64, input: &LabelInput, actor: &str) -> Result<i64, AppError> {
    let view = item_view(store, item_id).await?;
    let body = input.check(view.scale).map_err(AppError::Fields)?;
    let id = store.save_review_label(item_id, actor, &body, Timestamp::now()).await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ReviewLabelled,
            target: format!("review item #{item_id} (run #{})", view.item.run_id),
            detail: format!(
                "{}{}{}",
                body.verdict.as_str(),
                body.score.map(|s| format!(", score {s}")).unwrap_or_default(),
                if body.corrected_expected.is_some() {
                    ", corrected the expected answer"
                } else {
                    ""
                }
            ),
        })
        .await?;
    Ok(id)
}

/// Assigns an item (None: to anyone), audited.
pub async fn assign(store: &DynStore, item_id: i64, assignee: Option<&str>, actor: &str) -> Result<(), AppError> {
    if !store.assign_review_item(item_id, assignee).await? {
        return Err(AppError::NotFound(format!("review item #{item_id}")));
    }
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ReviewAssigned,
            target: format!("review item #{item_id}"),
            detail: assignee.map_or_else(|| "to anyone".to_string(), |a| format!("to {a}")),
        })
        .await?;
    Ok(())
}

/// What saving a run's labels as ground truth did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroundTruth {
    /// The version the run measured.
    pub from_version: i64,
    pub version: i64,
    /// Cases whose expected answer changed.
    pub changed: usize,
    /// A new version was stored (false: nothing to change, or identical content stored before).
    pub stored: bool,
}

/// Saves the corrections labelled on a run's queue as a new version of the run's eval set
/// (through `evalsets::save_version`, audited): the run itself keeps the version it measured.
pub async fn labels_to_version(store: &DynStore, run_id: i64, actor: &str) -> Result<GroundTruth, AppError> {
    let run = store.get_run(run_id).await?.ok_or_else(|| not_found_run(run_id))?;
    let version = store
        .get_evalset_version(run.evalset_version_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("eval-set version #{}", run.evalset_version_id)))?;
    let (items, labels) = labelled_items(store, Some(run_id), |l| l.corrected_expected.is_some()).await?;
    let fixes = review::corrections(&items, &labels);
    let (next, changed) = review::apply_corrections(&version.file, &fixes);
    if changed == 0 {
        return Ok(GroundTruth {
            from_version: version.id,
            version: version.id,
            changed: 0,
            stored: false,
        });
    }
    // The corrected file is checked as any edited one is: a correction that breaks a grader's
    // needs (say, json-fields without an object) is refused with the place named.
    let source = format!("{} with the corrections of run #{run_id}", version.file.header.name);
    let checked = EvalSetFile::parse(&source, &next.normalised()).map_err(|e| AppError::Invalid(e.to_string()))?;
    let SavedVersion { id, stored, .. } = save_version(
        store,
        &checked,
        actor,
        format!("{changed} expected answers corrected by review of run #{run_id}"),
    )
    .await?;
    Ok(GroundTruth {
        from_version: version.id,
        version: id,
        changed,
        stored,
    })
}

/// One blind comparison to make: two answers to one case, sides drawn at random, names hidden.
#[derive(Debug, Clone, Serialize)]
pub struct PairView {
    pub case_id: String,
    pub input: Vec<(String, String)>,
    pub expected: Option<String>,
    pub left_candidate: i64,
    pub right_candidate: i64,
    pub left: String,
    pub right: String,
    /// Comparisons `who` has made of this run, for progress.
    pub done: usize,
    pub total: usize,
}

/// The measured answers of two candidates to the quality cases of a run: (case, a's answer,
/// b's answer), first repetition, cases both answered, in case order.
async fn paired_answers(
    store: &DynStore,
    run_id: i64,
    a: i64,
    b: i64,
) -> Result<Vec<(String, String, String)>, AppError> {
    let mut answers: BTreeMap<(String, i64), (u32, u32, String)> = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = store.list_request_records_page(run_id, after, FILL_PAGE).await?;
        let Some((last, _)) = page.last() else { break };
        after = *last;
        for (_, r) in page {
            if r.is_warmup
                || r.phase != Phase::Quality
                || r.error_class.is_some()
                || (r.candidate_id != a && r.candidate_id != b)
            {
                continue;
            }
            let key = (r.case_id.to_string(), r.candidate_id);
            let rank = (r.repetition, u32::MAX - r.attempt);
            if answers
                .get(&key)
                .is_none_or(|(rep, att, _)| rank < (*rep, u32::MAX - *att))
            {
                answers.insert(key, (r.repetition, r.attempt, r.output().to_string()));
            }
        }
    }
    let mut pairs = Vec::new();
    for ((case, cand), (_, _, text)) in &answers {
        if *cand != a {
            continue;
        }
        if let Some((_, _, other)) = answers.get(&(case.clone(), b)) {
            pairs.push((case.clone(), text.clone(), other.clone()));
        }
    }
    Ok(pairs)
}

/// The next comparison `who` has not made between candidates `a` and `b` of a run; None when
/// every case both answered is compared.
pub async fn next_pair(store: &DynStore, run_id: i64, a: i64, b: i64, who: &str) -> Result<Option<PairView>, AppError> {
    let run = store.get_run(run_id).await?.ok_or_else(|| not_found_run(run_id))?;
    let made: Vec<Preference> = store
        .list_preferences(Some(run_id))
        .await?
        .into_iter()
        .filter(|p| p.picker == who && p.involves(a, b))
        .collect();
    let pairs = paired_answers(store, run_id, a, b).await?;
    let total = pairs.len();
    let Some((case_id, a_text, b_text)) = pairs
        .into_iter()
        .find(|(case, _, _)| !made.iter().any(|p| &p.case_id == case))
    else {
        return Ok(None);
    };
    let head = store.get_evalset_version_head(run.evalset_version_id).await?;
    let case = store
        .list_eval_cases_by_ids(run.evalset_version_id, std::slice::from_ref(&case_id))
        .await?
        .into_iter()
        .next();
    let (input, expected) = match (head, case) {
        (Some(head), Some(case)) => {
            let file = EvalSetFile {
                header: head.header,
                cases: vec![case.clone()],
            };
            (
                file.messages_for(&case)
                    .into_iter()
                    .map(|m| (m.role, m.content))
                    .collect(),
                case.expected_text(),
            )
        }
        _ => (Vec::new(), None),
    };
    let a_left = pairwise::a_on_left(run_id as u64, &case_id, a, b);
    let (left_candidate, right_candidate, left, right) = if a_left {
        (a, b, a_text, b_text)
    } else {
        (b, a, b_text, a_text)
    };
    Ok(Some(PairView {
        case_id,
        input,
        expected,
        left_candidate,
        right_candidate,
        left,
        right,
        done: made.len(),
        total,
    }))
}

/// Records one blind comparison of a run (the sides as shown), audited. The answers' lengths
/// are read from the records, not taken from the form.
pub async fn record_preference(
    store: &DynStore,
    run_id: i64,
    case_id: &str,
    left_candidate: i64,
    right_candidate: i64,
    choice: Choice,
    picker: &str,
) -> Result<i64, AppError> {
    if left_candidate == right_candidate {
        return Err(AppError::Invalid("a comparison needs two different candidates".into()));
    }
    let pairs = paired_answers(store, run_id, left_candidate, right_candidate).await?;
    let (_, left, right) = pairs.iter().find(|(c, _, _)| c == case_id).ok_or_else(|| {
        AppError::NotFound(format!(
            "answers of both candidates to case {case_id:?} in run #{run_id}"
        ))
    })?;
    let preference = Preference {
        case_id: case_id.to_string(),
        left_candidate,
        right_candidate,
        choice,
        picker: picker.to_string(),
        left_chars: left.chars().count() as u32,
        right_chars: right.chars().count() as u32,
    };
    let id = store.save_preference(run_id, &preference, Timestamp::now()).await?;
    store
        .append_audit(&NewAuditEntry {
            actor: picker.to_string(),
            action: Action::PreferenceRecorded,
            target: format!("run #{run_id}"),
            detail: format!("case {case_id:?}: {}", choice.as_str()),
        })
        .await?;
    Ok(id)
}

/// A run's blind comparisons summed up: each ordered pair of candidates' win rate.
pub async fn win_rates(store: &DynStore, run_id: i64, humans_only: bool) -> Result<Vec<WinRate>, AppError> {
    let run = store.get_run(run_id).await?.ok_or_else(|| not_found_run(run_id))?;
    let prefs: Vec<Preference> = store
        .list_preferences(Some(run_id))
        .await?
        .into_iter()
        .filter(|p| !humans_only || !p.picker.starts_with(JUDGE_PICKER))
        .collect();
    Ok(pairwise::all_win_rates(&prefs, &run.candidate_ids))
}

/// The calibration of the LLM judge named `judge` (a candidate's name) against every human
/// label: agreement of its `llm-judge` grades with the labellers' pass/fail on the same
/// answers, and its pairwise comparisons' position and length leans.
pub async fn calibration(store: &DynStore, judge: &str) -> Result<Calibration, AppError> {
    let (items, labels) = labelled_items(store, None, |_| true).await?;
    let mut pairs = Vec::new();
    let mut by_run: BTreeMap<i64, Vec<&ReviewItem>> = BTreeMap::new();
    for item in items.iter().filter(|i| labels.iter().any(|l| l.item_id == i.id)) {
        by_run.entry(item.run_id).or_default().push(item);
    }
    for (run_id, run_items) in by_run {
        let Some(run) = store.get_run(run_id).await? else {
            continue;
        };
        let Some(version) = store.get_evalset_version(run.evalset_version_id).await? else {
            continue;
        };
        let case_ids: Vec<String> = run_items.iter().map(|i| i.case_id.clone()).collect();
        let records = store.list_case_records(run_id, &case_ids).await?;
        for item in run_items {
            let Some(case) = version.file.cases.iter().find(|c| c.id == item.case_id) else {
                continue;
            };
            // The slot of the judge grader naming this judge, if the case has one.
            let Some((slot, _)) = crate::domain::grading::judge_slots(version.file.graders_for(case))
                .into_iter()
                .find(|(_, g)| matches!(&g.spec, GraderSpec::LlmJudge { judge: j, .. } if j == judge))
            else {
                continue;
            };
            let Some(record) = records
                .iter()
                .filter(|r| {
                    r.candidate_id == item.candidate_id
                        && r.repetition == item.repetition
                        && !r.is_warmup
                        && r.phase == Phase::Quality
                })
                .max_by_key(|r| r.attempt)
            else {
                continue;
            };
            let judged = record
                .grades
                .iter()
                .filter(|g| &*g.grader == "llm-judge")
                .nth(slot as usize);
            let Some(judged) = judged else { continue };
            // Each labeller's label counts as one human judgement.
            for label in labels.iter().filter(|l| l.item_id == item.id) {
                pairs.push((label.verdict.passed(), judged.passed));
            }
        }
    }
    let judged: Vec<Preference> = store
        .list_preferences(None)
        .await?
        .into_iter()
        .filter(|p| p.picker == format!("{JUDGE_PICKER}{judge}"))
        .collect();
    Ok(Calibration::new(judge, &pairs, &judged))
}

/// The flagged judges among those the `llm-judge` graders of a run's eval set name (what every
/// scorecard of a run graded by a judge shows and exports).
pub async fn judge_flags(store: &DynStore, run_id: i64) -> Result<Vec<JudgeFlag>, AppError> {
    let mut flags = Vec::new();
    for judge in run_judges(store, run_id).await? {
        flags.extend(calibration(store, &judge).await?.flag());
    }
    Ok(flags)
}

/// The judges the `llm-judge` graders of a run's eval set name, each once.
pub async fn run_judges(store: &DynStore, run_id: i64) -> Result<Vec<String>, AppError> {
    let run = store.get_run(run_id).await?.ok_or_else(|| not_found_run(run_id))?;
    let Some(version) = store.get_evalset_version(run.evalset_version_id).await? else {
        return Ok(Vec::new());
    };
    let mut judges: Vec<String> = version
        .file
        .cases
        .iter()
        .flat_map(|c| version.file.graders_for(c))
        .filter_map(|g| match &g.spec {
            GraderSpec::LlmJudge { judge, .. } => Some(judge.clone()),
            _ => None,
        })
        .collect();
    judges.sort();
    judges.dedup();
    Ok(judges)
}

/// The rubric of a pairwise judge when the case's graders give none.
const DEFAULT_PAIRWISE_RUBRIC: &str = "Prefer the response that answers the request correctly and completely; \
     length and position are not merits.";

/// What a batch of judge comparisons did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct JudgedPairs {
    pub recorded: usize,
    /// The judge replied without a preference line.
    pub unreadable: usize,
    pub failed: usize,
}

/// Has the LLM judge `judge` (a candidate's name) compare candidates `a` and `b` of a run blind,
/// each case both answered shown in both orders (so its position bias can be measured), up to
/// `most` cases it has not compared yet; each choice stored as a preference of `judge:<name>`.
pub async fn judge_pairs(
    store: &DynStore,
    run_id: i64,
    a: i64,
    b: i64,
    judge: &str,
    most: usize,
    actor: &str,
) -> Result<JudgedPairs, AppError> {
    let run = store.get_run(run_id).await?.ok_or_else(|| not_found_run(run_id))?;
    let candidate = store
        .list_candidates()
        .await?
        .into_iter()
        .find(|c| c.spec.name == judge)
        .ok_or_else(|| AppError::NotFound(format!("a candidate named {judge:?} to judge with")))?;
    let version = store
        .get_evalset_version(run.evalset_version_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("eval-set version #{}", run.evalset_version_id)))?;
    let picker = format!("{JUDGE_PICKER}{judge}");
    let made = store.list_preferences(Some(run_id)).await?;
    let client = crate::engine::run::pairwise_judge::PairwiseJudge::new(candidate, &run.config)
        .map_err(|e| AppError::Invalid(e.to_string()))?;
    let mut done = JudgedPairs::default();
    let mut cases = 0;
    for (case_id, a_text, b_text) in paired_answers(store, run_id, a, b).await? {
        if cases >= most {
            break;
        }
        let Some(case) = version.file.cases.iter().find(|c| c.id == case_id) else {
            continue;
        };
        let rubric = version
            .file
            .graders_for(case)
            .iter()
            .find_map(|g| match &g.spec {
                GraderSpec::LlmJudge { rubric, .. } => Some(rubric.clone()),
                _ => None,
            })
            .unwrap_or_else(|| DEFAULT_PAIRWISE_RUBRIC.to_string());
        let input: String = version
            .file
            .messages_for(case)
            .into_iter()
            .map(|m| format!("{}: {}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n");
        let mut compared = false;
        for (left, right, left_text, right_text) in [(a, b, &a_text, &b_text), (b, a, &b_text, &a_text)] {
            if made.iter().any(|p| {
                p.picker == picker && p.case_id == case_id && p.left_candidate == left && p.right_candidate == right
            }) {
                continue;
            }
            compared = true;
            let prompt = pairwise::pairwise_prompt(&rubric, &input, left_text, right_text);
            match client.compare(&version.file, &case_id, prompt).await {
                Ok(Some(choice)) => {
                    let preference = Preference {
                        case_id: case_id.clone(),
                        left_candidate: left,
                        right_candidate: right,
                        choice,
                        picker: picker.clone(),
                        left_chars: left_text.chars().count() as u32,
                        right_chars: right_text.chars().count() as u32,
                    };
                    store.save_preference(run_id, &preference, Timestamp::now()).await?;
                    done.recorded += 1;
                }
                Ok(None) => done.unreadable += 1,
                Err(why) => {
                    tracing::warn!(run_id, judge, case = %case_id, %why, "a pairwise judge call failed");
                    done.failed += 1;
                }
            }
        }
        if compared {
            cases += 1;
        }
    }
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::PreferenceRecorded,
            target: format!("run #{run_id}"),
            detail: format!(
                "judge {judge:?} compared candidates #{a} and #{b}: {} recorded, {} unreadable, {} failed",
                done.recorded, done.unreadable, done.failed
            ),
        })
        .await?;
    Ok(done)
}
