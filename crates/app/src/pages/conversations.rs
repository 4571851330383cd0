//! The run page's conversation block (`templates/runs/conversations.html`): for a run over
//! conversation cases, each candidate's figures by turn and by context length, its accuracy per
//! turn and per whole conversation with intervals, how exactly the think times were kept, and a
//! chart of TTFT against context length per candidate.
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::charts::{
    Chart, FONT, PointTitle, axis_number, candidate_colour, padded, render, styled_mesh, with_point_titles,
};
use crate::domain::conversation::{
    ConversationFigures, PassRate, RAMP_RULE, SESSION_RULE, Spread, figures, stagger_label,
};
use crate::domain::format::shortest;
use crate::domain::palette::CandidateColours;
use crate::domain::run::{RequestRecord, Run, last_attempts};

/// Confidence of every interval in the block.
pub const CONFIDENCE: f64 = 0.95;
/// Points per candidate drawn on the chart (evenly taken from its sorted points).
const MAX_POINTS: usize = 300;

/// One candidate's conversation figures, as the page shows them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CandidateConversations {
    pub candidate: String,
    /// Its colour on the chart (`domain::palette`); 0 in a view stored before it was kept.
    #[serde(default)]
    pub candidate_id: i64,
    pub turns: Vec<TurnLine>,
    pub contexts: Vec<ContextLine>,
    pub conversations: String,
    pub last_turn: String,
    pub think: String,
    /// How many turns were the ramp, left out of the speed figures (`RAMP_RULE`).
    pub ramp: String,
    pub figures: ConversationFigures,
}

/// One row of the by-turn table, formatted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnLine {
    pub turn: u32,
    pub requests: usize,
    pub failed: usize,
    /// Turns sent in the ramp (graded, left out of this row's speed figures).
    pub ramp: usize,
    pub context: String,
    pub cache: String,
    pub ttft: String,
    pub ttfa: String,
    pub decode: String,
    pub e2e: String,
    pub accuracy: String,
}

/// One row of the by-context table, formatted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContextLine {
    pub bin: String,
    pub n: usize,
    pub ttft: String,
}

/// The whole block.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConversationsView {
    /// "users = concurrency; think time exponential, mean 1000 ms; …".
    pub conditions: String,
    pub candidates: Vec<CandidateConversations>,
    pub chart: Option<Chart>,
}

fn spread(s: &Spread, unit: &str) -> String {
    match (s.p50, s.p95) {
        (Some(p50), Some(p95)) => format!("{} / {} {unit}", sig(p50), sig(p95)),
        _ => "—".into(),
    }
}

fn sig(v: f64) -> String {
    crate::domain::format::significant_trimmed(v)
}

/// "7 of 10 (70 %, 95 % CI 40–89 %)".
pub fn pass_rate_text(p: &PassRate) -> String {
    match (p.rate(), p.interval) {
        (Some(r), Some(i)) => format!(
            "{} of {} ({} %, {} % CI {}–{} %)",
            p.passed,
            p.graded,
            shortest((r * 1000.0).round() / 10.0),
            shortest(i.confidence * 100.0),
            shortest((i.lo * 1000.0).round() / 10.0),
            shortest((i.hi * 1000.0).round() / 10.0)
        ),
        _ => "not graded".into(),
    }
}

/// One candidate's block from its records (others' are left out), None when it sent no turn.
pub fn candidate_conversations(
    name: String,
    records: &[RequestRecord],
    candidate_id: i64,
) -> Option<CandidateConversations> {
    let turns: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.candidate_id == candidate_id && !r.is_warmup && r.turn.is_some())
        .collect();
    if turns.is_empty() {
        return None;
    }
    let last = last_attempts(turns, |r| (r.case_id.clone(), r.phase.as_str(), r.repetition));
    let f = figures(last, CONFIDENCE);
    let lines = f
        .turns
        .iter()
        .map(|t| TurnLine {
            turn: t.turn,
            requests: t.requests,
            failed: t.failed,
            ramp: t.ramp,
            context: spread(&t.context_tokens, "tok"),
            cache: t
                .cache_hit_rate
                .map(|h| format!("{} %", shortest((h * 1000.0).round() / 10.0)))
                .unwrap_or_else(|| "not reported".into()),
            ttft: spread(&t.ttft_ms, "ms"),
            ttfa: spread(&t.ttfa_ms, "ms"),
            decode: spread(&t.decode_tok_s, "tok/s"),
            e2e: spread(&t.e2e_ms, "ms"),
            accuracy: pass_rate_text(&t.accuracy),
        })
        .collect();
    let contexts = f
        .by_context
        .iter()
        .map(|b| ContextLine {
            bin: if b.to == u32::MAX {
                format!("≥ {}", b.from)
            } else {
                format!("{}–{}", b.from, b.to - 1)
            },
            n: b.ttft_ms.n,
            ttft: spread(&b.ttft_ms, "ms"),
        })
        .collect();
    let think = match (f.think_error_ms.p50, f.think_error_ms.p95) {
        (Some(p50), Some(p95)) => format!(
            "|waited − scheduled| over {} waits: p50 {} ms, p95 {} ms",
            f.think_error_ms.n,
            sig(p50),
            sig(p95)
        ),
        _ => "no think time waited".into(),
    };
    let ramp = match f.ramp_turns {
        0 => "every turn measured (no ramp: the users started together, or none was staggered)".to_string(),
        n => format!(
            "{n} turn{} sent before every user had started (the ramp): graded, left out of the speed figures",
            if n == 1 { "" } else { "s" }
        ),
    };
    Some(CandidateConversations {
        candidate: name,
        candidate_id,
        turns: lines,
        contexts,
        conversations: pass_rate_text(&f.conversations),
        last_turn: pass_rate_text(&f.last_turn),
        think,
        ramp,
        figures: f,
    })
}

