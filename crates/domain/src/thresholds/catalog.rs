//! The metric catalog: every metric a rule may name, with how it is shown and assessed.
use super::units::{Dimension, Uncertainty, Unit};

/// What a metric's parameter (after `:`) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    None,
    /// A grader name from the eval set, required.
    Grader,
    /// An error class, optional (none = all classes).
    ErrorClass,
    /// An endpoint probe key (`domain::operability::ProbeKind`), required.
    Probe,
    /// A readiness checklist item key (`domain::operability::ChecklistItem`), required.
    ChecklistItem,
    /// The incumbent a blind win rate is measured against: a candidate's name, optional (none =
    /// the incumbent chosen for the scorecard). Everything after `:` is the name.
    Incumbent,
    /// A conversation turn, 1-based (`turn_ttft_p95:5`), required.
    Turn,
}

/// One entry of the catalog: a base metric name and everything needed to show and judge it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    pub base: &'static str,
    pub label: &'static str,
    pub dimension: Dimension,
    pub unit: Unit,
    /// Whether larger values are better (decides "best value" and the default comparator).
    pub higher_is_better: bool,
    pub uncertainty: Uncertainty,
    /// How the figure is computed (its caliber), in words.
    pub caliber: &'static str,
    pub param: Param,
    /// Whether `@c=N` applies (figures measured under a load condition).
    pub per_load: bool,
    /// Some(why) while bakeoff cannot measure this yet: rules on it are "not measured".
    pub not_measured_yet: Option<&'static str>,
}

const fn def(
    base: &'static str,
    label: &'static str,
    dimension: Dimension,
    unit: Unit,
    higher_is_better: bool,
    uncertainty: Uncertainty,
    caliber: &'static str,
) -> MetricDef {
    MetricDef {
        base,
        label,
        dimension,
        unit,
        higher_is_better,
        uncertainty,
        caliber,
        param: Param::None,
        per_load: true,
        not_measured_yet: None,
    }
}

const fn with_param(mut d: MetricDef, param: Param) -> MetricDef {
    d.param = param;
    d
}

const fn whole_run(mut d: MetricDef) -> MetricDef {
    d.per_load = false;
    d
}

const fn pending(mut d: MetricDef, why: &'static str) -> MetricDef {
    d.not_measured_yet = Some(why);
    d
}

use Dimension::{Operability, Quality, Stability, Throughput};
use Uncertainty::{Bootstrap, ClopperPearson, Exact, Proportion};

const LATENCY_CALIBER_TTFT: &str = "send → first non-empty token (reasoning or content), successful requests";
const LATENCY_CALIBER_TTFA: &str = "send → first non-empty content token, successful requests";
const LATENCY_CALIBER_TPOT: &str = "(E2E − TTFT) / (output tokens − tokens of the first chunk), successful streamed requests with a token after the first chunk";
const LATENCY_CALIBER_E2E: &str = "send → end of stream, successful requests";
const OPERABILITY_PENDING: &str = "no probe measures it yet";

