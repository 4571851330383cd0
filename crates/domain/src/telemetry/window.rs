//! Scrapes turned into figures over a measured window. The methods, stated on the pages and in
//! docs/telemetry.md:
//! - a **gauge** (queue, running, KV use, GPU utilisation, power): mean and maximum of the periodic
//!   scrapes taken inside the window (the boundary scrapes only when there is none: they are the
//!   idle moments just before the first send and after the last end);
//! - a **counter** (preemptions, prefix-cache hits, tokens, energy): its increase from the scrape
//!   at the window's start to the one at its end, summing the rises between successive scrapes;
//!   a fall is a restart of the server, after which the counter's new value is all increase (as
//!   Prometheus's `increase()` reads a reset, without its extrapolation to the window's edges);
//!   the rate is the increase over the time between those two scrapes;
//! - a **histogram** (server TTFT, queue time): the bucket counts' increase over the window, and
//!   its quantiles by linear interpolation within the bucket the rank falls in, as Prometheus's
//!   `histogram_quantile()` does (the lowest bucket starts at 0; a rank in the `+Inf` bucket is
//!   the highest finite bound).
//!
//! The executor takes a scrape when a level starts and when it ends (`Boundary`), so a window's
//! counters begin and end exactly with its requests; without them (an endpoint too slow to answer
//! in time) the nearest periodic scrapes outside the window are used, and the figure says so.
use serde::{Deserialize, Serialize};

use super::catalogue::{Combine, Signal, SignalKind};
use super::exposition::{Exposition, Sample, parse};

/// Which of a candidate's telemetry sources a scrape came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The server's Prometheus endpoint (`metrics_url`).
    Server,
    /// The GPU exporter (`gpu_metrics_url`).
    Gpu,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Server => "server",
            Source::Gpu => "gpu",
        }
    }
    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "server" => Some(Source::Server),
            "gpu" => Some(Source::Gpu),
            _ => None,
        }
    }
}

/// A scrape the executor asked for at a level's edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Boundary {
    Start,
    End,
}

impl Boundary {
    pub fn as_str(self) -> &'static str {
        match self {
            Boundary::Start => "start",
            Boundary::End => "end",
        }
    }
    pub fn parse(s: &str) -> Option<Boundary> {
        match s {
            "start" => Some(Boundary::Start),
            "end" => Some(Boundary::End),
            _ => None,
        }
    }
}

/// One scrape of one source, on the client's wall clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Scrape {
    pub source: Source,
    /// Midpoint of the scrape's request, microseconds since the Unix epoch (the clock of every
    /// record's `sent_at_us`).
    pub at_us: i64,
    /// How long the scrape took, microseconds: its timestamp is good to half of that.
    pub took_us: i64,
    /// The level whose edge this scrape marks, if it was asked for at one.
    pub level: Option<u32>,
    pub boundary: Option<Boundary>,
    /// Why the scrape has no samples (refused, timed out, not Prometheus text).
    pub error: Option<String>,
    /// The kept samples: every recognised series and the ones named to keep.
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// The kept samples as exposition lines, the form the store keeps.
    pub fn samples_text(&self) -> String {
        let mut out = String::new();
        for s in &self.samples {
            out.push_str(&s.key());
            out.push(' ');
            out.push_str(&format_value(s.value));
            out.push('\n');
        }
        out
    }

    /// Reads `samples_text` back.
    pub fn samples_from_text(text: &str) -> Result<Vec<Sample>, super::exposition::ExpositionError> {
        Ok(parse(text)?.samples)
    }
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// The samples of a parsed exposition worth keeping: every recognised series, and those a
/// `keep` entry takes (`source::keep_list`: a family name, whose `_bucket`, `_sum`, `_count`
/// and `_total` series come with it, or a prefix ending in `*`).
pub fn kept_samples(exposition: Exposition, keep: &[String]) -> Vec<Sample> {
    exposition
        .samples
        .into_iter()
        .filter(|s| super::catalogue::recognise(&s.name).is_some() || is_kept(keep, &s.name))
        .collect()
}

