//! What a run will cost before it starts: requests, tokens, time and money, per candidate and in
//! total. Pure arithmetic over the run configuration, the eval set's prompts and the candidates'
//! stated prices; every assumption it makes is listed in [`Estimate::assumptions`] so the page
//! can show them beside the figures. Time rests on the candidate's speeds as measured by its
//! latest finished run where there is one ([`MeasuredSpeed`]), else on its claimed speed, else
//! on an assumed one; each candidate's row says which ([`CandidateEstimate::speed`]).
use super::candidate::Pricing;
use super::cost::token_cost;
use super::load::{Load, LoadShape};
use super::run::RunConfig;

/// Time to first token assumed for every request when nothing better is known.
pub const ASSUMED_TTFT_S: f64 = 0.5;
/// Per-stream decode speed assumed when the candidate states no claimed figure.
pub const ASSUMED_DECODE_TOK_S: f64 = 50.0;
/// max_tokens assumed when neither the run, the eval set nor the candidate sets one.
pub const ASSUMED_MAX_TOKENS: u32 = 512;

/// One candidate as the estimate sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateInput {
    pub name: String,
    pub pricing: Pricing,
    /// The effective max_tokens for this candidate's requests (run, else eval set, else
    /// candidate); None falls back to [`ASSUMED_MAX_TOKENS`].
    pub max_tokens: Option<u32>,
    /// The candidate's claimed per-stream speed, if it states one.
    pub claimed_tok_s: Option<f64>,
    /// Its speeds as its latest finished run measured them, if it has one.
    pub measured: Option<MeasuredSpeed>,
}

/// A candidate's speeds as one finished run measured them (its headline figures: the p50s at the
/// run's load level).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredSpeed {
    pub run_id: i64,
    /// Decode tok/s per stream, p50.
    pub decode_tok_s: Option<f64>,
    /// TTFT p50, in seconds.
    pub ttft_s: Option<f64>,
}

impl CandidateInput {
    /// (time to first token in s, per-stream decode tok/s, where they come from in words): the
    /// measured figures where the latest run has them, else the claim, else the assumption.
    pub fn speeds(&self) -> (f64, f64, String) {
        let positive = |v: Option<f64>| v.filter(|v| v.is_finite() && *v > 0.0);
        let measured = self.measured.as_ref();
        let m_decode = measured.and_then(|m| positive(m.decode_tok_s));
        let m_ttft = measured.and_then(|m| positive(m.ttft_s));
        let claimed = positive(self.claimed_tok_s);
        let tok_s = m_decode.or(claimed).unwrap_or(ASSUMED_DECODE_TOK_S);
        let ttft = m_ttft.unwrap_or(ASSUMED_TTFT_S);
        let sig = crate::format::significant_trimmed;
        let words = match measured.filter(|_| m_decode.is_some() || m_ttft.is_some()) {
            Some(m) => {
                let decode = match (m_decode, claimed) {
                    (Some(d), _) => format!("decode {} tok/s/stream", sig(d)),
                    (None, Some(c)) => format!("decode {} tok/s claimed (not measured)", sig(c)),
                    (None, None) => format!("decode {ASSUMED_DECODE_TOK_S} tok/s assumed (not measured)"),
                };
                let first = match m_ttft {
                    Some(t) => format!("TTFT {} s", sig(t)),
                    None => format!("TTFT {ASSUMED_TTFT_S} s assumed (not measured)"),
                };
                format!("time from run #{}'s measured speed: {decode}, {first} (p50s)", m.run_id)
            }
            None => match claimed {
                Some(c) => format!(
                    "time from the claimed {} tok/s and an assumed {ASSUMED_TTFT_S} s TTFT (no measured speed yet)",
                    sig(c)
                ),
                None => format!(
                    "time from an assumed {ASSUMED_DECODE_TOK_S} tok/s and {ASSUMED_TTFT_S} s TTFT (no measured speed, no claim)"
                ),
            },
        };
        (ttft, tok_s, words)
    }
}

/// Everything an estimate needs.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateInput<'a> {
    pub config: &'a RunConfig,
    /// Approximate prompt tokens of every case of the eval set, in order (see [`approx_tokens`]).
    pub prompt_tokens: &'a [u32],
    pub candidates: &'a [CandidateInput],
}

