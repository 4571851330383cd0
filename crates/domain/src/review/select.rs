//! Which answers of a run deserve a human look: the automatic half of the review queue.
use std::collections::BTreeMap;

use super::Reason;
use crate::grading::{DEFAULT_JUDGE_MIN, FieldsDetail, Grade, Outcome, case_passed};

/// One measured answer as the selection sees it (the final attempt of a candidate at a case's
/// repetition in the quality phase).
#[derive(Debug, Clone)]
pub struct Answer<'a> {
    pub candidate_id: i64,
    pub case_id: &'a str,
    pub repetition: u32,
    /// The request failed (no answer to grade): counts as a failed repetition for flips.
    pub errored: bool,
    pub grades: &'a [Grade],
    /// The judge's pass mark for this case (1–5 scale); None: the default.
    pub judge_pass_mark: Option<u8>,
}

/// An answer selected for review, with every reason that applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Selected {
    pub candidate_id: i64,
    pub case_id: String,
    pub repetition: u32,
    pub reasons: Vec<Reason>,
    pub detail: String,
}

/// Whether a `json-fields` grade was decided by one field: at least two fields counted and
/// all but one right.
pub fn near_field_threshold(grade: &Grade) -> Option<String> {
    let detail = FieldsDetail::from_grade(grade)?;
    if detail.unusable.is_some() {
        return None;
    }
    let counted: Vec<_> = detail.fields.iter().filter(|f| !f.ignored).collect();
    let off: Vec<_> = counted.iter().filter(|f| f.outcome != Outcome::Correct).collect();
    (counted.len() >= 2 && off.len() == 1).then(|| format!("only field {:?} is off", off[0].field))
}

fn is_judge(g: &Grade) -> bool {
    &*g.grader == "llm-judge"
}

fn judge_score(g: &Grade) -> Option<u8> {
    g.detail
        .as_ref()?
        .get("judge_score")?
        .as_u64()
        .and_then(|s| u8::try_from(s).ok())
}

fn verdict(g: &Grade) -> String {
    format!("{} {}", g.grader, if g.passed { "passed" } else { "failed" })
}

/// The reasons one answer (alone, without its repetitions) deserves a look, with a detail.
fn answer_reasons(a: &Answer<'_>) -> Vec<(Reason, String)> {
    let mut found = Vec::new();
    let (judges, deterministic): (Vec<&Grade>, Vec<&Grade>) = a.grades.iter().partition(|g| is_judge(g));
    if let (Some(p), Some(f)) = (
        deterministic.iter().find(|g| g.passed),
        deterministic.iter().find(|g| !g.passed),
    ) {
        found.push((Reason::GraderDisagreement, format!("{}, {}", verdict(p), verdict(f))));
    }
    for judge in &judges {
        if let Some(other) = deterministic.iter().find(|g| g.passed != judge.passed) {
            found.push((
                Reason::JudgeVsDeterministic,
                format!("{}, {}", verdict(judge), verdict(other)),
            ));
            break;
        }
    }
    let mark = a.judge_pass_mark.unwrap_or(DEFAULT_JUDGE_MIN);
    if let Some(score) = judges
        .iter()
        .filter_map(|g| judge_score(g))
        .find(|s| *s == mark || s + 1 == mark)
    {
        found.push((Reason::NearPassMark, format!("judge {score}/5, pass mark {mark}")));
    }
    if let Some(why) = a.grades.iter().find_map(near_field_threshold) {
        found.push((Reason::NearThresholdField, why));
    }
    found
}

/// (candidate, case, repetition): one answer.
type AnswerKey<'a> = (i64, &'a str, u32);

