//! The run page's parts computed from the run's records (progress, results table, first case
//! rows, per-level and quality reports, charts over time): worded and drawn here, so a terminal
//! run's are stored whole (`run_summaries`) and its page only prints them.
use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::charts::{self, Chart};
use super::format::{NOT_MEASURED, ms, pct_n, tok_s};
use super::metrics::{AGGREGATE, AGGREGATE_WHOLE_RUN, DECODE_PER_STREAM, E2E, TTFT};
use super::report::{LevelsView, QualityView, levels_view};
use crate::AppError;
use crate::domain::calibers::{ReadAfterSealing, RunFigures, RunLevels};
use crate::domain::candidate::Candidate;
use crate::domain::format::visible_controls;
use crate::domain::grading::case_passed;
use crate::domain::metrics::{CandidateSummary, summarise_candidate_knowing};
use crate::domain::rate_limit::RateLimitSummary;
use crate::domain::run::{Phase, RecordGroup, RequestRecord, Run};
use crate::domain::scorecard::CandidateRecords;
use crate::domain::timeline::Buckets;
use crate::domain::validation::truncate;
use crate::live::Live;
use crate::runs::{RunRecords, RunVersion, VersionOutline, store_summary, stored_summary};
use crate::store::DynStore;

/// Most per-case rows shown on the page (the full data is in the records).
pub const CASE_ROWS: usize = 100;
/// Characters of model output shown per case row.
const OUTPUT_EXCERPT: usize = 160;
/// Characters of an error's detail shown per case row.
const ERROR_EXCERPT: usize = 120;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressRow {
    pub candidate: String,
    /// Measured attempts, capped at `expected` for the bar.
    pub done: i64,
    pub expected: i64,
    pub text: String,
    /// Live figures over the last [`LIVE_WINDOW_S`] seconds of this candidate's requests.
    pub live: LiveFigures,
}

/// What a candidate is doing now: recent speed, latency, errors and the time left.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LiveFigures {
    /// Output tokens of requests that ended in the window / window length.
    pub tok_s: String,
    /// Median TTFT of the window's successful requests.
    pub ttft: String,
    /// Failed attempts by class, e.g. "http_5xx × 2, stream_cut × 1"; empty when none.
    pub errors: String,
    /// "about 3 min" from the pace so far; "—" before the first request or when done.
    pub eta: String,
}

/// Live figures look at the requests that ended in this many most recent seconds.
pub const LIVE_WINDOW_S: f64 = 30.0;

