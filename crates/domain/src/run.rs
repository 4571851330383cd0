//! Runs and the raw per-request records they produce.
use serde::{Deserialize, Serialize};

use super::Timestamp;
use super::chunks::{ChunkText, Chunks};
use super::grading::Grade;
use super::load::{Load, LoadShape, MAX_CONCURRENCY};
use super::validation::{FieldErrors, optional_number, required_number};

/// How a run is executed. Stored as JSON with the run, so it is part of every figure's identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Requests in flight at once per candidate (closed loop).
    pub concurrency: u32,
    /// How many times every case is sent (repetition index 0..n).
    pub repetitions: u32,
    /// Requests sent first and excluded from every figure.
    pub warmup_requests: u32,
    /// Overrides the eval set's / candidate's max_tokens when set.
    pub max_tokens: Option<u32>,
    /// Overrides the eval set's / candidate's temperature when set.
    pub temperature: Option<f64>,
    /// Whole-request timeout.
    pub timeout_secs: u32,
    /// Send → first token of a stream (None: `DEFAULT_FIRST_TOKEN_TIMEOUT_SECS`); at most
    /// `timeout_secs`. A stream without a token by then fails `first_token_timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_timeout_secs: Option<u32>,
    /// Longest silence between two tokens of a stream (None: `DEFAULT_STALL_TIMEOUT_SECS`); at
    /// most `timeout_secs`. A stream silent for longer fails `stall_timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_timeout_secs: Option<u32>,
    /// Retries after a failed attempt (each attempt is its own record).
    pub retries: u32,
    pub stream: bool,
    /// Only the first N cases (None = all).
    pub case_limit: Option<u32>,
    /// How load is applied (older runs, stored without it, are a fixed concurrency).
    #[serde(default)]
    pub load: LoadShape,
    /// Start with the staged rollout: shortest case, longest case, a few concurrent requests,
    /// then the full run; stop early if a stage fails.
    #[serde(default = "default_true")]
    pub staged_rollout: bool,
    /// Requests per load level and repetition, cycling through the cases (None: each case once).
    #[serde(default)]
    pub requests_per_level: Option<u32>,
    /// Stop sending new requests of a level's repetition after this many seconds (None: no limit).
    #[serde(default)]
    pub duration_secs: Option<u32>,
    /// Objectives for goodput (requests per second that meet all of them).
    #[serde(default)]
    pub slo: Slo,
    /// The judging profile's SLO when the run started, if that profile has one: it judges the
    /// run instead of `slo` ([`RunConfig::judging_slo`]). Set by the app when the run is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_slo: Option<ProfileSlo>,
    /// Stop each level once its SLO attainment is decided against `slo.target_attainment`
    /// (`domain::capacity::LevelDecision`), instead of sending every planned request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_when_decided: bool,
    /// Go on with a sweep's higher levels after one was judged past saturation
    /// (`domain::capacity::saturation_signs`): off by default, the levels above it are skipped
    /// (a growing queue only grows faster with more load) and the run's events say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub measure_past_saturation: bool,
    /// `llm-judge` grading: None (the default) leaves judge graders ungraded; Some sends each
    /// measured output to its judge after the measured requests (`engine::run::llm_judge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeConfig>,
    /// A soak (`engine::run::soak`): the soak phase at `concurrency` for `duration_secs`, at most
    /// `requests_per_level` requests. Kept with the run so a restart resumes it as a soak.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub soak: bool,
    /// When a candidate that keeps failing is stopped while the others go on.
    #[serde(default)]
    pub error_budget: ErrorBudget,
    /// Clients (workers) each candidate's load is split over, at once: None or 1 measures it
    /// from one client. Above 1, every worker takes a share of the cases and of the concurrency
    /// (or rate), they start together at a barrier through the database, and the level's
    /// figures pool every share (see docs/workers.md). One load level only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    /// How tool cases reach the model: its native tool API, or "prompt mode" (the tools in the
    /// system prompt, calls read from the text; `docs/tool-cases.md`).
    /// `both`: each candidate in both modes, the prompt mode as a variant of the candidate
    /// beside it (`prompt_mode_candidates`).
    #[serde(default, skip_serializing_if = "crate::tool_calls::RunToolMode::is_native")]
    pub tool_mode: crate::tool_calls::RunToolMode,
    /// In a run whose tool mode is `both`: the candidates of the run that are prompt-mode
    /// variants (`app::runs` adds one after each candidate when the run is created), sent in
    /// prompt mode; every other candidate is sent natively.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_mode_candidates: Vec<i64>,
    /// The cost of structured output: every case with a `response_format` is also sent without
    /// it (its unconstrained twin, id `<id>~unconstrained`, right after it, at the same load),
    /// so TTFT and decode rate with and without the constraint are measured in one run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconstrained_twins: bool,
    /// Seconds between two scrapes of a candidate's telemetry source during its measured load
    /// (None: `telemetry::DEFAULT_SCRAPE_INTERVAL_S`); between `MIN_SCRAPE_INTERVAL_S` and
    /// `MAX_SCRAPE_INTERVAL_S`. Scrapes at each level's start and end are taken besides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_interval_secs: Option<f64>,
    /// Conversation cases (`evalset::conversation`): each of the `concurrency` users waits this
    /// long between a reply and its next turn (None: no think time). Single-request cases ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<crate::conversation::ThinkTime>,
}

/// A candidate's error budget: it is stopped (with the reason, the other candidates go on)
/// when more than `max_failed_percent` of its last `window` measured requests failed. A
/// request counts once, with the outcome of its last attempt (its retries are spent first);
/// warm-ups and the staged start do not count (the staged start stops a candidate on its own
/// rule). Nothing is judged before `window` requests have ended, so a short run is never
/// stopped by its first failure; and because the window slides, an endpoint that dies late in
/// a long run is stopped within `window` requests. 100 % turns the budget off.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBudget {
    pub max_failed_percent: f64,
    pub window: u32,
}

impl Default for ErrorBudget {
    /// Half of the last 20: a candidate that fails that often is broken, not flaky, and its
    /// speed figures would be of the requests that happened to succeed. An ordinary flaky
    /// endpoint (a few % of faults, mostly cured by a retry) never comes near it.
    fn default() -> Self {
        ErrorBudget {
            max_failed_percent: 50.0,
            window: 20,
        }
    }
}

/// Most requests an error budget's window may span.
pub const MAX_BUDGET_WINDOW: u32 = 10_000;

impl ErrorBudget {
    pub fn is_off(&self) -> bool {
        self.max_failed_percent >= 100.0 || self.window == 0
    }

    /// Whether `failed` failures among `ended` requests (the window's content) exceed the
    /// budget: only a full window is judged.
    pub fn is_exceeded(&self, failed: u32, ended: u32) -> bool {
        if self.is_off() || ended < self.window {
            return false;
        }
        f64::from(failed) * 100.0 > self.max_failed_percent * f64::from(ended)
    }

    /// "more than 50 % of the last 20 requests".
    pub fn describe(&self) -> String {
        if self.is_off() {
            return "off".to_string();
        }
        format!(
            "more than {} % of the last {} requests",
            super::format::shortest(self.max_failed_percent),
            self.window
        )
    }
}

/// The outcomes of a candidate's last `window` measured requests, judged against its budget.
#[derive(Debug, Clone)]
pub struct BudgetWindow {
    budget: ErrorBudget,
    /// true = failed, oldest first; at most `budget.window` long.
    outcomes: std::collections::VecDeque<bool>,
    failed: u32,
}

/// What exceeded a budget: `failed` of the last `window` requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetExceeded {
    pub failed: u32,
    pub window: u32,
}

impl BudgetWindow {
    pub fn new(budget: ErrorBudget) -> Self {
        BudgetWindow {
            budget,
            outcomes: std::collections::VecDeque::with_capacity(budget.window.min(MAX_BUDGET_WINDOW) as usize),
            failed: 0,
        }
    }

    /// Adds one request's final outcome; Some when the budget is now exceeded.
    pub fn record(&mut self, failed: bool) -> Option<BudgetExceeded> {
        if self.budget.is_off() {
            return None;
        }
        self.outcomes.push_back(failed);
        self.failed += u32::from(failed);
        while self.outcomes.len() > self.budget.window as usize {
            if self.outcomes.pop_front() == Some(true) {
                self.failed -= 1;
            }
        }
        let ended = self.outcomes.len() as u32;
        self.budget.is_exceeded(self.failed, ended).then_some(BudgetExceeded {
            failed: self.failed,
            window: ended,
        })
    }
}

/// How `llm-judge` graders are run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeConfig {
    /// Judges by the name their grader gives, resolved to candidate ids when the run was
    /// created (the run form fills it; a name missing here is resolved when the run starts).
    /// Kept with the run so its judge cost is priced by the judge that answered, even if a
    /// candidate is renamed later.
    #[serde(default)]
    pub judges: std::collections::BTreeMap<String, i64>,
    /// When set, every judge grader is sent to this candidate instead of the one it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_id: Option<i64>,
}

impl JudgeConfig {
    /// The candidate id that judges for a grader naming `name`, when known.
    pub fn judge_for(&self, name: &str) -> Option<i64> {
        self.override_id.or_else(|| self.judges.get(name).copied())
    }

    /// The judge candidate for a grader naming `name`: by id when known (`judge_for`), else the
    /// candidate with that name; None when there is none.
    pub fn resolve<'a>(
        &self,
        name: &str,
        candidates: &'a [super::candidate::Candidate],
    ) -> Option<&'a super::candidate::Candidate> {
        match self.judge_for(name) {
            Some(id) => candidates.iter().find(|c| c.id == id),
            None => candidates.iter().find(|c| c.spec.name == name),
        }
    }
}

