//! Humans in the loop (issue 50): the review queue, labels, blind pairwise preferences and the
//! calibration of LLM judges against human labels. Pure: which answers deserve a human look
//! (`select`), what a label is and when it is valid, and the statistics over labels and
//! preferences (`pairwise`, `calibration`). The store keeps queue items, labels and
//! preferences; the app fills the queue from a run's records and turns labels into the next
//! eval-set version.
pub mod calibration;
pub mod pairwise;
mod select;

pub use select::{Answer, Selected, near_field_threshold, select_for_review};

use serde::{Deserialize, Serialize};

/// Why an answer is in the review queue. An item may have several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The candidate's repetitions of the case disagree (one passed, another failed).
    Flip,
    /// Two deterministic graders of the answer disagree (one passed, one failed).
    GraderDisagreement,
    /// The LLM judge and a deterministic grader of the answer disagree.
    JudgeVsDeterministic,
    /// The judge's score is one step from its pass mark (either side).
    NearPassMark,
    /// An extraction answer decided by a single field (all others right).
    NearThresholdField,
    /// Added by hand from the case page.
    Manual,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::Flip,
        Reason::GraderDisagreement,
        Reason::JudgeVsDeterministic,
        Reason::NearPassMark,
        Reason::NearThresholdField,
        Reason::Manual,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Flip => "flip",
            Reason::GraderDisagreement => "grader_disagreement",
            Reason::JudgeVsDeterministic => "judge_vs_deterministic",
            Reason::NearPassMark => "near_pass_mark",
            Reason::NearThresholdField => "near_threshold_field",
            Reason::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// In words, for the queue page.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Flip => "repetitions disagree",
            Reason::GraderDisagreement => "graders disagree",
            Reason::JudgeVsDeterministic => "judge disagrees with a deterministic grader",
            Reason::NearPassMark => "judge score next to the pass mark",
            Reason::NearThresholdField => "one extraction field decides it",
            Reason::Manual => "added by hand",
        }
    }
}

/// Where a queue item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Waiting for a labeller (maybe assigned to one).
    Open,
    /// A labeller took it; others pass over it.
    Claimed,
    /// Put aside by a labeller; still labellable, offered after the open ones.
    Skipped,
    /// Labelled at least once.
    Labelled,
}

impl ItemStatus {
    pub const ALL: [ItemStatus; 4] = [
        ItemStatus::Open,
        ItemStatus::Claimed,
        ItemStatus::Skipped,
        ItemStatus::Labelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Open => "open",
            ItemStatus::Claimed => "claimed",
            ItemStatus::Skipped => "skipped",
            ItemStatus::Labelled => "labelled",
        }
    }

    pub fn parse(s: &str) -> Option<ItemStatus> {
        ItemStatus::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A queue item to store: one answer (candidate × case × repetition) of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct NewReviewItem {
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: String,
    pub repetition: u32,
    pub reasons: Vec<Reason>,
    /// What made the selection, in words (e.g. "json-fields failed, exact passed").
    pub detail: String,
    /// Who added it ("auto" for the automatic fill).
    pub added_by: String,
}

/// Who added an item filled from the graders.
pub const AUTO: &str = "auto";

/// A stored queue item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewItem {
    pub id: i64,
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: String,
    pub repetition: u32,
    pub reasons: Vec<Reason>,
    pub detail: String,
    pub status: ItemStatus,
    /// Whom it is assigned to (None: anyone).
    pub assignee: Option<String>,
    /// Who claimed it, while claimed.
    pub claimed_by: Option<String>,
    pub added_by: String,
    pub created_at: crate::Timestamp,
}

impl ReviewItem {
    /// Whether `who` may be offered this item next: not labelled, not claimed by someone else,
    /// and assigned to nobody or to them.
    pub fn offered_to(&self, who: &str) -> bool {
        self.status != ItemStatus::Labelled
            && self.assignee.as_deref().is_none_or(|a| a == who)
            && (self.status != ItemStatus::Claimed || self.claimed_by.as_deref() == Some(who))
    }
}

/// An item's place in the order items are offered in (open and claimed before skipped, each
/// by id): where the next page of offered items starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueuePlace {
    pub skipped: bool,
    pub id: i64,
}

impl QueuePlace {
    /// The item's place as it stands.
    pub fn of(item: &ReviewItem) -> QueuePlace {
        QueuePlace {
            skipped: item.status == ItemStatus::Skipped,
            id: item.id,
        }
    }
}