/// Whether a sample named `name` is one a `keep` entry takes.
pub fn is_kept(keep: &[String], name: &str) -> bool {
    keep.iter().any(|k| {
        super::source::keeps(k, name)
            || ["_bucket", "_sum", "_count", "_total"]
                .iter()
                .any(|suffix| name.strip_suffix(suffix).is_some_and(|f| super::source::keeps(k, f)))
    })
}

/// A signal's value in one scrape: its first engine name the scrape carries, in the signal's
/// unit, its series combined (`Signal::combine`). None for a histogram or an absent signal.
pub fn signal_value(samples: &[Sample], signal: Signal) -> Option<f64> {
    if signal.kind() == SignalKind::Histogram {
        return None;
    }
    let known = signal
        .series()
        .iter()
        .find(|k| samples.iter().any(|s| s.name == k.name))?;
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == known.name && s.value.is_finite())
        .map(|s| s.value * known.scale)
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(match signal.combine() {
        Combine::Sum => values.iter().sum(),
        Combine::Mean => values.iter().sum::<f64>() / values.len() as f64,
        Combine::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// A histogram signal's cumulative buckets in one scrape, `(upper bound, count)` sorted by bound,
/// summed over label sets (several models or engines) bucket by bucket.
pub fn signal_buckets(samples: &[Sample], signal: Signal) -> Option<Vec<(f64, f64)>> {
    if signal.kind() != SignalKind::Histogram {
        return None;
    }
    let known = signal.series().iter().find(|k| {
        let bucket = format!("{}_bucket", k.name);
        samples.iter().any(|s| s.name == bucket)
    })?;
    let bucket = format!("{}_bucket", known.name);
    let mut out: Vec<(f64, f64)> = Vec::new();
    for s in samples.iter().filter(|s| s.name == bucket) {
        let Some(le) = s.label("le").and_then(super::exposition::parse_value) else {
            continue;
        };
        let le = le * known.scale;
        match out.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += s.value,
            None => out.push((le, s.value)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    (!out.is_empty()).then_some(out)
}

/// Increase of a counter over successive readings, a fall read as a restart from zero.
pub fn counter_increase(values: &[f64]) -> f64 {
    values
        .windows(2)
        .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
        .sum()
}

/// The `q` quantile of cumulative buckets by linear interpolation inside the bucket holding the
/// rank (Prometheus's `histogram_quantile`). None without observations or a `+Inf` bucket.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let &(last_bound, total) = buckets.last()?;
    if last_bound != f64::INFINITY || total <= 0.0 || buckets.len() < 2 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for (i, &(bound, count)) in buckets.iter().enumerate() {
        if count >= rank && count > below {
            if bound == f64::INFINITY {
                return Some(buckets[i - 1].0);
            }
            if i == 0 && bound <= 0.0 {
                return Some(bound);
            }
            return Some(lower + (bound - lower) * (rank - below) / (count - below));
        }
        lower = bound;
        below = count;
    }
    Some(buckets[buckets.len() - 2].0)
}

/// The bucket-by-bucket increase of a histogram between two scrapes (a bucket that fell was
/// reset: its new count is all increase).
fn bucket_increase(start: &[(f64, f64)], end: &[(f64, f64)]) -> Vec<(f64, f64)> {
    end.iter()
        .map(|&(le, c)| {
            let before = start.iter().find(|(b, _)| *b == le).map(|(_, c)| *c).unwrap_or(0.0);
            (le, if c >= before { c - before } else { c })
        })
        .collect()
}

/// A measured window on the client's clock, microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub from_us: i64,
    pub to_us: i64,
    /// The level whose boundary scrapes delimit the window, when it has them.
    pub level: Option<u32>,
}

impl Window {
    pub fn seconds(&self) -> f64 {
        (self.to_us - self.from_us).max(0) as f64 / 1e6
    }
}

/// One signal over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalSummary {
    pub signal: Signal,
    /// Gauges: mean and maximum of the scrapes inside the window.
    pub mean: Option<f64>,
    pub max: Option<f64>,
    /// Counters: increase over the window, and per second.
    pub increase: Option<f64>,
    pub rate_per_s: Option<f64>,
    /// Histograms: observations in the window and their p50/p99 (interpolated in buckets).
    pub observations: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// Scrapes the figure rests on.
    pub scrapes: usize,
    /// True when the window's own boundary scrapes were missing and the nearest periodic ones
    /// outside it were used: the counter includes a little of what happened around the window.
    pub approximate: bool,
}

/// The scrapes of one source that bound and fill `window`: the start, those inside, the end.
fn window_scrapes<'a>(scrapes: &'a [Scrape], window: &Window) -> (Vec<&'a Scrape>, bool) {
    let ok: Vec<&Scrape> = scrapes.iter().filter(|s| s.error.is_none()).collect();
    let marked = |b: Boundary| {
        ok.iter()
            .copied()
            .find(|s| window.level.is_some() && s.level == window.level && s.boundary == Some(b))
    };
    let (start, end, exact) = match (marked(Boundary::Start), marked(Boundary::End)) {
        (Some(s), Some(e)) => (Some(s), Some(e), true),
        _ => (
            ok.iter()
                .copied()
                .filter(|s| s.at_us <= window.from_us)
                .max_by_key(|s| s.at_us),
            ok.iter()
                .copied()
                .filter(|s| s.at_us >= window.to_us)
                .min_by_key(|s| s.at_us),
            false,
        ),
    };
    let mut out: Vec<&Scrape> = Vec::new();
    out.extend(start);
    let (from, to) = (
        start.map(|s| s.at_us).unwrap_or(window.from_us),
        end.map(|s| s.at_us).unwrap_or(window.to_us),
    );
    out.extend(
        ok.iter()
            .copied()
            .filter(|s| s.at_us > from && s.at_us < to && s.boundary.is_none()),
    );
    out.extend(end);
    out.sort_by_key(|s| s.at_us);
    out.dedup_by_key(|s| (s.at_us, s.boundary));
    (out, !exact)
}

