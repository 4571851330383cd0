//! The answer key: recognise a known eval case from a request and decide, deterministically per
//! (seed, profile, set, case), whether this profile answers it right.
use std::collections::HashMap;

use super::rng::{stable_hash, unit};
use crate::domain::evalset::EvalSetFile;
use crate::profile::ToolFaults;
use crate::tool_answers::{ToolAnswer, tool_answer};

/// A conversation turn found in the answer key: its case and turn (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnRef {
    set: usize,
    case: usize,
    turn: usize,
}

/// A case found in the answer key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseRef {
    set: usize,
    case: usize,
}

/// The mock's answer to a known case.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub correct: bool,
    pub set: String,
    pub case_id: String,
    /// A tool case's calls (see `tool_answers`).
    pub tool: Option<ToolAnswer>,
}

/// Eval sets indexed by the prompt text the engine sends for each case.
#[derive(Debug, Default)]
pub struct AnswerKey {
    sets: Vec<EvalSetFile>,
    /// Per set: its distinct expected texts, sorted (the pool of plausible wrong answers).
    distinct: Vec<Vec<String>>,
    /// Last user message of the case's chat messages → case.
    by_chat: HashMap<String, CaseRef>,
    /// Flattened completion prompt → case.
    by_prompt: HashMap<String, CaseRef>,
    /// A conversation's user messages up to a turn (trimmed, joined by a NUL) → that turn.
    by_turn: HashMap<String, TurnRef>,
}

/// The key of a conversation turn: its user messages so far.
fn turn_index_key<'a>(users: impl Iterator<Item = &'a str>) -> String {
    users.map(str::trim).collect::<Vec<_>>().join("\u{0}")
}

impl AnswerKey {
    /// Indexes every case that has an expected value; when two cases render the same prompt the
    /// first one wins.
    pub fn new(sets: Vec<EvalSetFile>) -> Self {
        let mut by_chat = HashMap::new();
        let mut by_prompt = HashMap::new();
        let mut distinct = Vec::with_capacity(sets.len());
        let mut by_turn = HashMap::new();
        for (s, set) in sets.iter().enumerate() {
            let mut values = Vec::new();
            for (c, case) in set.cases.iter().enumerate() {
                if case.is_conversation() {
                    let users: Vec<String> = case.turns.iter().map(|t| t.user_message(&case.vars)).collect();
                    for (k, t) in case.turns.iter().enumerate() {
                        values.extend(t.expected.as_ref().map(|_| turn_expected(t)));
                        by_turn
                            .entry(turn_index_key(users[..=k].iter().map(String::as_str)))
                            .or_insert(TurnRef {
                                set: s,
                                case: c,
                                turn: k,
                            });
                    }
                    continue;
                }
                // A tool case is answered by its calls, whether it has an expected text or not.
                match case.expected_text() {
                    Some(expected) => values.push(expected),
                    None if case.is_tool_case() => {}
                    None => continue,
                }
                let at = CaseRef { set: s, case: c };
                let messages = set.messages_for(case);
                if let Some(user) = messages.iter().rev().find(|m| m.role == "user") {
                    by_chat.entry(user.content.trim().to_string()).or_insert(at);
                }
                by_prompt
                    .entry(set.prompt_text_for(case).trim().to_string())
                    .or_insert(at);
            }
            values.sort();
            values.dedup();
            distinct.push(values);
        }
        AnswerKey {
            sets,
            distinct,
            by_chat,
            by_prompt,
            by_turn,
        }
    }