/// The order items are offered in: open and claimed before skipped, each by id. `after`: the
/// item offered last (the next one after it in that order); None: from the start.
pub fn next_for<'a>(items: &'a [ReviewItem], who: &str, after: Option<i64>) -> Option<&'a ReviewItem> {
    let from = after.and_then(|a| items.iter().find(|i| i.id == a)).map(QueuePlace::of);
    items
        .iter()
        .filter(|i| i.offered_to(who))
        .filter(|i| from.is_none_or(|f| QueuePlace::of(i) > f))
        .min_by_key(|i| QueuePlace::of(i))
}

/// How far a queue has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Progress {
    pub total: u64,
    pub labelled: u64,
    pub claimed: u64,
    pub skipped: u64,
    /// Items labelled by two or more people who disagree on pass/fail.
    pub disagreements: u64,
}

impl Progress {
    pub fn of(items: &[ReviewItem], labels: &[Label]) -> Progress {
        let mut p = Progress {
            total: items.len() as u64,
            ..Progress::default()
        };
        for item in items {
            match item.status {
                ItemStatus::Labelled => p.labelled += 1,
                ItemStatus::Claimed => p.claimed += 1,
                ItemStatus::Skipped => p.skipped += 1,
                ItemStatus::Open => {}
            }
            let mine: Vec<&Label> = labels.iter().filter(|l| l.item_id == item.id).collect();
            if disagreement(&mine) {
                p.disagreements += 1;
            }
        }
        p
    }

    /// Labelled share in percent, 0 for an empty queue.
    pub fn percent(&self) -> u64 {
        (self.labelled * 100).checked_div(self.total).unwrap_or(0)
    }
}

/// Whether the labellers of one item disagree on pass/fail (each labeller's latest label counts).
pub fn disagreement(labels: &[&Label]) -> bool {
    let mut verdicts = labels.iter().map(|l| l.verdict);
    verdicts.next().is_some_and(|first| verdicts.any(|v| v != first))
}

/// A human's verdict on an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
        }
    }
    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "pass" => Some(Verdict::Pass),
            "fail" => Some(Verdict::Fail),
            _ => None,
        }
    }
    pub fn passed(self) -> bool {
        self == Verdict::Pass
    }
}

/// The scale a label's score is on: the set's judge scale when it has one (1–5), else [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ScoreScale {
    OneToFive,
    Unit,
}

impl ScoreScale {
    pub fn bounds(self) -> (f64, f64) {
        match self {
            ScoreScale::OneToFive => (1.0, 5.0),
            ScoreScale::Unit => (0.0, 1.0),
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            ScoreScale::OneToFive => "1 to 5",
            ScoreScale::Unit => "0 to 1",
        }
    }
}

/// A label as a labeller submits it, before it is checked.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct LabelInput {
    pub verdict: String,
    #[serde(default)]
    pub score: Option<String>,
    #[serde(default)]
    pub corrected_expected: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

/// A checked label's content.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelBody {
    pub verdict: Verdict,
    pub score: Option<f64>,
    /// The expected answer as it should have been (None: the stored one is right).
    pub corrected_expected: Option<String>,
    pub note: String,
}

/// Longest note and corrected expected answer, in characters.
pub const MAX_NOTE_CHARS: usize = 4_000;
pub const MAX_CORRECTION_CHARS: usize = 20_000;

impl LabelInput {
    /// The label, or the field errors (named by field) that refuse it.
    pub fn check(&self, scale: ScoreScale) -> Result<LabelBody, crate::validation::FieldErrors> {
        let mut errors = crate::validation::FieldErrors::default();
        let verdict = Verdict::parse(self.verdict.trim());
        if verdict.is_none() {
            errors.add("verdict", "choose pass or fail");
        }
        let score = match self.score.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => match s.parse::<f64>() {
                Ok(x) if x.is_finite() && (scale.bounds().0..=scale.bounds().1).contains(&x) => Some(x),
                _ => {
                    errors.add("score", format!("a number from {}", scale.describe()));
                    None
                }
            },
        };
        let corrected_expected = self
            .corrected_expected
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(str::to_string);
        if corrected_expected
            .as_ref()
            .is_some_and(|c| c.chars().count() > MAX_CORRECTION_CHARS)
        {
            errors.add(
                "corrected_expected",
                format!("at most {MAX_CORRECTION_CHARS} characters"),
            );
        }
        let note = self.note.clone().unwrap_or_default();
        if note.chars().count() > MAX_NOTE_CHARS {
            errors.add("note", format!("at most {MAX_NOTE_CHARS} characters"));
        }
        match verdict {
            Some(verdict) if errors.is_empty() => Ok(LabelBody {
                verdict,
                score,
                corrected_expected,
                note: note.trim().to_string(),
            }),
            _ => Err(errors),
        }
    }
}