/// Optional service-level objectives; a request meets them when it meets every one set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// Send → first answer token (differs from TTFT for reasoning models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfa_ms: Option<f64>,
    /// Share of a level's requests that must meet every objective (0.95: 95 %): what the
    /// capacity search judges each probe level against (`domain::capacity`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_attainment: Option<f64>,
    /// Limits for conversation turns from a turn number on ([`TurnLimits`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub later_turns: Option<TurnLimits>,
}

impl Slo {
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some()
            || self.tpot_ms.is_some()
            || self.e2e_ms.is_some()
            || self.ttfa_ms.is_some()
            || self.later_turns.is_some_and(|t| t.is_set())
    }

    /// The limits a request of conversation turn `turn` (1-based; None: a single request) is
    /// held to: the later-turn limits where set, from their `from_turn` on; the base ones
    /// otherwise.
    pub fn limits_for_turn(&self, turn: Option<u32>) -> Slo {
        match (self.later_turns, turn) {
            (Some(later), Some(t)) if t >= later.from_turn => Slo {
                ttft_ms: later.ttft_ms.or(self.ttft_ms),
                ttfa_ms: later.ttfa_ms.or(self.ttfa_ms),
                tpot_ms: later.tpot_ms.or(self.tpot_ms),
                e2e_ms: later.e2e_ms.or(self.e2e_ms),
                target_attainment: self.target_attainment,
                later_turns: None,
            },
            _ => Slo {
                later_turns: None,
                ..*self
            },
        }
    }

    /// `TTFT ≤ 800 ms, E2E ≤ 5 s; from turn 3: TTFT ≤ 1.5 s; 95 % must meet all` (None when no
    /// limit is set).
    pub fn describe(&self) -> Option<String> {
        if !self.is_set() {
            return None;
        }
        let mut text = limits_text(self.ttft_ms, self.ttfa_ms, self.tpot_ms, self.e2e_ms);
        if let Some(later) = self.later_turns.filter(|t| t.is_set()) {
            let later_text = limits_text(later.ttft_ms, later.ttfa_ms, later.tpot_ms, later.e2e_ms);
            if text.is_empty() {
                text = format!("from turn {}: {later_text}", later.from_turn);
            } else {
                text = format!("{text}; from turn {}: {later_text}", later.from_turn);
            }
        }
        if let Some(t) = self.target_attainment {
            text.push_str(&format!(
                "; {} % must meet all",
                super::format::significant_trimmed(t * 100.0)
            ));
        }
        Some(text)
    }
}

/// `TTFT ≤ 800 ms, E2E ≤ 5 s` (limits of 1 s or more in seconds).
fn limits_text(ttft: Option<f64>, ttfa: Option<f64>, tpot: Option<f64>, e2e: Option<f64>) -> String {
    let ms = |v: f64| {
        if v >= 1000.0 {
            format!("{} s", super::format::significant_trimmed(v / 1000.0))
        } else {
            format!("{} ms", super::format::significant_trimmed(v))
        }
    };
    [("TTFT", ttft), ("TTFA", ttfa), ("TPOT", tpot), ("E2E", e2e)]
        .into_iter()
        .filter_map(|(name, v)| v.map(|v| format!("{name} ≤ {}", ms(v))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Limits for the later turns of conversation cases: from turn `from_turn` (1-based) on, each
/// limit set here replaces the SLO's own for that metric (e.g. a longer TTFT once the history is
/// long). Unset limits keep the SLO's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnLimits {
    pub from_turn: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfa_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl TurnLimits {
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.ttfa_ms.is_some() || self.tpot_ms.is_some() || self.e2e_ms.is_some()
    }
}

/// A threshold profile's SLO as a run took it when it started (the profile that judges the
/// run's eval set, at its version then): it judges the run in place of the run's own SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileSlo {
    pub profile_id: i64,
    pub profile: String,
    pub version: u32,
    pub slo: Slo,
}

/// The SLO that judges a run and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgingSlo {
    pub slo: Slo,
    /// The profile it came from (name, version); None: the run's own.
    pub from_profile: Option<(String, u32)>,
}

impl JudgingSlo {
    /// `SLO from profile "online" v3: TTFT ≤ 800 ms, E2E ≤ 5 s; 95 % must meet all`, or
    /// `the run's own SLO: …`; None when no SLO is set.
    pub fn describe(&self) -> Option<String> {
        let limits = self.slo.describe()?;
        Some(match &self.from_profile {
            Some((name, version)) => format!("SLO from profile {name:?} v{version}: {limits}"),
            None => format!("the run's own SLO: {limits}"),
        })
    }
}

fn default_true() -> bool {
    true
}

/// Repetition numbers of load-level runs: level `l`, repetition `r` (< `REPETITION_LIMIT`) and
/// cycle `k` (the k-th time round the cases within one repetition, < `CYCLE_LIMIT`) are stored
/// as `l × LEVEL_STRIDE + k × REPETITION_LIMIT + r`, so every request of a multi-level run keeps
/// a unique key, and a one-level run without cycles stores plain repetition numbers.
pub const LEVEL_STRIDE: u32 = 1_000_000;
pub const REPETITION_LIMIT: u32 = 100;
pub const CYCLE_LIMIT: u32 = 10_000;

/// The parts of a stored repetition number: (level index, repetition, cycle).
pub fn split_repetition(stored: u32) -> (u32, u32, u32) {
    let level = stored / LEVEL_STRIDE;
    let within = stored % LEVEL_STRIDE;
    (level, within % REPETITION_LIMIT, within / REPETITION_LIMIT)
}

/// How many records of one candidate a run stored under one (phase, warm-up, stored repetition,
/// concurrency): what tells a fold fed records in the store's order that a repetition of its was
/// read whole (see `calibers::ReadWhole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordGroup {
    pub phase: Phase,
    pub is_warmup: bool,
    pub repetition: u32,
    pub concurrency: u32,
    pub records: u64,
}

/// What a [`RecordGroup`] counts records by: (phase, warm-up, stored repetition, concurrency).
pub type GroupKey = (Phase, bool, u32, u32);

impl RecordGroup {
    pub fn key(&self) -> GroupKey {
        (self.phase, self.is_warmup, self.repetition, self.concurrency)
    }

    /// The group `r` is counted in.
    pub fn key_of(r: &RequestRecord) -> GroupKey {
        (r.phase, r.is_warmup, r.repetition, r.concurrency)
    }
}

/// The stored repetition number of (level index, repetition, cycle).
pub fn join_repetition(level: u32, repetition: u32, cycle: u32) -> u32 {
    level * LEVEL_STRIDE + cycle * REPETITION_LIMIT + repetition
}

/// Longest whole-request (and first-token or stall) timeout a run may set, in seconds.
pub const MAX_TIMEOUT_SECS: u32 = 3600;

/// Default first-token timeout: a healthy server under heavy load still answers within it.
pub const DEFAULT_FIRST_TOKEN_TIMEOUT_SECS: u32 = 60;
/// Default stall timeout: no healthy stream goes this long between two tokens.
pub const DEFAULT_STALL_TIMEOUT_SECS: u32 = 20;

impl RunConfig {
    /// The SLO that judges this run: its judging profile's (taken when it started) when that
    /// profile has one, else the run's own.
    pub fn judging_slo(&self) -> JudgingSlo {
        match &self.profile_slo {
            Some(p) if p.slo.is_set() => JudgingSlo {
                slo: p.slo,
                from_profile: Some((p.profile.clone(), p.version)),
            },
            _ => JudgingSlo {
                slo: self.slo,
                from_profile: None,
            },
        }
    }

    /// The objectives requests are counted against: [`RunConfig::judging_slo`]'s.
    pub fn effective_slo(&self) -> Slo {
        match &self.profile_slo {
            Some(p) if p.slo.is_set() => p.slo,
            _ => self.slo,
        }
    }

    /// The mode candidate `candidate_id` of this run sends its tool cases in.
    pub fn tool_mode_of(&self, candidate_id: i64) -> crate::tool_calls::ToolMode {
        self.tool_mode.of_candidate(candidate_id, &self.prompt_mode_candidates)
    }

    /// The first-token timeout in effect (never above the whole-request timeout).
    pub fn first_token_timeout(&self) -> u32 {
        self.first_token_timeout_secs
            .unwrap_or(DEFAULT_FIRST_TOKEN_TIMEOUT_SECS)
            .min(self.timeout_secs)
            .max(1)
    }

    /// The stall timeout in effect (never above the whole-request timeout).
    pub fn stall_timeout(&self) -> u32 {
        self.stall_timeout_secs
            .unwrap_or(DEFAULT_STALL_TIMEOUT_SECS)
            .min(self.timeout_secs)
            .max(1)
    }

    /// Seconds between telemetry scrapes in effect.
    pub fn scrape_interval(&self) -> f64 {
        self.scrape_interval_secs
            .unwrap_or(super::telemetry::DEFAULT_SCRAPE_INTERVAL_S)
    }

    /// The load levels in the order they run.
    pub fn loads(&self) -> Vec<Load> {
        self.load.loads(self.concurrency)
    }

    /// Idle connections the candidate's client keeps (see `LoadShape::pool_size`).
    pub fn pool_size(&self) -> u32 {
        self.load.pool_size(self.concurrency)
    }

