//! A capacity search's report, as data: each candidate's "capacity @ SLO = 42 req/s [38–45]",
//! every probe level with its attainment interval, verdict, goodput and why it counts as past
//! saturation, the counting rules, and two charts: attainment vs load (interval band, target
//! line, bracket) and the latency-throughput frontier (per-user decode rate vs aggregate
//! throughput). The terminal prints it, the benchmark checks it.
use plotters::prelude::*;

use super::charts::{
    Chart, FONT, PointTitle, axis_number, candidate_colour, padded, render, styled_mesh, with_point_titles,
};
use crate::domain::capacity::LoadAxis;
use crate::domain::format::significant;
use crate::domain::palette::CandidateColours;
use crate::engine::run::capacity::CandidateCapacity;

/// How attainment is counted, in words: stated wherever attainment or goodput is shown.
pub const COUNTING_RULES: &str = "A request meets the SLO when it succeeded and met every objective set. Failed \
    requests (errors, timeouts) count as misses. Warm-up requests are sent before the level and never counted. \
    Requests still in flight when a run is cancelled leave no record and are not counted; a level with a time limit \
    stops sending at its end and counts the requests it sent once they end. Goodput counts the requests that met \
    the SLO ending inside the level's steady window, per second (req/s) and their output tokens per second (tok/s). \
    A level's attainment interval (95 %) is the wider of Wilson's (requests independent) and a batch-means interval \
    over ten contiguous batches of its requests in send order (requests under load are not independent: one queue \
    burst makes many neighbours miss together). The capacity is where the measured attainment crosses the target, \
    interpolated between the probes either side; its interval runs from the highest load whose 99 % interval lies \
    wholly at or above the target to the lowest load above it whose 99 % interval lies wholly below.";

/// One probe level, worded.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRow {
    pub run_id: i64,
    pub load: String,
    /// `93.3 % [90.0–95.7] (280 of 300)`.
    pub attainment: String,
    pub verdict: &'static str,
    pub goodput: String,
    /// Why the level counts as past saturation (empty when it does not).
    pub saturation: String,
}

/// One candidate's search, worded.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateReport {
    pub name: String,
    /// `capacity @ SLO = 42.0 req/s [38.6–45.4]`.
    pub headline: String,
    pub stopped: String,
    /// In the order probed.
    pub probes: Vec<ProbeRow>,
    /// A self-hosted candidate's cost at capacity (`CapacityEvidence::describe_cost`), or "".
    pub cost: String,
}

pub fn report(results: &[CandidateCapacity], axis: LoadAxis) -> Vec<CandidateReport> {
    results
        .iter()
        .map(|c| CandidateReport {
            name: c.name.clone(),
            headline: c
                .outcome
                .as_ref()
                .map_or("search cancelled before it ended".to_string(), |o| o.describe(axis)),
            stopped: c
                .outcome
                .as_ref()
                .map_or(String::new(), |o| o.reason.describe().to_string()),
            cost: String::new(),
            probes: c
                .probes
                .iter()
                .map(|p| {
                    let attainment = match (p.probe.attainment(), p.probe.interval()) {
                        (Some(a), Some(i)) => format!(
                            "{:.1} % [{:.1}–{:.1}] ({} of {})",
                            a * 100.0,
                            i.lo * 100.0,
                            i.hi * 100.0,
                            p.probe.met,
                            p.probe.requests
                        ),
                        _ => "— (no request counted)".to_string(),
                    };
                    let goodput = p.figures.as_ref().map_or("—".to_string(), |f| {
                        format!(
                            "{} req/s, {} tok/s",
                            f.goodput_req_per_s.map_or("—".into(), significant),
                            f.goodput_tok_s.map_or("—".into(), significant)
                        )
                    });
                    ProbeRow {
                        run_id: p.run_id,
                        load: axis.format(p.probe.load),
                        attainment,
                        verdict: p.probe.verdict(c.search.target).as_str(),
                        goodput,
                        saturation: p.signs.describe(),
                    }
                })
                .collect(),
        })
        .collect()
}

/// A find-capacity run's block on its page and scorecard: each candidate's capacity @ SLO with
/// its bracket and probes, the counting rules, and the two charts.
#[derive(Debug, Clone)]
pub struct CapacityView {
    pub candidates: Vec<CandidateReport>,
    pub charts: Vec<Chart>,
    /// `request rate` or `concurrency`.
    pub axis: &'static str,
    pub target: String,
    pub rules: &'static str,
}

/// The view of a run's stored searches (`run_capacity`); `going`: the run has not ended, so a
/// search without an outcome is still searching (else it was cut short).
/// `candidates` (the run's) and `accuracy` (a candidate id's, 0–1) give each self-hosted
/// candidate's cost at capacity.
pub fn capacity_view(
    results: &[CandidateCapacity],
    going: bool,
    candidates: &[crate::domain::candidate::Candidate],
    accuracy: impl Fn(i64) -> Option<f64>,
) -> Option<CapacityView> {
    let first = results.first()?;
    let axis = first.search.settings.axis;
    let mut reports = report(results, axis);
    for (c, r) in results.iter().zip(&mut reports) {
        if let Some(spec) = candidates.iter().find(|x| x.id == c.candidate_id).map(|x| &x.spec) {
            let evidence = crate::domain::capacity::CapacityEvidence::of(c, spec, accuracy(c.candidate_id));
            r.cost = evidence.describe_cost(spec).unwrap_or_default();
        }
        if c.outcome.is_none() {
            r.headline = if going {
                format!("searching: {} probe level(s) so far", c.probes.len())
            } else {
                format!(
                    "the search ended before it located the capacity ({} probe level(s))",
                    c.probes.len()
                )
            };
        }
    }
    Some(CapacityView {
        candidates: reports,
        charts: [attainment_chart(results, axis), frontier_chart(results)]
            .into_iter()
            .flatten()
            .collect(),
        axis: match axis {
            LoadAxis::Rate => "request rate",
            LoadAxis::Concurrency => "concurrency",
        },
        target: format!("{} %", axis_number(first.search.target * 100.0)),
        rules: COUNTING_RULES,
    })
}