/// A stored label: one labeller's latest word on one item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Label {
    pub id: i64,
    pub item_id: i64,
    pub labeller: String,
    pub verdict: Verdict,
    pub score: Option<f64>,
    pub corrected_expected: Option<String>,
    pub note: String,
    pub labelled_at: crate::Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: i64, status: ItemStatus, assignee: Option<&str>, claimed_by: Option<&str>) -> ReviewItem {
        ReviewItem {
            id,
            run_id: 1,
            candidate_id: 1,
            case_id: format!("c{id}"),
            repetition: 0,
            reasons: vec![Reason::Manual],
            detail: String::new(),
            status,
            assignee: assignee.map(str::to_string),
            claimed_by: claimed_by.map(str::to_string),
            added_by: "ana".into(),
            created_at: crate::Timestamp(0),
        }
    }

    fn label(item_id: i64, who: &str, verdict: Verdict) -> Label {
        Label {
            id: 0,
            item_id,
            labeller: who.into(),
            verdict,
            score: None,
            corrected_expected: None,
            note: String::new(),
            labelled_at: crate::Timestamp(0),
        }
    }

    #[test]
    fn the_next_item_skips_what_is_labelled_claimed_by_others_or_assigned_elsewhere_and_skipped_comes_last() {
        let items = vec![
            item(1, ItemStatus::Labelled, None, None),
            item(2, ItemStatus::Claimed, None, Some("bob")),
            item(3, ItemStatus::Skipped, None, None),
            item(4, ItemStatus::Open, Some("bob"), None),
            item(5, ItemStatus::Open, None, None),
            item(6, ItemStatus::Open, Some("ana"), None),
        ];
        assert_eq!(next_for(&items, "ana", None).map(|i| i.id), Some(5));
        assert_eq!(next_for(&items, "ana", Some(5)).map(|i| i.id), Some(6));
        assert_eq!(next_for(&items, "ana", Some(6)).map(|i| i.id), Some(3));
        assert_eq!(next_for(&items, "ana", Some(3)).map(|i| i.id), None);
        assert_eq!(next_for(&items, "bob", None).map(|i| i.id), Some(2));
    }

    #[test]
    fn progress_counts_statuses_and_disagreeing_labellers() {
        let items = vec![
            item(1, ItemStatus::Labelled, None, None),
            item(2, ItemStatus::Labelled, None, None),
            item(3, ItemStatus::Skipped, None, None),
            item(4, ItemStatus::Open, None, None),
        ];
        let labels = vec![
            label(1, "ana", Verdict::Pass),
            label(1, "bob", Verdict::Fail),
            label(2, "ana", Verdict::Pass),
            label(2, "bob", Verdict::Pass),
        ];
        let p = Progress::of(&items, &labels);
        assert_eq!(
            p,
            Progress {
                total: 4,
                labelled: 2,
                claimed: 0,
                skipped: 1,
                disagreements: 1
            }
        );
        assert_eq!(p.percent(), 50);
    }

    #[test]
    fn a_label_names_each_bad_field_and_keeps_a_good_one() {
        let bad = LabelInput {
            verdict: "maybe".into(),
            score: Some("7".into()),
            corrected_expected: None,
            note: Some("x".repeat(MAX_NOTE_CHARS + 1)),
        };
        let errors = bad.check(ScoreScale::OneToFive).unwrap_err();
        for field in ["verdict", "score", "note"] {
            assert!(errors.get(field).is_some(), "{field}: {errors:?}");
        }
        let good = LabelInput {
            verdict: "fail".into(),
            score: Some("2".into()),
            corrected_expected: Some("billing".into()),
            note: Some(" wrong queue ".into()),
        };
        assert_eq!(
            good.check(ScoreScale::OneToFive).unwrap(),
            LabelBody {
                verdict: Verdict::Fail,
                score: Some(2.0),
                corrected_expected: Some("billing".into()),
                note: "wrong queue".into()
            }
        );
        assert!(good.check(ScoreScale::Unit).is_err(), "2 is outside 0..1");
    }
}

/// The tag a case gets when a reviewer corrected its expected answer.
pub const REVIEWED_TAG: &str = "human-reviewed";