/// Candidates as columns, one row per figure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scorecard {
    pub columns: Vec<String>,
    pub rows: Vec<ScoreRow>,
    /// The conditions every figure in the table was measured under.
    pub conditions: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScoreRow {
    pub label: String,
    /// How the figure is computed (caliber), shown under the label.
    pub caliber: String,
    pub cells: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseRow {
    pub case_id: String,
    pub candidate: String,
    pub repetition: u32,
    pub attempt: u32,
    /// "ok" or the error class.
    pub status: String,
    pub error_detail: Option<String>,
    /// Some(true/false) when graded.
    pub passed: Option<bool>,
    pub ttft: String,
    pub output: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverTimeView {
    pub charts: Vec<Chart>,
    pub rows: Vec<OverTimeRow>,
    /// Why there is no chart (too short a run for a trend); the table still has the figures.
    #[serde(default)]
    pub note: Option<String>,
}

/// One candidate's figures over one time bucket, worded as the charts' hover texts word them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverTimeRow {
    pub candidate: String,
    pub interval: String,
    pub tok_s: String,
    pub ttft: String,
    pub errors: u32,
    /// The interval's middle, seconds since the run's first measured request (where the
    /// interactive chart puts the point; the table's words are its hover text).
    #[serde(default)]
    pub mid_s: String,
    /// The candidate's colour (`domain::palette`), as its lines are drawn.
    #[serde(default)]
    pub colour: String,
}

fn over_time_view(
    run: &Run,
    candidates: &[Candidate],
    timeline: crate::domain::timeline::Timeline,
) -> Option<OverTimeView> {
    let names: Vec<String> = run
        .candidate_ids
        .iter()
        .map(|&id| candidate_name(candidates, id))
        .collect();
    let colours = crate::domain::palette::CandidateColours::of(run.candidate_ids.iter().copied());
    let rows = timeline
        .candidates
        .iter()
        .zip(&names)
        .flat_map(|((id, buckets), name)| {
            let colour = colours.hex(*id);
            buckets.iter().map(move |b| OverTimeRow {
                candidate: name.clone(),
                colour: colour.to_string(),
                interval: charts::interval(b),
                tok_s: b.tok_s.map_or(NOT_MEASURED.into(), |v| charts::figure(v, "tok/s")),
                ttft: b.ttft_p50_ms.map_or(NOT_MEASURED.into(), |v| charts::figure(v, "ms")),
                errors: b.errors,
                mid_s: crate::domain::format::data((b.start_s + b.end_s) / 2.0),
            })
        })
        .collect();
    let buckets = timeline.candidates.first().map_or(0, |(_, b)| b.len());
    let (charts, note) = if buckets < crate::domain::timeline::MIN_CHART_BUCKETS {
        let span = timeline
            .candidates
            .first()
            .and_then(|(_, b)| b.last())
            .map_or(0.0, |b| b.end_s);
        (
            Vec::new(),
            Some(format!(
                "Not charted: the measured requests span {} s, fewer than {} intervals of {} s — too short for a trend over time. The figures are in the table below.",
                crate::domain::format::significant_trimmed(span),
                crate::domain::timeline::MIN_CHART_BUCKETS,
                crate::domain::format::significant_trimmed(crate::domain::timeline::MIN_BUCKET_S)
            )),
        )
    } else {
        (charts::timeline_charts(&timeline, &names, &colours), None)
    };
    Some(OverTimeView { charts, rows, note })
}

/// The quality section's bars: every grader of every candidate (`ids`: each view's candidate),
/// from the graders tables.
fn pass_rate_chart(quality: &[QualityView], ids: &[i64]) -> Option<Chart> {
    let mut bars: Vec<charts::PassRateBar> = quality
        .iter()
        .zip(ids)
        .enumerate()
        .flat_map(|(i, (q, &id))| {
            q.graders.iter().map(move |g| charts::PassRateBar {
                candidate: q.candidate.clone(),
                candidate_index: i,
                candidate_id: id,
                grader: g.grader.clone(),
                passed: g.passed,
                graded: g.graded,
            })
        })
        .collect();
    // Grouped by grader, candidates in run order within each.
    bars.sort_by(|a, b| a.grader.cmp(&b.grader).then(a.candidate_index.cmp(&b.candidate_index)));
    charts::pass_rate_chart(&bars)
}

/// (warm-up attempts, staged-start attempts) of one candidate: both excluded from every figure.
fn excluded_counts(records: &[RequestRecord], candidate_id: i64) -> (usize, usize) {
    let mine = || {
        records
            .iter()
            .filter(move |r| r.candidate_id == candidate_id && r.is_warmup)
    };
    (
        mine()
            .filter(|r| !matches!(r.phase, Phase::Smoke | Phase::Judge))
            .count(),
        mine().filter(|r| r.phase == Phase::Smoke).count(),
    )
}

pub fn candidate_name(candidates: &[Candidate], id: i64) -> String {
    candidates
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.spec.name.clone())
        .unwrap_or_else(|| format!("candidate #{id}"))
}

/// What the run page computes from the records (everything but the status and event log).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordParts {
    pub progress: Vec<ProgressRow>,
    pub scorecard: Option<Scorecard>,
    pub cases: Vec<CaseRow>,
    pub cases_note: Option<String>,
    pub levels: Option<LevelsView>,
    pub quality: Vec<QualityView>,
    pub pass_rates: Option<Chart>,
    pub over_time: Option<OverTimeView>,
    /// Per candidate whose provider sent rate-limit headers or answered 429: what they said.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitRow>,
    /// A run over conversation cases: figures by turn and by context, per candidate.
    #[serde(default)]
    pub conversations: Option<super::conversations::ConversationsView>,
    /// Tool figures per candidate and load level (`pages::tool_levels`); None without tool cases.
    #[serde(default)]
    pub tool_levels: Option<super::tool_levels::ToolLevelsView>,
    /// Structured output per candidate and level (schema validity, constraint cost); None
    /// without cases with a response_format.
    #[serde(default)]
    pub structured: Option<super::tool_levels::StructuredView>,
}

/// One candidate's rate-limit summary (`domain::rate_limit::RateLimitSummary::text`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RateLimitRow {
    pub candidate: String,
    pub text: String,
}

/// Cache kind of [`RecordParts`]; bump the version when its shape or content changes (3: a
/// sweep's results table pools no latencies; 4: the charts over time and the pass-rate bars;
/// 5: downtime over every repetition; 6: bins on a fixed grid; 7: the clock that timed each
/// candidate; 8: the providers' rate limits; 9: tool figures per level; 10: conversations by
/// turn; 11: levels past saturation; 12: both tool modes in one run, the prompt cache per level).
pub const RECORD_PARTS_KIND: &str = "run-page/12";

/// A terminal run's records never change, so its parts are computed once and kept in the
/// store (`run_summaries`); an unfinished run's are computed on every call.
pub async fn cached_record_parts(
    store: &DynStore,
    live: &Live<RecordParts>,
    run: &Run,
    version: &RunVersion,
    candidates: &[Candidate],
    records: &RunRecords,
) -> Result<RecordParts, AppError> {
    if !crate::runs::summaries_are_stored(run) {
        return live_record_parts(store, live, run, version, candidates).await;
    }
    if let Some(parts) = stored_summary(store, run, RECORD_PARTS_KIND).await? {
        return Ok(parts);
    }
    let version = version.outline(store).await?;
    let parts = record_parts(store, run, version, candidates, records).await?;
    store_summary(store, run, RECORD_PARTS_KIND, &parts).await?;
    Ok(parts)
}