#[derive(Debug, Clone, PartialEq)]
pub struct CandidateEstimate {
    pub name: String,
    /// Measured requests (every case × repetition × load level), warm-ups and rollout extra
    /// requests included.
    pub requests: u64,
    /// Extra attempts if every request needed all its retries (the worst case).
    pub max_retry_attempts: u64,
    pub input_tokens: u64,
    /// If every answer runs to max_tokens (an upper bound).
    pub max_output_tokens: u64,
    pub seconds: f64,
    /// None when the candidate states no prices.
    pub max_cost_usd: Option<f64>,
    /// Where the time's speeds come from: "time from run #12's measured speed: …", the claim or
    /// the assumption.
    pub speed: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub candidates: Vec<CandidateEstimate>,
    pub requests: u64,
    pub max_retry_attempts: u64,
    pub input_tokens: u64,
    pub max_output_tokens: u64,
    /// Candidates run one after another, so their times add up.
    pub seconds: f64,
    /// Sum over the candidates that state prices.
    pub max_cost_usd: Option<f64>,
    /// Names of candidates without prices (their cost is not in the total).
    pub unpriced: Vec<String>,
    /// Each assumption behind the figures, in words.
    pub assumptions: Vec<String>,
}

/// Requests the staged rollout sends before the full run: the shortest case, the longest case,
/// then four at once (`engine::run::rollout`). They are warm-ups: excluded from every figure.
pub const ROLLOUT_REQUESTS: u64 = 6;

fn rollout_requests(config: &RunConfig, cases: u64) -> u64 {
    if config.staged_rollout && cases > 0 {
        ROLLOUT_REQUESTS
    } else {
        0
    }
}

/// Estimates a run; see the module comment.
pub fn estimate(input: &EstimateInput<'_>) -> Estimate {
    let c = input.config;
    let case_count = c.case_count(input.prompt_tokens.len());
    let prompts = &input.prompt_tokens[..case_count];
    let cases = case_count as u64;
    let prompt_sum: u64 = prompts.iter().map(|&t| u64::from(t)).sum();
    let mean_prompt = if cases == 0 {
        0.0
    } else {
        prompt_sum as f64 / cases as f64
    };
    // Requests per level and repetition: every case once, or the stated count cycling through them.
    let per_level = match c.requests_per_level {
        Some(n) if cases > 0 => u64::from(n),
        _ => cases,
    };
    let repetitions = u64::from(c.repetitions.max(1));

    let mut out = Vec::with_capacity(input.candidates.len());
    for cand in input.candidates {
        let max_tokens = u64::from(cand.max_tokens.unwrap_or(ASSUMED_MAX_TOKENS));
        let (ttft_s, tok_s, speed) = cand.speeds();
        let request_s = ttft_s + max_tokens as f64 / tok_s;
        // Requests per second at a level (closed loop: c streams at once, each as fast as alone;
        // open loop: the offered rate).
        let rate_at = |load: &Load| match load {
            Load::Concurrency { concurrency } => f64::from((*concurrency).max(1)) / request_s,
            Load::Rate { per_second, .. } => per_second.max(1e-6),
            // Not estimated here (the workload is not at hand): see the loop below.
            Load::Replay { .. } => 1.0,
        };
        // A capacity search: at most `max_probes` levels, costed at the first probe's load.
        let loads = match c.load.search_settings() {
            Some(s) => vec![c.loads()[0]; s.max_probes as usize],
            None => c.loads(),
        };
        let mut requests = 0u64;
        let mut seconds = 0.0;
        for load in &loads {
            // A replay level sends the workload's requests, not the eval set's cases: the
            // estimate covers the eval-set level only.
            if matches!(load, Load::Replay { .. }) {
                continue;
            }
            let rate = rate_at(load);
            for _ in 0..repetitions {
                let mut n = per_level;
                let mut t = n as f64 / rate;
                if let Some(limit) = c.duration_secs {
                    let limit = f64::from(limit);
                    if t > limit {
                        t = limit;
                        n = (limit * rate).ceil() as u64;
                    }
                }
                requests += n;
                seconds += t;
            }
        }
        let extra = u64::from(c.warmup_requests) + rollout_requests(c, cases);
        // Warm-ups and rollout requests go at the first level's pace.
        let first_rate = loads.first().map(rate_at).unwrap_or(1.0 / request_s);
        seconds += extra as f64 / first_rate;
        requests += extra;
        // Requests cycle through the cases, so each carries the mean prompt.
        let input_tokens = (requests as f64 * mean_prompt).round() as u64;
        let max_output_tokens = requests * max_tokens;
        out.push(CandidateEstimate {
            name: cand.name.clone(),
            requests,
            max_retry_attempts: requests * u64::from(c.retries),
            input_tokens,
            max_output_tokens,
            seconds,
            max_cost_usd: token_cost(&cand.pricing, input_tokens, max_output_tokens),
            speed,
        });
    }

    let unpriced: Vec<String> = out
        .iter()
        .filter(|e| e.max_cost_usd.is_none())
        .map(|e| e.name.clone())
        .collect();
    let priced: Vec<f64> = out.iter().filter_map(|e| e.max_cost_usd).collect();
    let assumptions = assumptions(c);
    Estimate {
        requests: out.iter().map(|e| e.requests).sum(),
        max_retry_attempts: out.iter().map(|e| e.max_retry_attempts).sum(),
        input_tokens: out.iter().map(|e| e.input_tokens).sum(),
        max_output_tokens: out.iter().map(|e| e.max_output_tokens).sum(),
        seconds: out.iter().map(|e| e.seconds).sum(),
        max_cost_usd: (!priced.is_empty()).then(|| priced.iter().sum()),
        unpriced,
        assumptions,
        candidates: out,
    }
}

