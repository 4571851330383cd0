//! `GET /archive/history?candidate=ID&evalset=ID`: one candidate's key figures on one eval set,
//! run after run (finished runs, oldest first), as a table and server-drawn SVG charts with
//! each figure's 95 % interval. A change is flagged as a regression only when the new interval
//! lies wholly on the worse side of the previous run's — beyond the measured noise — and only
//! between runs measured under the same conditions (`compare::Conditions`: caliber, load levels,
//! prompts, max tokens, temperature, streaming, eval-set version). Each set of conditions is its
//! own labelled series: a trend line goes only through the runs of one series, and a run is
//! flagged against the previous run of its series (the row says which runs it was not compared
//! with, and why).
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{RawQuery, State};
use plotters::prelude::*;

use super::with_interval;
use crate::app::pages::figures::run_figures;
use crate::app::runs::{RunRecords, RunVersion};
use crate::domain::compare::{Better, Conditions, Figures, Scope, improved_beyond_noise, regressed_beyond_noise};
use crate::domain::format;
use crate::domain::run::{Run, RunStatus};
use crate::domain::stats::Interval;
use crate::domain::thresholds::ThresholdRule;
use crate::store::{EvalSetVersionHead, RunFilter};
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::views::{FormBody, ms, short_hash, tok_s};

/// Most runs shown (the newest ones).
pub const MAX_POINTS: i64 = 200;

#[derive(Template, WebTemplate)]
#[template(path = "archive/history.html")]
pub struct HistoryPage {
    pub nav: &'static str,
    pub candidate: String,
    pub candidate_id: i64,
    pub evalset: String,
    pub evalset_id: i64,
    pub rows: Vec<HistoryRow>,
    pub charts: Vec<Chart>,
    /// Every set of conditions the runs were measured under, in order of first appearance.
    pub series: Vec<SeriesView>,
    pub note: Option<String>,
    /// The profile the rows' verdicts are by (the eval set's own, else the default), when any.
    pub verdict_profile: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SeriesView {
    /// 1-based, as the rows and the charts' legend name it.
    pub number: usize,
    pub label: String,
    pub runs: usize,
    /// The line's colour in the charts.
    pub colour: String,
}

#[derive(Debug, Clone)]
pub struct HistoryRow {
    pub run_id: i64,
    pub run_name: String,
    pub date: String,
    pub version: String,
    pub concurrency: String,
    pub accuracy: String,
    pub failure_rate: String,
    pub ttft: String,
    pub decode: String,
    pub aggregate: String,
    /// A resumed run's segments (its aggregates are per segment), as the run page says them.
    pub segments: Option<String>,
    /// "regression: …" / "improvement: …" / "not compared: …" notes against the previous run
    /// of its series.
    pub flags: Vec<(&'static str, String)>,
    /// The series (set of conditions) the run belongs to, 1-based.
    pub series: usize,
    /// The run's figures for the candidate, unformatted (what the JSON API gives beside the texts).
    pub figures: Figures,
    /// The candidate's verdict in this run by the page's profile, when it was judged.
    pub verdict: Option<super::list::VerdictCell>,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub id: &'static str,
    pub title: String,
    pub svg: String,
}

struct Point {
    run_id: i64,
    concurrency: u32,
    figures: Figures,
    conditions: Conditions,
    /// Index into the page's series.
    series: usize,
}

fn required_id(q: &FormBody, name: &str) -> Result<i64, WebError> {
    q.get(name).and_then(|v| v.trim().parse::<i64>().ok()).ok_or_else(|| {
        WebError::BadRequest(format!(
            "Give the {name} id, e.g. /archive/history?candidate=1&evalset=2."
        ))
    })
}

pub async fn page(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<HistoryPage, WebError> {
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    read(&state, &q, true).await
}

/// The history the query asks for (`candidate`, `evalset`); the JSON API reads it without the
/// SVG charts (`with_charts` false), which it has no use for.
pub(crate) async fn read(state: &AppState, q: &FormBody, with_charts: bool) -> Result<HistoryPage, WebError> {
    let candidate_id = required_id(q, "candidate")?;
    let evalset_id = required_id(q, "evalset")?;
    let candidate = state
        .store
        .get_candidate(candidate_id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("candidate #{candidate_id}")))?;
    let evalset = state
        .store
        .list_evalsets()
        .await?
        .into_iter()
        .find(|e| e.id == evalset_id)
        .ok_or_else(|| WebError::NotFound(format!("eval set #{evalset_id}")))?;
    let filter = RunFilter {
        evalset_id: Some(evalset_id),
        candidate_id: Some(candidate_id),
        status: Some(RunStatus::Finished),
        terminal_only: true,
        ..Default::default()
    };
    let total = state.store.count_runs_filtered(&filter).await?;
    let mut items = state.store.list_runs_filtered(&filter, MAX_POINTS, 0).await?;
    items.reverse(); // oldest first
    // "Did it get worse" is read in verdicts first: each run's by the set's own profile.
    let profile = super::list::profile_for_evalset(state, Some(&evalset.name)).await?;
    let verdicts = super::list::verdicts_of(state, &items, profile.as_ref()).await?;
    let name = [candidate.spec.name.clone()];

    let mut points: Vec<Point> = Vec::with_capacity(items.len());
    let mut series_keys: Vec<String> = Vec::new();
    let mut rows = Vec::with_capacity(items.len());
    for item in &items {
        let run = &item.run;
        // The head only (kept in process): the figures read the version's outline only when
        // they are computed.
        let version = state.store.get_evalset_version_head(run.evalset_version_id).await?;
        let figures = run_figures(
            &state.store,
            &state.views.figures,
            run,
            &RunVersion::of(run),
            &RunRecords::of(run.id),
        )
        .await?;
        let Some(position) = run.candidate_ids.iter().position(|&c| c == candidate_id) else {
            continue;
        };
        let f = figures.get(position).cloned().unwrap_or_default();
        let hash = version
            .as_ref()
            .map(|v| short_hash(&v.content_hash))
            .unwrap_or("unknown");
        let conditions = Conditions::of(&run.config, hash, &f, Vec::new());
        let key = conditions.series_key();
        let series = match series_keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                series_keys.push(key);
                series_keys.len() - 1
            }
        };
        let point = Point {
            run_id: run.id,
            concurrency: f.concurrency.unwrap_or(run.config.concurrency),
            figures: f,
            conditions,
            series,
        };
        let flags = flags(&points, &point);
        let mut row = history_row(run, version.as_ref(), &point, flags, series);
        row.verdict = profile.as_ref().and_then(|p| {
            super::list::verdict_cells(p, &[candidate_id], &name, run.id, &verdicts)
                .into_iter()
                .next()
        });
        rows.push(row);
        points.push(point);
    }
    // No points, no charts: the API has no use for them.
    let charts = if with_charts {
        // Each chart draws the judging profile's rule on its figure, where the profile has one.
        let rules = judging_rules(state, profile.as_ref()).await?;
        history_charts(&points, candidate_id, &rules)
    } else {
        Vec::new()
    };
    let series = series_views(series_keys, &points, candidate_id);
    Ok(HistoryPage {
        nav: "archive",
        series,
        candidate: candidate.spec.name,
        candidate_id,
        evalset: evalset.name,
        evalset_id,
        note: (total > MAX_POINTS).then(|| format!("Showing the newest {MAX_POINTS} of {total} finished runs.")),
        rows,
        charts,
        verdict_profile: profile.map(|p| p.name),
    })
}

