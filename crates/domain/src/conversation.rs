//! Conversations under load and their figures by turn. A run over an eval set with
//! conversation cases (`evalset::conversation`) sends each conversation turn by turn; under a
//! load of c, c **users** each work through conversations one after another, waiting a
//! **think time** (fixed, uniform or exponential, seeded) between reading a reply and sending
//! the next turn. Every turn is one record, keyed `case#turn`, carrying [`TurnFacts`]; the
//! prompt-cache tokens a server reports ride on every record ([`PromptCache`]).
use serde::{Deserialize, Serialize};

use crate::calibers::RequestFigures;
use crate::evalset::conversation::HistoryMode;
use crate::run::RequestRecord;
use crate::stats::{Interval, SplitMix64, quantile, wilson};

/// Longest think time one draw may give (an exponential's tail is cut here), ms.
pub const MAX_THINK_MS: f64 = 600_000.0;

/// The distribution of a user's think time between a reply and the next turn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ThinkTime {
    /// Always `ms`.
    Fixed { ms: f64 },
    /// Uniform in [`min_ms`, `max_ms`].
    Uniform { min_ms: f64, max_ms: f64 },
    /// Exponential with mean `mean_ms` (cut at [`MAX_THINK_MS`]).
    Exponential { mean_ms: f64 },
}

impl Default for ThinkTime {
    fn default() -> Self {
        ThinkTime::Fixed { ms: 0.0 }
    }
}

impl ThinkTime {
    /// Why these settings cannot be used, or None.
    pub fn problem(&self) -> Option<String> {
        let ok = |v: f64| v.is_finite() && (0.0..=MAX_THINK_MS).contains(&v);
        match *self {
            ThinkTime::Fixed { ms } if !ok(ms) => Some(format!("must be between 0 and {MAX_THINK_MS} ms")),
            ThinkTime::Uniform { min_ms, max_ms } if !ok(min_ms) || !ok(max_ms) || min_ms > max_ms => {
                Some(format!("needs 0 ≤ min ≤ max ≤ {MAX_THINK_MS} ms"))
            }
            ThinkTime::Exponential { mean_ms } if !ok(mean_ms) => {
                Some(format!("mean must be between 0 and {MAX_THINK_MS} ms"))
            }
            _ => None,
        }
    }

    /// The run form's text: `fixed 500`, `uniform 200-800`, `exponential 1000` (ms); blank: none.
    pub fn parse(text: &str) -> Result<Option<ThinkTime>, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        const FORMS: &str = "write `fixed 500`, `uniform 200-800` or `exponential 1000` (milliseconds)";
        let (kind, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let number = |s: &str| {
            s.trim()
                .trim_end_matches("ms")
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{s:?} is not a number of milliseconds; {FORMS}"))
        };
        let think = match kind.to_ascii_lowercase().as_str() {
            "fixed" => ThinkTime::Fixed { ms: number(rest)? },
            "uniform" => {
                let (lo, hi) = rest
                    .split_once(['-', '–'])
                    .ok_or_else(|| format!("a uniform think time needs min-max; {FORMS}"))?;
                ThinkTime::Uniform {
                    min_ms: number(lo)?,
                    max_ms: number(hi)?,
                }
            }
            "exponential" => ThinkTime::Exponential { mean_ms: number(rest)? },
            other => return Err(format!("{other:?} is not a think-time distribution; {FORMS}")),
        };
        match think.problem() {
            Some(p) => Err(format!("{}: {p}", think.label())),
            None => Ok(Some(think)),
        }
    }

    /// The form's text for these settings (what [`ThinkTime::parse`] reads back).
    pub fn spec(&self) -> String {
        let n = crate::format::shortest;
        match *self {
            ThinkTime::Fixed { ms } => format!("fixed {}", n(ms)),
            ThinkTime::Uniform { min_ms, max_ms } => format!("uniform {}-{}", n(min_ms), n(max_ms)),
            ThinkTime::Exponential { mean_ms } => format!("exponential {}", n(mean_ms)),
        }
    }

    /// The mean think time, ms.
    pub fn mean_ms(&self) -> f64 {
        match *self {
            ThinkTime::Fixed { ms } => ms,
            ThinkTime::Uniform { min_ms, max_ms } => (min_ms + max_ms) / 2.0,
            ThinkTime::Exponential { mean_ms } => mean_ms,
        }
    }

