//! Paired comparison of two candidates on the same cases: the exact McNemar test on the cases
//! where exactly one of them was right. Cases both got right (or both wrong) say nothing about
//! which is better, so a 2-point accuracy gap over 20 cases is rarely a real difference.
use std::collections::HashMap;

use serde::Serialize;

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

/// Compares per-case outcomes (case id → right?) of candidates A and B on the cases both have.
pub fn compare(a: &HashMap<String, bool>, b: &HashMap<String, bool>) -> PairedOutcome {
    let (mut both_right, mut only_a, mut only_b, mut both_wrong) = (0, 0, 0, 0);
    for (case, &ra) in a {
        let Some(&rb) = b.get(case) else { continue };
        match (ra, rb) {
            (true, true) => both_right += 1,
            (true, false) => only_a += 1,
            (false, true) => only_b += 1,
            (false, false) => both_wrong += 1,
        }
    }
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
        let a: HashMap<String, bool> = [("c1", true), ("c2", true), ("c3", false), ("c4", true), ("x", true)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let b: HashMap<String, bool> = [("c1", true), ("c2", false), ("c3", false), ("c4", false)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
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
}