    /// The phase measured requests belong to: `quality` for a plain eval run, `throughput` when
    /// a load shape asks for levels, a rate or a sweep.
    pub fn measured_phase(&self) -> Phase {
        match self.load {
            LoadShape::Fixed => Phase::Quality,
            _ => Phase::Throughput,
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            concurrency: 4,
            repetitions: 1,
            warmup_requests: 2,
            max_tokens: None,
            temperature: Some(0.2),
            timeout_secs: 60,
            first_token_timeout_secs: None,
            stall_timeout_secs: None,
            retries: 1,
            stream: true,
            case_limit: None,
            load: LoadShape::Fixed,
            staged_rollout: true,
            requests_per_level: None,
            duration_secs: None,
            slo: Slo::default(),
            profile_slo: None,
            stop_when_decided: false,
            measure_past_saturation: false,
            judge: None,
            soak: false,
            error_budget: ErrorBudget::default(),
            clients: None,
            tool_mode: Default::default(),
            prompt_mode_candidates: Vec::new(),
            unconstrained_twins: false,
            scrape_interval_secs: None,
            think_time: None,
        }
    }
}

/// Most clients one candidate's load can be split over.
pub const MAX_CLIENTS: u32 = 16;

impl RunConfig {
    /// The cases a run sends of an eval set of `cases`: the first `case_limit`, else all.
    pub fn case_count(&self, cases: usize) -> usize {
        self.case_limit.map_or(cases, |n| cases.min(n as usize))
    }

    /// Clients each candidate's load is split over (1: one client).
    pub fn clients(&self) -> u32 {
        self.clients.unwrap_or(1).clamp(1, MAX_CLIENTS)
    }
}

/// The run form as typed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct RunDraft {
    pub concurrency: String,
    pub repetitions: String,
    pub warmup_requests: String,
    pub max_tokens: String,
    pub temperature: String,
    pub timeout_secs: String,
    /// Blank: `DEFAULT_FIRST_TOKEN_TIMEOUT_SECS`.
    pub first_token_timeout_secs: String,
    /// Blank: `DEFAULT_STALL_TIMEOUT_SECS`.
    pub stall_timeout_secs: String,
    pub retries: String,
    pub case_limit: String,
    /// "on" when the streaming checkbox is ticked.
    pub stream: Option<String>,
    /// The error budget: percent of failed requests (100 = off) over a window of requests.
    pub error_budget_percent: String,
    pub error_budget_window: String,
    /// Workers each candidate's load is split over. Blank: one client.
    pub clients: String,
    /// Seconds between telemetry scrapes. Blank: `telemetry::DEFAULT_SCRAPE_INTERVAL_S`.
    pub scrape_interval_secs: String,
    /// Conversation think time: `fixed 500`, `uniform 200-800`, `exponential 1000` (ms). Blank: none.
    pub think_time: String,
    /// How tool cases are sent: `native`, `prompt` or `both`. Blank: native.
    pub tool_mode: String,
    /// "on": structured-output cases are also sent without their constraint.
    pub unconstrained_twins: Option<String>,
}

impl RunDraft {
    /// The form's view of a configuration (the fields `LoadDraft` does not cover).
    pub fn from_config(c: &RunConfig) -> RunDraft {
        let opt = |v: Option<String>| v.unwrap_or_default();
        RunDraft {
            concurrency: c.concurrency.to_string(),
            repetitions: c.repetitions.to_string(),
            warmup_requests: c.warmup_requests.to_string(),
            max_tokens: opt(c.max_tokens.map(|v| v.to_string())),
            temperature: opt(c.temperature.map(|v| v.to_string())),
            timeout_secs: c.timeout_secs.to_string(),
            first_token_timeout_secs: opt(c.first_token_timeout_secs.map(|v| v.to_string())),
            stall_timeout_secs: opt(c.stall_timeout_secs.map(|v| v.to_string())),
            retries: c.retries.to_string(),
            case_limit: opt(c.case_limit.map(|v| v.to_string())),
            stream: c.stream.then(|| "on".to_string()),
            error_budget_percent: super::format::shortest(c.error_budget.max_failed_percent),
            error_budget_window: c.error_budget.window.to_string(),
            clients: opt(c.clients.map(|v| v.to_string())),
            scrape_interval_secs: opt(c.scrape_interval_secs.map(|v| v.to_string())),
            think_time: opt(c.think_time.map(|t| t.spec())),
            tool_mode: c.tool_mode.as_str().to_string(),
            unconstrained_twins: c.unconstrained_twins.then(|| "on".to_string()),
        }
    }

    pub fn validate(&self) -> Result<RunConfig, FieldErrors> {
        let mut e = FieldErrors::default();
        let config = RunConfig {
            concurrency: required_number(&mut e, "concurrency", &self.concurrency, 1, MAX_CONCURRENCY).unwrap_or(1),
            repetitions: required_number(&mut e, "repetitions", &self.repetitions, 1, 100).unwrap_or(1),
            warmup_requests: optional_number(&mut e, "warmup_requests", &self.warmup_requests, 0, 1000).unwrap_or(0),
            max_tokens: optional_number(&mut e, "max_tokens", &self.max_tokens, 1, 1_000_000),
            temperature: optional_number(&mut e, "temperature", &self.temperature, 0.0, 2.0),
            timeout_secs: optional_number(&mut e, "timeout_secs", &self.timeout_secs, 1, MAX_TIMEOUT_SECS)
                .unwrap_or(60),
            first_token_timeout_secs: optional_number(
                &mut e,
                "first_token_timeout_secs",
                &self.first_token_timeout_secs,
                1,
                MAX_TIMEOUT_SECS,
            ),
            stall_timeout_secs: optional_number(
                &mut e,
                "stall_timeout_secs",
                &self.stall_timeout_secs,
                1,
                MAX_TIMEOUT_SECS,
            ),
            retries: optional_number(&mut e, "retries", &self.retries, 0, 10).unwrap_or(1),
            stream: self.stream.is_some(),
            case_limit: optional_number(&mut e, "case_limit", &self.case_limit, 1, 1_000_000),
            error_budget: ErrorBudget {
                max_failed_percent: optional_number(
                    &mut e,
                    "error_budget_percent",
                    &self.error_budget_percent,
                    0.0,
                    100.0,
                )
                .unwrap_or(ErrorBudget::default().max_failed_percent),
                window: optional_number(
                    &mut e,
                    "error_budget_window",
                    &self.error_budget_window,
                    1,
                    MAX_BUDGET_WINDOW,
                )
                .unwrap_or(ErrorBudget::default().window),
            },
            clients: optional_number(&mut e, "clients", &self.clients, 1, MAX_CLIENTS).filter(|&n| n > 1),
            scrape_interval_secs: optional_number(
                &mut e,
                "scrape_interval_secs",
                &self.scrape_interval_secs,
                super::telemetry::MIN_SCRAPE_INTERVAL_S,
                super::telemetry::MAX_SCRAPE_INTERVAL_S,
            ),
            think_time: match crate::conversation::ThinkTime::parse(&self.think_time) {
                Ok(t) => t,
                Err(message) => {
                    e.add("think_time", message);
                    None
                }
            },
            tool_mode: if self.tool_mode.trim().is_empty() {
                crate::tool_calls::RunToolMode::Native
            } else {
                crate::tool_calls::RunToolMode::parse(&self.tool_mode).unwrap_or_else(|| {
                    e.add(
                        "tool_mode",
                        format!(
                            "{:?} is not a tool mode; choose native (the provider's tool API), prompt (tools in \
                             the system prompt) or both (each candidate in both modes, side by side)",
                            self.tool_mode.trim()
                        ),
                    );
                    crate::tool_calls::RunToolMode::Native
                })
            },
            unconstrained_twins: self.unconstrained_twins.is_some(),
            // Not on the form yet: the defaults (fixed concurrency, staged rollout on).
            ..RunConfig::default()
        };
        // A stage's timeout above the whole request's would never fire: say so rather than
        // silently capping it.
        for (field, secs) in [
            ("first_token_timeout_secs", config.first_token_timeout_secs),
            ("stall_timeout_secs", config.stall_timeout_secs),
        ] {
            if let Some(secs) = secs.filter(|&s| s > config.timeout_secs && e.get("timeout_secs").is_none()) {
                e.add(
                    field,
                    format!(
                        "must be between 1 and the whole-request timeout ({} s), got {secs}",
                        config.timeout_secs
                    ),
                );
            }
        }
        e.into_result(config)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    /// The database stayed away past the records writer's limit: every finished record is
    /// stored, the load stopped, and the run resumes (like an interrupted run) from its page or
    /// on the next start.
    Paused,
    Finished,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Paused,
            RunStatus::Finished,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
    pub fn is_terminal(&self) -> bool {
        matches!(self, RunStatus::Finished | RunStatus::Failed | RunStatus::Cancelled)
    }
}

/// The phase a request belongs to (staged rollout and later phases fill these in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Warmup,
    Smoke,
    Quality,
    Throughput,
    Soak,
    Probe,
    /// A call to an `llm-judge` grader's judge. Stored under the judged candidate (keyed by the
    /// record it judges) and with `is_warmup` set, so it is excluded from every figure of that
    /// candidate; its tokens are priced at the judge's prices (`judge_cost`).
    Judge,
}