    /// The conversation turn whose user messages are `users` (in order), if any.
    pub fn find_turn<'a>(&self, users: impl Iterator<Item = &'a str>) -> Option<TurnRef> {
        if self.by_turn.is_empty() {
            return None;
        }
        self.by_turn.get(&turn_index_key(users)).copied()
    }

    /// What `profile` answers at a conversation turn, given the assistant replies the request
    /// carried as history: right when the turn falls within its accuracy (drawn once per seed,
    /// profile, set, case and turn), the turn is within its `memory_turns`, and every earlier
    /// turn's reply in the history is that turn's expected one (a wrong reply the model wrote
    /// itself misleads it: with its own history, errors compound). The expected text otherwise
    /// wrong: another expected value of the set.
    pub fn turn_answer(
        &self,
        at: TurnRef,
        history: &[&str],
        seed: u64,
        profile: &str,
        accuracy: f64,
        memory_turns: Option<u32>,
    ) -> (Answer, TurnTruth) {
        let set = &self.sets[at.set];
        let case = &set.cases[at.case];
        let turn = &case.turns[at.turn];
        let expected = turn_expected(turn);
        let seed_bytes = seed.to_le_bytes();
        let turn_bytes = (at.turn as u64).to_le_bytes();
        let drawn_right = is_correct(
            stable_hash(&[
                &seed_bytes,
                profile.as_bytes(),
                set.header.name.as_bytes(),
                case.id.as_bytes(),
                &turn_bytes,
            ]),
            accuracy,
        );
        let remembers = memory_turns.is_none_or(|m| at.turn < m as usize);
        let history_right = case.turns[..at.turn]
            .iter()
            .zip(history)
            .all(|(t, reply)| t.expected.is_none() || reply.trim() == turn_expected(t).trim())
            && history.len() >= at.turn;
        let correct = drawn_right && remembers && history_right;
        let text = if correct || turn.expected.is_none() {
            if turn.expected.is_none() {
                format!("Noted ({}).", at.turn + 1)
            } else {
                expected.clone()
            }
        } else {
            let pick = stable_hash(&[
                &seed_bytes,
                profile.as_bytes(),
                case.id.as_bytes(),
                &turn_bytes,
                b"wrong",
            ]);
            wrong_answer(&self.distinct[at.set], &expected, pick)
        };
        let answer = Answer {
            text,
            correct: correct || turn.expected.is_none(),
            set: set.header.name.clone(),
            case_id: case.id.clone(),
            tool: None,
        };
        let truth = TurnTruth {
            turn: at.turn as u32 + 1,
            history_right,
            remembers,
        };
        (answer, truth)
    }

    /// The case whose last user message is `content`.
    pub fn find_chat(&self, content: &str) -> Option<CaseRef> {
        self.by_chat.get(content.trim()).copied()
    }

    /// The case whose flattened prompt is `prompt`.
    pub fn find_prompt(&self, prompt: &str) -> Option<CaseRef> {
        self.by_prompt.get(prompt.trim()).copied()
    }

    /// What `profile` answers for `at`: the expected text when the case falls within its
    /// accuracy, else another case's expected value from the same set (or a perturbed value).
    pub fn answer(&self, at: CaseRef, seed: u64, profile: &str, accuracy: f64) -> Answer {
        let set = &self.sets[at.set];
        let case = &set.cases[at.case];
        let expected = case.expected_text().unwrap_or_default();
        let seed_bytes = seed.to_le_bytes();
        let parts: [&[u8]; 4] = [
            &seed_bytes,
            profile.as_bytes(),
            set.header.name.as_bytes(),
            case.id.as_bytes(),
        ];
        let correct = is_correct(stable_hash(&parts), accuracy);
        let text = if correct {
            expected
        } else {
            let pick = stable_hash(&[&seed_bytes, profile.as_bytes(), case.id.as_bytes(), b"wrong"]);
            wrong_answer(&self.distinct[at.set], &expected, pick)
        };
        Answer {
            text,
            correct,
            set: set.header.name.clone(),
            case_id: case.id.clone(),
            tool: None,
        }
    }
}

impl AnswerKey {
    /// What `profile` answers for `at` when it is a tool case (None otherwise): right as often
    /// as `accuracy` (the same draw as [`AnswerKey::answer`]), each tool fault as often as its rate.
    pub fn tool_answer(
        &self,
        at: CaseRef,
        seed: u64,
        profile: &str,
        correct: bool,
        faults: &ToolFaults,
    ) -> Option<ToolAnswer> {
        let set = &self.sets[at.set];
        let case = &set.cases[at.case];
        let seed_bytes = seed.to_le_bytes();
        let parts: [&[u8]; 4] = [
            &seed_bytes,
            profile.as_bytes(),
            set.header.name.as_bytes(),
            case.id.as_bytes(),
        ];
        tool_answer(case, &parts, correct, faults)
    }
}

impl AnswerKey {
    /// The mock's answer to a blind pairwise judge prompt (as `domain::review::pairwise::
    /// pairwise_prompt` writes it), so "Compare with the judge" works against the mock: the
    /// request's last user message names the case, and the response equal to its expected answer
    /// (trimmed, case and whitespace folded) is preferred; both or neither: a tie. Position plays
    /// no part. None when `prompt` is no pairwise prompt or names no case of the key.
    pub fn pairwise_reply(&self, prompt: &str) -> Option<String> {
        let block = |name: &str| {
            let open = format!("<<<{name}>>>\n");
            let start = prompt.find(&open)? + open.len();
            let end = start + prompt[start..].find(&format!("\n<<<END {name}>>>"))?;
            Some(&prompt[start..end])
        };
        let (request, a, b) = (block("REQUEST")?, block("RESPONSE A")?, block("RESPONSE B")?);
        let (_, asked) = request.rsplit_once("user: ")?;
        let at = self.find_chat(asked)?;
        let expected = self.sets[at.set].cases[at.case].expected_text()?;
        let fold = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
        let (a_right, b_right) = (fold(a) == fold(&expected), fold(b) == fold(&expected));
        Some(match (a_right, b_right) {
            (true, false) => "Response A gives the expected answer.\nPREFERENCE: A".to_string(),
            (false, true) => "Response B gives the expected answer.\nPREFERENCE: B".to_string(),
            _ => "Neither response is better than the other.\nPREFERENCE: TIE".to_string(),
        })
    }
}