    /// One draw, ms.
    pub fn draw(&self, rng: &mut SplitMix64) -> f64 {
        match *self {
            ThinkTime::Fixed { ms } => ms,
            ThinkTime::Uniform { min_ms, max_ms } => min_ms + (max_ms - min_ms) * rng.next_f64(),
            ThinkTime::Exponential { mean_ms } => (-(1.0 - rng.next_f64()).ln() * mean_ms).min(MAX_THINK_MS),
        }
    }

    /// How it reads on a page: "exponential, mean 2 s".
    pub fn label(&self) -> String {
        let ms = |v: f64| crate::format::shortest(v);
        match *self {
            ThinkTime::Fixed { ms: v } => format!("fixed {} ms", ms(v)),
            ThinkTime::Uniform { min_ms, max_ms } => format!("uniform {}–{} ms", ms(min_ms), ms(max_ms)),
            ThinkTime::Exponential { mean_ms } => format!("exponential, mean {} ms", ms(mean_ms)),
        }
    }
}

/// A threshold rule's turn parameter (`turn_ttft_p95:5`): 1 to 64.
pub fn turn_param(p: &str) -> Option<u32> {
    p.trim()
        .parse::<u32>()
        .ok()
        .filter(|k| (1..=crate::evalset::conversation::MAX_TURNS as u32).contains(k))
}

/// The seeded generator of one conversation's think times: the same run, candidate, case,
/// repetition (level and cycle included) and phase always wait the same times, whichever user
/// sends it.
pub fn think_rng(run_id: i64, candidate_id: i64, case_index: u32, repetition: u32, phase: u32) -> SplitMix64 {
    SplitMix64::new(
        (run_id as u64).rotate_left(40)
            ^ (candidate_id as u64).rotate_left(24)
            ^ u64::from(case_index).rotate_left(56)
            ^ u64::from(repetition).rotate_left(12)
            ^ u64::from(phase)
            ^ 0x7A1C_0FFE,
    )
}

/// When user `user` of `users` starts: spread evenly over one mean conversation (`turns` turns
/// of `think` each), so the users are on different turns from the start and the load is
/// steady rather than every user opening turn 1 at once. Microseconds after the level starts.
pub fn user_start_offset_us(user: u32, users: u32, turns: usize, think: &ThinkTime) -> i64 {
    let span_ms = think.mean_ms() * turns.max(1) as f64;
    (span_ms * 1000.0 * f64::from(user) / f64::from(users.max(1))).round() as i64
}

/// How a level's measured window is chosen when users hold conversations, as the run page and
/// the "How we measure" page say it.
pub const RAMP_RULE: &str = "the level's measured window starts once every user has started (its first \
    conversation begun): turns sent before that (the ramp) are stored and graded like any turn (a reply's \
    correctness does not depend on when it was sent) but left out of the level's speed figures (TTFT, TTFA, E2E, \
    decode rate, throughput, SLO attainment, figures by turn and by context length), as warm-ups are";

/// How a user's turns are carried, as the run page says it.
pub const SESSION_RULE: &str = "each user keeps its own connection: all its turns go on one HTTP/1.1 keep-alive \
    connection of its own, as a chat client's would (a new one only when the server closes it; a candidate reached \
    through a proxy shares one pool instead)";

/// How the users' start was staggered, as the run page says it.
pub fn stagger_label(think: &ThinkTime) -> String {
    format!(
        "users start evenly spread over one mean conversation (turns × mean think time, {}), each on a different conversation, so turns are staggered from the first",
        think.label()
    )
}

/// What a turn's record knows of its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnFacts {
    /// The conversation case's id.
    pub conversation: String,
    /// 1-based.
    pub turn: u32,
    /// Turns the conversation has.
    pub turns: u32,
    /// The user (0-based) who sent it: which of the level's concurrent users.
    pub user: u32,
    pub history: HistoryMode,
    /// The conversation's last graded turn (1-based; None: no turn is graded): a conversation
    /// that stopped before it fails, and its outcome is the "last turn" accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_graded_turn: Option<u32>,
    /// The think time drawn before this turn, µs (None for the first turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_scheduled_us: Option<i64>,
    /// The time actually waited: the previous turn's end → this send, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_waited_us: Option<i64>,
    /// Sent in the level's ramp, before every user had started (`RAMP_RULE`): graded for
    /// quality like any turn, left out of the level's speed figures (latency, throughput, its
    /// measured window), as a warm-up is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ramp: bool,
}

