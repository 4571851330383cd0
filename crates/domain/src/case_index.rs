//! What the cases page's filters know of each case of a run, without its records: the case's
//! marks (a candidate's failure class, how a candidate's final attempts ended, a tag of the
//! case, outputs that differ between candidates). A filter is a conjunction of mark tests, each
//! a lookup of one [`MarkKey`]: answered here over cases in memory (an unfinished run) and by
//! the store over a terminal run's marks stored under their keys, so the two cannot disagree.
use serde::{Deserialize, Serialize};

/// What a mark says of its case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MarkKind {
    /// A candidate's attempt failed so (its value: an error class, or `wrong_answer`).
    Failure,
    /// A candidate's final attempts ended so (its value: an [`Outcome`]).
    Outcome,
    /// The case carries this tag (no candidate).
    Tag,
    /// Successful outputs differ between candidates (no value, no candidate).
    Differs,
}

impl MarkKind {
    pub const ALL: [MarkKind; 4] = [MarkKind::Failure, MarkKind::Outcome, MarkKind::Tag, MarkKind::Differs];

    pub fn as_str(self) -> &'static str {
        match self {
            MarkKind::Failure => "failure",
            MarkKind::Outcome => "outcome",
            MarkKind::Tag => "tag",
            MarkKind::Differs => "differs",
        }
    }

    pub fn parse(s: &str) -> Option<MarkKind> {
        MarkKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The candidate of a mark that belongs to the case, not to a candidate (tags, differing
/// outputs): candidate ids start at 1.
pub const NO_CANDIDATE: i64 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mark {
    pub kind: MarkKind,
    /// Empty for [`MarkKind::Differs`].
    pub value: String,
    /// [`NO_CANDIDATE`] for tags and differing outputs.
    pub candidate_id: i64,
}

/// A case of a run as the filters see it; its place in the page order is its index.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IndexedCase {
    pub case_id: String,
    pub marks: Vec<Mark>,
}

/// How a candidate's final attempts at a case ended, worst first when repetitions differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ungraded,
    Pass,
    Fail,
    Error,
}

impl Outcome {
    pub fn of(error: bool, passed: Option<bool>) -> Outcome {
        match (error, passed) {
            (true, _) => Outcome::Error,
            (false, Some(false)) => Outcome::Fail,
            (false, Some(true)) => Outcome::Pass,
            (false, None) => Outcome::Ungraded,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ungraded => "ungraded",
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Error => "error",
        }
    }

    /// The outcomes the filter offers.
    pub fn parse_filter(s: &str) -> Option<Outcome> {
        [Outcome::Pass, Outcome::Fail, Outcome::Error]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One condition of a filter: the case has a mark of this kind, with this value (None: any)
/// and of this candidate (None: any).
#[derive(Debug, Clone, PartialEq)]
pub struct MarkTest {
    pub kind: MarkKind,
    pub value: Option<String>,
    pub candidate_id: Option<i64>,
}

/// A mark as a filter looks it up: its kind, its value or any value, its candidate or any
/// candidate. A mark answers the keys a filter of its kind can ask ([`Mark::keys`]) and a test
/// asks one ([`MarkTest::key`]), so a test is one lookup, and the cases it matches are one
/// range of keys in page order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MarkKey {
    pub kind: MarkKind,
    /// `=` and the value, or [`ANY_VALUE`].
    pub value: String,
    /// The candidate, or [`ANY_CANDIDATE`].
    pub candidate_id: i64,
}

/// The value of a key that any value answers (a value's key starts with `=`).
pub const ANY_VALUE: &str = "*";
/// The candidate of a key that any candidate answers (ids start at 1; 0 is [`NO_CANDIDATE`]).
pub const ANY_CANDIDATE: i64 = -1;

impl MarkKey {
    fn new(kind: MarkKind, value: Option<&str>, candidate_id: Option<i64>) -> MarkKey {
        MarkKey {
            kind,
            value: value.map_or_else(|| ANY_VALUE.to_string(), |v| format!("={v}")),
            candidate_id: candidate_id.unwrap_or(ANY_CANDIDATE),
        }
    }
}

impl MarkKind {
    /// Whether a filter asks for this kind with any value (`value`: with a given one), and of
    /// any candidate (`candidate`: of a given one) — what [`CaseQuery::tests`] asks. A mark is
    /// stored under these keys only.
    fn asked(self) -> Asked {
        let (any_value, value, candidate) = match self {
            // Failures only (any class), an error class; either for a candidate or any.
            MarkKind::Failure => (true, true, true),
            // An outcome, for a candidate or any.
            MarkKind::Outcome => (false, true, true),
            MarkKind::Tag => (false, true, false),
            MarkKind::Differs => (true, false, false),
        };
        Asked {
            any_value,
            value,
            candidate,
        }
    }
}

/// The shapes of key a filter asks of a kind (always with any candidate).
struct Asked {
    any_value: bool,
    value: bool,
    candidate: bool,
}

impl Mark {
    /// The keys this mark answers: of its value and/or any value, of its candidate and/or any
    /// candidate, as far as a filter asks them of its kind.
    pub fn keys(&self) -> Vec<MarkKey> {
        let asked = self.kind.asked();
        let values = [
            asked.value.then_some(Some(self.value.as_str())),
            asked.any_value.then_some(None),
        ];
        let candidates = [asked.candidate.then_some(Some(self.candidate_id)), Some(None)];
        values
            .into_iter()
            .flatten()
            .flat_map(|v| {
                candidates
                    .into_iter()
                    .flatten()
                    .map(move |c| MarkKey::new(self.kind, v, c))
            })
            .collect()
    }