impl Phase {
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Smoke => "smoke",
            Phase::Quality => "quality",
            Phase::Throughput => "throughput",
            Phase::Soak => "soak",
            Phase::Probe => "probe",
            Phase::Judge => "judge",
        }
    }
    pub fn parse(s: &str) -> Option<Phase> {
        [
            Phase::Warmup,
            Phase::Smoke,
            Phase::Quality,
            Phase::Throughput,
            Phase::Soak,
            Phase::Probe,
            Phase::Judge,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Where a request's output-token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenSource {
    /// The server's `usage` block.
    Usage,
    /// bakeoff's own offline tokenizer.
    Tokenizer,
    /// Number of content-bearing stream chunks (a lower bound when chunks carry several tokens).
    Chunks,
    /// The candidate's own tokenize endpoint (the served model's tokenizer), called after the
    /// candidate's measured load ended; kept beside the record, which is never rewritten.
    #[serde(rename = "server-tokenizer")]
    ServerTokenizer,
}

impl TokenSource {
    pub const ALL: [TokenSource; 4] = [
        TokenSource::Usage,
        TokenSource::Tokenizer,
        TokenSource::Chunks,
        TokenSource::ServerTokenizer,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::Tokenizer => "tokenizer",
            TokenSource::Chunks => "chunks",
            TokenSource::ServerTokenizer => "server-tokenizer",
        }
    }
    pub fn parse(s: &str) -> Option<TokenSource> {
        TokenSource::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Which clock timed a record's events (docs/measurement.md "Which clock timed a figure").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimingClock {
    /// The kernel's receive time of the TCP segment that carried each event's bytes (over TLS:
    /// that completed the TLS record carrying them), whatever bakeoff's threads were doing.
    KernelStamp,
    /// When bakeoff's read returned: later than the bytes' arrival by however long the client
    /// took to get round to them (behind a proxy, or where the kernel gave no stamp).
    UserSpace,
}

impl TimingClock {
    pub const ALL: [TimingClock; 2] = [TimingClock::KernelStamp, TimingClock::UserSpace];

    pub fn as_str(&self) -> &'static str {
        match self {
            TimingClock::KernelStamp => "kernel-stamp",
            TimingClock::UserSpace => "user-space",
        }
    }

    pub fn parse(s: &str) -> Option<TimingClock> {
        TimingClock::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// As a page or report says it.
    pub fn label(&self) -> &'static str {
        match self {
            TimingClock::KernelStamp => "kernel stamp",
            TimingClock::UserSpace => "user space",
        }
    }
}

/// How many of a set of records each clock timed, so a figure built from them says which clock
/// it is on, and says so when it mixes both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockCounts {
    pub kernel_stamp: usize,
    pub user_space: usize,
    /// Records measured before bakeoff recorded the clock.
    pub unknown: usize,
}

impl ClockCounts {
    pub fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Self {
        let mut counts = ClockCounts::default();
        for r in records {
            counts.add(r.clock);
        }
        counts
    }

    pub fn add(&mut self, clock: Option<TimingClock>) {
        match clock {
            Some(TimingClock::KernelStamp) => self.kernel_stamp += 1,
            Some(TimingClock::UserSpace) => self.user_space += 1,
            None => self.unknown += 1,
        }
    }

    /// Both clocks timed some of the records.
    pub fn mixed(&self) -> bool {
        self.kernel_stamp > 0 && self.user_space > 0
    }

    /// The one clock, when every record whose clock is known had the same.
    pub fn single(&self) -> Option<TimingClock> {
        match (self.kernel_stamp > 0, self.user_space > 0) {
            (true, false) => Some(TimingClock::KernelStamp),
            (false, true) => Some(TimingClock::UserSpace),
            _ => None,
        }
    }

    /// What a page or an export says: `kernel stamp`, `user space`, `mixed: 3 kernel stamp,
    /// 2 user space`, or `not recorded`.
    pub fn label(&self) -> String {
        let known = match (self.single(), self.mixed()) {
            (Some(clock), _) => clock.label().to_string(),
            (None, true) => format!(
                "mixed: {} kernel stamp, {} user space",
                self.kernel_stamp, self.user_space
            ),
            (None, false) => return "not recorded".to_string(),
        };
        if self.unknown > 0 {
            format!("{known} ({} not recorded)", self.unknown)
        } else {
            known
        }
    }
}

/// How a record's output tokens were attributed to its chunks: ITL, TPOT and decode tok/s read
/// the per-chunk counts, so the method is stored with the record, exported and shown beside the
/// token source (docs/measurement.md "Tokens per chunk").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkAttribution {
    /// The chunks' own counts, which sum to the total (one token a chunk, or counts the server
    /// gave per chunk). Exact.
    AsStreamed,
    /// One chunk carried every token. Exact.
    SingleChunk,
    /// The server tokenizer's total equals the number of chunks: one token a chunk. Exact.
    OnePerChunk,
    /// The server's tokenizer counted the cumulative text at every chunk boundary; a chunk's
    /// tokens are the difference of two prefixes. Exact at the boundaries (a tokenizer that
    /// merges across a boundary moves a token to the chunk where the merge ends).
    ServerPrefixes,
    /// As `ServerPrefixes` at `MAX_PREFIX_COUNTS` evenly spaced boundaries of a long stream;
    /// within each group of chunks, proportional to each chunk's o200k count.
    ServerPrefixesGrouped,
    /// The total apportioned over the chunks by each chunk's o200k count (largest remainder):
    /// an estimate when the served model's tokenizer is not o200k.
    O200kProportional,
}

impl ChunkAttribution {
    pub const ALL: [ChunkAttribution; 6] = [
        ChunkAttribution::AsStreamed,
        ChunkAttribution::SingleChunk,
        ChunkAttribution::OnePerChunk,
        ChunkAttribution::ServerPrefixes,
        ChunkAttribution::ServerPrefixesGrouped,
        ChunkAttribution::O200kProportional,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            ChunkAttribution::AsStreamed => "as-streamed",
            ChunkAttribution::SingleChunk => "single-chunk",
            ChunkAttribution::OnePerChunk => "one-per-chunk",
            ChunkAttribution::ServerPrefixes => "server-prefixes",
            ChunkAttribution::ServerPrefixesGrouped => "server-prefixes-grouped",
            ChunkAttribution::O200kProportional => "o200k-proportional",
        }
    }
    pub fn parse(s: &str) -> Option<ChunkAttribution> {
        ChunkAttribution::ALL.into_iter().find(|k| k.as_str() == s)
    }
    /// Whether the per-chunk counts are exact (not an estimate).
    pub fn is_exact(&self) -> bool {
        !matches!(
            self,
            ChunkAttribution::O200kProportional | ChunkAttribution::ServerPrefixesGrouped
        )
    }
}

/// Boundaries a server tokenizer counts prefixes at, per record, at most: a stream of more
/// chunks is counted at this many evenly spaced boundaries (`ServerPrefixesGrouped`). Bounds the
/// cost to this many tokenize calls per distinct answer (each at most one answer long).
pub const MAX_PREFIX_COUNTS: usize = 32;

/// Output tokens of one stored record counted by the candidate's tokenize endpoint. Stored in its
/// own append-only table keyed by the record (records are never updated) and applied when
/// records are read (`RequestRecord::apply_server_count`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTokenCount {
    pub record_id: i64,
    /// Tokens of all generated text (reasoning + answer), like `RequestRecord::output_tokens`.
    pub output_tokens: u32,
    pub reasoning_tokens: Option<u32>,
    /// What counted: the endpoint's kind and URL.
    pub tokenizer: String,
    /// Tokens per chunk (summing to `output_tokens`) and how they were found; None when the
    /// record has no chunks to attribute to.
    pub chunks: Option<(Vec<u32>, ChunkAttribution)>,
}

/// A stored record whose output is still to be counted by the server's tokenizer.
#[derive(Debug, Clone, PartialEq)]
pub struct UncountedRecord {
    pub record_id: i64,
    pub output: String,
    pub reasoning: Option<String>,
    /// Token-bearing chunks of the stream (0: not streamed).
    pub chunks: usize,
    /// Bytes of (reasoning, answer) text of each chunk, when stored (see
    /// `RequestRecord::chunk_text`): the boundaries prefixes are counted at.
    pub chunk_text: Vec<(u32, u32)>,
    /// The chunks' stored counts (o200k-apportioned): the weights within a group.
    pub chunk_weights: Vec<u32>,
}

/// Per-chunk counts of a server total without its prefix counts: one a chunk when the total
/// equals the number of chunks, one chunk's all when there is one, else proportional to
/// `weights` (the chunks' o200k counts).
pub fn attribute_total(total: u32, weights: &[u32]) -> (Vec<u32>, ChunkAttribution) {
    match weights.len() {
        1 => (vec![total], ChunkAttribution::SingleChunk),
        n if n as u64 == u64::from(total) => (vec![1; n], ChunkAttribution::OnePerChunk),
        _ => (apportion(total, weights), ChunkAttribution::O200kProportional),
    }
}

/// Splits `total` into integer parts proportional to `weights` (largest remainder), summing to
/// `total` exactly.
pub fn apportion(total: u32, weights: &[u32]) -> Vec<u32> {
    let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if weights.is_empty() {
        return Vec::new();
    }
    if sum == 0 {
        let mut out = vec![0; weights.len()];
        out[0] = total;
        return out;
    }
    let mut parts: Vec<(u32, u64, usize)> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let exact = u64::from(total) * u64::from(w);
            ((exact / sum) as u32, exact % sum, i)
        })
        .collect();
    let given: u64 = parts.iter().map(|p| u64::from(p.0)).sum();
    let mut left = u64::from(total) - given;
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| parts[b].1.cmp(&parts[a].1).then(a.cmp(&b)));
    for i in order {
        if left == 0 {
            break;
        }
        parts[i].0 += 1;
        left -= 1;
    }
    parts.into_iter().map(|p| p.0).collect()
}

