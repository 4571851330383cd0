//! Charts drawn on the server as SVG with plotters (inline in the page, readable without
//! JavaScript): throughput vs concurrency on a log₂ axis with each knee ringed, the TTFT
//! distribution, and accuracy vs tok/s in the caliber of the profile's speed rule, with its
//! threshold lines. Every data point carries its values as an SVG `<title>` on a focusable
//! mark (hover or keyboard focus shows them). Text is escaped (plotters' backend; [`xml`]).
use std::ops::Range;

use plotters::prelude::*;

use crate::domain::calibers::{Knee, LevelFigures, knees_of};
use crate::domain::load::Load;
use crate::domain::palette::{self, CandidateColours, PALETTE_RGB};
use crate::domain::scorecard::CandidateSummary;
use crate::domain::thresholds::key::MetricKey;
use crate::scorecard::RunScorecard;

const SIZE: (u32, u32) = (720, 380);
pub(super) const FONT: &str = "sans-serif";
/// Fine grid lines, one between labelled ones (`max_light_lines(1)`): each is an SVG element,
/// and a page carries several charts.
pub(super) const GRID_LIGHT: RGBColor = RGBColor(244, 244, 244);
pub(super) const GRID_BOLD: RGBColor = RGBColor(214, 214, 214);

/// Axis numbers without needless decimals: `10`, `2.5`.
pub(super) fn axis_number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        crate::domain::format::significant_trimmed(v)
    }
}

/// An axis number as a mesh's label formatter wants it (a fn item: a `'static` reference).
fn axis_label(v: &f64) -> String {
    axis_number(*v)
}

/// The mesh the charts share: the axes' descriptions, labels at `font` px, a light grid line
/// between labelled ones, axis numbers without needless decimals. The caller adds what differs
/// (a percentage formatter, no y grid…) and draws it.
pub(super) fn styled_mesh<'a, 'c, 'b, X, Y>(
    chart: &'c mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
    x_desc: impl Into<String>,
    y_desc: impl Into<String>,
    font: u32,
) -> plotters::chart::MeshStyle<'a, 'c, X, Y, SVGBackend<'b>>
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FONT, font))
        .max_light_lines(1)
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .x_label_formatter(&axis_label)
        .y_label_formatter(&axis_label);
    mesh
}

/// One chart: its title, a sentence saying what it shows, and the SVG markup.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Chart {
    pub id: String,
    pub title: String,
    pub caption: String,
    pub svg: String,
    /// Its figures as a table (the scorecard prints it under the chart, and static/charts.js
    /// draws the interactive chart from that table: hovering a point shows its row's words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ChartData>,
}

/// A chart's figures, a series per candidate, each point worded as its table row says it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ChartData {
    pub x_label: String,
    pub y_label: String,
    /// The x axis is log₂ (concurrency).
    pub x_log2: bool,
    /// Points joined by lines (false: a scatter).
    pub lines: bool,
    pub series: Vec<DataSeries>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DataSeries {
    pub name: String,
    /// The candidate's colour (`domain::palette`): whose series it is.
    pub colour: String,
    /// The line's colour as drawn: the candidate's, or a shade of it for the candidate's second
    /// and later series on one chart (`domain::palette::shade`: several prompt sizes).
    #[serde(default)]
    pub stroke: String,
    /// The line's dash pattern as "dash gap" px, empty for a solid line
    /// (`domain::palette::dash`).
    #[serde(default)]
    pub dash: String,
    pub points: Vec<DataPoint>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DataPoint {
    /// Where the point sits (plain numbers, for the interactive chart).
    pub x: String,
    pub y: String,
    /// The x and y as the table words them (the y is what hovering shows).
    pub x_text: String,
    pub y_text: String,
}

impl DataPoint {
    fn at(x: f64, y: f64, x_text: String, y_text: String) -> DataPoint {
        DataPoint {
            x: crate::domain::format::data(x),
            y: crate::domain::format::data(y),
            x_text,
            y_text,
        }
    }
}

/// The colour of palette slot `slot` (`domain::palette`'s Okabe–Ito colours), repeating.
pub fn colour(slot: usize) -> RGBColor {
    let (r, g, b) = PALETTE_RGB[slot % PALETTE_RGB.len()];
    RGBColor(r, g, b)
}

/// The colour of candidate `id` among `colours` (one candidate, one colour on every page:
/// `domain::palette`).
pub fn candidate_colour(colours: &CandidateColours, id: i64) -> RGBColor {
    colour(colours.slot(id))
}

/// A data point's place in the SVG (pixels) and what it says on hover or focus.
pub(super) struct PointTitle {
    pub(super) at: (i32, i32),
    pub(super) text: String,
    /// Its series' colour (a candidate's: `domain::palette`), named on the mark as
    /// `data-colour` so the interactive charts and the tests can read it; None for a chart of
    /// no candidate.
    pub(super) colour: Option<RGBColor>,
}

/// `#0072b2`: a colour as CSS and the palette write it.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart with a transparent, focusable mark over each point that names its values: a
/// browser shows the `<title>` on hover, a screen reader reads it on focus.
pub(super) fn with_point_titles(svg: String, points: &[PointTitle]) -> String {
    let Some(end) = svg.rfind("</svg>") else {
        return svg;
    };
    let mut marks = String::from("<g class=\"point-titles\">");
    for p in points {
        let colour = p
            .colour
            .map_or(String::new(), |c| format!(" data-colour=\"{}\"", hex(c)));
        marks.push_str(&format!(
            "<circle class=\"point-title\" cx=\"{}\" cy=\"{}\" r=\"9\" fill=\"#000\" fill-opacity=\"0\"{colour} tabindex=\"0\" role=\"img\" aria-label=\"{t}\"><title>{t}</title></circle>",
            p.at.0,
            p.at.1,
            t = xml(&p.text)
        ));
    }
    marks.push_str("</g>");
    let mut out = svg;
    out.insert_str(end, &marks);
    out
}

/// A log₂ range around the concurrencies (x > 0), a power of two's room on each side.
fn log2_range(values: impl Iterator<Item = f64>) -> Option<Range<f64>> {
    let (lo, hi) = values
        .filter(|x| x.is_finite() && *x > 0.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    lo.is_finite().then(|| lo / 1.5..hi * 1.5)
}

/// A range around `values` with a little room, never empty.
pub(super) fn padded(values: impl Iterator<Item = f64>, floor_zero: bool) -> Option<Range<f64>> {
    let v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    if !lo.is_finite() {
        return None;
    }
    // Values all 0 get a unit span: a nanoscopic one drew an axis labelled "0, 0, 0".
    let span = (hi - lo).abs().max(hi.abs() * 0.1);
    let span = if span > 1e-9 { span } else { 1.0 };
    let lo = if floor_zero { 0.0f64.min(lo) } else { lo - span * 0.1 };
    Some(lo..hi + span * 0.15)
}

/// Concurrency (log₂) × a linear value, drawn on an SVG.
type ConcurrencyChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>>;

/// A chart over concurrency on a log₂ axis (a sweep doubles it from level to level; on a linear
/// axis c=1, 2, 4, 8 crowd into the left edge), its mesh drawn: throughput and latency vs load.
fn concurrency_axes<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    xs: Range<f64>,
    ys: Range<f64>,
    y_desc: &str,
) -> Result<ConcurrencyChart<'a, 'b>, DrawingAreaErrorKind<<SVGBackend<'b> as DrawingBackend>::ErrorType>> {
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(xs.log_scale().base(2.0), ys)?;
    styled_mesh(&mut chart, "concurrency (requests in flight, log₂ scale)", y_desc, 13).draw()?;
    Ok(chart)
}