    /// Whether `key` is one of [`Mark::keys`], without building them.
    pub fn answers(&self, key: &MarkKey) -> bool {
        let asked = self.kind.asked();
        key.kind == self.kind
            && if key.value == ANY_VALUE {
                asked.any_value
            } else {
                asked.value && key.value.strip_prefix('=') == Some(self.value.as_str())
            }
            && if key.candidate_id == ANY_CANDIDATE {
                true
            } else {
                asked.candidate && key.candidate_id == self.candidate_id
            }
    }
}

impl MarkTest {
    /// The one key a mark passing this test answers.
    pub fn key(&self) -> MarkKey {
        MarkKey::new(self.kind, self.value.as_deref(), self.candidate_id)
    }
}

/// The cases page's filters over marks (the text search is the store's, apart).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaseQuery {
    /// Only cases where the chosen candidate (or any) failed an attempt.
    pub failures: bool,
    /// Only cases where the chosen candidate (or any) failed with this class.
    pub error_class: Option<String>,
    pub tag: Option<String>,
    /// Only cases whose successful outputs differ between candidates.
    pub differs: bool,
    /// Only cases where the chosen candidate's (or any's) final attempts ended so.
    pub outcome: Option<Outcome>,
    /// The candidate the failure and outcome filters look at (None: any).
    pub candidate_id: Option<i64>,
}

impl CaseQuery {
    /// The mark tests a case must all pass (none: every case matches).
    pub fn tests(&self) -> Vec<MarkTest> {
        let of_candidate = |kind, value: Option<&str>| MarkTest {
            kind,
            value: value.map(str::to_string),
            candidate_id: self.candidate_id,
        };
        let mut tests = Vec::new();
        if self.failures {
            tests.push(of_candidate(MarkKind::Failure, None));
        }
        if let Some(class) = &self.error_class {
            tests.push(of_candidate(MarkKind::Failure, Some(class)));
        }
        if let Some(tag) = &self.tag {
            tests.push(MarkTest {
                kind: MarkKind::Tag,
                value: Some(tag.clone()),
                candidate_id: None,
            });
        }
        if self.differs {
            tests.push(MarkTest {
                kind: MarkKind::Differs,
                value: None,
                candidate_id: None,
            });
        }
        if let Some(outcome) = self.outcome {
            tests.push(of_candidate(MarkKind::Outcome, Some(outcome.as_str())));
        }
        tests
    }
}

