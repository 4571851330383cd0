//! The staged rollout that starts every run (unless turned off): "one case, then a few, then
//! all". Stage 1 sends the shortest case alone, stage 2 the longest case alone, stage 3 a few
//! requests at once; only then does the full run spend its budget. A stage fails when one of its
//! requests still fails after its retries (every stage allows at least one retry, so a single
//! transient fault does not stop a run; retries wait as everywhere, see `pool`). The candidate
//! is then stopped — the run goes on with the others — and its outcome and the event log say
//! what failed and which checks to make, in order: symptom → input → environment → parameters
//! → framework limits.
//!
//! Rollout requests are recorded (phase `smoke`) and, like warm-ups, excluded from every figure.
use std::collections::VecDeque;
use std::sync::Arc;

use super::pool::{CandidateRun, Feed, Unit};
use crate::domain::evalset::prompt_bin;
use crate::domain::run::{ErrorClass, Phase};
use crate::error::EngineError;
use crate::store::DynStore;
use crate::wire::failure::Failure;

/// Requests sent at once in stage 3 (the article's "3–5 concurrent").
pub const CONCURRENT_STAGE_REQUESTS: u32 = 4;

/// A failed stage: the candidate must stop.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RolloutStop {
    /// The candidate's outcome, short: "stage 1/3 (the shortest case), case c1: HTTP 404: …".
    pub reason: String,
    /// The whole story with the checks to make, in order (also in the event log).
    pub message: String,
}

/// Runs the stages; Ok(Some(stop)) when one failed and the candidate must stop.
pub(crate) async fn run(ctx: &Arc<CandidateRun>, store: &DynStore) -> Result<Option<RolloutStop>, EngineError> {
    let name = &ctx.candidate.spec.name;
    let lengths: Vec<usize> = ctx.file.cases[..ctx.case_count]
        .iter()
        .map(|c| ctx.file.prompt_text_for(c).chars().count())
        .collect();
    let shortest = argmin(&lengths, false);
    let longest = argmin(&lengths, true);
    let retries = ctx.config.retries.max(1);
    let fixed_length = ctx.file.cases.iter().all(|c| prompt_bin(&c.tags).is_some());
    let unit = |case_index: usize, repetition: u32, concurrency: u32| Unit {
        case_index,
        phase: Phase::Smoke,
        repetition,
        is_warmup: true,
        first_attempt: 0,
        last_attempt: retries,
        concurrency,
        resume: None,
    };
    let n = CONCURRENT_STAGE_REQUESTS;
    let spread = |i: u32| (i as usize * ctx.case_count) / n as usize;
    let stages: [(String, &str, VecDeque<Unit>, u32); 3] = [
        (
            format!("stage 1/3, the shortest case ({} prompt characters)", lengths[shortest]),
            "stage 1/3 (the shortest case)",
            VecDeque::from([unit(shortest, 0, 1)]),
            1,
        ),
        (
            format!("stage 2/3, the longest case ({} prompt characters)", lengths[longest]),
            "stage 2/3 (the longest case)",
            VecDeque::from([unit(longest, 1, 1)]),
            1,
        ),
        (
            format!("stage 3/3, {n} requests at once"),
            "stage 3/3 (requests at once)",
            (0..n).map(|i| unit(spread(i), 2 + i, n)).collect(),
            n,
        ),
    ];
    for (label, short, units, concurrency) in stages {
        let case_ids: Vec<String> = units.iter().map(|u| ctx.file.cases[u.case_index].id.clone()).collect();
        let tally = ctx.clone().closed_loop(Feed::List(units), concurrency).await?;
        if ctx.cancel.is_cancelled() {
            return Ok(None);
        }
        if let Some((case_id, failure)) = tally.failures.first() {
            let message = stop_message(
                name,
                &label,
                case_id,
                failure,
                tally.failed,
                tally.succeeded + tally.failed,
            );
            super::writer::append_event_patiently(store, ctx.run_id, "error", &message).await?;
            return Ok(Some(RolloutStop {
                reason: format!("{short}, case {case_id}: {}", failure.detail),
                message,
            }));
        }
        let mut msg = format!("{name}: staged rollout {label}: ok ({})", case_ids.join(", "));
        // Synthetic fixed-length workloads stop at max_tokens by design.
        if tally.truncated > 0 && !fixed_length {
            msg.push_str(&format!(
                "; {} answer(s) stopped at max_tokens (finish_reason length): check max_tokens",
                tally.truncated
            ));
        }
        let level = if tally.truncated > 0 && !fixed_length {
            "warn"
        } else {
            "info"
        };
        super::writer::append_event_patiently(store, ctx.run_id, level, &msg).await?;
    }
    Ok(None)
}

/// Index of the smallest (or largest) value; the first one on ties.
fn argmin(values: &[usize], largest: bool) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if (largest && v > values[best]) || (!largest && v < values[best]) {
            best = i;
        }
    }
    best
}