/// Every recognised signal the scrapes carry, summarised over `window`.
pub fn summarise(scrapes: &[Scrape], window: &Window) -> Vec<SignalSummary> {
    let (inside, approximate) = window_scrapes(scrapes, window);
    let mut out = Vec::new();
    if inside.is_empty() {
        return out;
    }
    let span_s = match (inside.first(), inside.last()) {
        (Some(a), Some(b)) if b.at_us > a.at_us => (b.at_us - a.at_us) as f64 / 1e6,
        _ => 0.0,
    };
    for signal in Signal::ALL {
        let mut summary = SignalSummary {
            signal,
            mean: None,
            max: None,
            increase: None,
            rate_per_s: None,
            observations: None,
            p50: None,
            p99: None,
            scrapes: 0,
            approximate,
        };
        match signal.kind() {
            SignalKind::Gauge => {
                let of = |scrapes: &mut dyn Iterator<Item = &&Scrape>| -> Vec<f64> {
                    scrapes.filter_map(|s| signal_value(&s.samples, signal)).collect()
                };
                // The periodic scrapes inside the window; its edges only when there are none
                // (a level shorter than the interval): an edge is the idle moment before the
                // first send or after the last end.
                let mut values = of(&mut inside
                    .iter()
                    .filter(|s| s.at_us > window.from_us && s.at_us < window.to_us && s.boundary.is_none()));
                if values.is_empty() {
                    values = of(&mut inside.iter());
                }
                if values.is_empty() {
                    continue;
                }
                summary.scrapes = values.len();
                summary.mean = Some(values.iter().sum::<f64>() / values.len() as f64);
                summary.max = values.iter().copied().reduce(f64::max);
                summary.approximate = false;
            }
            SignalKind::Counter => {
                let values: Vec<f64> = inside.iter().filter_map(|s| signal_value(&s.samples, signal)).collect();
                if values.len() < 2 {
                    continue;
                }
                let increase = counter_increase(&values);
                summary.scrapes = values.len();
                summary.increase = Some(increase);
                summary.rate_per_s = (span_s > 0.0).then(|| increase / span_s);
            }
            SignalKind::Histogram => {
                let first = inside.first().and_then(|s| signal_buckets(&s.samples, signal));
                let last = inside.last().and_then(|s| signal_buckets(&s.samples, signal));
                let (Some(first), Some(last)) = (first, last) else {
                    continue;
                };
                let buckets = bucket_increase(&first, &last);
                summary.scrapes = 2;
                summary.observations = buckets.last().map(|(_, c)| *c);
                summary.p50 = histogram_quantile(0.5, &buckets);
                summary.p99 = histogram_quantile(0.99, &buckets);
            }
        }
        out.push(summary);
    }
    out
}