/// What the estimate assumes, in the words the run form shows, for the run's configuration.
fn assumptions(c: &RunConfig) -> Vec<String> {
    let mut assumptions = vec![
        format!(
            "Every answer runs to max_tokens (the candidate's effective max_tokens; {ASSUMED_MAX_TOKENS} when none is set), so tokens and cost are upper bounds. Time is not: it rests on the speeds below, and claimed speeds are often several times what a server delivers."
        ),
        format!(
            "Each request waits the candidate's TTFT, then decodes at its per-stream tok/s: both as measured by its latest finished run (the p50s at that run's load) where it has one, else its claimed tok/s after {ASSUMED_TTFT_S} s, else {ASSUMED_DECODE_TOK_S} tok/s after {ASSUMED_TTFT_S} s. Each row says which."
        ),
        "At concurrency c, c requests run at once, each as fast as alone (real servers slow down as load grows: sweeps take longer).".to_string(),
        "Prompt tokens are approximated from the text: about 4 characters per token, one token per CJK character; the candidate's tokenizer will differ.".to_string(),
        "Candidates run one after another, so their times add up.".to_string(),
    ];
    if c.staged_rollout {
        assumptions.push(
            "The staged rollout adds 6 requests per candidate (shortest case, longest case, then 4 at once) before the full run; like warm-ups they are excluded from every figure."
                .to_string(),
        );
    }
    if c.retries > 0 {
        assumptions.push(format!(
            "Retries are not in the totals: if every request failed once, up to {} more attempts would be sent.",
            c.retries
        ));
    }
    if let Some(d) = c.duration_secs {
        assumptions.push(format!("Each level's repetition stops after {d} s."));
    }
    if let Some(s) = c.load.search_settings() {
        assumptions.push(format!(
            "A capacity search: at most {} probe levels per candidate, each costed here at the first probe's load \
             (later probes are higher or lower; the search usually stops sooner).",
            s.max_probes
        ));
    }
    if let LoadShape::Rate { per_second, poisson } = c.load {
        assumptions.push(if poisson {
            format!(
                "Open loop at {per_second} req/s, Poisson arrivals (random gaps averaging {}): requests are sent \
                 on schedule whatever the server does, so bursts queue.",
                gap_text(per_second)
            )
        } else {
            format!(
                "Open loop at {per_second} req/s, constant arrivals (one every {}): requests are sent on schedule \
                 whatever the server does.",
                gap_text(per_second)
            )
        });
    }
    assumptions
}