/// Why a request attempt failed. Stored, exported and shown as its string form (`as_str`): one
/// vocabulary in the database, every page and every JSON (`records[].error_class` and
/// `levels[].errors` alike). Exports written before the names were unified spelled the HTTP
/// classes `http_client_error` / `http_server_error`; those are still read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    ConnectRefused,
    Dns,
    Tls,
    ConnectTimeout,
    FirstTokenTimeout,
    /// A stream that sent tokens and then none for longer than the stall timeout.
    StallTimeout,
    TotalTimeout,
    RateLimited,
    #[serde(rename = "http_4xx", alias = "http_client_error")]
    HttpClientError,
    #[serde(rename = "http_5xx", alias = "http_server_error")]
    HttpServerError,
    StreamCut,
    MalformedChunk,
    NonJsonResponse,
    EmptyOutput,
    ContextLengthExceeded,
    Other,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 16] = [
        ErrorClass::ConnectRefused,
        ErrorClass::Dns,
        ErrorClass::Tls,
        ErrorClass::ConnectTimeout,
        ErrorClass::FirstTokenTimeout,
        ErrorClass::StallTimeout,
        ErrorClass::TotalTimeout,
        ErrorClass::RateLimited,
        ErrorClass::HttpClientError,
        ErrorClass::HttpServerError,
        ErrorClass::StreamCut,
        ErrorClass::MalformedChunk,
        ErrorClass::NonJsonResponse,
        ErrorClass::EmptyOutput,
        ErrorClass::ContextLengthExceeded,
        ErrorClass::Other,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorClass::ConnectRefused => "connect_refused",
            ErrorClass::Dns => "dns",
            ErrorClass::Tls => "tls",
            ErrorClass::ConnectTimeout => "connect_timeout",
            ErrorClass::FirstTokenTimeout => "first_token_timeout",
            ErrorClass::StallTimeout => "stall_timeout",
            ErrorClass::TotalTimeout => "total_timeout",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::HttpClientError => "http_4xx",
            ErrorClass::HttpServerError => "http_5xx",
            ErrorClass::StreamCut => "stream_cut",
            ErrorClass::MalformedChunk => "malformed_chunk",
            ErrorClass::NonJsonResponse => "non_json_response",
            ErrorClass::EmptyOutput => "empty_output",
            ErrorClass::ContextLengthExceeded => "context_length_exceeded",
            ErrorClass::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether a failed attempt is worth repeating: a too-long prompt or a refused request
    /// (4xx) fails the same way again.
    pub fn is_retryable(self) -> bool {
        !matches!(self, ErrorClass::ContextLengthExceeded | ErrorClass::HttpClientError)
    }
}

/// One request attempt, exactly as measured. Append-only: never updated once stored.
///
/// All `*_us` offsets are microseconds after `sent_at_us` (the instant just before the request
/// was written, after bakeoff's own queue). `None` means the event never happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub run_id: i64,
    pub candidate_id: i64,
    /// Shared by the records read at once (one copy a case, not one a repetition).
    pub case_id: std::sync::Arc<str>,
    pub phase: Phase,
    pub repetition: u32,
    /// 0 for the first try, 1.. for retries.
    pub attempt: u32,
    /// Load condition the request was sent under.
    pub concurrency: u32,
    /// Excluded from every figure: warm-ups, staged-rollout requests and judge calls.
    pub is_warmup: bool,
    /// Wall clock at send, microseconds since the Unix epoch.
    pub sent_at_us: i64,
    /// Time spent waiting in bakeoff's own concurrency queue before send.
    pub client_queue_us: i64,
    pub connect_us: EventOffset,
    pub connection_reused: Option<bool>,
    pub headers_us: EventOffset,
    pub first_chunk_us: EventOffset,
    pub first_reasoning_us: EventOffset,
    pub first_content_us: EventOffset,
    pub last_token_us: EventOffset,
    pub end_us: EventOffset,
    /// (offset µs, tokens in that chunk where known, else 1) for every token-bearing chunk.
    pub chunks: Chunks,
    pub http_status: Option<u16>,
    /// Shared by records read at once, as their grades' grader names are.
    pub finish_reason: Option<std::sync::Arc<str>>,
    pub input_tokens: Option<u32>,
    pub output_tokens: Option<u32>,
    pub output_tokens_source: Option<TokenSource>,
    pub reasoning_tokens: Option<u32>,
    /// Output counted with the canonical offline tokenizer (o200k), computed after the stream.
    pub canonical_tokens: Option<u32>,
    pub output_chars: u32,
    /// The answer, reasoning, error detail and chunk boundaries (read through
    /// [`RequestRecord::output`] and its siblings), stored and exported as fields of the record.
    #[serde(flatten)]
    pub texts: Texts,
    pub error_class: Option<ErrorClass>,
    pub grades: Vec<Grade>,
    /// How `output_tokens` were attributed to `chunks` (None: no chunks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_attribution: Option<ChunkAttribution>,
    /// Which clock timed the record's events (None: measured before bakeoff recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<TimingClock>,
    /// What the response's rate-limit headers said (`domain::rate_limit`), boxed: most records
    /// have none, and a big run holds many records at once. Kept when the texts are cut: the
    /// run page summarises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Box<crate::rate_limit::RateLimit>>,
    /// A conversation turn's place in its conversation (`domain::conversation`), boxed: most
    /// records are single requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<Box<crate::conversation::TurnFacts>>,
    /// Prompt tokens the server reported reading from (or writing to) its prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<crate::conversation::PromptCache>,
    /// Set only on a record read for summaries ([`RequestRecord::cut_for_summaries`]): its texts
    /// were cut and this keeps what the summaries read of them whole. Never stored or exported.
    #[serde(skip)]
    pub cut: Option<CutTexts>,
}

/// A record's texts as measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordTexts {
    pub output: String,
    pub reasoning: Option<String>,
    /// Short, secret-free description (status + body excerpt, or the transport error).
    pub error_detail: Option<String>,
    /// Bytes of (reasoning, answer) text each entry of `chunks` carried, kept only when a server
    /// tokenizer may recount the record (no usage, several chunks): its chunk boundaries.
    #[serde(default, skip_serializing_if = "ChunkText::is_empty")]
    pub chunk_text: ChunkText,
    /// Reasoning found at the start of the content (`domain::reasoning`): it was moved from the
    /// answer (`output`) to `reasoning`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_reasoning: Option<crate::reasoning::Recognised>,
    /// A tool case's calls as sent (`domain::tool_calls`), kept raw so the record is re-gradable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_turn: Option<crate::tool_calls::ToolTurn>,
}

impl RecordTexts {
    fn is_empty(&self) -> bool {
        self.output.is_empty()
            && self.reasoning.is_none()
            && self.error_detail.is_none()
            && self.chunk_text.is_empty()
            && self.content_reasoning.is_none()
            && self.tool_turn.is_none()
    }
}

/// A record's texts, boxed, and nothing when there are none (a record cut for summaries, a
/// failure without detail): a candidate's records held at once by a big run's end step cost
/// 8 bytes each for them, not 96.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Texts(Option<Box<RecordTexts>>);

static NO_TEXTS: std::sync::LazyLock<RecordTexts> = std::sync::LazyLock::new(RecordTexts::default);

impl Texts {
    pub fn get(&self) -> &RecordTexts {
        self.0.as_deref().unwrap_or(&NO_TEXTS)
    }

    pub fn get_mut(&mut self) -> &mut RecordTexts {
        self.0.get_or_insert_default()
    }
}

impl From<RecordTexts> for Texts {
    fn from(texts: RecordTexts) -> Self {
        Texts((!texts.is_empty()).then(|| Box::new(texts)))
    }
}

impl Serialize for Texts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Texts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RecordTexts::deserialize(d).map(Texts::from)
    }
}

/// When an event of a request happened, microseconds after its send, if it did: an
/// `Option<i64>` in 8 bytes instead of 16 (`i64::MIN`, never an offset, stands for none).
/// A million-request run's end step holds each candidate's records at once, seven of these
/// apiece; stored, exported and sent as an `Option<i64>`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EventOffset(i64);

impl EventOffset {
    const NONE: i64 = i64::MIN;

    pub const fn get(self) -> Option<i64> {
        if self.0 == Self::NONE { None } else { Some(self.0) }
    }
}

impl From<Option<i64>> for EventOffset {
    /// An offset of `i64::MIN` µs (292,000 years before its send) reads as no event.
    fn from(at: Option<i64>) -> Self {
        EventOffset(at.unwrap_or(Self::NONE))
    }
}

impl From<EventOffset> for Option<i64> {
    fn from(at: EventOffset) -> Self {
        at.get()
    }
}

impl std::fmt::Debug for EventOffset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for EventOffset {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de> Deserialize<'de> for EventOffset {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<i64>::deserialize(d).map(EventOffset::from)
    }
}

/// What the summaries read of a record's texts once they are cut: whether two answers are the
/// same (repeat consistency), and how many characters the reasoning had (characters generated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutTexts {
    /// Of the whole answer, trimmed. Non-zero so that an `Option<CutTexts>` costs the record
    /// 16 bytes, not 24.
    pub output_fingerprint: std::num::NonZeroU64,
    pub reasoning_chars: u32,
}

/// A fingerprint of an answer: equal for equal texts within one process (never stored, so the
/// hasher's keys need not be stable across releases); 64 bits make a false match among one
/// case's repetitions a chance of about n²/2⁶⁵.
fn answer_fingerprint(text: &str) -> std::num::NonZeroU64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    std::num::NonZeroU64::new(hasher.finish() | 1).expect("an odd number is never zero")
}

/// Records in the order they were sent, ties (one microsecond, a batch sent at once) broken by
/// their key, so every figure summed over them adds in one order whatever map gathered them.
pub fn send_order(a: &RequestRecord, b: &RequestRecord) -> std::cmp::Ordering {
    fn key(r: &RequestRecord) -> (i64, i64, &str, &str, u32, u32, u32) {
        (
            r.sent_at_us,
            r.candidate_id,
            &r.case_id,
            r.phase.as_str(),
            r.repetition,
            r.concurrency,
            r.attempt,
        )
    }
    key(a).cmp(&key(b))
}