pub(super) type Plot<'a> = Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

pub(super) fn render(
    draw: impl FnOnce(DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Plot<'_>,
) -> Option<String> {
    render_at(SIZE, draw)
}

fn render_at(
    size: (u32, u32),
    draw: impl FnOnce(DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Plot<'_>,
) -> Option<String> {
    let mut svg = String::new();
    let outcome = {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(root)
    };
    match outcome {
        Ok(()) => Some(svg),
        Err(e) => {
            tracing::warn!(error = %e, "drawing a scorecard chart failed");
            None
        }
    }
}

/// One candidate's throughput curve: the steady-window aggregate at every concurrency it was
/// measured at (the level computation every page uses), and the sweep's knee on that curve.
pub struct ThroughputSeries {
    pub candidate_id: i64,
    pub name: String,
    /// (concurrency, steady-window aggregate tok/s), ascending.
    pub points: Vec<(f64, f64)>,
    /// (concurrency, whole-run aggregate tok/s), ascending.
    pub whole_run: Vec<(f64, f64)>,
    /// TTFT and E2E per level, ascending.
    pub latency: Vec<LatencyPoint>,
    pub knee: Option<Knee>,
    /// Most segments any level was measured in (> 1: resumed) and the downtime left out.
    pub segments: u32,
    pub downtime_s: f64,
    /// Which of the candidate's series this is (0 for its first: several prompt sizes make
    /// several curves of one candidate), drawn in a shade and dash of the candidate's colour
    /// (`domain::palette::shade`, `dash`).
    pub variant: usize,
}

/// One level's latency figures (ms), as the per-level table states them.
#[derive(Debug, Clone, Copy)]
pub struct LatencyPoint {
    pub concurrency: f64,
    pub ttft_p50: Option<f64>,
    pub ttft_p95: Option<f64>,
    pub e2e_p50: Option<f64>,
    pub e2e_p95: Option<f64>,
}

impl ThroughputSeries {
    /// One curve from a candidate's level figures (concurrency levels only; rate levels have
    /// no concurrency to place them at) and the knee found on them.
    pub fn of_levels(candidate_id: i64, name: String, levels: &[LevelFigures], knee: Option<Knee>) -> ThroughputSeries {
        let at = |l: &LevelFigures| match l.load {
            Load::Concurrency { concurrency } => Some(f64::from(concurrency)),
            Load::Rate { .. } | Load::Replay { .. } => None,
        };
        // Levels as configured may come in any order; a curve runs left to right.
        let mut levels: Vec<&LevelFigures> = levels.iter().collect();
        levels.sort_by(|a, b| at(a).unwrap_or(0.0).total_cmp(&at(b).unwrap_or(0.0)));
        ThroughputSeries {
            candidate_id,
            name,
            points: levels
                .iter()
                .filter_map(|l| Some((at(l)?, l.aggregate_tok_s?)))
                .collect(),
            whole_run: levels
                .iter()
                .filter_map(|l| Some((at(l)?, l.whole_run_tok_s?)))
                .collect(),
            latency: levels
                .iter()
                .filter_map(|l| {
                    let pick =
                        |d: &Option<crate::domain::metrics::Distribution>,
                         f: fn(&crate::domain::metrics::Distribution) -> f64| d.as_ref().map(f);
                    Some(LatencyPoint {
                        concurrency: at(l)?,
                        ttft_p50: pick(&l.ttft_ms, |d| d.p50),
                        ttft_p95: pick(&l.ttft_ms, |d| d.p95),
                        e2e_p50: pick(&l.e2e_ms, |d| d.p50),
                        e2e_p95: pick(&l.e2e_ms, |d| d.p95),
                    })
                })
                .collect(),
            knee,
            segments: levels.iter().map(|l| l.segments).max().unwrap_or(1),
            downtime_s: levels.iter().map(|l| l.downtime_s).fold(0.0, f64::max),
            variant: 0,
        }
    }

    /// A candidate's curves, one per prompt size its levels were measured at ("name · 512-token
    /// prompts" when there are several or the size is set), each with the knee found at that
    /// size and its own variant (the first solid in the candidate's colour, the next in a
    /// shade and dash of it).
    pub fn by_prompt_size(
        candidate_id: i64,
        name: &str,
        levels: &[LevelFigures],
        knees: &[(Option<u32>, Knee)],
    ) -> Vec<ThroughputSeries> {
        let mut bins: Vec<Option<u32>> = levels.iter().map(|l| l.prompt_tokens).collect();
        bins.sort_unstable();
        bins.dedup();
        bins.into_iter()
            .enumerate()
            .map(|(variant, bin)| {
                let at_bin: Vec<LevelFigures> = levels.iter().filter(|l| l.prompt_tokens == bin).cloned().collect();
                let knee = knees.iter().find(|(b, _)| *b == bin).map(|(_, k)| k.clone());
                let name = match bin {
                    Some(b) => format!("{name} · {b}-token prompts"),
                    None => name.to_string(),
                };
                ThroughputSeries {
                    variant,
                    ..ThroughputSeries::of_levels(candidate_id, name, &at_bin, knee)
                }
            })
            .collect()
    }

    /// The colour its line is drawn in: the candidate's, or a shade of it for a later variant.
    fn stroke(&self, colours: &CandidateColours) -> RGBColor {
        let (r, g, b) = palette::shade(colours.rgb(self.candidate_id), self.variant);
        RGBColor(r, g, b)
    }
}

/// `8 4`: a dash pattern as the interactive charts read it (empty: solid).
fn dash_text(variant: usize) -> String {
    palette::dash(variant).map_or(String::new(), |(d, g)| format!("{d} {g}"))
}

pub fn throughput_series(j: &RunScorecard) -> Vec<ThroughputSeries> {
    j.candidates
        .iter()
        .zip(&j.summaries)
        .flat_map(|(c, data)| {
            let levels: Vec<LevelFigures> = data
                .levels
                .iter()
                .filter(|level| level.concurrency > 0)
                .filter_map(|level| level.figures.clone())
                .collect();
            let knees = knees_of(&levels, &j.run.config.load);
            let mut bins: Vec<Option<u32>> = levels.iter().map(|l| l.prompt_tokens).collect();
            bins.sort_unstable();
            bins.dedup();
            // One prompt size: one curve, named by the candidate alone.
            if bins.len() <= 1 {
                let knee = knees.into_iter().next().map(|(_, k)| k);
                vec![ThroughputSeries::of_levels(c.id, c.spec.name.clone(), &levels, knee)]
            } else {
                ThroughputSeries::by_prompt_size(c.id, &c.spec.name, &levels, &knees)
            }
        })
        .collect()
}

/// Throughput vs concurrency on a log₂ axis with each knee ringed (the scorecard's and the run
/// page's).
pub fn throughput_chart(series: &[ThroughputSeries]) -> Option<Chart> {
    // One load is a point, not a curve over concurrency (and a log axis around one value reads
    // 4, 4.8, 5.6): no chart; the results table has the figure.
    let mut loads: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    if loads.len() < 2 {
        return None;
    }
    let xs = log2_range(series.iter().flat_map(|s| s.points.iter().map(|x| x.0)))?;
    let ys = padded(series.iter().flat_map(|s| s.points.iter().map(|x| x.1)), true)?;
    let levels: usize = series.iter().map(|s| s.points.len()).max().unwrap_or(0);
    let mut titles = Vec::new();
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = concurrency_axes(&root, xs.clone(), ys.clone(), "aggregate tok/s (steady window)")?;
        let colours = CandidateColours::of(series.iter().map(|s| s.candidate_id));
        for s in series {
            // The candidate's colour names whose point it is; a later prompt size of the same
            // candidate is drawn in a shade and dash of it.
            let base = candidate_colour(&colours, s.candidate_id);
            let c = s.stroke(&colours);
            let drawn = match palette::dash(s.variant) {
                None => chart.draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2)))?,
                Some((d, g)) => chart.draw_series(DashedLineSeries::new(s.points.clone(), d, g, c.stroke_width(2)))?,
            };
            let legend = palette::dash(s.variant).map_or(18, |(d, _)| d.max(4) as i32);
            drawn
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + legend, y)], c.stroke_width(3)));
            chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 5, c.filled())))?;
            for &(x, y) in &s.points {
                let knee = s.knee.as_ref().is_some_and(|k| f64::from(k.concurrency) == x);
                titles.push(PointTitle {
                    colour: Some(base),
                    at: chart.backend_coord(&(x, y)),
                    text: format!(
                        "{}: {} tok/s aggregate (steady window) at c={}{}",
                        s.name,
                        crate::domain::format::significant(y),
                        axis_number(x),
                        if knee { " — the knee" } else { "" }
                    ),
                });
            }
            // The knee: a ring around its point and its name beside it.
            if let Some(k) = &s.knee
                && let Some(&at) = s.points.iter().find(|p| p.0 == f64::from(k.concurrency))
            {
                chart.draw_series(std::iter::once(Circle::new(at, 10, c.stroke_width(2))))?;
                chart.draw_series(std::iter::once(Text::new(
                    format!("knee c={}", k.concurrency),
                    at,
                    (FONT, 13).into_font().color(&c),
                )))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    let svg = with_point_titles(svg, &titles);
    let colours = CandidateColours::of(series.iter().map(|s| s.candidate_id));
    let data = ChartData {
        x_label: "concurrency (log₂)".into(),
        y_label: "aggregate tok/s (steady window)".into(),
        x_log2: true,
        lines: true,
        series: series
            .iter()
            .map(|s| DataSeries {
                name: s.name.clone(),
                colour: colours.hex(s.candidate_id).into(),
                stroke: hex(s.stroke(&colours)),
                dash: dash_text(s.variant),
                points: s
                    .points
                    .iter()
                    .map(|&(x, y)| DataPoint::at(x, y, format!("c={}", axis_number(x)), figure(y, "tok/s")))
                    .collect(),
            })
            .collect(),
    };
    Some(Chart {
        id: "chart-throughput".into(),
        title: "Throughput vs concurrency".into(),
        caption: if let Some(knees) = knee_caption(series) {
            format!(
                "Aggregate output tok/s (steady window) at each load measured; the ringed point is each candidate's knee: {knees}."
            )
        } else if levels <= 1 {
            "Aggregate output tok/s at each load measured. This run measured one load per candidate; a concurrency \
             sweep draws the curve and shows where it bends (the knee)."
                .into()
        } else {
            "Aggregate output tok/s at each load measured; where a curve flattens, more concurrency buys only queueing."
                .into()
        },
        svg,
        data: Some(data),
    })
}

