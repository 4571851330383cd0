//! The run-settings file: `bakeoff_settings = 1`, an optional preset to start from and the run
//! form's fields to override. What is not written keeps the preset's value (or the run form's
//! default without a preset), so a file states only what a team cares about.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{FileError, FileProblem, Located, Step, check_version, dotted, parse_toml};
use crate::domain::capacity::LoadAxis;
use crate::domain::load::LoadShape;
use crate::domain::presets::{LoadDraft, Preset};
use crate::domain::run::{RunConfig, RunDraft};
use crate::domain::validation::FieldErrors;

/// The format version this code reads.
pub const VERSION: u32 = 1;

/// How a run is executed: the run form as a file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "bakeoff run settings file",
    description = "How `bakeoff run start --settings FILE` (and POST /api/v1/runs) executes a run, in TOML \
                   (JSON for the API). Start from a preset and override fields; anything left out keeps the \
                   preset's value, or the run form's default without a preset."
)]
pub struct SettingsFile {
    /// Format version; 1.
    pub bakeoff_settings: u32,
    /// The run's name; omitted: named after the eval set and the candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The preset to start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["quick-check", "full-evaluation", "concurrency-sweep", "prompt-length-sweep", "soak"]))]
    pub preset: Option<String>,
    /// Requests in flight at once per candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<u32>,
    /// Workers each candidate's load is split over at once (one load level; see docs/workers.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub clients: Option<u32>,
    /// How many times every case is sent (medians and spread need 3 or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub repetitions: Option<u32>,
    /// Requests sent first and excluded from every figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub warmup_requests: Option<u32>,
    /// Overrides the eval set's and the candidates' max_tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// Whole-request timeout, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_secs: Option<u32>,
    /// Send → first token of a stream, seconds, at most `timeout_secs`; a stream without a
    /// token by then fails `first_token_timeout`. Omitted: 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub first_token_timeout_secs: Option<u32>,
    /// Longest silence between two tokens of a started stream, seconds, at most
    /// `timeout_secs`; a stream silent for longer fails `stall_timeout`. Omitted: 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub stall_timeout_secs: Option<u32>,
    /// Seconds between two scrapes of a candidate's telemetry source (its server's `/metrics`,
    /// its GPU exporter) during measured load; each level's start and end are scraped besides.
    /// Omitted: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 60.0))]
    pub scrape_interval_secs: Option<f64>,
    /// Conversation cases: each user's think time between a reply and its next turn, as
    /// `fixed 500`, `uniform 200-800` or `exponential 1000` (milliseconds, seeded). Omitted: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<String>,
    /// Retries after a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 10))]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// How tool cases are sent (docs/tool-cases.md): `native`, the provider's tool API (tools,
    /// tool_calls, tool_use blocks), or `prompt`, the tools described in the system prompt and the
    /// calls read from the answer's text, or `both`: each candidate natively and, right after it
    /// at the same load, in prompt mode as a candidate of the run of its own ("NAME (prompt
    /// mode)"), each with its own figures and verdict. Omitted: native. Providers without a
    /// native tool API (legacy completions, Responses) always use prompt mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["native", "prompt", "both"]))]
    pub tool_mode: Option<String>,
    /// The cost of structured output: every case with a `response_format` is also sent without
    /// it (id `<id>~unconstrained`, right after it, at the same load), so TTFT and decode rate
    /// with and without the constraint are measured in one run. Omitted: false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconstrained_twins: Option<bool>,
    /// Only the first N cases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub case_limit: Option<u32>,
    /// Stop sending to a candidate when more than this percent of its last `error_budget_window`
    /// requests failed (100: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub error_budget_percent: Option<f64>,
    /// Requests the error budget looks back over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub error_budget_window: Option<u32>,
    /// One case → the longest → a few at once → all, stopping early if a stage fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_rollout: Option<bool>,
    /// Stop each level once its SLO attainment is decided against the target (docs/capacity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_when_decided: Option<bool>,
    /// Go on with a sweep's higher levels after a level past saturation (omitted: false, they
    /// are skipped; docs/capacity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_past_saturation: Option<bool>,
    /// Run the eval set's llm-judge graders after the measured requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<bool>,
    /// The candidate (by name) that judges every judge grader; omitted: the judges the graders name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_candidate: Option<String>,
    /// How load is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadEntry>,
    /// The objectives each request is judged against (docs/capacity.md): SLO attainment and
    /// goodput per level, and what a capacity search (`load.shape = "capacity"`) looks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloEntry>,
}