/// Prompt tokens a server says it read from its prompt (prefix) cache, kept apart from
/// `input_tokens` (which counts the whole prompt: for Anthropic, bakeoff adds the uncached,
/// cache-read and cache-written parts). OpenAI: `usage.prompt_tokens_details.cached_tokens`;
/// Anthropic: `cache_read_input_tokens` and `cache_creation_input_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptCache {
    /// Read from the cache.
    pub read_tokens: u32,
    /// Written to the cache by this request (Anthropic only; None where not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_tokens: Option<u32>,
}

impl PromptCache {
    /// Share of the prompt read from the cache: read / whole prompt (for Anthropic the whole
    /// prompt is input + read + creation, which is what bakeoff stores as `input_tokens`).
    pub fn hit_rate(&self, input_tokens: u32) -> Option<f64> {
        (input_tokens > 0).then(|| f64::from(self.read_tokens) / f64::from(input_tokens))
    }
}

/// Percentiles of one figure over a group of turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub n: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
}

impl Spread {
    pub fn of(mut values: Vec<f64>) -> Spread {
        values.retain(|v| v.is_finite());
        if values.is_empty() {
            return Spread::default();
        }
        Spread {
            n: values.len(),
            p50: Some(quantile(&mut values, 0.5)),
            p95: Some(quantile(&mut values, 0.95)),
        }
    }
}

/// A pass rate with its Wilson interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PassRate {
    pub passed: u64,
    pub graded: u64,
    pub interval: Option<Interval>,
}

impl PassRate {
    pub fn of(passed: u64, graded: u64, confidence: f64) -> PassRate {
        PassRate {
            passed,
            graded,
            interval: wilson(passed, graded, confidence),
        }
    }

    pub fn rate(&self) -> Option<f64> {
        (self.graded > 0).then(|| self.passed as f64 / self.graded as f64)
    }
}

/// One turn index's figures for one candidate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRow {
    /// 1-based.
    pub turn: u32,
    pub requests: usize,
    pub failed: usize,
    /// Of `requests`, turns sent in the ramp (`RAMP_RULE`): graded, left out of the speed figures.
    #[serde(default)]
    pub ramp: usize,
    pub ttft_ms: Spread,
    pub ttfa_ms: Spread,
    pub e2e_ms: Spread,
    pub decode_tok_s: Spread,
    /// Prompt tokens at this turn, as the server reported them.
    pub context_tokens: Spread,
    /// Cache-read share of the prompt, over the turns whose server reported it.
    pub cache_hit_rate: Option<f64>,
    pub accuracy: PassRate,
}

/// TTFT in one context-length bin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextBin {
    /// Prompt tokens from (inclusive) … to (exclusive).
    pub from: u32,
    pub to: u32,
    pub ttft_ms: Spread,
}

/// A candidate's conversation figures: by turn, by context length, whole conversations, and
/// how exactly the think times were kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationFigures {
    pub turns: Vec<TurnRow>,
    pub by_context: Vec<ContextBin>,
    /// A conversation passes when every graded turn passed (a turn not sent or failed fails it).
    pub conversations: PassRate,
    /// Accuracy at each conversation's last graded turn.
    pub last_turn: PassRate,
    /// |waited − scheduled| think time, ms.
    pub think_error_ms: Spread,
    /// (context tokens, TTFT ms) of every successful turn past the ramp, for the chart.
    pub points: Vec<(u32, f64)>,
    /// Turns sent in the ramp (`RAMP_RULE`), left out of every speed figure here.
    #[serde(default)]
    pub ramp_turns: usize,
}

/// Context-length bin edges, tokens.
const CONTEXT_EDGES: [u32; 10] = [0, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];

