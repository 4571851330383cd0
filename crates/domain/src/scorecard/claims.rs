//! Claimed vs measured: a vendor's headline figure beside bakeoff's figure of the same caliber,
//! with the ratio and every condition that differs.
use serde::Serialize;

use super::summary::CandidateSummary;
use crate::candidate::Candidate;

/// The comparison for one candidate with a claimed figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimCheck {
    pub claimed_tok_s: f64,
    pub claimed_caliber: String,
    pub claimed_conditions: Option<String>,
    /// bakeoff's caliber the claim was matched to, e.g. `decode tok/s/stream p50`.
    pub matched_caliber: Option<&'static str>,
    pub measured_tok_s: Option<f64>,
    /// Where the measured figure comes from: `@c=4 · n=20 requests`.
    pub measured_conditions: String,
    /// measured / claimed.
    pub ratio: Option<f64>,
    /// Conditions that differ between the claim and the measurement, in words.
    pub differences: Vec<String>,
}

impl ClaimCheck {
    /// `measured 41 % of claim`, or why there is no ratio.
    pub fn summary(&self) -> String {
        match (self.ratio, self.matched_caliber) {
            (Some(r), _) => format!("measured {:.0} % of claim", r * 100.0),
            (None, None) => {
                "the claim's caliber is not one bakeoff measures, so there is no like-for-like figure".into()
            }
            (None, Some(c)) => format!("no {c} measured yet"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Caliber {
    DecodePerStream,
    EndToEndPerStream,
    Aggregate,
}

impl Caliber {
    fn label(&self) -> &'static str {
        match self {
            Caliber::DecodePerStream => "decode tok/s/stream p50",
            Caliber::EndToEndPerStream => "e2e tok/s/stream p50",
            Caliber::Aggregate => "aggregate tok/s",
        }
    }

    /// Reads a free-text caliber ("per-stream decode", "aggregate @c=64", "end-to-end").
    fn parse(text: &str) -> Option<Caliber> {
        let t = text.to_lowercase();
        if t.contains("aggregate") || t.contains("total") || t.contains("system") {
            Some(Caliber::Aggregate)
        } else if t.contains("end-to-end") || t.contains("end to end") || t.contains("e2e") {
            Some(Caliber::EndToEndPerStream)
        } else if t.contains("decode")
            || t.contains("per-stream")
            || t.contains("per stream")
            || t.contains("single stream")
        {
            Some(Caliber::DecodePerStream)
        } else {
            None
        }
    }
}

/// The load a claim was stated at: `batch 1`, `batch size 8`, `c=64`, `concurrency 32`, `bs=4`.
pub fn claimed_concurrency(text: &str) -> Option<u32> {
    let t = text.to_lowercase();
    let re = regex::Regex::new(r"(?:batch(?:\s*size)?|concurrency|bs|c)\s*[=:]?\s*(\d{1,5})\b").ok()?;
    re.captures(&t)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
}

/// Compares a candidate's claimed figure with the measurement of the same caliber. None when
/// the candidate states no claim.
pub fn check(candidate: &Candidate, data: &CandidateSummary, run_concurrency: u32) -> Option<ClaimCheck> {
    let claim = candidate.spec.claimed.as_ref()?;
    let all_text = format!("{} {}", claim.caliber, claim.conditions.as_deref().unwrap_or(""));
    let caliber = Caliber::parse(&claim.caliber);
    let claim_c = claimed_concurrency(&all_text);
    // Like for like where possible: the claim's own load when it was measured.
    let measured_c = match claim_c {
        Some(c) if data.level(c).is_some() => c,
        _ => run_concurrency,
    };
    let level = data.level(measured_c);
    let measured = caliber.and_then(|cal| match cal {
        Caliber::Aggregate => data.figures_at(measured_c)?.aggregate_tok_s,
        Caliber::DecodePerStream => level?.decode_tok_s_median,
        Caliber::EndToEndPerStream => level?.e2e_tok_s_median,
    });

    let mut differences = Vec::new();
    match claim_c {
        Some(c) if c != measured_c => differences.push(format!(
            "load: the claim was stated at batch/concurrency {c}; measured at c={measured_c}"
        )),
        None => differences.push(format!(
            "load: the claim states no batch size or concurrency; measured at c={measured_c}"
        )),
        _ => {}
    }
    if caliber.is_none() {
        differences.push(format!(
            "caliber: {:?} is not per-stream decode, end-to-end per stream or aggregate, so it is compared with nothing",
            claim.caliber
        ));
    }
    let lower = all_text.to_lowercase();
    let declared_hw = candidate.spec.conditions.hardware.as_deref().unwrap_or("");
    let hw_words = regex::Regex::new(r"(?i)\b([abhlv]\d{2,3}|mi\d{3}|rtx\s?\d{4}|tpu\w*|gpu|gaudi\w*)\b").ok();
    if let Some(re) = hw_words
        && let Some(m) = re.find(&all_text)
        && !declared_hw.to_lowercase().contains(&m.as_str().to_lowercase())
    {
        differences.push(format!(
            "hardware: the claim mentions {:?}; this endpoint declares {}",
            m.as_str(),
            if declared_hw.is_empty() {
                "no hardware".to_string()
            } else {
                format!("{declared_hw:?}")
            }
        ));
    }
    let quant = regex::Regex::new(r"(?i)\b(fp8|fp16|bf16|int8|int4|awq|gptq|q4\w*|q8\w*|nf4)\b").ok();
    let declared_q = candidate.spec.conditions.quantization.as_deref().unwrap_or("");
    if let Some(re) = quant
        && let Some(m) = re.find(&all_text)
        && !declared_q.to_lowercase().contains(&m.as_str().to_lowercase())
    {
        differences.push(format!(
            "quantization: the claim mentions {:?}; this endpoint declares {}",
            m.as_str(),
            if declared_q.is_empty() {
                "none".to_string()
            } else {
                format!("{declared_q:?}")
            }
        ));
    }
    let input_mean = level.and_then(|l| l.input_tokens_mean);
    let output_mean = level.and_then(|l| l.output_tokens_mean);
    if lower.contains("prompt") || lower.contains("input") || lower.contains("context") {
        differences.push(format!(
            "prompt length: the claim sets its own prompts; measured prompts average {} input tokens",
            input_mean
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "an unknown number of".into())
        ));
    }
    if let Some(out) = output_mean
        && out < 32.0
    {
        differences.push(format!(
            "output length: measured answers average {out:.0} output tokens, too short for a steady decode rate; \
             headline figures use long outputs"
        ));
    }
    let n = level.map(|l| l.finals).unwrap_or(0);
    Some(ClaimCheck {
        claimed_tok_s: claim.tokens_per_second,
        claimed_caliber: claim.caliber.clone(),
        claimed_conditions: claim.conditions.clone(),
        matched_caliber: caliber.map(|c| c.label()),
        ratio: measured
            .filter(|_| claim.tokens_per_second > 0.0)
            .map(|m| m / claim.tokens_per_second),
        measured_tok_s: measured,
        measured_conditions: format!("@c={measured_c} · n={n} requests"),
        differences,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_loads_and_calibers_are_read_from_free_text() {
        assert_eq!(claimed_concurrency("vendor benchmark, batch 1, short prompts"), Some(1));
        assert_eq!(claimed_concurrency("aggregate @c=64"), Some(64));
        assert_eq!(claimed_concurrency("batch size: 8"), Some(8));
        assert_eq!(claimed_concurrency("concurrency 32, H100"), Some(32));
        assert_eq!(claimed_concurrency("H100, fp8"), None);
        assert_eq!(Caliber::parse("per-stream decode"), Some(Caliber::DecodePerStream));
        assert_eq!(Caliber::parse("Aggregate throughput"), Some(Caliber::Aggregate));
        assert_eq!(Caliber::parse("end-to-end per user"), Some(Caliber::EndToEndPerStream));
        assert_eq!(Caliber::parse("tokens per second"), None);
    }
}