/// "swift-7b at c=8 (throughput: aggregate tok/s grew +2.0 % from c=8 to c=16 …)", the same
/// text the run page states; None without a sweep.
fn knee_caption(series: &[ThroughputSeries]) -> Option<String> {
    let parts: Vec<String> = series
        .iter()
        .filter_map(|s| {
            let k = s.knee.as_ref()?;
            Some(format!(
                "{} at c={} ({}: {})",
                s.name, k.concurrency, k.rule, k.explanation
            ))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn ttft_chart(j: &RunScorecard) -> Option<Chart> {
    let colours = CandidateColours::of(j.candidates.iter().map(|c| c.id));
    let series: Vec<(i64, String, Vec<f64>)> = j
        .candidates
        .iter()
        .zip(&j.summaries)
        .map(|(c, data)| {
            // Ascending, at most `TTFT_POINTS` evenly spaced order statistics: the same steps.
            let v = data
                .level(j.run.config.concurrency)
                .map(|l| l.ttft_ms.clone())
                .unwrap_or_default();
            (c.id, c.spec.name.clone(), v)
        })
        .collect();
    let xs = padded(series.iter().flat_map(|(_, _, v)| v.iter().copied()), true)?;
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(xs.clone(), 0.0f64..1.05)?;
        styled_mesh(&mut chart, "TTFT (ms)", "share of requests at or below", 13)
            .y_label_formatter(&|v| format!("{:.0} %", v * 100.0))
            .draw()?;
        for (id, name, values) in series.iter() {
            if values.is_empty() {
                continue;
            }
            let c = candidate_colour(&colours, *id);
            let n = values.len() as f64;
            // Empirical CDF as a step line.
            let mut steps = vec![(0.0f64.min(values[0]), 0.0)];
            for (k, v) in values.iter().enumerate() {
                steps.push((*v, k as f64 / n));
                steps.push((*v, (k + 1) as f64 / n));
            }
            chart
                .draw_series(LineSeries::new(steps, c.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    Some(Chart {
        id: "chart-ttft".into(),
        title: format!("TTFT distribution at c={}", j.run.config.concurrency),
        caption: "Each line climbs from 0 to 100 % of a candidate's successful requests as TTFT grows: further left \
                  is faster, a long flat tail is jitter."
            .into(),
        svg,
        data: Some(ttft_data(&series, &colours)),
    })
}

/// Points of the TTFT distribution a table can hold: every 5th percentile, p5 to p100.
const TTFT_TABLE_STEPS: usize = 20;

/// The TTFT distribution's figures: each candidate's p5, p10 … p100 (the order statistic at or
/// above each share, as the step line reads).
fn ttft_data(series: &[(i64, String, Vec<f64>)], colours: &CandidateColours) -> ChartData {
    ChartData {
        x_label: "TTFT (ms)".into(),
        y_label: "share of requests at or below (%)".into(),
        x_log2: false,
        lines: true,
        series: series
            .iter()
            .filter(|(_, _, v)| !v.is_empty())
            .map(|(id, name, v)| DataSeries {
                name: name.clone(),
                colour: colours.hex(*id).into(),
                stroke: colours.hex(*id).into(),
                dash: String::new(),
                points: (1..=TTFT_TABLE_STEPS)
                    .map(|k| {
                        let share = k as f64 / TTFT_TABLE_STEPS as f64;
                        let i = ((share * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
                        DataPoint::at(
                            v[i],
                            share * 100.0,
                            format!("p{:.0}", share * 100.0),
                            figure(v[i], "ms"),
                        )
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The accuracy chart's figures: a point per candidate (its speed on `axis`, its accuracy).
fn accuracy_data(
    points: &[(String, f64, f64, i64)],
    axis: SpeedAxis,
    c: u32,
    candidates: &[crate::domain::candidate::Candidate],
) -> ChartData {
    let colours = CandidateColours::of(candidates.iter().map(|c| c.id));
    ChartData {
        x_label: axis.label(c),
        y_label: "accuracy (%)".into(),
        x_log2: false,
        lines: false,
        series: points
            .iter()
            .map(|(name, x, y, id)| DataSeries {
                name: name.clone(),
                colour: colours.hex(*id).into(),
                stroke: colours.hex(*id).into(),
                dash: String::new(),
                points: vec![DataPoint::at(
                    *x,
                    y * 100.0,
                    figure(*x, axis.unit()),
                    format!("{:.1} %", y * 100.0),
                )],
            })
            .collect(),
    }
}

/// The first rule on `base` judged at the run's load (its threshold line), if any.
fn threshold_of(j: &RunScorecard, base: &str) -> Option<f64> {
    j.profile.rules.iter().find_map(|r| {
        let k = MetricKey::parse(&r.metric).ok()?;
        (k.base == base && k.concurrency.is_none_or(|c| c == j.run.config.concurrency)).then_some(r.value)
    })
}

/// The speed axis of the accuracy chart, in the caliber of the profile's speed rule: a
/// per-stream rule is drawn against per-stream decode, so its threshold line has an axis.
#[derive(Clone, Copy, PartialEq)]
enum SpeedAxis {
    DecodePerStream,
    Aggregate,
    /// Completed requests per second: what a profile judging request throughput asks, and the
    /// one speed no reasoning token inflates (a model that thinks at length streams many tokens
    /// per second yet answers few requests).
    Requests,
}

impl SpeedAxis {
    /// The metric of the profile's own speed rule: its aggregate tok/s rule, else its decode
    /// tok/s rule, else request throughput (whether the profile judges it or sets no speed rule).
    fn of(j: &RunScorecard) -> SpeedAxis {
        if threshold_of(j, "aggregate_tok_s").is_some() {
            SpeedAxis::Aggregate
        } else if threshold_of(j, "decode_tok_s_p50").is_some() {
            SpeedAxis::DecodePerStream
        } else {
            SpeedAxis::Requests
        }
    }

    fn rule_base(self) -> &'static str {
        match self {
            SpeedAxis::DecodePerStream => "decode_tok_s_p50",
            SpeedAxis::Aggregate => "aggregate_tok_s",
            SpeedAxis::Requests => "request_throughput",
        }
    }

    fn value(self, data: &CandidateSummary, c: u32) -> Option<f64> {
        let level = data.figures_at(c)?;
        match self {
            SpeedAxis::DecodePerStream => Some(level.decode_tok_s_per_stream.as_ref()?.p50),
            SpeedAxis::Aggregate => level.aggregate_tok_s,
            SpeedAxis::Requests => level.req_per_s,
        }
    }

    fn label(self, c: u32) -> String {
        match self {
            SpeedAxis::DecodePerStream => format!("decode tok/s per stream, p50 @c={c}"),
            SpeedAxis::Aggregate => format!("aggregate tok/s @c={c} (steady window)"),
            SpeedAxis::Requests => format!("completed requests per second @c={c} (steady window)"),
        }
    }

    /// The unit of its threshold line's label.
    fn unit(self) -> &'static str {
        match self {
            SpeedAxis::Requests => "req/s",
            _ => "tok/s",
        }
    }

    /// The chart's title.
    fn title(self) -> &'static str {
        match self {
            SpeedAxis::Requests => "Accuracy vs requests per second",
            _ => "Accuracy vs tok/s",
        }
    }
}

/// Each candidate's (name, speed on `axis` at concurrency `c`, accuracy, candidate id — its
/// colour, the same on every page), where both are known.
fn accuracy_points(j: &RunScorecard, axis: &SpeedAxis, c: u32) -> Vec<(String, f64, f64, i64)> {
    j.card
        .pareto
        .iter()
        .filter_map(|p| {
            let speed = axis.value(j.summaries.get(p.index)?, c)?;
            Some((p.name.clone(), speed, p.quality?, j.candidates.get(p.index)?.id))
        })
        .collect()
}

fn accuracy_chart(j: &RunScorecard) -> Option<Chart> {
    let accuracy_col = j.card.rows.iter().find(|r| r.rule.metric == "accuracy");
    let axis = SpeedAxis::of(j);
    let c = j.run.config.concurrency;
    let points = accuracy_points(j, &axis, c);
    if points.is_empty() {
        return None;
    }
    let min_accuracy = threshold_of(j, "accuracy");
    let min_tok_s = threshold_of(j, axis.rule_base());
    let mut titles = Vec::new();
    let xs = padded(points.iter().map(|p| p.1).chain(min_tok_s), true)?;
    let ys = 0.0f64..1.05;
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(xs.clone(), ys.clone())?;
        styled_mesh(&mut chart, axis.label(c), "accuracy", 13)
            .y_label_formatter(&|v| format!("{:.0} %", v * 100.0))
            .draw()?;
        let line = RGBColor(120, 120, 120);
        if let Some(a) = min_accuracy {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(xs.start, a), (xs.end, a)],
                    6,
                    4,
                    line.stroke_width(1),
                ))?
                .label(format!("minimum accuracy {:.0} %", a * 100.0))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], line.stroke_width(1)));
        }
        if let Some(t) = min_tok_s {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(t, ys.start), (t, ys.end)],
                    6,
                    4,
                    line.stroke_width(1),
                ))?
                .label(format!(
                    "minimum {} {}",
                    crate::domain::format::significant(t),
                    axis.unit()
                ))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], line.stroke_width(1)));
        }
        let colours = CandidateColours::of(j.candidates.iter().map(|c| c.id));
        for (name, x, y, id) in points.iter() {
            let c = candidate_colour(&colours, *id);
            chart
                .draw_series(std::iter::once(Circle::new((*x, *y), 6, c.filled())))?
                .label(name.as_str())
                .legend(move |(px, py)| Circle::new((px + 9, py), 5, c.filled()));
            titles.push(PointTitle {
                colour: Some(c),
                at: chart.backend_coord(&(*x, *y)),
                text: format!(
                    "{name}: accuracy {:.1} %, {} {}",
                    y * 100.0,
                    crate::domain::format::significant(*x),
                    axis.label(j.run.config.concurrency)
                ),
            });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    let svg = with_point_titles(svg, &titles);
    Some(Chart {
        id: "chart-accuracy".into(),
        title: axis.title().into(),
        caption: format!(
            "Each dot is a candidate, its speed in the caliber of the profile's speed rule ({}); dashed lines are the profile's minimums{}. Up and to the right is better.",
            axis.label(c),
            if accuracy_col.is_none() && min_tok_s.is_none() {
                " (this profile sets neither)"
            } else {
                ""
            }
        ),
        svg,
        data: Some(accuracy_data(&points, axis, c, &j.candidates)),
    })
}