/// The run's error: what failed, then the checks in order, the likeliest first.
pub fn stop_message(candidate: &str, stage: &str, case_id: &str, failure: &Failure, failed: u32, sent: u32) -> String {
    format!(
        "staged rollout stopped {candidate} at {stage}: {failed} of {sent} request(s) failed; \
         case {case_id}: {} ({}). Check in order: {}",
        failure.class.as_str(),
        failure.detail,
        checks(failure.class)
    )
}

/// The ordered checks for a failure class: symptom → input → environment → parameters →
/// framework limits, each made specific where the class says something.
pub fn checks(class: ErrorClass) -> String {
    use ErrorClass::*;
    let symptom = match class {
        EmptyOutput => "symptom: no output (empty answer)",
        StreamCut | TotalTimeout => "symptom: cut mid-way (the answer started, then stopped)",
        StallTimeout => "symptom: stalled mid-way (the answer started, then no token came within the stall timeout)",
        FirstTokenTimeout => "symptom: no output in time (the server accepted but did not answer)",
        MalformedChunk | NonJsonResponse => "symptom: the answer is not the protocol asked for",
        ConnectRefused | Dns | Tls | ConnectTimeout => "symptom: no connection at all",
        RateLimited => "symptom: refused for rate (429)",
        ContextLengthExceeded => "symptom: refused for length",
        HttpClientError => "symptom: refused as a bad request (4xx)",
        HttpServerError => "symptom: the server failed (5xx)",
        Other => "symptom: see the detail",
    };
    // Only the steps that can apply: when nothing reached the server, its input, parameters
    // and limits cannot be the cause.
    let unreachable = matches!(class, ConnectRefused | Dns | Tls | ConnectTimeout);
    let input = match class {
        _ if unreachable => None,
        RateLimited => None,
        ContextLengthExceeded => Some("input: prompt length vs the model's context (this case is too long)"),
        HttpClientError | MalformedChunk => Some("input: encoding and invalid or unsupported fields in the request"),
        _ => Some("input: encoding, length vs context, invalid fields"),
    };
    let environment = match class {
        _ if unreachable => "environment: base URL, port, TLS, proxy and firewall (nothing reached the server)",
        HttpClientError => "environment: API key, model name and base URL path (401/403/404 say which)",
        NonJsonResponse => "environment: a proxy or gateway answering instead of the model server",
        _ => "environment: endpoint, credentials, network",
    };
    let parameters = match class {
        _ if unreachable => None,
        EmptyOutput => {
            Some("parameters: max_tokens too small (a reasoning model may spend it all thinking), stop sequences")
        }
        StreamCut | TotalTimeout | FirstTokenTimeout => {
            Some("parameters: timeout too short for max_tokens, concurrency over the server's cap")
        }
        StallTimeout => {
            Some("parameters: stall timeout shorter than the server's longest pause, concurrency over its cap")
        }
        RateLimited => Some("parameters: concurrency or rate over the server's or account's limit"),
        ContextLengthExceeded => Some("parameters: max_tokens (prompt + max_tokens must fit the context)"),
        _ => Some("parameters: max_tokens too small, temperature, concurrency over the server's cap"),
    };
    let framework = (!unreachable)
        .then_some("framework limits: the serving framework's max context, batch size, queue and timeouts");
    [Some(symptom), input, Some(environment), parameters, framework]
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| format!("({}) {s}", i + 1))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_ordered_and_specific() {
        let c = checks(ErrorClass::ContextLengthExceeded);
        let order = ["symptom", "input", "environment", "parameters", "framework"];
        let positions: Vec<usize> = order.iter().map(|w| c.find(w).unwrap()).collect();
        assert!(positions.windows(2).all(|p| p[0] < p[1]), "{c}");
        assert!(c.contains("this case is too long"));
        let refused = checks(ErrorClass::ConnectRefused);
        assert!(refused.contains("nothing reached the server"), "{refused}");
        // Nothing reached the server: its parameters and limits are not offered as causes.
        assert!(
            !refused.contains("max_tokens") && !refused.contains("framework"),
            "{refused}"
        );
        assert!(
            refused.starts_with("(1) symptom") && refused.contains("(2) environment"),
            "{refused}"
        );
    }

    #[test]
    fn shortest_and_longest() {
        assert_eq!(argmin(&[5, 3, 9, 3], false), 1);
        assert_eq!(argmin(&[5, 3, 9, 9], true), 2);
    }

    #[test]
    fn the_message_names_stage_case_and_class() {
        let f = Failure::new(ErrorClass::HttpClientError, "HTTP 404: model not found");
        let m = stop_message(
            "m1",
            "stage 1/3, the shortest case (5 prompt characters)",
            "c01",
            &f,
            1,
            1,
        );
        assert!(m.starts_with("staged rollout stopped m1 at stage 1/3"), "{m}");
        assert!(m.contains("case c01: http_4xx (HTTP 404: model not found)"), "{m}");
        assert!(m.contains("(1) symptom"), "{m}");
    }
}
