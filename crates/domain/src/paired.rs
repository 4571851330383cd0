//! Paired comparison of two candidates on the same cases: the exact McNemar test on the cases
//! where exactly one of them was right. Cases both got right (or both wrong) say nothing about
//! which is better, so a 2-point accuracy gap over 20 cases is rarely a real difference.
use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Significance level for "the difference is significant".
pub const ALPHA: f64 = 0.05;

/// The 2×2 table of a paired comparison and its test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedOutcome {
    /// Cases graded for both candidates.
    pub cases: usize,
    pub both_right: usize,
    /// Right for A, wrong for B.
    pub only_a: usize,
    /// Wrong for A, right for B.
    pub only_b: usize,
    pub both_wrong: usize,
    /// Two-sided exact McNemar p-value.
    pub p_value: f64,
}

impl PairedOutcome {
    pub fn significant(&self) -> bool {
        self.p_value < ALPHA
    }

    /// One line in words, naming the candidates.
    pub fn describe(&self, a: &str, b: &str) -> String {
        let discordant = self.only_a + self.only_b;
        if self.cases == 0 {
            return format!("{a} and {b} share no graded cases: no paired comparison.");
        }
        if discordant == 0 {
            return format!(
                "{a} and {b} were right and wrong on exactly the same {} cases: no difference.",
                self.cases
            );
        }
        let (better, worse, wins, losses) = if self.only_a >= self.only_b {
            (a, b, self.only_a, self.only_b)
        } else {
            (b, a, self.only_b, self.only_a)
        };
        let verdict = if self.significant() {
            format!("{better} is significantly more accurate than {worse}")
        } else if wins == losses {
            "no difference either way".to_string()
        } else {
            format!("the difference is not significant; more cases are needed to tell {better} from {worse}")
        };
        format!(
            "Of {} shared cases, {better} alone was right on {wins} and {worse} alone on {losses} \
             (exact McNemar p = {:.3}): {verdict}.",
            self.cases, self.p_value
        )
    }
}

/// Two-sided exact McNemar p-value for `b` and `c` discordant pairs:
/// 2 · P(X ≤ min(b, c)) with X ~ Binomial(b + c, ½), capped at 1.
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // Sum the binomial terms in log space so large n does not underflow 0.5^n too early.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64;
    let mut tail = 0.0f64;
    for i in 0..=k {
        tail += (ln_choose + ln_half_n).exp();
        ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    (2.0 * tail).min(1.0)
}

/// One candidate's outcome per case (right on every graded final attempt, or not): the case
/// ids as two ascending lists, so two candidates are paired by merging the lists, and a list
/// read from a stored summary is one buffer, not an allocation per case (a 100,000-case run's
/// scorecard reads two such lists per candidate on every view).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseResults {
    pub right: SortedIds,
    pub wrong: SortedIds,
}

impl CaseResults {
    /// From (case id, right?) pairs, in any order; a case given twice counts once, wrong if
    /// either says so.
    pub fn new<'a>(outcomes: impl IntoIterator<Item = (&'a str, bool)>) -> Self {
        let (mut right, mut wrong): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        for (case, ok) in outcomes {
            if ok { right.push(case) } else { wrong.push(case) }
        }
        let wrong = SortedIds::new(wrong);
        right.retain(|case| !wrong.contains(case));
        CaseResults {
            right: SortedIds::new(right),
            wrong,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.right.is_empty() && self.wrong.is_empty()
    }
}

/// Distinct strings in ascending order, kept in one buffer; (de)serialized as a JSON array of
/// strings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortedIds {
    text: String,
    /// Where each id ends in `text`.
    ends: Vec<usize>,
}

impl SortedIds {
    pub fn new<'a>(ids: impl IntoIterator<Item = &'a str>) -> Self {
        let mut ids: Vec<&str> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut out = SortedIds::default();
        for id in ids {
            out.push(id);
        }
        out
    }

    fn push(&mut self, id: &str) {
        self.text.push_str(id);
        self.ends.push(self.text.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Binary search over the ascending ids.
    pub fn contains(&self, id: &str) -> bool {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid).cmp(id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    /// How many ids both hold: one merge of the two ascending lists.
    pub fn shared(&self, other: &SortedIds) -> usize {
        let (mut i, mut j, mut n) = (0, 0, 0);
        while i < self.len() && j < other.len() {
            match self.get(i).cmp(other.get(j)) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    n += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        n
    }
}

impl Serialize for SortedIds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for SortedIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ids;
        impl<'de> Visitor<'de> for Ids {
            type Value = SortedIds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SortedIds, A::Error> {
                let mut ids = SortedIds::default();
                let mut sorted = true;
                while let Some(()) = seq.next_element_seed(Append(&mut ids, &mut sorted))? {}
                // Stored ascending by `new`; anything else (a hand-edited store) is put right.
                Ok(if sorted { ids } else { SortedIds::new(ids.iter()) })
            }
        }
        deserializer.deserialize_seq(Ids)
    }
}

/// Appends one id of the array to the buffer, noting whether the array is still ascending
/// and distinct.
struct Append<'a>(&'a mut SortedIds, &'a mut bool);

impl<'de> DeserializeSeed<'de> for Append<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Append<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a case id")
    }
    fn visit_str<E: serde::de::Error>(self, id: &str) -> Result<(), E> {
        let ids = self.0;
        if let Some(last) = ids.len().checked_sub(1)
            && ids.get(last) >= id
        {
            *self.1 = false;
        }
        ids.push(id);
        Ok(())
    }
}