/// The conversation figures of one candidate's measured turn records (last attempts; the
/// caller leaves warm-ups out). A conversation (case × repetition) passes when every turn sent
/// succeeded, no graded turn failed, and it reached its last graded turn; its "last turn"
/// outcome is that turn's (a conversation stopped before it fails there too).
pub fn figures<'a>(records: impl IntoIterator<Item = &'a RequestRecord>, confidence: f64) -> ConversationFigures {
    use std::collections::BTreeMap;
    #[derive(Default)]
    struct Seen {
        all_ok: bool,
        last_graded: Option<u32>,
        /// The last graded turn's outcome, once it was sent.
        last_outcome: Option<bool>,
    }
    let mut by_turn: BTreeMap<u32, Vec<&RequestRecord>> = BTreeMap::new();
    let mut by_conversation: BTreeMap<(String, u32), Seen> = BTreeMap::new();
    let mut think_errors = Vec::new();
    let mut points = Vec::new();
    let mut ramp_turns = 0;
    for r in records {
        let Some(t) = r.turn.as_deref() else { continue };
        by_turn.entry(t.turn).or_default().push(r);
        let passed = crate::grading::case_passed(&r.grades);
        let ok = r.succeeded() && passed != Some(false);
        let seen = by_conversation
            .entry((t.conversation.clone(), r.repetition))
            .or_insert_with(|| Seen {
                all_ok: true,
                ..Seen::default()
            });
        seen.all_ok &= ok;
        seen.last_graded = t.last_graded_turn;
        if t.last_graded_turn == Some(t.turn) {
            seen.last_outcome = Some(ok && passed.is_some());
        }
        if let (Some(s), Some(w)) = (t.think_scheduled_us, t.think_waited_us) {
            think_errors.push((w - s).abs() as f64 / 1000.0);
        }
        if r.in_ramp() {
            ramp_turns += 1;
        } else if let (Some(f), Some(ctx)) = (RequestFigures::of(r), r.input_tokens) {
            points.push((ctx, f.ttft_ms));
        }
    }
    let turns = by_turn
        .iter()
        .map(|(&turn, rs)| {
            // Speed from the turns past the ramp only; accuracy from every turn.
            let figures: Vec<RequestFigures> = rs
                .iter()
                .filter(|r| !r.in_ramp())
                .filter_map(|r| RequestFigures::of(r))
                .collect();
            let graded: Vec<bool> = rs
                .iter()
                .filter_map(|r| crate::grading::case_passed(&r.grades))
                .collect();
            let cache: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.prompt_cache.and_then(|c| c.hit_rate(r.input_tokens?)))
                .collect();
            TurnRow {
                turn,
                requests: rs.len(),
                failed: rs.iter().filter(|r| !r.succeeded()).count(),
                ramp: rs.iter().filter(|r| r.in_ramp()).count(),
                ttft_ms: Spread::of(figures.iter().map(|f| f.ttft_ms).collect()),
                ttfa_ms: Spread::of(figures.iter().filter_map(|f| f.ttfa_ms).collect()),
                e2e_ms: Spread::of(figures.iter().map(|f| f.e2e_ms).collect()),
                decode_tok_s: Spread::of(figures.iter().filter_map(|f| f.decode_tok_s).collect()),
                context_tokens: Spread::of(rs.iter().filter_map(|r| r.input_tokens.map(f64::from)).collect()),
                cache_hit_rate: (!cache.is_empty()).then(|| cache.iter().sum::<f64>() / cache.len() as f64),
                accuracy: PassRate::of(
                    graded.iter().filter(|p| **p).count() as u64,
                    graded.len() as u64,
                    confidence,
                ),
            }
        })
        .collect();
    let by_context = CONTEXT_EDGES
        .iter()
        .zip(CONTEXT_EDGES.iter().skip(1).chain([&u32::MAX]))
        .map(|(&from, &to)| ContextBin {
            from,
            to,
            ttft_ms: Spread::of(
                points
                    .iter()
                    .filter(|(c, _)| (from..to).contains(c))
                    .map(|(_, t)| *t)
                    .collect(),
            ),
        })
        .filter(|b| b.ttft_ms.n > 0)
        .collect();
    let graded: Vec<&Seen> = by_conversation.values().filter(|s| s.last_graded.is_some()).collect();
    let passed = graded
        .iter()
        .filter(|s| s.all_ok && s.last_outcome == Some(true))
        .count();
    let last_passed = graded.iter().filter(|s| s.last_outcome == Some(true)).count();
    points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    ConversationFigures {
        turns,
        by_context,
        conversations: PassRate::of(passed as u64, graded.len() as u64, confidence),
        last_turn: PassRate::of(last_passed as u64, graded.len() as u64, confidence),
        think_error_ms: Spread::of(think_errors),
        points,
        ramp_turns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grading::Grade;

    fn turn(conversation: &str, k: u32, passed: Option<bool>, ctx: u32, ttft_ms: i64) -> RequestRecord {
        let mut r = RequestRecord {
            input_tokens: Some(ctx),
            output_tokens: Some(3),
            first_chunk_us: Some(ttft_ms * 1000).into(),
            first_content_us: Some(ttft_ms * 1000).into(),
            last_token_us: Some(ttft_ms * 1000 + 2000).into(),
            end_us: Some(ttft_ms * 1000 + 2500).into(),
            turn: Some(Box::new(TurnFacts {
                conversation: conversation.into(),
                turn: k,
                turns: 3,
                user: 0,
                history: HistoryMode::Own,
                last_graded_turn: Some(2),
                think_scheduled_us: (k > 1).then_some(1000),
                think_waited_us: (k > 1).then_some(1400),
                ramp: false,
            })),
            prompt_cache: Some(PromptCache {
                read_tokens: ctx / 2,
                creation_tokens: None,
            }),
            ..RequestRecord::test_quality(&crate::evalset::conversation::turn_key(conversation, k as usize))
        };
        if let Some(p) = passed {
            r.grades = vec![Grade::test_exact(p)];
        }
        r
    }

    #[test]
    fn figures_by_turn_and_whole_conversations() {
        let rs = [
            turn("a", 1, Some(true), 20, 10),
            turn("a", 2, Some(true), 40, 12),
            turn("a", 3, None, 60, 14),
            turn("b", 1, Some(true), 20, 10),
            turn("b", 2, Some(false), 40, 12),
            turn("b", 3, None, 60, 14),
            // c never reached its graded turn 2: it fails as a conversation.
            turn("c", 1, Some(true), 20, 10),
        ];
        let f = figures(rs.iter(), 0.95);
        assert_eq!(f.turns.len(), 3);
        assert_eq!((f.turns[0].accuracy.passed, f.turns[0].accuracy.graded), (3, 3));
        assert_eq!((f.turns[1].accuracy.passed, f.turns[1].accuracy.graded), (1, 2));
        assert_eq!(f.turns[2].accuracy.graded, 0);
        assert_eq!(f.turns[1].context_tokens.p50, Some(40.0));
        assert_eq!(f.turns[1].ttft_ms.p50, Some(12.0));
        assert_eq!(f.turns[1].cache_hit_rate, Some(0.5));
        assert_eq!((f.conversations.passed, f.conversations.graded), (1, 3));
        // a passed turn 2; b failed it; c never sent it.
        assert_eq!((f.last_turn.passed, f.last_turn.graded), (1, 3));
        assert!(f.conversations.interval.is_some());
        assert_eq!(f.think_error_ms.p50, Some(0.4));
        assert_eq!(f.by_context.len(), 1, "every context below 128 tokens");
        assert_eq!(f.points.len(), 7);
    }

    #[test]
    fn think_times_are_seeded_bounded_and_labelled() {
        let e = ThinkTime::Exponential { mean_ms: 100.0 };
        let draws: Vec<f64> = {
            let mut rng = think_rng(1, 2, 0, 0, 7);
            (0..2000).map(|_| e.draw(&mut rng)).collect()
        };
        let again: Vec<f64> = {
            let mut rng = think_rng(1, 2, 0, 0, 7);
            (0..2000).map(|_| e.draw(&mut rng)).collect()
        };
        assert_eq!(draws, again);
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((80.0..120.0).contains(&mean), "{mean}");
        let u = ThinkTime::Uniform {
            min_ms: 5.0,
            max_ms: 9.0,
        };
        let mut rng = SplitMix64::new(3);
        assert!((0..100).all(|_| (5.0..=9.0).contains(&u.draw(&mut rng))));
        assert_eq!(u.label(), "uniform 5–9 ms");
        assert!(
            ThinkTime::Uniform {
                min_ms: 9.0,
                max_ms: 5.0
            }
            .problem()
            .is_some()
        );
        assert!(ThinkTime::Fixed { ms: -1.0 }.problem().is_some());
        assert_eq!(
            ThinkTime::parse("uniform 200-800").unwrap().unwrap().spec(),
            "uniform 200-800"
        );
        assert_eq!(ThinkTime::parse("  ").unwrap(), None);
        assert_eq!(
            ThinkTime::parse("exponential 1000 ms").unwrap(),
            Some(ThinkTime::Exponential { mean_ms: 1000.0 })
        );
        assert!(
            ThinkTime::parse("sometimes 3")
                .unwrap_err()
                .contains("not a think-time distribution")
        );
        assert!(ThinkTime::parse("uniform 9-5").is_err());
        assert_eq!(user_start_offset_us(2, 4, 3, &ThinkTime::Fixed { ms: 100.0 }), 150_000);
        assert_eq!(
            PromptCache {
                read_tokens: 30,
                creation_tokens: Some(5)
            }
            .hit_rate(60),
            Some(0.5)
        );
    }
}