/// What decided a conversation turn's answer, for the ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnTruth {
    /// 1-based.
    pub turn: u32,
    /// Every earlier reply in the history was the expected one.
    pub history_right: bool,
    /// The turn is within the profile's `memory_turns`.
    pub remembers: bool,
}

/// A turn's expected value as text.
fn turn_expected(turn: &crate::domain::evalset::conversation::Turn) -> String {
    match &turn.expected {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// Right iff the case's hash, read as a number in [0, 1), falls below the accuracy: so accuracy
/// 1.0 is always right, 0.0 never, and each case keeps its outcome across requests.
fn is_correct(case_hash: u64, accuracy: f64) -> bool {
    unit(case_hash) < accuracy
}

/// A plausible wrong answer: another distinct expected value of the set, else a perturbation.
fn wrong_answer(distinct: &[String], expected: &str, pick: u64) -> String {
    // `distinct` is sorted: skip the expected value's slot without scanning the set.
    let skip = distinct.binary_search_by(|v| v.as_str().cmp(expected)).ok();
    let choices = distinct.len() - usize::from(skip.is_some());
    if choices > 0 {
        let mut k = (pick % choices as u64) as usize;
        if skip.is_some_and(|s| k >= s) {
            k += 1;
        }
        return distinct[k].clone();
    }
    match expected.trim().parse::<i64>() {
        Ok(n) => n.wrapping_add(1).to_string(),
        Err(_) if expected.trim().eq_ignore_ascii_case("unknown") => "none".to_string(),
        Err(_) => "unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"{"bakeoff_evalset":1,"name":"s","task":"classification","system":"Be brief.","prompt":"Label: {{text}}"}
{"id":"a","vars":{"text":"great"},"expected":"positive"}
{"id":"b","vars":{"text":"awful"},"expected":"negative"}
{"id":"c","vars":{"text":"meh"},"expected":"neutral"}
{"id":"d","vars":{"text":"no key"}}
"#;

    fn key() -> AnswerKey {
        AnswerKey::new(vec![EvalSetFile::parse("s", SET).unwrap()])
    }

    #[test]
    fn finds_cases_by_chat_and_completion_prompt() {
        let key = key();
        let a = key.find_chat("Label: great").unwrap();
        assert_eq!(key.find_prompt("Be brief.\n\nLabel: great"), Some(a));
        assert_eq!(key.find_chat("  Label: great \n"), Some(a));
        assert_eq!(key.find_chat("Label: unseen"), None);
        // A case without an expected value is not in the key.
        assert_eq!(key.find_chat("Label: no key"), None);
    }

    #[test]
    fn a_pairwise_judge_prompt_prefers_the_expected_answer_whichever_side_it_is_on() {
        use crate::domain::review::pairwise::{Choice, pairwise_prompt, parse_preference};
        let key = key();
        let verdict = |left: &str, right: &str| {
            parse_preference(&key.pairwise_reply(&pairwise_prompt("be right", "user: Label: great", left, right))?)
        };
        assert_eq!(verdict("positive", "negative"), Some(Choice::Left));
        assert_eq!(verdict("negative", " Positive "), Some(Choice::Right));
        assert_eq!(verdict("negative", "neutral"), Some(Choice::Tie));
        assert_eq!(verdict("positive", "positive"), Some(Choice::Tie));
        assert_eq!(
            key.pairwise_reply(&pairwise_prompt("r", "user: Label: unseen", "a", "b")),
            None
        );
    }

    #[test]
    fn accuracy_edges_and_determinism() {
        let key = key();
        let cases: Vec<CaseRef> = ["great", "awful", "meh"]
            .iter()
            .map(|t| key.find_chat(&format!("Label: {t}")).unwrap())
            .collect();
        for &at in &cases {
            let right = key.answer(at, 1, "p", 1.0);
            assert!(right.correct);
            let wrong = key.answer(at, 1, "p", 0.0);
            assert!(!wrong.correct);
            assert_ne!(wrong.text, right.text);
            assert!(["positive", "negative", "neutral"].contains(&wrong.text.as_str()));
            assert_eq!(key.answer(at, 1, "p", 0.5), key.answer(at, 1, "p", 0.5));
        }
    }

    #[test]
    fn accuracy_holds_over_many_cases() {
        let right = (0..10_000u64)
            .filter(|i| is_correct(stable_hash(&[&i.to_le_bytes(), b"p"]), 0.9))
            .count();
        assert!((8_800..9_200).contains(&right), "{right}");
    }

    #[test]
    fn wrong_answer_falls_back_to_a_perturbation() {
        assert_eq!(wrong_answer(&["42".to_string()], "42", 3), "43");
        assert_eq!(wrong_answer(&[], "yes", 3), "unknown");
        assert_eq!(wrong_answer(&["a".into(), "b".into()], "a", 9), "b");
    }
}