/// Compares the per-case outcomes of candidates A and B on the cases both have.
pub fn compare(a: &CaseResults, b: &CaseResults) -> PairedOutcome {
    let both_right = a.right.shared(&b.right);
    let only_a = a.right.shared(&b.wrong);
    let only_b = a.wrong.shared(&b.right);
    let both_wrong = a.wrong.shared(&b.wrong);
    PairedOutcome {
        cases: both_right + only_a + only_b + both_wrong,
        both_right,
        only_a,
        only_b,
        both_wrong,
        p_value: mcnemar_exact(only_a, only_b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_p_values_by_hand() {
        // n = 7, k = 1: 2 · (1 + 7) / 128 = 0.125
        assert!((mcnemar_exact(1, 6) - 0.125).abs() < 1e-12);
        // n = 6, k = 0: 2 / 64
        assert!((mcnemar_exact(0, 6) - 0.03125).abs() < 1e-12);
        assert!((mcnemar_exact(6, 0) - 0.03125).abs() < 1e-12);
        // n = 12, k = 2: 2 · (1 + 12 + 66) / 4096
        assert!((mcnemar_exact(2, 10) - 158.0 / 4096.0).abs() < 1e-12);
        assert_eq!(mcnemar_exact(3, 3), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // Large n stays finite and tiny.
        let p = mcnemar_exact(100, 2000);
        assert!(p.is_finite() && p < 1e-100);
    }

    #[test]
    fn compare_counts_only_shared_cases() {
        let a = CaseResults::new([("c4", true), ("c1", true), ("c2", true), ("c3", false), ("x", true)]);
        let b = CaseResults::new([("c1", true), ("c2", false), ("c3", false), ("c4", false)]);
        let o = compare(&a, &b);
        assert_eq!(
            (o.cases, o.both_right, o.only_a, o.only_b, o.both_wrong),
            (4, 1, 2, 0, 1)
        );
        // n = 2, k = 0: 2 / 4 = 0.5
        assert_eq!(o.p_value, 0.5);
        assert!(!o.significant());
        assert!(
            o.describe("A", "B").contains("not significant"),
            "{}",
            o.describe("A", "B")
        );
    }

    #[test]
    fn case_results_round_trip_as_sorted_arrays_and_pair_by_merge() {
        let odd = "q\"uote \\ ü 中";
        let a = CaseResults::new([("b", true), (odd, false), ("a", true), ("c", false)]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"right":["a","b"],"wrong":["c",{}]}}"#,
                serde_json::to_string(odd).unwrap()
            )
        );
        let back: CaseResults = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.wrong.iter().collect::<Vec<_>>(), ["c", odd]);
        assert!(back.wrong.contains(odd) && !back.right.contains(odd));

        // Read out of order or twice (not as stored): put right, not miscounted.
        let unsorted: SortedIds = serde_json::from_str(r#"["z","a","m","a"]"#).unwrap();
        assert_eq!(unsorted, SortedIds::new(["a", "m", "z"]));
        assert!(serde_json::from_str::<SortedIds>(r#"["a",1]"#).is_err());

        // A case given both ways counts once, as wrong.
        let twice = CaseResults::new([("x", true), ("x", false), ("y", true)]);
        assert_eq!((twice.right.len(), twice.wrong.len()), (1, 1));
        assert!(twice.wrong.contains("x"));

        let b = CaseResults::new([("a", false), ("b", true), ("c", true), ("d", true)]);
        let o = compare(&a, &b);
        assert_eq!(
            (o.cases, o.both_right, o.only_a, o.only_b, o.both_wrong),
            (3, 1, 1, 1, 0)
        );
        assert_eq!(compare(&a, &CaseResults::default()).cases, 0);
    }
}