/// An unfinished run's parts, shared by its views (`app::live`): bounded in cost however many
/// watch it and however often they refresh.
async fn live_record_parts(
    store: &DynStore,
    live: &Live<RecordParts>,
    run: &Run,
    version: &RunVersion,
    candidates: &[Candidate],
) -> Result<RecordParts, AppError> {
    live.get(run.id, async {
        let version = version.outline(store).await?;
        record_parts(store, run, version, candidates, &RunRecords::of(run.id)).await
    })
    .await
}

async fn record_parts(
    store: &DynStore,
    run: &Run,
    version: Option<&VersionOutline>,
    candidates: &[Candidate],
    records: &RunRecords,
) -> Result<RecordParts, AppError> {
    let page = PageContext::new(store, run, version, candidates).await?;
    let resumes = records.resumes(store).await?;
    let mut parts = Vec::with_capacity(run.candidate_ids.len());
    for &id in &run.candidate_ids {
        let mut timed = page.timed_parts(id, resumes);
        let (mine, levels) = records.of_candidate_leveled(store, id, &mut |r| timed.add(r)).await?;
        let timed = timed.finish().map_err(|e| records.corrupt(id, e))?;
        let data = CandidateRecords::new(id, &mine)
            .with_resumes(resumes)
            .with_levels(levels)
            .map_err(|e| records.corrupt(id, e))?;
        parts.push(page.candidate_parts(&mine, &data, timed));
    }
    Ok(page.assemble(store, parts).await?)
}

/// What the run page's parts need besides a candidate's records: read once, shared by every
/// candidate's parts.
pub struct PageContext<'a> {
    run: &'a Run,
    version: Option<&'a VersionOutline>,
    candidates: &'a [Candidate],
    /// Requests each candidate is to make.
    expected: i64,
    progress: Vec<crate::store::CandidateProgress>,
    /// The charts over time's axis (None before any measured request).
    grid: Option<crate::domain::timeline::Grid>,
    /// Case id → position in the file, for the case rows' order.
    order: HashMap<&'a str, usize>,
    weights: HashMap<&'a str, f64>,
    /// Each case's prompt bin when the page has a per-level table.
    bins: Option<HashMap<String, Option<u32>>>,
}

/// The run page's parts that read chunk times (its per-level table, its buckets over time), fed
/// one record at a time: from records held whole, or by the end step as it reads them, before
/// it lets their chunk times go.
pub struct TimedParts<'p> {
    candidate_id: i64,
    levels: Option<RunLevels<'p, super::report::BinOf<'p>>>,
    buckets: Option<Buckets>,
}

impl TimedParts<'_> {
    /// Fed every record of the candidate `groups` counts, in the store's order: see
    /// [`RunLevels::sealing`].
    pub fn sealing(mut self, groups: &[RecordGroup]) -> Self {
        self.levels = self.levels.map(|l| l.sealing(groups));
        self
    }

    /// Adds one of the run's records (another candidate's and warm-ups are left out).
    pub fn add(&mut self, r: &RequestRecord) {
        if let Some(levels) = &mut self.levels {
            levels.add(r);
        }
        if let Some(buckets) = &mut self.buckets
            && r.candidate_id == self.candidate_id
            && !r.is_warmup
        {
            buckets.add(r);
        }
    }

    /// Once every record was added: the figures, their chunk-time bins let go.
    pub fn finish(self) -> Result<TimedFigures, ReadAfterSealing> {
        if self.levels.as_ref().is_some_and(RunLevels::read_after_sealing) {
            return Err(ReadAfterSealing);
        }
        Ok(TimedFigures {
            levels: self.levels.map(RunLevels::finish),
            buckets: self.buckets.map(Buckets::finish),
        })
    }
}

/// [`TimedParts`] finished.
pub struct TimedFigures {
    levels: Option<RunFigures>,
    buckets: Option<Vec<crate::domain::timeline::Bucket>>,
}

/// What the run page takes from one candidate's records.
pub struct CandidateParts {
    id: i64,
    progress: ProgressRow,
    /// Measured attempts (warm-ups left out).
    measured: usize,
    summary: CandidateSummary,
    /// Its first [`CASE_ROWS`] rows, each with its place in the page's order and the record
    /// whose answer and error it shows.
    case_rows: Vec<(CaseRowPlace, ShownRecord, CaseRow)>,
    levels: Option<RunFigures>,
    quality: QualityView,
    buckets: Option<Vec<crate::domain::timeline::Bucket>>,
    /// Its rate-limit summary, when its records have one.
    rate_limit: Option<String>,
    /// Its conversation figures, when it sent conversation turns.
    conversations: Option<super::conversations::CandidateConversations>,
    /// Its tool figures per load level (empty without graded tool answers).
    tool_levels: Vec<crate::domain::tool_calls::levels::ToolLevel>,
    structured: Vec<super::tool_levels::StructuredRow>,
}