/// The last attempt of each request (`request` names the request an attempt is of): its highest
/// attempt, the first given of equal ones; in send order. Found by sorting, not gathered in a
/// map: a million-request run's map held ~60 MB beside its records, the sort a pointer each.
pub fn last_attempts<'a, K: Ord>(
    attempts: impl IntoIterator<Item = &'a RequestRecord>,
    request: impl Fn(&'a RequestRecord) -> K,
) -> Vec<&'a RequestRecord> {
    let mut last: Vec<&RequestRecord> = attempts.into_iter().collect();
    // Stable: the attempts of one request stay in the order given.
    last.sort_by_key(|r| request(r));
    last.dedup_by(|r, kept| {
        let same = request(r) == request(kept);
        if same && r.attempt > kept.attempt {
            *kept = *r;
        }
        same
    });
    last.sort_by(|a, b| send_order(a, b));
    last
}

/// Test fixtures, for the unit tests of every crate and the integration tests (a fixture behind a
/// cargo feature would build this crate twice, once for tests).
/// The one test fixture of a record, so a new field is added here and nowhere else in the tests.
impl RequestRecord {
    /// Test fixture: a finished, ungraded quality request of run 1, candidate 1, case `case_id`
    /// (first try, concurrency 1, HTTP 200 "stop", no timings, tokens or output). Tests set what
    /// they check with struct update syntax (`RequestRecord { ttft.., ..test_quality("a") }`) and
    /// the setters below.
    #[doc(hidden)]
    pub fn test_quality(case_id: &str) -> Self {
        RequestRecord {
            run_id: 1,
            candidate_id: 1,
            case_id: case_id.into(),
            phase: Phase::Quality,
            repetition: 0,
            attempt: 0,
            concurrency: 1,
            is_warmup: false,
            sent_at_us: 0,
            client_queue_us: 0,
            connect_us: None.into(),
            connection_reused: None,
            headers_us: None.into(),
            first_chunk_us: None.into(),
            first_reasoning_us: None.into(),
            first_content_us: None.into(),
            last_token_us: None.into(),
            end_us: None.into(),
            chunks: Default::default(),
            http_status: Some(200),
            finish_reason: Some("stop".into()),
            input_tokens: None,
            output_tokens: None,
            output_tokens_source: None,
            reasoning_tokens: None,
            canonical_tokens: None,
            output_chars: 0,
            texts: Texts::default(),
            error_class: None,
            grades: vec![],
            chunk_attribution: None,
            clock: None,
            rate_limit: None,
            turn: None,
            prompt_cache: None,
            cut: None,
        }
    }

    /// Test fixture: the same record answering `output` (its texts; `output_chars` unchanged).
    #[doc(hidden)]
    pub fn with_output(mut self, output: &str) -> Self {
        self.texts.get_mut().output = output.into();
        self
    }

    /// Test fixture: the same record graded by one required `exact` grade.
    #[doc(hidden)]
    pub fn graded_exact(mut self, passed: bool) -> Self {
        self.grades = vec![Grade::test_exact(passed)];
        self
    }
}

impl RequestRecord {
    pub fn succeeded(&self) -> bool {
        self.error_class.is_none()
    }

    /// A conversation turn sent in its level's ramp, before every user had started
    /// (`conversation::TurnFacts::ramp`): graded like any turn, left out of every speed figure.
    pub fn in_ramp(&self) -> bool {
        self.turn.as_deref().is_some_and(|t| t.ramp)
    }
    /// Replaces the output-token count with the server tokenizer's (never a `usage` count, which
    /// is the server's own), and the per-chunk counts with the ones it found (`chunks`: one per
    /// chunk, summing to the total). Without them (a count stored before per-chunk counts were),
    /// one token a chunk when the total equals the number of chunks, else the stored counts
    /// rescaled to the new total (`O200kProportional`).
    pub fn apply_server_count(
        &mut self,
        output_tokens: u32,
        reasoning_tokens: Option<u32>,
        chunks: Option<(&[u32], ChunkAttribution)>,
    ) {
        if self.output_tokens_source == Some(TokenSource::Usage) {
            return;
        }
        self.output_tokens = Some(output_tokens);
        self.output_tokens_source = Some(TokenSource::ServerTokenizer);
        if reasoning_tokens.is_some() {
            self.reasoning_tokens = reasoning_tokens;
        }
        if self.chunks.is_empty() {
            return;
        }
        let counted = chunks.filter(|(counts, _)| {
            counts.len() == self.chunks.len()
                && counts.iter().map(|&k| u64::from(k)).sum::<u64>() == u64::from(output_tokens)
        });
        let (counts, attribution) = match counted {
            Some((counts, how)) => (counts.to_vec(), how),
            None => {
                let weights: Vec<u32> = self.chunks.iter().map(|c| c.1).collect();
                attribute_total(output_tokens, &weights)
            }
        };
        self.chunks = self.chunks.with_counts(counts);
        self.chunk_attribution = Some(attribution);
    }

    /// The answer ("" once cut).
    pub fn output(&self) -> &str {
        &self.texts.get().output
    }

    /// The reasoning, if any came (none once cut).
    pub fn reasoning(&self) -> Option<&str> {
        self.texts.get().reasoning.as_deref()
    }

    /// Why it failed, if it did and said (none once cut).
    pub fn error_detail(&self) -> Option<&str> {
        self.texts.get().error_detail.as_deref()
    }

    pub fn chunk_text(&self) -> &ChunkText {
        &self.texts.get().chunk_text
    }

    /// The reasoning recognised at the start of the content, if any (none once cut).
    pub fn content_reasoning(&self) -> Option<crate::reasoning::Recognised> {
        self.texts.get().content_reasoning
    }

    /// A tool case's calls, if the request carried tools (none once cut).
    pub fn tool_turn(&self) -> Option<&crate::tool_calls::ToolTurn> {
        self.texts.get().tool_turn.as_ref()
    }

    /// The text graders read: the answer, or with `with_reasoning` (an eval set's
    /// `grade_reasoning`) the reasoning, a blank line, then the answer.
    pub fn graded_text(&self, with_reasoning: bool) -> std::borrow::Cow<'_, str> {
        match self.reasoning().filter(|r| with_reasoning && !r.is_empty()) {
            Some(r) => format!("{r}\n\n{}", self.output()).into(),
            None => self.output().into(),
        }
    }

    /// Drops the texts no summary reads, for a read that holds many records at once (the
    /// end-of-run step, views of an unfinished run): the answer, the reasoning, the chunks' text
    /// bytes, the error's detail and the reasons of passed grades (a page shows failing grades'
    /// reasons only), and [`CutTexts`] keeps what the summaries read of them. A real answer is a
    /// few hundred to a few thousand bytes and a reasoning model's thinking tens of thousands:
    /// held whole, a million records hold gigabytes; held as the run page's excerpts, still a
    /// quarter of what a record holds. The few answers and errors a page shows it reads by their
    /// records' ids. Cutting twice changes nothing.
    pub fn cut_for_summaries(&mut self) {
        if self.cut.is_some() {
            return;
        }
        self.cut = Some(CutTexts {
            output_fingerprint: answer_fingerprint(self.output().trim()),
            reasoning_chars: self.reasoning_chars(),
        });
        // A tool case keeps its turn's mode, cut flag and timing (not its calls): the per-level
        // tool-turn timing reads them (`tool_calls::levels`).
        let tool_turn = self.tool_turn().map(|t| crate::tool_calls::ToolTurn {
            mode: t.mode,
            calls: Vec::new(),
            cut_mid_call: t.cut_mid_call,
            first_argument_us: t.first_argument_us,
            complete_us: t.complete_us,
        });
        self.texts = RecordTexts {
            tool_turn,
            ..RecordTexts::default()
        }
        .into();
        for grade in self.grades.iter_mut().filter(|g| g.passed) {
            grade.reason = String::new();
        }
    }

    /// Whether two records' answers are the same text, trimmed (whole or cut).
    pub fn same_answer(&self, other: &RequestRecord) -> bool {
        match (self.cut, other.cut) {
            (None, None) => self.output().trim() == other.output().trim(),
            (a, b) => {
                let fingerprint = |r: &RequestRecord, cut: Option<CutTexts>| {
                    cut.map_or_else(|| answer_fingerprint(r.output().trim()), |c| c.output_fingerprint)
                };
                fingerprint(self, a) == fingerprint(other, b)
            }
        }
    }

    /// Characters of reasoning generated (0 without reasoning), whole or cut.
    pub fn reasoning_chars(&self) -> u32 {
        match self.cut {
            Some(cut) => cut.reasoning_chars,
            None => self
                .reasoning()
                .map_or(0, |t| u32::try_from(t.chars().count()).unwrap_or(u32::MAX)),
        }
    }

    /// The last the request was heard of, µs after its send: its end, else its last token, else
    /// its headers (0 when none came): how long it held its slot.
    pub fn last_heard_us(&self) -> i64 {
        self.end_us
            .get()
            .or(self.last_token_us.get())
            .or(self.headers_us.get())
            .unwrap_or(0)
    }

    /// Time to first token (reasoning or content).
    pub fn ttft_us(&self) -> Option<i64> {
        match (self.first_reasoning_us.get(), self.first_content_us.get()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: i64,
    pub name: String,
    pub evalset_version_id: i64,
    pub candidate_ids: Vec<i64>,
    pub config: RunConfig,
    pub status: RunStatus,
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
}

/// What is needed to create a run.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub name: String,
    pub evalset_version_id: i64,
    pub candidate_ids: Vec<i64>,
    pub config: RunConfig,
}

/// Where a candidate of a run was stopped while the others went on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopStage {
    /// Before its first request: its client could not be built (e.g. a missing key variable).
    Setup,
    /// A stage of the staged rollout failed after its retries.
    StagedStart,
    /// Its measured requests passed the run's error budget.
    ErrorBudget,
}