/// The mean gap between requests at `per_second`, e.g. "400 ms" or "2.5 s".
fn gap_text(per_second: f64) -> String {
    let ms = 1000.0 / per_second.max(1e-6);
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// Approximate token count of `text`: one per CJK (or other wide-script) character, plus about
/// one per four other characters. Good to ±30 % for English and Chinese prose; only an estimate.
pub fn approx_tokens(text: &str) -> u32 {
    let mut wide = 0u32;
    let mut other = 0u32;
    for ch in text.chars() {
        if is_wide(ch) {
            wide += 1;
        } else {
            other += 1;
        }
    }
    wide + other.div_ceil(4)
}

fn is_wide(ch: char) -> bool {
    matches!(ch as u32,
        0x1100..=0x11FF | 0x2E80..=0x9FFF | 0xA960..=0xA97F | 0xAC00..=0xD7FF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x3FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(name: &str, max_tokens: Option<u32>, prices: Option<(f64, f64)>, tok_s: Option<f64>) -> CandidateInput {
        CandidateInput {
            name: name.into(),
            pricing: Pricing {
                input_per_mtok: prices.map(|p| p.0),
                output_per_mtok: prices.map(|p| p.1),
                ..Default::default()
            },
            max_tokens,
            claimed_tok_s: tok_s,
            measured: None,
        }
    }

    fn plain(concurrency: u32, repetitions: u32) -> RunConfig {
        RunConfig {
            concurrency,
            repetitions,
            warmup_requests: 0,
            retries: 0,
            staged_rollout: false,
            ..RunConfig::default()
        }
    }

    #[test]
    fn requests_tokens_time_and_cost_follow_from_the_conditions() {
        let config = plain(2, 3);
        let prompts = [100, 300];
        // 0.5 s to first token + 100 tokens at 50 tok/s = 2.5 s a request.
        let candidates = [cand("a", Some(100), Some((1.0, 2.0)), Some(50.0))];
        let e = estimate(&EstimateInput {
            config: &config,
            prompt_tokens: &prompts,
            candidates: &candidates,
        });
        assert_eq!(e.requests, 6);
        assert_eq!(e.input_tokens, 1200);
        assert_eq!(e.max_output_tokens, 600);
        // 6 requests, 2 at a time, 2.5 s each.
        assert!((e.seconds - 7.5).abs() < 1e-9, "{}", e.seconds);
        let cost = e.max_cost_usd.unwrap();
        assert!((cost - (1200.0 * 1.0 + 600.0 * 2.0) / 1e6).abs() < 1e-12);
        assert!(e.unpriced.is_empty());
    }

    #[test]
    fn warmups_rollout_case_limit_and_several_candidates() {
        let config = RunConfig {
            warmup_requests: 2,
            case_limit: Some(3),
            retries: 1,
            ..plain(1, 1)
        };
        let prompts = [10; 10];
        let candidates = [
            cand("priced", Some(10), Some((1.0, 1.0)), None),
            cand("free", None, None, None),
        ];
        let e = estimate(&EstimateInput {
            config: &config,
            prompt_tokens: &prompts,
            candidates: &candidates,
        });
        // 3 cases + 2 warm-ups each (no rollout: it is off).
        assert_eq!(e.candidates[0].requests, 5);
        assert_eq!(e.requests, 10);
        assert_eq!(e.max_retry_attempts, 10);
        assert_eq!(e.candidates[1].max_output_tokens, 5 * u64::from(ASSUMED_MAX_TOKENS));
        assert_eq!(e.unpriced, vec!["free".to_string()]);
        assert!(e.max_cost_usd.is_some(), "the priced candidate still has a cost");
        let with_rollout = RunConfig {
            staged_rollout: true,
            ..config
        };
        let r = estimate(&EstimateInput {
            config: &with_rollout,
            prompt_tokens: &prompts,
            candidates: &candidates[..1],
        });
        assert_eq!(r.requests, 5 + 6, "shortest, longest, four at once");
        assert!(r.assumptions.iter().any(|a| a.contains("staged rollout")));
    }

    #[test]
    fn sweeps_count_every_level_and_durations_cap_soaks() {
        let sweep = crate::presets::Preset::ConcurrencySweep.config();
        let prompts = [50; 20];
        let candidates = [cand("a", Some(100), None, Some(100.0))];
        let e = estimate(&EstimateInput {
            config: &sweep,
            prompt_tokens: &prompts,
            candidates: &candidates,
        });
        // 6 levels × 3 repetitions × 20 cases, + 2 warm-ups + 6 rollout requests.
        assert_eq!(e.requests, 6 * 3 * 20 + 2 + 6);
        let soak = crate::presets::Preset::Soak.config();
        let s = estimate(&EstimateInput {
            config: &soak,
            prompt_tokens: &prompts,
            candidates: &candidates,
        });
        // 30 minutes at 4 streams of 1.5 s requests: 4800 requests, plus warm-ups and rollout.
        assert!((s.seconds - 1800.0) < 10.0 && s.seconds >= 1800.0, "{}", s.seconds);
        assert_eq!(s.requests, 4800 + 2 + 6);
        assert!(s.assumptions.iter().any(|a| a.contains("1800 s")));
    }

    #[test]
    fn empty_sets_and_rates_do_not_divide_by_zero() {
        let config = RunConfig {
            load: LoadShape::Rate {
                per_second: 2.0,
                poisson: true,
            },
            ..plain(1, 1)
        };
        let candidates = [cand("a", Some(10), None, None)];
        let e = estimate(&EstimateInput {
            config: &config,
            prompt_tokens: &[],
            candidates: &candidates,
        });
        assert_eq!((e.requests, e.input_tokens), (0, 0));
        assert!(e.seconds.is_finite());
        let e = estimate(&EstimateInput {
            config: &config,
            prompt_tokens: &[10; 8],
            candidates: &candidates,
        });
        assert!((e.seconds - 4.0).abs() < 1e-9, "8 requests at 2/s");
    }

    #[test]
    fn time_comes_from_the_latest_runs_measured_speed_where_there_is_one() {
        let config = plain(1, 1);
        let prompts = [10; 4];
        let claimed = cand("a", Some(100), None, Some(1000.0));
        let measured = CandidateInput {
            measured: Some(MeasuredSpeed {
                run_id: 12,
                decode_tok_s: Some(20.0),
                ttft_s: Some(1.0),
            }),
            ..claimed.clone()
        };
        let by = |c: &CandidateInput| {
            estimate(&EstimateInput {
                config: &config,
                prompt_tokens: &prompts,
                candidates: std::slice::from_ref(c),
            })
            .candidates
            .remove(0)
        };
        // Claimed: 4 requests × (0.5 s + 100 tokens at 1000 tok/s).
        let e = by(&claimed);
        assert!((e.seconds - 4.0 * 0.6).abs() < 1e-9, "{}", e.seconds);
        assert!(e.speed.contains("claimed 1000 tok/s"), "{}", e.speed);
        // Measured: 4 × (1 s + 100 tokens at 20 tok/s), whatever the claim says.
        let e = by(&measured);
        assert!((e.seconds - 4.0 * 6.0).abs() < 1e-9, "{}", e.seconds);
        assert!(e.speed.starts_with("time from run #12's measured speed"), "{}", e.speed);
        assert!(
            e.speed.contains("decode 20 tok/s/stream") && e.speed.contains("TTFT 1 s"),
            "{}",
            e.speed
        );
        // A run that measured no decode (no streaming): its TTFT, the claim's decode.
        let partial = CandidateInput {
            measured: Some(MeasuredSpeed {
                run_id: 3,
                decode_tok_s: None,
                ttft_s: Some(2.0),
            }),
            ..claimed.clone()
        };
        let e = by(&partial);
        assert!((e.seconds - 4.0 * 2.1).abs() < 1e-9, "{}", e.seconds);
        assert!(
            e.speed.contains("run #3") && e.speed.contains("claimed (not measured)"),
            "{}",
            e.speed
        );
        // A run with neither figure is as good as none.
        let empty = CandidateInput {
            measured: Some(MeasuredSpeed {
                run_id: 4,
                decode_tok_s: None,
                ttft_s: Some(f64::NAN),
            }),
            claimed_tok_s: None,
            ..claimed
        };
        let e = by(&empty);
        assert!(e.speed.contains("assumed 50 tok/s"), "{}", e.speed);
        assert!((e.seconds - 4.0 * (0.5 + 2.0)).abs() < 1e-9, "{}", e.seconds);
    }

    #[test]
    fn approximate_tokens() {
        assert_eq!(approx_tokens(""), 0);
        assert_eq!(approx_tokens("abcd"), 1);
        assert_eq!(approx_tokens("abcde"), 2);
        assert_eq!(approx_tokens("提取金额"), 4);
        assert_eq!(approx_tokens("金额 = 42"), 2 + 2);
    }
}