/// One run's row of the history table.
fn history_row(
    run: &Run,
    version: Option<&EvalSetVersionHead>,
    point: &Point,
    flags: Vec<(&'static str, String)>,
    series: usize,
) -> HistoryRow {
    let f = &point.figures;
    HistoryRow {
        run_id: run.id,
        run_name: run.name.clone(),
        date: run.created_at.display(),
        version: version
            .map(|v| short_hash(&v.content_hash).to_string())
            .unwrap_or_default(),
        concurrency: point.concurrency.to_string(),
        accuracy: with_interval(f.accuracy, f.accuracy_ci.as_ref(), |v| format::percent(v, 1)),
        failure_rate: with_interval(f.failure_rate, f.failure_ci.as_ref(), |v| format::percent(v, 1)),
        ttft: with_interval(f.ttft_p50_ms, f.ttft_ci.as_ref(), |v| ms(Some(v))),
        decode: with_interval(f.decode_p50_tok_s, f.decode_ci.as_ref(), |v| tok_s(Some(v))),
        // The level figure at the row's concurrency (a sweep's first level).
        aggregate: tok_s(
            f.levels
                .iter()
                .find(|l| l.concurrency == point.concurrency)
                .and_then(|l| l.steady_tok_s)
                .or(f.aggregate_tok_s),
        ),
        segments: crate::app::pages::report::resumed_text(f.segments, f.downtime_s),
        flags,
        series: series + 1,
        figures: f.clone(),
        verdict: None,
    }
}

/// The judging profile's name and rules (empty without one): what the charts' threshold lines
/// are drawn from.
pub(super) async fn judging_rules(
    state: &AppState,
    profile: Option<&super::list::ShownProfile>,
) -> Result<(String, Vec<ThresholdRule>), WebError> {
    let Some(p) = profile else {
        return Ok(Default::default());
    };
    Ok(state
        .store
        .list_threshold_profiles()
        .await?
        .into_iter()
        .find(|t| t.id == p.id)
        .map(|t| (t.name, t.rules))
        .unwrap_or_default())
}

/// The accuracy, TTFT and decode charts over the runs.
/// The judging profile's rule on `metric`, as a threshold line in the chart's unit (`scale`:
/// a share's 0.8 is 80 %), labelled with the rule and the profile: "rule: accuracy ≥ 80 %
/// (Support-ticket triage)". None when the profile has no rule on that figure.
pub(super) fn threshold_line(rules: &(String, Vec<ThresholdRule>), metric: &str, scale: f64) -> Option<(f64, String)> {
    let (profile, rules) = rules;
    let rule = rules.iter().find(|r| r.metric == metric)?;
    Some((rule.value * scale, format!("rule: {} ({profile})", rule.describe())))
}

fn history_charts(points: &[Point], candidate_id: i64, rules: &(String, Vec<ThresholdRule>)) -> Vec<Chart> {
    [
        chart(
            "chart-accuracy",
            "Accuracy (95 % interval)",
            points,
            candidate_id,
            |f| (f.accuracy.map(|v| v * 100.0), f.accuracy_ci.map(|i| scale(i, 100.0))),
            "accuracy %",
            threshold_line(rules, "accuracy", 100.0),
        ),
        chart(
            "chart-ttft",
            "TTFT p50 (95 % interval of the median)",
            points,
            candidate_id,
            |f| (f.ttft_p50_ms, f.ttft_ci),
            "TTFT ms",
            threshold_line(rules, "ttft_p50_ms", 1.0),
        ),
        chart(
            "chart-decode",
            "Decode tok/s per stream p50 (95 % interval)",
            points,
            candidate_id,
            |f| (f.decode_p50_tok_s, f.decode_ci),
            "tok/s",
            threshold_line(rules, "decode_tok_s_p50", 1.0),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Each series (runs measured alike) with its number, label, run count and colour.
fn series_views(keys: Vec<String>, points: &[Point], candidate_id: i64) -> Vec<SeriesView> {
    keys.into_iter()
        .enumerate()
        .map(|(i, label)| SeriesView {
            number: i + 1,
            label,
            runs: points.iter().filter(|p| p.series == i).count(),
            colour: crate::domain::palette::PALETTE[series_slot(candidate_id, i)].to_string(),
        })
        .collect()
}

pub(super) fn scale(i: Interval, k: f64) -> Interval {
    Interval {
        lo: i.lo * k,
        hi: i.hi * k,
        confidence: i.confidence,
    }
}

/// What changed beyond the noise since the previous run of the same series, and which later
/// runs of other series it was not compared with, and why.
fn flags(earlier: &[Point], cur: &Point) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let same = earlier.iter().rev().position(|p| p.series == cur.series);
    // Runs between the previous one of this series (or the start) and this one.
    let others = &earlier[earlier.len() - same.unwrap_or(earlier.len())..];
    if let Some(prev) = others.last().filter(|p| p.series != cur.series) {
        let mut why = cur.conditions.differences(&prev.conditions, Scope::Speed);
        if prev.conditions.levels != cur.conditions.levels {
            why.insert(
                0,
                format!(
                    "load: {} vs {}",
                    prev.conditions.load_text(),
                    cur.conditions.load_text()
                ),
            );
        }
        out.push((
            "not-compared",
            format!("not compared with #{}: {}", prev.run_id, why.join("; ")),
        ));
    }
    let Some(prev) = same.map(|back| &earlier[earlier.len() - 1 - back]) else {
        return out;
    };
    let (p, c) = (&prev.figures, &cur.figures);
    let checks: [(&str, Option<Interval>, Option<Interval>, Better); 4] = [
        ("accuracy", p.accuracy_ci, c.accuracy_ci, Better::Higher),
        ("failure rate", p.failure_ci, c.failure_ci, Better::Lower),
        ("TTFT p50", p.ttft_ci, c.ttft_ci, Better::Lower),
        ("decode tok/s p50", p.decode_ci, c.decode_ci, Better::Higher),
    ];
    for (name, a, b, better) in checks {
        if regressed_beyond_noise(a.as_ref(), b.as_ref(), better) {
            out.push(("regression", format!("regression: {name} worse beyond the noise")));
        } else if improved_beyond_noise(a.as_ref(), b.as_ref(), better) {
            out.push(("improvement", format!("improvement: {name} better beyond the noise")));
        }
    }
    out
}

const SIZE: (u32, u32) = (720, 300);
const FONT: &str = "sans-serif";
/// A series' palette slot: the first series (the conditions of the oldest run) is drawn in the
/// candidate's own colour, as every other page draws the candidate (`domain::palette`), the
/// next ones in the colours after it, repeating.
fn series_slot(candidate_id: i64, series: usize) -> usize {
    (crate::domain::palette::own_slot(candidate_id) + series) % crate::domain::palette::PALETTE.len()
}

/// Medians with interval bars over the run sequence, one line per series (a line never joins
/// runs measured under different conditions); None without a value.
fn chart(
    id: &'static str,
    title: &'static str,
    points: &[Point],
    candidate_id: i64,
    pick: impl Fn(&Figures) -> (Option<f64>, Option<Interval>),
    y_desc: &str,
    threshold: Option<(f64, String)>,
) -> Option<Chart> {
    let labels: Vec<String> = points.iter().map(|p| format!("#{}", p.run_id)).collect();
    let columns: Vec<Column> = points
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let (v, interval) = pick(&p.figures);
            v.map(|value| Column {
                x: i,
                value,
                interval,
                line: p.series,
                slot: series_slot(candidate_id, p.series),
            })
        })
        .collect();
    column_chart(
        id,
        title.to_string(),
        "run (oldest → newest)",
        &labels,
        &columns,
        y_desc,
        threshold,
    )
}

/// One figure at a column of a chart: history's run, compare's compared column.
pub(super) struct Column {
    /// Its place among the chart's labels.
    pub x: usize,
    pub value: f64,
    pub interval: Option<Interval>,
    /// Columns of one line are joined (runs of one series, one candidate's runs).
    pub line: usize,
    /// Its colour (`domain::palette`).
    pub slot: usize,
}

/// Each column's figure with its interval bar, a line through the columns of each `line`, and
/// the judging profile's rule as a dashed threshold line named in the legend; None without a
/// finite value.
pub(super) fn column_chart(
    id: &'static str,
    title: String,
    x_desc: &str,
    labels: &[String],
    columns: &[Column],
    y_desc: &str,
    threshold: Option<(f64, String)>,
) -> Option<Chart> {
    let values: Vec<&Column> = columns.iter().filter(|c| c.value.is_finite()).collect();
    if values.is_empty() {
        return None;
    }
    // The threshold line is in range too: how far a column sits from its rule is the point.
    let line = threshold.as_ref().map(|(v, _)| *v).filter(|v| v.is_finite());
    let lo = values
        .iter()
        .map(|c| c.interval.map_or(c.value, |i| i.lo))
        .chain(line)
        .fold(f64::INFINITY, f64::min);
    let hi = values
        .iter()
        .map(|c| c.interval.map_or(c.value, |i| i.hi))
        .chain(line)
        .fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo).abs() * 0.15).max(hi.abs() * 0.05).max(1e-6);
    let ys = (lo - pad).max(0.0)..hi + pad;
    let right = (labels.len() as f64 - 0.5).max(0.5);
    let xs = -0.5..right;
    let colour = crate::app::pages::charts::colour;
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut c = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(xs, ys)?;
        c.configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_labels(labels.len().clamp(2, 12))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .label_style((FONT, 13))
            .draw()?;
        if let Some((v, label)) = &threshold
            && v.is_finite()
        {
            let grey = RGBColor(90, 90, 90);
            c.draw_series(DashedLineSeries::new(
                vec![(-0.5, *v), (right, *v)],
                8,
                5,
                grey.stroke_width(2),
            ))?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2)));
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .label_font((FONT, 12))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .draw()?;
        }
        c.draw_series(values.iter().filter_map(|col| {
            let x = col.x as f64;
            col.interval
                .map(|i| PathElement::new(vec![(x, i.lo), (x, i.hi)], colour(col.slot).mix(0.5).stroke_width(3)))
        }))?;
        let mut lines: Vec<(usize, usize)> = values.iter().map(|c| (c.line, c.slot)).collect();
        lines.sort_unstable();
        lines.dedup_by_key(|l| l.0);
        for (line, slot) in lines {
            c.draw_series(LineSeries::new(
                values.iter().filter(|c| c.line == line).map(|c| (c.x as f64, c.value)),
                colour(slot).stroke_width(2),
            ))?;
        }
        c.draw_series(
            values
                .iter()
                .map(|col| Circle::new((col.x as f64, col.value), 4, colour(col.slot).filled())),
        )?;
        root.present()?;
        Ok(())
    })();
    match drawn {
        Ok(()) => Some(Chart { id, title, svg }),
        Err(e) => {
            tracing::warn!(chart = id, error = %e, "drawing a column chart failed");
            None
        }
    }
}