/// Attainment (%) vs load per candidate: each probe a point, its 95 % interval (Wilson's and
/// batch means' hull) a band, the target a dashed line, each candidate's capacity interval
/// (highest load confidently meeting the target to the lowest above it confidently missing) a
/// shaded span.
pub fn attainment_chart(results: &[CandidateCapacity], axis: LoadAxis) -> Option<Chart> {
    let loads = || results.iter().flat_map(|c| c.probes.iter().map(|p| p.probe.load));
    let xs = padded(loads(), true)?;
    let target = results.first()?.search.target * 100.0;
    let mut titles = Vec::new();
    let svg = render(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(xs.clone(), 0.0..100.0)?;
        styled_mesh(
            &mut chart,
            format!("offered load ({})", axis.unit()),
            "requests meeting the SLO (%)",
            13,
        )
        .draw()?;
        let colours = CandidateColours::of(results.iter().map(|c| c.candidate_id));
        for c in results {
            let col = candidate_colour(&colours, c.candidate_id);
            if let Some(o) = &c.outcome
                && let (Some(lo), Some(hi)) = (o.lower, o.upper)
            {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(lo, 0.0), (hi, 100.0)],
                    col.mix(0.15).filled(),
                )))?;
            }
            let mut probes: Vec<_> = c.probes.iter().filter(|p| p.probe.requests > 0).collect();
            probes.sort_by(|a, b| a.probe.load.total_cmp(&b.probe.load));
            let band: Vec<(f64, f64)> = probes
                .iter()
                .filter_map(|p| Some((p.probe.load, p.probe.interval()?.hi * 100.0)))
                .chain(
                    probes
                        .iter()
                        .rev()
                        .filter_map(|p| Some((p.probe.load, p.probe.interval()?.lo * 100.0))),
                )
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(band, col.mix(0.25).filled())))?;
            let points: Vec<(f64, f64)> = probes
                .iter()
                .filter_map(|p| Some((p.probe.load, p.probe.attainment()? * 100.0)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), col.stroke_width(2)))?
                .label(c.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3)));
            for (p, &at) in probes.iter().zip(&points) {
                // A level past saturation is drawn hollow: its figures describe a growing queue.
                let mark = if p.probe.past_saturation {
                    Circle::new(at, 5, col.stroke_width(2))
                } else {
                    Circle::new(at, 5, col.filled())
                };
                chart.draw_series(std::iter::once(mark))?;
                titles.push(PointTitle {
                    colour: Some(col),
                    at: chart.backend_coord(&at),
                    text: format!(
                        "{}: {:.1} % met the SLO at {} ({}){}",
                        c.name,
                        at.1,
                        axis.format(at.0),
                        p.probe.verdict(c.search.target).as_str(),
                        if p.probe.past_saturation {
                            ", past saturation"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(xs.start, target), (xs.end, target)],
            BLACK.mix(0.6).stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("target {}", axis_number(target)),
            (xs.start, target),
            (FONT, 13).into_font(),
        )))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    Some(Chart {
        id: "chart-capacity".into(),
        title: "SLO attainment vs load".into(),
        caption: format!(
            "Share of each probe level's requests meeting every objective, with its 95 % Wilson interval (band); the \
             line is the target ({} %); the shaded span is each candidate's capacity bracket. Hollow points were past \
             saturation.",
            axis_number(target)
        ),
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}

/// The latency-throughput frontier: each probe level's per-user decode rate (median decode
/// tok/s per stream) against the aggregate throughput it was measured at, per candidate.
pub fn frontier_chart(results: &[CandidateCapacity]) -> Option<Chart> {
    let series: Vec<Vec<(f64, f64)>> = results
        .iter()
        .map(|c| {
            let mut points: Vec<(f64, f64)> = c
                .probes
                .iter()
                .filter_map(|p| {
                    let f = p.figures.as_ref()?;
                    Some((f.aggregate_tok_s?, f.decode_tok_s_per_stream.as_ref()?.p50))
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points
        })
        .collect();
    let xs = padded(series.iter().flatten().map(|p| p.0), true)?;
    let ys = padded(series.iter().flatten().map(|p| p.1), true)?;
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
            "aggregate output tok/s (steady window)",
            "decode tok/s per user (p50)",
            13,
        )
        .draw()?;
        let colours = CandidateColours::of(results.iter().map(|c| c.candidate_id));
        for (c, points) in results.iter().zip(&series) {
            let col = candidate_colour(&colours, c.candidate_id);
            chart
                .draw_series(LineSeries::new(points.clone(), col.stroke_width(2)))?
                .label(c.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3)));
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 5, col.filled())))?;
            for &(x, y) in points {
                titles.push(PointTitle {
                    colour: Some(col),
                    at: chart.backend_coord(&(x, y)),
                    text: format!(
                        "{}: {} tok/s per user at {} tok/s aggregate",
                        c.name,
                        significant(y),
                        significant(x)
                    ),
                });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()
    })?;
    Some(Chart {
        id: "chart-frontier".into(),
        title: "Latency-throughput frontier".into(),
        caption: "Each probe level's median decode rate per stream (what one user sees) against the aggregate \
                  throughput of the deployment at that level: moving right buys throughput with each user's speed."
            .into(),
        svg: with_point_titles(svg, &titles),
        data: None,
    })
}