/// A case row's place: eval-set order, then candidate order, then repetition and attempt.
type CaseRowPlace = (usize, usize, u32, u32);

/// The record a case row shows, by its stored key. The records the parts are computed from hold
/// no answers or error texts (`RequestRecord::cut_for_summaries`): the rows' are read by these
/// once the page's rows are chosen.
struct ShownRecord {
    candidate_id: i64,
    case_id: String,
    phase: Phase,
    repetition: u32,
    attempt: u32,
}

type RecordKey<'a> = (i64, &'a str, Phase, u32, u32);

impl ShownRecord {
    fn of(r: &RequestRecord) -> ShownRecord {
        ShownRecord {
            candidate_id: r.candidate_id,
            case_id: r.case_id.to_string(),
            phase: r.phase,
            repetition: r.repetition,
            attempt: r.attempt,
        }
    }

    fn key(&self) -> RecordKey<'_> {
        (
            self.candidate_id,
            &self.case_id,
            self.phase,
            self.repetition,
            self.attempt,
        )
    }
}

fn fact_key(f: &crate::store::RecordFact) -> RecordKey<'_> {
    (f.candidate_id, &f.case_id, f.phase, f.repetition, f.attempt)
}

fn record_key(r: &RequestRecord) -> RecordKey<'_> {
    (r.candidate_id, &r.case_id, r.phase, r.repetition, r.attempt)
}