/// Find a signal's summary.
pub fn find(summaries: &[SignalSummary], signal: Signal) -> Option<&SignalSummary> {
    summaries.iter().find(|s| s.signal == signal)
}

/// How the energy over a window was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergyMethod {
    /// The exporter's energy counter (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`), its increase.
    EnergyCounter,
    /// Power scrapes integrated over time by the trapezoid rule.
    PowerIntegrated,
}

impl EnergyMethod {
    pub fn label(self) -> &'static str {
        match self {
            EnergyMethod::EnergyCounter => "increase of the exporter's energy counter",
            EnergyMethod::PowerIntegrated => "power scrapes integrated over the window (trapezoid rule)",
        }
    }
}

/// Joules the GPUs drew over `window`: from the energy counter when the exporter has one, else
/// the power scrapes integrated. None with fewer than two usable scrapes.
pub fn energy_joules(gpu_scrapes: &[Scrape], window: &Window) -> Option<(f64, EnergyMethod)> {
    let (inside, _) = window_scrapes(gpu_scrapes, window);
    let energy: Vec<f64> = inside
        .iter()
        .filter_map(|s| signal_value(&s.samples, Signal::GpuEnergy))
        .collect();
    if energy.len() >= 2 {
        return Some((counter_increase(&energy), EnergyMethod::EnergyCounter));
    }
    let power: Vec<(f64, f64)> = inside
        .iter()
        .filter_map(|s| signal_value(&s.samples, Signal::GpuPower).map(|w| (s.at_us as f64 / 1e6, w)))
        .collect();
    if power.len() < 2 {
        return None;
    }
    let joules = power
        .windows(2)
        .map(|p| (p[1].0 - p[0].0) * (p[0].1 + p[1].1) / 2.0)
        .sum();
    Some((joules, EnergyMethod::PowerIntegrated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(at_s: f64, text: &str) -> Scrape {
        Scrape {
            source: Source::Server,
            at_us: (at_s * 1e6) as i64,
            took_us: 1000,
            level: None,
            boundary: None,
            error: None,
            samples: parse(text).unwrap().samples,
        }
    }

    #[test]
    fn counter_increase_reads_a_fall_as_a_restart() {
        assert_eq!(counter_increase(&[10.0, 12.0, 15.0]), 5.0);
        // Restart between 15 and 3: the 3 since the restart count.
        assert_eq!(counter_increase(&[10.0, 15.0, 3.0, 4.0]), 5.0 + 3.0 + 1.0);
        assert_eq!(counter_increase(&[7.0]), 0.0);
    }

    #[test]
    fn histogram_quantile_interpolates_within_the_bucket_as_prometheus_does() {
        let buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)];
        // Rank 20 lies halfway through (0.1, 0.5]: 0.1 + 0.4 × (20 − 10)/(30 − 10) = 0.3.
        assert!((histogram_quantile(0.5, &buckets).unwrap() - 0.3).abs() < 1e-12);
        // Rank 5 in the first bucket, which starts at 0: 0.1 × 5/10.
        assert!((histogram_quantile(0.125, &buckets).unwrap() - 0.05).abs() < 1e-12);
        // A rank in +Inf gives the highest finite bound.
        let open = [(0.1, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(histogram_quantile(0.99, &open), Some(0.1));
        assert_eq!(histogram_quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[(0.1, 3.0)]), None);
    }

    #[test]
    fn signals_combine_series_and_use_one_naming() {
        let s = parse(
            "vllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 3\n\
             llamacpp:requests_deferred 9\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n\
             vllm:kv_cache_usage_perc{engine=\"1\"} 0.9\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 80\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 60\n",
        )
        .unwrap()
        .samples;
        assert_eq!(signal_value(&s, Signal::QueueLength), Some(5.0)); // vLLM's naming, summed; not + 9
        assert_eq!(signal_value(&s, Signal::KvCacheUsage), Some(0.9)); // the fullest engine
        assert!((signal_value(&s, Signal::GpuUtilisation).unwrap() - 0.7).abs() < 1e-12);
        assert_eq!(signal_value(&s, Signal::Preemptions), None);
    }

    #[test]
    fn a_levels_window_uses_its_boundary_scrapes() {
        let mut scrapes = vec![
            scrape(0.0, "vllm:num_preemptions_total 1\nvllm:num_requests_waiting 0"),
            scrape(1.0, "vllm:num_preemptions_total 4\nvllm:num_requests_waiting 2"),
            scrape(2.0, "vllm:num_preemptions_total 9\nvllm:num_requests_waiting 4"),
            scrape(3.0, "vllm:num_preemptions_total 10\nvllm:num_requests_waiting 0"),
        ];
        scrapes[1].level = Some(0);
        scrapes[1].boundary = Some(Boundary::Start);
        scrapes[3].level = Some(0);
        scrapes[3].boundary = Some(Boundary::End);
        let w = Window {
            from_us: 1_000_100,
            to_us: 2_900_000,
            level: Some(0),
        };
        let sums = summarise(&scrapes, &w);
        let p = find(&sums, Signal::Preemptions).unwrap();
        assert_eq!(p.increase, Some(6.0));
        assert_eq!(p.rate_per_s, Some(3.0));
        assert!(!p.approximate);
        // Gauges: the periodic scrape inside the window, not its idle edges.
        let q = find(&sums, Signal::QueueLength).unwrap();
        assert_eq!((q.mean, q.max, q.scrapes), (Some(4.0), Some(4.0), 1));
        // Without boundary scrapes: the nearest outside, flagged approximate.
        let w2 = Window { level: None, ..w };
        let p2 = summarise(&scrapes, &w2);
        let p2 = find(&p2, Signal::Preemptions).unwrap();
        assert_eq!(p2.increase, Some(6.0));
        assert!(p2.approximate);
    }

    #[test]
    fn histograms_are_summarised_over_the_window() {
        let a = "vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 5\nvllm:time_to_first_token_seconds_bucket{le=\"1\"} 5\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 5";
        let b = "vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 5\nvllm:time_to_first_token_seconds_bucket{le=\"1\"} 15\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 15";
        let scrapes = [scrape(0.0, a), scrape(1.0, b)];
        let w = Window {
            from_us: 100,
            to_us: 900_000,
            level: None,
        };
        let sums = summarise(&scrapes, &w);
        let t = find(&sums, Signal::ServerTtft).unwrap();
        assert_eq!(t.observations, Some(10.0));
        // All ten new observations in (0.1, 1]: p50 = 0.1 + 0.9 × 5/10.
        assert!((t.p50.unwrap() - 0.55).abs() < 1e-12);
    }

    #[test]
    fn energy_from_the_counter_or_from_power() {
        let counter = [
            scrape(
                0.0,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"} 1000000\nDCGM_FI_DEV_POWER_USAGE 100",
            ),
            scrape(
                2.0,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"} 1500000\nDCGM_FI_DEV_POWER_USAGE 300",
            ),
        ];
        let w = Window {
            from_us: 0,
            to_us: 2_000_000,
            level: None,
        };
        assert_eq!(energy_joules(&counter, &w), Some((500.0, EnergyMethod::EnergyCounter)));
        let power = [
            scrape(0.0, "DCGM_FI_DEV_POWER_USAGE 100"),
            scrape(2.0, "DCGM_FI_DEV_POWER_USAGE 300"),
        ];
        assert_eq!(energy_joules(&power, &w), Some((400.0, EnergyMethod::PowerIntegrated)));
    }

    #[test]
    fn kept_samples_round_trip_through_text() {
        let e = parse("vllm:num_requests_waiting{m=\"a\\\"b\"} 2\nother_total 3\nnoise 4\nx_bucket{le=\"+Inf\"} 1")
            .unwrap();
        let kept = kept_samples(e, &["other".to_string(), "x".to_string()]);
        assert_eq!(kept.len(), 3);
        let s = Scrape {
            source: Source::Server,
            at_us: 0,
            took_us: 0,
            level: None,
            boundary: None,
            error: None,
            samples: kept.clone(),
        };
        assert_eq!(Scrape::samples_from_text(&s.samples_text()).unwrap(), kept);
    }
}