/// The SLO block: per-request limits (any of them) and the share of requests that must meet
/// every one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SloEntry {
    /// Send → first token (reasoning or content), milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3_600_000.0))]
    pub ttft_ms: Option<f64>,
    /// Send → first answer (content) token, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3_600_000.0))]
    pub ttfa_ms: Option<f64>,
    /// Time per output token after the first (ITL averaged over the stream), milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3_600_000.0))]
    pub tpot_ms: Option<f64>,
    /// Send → end of stream, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3_600_000.0))]
    pub e2e_ms: Option<f64>,
    /// Percent of requests that must meet every limit set (95: 95 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 100.0))]
    pub target_percent: Option<f64>,
}

/// The load shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["fixed", "levels", "sweep", "rate", "capacity", "replay"]))]
    pub shape: Option<String>,
    /// Concurrencies for `levels`, e.g. [1, 4, 16].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Vec<u32>>,
    /// Highest concurrency for `sweep` (1, 2, 4 … max).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_max: Option<u32>,
    /// Requests per second for `rate` (open loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["poisson", "constant"]))]
    pub arrivals: Option<String>,
    /// Requests per load level and repetition, cycling through the cases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_level: Option<u32>,
    /// Stop a level's repetition after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<u32>,
    /// `capacity` (find capacity @ SLO, a search per candidate; it needs `[slo]` with a limit and
    /// `target_percent`): what it varies, `rate` (from `rate`; omitted means this) or
    /// `concurrency` (from `concurrency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["rate", "concurrency"]))]
    pub capacity_axis: Option<String>,
    /// `capacity`: stop once the bracket is within this percent of the capacity. Omitted: 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.5, max = 50.0))]
    pub capacity_width: Option<f64>,
    /// `capacity`: most probe levels per candidate. Omitted: 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub capacity_max_probes: Option<u32>,
    /// `capacity`: highest load a probe may use (req/s or concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_max_load: Option<f64>,
    /// `replay` (docs/workloads.md, "Replay as a run level"): the workload version replayed (its
    /// id, as listed on the workloads page and by `bakeoff workload list`). Level 0 sends the eval
    /// set's cases (graded) at `concurrency`; level 1 replays the workload, identically for every
    /// candidate, and is the level rules without `@c=N` judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub workload_version: Option<i64>,
    /// `replay`: the speed-up, above 0 and at most 1000 (1: as recorded, 2: twice as fast).
    /// Omitted: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_speed: Option<f64>,
}

/// A settings file as the run form would hold it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSettings {
    pub name: String,
    pub draft: RunDraft,
    pub load: LoadDraft,
    pub judge: bool,
    /// A candidate name, or "".
    pub judge_candidate: String,
}

impl RunSettings {
    /// The run form's defaults (no settings file).
    pub fn defaults() -> RunSettings {
        let config = RunConfig::default();
        RunSettings {
            draft: RunDraft::from_config(&config),
            load: LoadDraft::from_config(&config),
            ..RunSettings::default()
        }
    }
}

/// Where a run-form field is in the file.
pub fn field_path(field: &str) -> Vec<Step> {
    let k = |s: &str| Step::Key(s.to_string());
    match field {
        "load_shape" => vec![k("load"), k("shape")],
        "levels"
        | "sweep_max"
        | "rate"
        | "arrivals"
        | "requests_per_level"
        | "duration_secs"
        | "capacity_axis"
        | "capacity_width"
        | "capacity_max_probes"
        | "capacity_max_load"
        | "workload_version"
        | "replay_speed" => {
            vec![k("load"), k(field)]
        }
        "slo_target" => vec![k("slo"), k("target_percent")],
        slo if slo.starts_with("slo_") => vec![k("slo"), k(&slo["slo_".len()..])],
        other => vec![k(other)],
    }
}