/// Whether `case` passes every test: some mark of it answers each test's key.
pub fn matches(tests: &[MarkTest], case: &IndexedCase) -> bool {
    tests.iter().all(|t| {
        let key = t.key();
        case.marks.iter().any(|m| m.answers(&key))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(kind: MarkKind, value: &str, candidate_id: i64) -> Mark {
        Mark {
            kind,
            value: value.into(),
            candidate_id,
        }
    }

    #[test]
    fn a_filter_is_every_test_passed_by_some_mark_of_the_case() {
        let case = IndexedCase {
            case_id: "c1".into(),
            marks: vec![
                mark(MarkKind::Failure, "timeout", 1),
                mark(MarkKind::Outcome, "error", 1),
                mark(MarkKind::Outcome, "pass", 2),
                mark(MarkKind::Tag, "math", NO_CANDIDATE),
            ],
        };
        let passes = |q: CaseQuery| matches(&q.tests(), &case);
        assert!(passes(CaseQuery::default()));
        assert!(passes(CaseQuery {
            failures: true,
            ..CaseQuery::default()
        }));
        // The failure was candidate 1's, not 2's.
        assert!(!passes(CaseQuery {
            failures: true,
            candidate_id: Some(2),
            ..CaseQuery::default()
        }));
        assert!(passes(CaseQuery {
            outcome: Some(Outcome::Pass),
            candidate_id: Some(2),
            ..CaseQuery::default()
        }));
        assert!(!passes(CaseQuery {
            outcome: Some(Outcome::Pass),
            candidate_id: Some(1),
            ..CaseQuery::default()
        }));
        assert!(passes(CaseQuery {
            error_class: Some("timeout".into()),
            tag: Some("math".into()),
            ..CaseQuery::default()
        }));
        assert!(!passes(CaseQuery {
            error_class: Some("timeout".into()),
            tag: Some("prose".into()),
            ..CaseQuery::default()
        }));
        assert!(!passes(CaseQuery {
            differs: true,
            ..CaseQuery::default()
        }));
    }

    #[test]
    fn a_mark_answers_its_own_key_and_the_keys_of_any_value_or_candidate_only() {
        let m = mark(MarkKind::Failure, "timeout", 3);
        let test = |value: Option<&str>, candidate_id| MarkTest {
            kind: MarkKind::Failure,
            value: value.map(str::to_string),
            candidate_id,
        };
        for t in [
            test(None, None),
            test(Some("timeout"), None),
            test(None, Some(3)),
            test(Some("timeout"), Some(3)),
        ] {
            assert!(m.keys().contains(&t.key()) && m.answers(&t.key()), "{t:?}");
        }
        for t in [
            test(Some("*"), None),
            test(Some("timeout"), Some(4)),
            test(Some(""), Some(3)),
        ] {
            assert!(!m.keys().contains(&t.key()) && !m.answers(&t.key()), "{t:?}");
        }
        // A value "*" is not "any value".
        let star = mark(MarkKind::Tag, "*", NO_CANDIDATE);
        let tag = |value: &str| MarkTest {
            kind: MarkKind::Tag,
            value: Some(value.into()),
            candidate_id: None,
        };
        assert!(star.keys().contains(&tag("*").key()) && star.answers(&tag("*").key()));
        assert!(!star.keys().contains(&tag("x").key()) && !star.answers(&tag("x").key()));
    }

    #[test]
    fn every_key_a_filter_asks_is_one_a_matching_mark_is_stored_under() {
        let marks = [
            mark(MarkKind::Failure, "timeout", 2),
            mark(MarkKind::Outcome, "fail", 2),
            mark(MarkKind::Tag, "math", NO_CANDIDATE),
            mark(MarkKind::Differs, "", NO_CANDIDATE),
        ];
        let case = IndexedCase {
            case_id: "c".into(),
            marks: marks.to_vec(),
        };
        for candidate_id in [None, Some(2)] {
            let q = CaseQuery {
                failures: true,
                error_class: Some("timeout".into()),
                tag: Some("math".into()),
                differs: true,
                outcome: Some(Outcome::Fail),
                candidate_id,
            };
            assert!(matches(&q.tests(), &case), "{q:?}");
            for test in q.tests() {
                let stored: Vec<MarkKey> = marks.iter().flat_map(Mark::keys).collect();
                assert!(stored.contains(&test.key()), "{test:?} is asked but never stored");
            }
        }
        // Each mark's keys are what it answers, no more.
        for m in &marks {
            for key in m.keys() {
                assert!(m.answers(&key), "{m:?} {key:?}");
            }
            assert_eq!(
                m.keys().iter().collect::<std::collections::HashSet<_>>().len(),
                m.keys().len()
            );
        }
    }

    #[test]
    fn mark_kinds_read_back_as_written() {
        for kind in MarkKind::ALL {
            assert_eq!(MarkKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(MarkKind::parse("other"), None);
    }
}