/// The answers worth a human look, by candidate, case and repetition. A case whose
/// repetitions disagree puts its minority repetitions (the failed ones on a tie) in the queue.
pub fn select_for_review(answers: &[Answer<'_>]) -> Vec<Selected> {
    let mut chosen: BTreeMap<AnswerKey<'_>, Vec<(Reason, String)>> = BTreeMap::new();
    let mut by_case: BTreeMap<(i64, &str), Vec<(u32, bool)>> = BTreeMap::new();
    for a in answers {
        let reasons = answer_reasons(a);
        if !reasons.is_empty() {
            chosen
                .entry((a.candidate_id, a.case_id, a.repetition))
                .or_default()
                .extend(reasons);
        }
        let passed = !a.errored && case_passed(a.grades).unwrap_or(false);
        by_case
            .entry((a.candidate_id, a.case_id))
            .or_default()
            .push((a.repetition, passed));
    }
    for ((candidate_id, case_id), reps) in by_case {
        let passes = reps.iter().filter(|(_, p)| *p).count();
        let fails = reps.len() - passes;
        if passes == 0 || fails == 0 {
            continue;
        }
        let minority = passes < fails;
        let detail = format!("{passes} of {} repetitions passed", reps.len());
        for (rep, _) in reps.iter().filter(|(_, p)| *p == minority) {
            chosen
                .entry((candidate_id, case_id, *rep))
                .or_default()
                .push((Reason::Flip, detail.clone()));
        }
    }
    chosen
        .into_iter()
        .map(|((candidate_id, case_id, repetition), mut found)| {
            found.sort_by_key(|(r, _)| *r);
            found.dedup_by_key(|(r, _)| *r);
            Selected {
                candidate_id,
                case_id: case_id.to_string(),
                repetition,
                reasons: found.iter().map(|(r, _)| *r).collect(),
                detail: found.into_iter().map(|(_, d)| d).collect::<Vec<_>>().join("; "),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grade(grader: &str, passed: bool, detail: Option<serde_json::Value>) -> Grade {
        Grade {
            grader: grader.into(),
            score: if passed { 1.0 } else { 0.0 },
            passed,
            reason: String::new(),
            detail: detail.map(Box::new),
            weight: 1.0,
            required: true,
        }
    }

    fn answer<'a>(candidate_id: i64, case_id: &'a str, repetition: u32, grades: &'a [Grade]) -> Answer<'a> {
        Answer {
            candidate_id,
            case_id,
            repetition,
            errored: false,
            grades,
            judge_pass_mark: None,
        }
    }

    #[test]
    fn a_flip_selects_the_minority_repetition_and_steady_cases_stay_out() {
        let pass = [grade("exact", true, None)];
        let fail = [grade("exact", false, None)];
        let answers = [
            answer(1, "a", 0, &pass),
            answer(1, "a", 1, &fail),
            answer(1, "a", 2, &pass),
            answer(1, "b", 0, &fail),
            answer(1, "b", 1, &fail),
            answer(2, "a", 0, &pass),
            answer(2, "a", 1, &fail),
        ];
        let got = select_for_review(&answers);
        let keys: Vec<_> = got
            .iter()
            .map(|s| (s.candidate_id, s.case_id.as_str(), s.repetition))
            .collect();
        assert_eq!(keys, vec![(1, "a", 1), (2, "a", 1)]);
        assert!(got.iter().all(|s| s.reasons == vec![Reason::Flip]));
        assert_eq!(got[0].detail, "2 of 3 repetitions passed");
    }

    #[test]
    fn graders_judges_pass_marks_and_single_fields_each_select_with_their_reason() {
        let disagree = [grade("exact", true, None), grade("regex", false, None)];
        let judge_vs = [
            grade("exact", false, None),
            grade("llm-judge", true, Some(json!({"judge_score": 5}))),
        ];
        let near_mark = [grade("llm-judge", false, Some(json!({"judge_score": 3})))];
        let far_mark = [grade("llm-judge", false, Some(json!({"judge_score": 1})))];
        let fields = json!({"precision": 0.5, "recall": 0.5, "f1": 0.5, "exact": false, "fields": [
            {"field": "name", "outcome": "correct"},
            {"field": "date", "outcome": "wrong", "expected": "2024-01-01", "got": "2024-01-02"}
        ]});
        let one_field = [grade("json-fields", false, Some(fields))];
        let answers = [
            answer(1, "d", 0, &disagree),
            answer(1, "j", 0, &judge_vs),
            answer(1, "m", 0, &near_mark),
            answer(1, "far", 0, &far_mark),
            answer(1, "f", 0, &one_field),
        ];
        let got = select_for_review(&answers);
        let reasons: Vec<_> = got.iter().map(|s| (s.case_id.as_str(), s.reasons.clone())).collect();
        assert_eq!(
            reasons,
            vec![
                ("d", vec![Reason::GraderDisagreement]),
                ("f", vec![Reason::NearThresholdField]),
                ("j", vec![Reason::JudgeVsDeterministic]),
                ("m", vec![Reason::NearPassMark]),
            ]
        );
        assert_eq!(got[1].detail, "only field \"date\" is off");
        // A stricter pass mark moves "near": 1/5 is next to a mark of 2.
        let strict = Answer {
            judge_pass_mark: Some(2),
            ..answer(1, "far", 0, &far_mark)
        };
        assert_eq!(select_for_review(&[strict])[0].reasons, vec![Reason::NearPassMark]);
    }
}