/// Every metric a rule may name. Percentile variants of latencies are separate entries so the
/// form can offer them in one list.
pub const CATALOG: &[MetricDef] = &[
    // --- throughput and latency
    def(
        "aggregate_tok_s",
        "aggregate tok/s (steady window)",
        Throughput,
        Unit::TokS,
        true,
        Bootstrap,
        "steady window: output tokens arriving inside the level's measured window (ramp-up and drain left out) / its \
         length, median over repetitions; not the whole-run figure (all tokens / first send → last token), which the \
         run page shows beside it",
    ),
    def(
        "request_throughput",
        "request throughput",
        Throughput,
        Unit::ReqS,
        true,
        Bootstrap,
        "completed requests in the measured window / window length",
    ),
    def(
        "decode_tok_s_p50",
        "decode tok/s/stream p50",
        Throughput,
        Unit::TokS,
        true,
        Bootstrap,
        "(output tokens − tokens of the first chunk) / (last token − first token), median over successful streamed requests",
    ),
    def(
        "e2e_tok_s_p50",
        "e2e tok/s/stream p50",
        Throughput,
        Unit::TokS,
        true,
        Bootstrap,
        "output tokens / E2E, median over successful requests",
    ),
    def(
        "ttft_p50_ms",
        "TTFT p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttft_p90_ms",
        "TTFT p90",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttft_p95_ms",
        "TTFT p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "ttft_p99_ms",
        "TTFT p99",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFT,
    ),
    def(
        "prefix_cache_hit_rate",
        "prefix-cache token hit rate",
        Throughput,
        Unit::Percent,
        true,
        Bootstrap,
        "Σ cached (read) prompt tokens / Σ whole prompt tokens over successful requests at the load, from the \
         server's usage: OpenAI prompt_tokens (cached included), Anthropic input_tokens + cache_read_input_tokens + \
         cache_creation_input_tokens; not measured when the usage has no cache field",
    ),
    def(
        "warm_ttft_p95_ms",
        "warm TTFT p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        "send → first non-empty token, 95th percentile over successful requests with some prompt tokens read from \
         the server's prompt cache (warm)",
    ),
    def(
        "ttfa_p50_ms",
        "TTFA p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFA,
    ),
    def(
        "ttfa_p95_ms",
        "TTFA p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TTFA,
    ),
    def(
        "tpot_p50_ms",
        "TPOT p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TPOT,
    ),
    def(
        "tpot_p95_ms",
        "TPOT p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_TPOT,
    ),
    def(
        "e2e_p50_ms",
        "E2E p50",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    def(
        "e2e_p90_ms",
        "E2E p90",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    def(
        "e2e_p95_ms",
        "E2E p95",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    def(
        "e2e_p99_ms",
        "E2E p99",
        Throughput,
        Unit::Ms,
        false,
        Bootstrap,
        LATENCY_CALIBER_E2E,
    ),
    // --- quality (judged over every case measured, whatever its load)
    whole_run(def(
        "accuracy",
        "accuracy",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "weighted share of graded cases passed; a failed request counts as wrong",
    )),
    whole_run(def(
        "pass_rate",
        "pass rate",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "share of cases whose every grader passed, each case counted once (weights ignored)",
    )),
    whole_run(with_param(
        def(
            "grader_score",
            "mean grader score",
            Quality,
            Unit::Percent,
            true,
            Bootstrap,
            "mean score in [0, 1] of the named grader; a failed request scores 0",
        ),
        Param::Grader,
    )),
    // --- blind pairwise preference (issue 50): "challenger not worse than incumbent at 95 %" is
    // a rule `≥ 40 %` on one of these (pass when the one-sided 95 % lower bound clears 40 %).
    whole_run(with_param(
        def(
            "blind_win_rate",
            "blind win rate vs incumbent (humans)",
            Quality,
            Unit::Percent,
            true,
            ClopperPearson,
            "the candidate's wins / decided blind comparisons with the incumbent, made by people (LLM judges left \
             out), sides drawn at random and names hidden, ties left out, each comparison counted once; exact \
             (Clopper–Pearson) interval. A rule ≥ 40 % reads \"not worse than the incumbent at 95 %, within 10 \
             points of an even split\": it passes when the one-sided 95 % lower bound is at least 40 %, fails when \
             the upper bound is below",
        ),
        Param::Incumbent,
    )),
    whole_run(with_param(
        def(
            "judge_win_rate",
            "blind win rate vs incumbent (LLM judge, both orders)",
            Quality,
            Unit::Percent,
            true,
            ClopperPearson,
            "cases an LLM judge compared blind in both orders (candidate left, then right): a win when its two \
             verdicts favour the candidate on balance, a loss when they favour the incumbent, a tie otherwise (so a \
             judge that always picks one side decides nothing); wins / decided cases, exact (Clopper–Pearson) \
             interval, judged like the human win rate",
        ),
        Param::Incumbent,
    )),
    // --- conversation cases (judged per load level: the level's number of users)
    with_param(
        def(
            "turn_ttft_p95",
            "TTFT p95 at conversation turn k",
            Throughput,
            Unit::Ms,
            false,
            Bootstrap,
            "send → first token (reasoning or content) of the successful requests at turn k of the conversation \
             cases (its whole history in the prompt), 95th percentile, at the load (its users); bootstrap interval",
        ),
        Param::Turn,
    ),
    def(
        "conversation_pass_rate",
        "conversation pass rate",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "share of conversations (conversation case × repetition) whose graded turns all passed, none failed, and \
         that reached their last graded turn, at the load; Wilson interval",
    ),
    def(
        "last_turn_accuracy",
        "accuracy at the last turn",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "share of conversations whose last graded turn passed (a conversation that stopped before it fails \
         there), at the load; Wilson interval",
    ),
    // --- tool cases (judged per load level: parsers that break only under load show there)
    def(
        "tool_call_accuracy",
        "tool-call accuracy",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "share of tool-case answers whose calls were all right (tool-calls grade passed), over graded tool-case \
         answers at the load; a failed request is counted by the failure rate, and here too when it broke off \
         mid-call (graded stream-cut, malformed)",
    ),
    def(
        "tool_argument_f1",
        "tool-call argument F1",
        Quality,
        Unit::Percent,
        true,
        Bootstrap,
        "mean per answer of the argument F1 (right arguments of matched calls against expected and given ones), \
         over graded tool-case answers at the load",
    ),
    def(
        "malformed_call_rate",
        "malformed-call rate",
        Quality,
        Unit::Percent,
        false,
        Proportion,
        "share of graded tool-case answers with a call that could not be read as sent (arguments not JSON or \
         double-encoded, a call in the text, a call cut off — the token limit, or the stream broken off mid-call), at \
         the load",
    ),
    def(
        "abstention_error_rate",
        "tool abstention errors",
        Quality,
        Unit::Percent,
        false,
        Proportion,
        "share of graded tool-case answers that called a tool when they must not, or none when they must, at the load",
    ),
    def(
        "schema_valid_rate",
        "schema-validity rate",
        Quality,
        Unit::Percent,
        true,
        Proportion,
        "structured output: share of answers to cases with a response_format that are JSON and valid against its \
         schema (the response-format grade), over those answers at the load (final attempts; unconstrained twins \
         left out)",
    ),
    // --- stability
    with_param(
        def(
            "failure_rate",
            "failure rate",
            Stability,
            Unit::Percent,
            false,
            Proportion,
            "failed / measured requests, final attempts (after retries), warm-ups excluded",
        ),
        Param::ErrorClass,
    ),
    def(
        "retry_share",
        "requests needing a retry",
        Stability,
        Unit::Percent,
        false,
        Proportion,
        "share of measured requests whose first attempt failed",
    ),
    def(
        "e2e_cv",
        "E2E spread (CV)",
        Stability,
        Unit::Percent,
        false,
        Bootstrap,
        "standard deviation / mean of E2E latency over successful requests",
    ),
    whole_run(def(
        "soak_tok_s_loss",
        "throughput loss over a soak",
        Stability,
        Unit::Percent,
        false,
        Bootstrap,
        "fall of output tok/s from the first to the last of 10 soak windows, as a share of the first \
         (least-squares trend over the windows, 90 % t-interval of its slope)",
    )),
    // --- operability and cost
    def(
        "rate_limited_share",
        "attempts rate-limited (429)",
        Operability,
        Unit::Percent,
        false,
        Proportion,
        "share of measured attempts answered with HTTP 429",
    ),
    whole_run(def(
        "usage_reported_share",
        "token usage reported",
        Operability,
        Unit::Percent,
        true,
        Proportion,
        "share of successful requests whose server reported token usage",
    )),
    whole_run(def(
        "cost_per_1k_cases",
        "cost per 1,000 cases",
        Operability,
        Unit::Usd,
        false,
        Exact,
        "(input tokens × input price + output tokens × output price) of measured attempts, retries included, per 1,000 requests",
    )),
    def(
        "slo_attainment",
        "SLO attainment",
        Throughput,
        Unit::Percent,
        true,
        Proportion,
        "share of the level's requests (final attempts, warm-ups excluded; failed requests count as misses) meeting \
         every limit of the run's SLO (TTFT, TTFA, TPOT, E2E)",
    ),
    whole_run(def(
        "capacity_at_slo",
        "capacity @ SLO",
        Throughput,
        Unit::ReqS,
        true,
        Bootstrap,
        "a find-capacity run's search over request rate (docs/capacity.md): where the probes' SLO attainment crosses \
         the target, interpolated; its interval runs from the highest load whose 99 % attainment interval clears the \
         target to the lowest above it whose interval lies wholly below (an end no probe confirmed: 0 or unbounded)",
    )),
    whole_run(def(
        "capacity_at_slo_users",
        "capacity @ SLO (users)",
        Throughput,
        Unit::Users,
        true,
        Bootstrap,
        "a find-capacity run's search over concurrency (docs/capacity.md): the most concurrent users (in-flight \
         requests) whose SLO attainment still meets the target, interpolated between probes; its interval as for \
         capacity @ SLO. A search over request rate is judged by capacity @ SLO (req/s) instead",
    )),
    whole_run(def(
        "cost_per_1k_answers_at_capacity",
        "cost per 1,000 answers at capacity",
        Operability,
        Unit::Usd,
        false,
        Exact,
        "self-hosted: GPUs × price per GPU-hour / (capacity @ SLO in req/s × 3,600) × 1,000, at the search's estimate",
    )),
    whole_run(def(
        "cost_per_1k_correct_at_capacity",
        "cost per 1,000 correct answers at capacity",
        Operability,
        Unit::Usd,
        false,
        Exact,
        "cost per 1,000 answers at capacity / the candidate's accuracy in this run (correct final answers / graded)",
    )),
    whole_run(def(
        "cost_per_correct",
        "cost per correct answer",
        Operability,
        Unit::Usd,
        false,
        Exact,
        "cost of measured attempts / cases answered correctly",
    )),
    def(
        "joules_per_output_token",
        "GPU energy per output token",
        Operability,
        Unit::JoulesPerToken,
        false,
        Exact,
        "GPU energy over the level's window (the exporter's energy counter, else its power scrapes integrated) / \
         output tokens received in it; needs the candidate's GPU metrics URL (docs/telemetry.md)",
    ),
    whole_run(def(
        "operability_score",
        "operability score",
        Operability,
        Unit::Percent,
        true,
        Exact,
        "mean of the share of endpoint probes passed (latest probe run) and of readiness checklist items done \
         (current answers), from the candidate's Operability page",
    )),
    whole_run(def(
        "probes_passed_share",
        "endpoint probes passed",
        Operability,
        Unit::Percent,
        true,
        Exact,
        "passed / applicable endpoint probes in the candidate's latest probe run",
    )),
    whole_run(def(
        "checklist_share",
        "readiness checklist done",
        Operability,
        Unit::Percent,
        true,
        Exact,
        "items answered yes / items that apply, in the candidate's current checklist",
    )),
    whole_run(with_param(
        def(
            "probe",
            "endpoint probe",
            Operability,
            Unit::Percent,
            true,
            Exact,
            "100 % when the named probe passed in the latest probe run, 0 % when it failed",
        ),
        Param::Probe,
    )),
    whole_run(with_param(
        def(
            "checklist",
            "checklist item",
            Operability,
            Unit::Percent,
            true,
            Exact,
            "100 % when the named readiness item is answered yes, 0 % when no or unanswered",
        ),
        Param::ChecklistItem,
    )),
    pending(
        whole_run(def(
            "cold_start_ms",
            "cold start",
            Operability,
            Unit::Ms,
            false,
            Bootstrap,
            "time from an idle endpoint to its first successful answer",
        )),
        OPERABILITY_PENDING,
    ),
];

/// The catalog entry named `base`.
pub fn metric_def(base: &str) -> Option<&'static MetricDef> {
    CATALOG.iter().find(|d| d.base == base)
}