/// The corrections a queue's labels make to its eval set, one per case: of the labels that
/// carry a corrected expected answer, the latest for each case (labels in any order).
pub fn corrections(items: &[ReviewItem], labels: &[Label]) -> Vec<(String, String)> {
    let mut latest: std::collections::BTreeMap<&str, &Label> = std::collections::BTreeMap::new();
    for label in labels.iter().filter(|l| l.corrected_expected.is_some()) {
        let Some(item) = items.iter().find(|i| i.id == label.item_id) else {
            continue;
        };
        let entry = latest.entry(item.case_id.as_str()).or_insert(label);
        if (label.labelled_at, label.id) > (entry.labelled_at, entry.id) {
            *entry = label;
        }
    }
    latest
        .into_iter()
        .filter_map(|(case, l)| Some((case.to_string(), l.corrected_expected.clone()?)))
        .collect()
}

/// `file` with each correction's case given the corrected expected answer and the
/// [`REVIEWED_TAG`]: a JSON expected value takes the correction as JSON when it parses, else
/// as text. Returns the new file and how many cases changed (a correction equal to what is
/// stored changes nothing; one naming a case the file lacks is left out).
pub fn apply_corrections(
    file: &crate::evalset::EvalSetFile,
    corrections: &[(String, String)],
) -> (crate::evalset::EvalSetFile, usize) {
    let mut next = file.clone();
    let mut changed = 0;
    for (case_id, text) in corrections {
        let Some(case) = next.cases.iter_mut().find(|c| &c.id == case_id) else {
            continue;
        };
        let value = match &case.expected {
            Some(serde_json::Value::String(_)) | None => serde_json::Value::String(text.clone()),
            Some(_) => serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.clone())),
        };
        if case.expected.as_ref() == Some(&value) {
            continue;
        }
        case.expected = Some(value);
        if !case.tags.iter().any(|t| t == REVIEWED_TAG) {
            case.tags.push(REVIEWED_TAG.to_string());
        }
        changed += 1;
    }
    (next, changed)
}

#[cfg(test)]
mod correction_tests {
    use super::*;

    #[test]
    fn the_latest_correction_of_a_case_is_applied_as_text_or_json_and_tags_the_case() {
        let text = "{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"classification\",\"prompt\":\"{{t}}\",\"graders\":[{\"kind\":\"exact\"}]}\n\
                    {\"id\":\"a\",\"vars\":{\"t\":\"x\"},\"expected\":\"billing\"}\n\
                    {\"id\":\"b\",\"vars\":{\"t\":\"y\"},\"expected\":{\"n\":1}}\n\
                    {\"id\":\"c\",\"vars\":{\"t\":\"z\"},\"expected\":\"same\"}\n";
        let file = crate::evalset::EvalSetFile::parse("s.jsonl", text).unwrap();
        let item = |id: i64, case: &str| ReviewItem {
            id,
            run_id: 1,
            candidate_id: 1,
            case_id: case.into(),
            repetition: 0,
            reasons: vec![],
            detail: String::new(),
            status: ItemStatus::Labelled,
            assignee: None,
            claimed_by: None,
            added_by: AUTO.into(),
            created_at: crate::Timestamp(0),
        };
        let label = |id: i64, item_id: i64, at: i64, fix: Option<&str>| Label {
            id,
            item_id,
            labeller: format!("u{id}"),
            verdict: Verdict::Fail,
            score: None,
            corrected_expected: fix.map(str::to_string),
            note: String::new(),
            labelled_at: crate::Timestamp(at),
        };
        let items = [item(1, "a"), item(2, "b"), item(3, "c")];
        let labels = [
            label(1, 1, 20, Some("technical")),
            label(2, 1, 10, Some("sales")),
            label(3, 2, 5, Some("{\"n\": 2}")),
            label(4, 3, 5, Some("same")),
            label(5, 3, 6, None),
        ];
        let fixes = corrections(&items, &labels);
        assert_eq!(fixes.len(), 3);
        let (next, changed) = apply_corrections(&file, &fixes);
        assert_eq!(changed, 2, "c's correction equals what is stored");
        assert_eq!(next.cases[0].expected, Some(serde_json::json!("technical")));
        assert_eq!(next.cases[1].expected, Some(serde_json::json!({"n": 2})));
        assert_eq!(next.cases[0].tags, vec![REVIEWED_TAG.to_string()]);
        assert!(next.cases[2].tags.is_empty());
        assert_ne!(next.content_hash(), file.content_hash());
    }
}