impl StopStage {
    pub const ALL: [StopStage; 3] = [StopStage::Setup, StopStage::StagedStart, StopStage::ErrorBudget];

    pub fn as_str(&self) -> &'static str {
        match self {
            StopStage::Setup => "setup",
            StopStage::StagedStart => "staged_start",
            StopStage::ErrorBudget => "error_budget",
        }
    }

    pub fn parse(s: &str) -> Option<StopStage> {
        StopStage::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// How the outcome starts: "stopped at staged start".
    pub fn describe(&self) -> &'static str {
        match self {
            StopStage::Setup => "not started",
            StopStage::StagedStart => "stopped at staged start",
            StopStage::ErrorBudget => "stopped by its error budget",
        }
    }
}

/// A candidate stopped within a run, with its reason (append-only: one per run and candidate).
/// Its verdict is NO-GO whatever its partial figures say, and a resumed run does not send to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateStop {
    pub run_id: i64,
    pub candidate_id: i64,
    pub stage: StopStage,
    /// What failed, secret-free: "stage 1/3 (the shortest case), case c1: HTTP 404: …".
    pub reason: String,
    pub at: Timestamp,
}

impl CandidateStop {
    /// The candidate's outcome as pages and exports state it: "stopped at staged start: …".
    pub fn outcome(&self) -> String {
        format!("{}: {}", self.stage.describe(), self.reason)
    }
}