/// The records the case rows show, read whole by id (the rows' cases' outlines find the ids):
/// at most [`CASE_ROWS`] records, and the outlines of the cases they belong to.
async fn shown_records(
    store: &DynStore,
    run_id: i64,
    shown: &[&ShownRecord],
) -> Result<Vec<RequestRecord>, crate::store::StoreError> {
    let mut case_ids: Vec<String> = shown.iter().map(|s| s.case_id.clone()).collect();
    case_ids.sort_unstable();
    case_ids.dedup();
    let wanted: HashSet<RecordKey<'_>> = shown.iter().map(|s| s.key()).collect();
    let ids: Vec<i64> = store
        .list_case_outlines(run_id, &case_ids)
        .await?
        .iter()
        .filter(|o| wanted.contains(&fact_key(&o.fact)))
        .map(|o| o.id)
        .collect();
    Ok(store
        .list_records_by_id(run_id, &ids)
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

impl<'a> PageContext<'a> {
    pub async fn new(
        store: &DynStore,
        run: &'a Run,
        version: Option<&'a VersionOutline>,
        candidates: &'a [Candidate],
    ) -> Result<PageContext<'a>, AppError> {
        Ok(PageContext {
            run,
            version,
            candidates,
            expected: crate::gate::progress::expected_requests(run, version.map_or(0, |v| v.cases.len())),
            progress: store.run_progress(run.id).await?,
            grid: store
                .measured_span(run.id)
                .await?
                .map(crate::domain::timeline::Grid::of),
            order: version.map(VersionOutline::order).unwrap_or_default(),
            weights: version.map(VersionOutline::weights).unwrap_or_default(),
            bins: super::report::level_bins(run, version),
        })
    }

    /// One candidate's [`TimedParts`], before any record is added.
    pub fn timed_parts<'p>(&'p self, candidate_id: i64, resumes: &'p [i64]) -> TimedParts<'p> {
        TimedParts {
            candidate_id,
            levels: self
                .bins
                .as_ref()
                .map(|bins| super::report::candidate_levels(self.run, bins, candidate_id, resumes)),
            buckets: self.grid.map(|grid| grid.fill()),
        }
    }

    /// One candidate's parts from its records (another candidate's records are left out),
    /// prepared (`data`: resumed, its level figures shared with the other summaries of the same
    /// records), and its `timed` parts, fed every one of them and finished.
    pub fn candidate_parts(
        &self,
        records: &[RequestRecord],
        data: &CandidateRecords<'_>,
        timed: TimedFigures,
    ) -> CandidateParts {
        let (run, expected) = (self.run, self.expected);
        let (id, resumes) = (data.candidate_id, data.resumes.as_slice());
        let measured: Vec<&RequestRecord> = records
            .iter()
            .filter(|r| r.candidate_id == id && !r.is_warmup)
            .collect();

        // The bar counts requests (case × repetition) with at least one stored attempt, so
        // retries do not push it past 100 %; the text gives attempts, failures and warm-ups
        // from the store.
        let done = requests_done(&data.finals);
        let p = self.progress.iter().find(|p| p.candidate_id == id);
        let attempts = p.map(|p| p.measured_attempts).unwrap_or(0);
        let failed = p.map(|p| p.failed_attempts).unwrap_or(0);
        // Warm-ups and staged-start requests are both left out of every figure, but they are
        // different things: counted apart (the store's count holds both).
        let (warmups, staged) = excluded_counts(records, id);
        let mut text = format!("{done} of {expected} requests");
        if attempts > done {
            text.push_str(&format!(" · {attempts} attempts"));
        }
        if failed > 0 {
            text.push_str(&format!(
                " · {failed} failed attempt{}",
                if failed == 1 { "" } else { "s" }
            ));
        }
        if warmups > 0 {
            text.push_str(&format!(
                " · {warmups} warm-up{} (excluded)",
                if warmups == 1 { "" } else { "s" }
            ));
        }
        if staged > 0 {
            text.push_str(&format!(
                " · {staged} staged-start request{} (excluded)",
                if staged == 1 { "" } else { "s" }
            ));
        }
        let name = candidate_name(self.candidates, id);
        let progress = ProgressRow {
            candidate: name.clone(),
            done: done.min(expected),
            expected: expected.max(1),
            text,
            live: live_figures(&measured, done, expected, run.status.is_terminal()),
        };

        let weight = |case: &str| self.weights.get(case).copied().unwrap_or(1.0);
        let level_at = |c: u32| data.level_at(c);
        let summary = summarise_candidate_knowing(id, records, weight, resumes, Some(&level_at));

        let position = run.candidate_ids.iter().position(|&c| c == id).unwrap_or(usize::MAX);
        let place = |r: &RequestRecord| {
            (
                self.order.get(r.case_id.as_ref()).copied().unwrap_or(usize::MAX),
                position,
                r.repetition,
                r.attempt,
            )
        };
        let case_rows = first_in_order(&measured, CASE_ROWS, place)
            .into_iter()
            .map(|r| (place(r), ShownRecord::of(r), case_row(self.candidates, r)))
            .collect();

        CandidateParts {
            id,
            progress,
            measured: measured.len(),
            summary,
            case_rows,
            levels: timed.levels,
            quality: super::report::candidate_quality(run, name, records, id),
            buckets: timed.buckets,
            // Every attempt, warm-ups and retries too: a 429 anywhere is the provider's limit.
            rate_limit: RateLimitSummary::of(records.iter().filter(|r| r.candidate_id == id)).map(|s| s.text()),
            conversations: super::conversations::candidate_conversations(
                candidate_name(self.candidates, id),
                records,
                id,
            ),
            tool_levels: crate::domain::tool_calls::levels::tool_levels(&data.finals),
            structured: super::tool_levels::structured_rows(&candidate_name(self.candidates, id), &data.finals),
        }
    }

    /// The page's parts from every candidate's, in the run's candidate order; the answers and
    /// errors its case rows show are read here.
    pub async fn assemble(
        &self,
        store: &DynStore,
        parts: Vec<CandidateParts>,
    ) -> Result<RecordParts, crate::store::StoreError> {
        let (run, candidates) = (self.run, self.candidates);
        let measured: usize = parts.iter().map(|p| p.measured).sum();
        let mut case_rows: Vec<(CaseRowPlace, ShownRecord, CaseRow)> = Vec::with_capacity(CASE_ROWS * parts.len());
        let mut summaries = Vec::with_capacity(parts.len());
        let mut progress = Vec::with_capacity(parts.len());
        let mut levels = Vec::new();
        let mut quality = Vec::with_capacity(parts.len());
        let mut quality_ids = Vec::with_capacity(parts.len());
        let mut over_time = Vec::new();
        let mut rate_limits = Vec::new();
        let mut conversations = Vec::new();
        let mut tool_levels = Vec::new();
        let mut structured = Vec::new();
        for p in parts {
            conversations.extend(p.conversations);
            structured.extend(p.structured);
            if !p.tool_levels.is_empty() {
                tool_levels.push((candidate_name(candidates, p.id), p.tool_levels));
            }
            if let Some(text) = p.rate_limit {
                rate_limits.push(RateLimitRow {
                    candidate: candidate_name(candidates, p.id),
                    text,
                });
            }
            progress.push(p.progress);
            summaries.push(p.summary);
            case_rows.extend(p.case_rows);
            if let Some(figures) = p.levels {
                levels.push((candidate_name(candidates, p.id), figures));
            }
            quality.push(p.quality);
            quality_ids.push(p.id);
            if let Some(buckets) = p.buckets {
                over_time.push((p.id, buckets));
            }
        }
        // Stable: rows at the same place keep their send order, as when sorted all at once.
        case_rows.sort_by_key(|(place, _, _)| *place);
        case_rows.truncate(CASE_ROWS);
        let shown: Vec<&ShownRecord> = case_rows.iter().map(|(_, shown, _)| shown).collect();
        let records = shown_records(store, run.id, &shown).await?;
        let whole: HashMap<RecordKey<'_>, &RequestRecord> = records.iter().map(|r| (record_key(r), r)).collect();
        for (_, shown, row) in &mut case_rows {
            if let Some(r) = whole.get(&shown.key()) {
                row.output = truncate(&visible_controls(r.output()), OUTPUT_EXCERPT);
                row.error_detail = r.error_detail().map(|d| truncate(&visible_controls(d), ERROR_EXCERPT));
            }
        }
        let cases_note =
            (measured > CASE_ROWS).then(|| format!("Showing the first {CASE_ROWS} of {measured} measured requests."));
        let quality = super::report::quality_views(quality);
        Ok(RecordParts {
            progress,
            scorecard: (measured > 0).then(|| scorecard(run, self.version, candidates, summaries)),
            cases: case_rows.into_iter().map(|(_, _, row)| row).collect(),
            cases_note,
            levels: levels_view(run, levels),
            pass_rates: pass_rate_chart(&quality, &quality_ids),
            quality,
            over_time: self
                .grid
                .and_then(|grid| over_time_view(run, candidates, grid.timeline(over_time))),
            rate_limits,
            conversations: super::conversations::view(run, conversations),
            tool_levels: super::tool_levels::tool_levels_view(run.config.tool_mode, tool_levels),
            structured: (!structured.is_empty()).then(|| super::tool_levels::StructuredView {
                with_twins: structured.iter().any(|r| r.ttft_difference != NOT_MEASURED),
                rows: structured,
            }),
        })
    }
}

fn case_row(candidates: &[Candidate], r: &RequestRecord) -> CaseRow {
    CaseRow {
        case_id: r.case_id.to_string(),
        candidate: candidate_name(candidates, r.candidate_id),
        repetition: r.repetition,
        attempt: r.attempt,
        status: r
            .error_class
            .map(|e| e.as_str().to_string())
            .unwrap_or_else(|| "ok".into()),
        // The texts are read by the record's id once the page's rows are chosen
        // (`PageContext::assemble`).
        error_detail: None,
        passed: if r.succeeded() {
            case_passed(&r.grades)
        } else {
            Some(false)
        },
        ttft: ms(r.ttft_us().map(|us| us as f64 / 1000.0)),
        output: String::new(),
    }
}

/// The results table from every candidate's summary, in the run's candidate order.
fn scorecard(
    run: &Run,
    version: Option<&VersionOutline>,
    candidates: &[Candidate],
    summaries: Vec<CandidateSummary>,
) -> Scorecard {
    let concurrency = summaries
        .iter()
        .find_map(|s| s.concurrency)
        .unwrap_or(run.config.concurrency);
    let rows = score_rows(&summaries, concurrency);
    let conditions = conditions_text(run, version, &summaries, concurrency);
    Scorecard {
        columns: run
            .candidate_ids
            .iter()
            .map(|&id| candidate_name(candidates, id))
            .collect(),
        rows,
        conditions,
    }
}

/// A candidate's aggregate tok/s, or why it is not a figure: nothing succeeded, or requests
/// succeeded without any output token counted (0 tok/s would read as a measured standstill).
fn floored_tok_s(s: &CandidateSummary, v: Option<f64>) -> String {
    if s.failures >= s.requests {
        return tok_s(None);
    }
    match v {
        Some(0.0) => "not measured: no output token was counted".to_string(),
        v => tok_s(v),
    }
}

/// The results table's rows: a figure per row, a cell per candidate.
fn score_rows(summaries: &[CandidateSummary], concurrency: u32) -> Vec<ScoreRow> {
    let p50 = |d: &Option<crate::domain::metrics::Distribution>| d.as_ref().map(|d| d.p50);
    let p95 = |d: &Option<crate::domain::metrics::Distribution>| d.as_ref().map(|d| d.p95);
    let row = |label: String, caliber: &str, cell: &dyn Fn(&CandidateSummary) -> String| ScoreRow {
        label,
        caliber: caliber.to_string(),
        cells: summaries.iter().map(cell).collect(),
    };
    // Several load levels have no pooled figure: each level's is under "Per load level".
    let one_level = |s: &CandidateSummary, figure: String| {
        if s.load_levels > 1 {
            "per load level below".to_string()
        } else {
            figure
        }
    };
    vec![
        row(
            AGGREGATE.label_at(Some(concurrency)),
            AGGREGATE.definition,
            // With no successful request nothing was measured; 0 tok/s would read as a figure.
            &|s| one_level(s, floored_tok_s(s, s.aggregate_tok_s)),
        ),
        row(
            AGGREGATE_WHOLE_RUN.label_at(Some(concurrency)),
            AGGREGATE_WHOLE_RUN.definition,
            &|s| one_level(s, floored_tok_s(s, s.whole_run_tok_s)),
        ),
        row(
            format!("{} p50", TTFT.label),
            "send → first token, successful requests",
            &|s| one_level(s, ms(p50(&s.ttft_ms))),
        ),
        row(
            format!("{} p95", TTFT.label),
            "send → first token, successful requests",
            &|s| one_level(s, ms(p95(&s.ttft_ms))),
        ),
        row(
            format!("{} p50", E2E.label),
            "send → end of stream, successful requests",
            &|s| one_level(s, ms(p50(&s.e2e_ms))),
        ),
        row(
            format!("{} p50", DECODE_PER_STREAM.label),
            DECODE_PER_STREAM.definition,
            &|s| one_level(s, tok_s(p50(&s.decode_tok_s_per_stream))),
        ),
        row("accuracy".into(), "weighted share of graded cases passed", &|s| {
            pct_n(s.accuracy, s.graded)
        }),
        row(
            "failure rate".into(),
            "failed / measured requests (final attempts)",
            &|s| pct_n(s.failure_rate, s.requests),
        ),
        row(
            "output tokens from".into(),
            "where each request's token count came from",
            &|s| token_sources(s),
        ),
        row(
            "timed by".into(),
            "the clock that timed each request's events: the kernel's receive stamp of the segment \
             that carried them (over TLS, that completed their record), or user space (when \
             bakeoff's read returned: behind a proxy); a figure from both says mixed",
            &|s| s.clocks.label(),
        ),
        row(
            "requests".into(),
            "measured, final attempts (warm-ups excluded)",
            &|s| s.requests.to_string(),
        ),
    ]
}

/// The conditions every figure of the table was measured under, in words.
fn conditions_text(
    run: &Run,
    version: Option<&VersionOutline>,
    summaries: &[CandidateSummary],
    concurrency: u32,
) -> String {
    let c = &run.config;
    let conditions = format!(
        "concurrency {} · streaming {} · max_tokens {} · temperature {} · {} repetition{} · {} warm-up{} excluded",
        concurrency,
        if c.stream { "on" } else { "off" },
        c.max_tokens
            .map(|n| n.to_string())
            .or_else(|| version.and_then(|v| v.head.header.max_tokens).map(|n| n.to_string()))
            .unwrap_or_else(|| "candidate default".into()),
        c.temperature
            .map(|t| t.to_string())
            .or_else(|| version.and_then(|v| v.head.header.temperature).map(|t| t.to_string()))
            .unwrap_or_else(|| "candidate default".into()),
        c.repetitions,
        if c.repetitions == 1 { "" } else { "s" },
        c.warmup_requests,
        if c.warmup_requests == 1 { "" } else { "s" },
    );
    // A resumed run: its aggregates are per segment, and the table says so.
    let resumed = summaries
        .iter()
        .filter(|s| s.segments > 1)
        .max_by(|a, b| a.downtime_s.total_cmp(&b.downtime_s))
        .and_then(|s| super::report::resumed_text(s.segments, s.downtime_s));
    let conditions = match resumed {
        Some(text) => format!("{conditions} · {text}"),
        None => conditions,
    };
    // A load-shape run's levels differ in load: pooled figures are not figures of any one level.
    if matches!(c.load, crate::domain::load::LoadShape::Fixed) {
        conditions
    } else {
        format!(
            "{} · load {}, every level pooled (per-level figures under \"Per load level\"; the concurrency shown is the first level's)",
            conditions,
            super::report::shape_text(c)
        )
    }
}

/// `usage 20/20`, or `usage 12/20, chunks 8/20 · per chunk: as-streamed 20` (`token_caliber`);
/// "—" when no request had a count.
fn token_sources(s: &CandidateSummary) -> String {
    if s.token_sources.is_empty() {
        return NOT_MEASURED.to_string();
    }
    let sources = s
        .token_sources
        .iter()
        .map(|(src, n)| (src.as_str().to_string(), *n as u64))
        .collect();
    crate::domain::calibers::token_caliber(&sources, &s.chunk_attribution, s.requests as u64)
}

/// Recent speed, TTFT, error counts and ETA of one candidate, from its measured records.
/// Distinct requests (case × repetition × phase) among a candidate's final attempts, which are
/// distinct per load level too: a sweep measures one request at every level. Counted on a
/// sorted copy of the pointers, not a set of keys (a million requests: 4 MB, not 30).
fn requests_done(finals: &[&RequestRecord]) -> i64 {
    fn request(r: &RequestRecord) -> (&str, u32, &str) {
        (&r.case_id, r.repetition, r.phase.as_str())
    }
    let mut finals = finals.to_vec();
    finals.sort_unstable_by(|a, b| request(a).cmp(&request(b)));
    finals.dedup_by(|a, b| request(a) == request(b));
    finals.len() as i64
}

/// The first `n` of `records` in the order of `key`, ties kept in the order given; holds `n`,
/// not a sorted copy of them all.
fn first_in_order<'a, K: Ord>(
    records: &[&'a RequestRecord],
    n: usize,
    key: impl Fn(&RequestRecord) -> K,
) -> Vec<&'a RequestRecord> {
    let mut kept: std::collections::BinaryHeap<(K, usize)> = std::collections::BinaryHeap::with_capacity(n + 1);
    for (i, r) in records.iter().enumerate() {
        kept.push((key(r), i));
        if kept.len() > n {
            kept.pop();
        }
    }
    kept.into_sorted_vec().into_iter().map(|(_, i)| records[i]).collect()
}