/// The block from every candidate's part (None when no candidate sent a conversation turn).
pub fn view(run: &Run, candidates: Vec<CandidateConversations>) -> Option<ConversationsView> {
    if candidates.is_empty() {
        return None;
    }
    let c = &run.config;
    let think = c.think_time.unwrap_or_default();
    let conditions = format!(
        "{} user{} per candidate (the run's concurrency), each working through conversations one after another; {}; think time {} (seeded per conversation, waited from a reply's end to the next send); {}. Measured window: {}. Streaming {}. TTFT, TTFA, decode tok/s/stream and E2E are p50 / p95 over successful turns past the ramp; context is the prompt tokens the server reported at that turn; intervals are Wilson, {} %.",
        c.concurrency,
        if c.concurrency == 1 { "" } else { "s" },
        SESSION_RULE,
        think.label(),
        stagger_label(&think),
        RAMP_RULE,
        if c.stream { "on" } else { "off" },
        shortest(CONFIDENCE * 100.0)
    );
    let chart = ttft_context_chart(&candidates, &run.candidate_ids);
    Some(ConversationsView {
        conditions,
        candidates,
        chart,
    })
}

/// TTFT against context length, one colour and marker per candidate.
/// `run_candidates`: every candidate of the run (the colours are settled among them, as on every
/// page of the run).
pub fn ttft_context_chart(candidates: &[CandidateConversations], run_candidates: &[i64]) -> Option<Chart> {
    let colours = CandidateColours::of(run_candidates.iter().copied());
    let all = || candidates.iter().flat_map(|c| c.figures.points.iter());
    let xs = padded(all().map(|p| f64::from(p.0)), true)?;
    let ys = padded(all().map(|p| p.1), true)?;
    let mut titles = Vec::new();
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(xs.clone(), ys.clone())?;
        styled_mesh(
            &mut chart,
            "context: prompt tokens at the turn (server-reported)",
            "TTFT (ms), successful turns",
            13,
        )
        .axis_desc_style((FONT, 14))
        .draw()?;
        for (i, c) in candidates.iter().enumerate() {
            let col = candidate_colour(&colours, c.candidate_id);
            let step = (c.figures.points.len() / MAX_POINTS).max(1);
            let points: Vec<(f64, f64)> = c
                .figures
                .points
                .iter()
                .step_by(step)
                .map(|&(x, y)| (f64::from(x), y))
                .collect();
            // Marker shape by candidate too, so the series are told apart without colour.
            let drawn = if i % 2 == 0 {
                chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, col.filled())))?
            } else {
                chart.draw_series(points.iter().map(|p| TriangleMarker::new(*p, 4, col.filled())))?
            };
            drawn
                .label(c.candidate.clone())
                .legend(move |(x, y)| Circle::new((x + 6, y), 4, col.filled()));
            for &(x, y) in points.iter().take(60) {
                titles.push(PointTitle {
                    colour: Some(col),
                    at: chart.backend_coord(&(x, y)),
                    text: format!(
                        "{}: TTFT {} ms at {} prompt tokens",
                        c.candidate,
                        sig(y),
                        axis_number(x)
                    ),
                });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    Some(Chart {
        id: "chart-ttft-context".into(),
        title: "TTFT vs context length".into(),
        caption: "Every successful conversation turn: its time to first token against the prompt tokens the server reported at that turn (later turns carry longer histories; a prefix cache flattens the climb).".into(),
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}