impl SettingsFile {
    /// The form this file fills: the preset's (or the default) configuration with the file's
    /// fields written over it. Err names the preset when it is unknown.
    pub fn to_settings(&self) -> Result<RunSettings, FieldErrors> {
        let base = match self.preset.as_deref().map(str::trim) {
            None | Some("") => RunConfig::default(),
            Some(slug) => match Preset::parse(slug) {
                Some(p) => p.config(),
                None => {
                    let mut e = FieldErrors::default();
                    e.add(
                        "preset",
                        format!(
                            "{slug:?} is not a preset; choose one of: {}",
                            Preset::ALL.map(|p| p.slug()).join(", ")
                        ),
                    );
                    return Err(e);
                }
            },
        };
        let mut draft = RunDraft::from_config(&base);
        let mut load = LoadDraft::from_config(&base);
        let set = |slot: &mut String, v: Option<String>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        let int = |v: Option<u32>| v.map(|n| n.to_string());
        set(&mut draft.concurrency, int(self.concurrency));
        set(&mut draft.repetitions, int(self.repetitions));
        set(&mut draft.clients, int(self.clients));
        set(&mut draft.warmup_requests, int(self.warmup_requests));
        set(&mut draft.max_tokens, int(self.max_tokens));
        set(&mut draft.temperature, self.temperature.map(|t| t.to_string()));
        set(&mut draft.timeout_secs, int(self.timeout_secs));
        set(&mut draft.first_token_timeout_secs, int(self.first_token_timeout_secs));
        set(&mut draft.stall_timeout_secs, int(self.stall_timeout_secs));
        set(
            &mut draft.scrape_interval_secs,
            self.scrape_interval_secs.map(|s| s.to_string()),
        );
        set(&mut draft.think_time, self.think_time.clone());
        set(&mut draft.retries, int(self.retries));
        set(&mut draft.case_limit, int(self.case_limit));
        set(
            &mut draft.error_budget_percent,
            self.error_budget_percent.map(|p| p.to_string()),
        );
        set(&mut draft.error_budget_window, int(self.error_budget_window));
        set(&mut draft.tool_mode, self.tool_mode.clone());
        if let Some(twins) = self.unconstrained_twins {
            draft.unconstrained_twins = twins.then(|| "on".to_string());
        }
        if let Some(stream) = self.stream {
            draft.stream = stream.then(|| "on".to_string());
        }
        if let Some(staged) = self.staged_rollout {
            load.staged_rollout = staged.then(|| "on".to_string());
        }
        if let Some(stop) = self.stop_when_decided {
            load.stop_when_decided = stop.then(|| "on".to_string());
        }
        if let Some(past) = self.measure_past_saturation {
            load.measure_past_saturation = past.then(|| "on".to_string());
        }
        if let Some(l) = &self.load {
            set(&mut load.shape, l.shape.clone());
            set(
                &mut load.levels,
                l.levels
                    .as_ref()
                    .map(|v| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
            );
            set(&mut load.sweep_max, int(l.sweep_max));
            set(&mut load.rate, l.rate.map(|r| r.to_string()));
            set(&mut load.arrivals, l.arrivals.clone());
            set(&mut load.requests_per_level, int(l.requests_per_level));
            set(&mut load.duration_secs, int(l.duration_secs));
            set(&mut load.capacity_axis, l.capacity_axis.clone());
            set(&mut load.capacity_width, l.capacity_width.map(|w| w.to_string()));
            set(&mut load.capacity_max_probes, int(l.capacity_max_probes));
            set(&mut load.capacity_max_load, l.capacity_max_load.map(|m| m.to_string()));
            set(&mut load.workload_version, l.workload_version.map(|v| v.to_string()));
            set(&mut load.replay_speed, l.replay_speed.map(|v| v.to_string()));
        }
        if let Some(slo) = &self.slo {
            let ms = |v: Option<f64>| v.map(|v| v.to_string());
            set(&mut load.slo_ttft_ms, ms(slo.ttft_ms));
            set(&mut load.slo_ttfa_ms, ms(slo.ttfa_ms));
            set(&mut load.slo_tpot_ms, ms(slo.tpot_ms));
            set(&mut load.slo_e2e_ms, ms(slo.e2e_ms));
            set(&mut load.slo_target, ms(slo.target_percent));
        }
        let settings = RunSettings {
            name: self.name.clone().unwrap_or_default(),
            draft,
            load,
            judge: self.judge.unwrap_or(false),
            judge_candidate: self.judge_candidate.clone().unwrap_or_default(),
        };
        // The same check the run form makes, so a bad file fails before anything is stored.
        crate::runs::run_config(&settings.draft, &settings.load)?;
        Ok(settings)
    }
}

/// A stored run's configuration as a settings file stating every field (no preset, no name), so
/// `bakeoff run start --settings` runs the same way; `judge_candidate` names the candidate that
/// judged every judge grader, when one did. Err names each setting the file cannot state (read
/// back, it would differ), so nothing is changed silently.
pub fn from_config(config: &RunConfig, judge_candidate: Option<String>) -> Result<SettingsFile, Vec<String>> {
    let load = match &config.load {
        LoadShape::Fixed => LoadEntry {
            shape: Some("fixed".into()),
            ..LoadEntry::default()
        },
        LoadShape::Levels { levels } => LoadEntry {
            shape: Some("levels".into()),
            levels: Some(levels.clone()),
            ..LoadEntry::default()
        },
        LoadShape::Sweep { max_concurrency, .. } => LoadEntry {
            shape: Some("sweep".into()),
            sweep_max: Some(*max_concurrency),
            ..LoadEntry::default()
        },
        LoadShape::Rate { per_second, poisson } => LoadEntry {
            shape: Some("rate".into()),
            rate: Some(*per_second),
            arrivals: Some(if *poisson { "poisson" } else { "constant" }.into()),
            ..LoadEntry::default()
        },
        LoadShape::FindCapacity {
            axis,
            start,
            width,
            max_probes,
            max_load,
        } => LoadEntry {
            shape: Some("capacity".into()),
            capacity_axis: Some(
                match axis {
                    LoadAxis::Rate => "rate",
                    LoadAxis::Concurrency => "concurrency",
                }
                .into(),
            ),
            rate: (*axis == LoadAxis::Rate).then_some(*start),
            capacity_width: Some((width * 100.0 * 1e6).round() / 1e6),
            capacity_max_probes: Some(*max_probes),
            capacity_max_load: *max_load,
            ..LoadEntry::default()
        },
        LoadShape::Replay {
            workload_version,
            speed,
        } => LoadEntry {
            shape: Some("replay".into()),
            workload_version: Some(*workload_version),
            replay_speed: Some(*speed),
            ..LoadEntry::default()
        },
    };
    let slo = &config.slo;
    let slo = (slo.is_set() || slo.target_attainment.is_some()).then(|| SloEntry {
        ttft_ms: slo.ttft_ms,
        ttfa_ms: slo.ttfa_ms,
        tpot_ms: slo.tpot_ms,
        e2e_ms: slo.e2e_ms,
        target_percent: slo.target_attainment.map(|t| (t * 100.0 * 1e6).round() / 1e6),
    });
    let file = SettingsFile {
        bakeoff_settings: VERSION,
        concurrency: Some(config.concurrency),
        repetitions: Some(config.repetitions),
        clients: config.clients,
        warmup_requests: Some(config.warmup_requests),
        max_tokens: config.max_tokens,
        temperature: config.temperature,
        timeout_secs: Some(config.timeout_secs),
        first_token_timeout_secs: config.first_token_timeout_secs,
        stall_timeout_secs: config.stall_timeout_secs,
        scrape_interval_secs: config.scrape_interval_secs,
        think_time: config.think_time.map(|t| t.spec()),
        retries: Some(config.retries),
        stream: Some(config.stream),
        tool_mode: Some(config.tool_mode.as_str().to_string()),
        unconstrained_twins: Some(config.unconstrained_twins),
        case_limit: config.case_limit,
        error_budget_percent: Some(config.error_budget.max_failed_percent),
        error_budget_window: Some(config.error_budget.window),
        staged_rollout: Some(config.staged_rollout),
        stop_when_decided: config.stop_when_decided.then_some(true),
        measure_past_saturation: config.measure_past_saturation.then_some(true),
        judge: Some(config.judge.is_some()),
        judge_candidate,
        slo,
        load: Some(LoadEntry {
            requests_per_level: config.requests_per_level,
            duration_secs: config.duration_secs,
            ..load
        }),
        ..SettingsFile::default()
    };
    // Read back as `run start` reads it; every setting that comes out otherwise is named.
    let back = file
        .to_settings()
        .map_err(|e| {
            e.0.iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
        })
        .and_then(|s| crate::runs::run_config(&s.draft, &s.load).map_err(|_| vec!["the run form".to_string()]))?;
    let (Ok(serde_json::Value::Object(want)), Ok(serde_json::Value::Object(got))) =
        (serde_json::to_value(config), serde_json::to_value(&back))
    else {
        return Err(vec!["the run's configuration".to_string()]);
    };
    // The judges are resolved by name when the run is created; only whether it judges is stated.
    let lost: Vec<String> = want
        .iter()
        .filter(|(key, value)| key.as_str() != "judge" && got.get(key.as_str()) != Some(*value))
        .map(|(key, value)| format!("{key} (this run: {value}; a settings file cannot state it)"))
        .collect();
    if lost.is_empty() { Ok(file) } else { Err(lost) }
}

/// [`from_config`] written as a settings file, with a first line saying where it came from.
pub fn export(config: &RunConfig, judge_candidate: Option<String>, origin: &str) -> Result<String, Vec<String>> {
    let file = from_config(config, judge_candidate)?;
    let body = super::to_toml(&file).map_err(|e| vec![e])?;
    Ok(format!("# bakeoff run settings of {origin}.\n{body}"))
}

/// Reads and checks a settings file; every problem names its line and field.
pub fn parse(file: &str, text: &str) -> Result<RunSettings, FileError> {
    let text = text.trim_start_matches('\u{feff}');
    let parsed: SettingsFile = parse_toml(file, text)?;
    let located = Located::new(text);
    check_version(file, &located, "bakeoff_settings", parsed.bakeoff_settings, VERSION)?;
    parsed.to_settings().map_err(|errors| FileError {
        file: file.to_string(),
        problems: located.problems(&[], &errors, field_path),
    })
}

/// Field errors of a run request that belong to the settings, placed in the settings file `text`.
pub fn problems_in(text: &str, errors: &FieldErrors) -> Vec<FileProblem> {
    let located = Located::new(text);
    errors
        .0
        .iter()
        .map(|e| {
            let path = field_path(&e.field);
            FileProblem {
                line: located.line(&path),
                field: Some(dotted(&path)),
                message: e.message.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_overrides_its_preset_field_by_field() {
        let text = "bakeoff_settings = 1\npreset = \"concurrency-sweep\"\nrepetitions = 5\nstaged_rollout = false\n\n[load]\nsweep_max = 8\n";
        let s = parse("s.toml", text).unwrap();
        let mut config = s.draft.validate().unwrap();
        let mut e = FieldErrors::default();
        s.load.apply(&mut config, &mut e);
        assert!(e.is_empty());
        assert_eq!(config.repetitions, 5);
        assert!(!config.staged_rollout);
        assert!(matches!(config.load, LoadShape::Sweep { max_concurrency: 8, .. }));
        assert_eq!(config.temperature, Some(0.2), "kept from the preset");
        let plain = parse("s.toml", "bakeoff_settings = 1\n").unwrap();
        assert_eq!(plain, RunSettings::defaults());
    }

    #[test]
    fn clients_per_candidate_round_trip_and_are_range_checked() {
        let s = parse("s.toml", "bakeoff_settings = 1\nclients = 3\n").unwrap();
        let config = s.draft.validate().unwrap();
        assert_eq!((config.clients, config.clients()), (Some(3), 3));
        let text = export(&config, None, "a test").unwrap();
        assert!(text.contains("clients = 3"), "{text}");
        let one = parse("s.toml", "bakeoff_settings = 1\nclients = 1\n").unwrap();
        assert_eq!(
            one.draft.validate().unwrap().clients,
            None,
            "one client is the plain run"
        );
        let err = parse("s.toml", "bakeoff_settings = 1\nclients = 17\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("s.toml:2") && err.contains("clients"), "{err}");
    }

    #[test]
    fn the_stage_timeouts_reach_the_run_config_and_are_range_checked() {
        let s = parse(
            "s.toml",
            "bakeoff_settings = 1\ntimeout_secs = 30\nfirst_token_timeout_secs = 10\nstall_timeout_secs = 2\n",
        )
        .unwrap();
        let config = s.draft.validate().unwrap();
        assert_eq!(
            (config.first_token_timeout_secs, config.stall_timeout_secs),
            (Some(10), Some(2))
        );
        let e = parse("s.toml", "bakeoff_settings = 1\n\nstall_timeout_secs = 0\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("s.toml:3: field `stall_timeout_secs`: must be between 1 and 3600, got 0"),
            "{e}"
        );
        let e = parse(
            "s.toml",
            "bakeoff_settings = 1\ntimeout_secs = 30\nfirst_token_timeout_secs = 45\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(
                "s.toml:3: field `first_token_timeout_secs`: must be between 1 and the whole-request timeout (30 s), got 45"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_tool_mode_reaches_the_run_config_round_trips_and_is_checked() {
        let s = parse("s.toml", "bakeoff_settings = 1\ntool_mode = \"prompt\"\n").unwrap();
        let config = s.draft.validate().unwrap();
        assert_eq!(config.tool_mode, crate::domain::tool_calls::RunToolMode::Prompt);
        let text = export(&config, None, "a test").unwrap();
        assert!(text.contains("tool_mode = \"prompt\""), "{text}");
        let s = parse("s.toml", "bakeoff_settings = 1\ntool_mode = \"both\"\n").unwrap();
        assert_eq!(
            s.draft.validate().unwrap().tool_mode,
            crate::domain::tool_calls::RunToolMode::Both
        );
        // Omitted: native.
        let s = parse("s.toml", "bakeoff_settings = 1\n").unwrap();
        assert!(s.draft.validate().unwrap().tool_mode.is_native());
        let e = parse("s.toml", "bakeoff_settings = 1\n\ntool_mode = \"text\"\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("s.toml:3: field `tool_mode`: \"text\" is not a tool mode; choose native"),
            "{e}"
        );
    }

    #[test]
    fn the_scrape_interval_reaches_the_run_config_round_trips_and_is_range_checked() {
        let s = parse(
            "s.toml",
            "bakeoff_settings = 1
scrape_interval_secs = 0.25
",
        )
        .unwrap();
        let config = s.draft.validate().unwrap();
        assert_eq!(config.scrape_interval_secs, Some(0.25));
        let text = export(&config, None, "a test").unwrap();
        assert!(text.contains("scrape_interval_secs = 0.25"), "{text}");
        let e = parse(
            "s.toml",
            "bakeoff_settings = 1

scrape_interval_secs = 0
",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("s.toml:3: field `scrape_interval_secs`: must be between 0.1 and 60, got 0"),
            "{e}"
        );
    }

    #[test]
    fn bad_settings_name_line_and_field() {
        let e = parse(
            "s.toml",
            "bakeoff_settings = 1\nconcurrency = 0\n[load]\nshape = \"levels\"\nlevels = [1, 2000]\n",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("s.toml:2: field `concurrency`"), "{text}");
        let e = parse(
            "s.toml",
            "bakeoff_settings = 1\n[load]\nshape = \"levels\"\nlevels = [1, 2000]\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("s.toml:4: field `load.levels`"), "{e}");
        let e = parse("s.toml", "bakeoff_settings = 1\n\npreset = \"turbo\"\n").unwrap_err();
        assert!(e.to_string().contains("s.toml:3: field `preset`"), "{e}");
        let e = parse("s.toml", "bakeoff_settings = 1\nconcurency = 2\n").unwrap_err();
        assert!(e.to_string().contains("s.toml:2: field `concurency`"), "{e}");
    }

    #[test]
    fn a_file_is_held_to_the_run_forms_limits() {
        use crate::domain::load::MAX_CONCURRENCY;
        let over = MAX_CONCURRENCY + 1;
        let e = parse("s.toml", &format!("bakeoff_settings = 1\nconcurrency = {over}\n")).unwrap_err();
        assert!(e.to_string().contains("s.toml:2: field `concurrency`"), "{e}");
        let text = format!("bakeoff_settings = 1\n[load]\nshape = \"sweep\"\nsweep_max = {over}\n");
        let e = parse("s.toml", &text).unwrap_err();
        assert!(e.to_string().contains("s.toml:4: field `load.sweep_max`"), "{e}");
        let most = format!(
            "bakeoff_settings = 1\nconcurrency = {MAX_CONCURRENCY}\n[load]\nshape = \"sweep\"\nsweep_max = {MAX_CONCURRENCY}\n"
        );
        assert!(parse("s.toml", &most).is_ok());
    }

    #[test]
    fn a_run_config_exported_reads_back_the_same_or_names_what_it_cannot_state() {
        let sweep = Preset::parse("concurrency-sweep").unwrap().config();
        for config in [RunConfig::default(), sweep] {
            let text = export(&config, None, "run #1").unwrap();
            let s = parse("s.toml", &text).unwrap();
            let mut back = s.draft.validate().unwrap();
            s.load.apply(&mut back, &mut FieldErrors::default());
            assert_eq!(back, config, "{text}");
        }
        let unset = RunConfig {
            temperature: None,
            ..RunConfig::default()
        };
        let lost = from_config(&unset, None).unwrap_err();
        assert!(lost.len() == 1 && lost[0].starts_with("temperature"), "{lost:?}");
    }
}
