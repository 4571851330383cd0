//! Scraping a candidate's telemetry source during its measured load (`domain::telemetry`).
//!
//! One task per candidate unit, on the measurement runtime, with its own HTTP client (never the
//! measured pool: a scrape never takes or holds one of the candidate's connections). It scrapes
//! every declared source every `interval` and whenever the executor marks a level's start or end
//! (`Scraper::mark` waits for that scrape, so a window's counters begin and end with its
//! requests). Each scrape is timestamped on the client's wall clock (the clock of every record's
//! `sent_at_us`) at the midpoint of its request; parsing runs on the blocking pool, so a large
//! exposition never holds a worker thread the timers need. Scrapes are stored in batches; a
//! failed scrape is stored with its error and never stops the run. Warm-ups are not scraped:
//! the task starts after them.
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::domain::telemetry::source::usual_metrics_url;
use crate::domain::telemetry::window::kept_samples;
use crate::domain::telemetry::{Boundary, DEFAULT_SCRAPE_INTERVAL_S, Scrape, Source, parse};
use crate::store::DynStore;
use crate::wire::client::wall_clock_us;

/// The most a scrape may take; a slower endpoint's scrape is stored as failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// The most of an exposition read (a vLLM server's is tens of kB; a DCGM exporter's of 8 GPUs
/// a few hundred).
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Scrapes stored together.
const STORE_BATCH: usize = 10;

/// Where one source is scraped.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub source: Source,
    pub url: String,
}

/// A request for a boundary scrape, answered when it is taken.
struct Mark {
    level: u32,
    boundary: Boundary,
    done: oneshot::Sender<()>,
}

/// The running scraper of one candidate unit.
pub struct Scraper {
    marks: mpsc::Sender<Mark>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<u64, String>>,
    pub endpoints: Vec<Endpoint>,
    pub interval: Duration,
}

fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(SCRAPE_TIMEOUT)
        .connect_timeout(SCRAPE_TIMEOUT)
        .pool_max_idle_per_host(2)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(format!("bakeoff/{} (telemetry)", crate::VERSION))
        .build()
        .map_err(|e| e.to_string())
}

/// The endpoints to scrape: the declared ones. Returns them with a sentence for the run's
/// events (without a server endpoint it names the usual `/metrics` to declare: bakeoff never
/// scrapes what was not declared, so a hosted API is never sent requests it did not expect).
pub fn resolve(base_url: &str, metrics_url: Option<&str>, gpu_metrics_url: Option<&str>) -> (Vec<Endpoint>, String) {
    let mut endpoints = Vec::new();
    let mut said = Vec::new();
    match metrics_url {
        Some(url) => {
            endpoints.push(Endpoint {
                source: Source::Server,
                url: url.to_string(),
            });
            said.push(format!("server metrics at {}", crate::domain::redact::url(url)));
        }
        None => said.push(match usual_metrics_url(base_url) {
            Some(u) => format!("no server metrics URL declared (a server's usual one would be {u})"),
            None => "no server metrics URL declared".to_string(),
        }),
    }
    if let Some(url) = gpu_metrics_url {
        endpoints.push(Endpoint {
            source: Source::Gpu,
            url: url.to_string(),
        });
        said.push(format!("GPU metrics at {}", crate::domain::redact::url(url)));
    }
    (endpoints, said.join("; "))
}

async fn fetch(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let mut response = client.get(url).send().await.map_err(|e| describe(&e))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(format!(
                "the exposition is larger than {} MB",
                MAX_BODY_BYTES / (1024 * 1024)
            ));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "the exposition is not UTF-8".to_string())
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {} s", SCRAPE_TIMEOUT.as_secs())
    } else if e.is_connect() {
        "connection refused or unreachable".to_string()
    } else {
        // reqwest's message names the URL, which was validated and holds no credentials.
        e.to_string()
    }
}

/// One scrape of one endpoint.
async fn scrape(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    keep: &[String],
    mark: Option<(u32, Boundary)>,
) -> Scrape {
    let started = wall_clock_us();
    let fetched = fetch(client, &endpoint.url).await;
    let ended = wall_clock_us();
    let keep = keep.to_vec();
    let parsed = match fetched {
        Ok(text) => tokio::task::spawn_blocking(move || {
            parse(&text)
                .map(|e| kept_samples(e, &keep))
                .map_err(|e| format!("not Prometheus text: {e}"))
        })
        .await
        .unwrap_or_else(|e| Err(format!("parsing stopped: {e}"))),
        Err(e) => Err(e),
    };
    let (samples, error) = match parsed {
        Ok(s) => (s, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    Scrape {
        source: endpoint.source,
        at_us: started + (ended - started) / 2,
        took_us: ended - started,
        level: mark.map(|m| m.0),
        boundary: mark.map(|m| m.1),
        error,
        samples,
    }
}

impl Scraper {
    /// Starts scraping `endpoints` every `interval` (None: the default, 1 s) for one candidate
    /// of a run, keeping the catalogue's series and those `keep` names (`window::kept_samples`);
    /// None without endpoints.
    pub fn start(
        store: DynStore,
        run_id: i64,
        candidate_id: i64,
        endpoints: Vec<Endpoint>,
        interval: Option<Duration>,
        keep: Vec<String>,
    ) -> Result<Option<Scraper>, String> {
        if endpoints.is_empty() {
            return Ok(None);
        }
        let interval = interval.unwrap_or(Duration::from_secs_f64(DEFAULT_SCRAPE_INTERVAL_S));
        let client = client()?;
        let (marks, mut mark_rx) = mpsc::channel::<Mark>(4);
        let (stop, mut stop_rx) = oneshot::channel::<()>();
        let list = endpoints.clone();
        let task = tokio::spawn(async move {
            let mut pending: Vec<Scrape> = Vec::new();
            let mut stored = 0u64;
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let mark = tokio::select! {
                    biased;
                    _ = &mut stop_rx => break,
                    m = mark_rx.recv() => match m {
                        Some(m) => Some(m),
                        None => break,
                    },
                    _ = ticks.tick() => None,
                };
                let at = mark.as_ref().map(|m| (m.level, m.boundary));
                let scrapes = futures_util::future::join_all(list.iter().map(|e| scrape(&client, e, &keep, at))).await;
                pending.extend(scrapes);
                if let Some(m) = mark {
                    let _ = m.done.send(());
                }
                if pending.len() >= STORE_BATCH {
                    stored += store
                        .append_telemetry_scrapes(run_id, candidate_id, &pending)
                        .await
                        .map_err(|e| e.to_string())?;
                    pending.clear();
                }
            }
            if !pending.is_empty() {
                stored += store
                    .append_telemetry_scrapes(run_id, candidate_id, &pending)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(stored)
        });
        Ok(Some(Scraper {
            marks,
            stop,
            task,
            endpoints,
            interval,
        }))
    }

    /// Takes a scrape marking a level's start or end, and waits until it is taken.
    pub async fn mark(&self, level: u32, boundary: Boundary) {
        let (done, taken) = oneshot::channel();
        if self.marks.send(Mark { level, boundary, done }).await.is_ok() {
            let _ = tokio::time::timeout(SCRAPE_TIMEOUT * 2, taken).await;
        }
    }

    /// Stops scraping and stores what is left; returns how many scrapes were stored.
    pub async fn finish(self) -> Result<u64, String> {
        let _ = self.stop.send(());
        self.task.await.map_err(|e| e.to_string())?
    }
}