/// The live figures of one candidate's measured attempts.
fn live_figures(mine: &[&RequestRecord], done: i64, expected: i64, terminal: bool) -> LiveFigures {
    if mine.is_empty() {
        return LiveFigures {
            tok_s: NOT_MEASURED.into(),
            ttft: NOT_MEASURED.into(),
            errors: String::new(),
            eta: NOT_MEASURED.into(),
        };
    }
    let end_of = |r: &RequestRecord| r.sent_at_us + r.end_us.get().unwrap_or(0);
    let first_send = mine.iter().map(|r| r.sent_at_us).min().unwrap_or(0);
    let last_end = mine.iter().map(|r| end_of(r)).max().unwrap_or(0);
    // The window ends at the latest stored end, so a finished candidate keeps its last figures.
    let window_start = (last_end - (LIVE_WINDOW_S * 1e6) as i64).max(first_send);
    let recent: Vec<&RequestRecord> = mine.iter().copied().filter(|r| end_of(r) >= window_start).collect();
    let tokens: u64 = recent
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| r.output_tokens)
        .map(u64::from)
        .sum();
    let window_s = (last_end - window_start) as f64 / 1e6;
    let tok_s_value = (window_s > 0.0 && tokens > 0).then(|| tokens as f64 / window_s);
    let ttft = crate::domain::metrics::Distribution::of(
        recent
            .iter()
            .filter(|r| r.succeeded())
            .filter_map(|r| r.ttft_us())
            .map(|us| us as f64 / 1000.0),
    );
    let mut classes: Vec<(&'static str, usize)> = Vec::new();
    for class in mine.iter().filter_map(|r| r.error_class) {
        match classes.iter_mut().find(|(c, _)| *c == class.as_str()) {
            Some((_, n)) => *n += 1,
            None => classes.push((class.as_str(), 1)),
        }
    }
    let errors = classes
        .iter()
        .map(|(c, n)| format!("{c} × {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let remaining = (expected - done).max(0);
    let elapsed_s = (last_end - first_send) as f64 / 1e6;
    let eta = if terminal || remaining == 0 {
        NOT_MEASURED.to_string()
    } else if done > 0 && elapsed_s > 0.0 {
        format!(
            "about {}",
            crate::domain::format::duration(elapsed_s / done as f64 * remaining as f64)
        )
    } else {
        NOT_MEASURED.to_string()
    };
    LiveFigures {
        tok_s: tok_s(tok_s_value),
        ttft: ms(ttft.map(|d| d.p50)),
        errors,
        eta,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::Phase;

    fn record(case: &str, repetition: u32, concurrency: u32) -> RequestRecord {
        RequestRecord {
            repetition,
            concurrency,
            ..RequestRecord::test_quality(case)
        }
    }

    #[test]
    fn a_request_measured_at_several_levels_is_done_once() {
        let records = [
            record("a", 0, 1),
            record("a", 0, 4),
            record("a", 1, 1),
            record("b", 0, 1),
            RequestRecord {
                phase: Phase::Soak,
                ..record("b", 0, 1)
            },
        ];
        let finals: Vec<&RequestRecord> = records.iter().collect();
        assert_eq!(requests_done(&finals), 4);
        assert_eq!(requests_done(&[]), 0);
    }

    #[test]
    fn the_first_rows_are_the_least_in_order_and_ties_keep_their_place() {
        let records: Vec<RequestRecord> = (0..50).map(|k| record(&format!("c{k}"), k % 7, k)).collect();
        let all: Vec<&RequestRecord> = records.iter().collect();
        let by_repetition = |r: &RequestRecord| r.repetition;
        let mut expected = all.clone();
        expected.sort_by_key(|r| by_repetition(r));
        expected.truncate(10);
        let first = first_in_order(&all, 10, by_repetition);
        let ids = |rs: &[&RequestRecord]| rs.iter().map(|r| r.case_id.to_string()).collect::<Vec<_>>();
        assert_eq!(ids(&first), ids(&expected));
        assert_eq!(first_in_order(&all, 100, by_repetition).len(), 50);
        assert!(first_in_order(&all, 0, by_repetition).is_empty());
    }
}