/// A line in a run's event log (phase changes, warnings, errors).
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvent {
    pub at: Timestamp,
    pub level: String,
    pub message: String,
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_figure_from_both_clocks_says_so_and_how_many_each_timed() {
        use TimingClock::{KernelStamp, UserSpace};
        let of = |clocks: &[Option<TimingClock>]| {
            let mut c = ClockCounts::default();
            clocks.iter().for_each(|&k| c.add(k));
            c
        };
        assert_eq!(of(&[Some(KernelStamp), Some(KernelStamp)]).label(), "kernel stamp");
        assert_eq!(of(&[Some(UserSpace)]).label(), "user space");
        let mixed = of(&[Some(KernelStamp), Some(UserSpace), Some(KernelStamp)]);
        assert!(mixed.mixed() && mixed.single().is_none());
        assert_eq!(mixed.label(), "mixed: 2 kernel stamp, 1 user space");
        assert_eq!(of(&[Some(UserSpace), None]).label(), "user space (1 not recorded)");
        assert_eq!(of(&[None]).label(), "not recorded");
        assert_eq!(of(&[]).label(), "not recorded");
        for clock in TimingClock::ALL {
            assert_eq!(TimingClock::parse(clock.as_str()), Some(clock));
            let json = serde_json::to_string(&clock).unwrap();
            assert_eq!(json, format!("\"{}\"", clock.as_str()), "stored and exported alike");
        }
    }
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_scrape_interval_defaults_to_a_second_and_is_bounded_with_an_error_naming_the_field() {
        let draft = |v: &str| RunDraft {
            scrape_interval_secs: v.into(),
            ..RunDraft::from_config(&RunConfig::default())
        };
        let blank = draft("").validate().unwrap();
        assert_eq!((blank.scrape_interval_secs, blank.scrape_interval()), (None, 1.0));
        let half = draft("0.5").validate().unwrap();
        assert_eq!(half.scrape_interval(), 0.5);
        assert_eq!(RunDraft::from_config(&half).scrape_interval_secs, "0.5");
        // Older runs, stored without it, read as the default.
        let json = serde_json::to_value(RunConfig::default()).unwrap();
        assert!(json.get("scrape_interval_secs").is_none());
        for (bad, says) in [
            ("0.05", "must be between 0.1 and 60, got 0.05"),
            ("61", "must be between 0.1 and 60, got 61"),
            ("often", "must be a number from 0.1 to 60"),
        ] {
            let e = draft(bad).validate().unwrap_err();
            let message = e.get("scrape_interval_secs").unwrap_or_else(|| panic!("{bad}: {e:?}"));
            assert!(message.contains(says), "{bad}: {message}");
        }
    }

    #[test]
    fn the_last_attempt_of_each_request_is_its_highest_the_first_given_of_equals_in_send_order() {
        let attempt = |case: &str, attempt: u32, sent_at_us: i64, status: u16| RequestRecord {
            attempt,
            sent_at_us,
            http_status: Some(status),
            ..RequestRecord::test_quality(case)
        };
        let given = [
            attempt("b", 0, 10, 500),
            attempt("a", 1, 40, 200),
            attempt("a", 0, 20, 500),
            attempt("b", 2, 50, 200),
            attempt("b", 2, 60, 201),
            attempt("b", 1, 30, 500),
            attempt("c", 0, 5, 200),
        ];
        let last = last_attempts(&given, |r| r.case_id.as_ref());
        let picked: Vec<(&str, u32, Option<u16>)> = last
            .iter()
            .map(|r| (r.case_id.as_ref(), r.attempt, r.http_status))
            .collect();
        assert_eq!(picked, [("c", 0, Some(200)), ("a", 1, Some(200)), ("b", 2, Some(200))]);
    }

    #[test]
    fn event_offsets_are_stored_and_exported_as_optional_integers_in_eight_bytes() {
        assert_eq!(std::mem::size_of::<EventOffset>(), 8);
        let record = RequestRecord {
            headers_us: Some(0).into(),
            first_chunk_us: Some(-3).into(),
            end_us: Some(i64::MAX).into(),
            ..RequestRecord::test_quality("a")
        };
        let json = serde_json::to_value(&record).unwrap();
        let fields = ["connect_us", "headers_us", "first_chunk_us", "end_us"].map(|k| json[k].clone());
        assert_eq!(fields, [Value::Null, 0.into(), (-3).into(), i64::MAX.into()]);
        // A field missing from an older export reads as no event, as an `Option` did.
        let mut older = json.as_object().unwrap().clone();
        older.remove("end_us");
        let read: RequestRecord = serde_json::from_value(Value::Object(older)).unwrap();
        assert_eq!((read.end_us.get(), read.first_chunk_us.get()), (None, Some(-3)));
        assert_eq!(format!("{:?}", read.headers_us), "Some(0)");
    }

    #[test]
    fn texts_are_exported_as_the_records_own_fields_and_none_are_held_when_all_are_empty() {
        assert_eq!(std::mem::size_of::<Texts>(), 8);
        let answered = RequestRecord {
            texts: RecordTexts {
                output: "yes".into(),
                error_detail: Some("slow".into()),
                ..Default::default()
            }
            .into(),
            ..RequestRecord::test_quality("a")
        };
        let json = serde_json::to_value(&answered).unwrap();
        let fields = ["output", "reasoning", "error_detail"].map(|k| json[k].clone());
        assert_eq!(fields, ["yes".into(), Value::Null, "slow".into()]);
        assert!(
            json.get("texts").is_none() && json.get("chunk_text").is_none(),
            "{json}"
        );
        let read: RequestRecord = serde_json::from_value(json).unwrap();
        assert_eq!(read, answered);
        // Read back with no text at all, a record holds none, as one built so does.
        let silent = RequestRecord {
            texts: RecordTexts::default().into(),
            ..answered.clone()
        };
        assert_eq!(silent.texts, Texts::default());
        let read: RequestRecord = serde_json::from_value(serde_json::to_value(&silent).unwrap()).unwrap();
        assert_eq!((&read.texts, read.output()), (&Texts::default(), ""));
    }

    #[test]
    fn a_record_cut_for_summaries_keeps_what_summaries_read() {
        let answer = format!("é\u{7}{}", "tail ".repeat(500));
        let failed = |reason: &str| Grade {
            grader: "exact".into(),
            score: 0.0,
            passed: false,
            reason: reason.into(),
            detail: None,
            weight: 1.0,
            required: true,
        };
        let whole = RequestRecord {
            texts: RecordTexts {
                output: format!(" {answer} "),
                reasoning: Some("thinking… ".repeat(1_000)),
                error_detail: Some("HTTP 500: <html>upstream overloaded</html>".into()),
                chunk_text: ChunkText::from(&[(3, 10), (0, 12)][..]),
                content_reasoning: None,
                tool_turn: None,
            }
            .into(),
            output_chars: 2 + answer.chars().count() as u32,
            grades: vec![
                Grade {
                    passed: true,
                    score: 1.0,
                    ..failed("matched the expected answer")
                },
                failed("expected positive"),
            ],
            ..RequestRecord::test_quality("a")
        };
        let mut cut = whole.clone();
        cut.cut_for_summaries();
        assert_eq!((cut.output(), cut.output_chars), ("", whole.output_chars));
        assert_eq!(
            (cut.reasoning(), cut.error_detail(), cut.chunk_text().is_empty()),
            (None, None, true)
        );
        assert_eq!(
            cut.texts,
            Texts::default(),
            "a cut record holds no texts, not even empty ones"
        );
        assert_eq!(cut.reasoning_chars(), whole.reasoning_chars());
        assert_eq!(whole.reasoning_chars(), 10_000);
        // A passed grade's reason is never shown from a summary; a failed one's is.
        let reasons: Vec<&str> = cut.grades.iter().map(|g| g.reason.as_str()).collect();
        assert_eq!(reasons, ["", "expected positive"]);
        assert_eq!(
            cut.grades.iter().map(|g| (g.passed, g.score)).collect::<Vec<_>>(),
            [(true, 1.0), (false, 0.0)]
        );
        assert!(cut.same_answer(&whole) && whole.same_answer(&cut) && cut.same_answer(&cut));
        let other = RequestRecord {
            texts: RecordTexts {
                output: format!("{answer}!"),
                ..Default::default()
            }
            .into(),
            ..whole.clone()
        };
        assert!(!cut.same_answer(&other) && !other.same_answer(&cut));
        // Cutting twice changes nothing; an empty answer stays unlike a non-empty one.
        let mut again = cut.clone();
        again.cut_for_summaries();
        assert_eq!(again, cut);
        let mut empty = RequestRecord::test_quality("b");
        empty.cut_for_summaries();
        assert!(!empty.same_answer(&cut) && empty.same_answer(&RequestRecord::test_quality("c")));
    }

    #[test]
    fn run_form_rejects_negative_and_zero_concurrency() {
        for bad in ["-1", "0", "abc", ""] {
            let d = RunDraft {
                concurrency: bad.into(),
                repetitions: "1".into(),
                ..Default::default()
            };
            assert!(d.validate().unwrap_err().get("concurrency").is_some(), "{bad}");
        }
        let d = RunDraft {
            concurrency: "8".into(),
            repetitions: "3".into(),
            stream: Some("on".into()),
            ..Default::default()
        };
        let c = d.validate().unwrap();
        assert_eq!((c.concurrency, c.repetitions, c.stream), (8, 3, true));
    }

    #[test]
    fn the_error_budget_judges_a_full_sliding_window() {
        let budget = ErrorBudget {
            max_failed_percent: 50.0,
            window: 4,
        };
        let mut w = BudgetWindow::new(budget);
        // Three failures in a row are not judged before the window is full…
        assert_eq!(w.record(true), None);
        assert_eq!(w.record(true), None);
        assert_eq!(w.record(true), None);
        // …then 3 of 4 is more than half.
        assert_eq!(w.record(false), Some(BudgetExceeded { failed: 3, window: 4 }));
        // Exactly half is within budget ("more than").
        let mut w = BudgetWindow::new(budget);
        for failed in [true, false, true, false, true, false] {
            assert_eq!(w.record(failed), None);
        }
        // The window slides: a long good stretch, then an endpoint that dies, is caught within
        // one window.
        let mut w = BudgetWindow::new(budget);
        for _ in 0..1000 {
            assert_eq!(w.record(false), None);
        }
        assert_eq!(w.record(true), None);
        assert_eq!(w.record(true), None);
        assert_eq!(w.record(true), Some(BudgetExceeded { failed: 3, window: 4 }));
    }

    #[test]
    fn a_budget_of_100_percent_is_off_and_the_default_is_described() {
        let off = ErrorBudget {
            max_failed_percent: 100.0,
            window: 3,
        };
        let mut w = BudgetWindow::new(off);
        assert!((0..10).all(|_| w.record(true).is_none()));
        assert_eq!(off.describe(), "off");
        assert_eq!(
            ErrorBudget::default().describe(),
            "more than 50 % of the last 20 requests"
        );
        assert!(!ErrorBudget::default().is_exceeded(10, 20));
        assert!(ErrorBudget::default().is_exceeded(11, 20));
        assert!(!ErrorBudget::default().is_exceeded(19, 19), "a window not yet full");
    }

    #[test]
    fn the_run_form_reads_the_error_budget() {
        let d = RunDraft {
            concurrency: "2".into(),
            repetitions: "1".into(),
            error_budget_percent: "10".into(),
            error_budget_window: "50".into(),
            ..Default::default()
        };
        let c = d.validate().unwrap();
        assert_eq!(
            c.error_budget,
            ErrorBudget {
                max_failed_percent: 10.0,
                window: 50
            }
        );
        let blank = RunDraft {
            concurrency: "2".into(),
            repetitions: "1".into(),
            ..Default::default()
        };
        assert_eq!(blank.validate().unwrap().error_budget, ErrorBudget::default());
        let bad = RunDraft {
            error_budget_percent: "120".into(),
            error_budget_window: "0".into(),
            ..blank
        };
        let e = bad.validate().unwrap_err();
        assert!(e.get("error_budget_percent").is_some() && e.get("error_budget_window").is_some());
    }

    #[test]
    fn configs_stored_before_load_shapes_still_parse() {
        let old = r#"{"concurrency":4,"repetitions":1,"warmup_requests":2,"max_tokens":null,"temperature":0.2,"timeout_secs":60,"retries":1,"stream":true,"case_limit":null}"#;
        let c: RunConfig = serde_json::from_str(old).unwrap();
        assert_eq!(c, RunConfig::default());
        let json = serde_json::to_string(&RunConfig {
            load: LoadShape::Rate {
                per_second: 2.5,
                poisson: true,
            },
            ..RunConfig::default()
        })
        .unwrap();
        assert!(
            json.contains(r#""load":{"shape":"rate","per_second":2.5,"poisson":true}"#),
            "{json}"
        );
    }

    #[test]
    fn load_levels_and_repetition_numbers() {
        let sweep = RunConfig {
            load: LoadShape::Sweep {
                max_concurrency: 24,
                ttft_factor: 2.0,
                min_gain: 0.05,
            },
            ..RunConfig::default()
        };
        let levels: Vec<String> = sweep.loads().iter().map(|l| l.label()).collect();
        assert_eq!(levels, ["c=1", "c=2", "c=4", "c=8", "c=16", "c=24"]);
        assert_eq!(sweep.pool_size(), 24);
        assert_eq!(sweep.measured_phase(), Phase::Throughput);
        assert_eq!(RunConfig::default().loads(), vec![Load::Concurrency { concurrency: 4 }]);
        assert_eq!(RunConfig::default().measured_phase(), Phase::Quality);
        let stored = join_repetition(3, 2, 17);
        assert_eq!(split_repetition(stored), (3, 2, 17));
        assert_eq!(
            split_repetition(5),
            (0, 5, 0),
            "plain repetition numbers are level 0, cycle 0"
        );
    }

    #[test]
    fn enums_round_trip_through_their_strings() {
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
        }
        assert_eq!(Phase::parse("quality"), Some(Phase::Quality));
        assert_eq!(RunStatus::parse("running"), Some(RunStatus::Running));
        for k in StopStage::ALL {
            assert_eq!(StopStage::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        for s in TokenSource::ALL {
            assert_eq!(TokenSource::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn apportion_sums_exactly_and_follows_weights() {
        assert_eq!(apportion(10, &[1, 1, 1, 1, 1]), vec![2, 2, 2, 2, 2]);
        assert_eq!(apportion(7, &[1, 2, 4]), vec![1, 2, 4]);
        assert_eq!(apportion(5, &[1, 1, 1]).iter().sum::<u32>(), 5);
        assert_eq!(apportion(3, &[0, 0]), vec![3, 0]);
        assert!(apportion(3, &[]).is_empty());
    }

    #[test]
    fn a_server_count_replaces_estimates_but_never_usage() {
        let mut r = RequestRecord {
            first_chunk_us: Some(1).into(),
            first_content_us: Some(1).into(),
            last_token_us: Some(3).into(),
            end_us: Some(4).into(),
            chunks: vec![(1, 1), (2, 3), (3, 2)].into(),
            output_tokens: Some(6),
            output_tokens_source: Some(TokenSource::Tokenizer),
            canonical_tokens: Some(6),
            output_chars: 20,
            texts: RecordTexts {
                output: "x".into(),
                ..Default::default()
            }
            .into(),
            ..RequestRecord::test_quality("c")
        };
        let mut usage = r.clone();
        usage.output_tokens_source = Some(TokenSource::Usage);
        usage.apply_server_count(12, None, None);
        assert_eq!(usage.output_tokens, Some(6));
        let mut counted = r.clone();
        r.apply_server_count(12, None, None);
        assert_eq!(r.output_tokens, Some(12));
        assert_eq!(r.output_tokens_source, Some(TokenSource::ServerTokenizer));
        assert_eq!(r.chunks, vec![(1, 2), (2, 6), (3, 4)]);
        assert_eq!(r.chunk_attribution, Some(ChunkAttribution::O200kProportional));
        assert_eq!(r.canonical_tokens, Some(6), "the canonical o200k count stays");
        // Prefix counts found by the server's tokenizer replace the proportions.
        counted.apply_server_count(12, None, Some((&[1, 9, 2], ChunkAttribution::ServerPrefixes)));
        assert_eq!(counted.chunks, vec![(1, 1), (2, 9), (3, 2)]);
        assert_eq!(counted.chunk_attribution, Some(ChunkAttribution::ServerPrefixes));
        // A total equal to the number of chunks is one a chunk, whatever o200k said.
        let mut one_each = counted.clone();
        one_each.output_tokens_source = Some(TokenSource::Tokenizer);
        one_each.apply_server_count(3, None, None);
        assert_eq!(one_each.chunks, vec![(1, 1), (2, 1), (3, 1)]);
        assert_eq!(one_each.chunk_attribution, Some(ChunkAttribution::OnePerChunk));
        for a in ChunkAttribution::ALL {
            assert_eq!(ChunkAttribution::parse(a.as_str()), Some(a));
            assert_eq!(serde_json::to_value(a).unwrap(), serde_json::json!(a.as_str()));
        }
    }

    #[test]
    fn error_classes_have_one_name_everywhere() {
        for class in ErrorClass::ALL {
            let json = serde_json::to_value(class).unwrap();
            assert_eq!(json, serde_json::json!(class.as_str()), "{class:?}");
            assert_eq!(serde_json::from_value::<ErrorClass>(json).unwrap(), class);
            assert_eq!(ErrorClass::parse(class.as_str()), Some(class));
        }
        // Exports written before the names were unified still import.
        let old: ErrorClass = serde_json::from_str("\"http_server_error\"").unwrap();
        assert_eq!(old, ErrorClass::HttpServerError);
    }
}