/// Every chart there is data for.
pub fn all(j: &RunScorecard) -> Vec<Chart> {
    [
        throughput_chart(&throughput_series(j)),
        ttft_chart(j),
        accuracy_chart(j),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `12.3 ms`, `456 tok/s`: a chart's hover text says a figure exactly as its table does.
pub fn figure(v: f64, unit: &str) -> String {
    format!("{} {unit}", crate::domain::format::significant(v))
}

/// Latency vs concurrency (TTFT and E2E, p50 solid and p95 dashed) on a log₂ axis, each
/// candidate's knee marked by a dashed vertical line: where latency starts to climb.
pub fn latency_chart(series: &[ThroughputSeries]) -> Option<Chart> {
    let mut loads: Vec<f64> = series
        .iter()
        .flat_map(|s| s.latency.iter().map(|p| p.concurrency))
        .collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    if loads.len() < 2 {
        return None;
    }
    type Pick = fn(&LatencyPoint) -> Option<f64>;
    let lines: [(&str, Pick, bool); 4] = [
        ("TTFT p50", |p| p.ttft_p50, false),
        ("TTFT p95", |p| p.ttft_p95, true),
        ("E2E p50", |p| p.e2e_p50, false),
        ("E2E p95", |p| p.e2e_p95, true),
    ];
    let values = || {
        series
            .iter()
            .flat_map(|s| s.latency.iter())
            .flat_map(move |p| lines.into_iter().filter_map(move |(_, pick, _)| pick(p)))
    };
    let xs = log2_range(series.iter().flat_map(|s| s.latency.iter().map(|p| p.concurrency)))?;
    let ys = padded(values(), true)?;
    if series.iter().all(|s| s.latency.len() < 2) {
        return None;
    }
    let mut titles = Vec::new();
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = concurrency_axes(&root, xs.clone(), ys.clone(), "latency (ms), successful requests")?;
        let colours = CandidateColours::of(series.iter().map(|s| s.candidate_id));
        for (i, s) in series.iter().enumerate() {
            // p95 is dashed already: a later prompt size of the candidate is a shade of its
            // colour (its marks still name the candidate's colour).
            let base = candidate_colour(&colours, s.candidate_id);
            let c = s.stroke(&colours);
            for (label, pick, dashed) in &lines {
                let points: Vec<(f64, f64)> = s
                    .latency
                    .iter()
                    .filter_map(|p| Some((p.concurrency, pick(p)?)))
                    .collect();
                let name = format!("{} · {label}", s.name);
                let drawn = if *dashed {
                    chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, c.stroke_width(2)))?
                } else {
                    chart.draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))?
                };
                let dashed = *dashed;
                drawn.label(name.clone()).legend(move |(x, y)| {
                    if dashed {
                        PathElement::new(vec![(x, y), (x + 6, y)], c.stroke_width(2))
                    } else {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    }
                });
                // E2E points are triangles, TTFT points circles: told apart without colour.
                if label.starts_with("E2E") {
                    chart.draw_series(points.iter().map(|p| TriangleMarker::new(*p, 5, c.filled())))?;
                } else {
                    chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
                }
                for &(x, y) in &points {
                    titles.push(PointTitle {
                        colour: Some(base),
                        at: chart.backend_coord(&(x, y)),
                        text: format!("{name}: {} at c={}", figure(y, "ms"), axis_number(x)),
                    });
                }
            }
            if let Some(k) = &s.knee {
                let x = f64::from(k.concurrency);
                chart.draw_series(DashedLineSeries::new(
                    vec![(x, ys.start), (x, ys.end)],
                    3,
                    3,
                    c.stroke_width(1),
                ))?;
                chart.draw_series(std::iter::once(Text::new(
                    format!("knee c={}", k.concurrency),
                    (x, ys.end - (ys.end - ys.start) * (0.05 + 0.06 * i as f64)),
                    (FONT, 13).into_font().color(&c),
                )))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    Some(Chart {
        id: "chart-latency".into(),
        title: "Latency vs concurrency".into(),
        caption: match knee_caption(series) {
            Some(knees) => format!(
                "TTFT and E2E at each load measured (p50 solid, p95 dashed; E2E points triangles); the dashed vertical line is each knee: {knees}."
            ),
            None => "TTFT and E2E at each load measured (p50 solid, p95 dashed; E2E points triangles): where they climb, requests queue.".into(),
        },
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}

/// `0–2 s`: a time bucket as its chart's hover text and its table both name it.
pub fn interval(b: &crate::domain::timeline::Bucket) -> String {
    format!(
        "{}–{} s",
        axis_number(b.start_s),
        crate::domain::format::significant_trimmed(b.end_s)
    )
}

/// The run over time: tok/s, TTFT p50 and (when any) failed attempts per time bucket, one line
/// per candidate (`names` in the timeline's candidate order).
///
/// `colours`: the run's candidates' colours (`domain::palette`).
pub fn timeline_charts(
    t: &crate::domain::timeline::Timeline,
    names: &[String],
    colours: &CandidateColours,
) -> Vec<Chart> {
    let one = |spec: TimelineSpec| timeline_chart(t, names, colours, spec);
    let width = crate::domain::format::significant_trimmed(t.bucket_s);
    let any_errors = t.candidates.iter().any(|(_, b)| b.iter().any(|b| b.errors > 0));
    [
        one(TimelineSpec {
            id: "chart-tok-s-over-time",
            title: "Throughput over time",
            y_desc: "output tok/s (all streams)",
            unit: "tok/s",
            pick: |b| b.tok_s,
            caption: format!(
                "Output tokens of successful requests arriving in each {width} s interval, per second (warm-ups excluded)."
            ),
        }),
        one(TimelineSpec {
            id: "chart-ttft-over-time",
            title: "TTFT p50 over time",
            y_desc: "TTFT p50 (ms)",
            unit: "ms",
            pick: |b| b.ttft_p50_ms,
            caption: format!(
                "Median TTFT of the successful requests whose first token arrived in each {width} s interval."
            ),
        }),
        any_errors
            .then(|| {
                one(TimelineSpec {
                    id: "chart-errors-over-time",
                    title: "Errors over time",
                    y_desc: "failed attempts",
                    unit: "failed attempts",
                    pick: |b| Some(f64::from(b.errors)),
                    caption: format!("Failed attempts (retried or final) ending in each {width} s interval."),
                })
            })
            .flatten(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// One chart over time: what it shows of each bucket (`pick`), its unit and its words.
struct TimelineSpec {
    id: &'static str,
    title: &'static str,
    y_desc: &'static str,
    unit: &'static str,
    pick: fn(&crate::domain::timeline::Bucket) -> Option<f64>,
    caption: String,
}

/// A line per candidate of `spec`'s figure over the run's buckets.
fn timeline_chart(
    t: &crate::domain::timeline::Timeline,
    names: &[String],
    colours: &CandidateColours,
    spec: TimelineSpec,
) -> Option<Chart> {
    let mid = |b: &crate::domain::timeline::Bucket| (b.start_s + b.end_s) / 2.0;
    let x_end = t
        .candidates
        .iter()
        .flat_map(|(_, b)| b.last())
        .map(|b| b.end_s)
        .fold(t.bucket_s, f64::max);
    let lines: Vec<TimeLine> = t
        .candidates
        .iter()
        .enumerate()
        .map(|(i, (id, buckets))| {
            let name = names.get(i).map(String::as_str).unwrap_or("?");
            TimeLine {
                name: name.to_string(),
                slot: colours.slot(*id),
                points: buckets
                    .iter()
                    .filter_map(|b| {
                        let y = (spec.pick)(b)?;
                        Some((mid(b), y, format!("{name}, {}: {}", interval(b), figure(y, spec.unit))))
                    })
                    .collect(),
            }
        })
        .collect();
    over_time_chart(
        OverTime {
            id: spec.id.into(),
            title: spec.title.into(),
            y_desc: spec.y_desc.into(),
            caption: spec.caption,
            x_end,
        },
        &lines,
    )
}

/// One line of a chart over the run's time axis: its name, and its points (seconds since the
/// run's first measured request, value, the text a point shows on hover or focus).
pub struct TimeLine {
    pub name: String,
    /// Its colour's palette slot: the candidate's (`domain::palette`).
    pub slot: usize,
    pub points: Vec<(f64, f64, String)>,
}

/// The words of a chart over the run's time axis, and where the axis ends (seconds).
pub struct OverTime {
    pub id: String,
    pub title: String,
    pub y_desc: String,
    pub caption: String,
    pub x_end: f64,
}

/// A chart over the run's time axis, a coloured line per `lines` entry (the timeline's charts
/// and the telemetry's share it, so their axes read alike). None without a finite point.
pub fn over_time_chart(spec: OverTime, lines: &[TimeLine]) -> Option<Chart> {
    let xs = 0.0..spec.x_end.max(1e-9);
    let mut ys = padded(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)), true)?;
    // Headroom for the legend (a row per line) above the lines.
    ys.end += (ys.end - ys.start) * 0.12 * (lines.len() + 1) as f64;
    let mut titles = Vec::new();
    let svg = render_at((720, 280), |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(xs.clone(), ys.clone())?;
        styled_mesh(
            &mut chart,
            "seconds since the run's first measured request",
            spec.y_desc.as_str(),
            13,
        )
        .draw()?;
        for line in lines {
            let c = colour(line.slot);
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().map(|p| (p.0, p.1)),
                    c.stroke_width(2),
                ))?
                .label(line.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            chart.draw_series(line.points.iter().map(|p| Circle::new((p.0, p.1), 3, c.filled())))?;
            for (x, y, text) in &line.points {
                titles.push(PointTitle {
                    colour: Some(c),
                    at: chart.backend_coord(&(*x, *y)),
                    text: text.clone(),
                });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    Some(Chart {
        id: spec.id,
        title: spec.title,
        caption: spec.caption,
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}

/// One bar of the pass-rate chart.
pub struct PassRateBar {
    pub candidate: String,
    /// The candidate's place in the run (bars are grouped in this order).
    pub candidate_index: usize,
    /// The candidate's id (its colour, `domain::palette`).
    pub candidate_id: i64,
    pub grader: String,
    pub passed: u64,
    pub graded: u64,
}

/// `92.0 % (23 / 25)`: a bar's value as its hover text and the graders table both give it.
pub fn pass_rate_text(passed: u64, graded: u64) -> String {
    format!(
        "{:.1} % ({passed} / {graded})",
        passed as f64 / graded.max(1) as f64 * 100.0
    )
}

/// Pass rate per grader × candidate as horizontal bars, grouped by grader, each bar labelled
/// with its rate (colour is never the only cue: every bar names its candidate).
pub fn pass_rate_chart(bars: &[PassRateBar]) -> Option<Chart> {
    let colours = CandidateColours::of(bars.iter().map(|b| b.candidate_id));
    // Segment 0 is drawn at the bottom: reversed, the first bar reads first, at the top.
    let bars: Vec<&PassRateBar> = bars.iter().filter(|b| b.graded > 0).rev().collect();
    if bars.is_empty() {
        return None;
    }
    let n = bars.len() as i32;
    let labels: Vec<String> = bars
        .iter()
        .map(|b| crate::domain::validation::truncate(&format!("{} · {}", b.grader, b.candidate), 34))
        .collect();
    let mut titles = Vec::new();
    let height = (80 + 30 * bars.len()).min(900) as u32;
    let svg = render_at((720, height), |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(250)
            .build_cartesian_2d(0.0f64..1.15, (0..n).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(bars.len())
            .x_desc("pass rate (passed / graded answers)")
            .y_desc("grader · candidate")
            .label_style((FONT, 12))
            .max_light_lines(1)
            .light_line_style(GRID_LIGHT)
            .bold_line_style(GRID_BOLD)
            .x_label_formatter(&|v| {
                if *v <= 1.0 {
                    format!("{:.0} %", v * 100.0)
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        for (i, b) in bars.iter().enumerate() {
            let c = candidate_colour(&colours, b.candidate_id);
            let rate = b.passed as f64 / b.graded as f64;
            let i = i as i32;
            let mut bar = Rectangle::new(
                [(0.0, SegmentValue::Exact(i)), (rate, SegmentValue::Exact(i + 1))],
                c.filled(),
            );
            bar.set_margin(4, 4, 0, 0);
            chart.draw_series(std::iter::once(bar))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{:.1} %", rate * 100.0),
                (rate + 0.01, SegmentValue::CenterOf(i)),
                (FONT, 12).into_font().color(&BLACK),
            )))?;
            titles.push(PointTitle {
                colour: Some(c),
                at: chart.backend_coord(&(rate / 2.0, SegmentValue::CenterOf(i))),
                text: format!("{} · {}: {}", b.grader, b.candidate, pass_rate_text(b.passed, b.graded)),
            });
        }
        root.present()
    })?;
    Some(Chart {
        id: "chart-pass-rates".into(),
        title: "Pass rate per grader and candidate".into(),
        caption: "Passed / graded answers of each grader, per candidate (failed requests have no answer to grade: see the failure rate).".into(),
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}

/// Fewest streamed chunks a request needs for its token timeline.
pub const TIMELINE_MIN_CHUNKS: usize = 4;

/// One request's token arrivals as a small step chart (tokens so far vs ms since send), from its
/// stored chunk timings; None with fewer than [`TIMELINE_MIN_CHUNKS`] chunks (a one-word answer
/// has no arrival pattern worth a chart, and a page lists dozens of attempts).
///
/// `answer_from_us`: when the request reasoned first, the offset of its first answer token —
/// drawn as a dashed line with the reasoning before it shaded, so the reader sees where thinking
/// ended and the answer began.
pub fn token_timeline(chunks: &crate::domain::chunks::Chunks, answer_from_us: Option<i64>) -> Option<String> {
    if chunks.len() < TIMELINE_MIN_CHUNKS {
        return None;
    }
    let mut total = 0u64;
    let mut steps: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    for (offset_us, n) in chunks {
        let at = offset_us as f64 / 1000.0;
        steps.push((at, total as f64));
        total += u64::from(n);
        steps.push((at, total as f64));
    }
    let end = steps.last().map(|p| p.0).unwrap_or(1.0).max(1e-3);
    let (first_us, first_tokens) = chunks.first()?;
    let first = first_us as f64 / 1000.0;
    let marks = [
        (
            (first, f64::from(first_tokens)),
            format!("first token at {}", figure(first, "ms")),
        ),
        ((end, total as f64), format!("{total} tokens by {}", figure(end, "ms"))),
    ];
    let answer_at = answer_from_us
        .map(|us| us as f64 / 1000.0)
        .filter(|a| *a > 0.0 && *a <= end);
    let mut titles = Vec::new();
    let svg = render_at((960, 220), |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..end * 1.02, 0.0..(total as f64 * 1.1).max(1.0))?;
        chart
            .configure_mesh()
            .x_desc("ms since send")
            .y_desc("tokens")
            .x_labels(5)
            .y_labels(3)
            // A drill-down page lists dozens of these: axes and labels without a grid keep
            // each one small.
            .disable_x_mesh()
            .disable_y_mesh()
            .label_style((FONT, 11))
            .x_label_formatter(&|v| axis_number(*v))
            .y_label_formatter(&|v| axis_number(*v))
            .draw()?;
        let c = colour(0);
        let top = (total as f64 * 1.1).max(1.0);
        if let Some(a) = answer_at {
            // Reasoning: from the first token to the first answer token, shaded.
            chart.draw_series(std::iter::once(Rectangle::new(
                [(first.min(a), 0.0), (a, top)],
                RGBColor(230, 159, 0).mix(0.15).filled(),
            )))?;
            chart.draw_series(DashedLineSeries::new(
                vec![(a, 0.0), (a, top)],
                5,
                4,
                RGBColor(120, 120, 120).stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("reasoning | answer from {}", figure(a, "ms")),
                (a, top * 0.95),
                (FONT, 11).into_font().color(&BLACK),
            )))?;
        }
        chart.draw_series(LineSeries::new(steps.clone(), c.stroke_width(2)))?;
        if let Some(a) = answer_at {
            let tokens_before = steps.iter().take_while(|p| p.0 < a).last().map_or(0.0, |p| p.1);
            titles.push(PointTitle {
                colour: None,
                at: chart.backend_coord(&(a, tokens_before)),
                text: format!(
                    "reasoning ended, answer began at {} (after {} reasoning tokens)",
                    figure(a, "ms"),
                    axis_number(tokens_before)
                ),
            });
        }
        for (at, text) in &marks {
            titles.push(PointTitle {
                colour: None,
                at: chart.backend_coord(at),
                text: text.clone(),
            });
        }
        root.present()
    })?;
    Some(with_point_titles(svg, &titles))
}

/// A workload's arrivals (`domain::workload::summary`): requests per bar of `bar_s` seconds
/// from its first arrival, as columns.
pub fn arrivals_chart(bar_s: f64, counts: &[u64]) -> Option<Chart> {
    if counts.is_empty() {
        return None;
    }
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.1;
    let end = bar_s * counts.len() as f64;
    let mut titles = Vec::new();
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0f64..end, 0.0f64..top)?;
        styled_mesh(
            &mut chart,
            "seconds from the first request",
            format!("requests per {} s", axis_number(bar_s)),
            12,
        )
        .draw()?;
        chart.draw_series(counts.iter().enumerate().map(|(i, &n)| {
            let x = i as f64 * bar_s;
            Rectangle::new([(x, 0.0), (x + bar_s, n as f64)], colour(0).filled())
        }))?;
        for (i, &n) in counts.iter().enumerate() {
            let x = i as f64 * bar_s;
            titles.push(PointTitle {
                colour: None,
                at: chart.backend_coord(&(x + bar_s / 2.0, n as f64 / 2.0)),
                text: format!("{}–{} s: {n} requests", axis_number(x), axis_number(x + bar_s)),
            });
        }
        root.present()
    })?;
    Some(Chart {
        id: "chart-arrivals".into(),
        title: "Arrivals".into(),
        caption: "Requests arriving in each interval, as recorded (a replay at 2× halves the intervals).".into(),
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 54, defect 3: a chart of values all 0 read "0, 0, 0" up its axis (a range of a
    /// billionth). Its axis now spans a readable range, and its labels differ.
    #[test]
    fn an_axis_over_values_all_zero_has_distinct_labels() {
        let range = padded([0.0, 0.0].into_iter(), true).unwrap();
        assert!(range.end >= 0.1, "{range:?}");
        let ticks: Vec<String> = (0..=4).map(|i| axis_number(range.end * f64::from(i) / 4.0)).collect();
        let mut distinct = ticks.clone();
        distinct.dedup();
        assert_eq!(distinct, ticks, "{ticks:?}");
        // A constant non-zero series keeps a span of its own size.
        let range = padded([250.0, 250.0].into_iter(), false).unwrap();
        assert!(
            range.start < 250.0 && range.end > 250.0 && range.end - range.start < 100.0,
            "{range:?}"
        );
    }

    /// A point's hover target is invisible in the SVG itself, not only under the page's CSS: a
    /// chart saved for a document showed a black 9 px disc over every point.
    #[test]
    fn hover_targets_are_invisible_without_the_pages_css() {
        let svg = with_point_titles(
            "<svg></svg>".into(),
            &[PointTitle {
                colour: None,
                at: (10, 20),
                text: "a <b>".into(),
            }],
        );
        assert!(svg.contains("r=\"9\" fill=\"#000\" fill-opacity=\"0\""), "{svg}");
        assert!(svg.contains("<title>a &lt;b&gt;</title>"), "{svg}");
    }

    /// Issue 54, defect 10: the token timeline was a 480 px thumbnail that did not mark where
    /// reasoning ended. It is drawn 960 px wide (and scales to its column), with the boundary
    /// as a dashed line, the reasoning before it shaded, and a mark naming when the answer began.
    #[test]
    fn the_token_timeline_is_full_width_and_marks_where_reasoning_ends() {
        let chunks: crate::domain::chunks::Chunks =
            vec![(100_000, 1), (150_000, 4), (200_000, 4), (400_000, 3), (450_000, 5)].into();
        let svg = token_timeline(&chunks, Some(400_000)).expect("five chunks draw a timeline");
        assert!(svg.contains("width=\"960\""), "{}", &svg[..200.min(svg.len())]);
        assert!(
            svg.contains("reasoning | answer from 400 ms"),
            "the boundary is labelled"
        );
        assert!(
            svg.contains("reasoning ended, answer began at 400 ms (after 9 reasoning tokens)"),
            "the mark on the boundary names it"
        );
        // Without reasoning: no boundary.
        let plain = token_timeline(&chunks, None).unwrap();
        assert!(!plain.contains("reasoning"));
        // Too few chunks: no chart (the page says so in words).
        let few: crate::domain::chunks::Chunks = vec![(1, 1), (2, 1)].into();
        assert!(token_timeline(&few, None).is_none());
    }
}
