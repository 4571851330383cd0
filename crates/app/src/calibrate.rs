//! `bakeoff calibrate`: starts the built-in mock and measures every level against it
//! (`engine::calibrate` measures and compares with the mock's ground truth).
//!
//! By default the mock is a process of its own (bakeoff's binary, `mock --listen 127.0.0.1:0`),
//! pinned to one core and bakeoff to another where the machine has two (with `taskset`, which
//! needs no unsafe code), so the figures are bakeoff's error, not contention it causes itself.
//! `MockPlacement::InProcess` keeps the mock on threads of this process, for comparison. Either
//! way the mock has its own runtime (two workers by default: one thread could not read new
//! requests promptly while writing ~60,000 chunks a second) and its CPU is not counted as
//! bakeoff's.
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::engine::calibrate::{
    CalibrateOptions, CalibrationLevel, CalibrationReport, LevelPurpose, LevelSpec, MockPlacement, MockUrls,
    level_specs, report, run_level, scrape_passes, tls_level_specs,
};
use crate::engine::run::harness::EXCLUDED_THREAD_PREFIX;
use crate::mock::{LISTENING_LINE, MockConfig, ModelProfile};

/// Ground-truth records kept: a whole level's (c=1,024 with short answers sends ~2,000 requests a
/// second), so every request can be matched.
const TRUTH_CAPACITY: usize = 100_000;

/// How long the mock may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the calibration; `progress` gets one line per level as it starts. With
/// `tls_levels`, those latency levels are run again over https, against a second mock served
/// over TLS with a loopback certificate made for the run (`openssl` needed).
pub async fn calibrate(options: &CalibrateOptions, progress: impl Fn(String)) -> anyhow::Result<CalibrationReport> {
    let specs = level_specs(options)?;
    let tls_specs = tls_level_specs(options);
    let mut profiles: Vec<ModelProfile> = Vec::new();
    for spec in specs.iter().chain(&tls_specs) {
        if !profiles.iter().any(|p| p.name == spec.model) {
            profiles.push(profile(spec));
        }
    }
    let threads = options.mock_threads.max(1);
    let store = crate::store::connect("sqlite::memory:").await?;
    let mut levels = Vec::new();
    levels.extend(run_levels(options, &profiles, None, &specs, &store, &progress).await?);
    if !tls_specs.is_empty() {
        let dir = TempDir::new("tls")?;
        let certs =
            crate::mock::tls::LoopbackCerts::make(&dir.0).context("making the https calibration's certificate")?;
        levels.extend(run_levels(options, &profiles, Some(&certs), &tls_specs, &store, &progress).await?);
    }
    Ok(report(options, threads, levels))
}

/// Starts the mock (over TLS with `tls`), runs `specs` against it, and stops it.
async fn run_levels(
    options: &CalibrateOptions,
    profiles: &[ModelProfile],
    tls: Option<&crate::mock::tls::LoopbackCerts>,
    specs: &[LevelSpec],
    store: &crate::store::DynStore,
    progress: &impl Fn(String),
) -> anyhow::Result<Vec<CalibrationLevel>> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let threads = options.mock_threads.max(1);
    let profiles = profiles.to_vec();
    let tls_files = tls.map(|c| (c.cert.clone(), c.key.clone()));
    let (mock, client_pin) = match &options.mock {
        MockPlacement::InProcess => {
            let mock = tokio::task::spawn_blocking(move || MockThread::start(profiles, threads, tls_files))
                .await
                .context("starting the mock")??;
            (RunningMock::Threads(mock), None)
        }
        MockPlacement::Process { exe } => {
            // Client on the first allowed core, mock on the second; one core: nothing to split.
            let cores = allowed_cores(&std::fs::read_to_string("/proc/self/status").unwrap_or_default());
            let split = (cores.len() >= 2).then(|| (cores[0], cores[1]));
            let exe = exe.clone();
            let mock = tokio::task::spawn_blocking(move || {
                MockProcess::start(&exe, &profiles, threads, split.map(|s| s.1), tls_files)
            })
            .await
            .context("starting the mock")??;
            let pin = split.and_then(|(client, _)| ClientPin::to(client));
            (RunningMock::Process(mock), pin)
        }
    };
    let not_pinned = || "any core".to_string();
    let ran = match (&mock, &client_pin) {
        (RunningMock::Threads(_), _) => format!("threads of bakeoff's process ({threads} workers)"),
        (RunningMock::Process(p), pin) => format!(
            "own process on {}; bakeoff on {}",
            p.core.map_or_else(not_pinned, |c| format!("core {c}")),
            pin.as_ref().map_or_else(not_pinned, |p| format!("core {}", p.core))
        ),
    };
    let ca_file = tls.map(|c| c.ca.display().to_string());
    let urls = MockUrls {
        base_url: mock.base_url(),
        root_url: mock.root_url(),
        process: mock.pid(),
        ran: &ran,
        ca_file: ca_file.as_deref(),
        scrape_telemetry: false,
    };
    // The ground truth is read over the mock's own scheme, trusting its CA.
    let mut http = reqwest::Client::builder();
    if let Some(certs) = tls {
        let pem = std::fs::read(&certs.ca).with_context(|| format!("reading {}", certs.ca.display()))?;
        http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem).context("the test CA")?);
    }
    let http = http.build().context("the ground truth's HTTP client")?;
    let mut levels = Vec::new();
    for spec in specs {
        // Scraping's cost is measured on the http latency levels, in passes without and with it.
        let compare = options.scrape_telemetry && spec.purpose == LevelPurpose::Latency && tls.is_none();
        for scraped in scrape_passes(compare, options.scrape_blocks) {
            let urls = MockUrls {
                scrape_telemetry: scraped,
                ..urls
            };
            levels.push(run_level(&http, store, &urls, spec, options.seconds_per_level, progress).await?);
        }
    }
    drop(mock);
    drop(client_pin);
    Ok(levels)
}

/// A directory of this process's, removed with what it holds on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> anyhow::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("bakeoff-calibrate-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The mock serving a calibration, stopped when dropped.
enum RunningMock {
    Threads(MockThread),
    Process(MockProcess),
}

impl RunningMock {
    fn base_url(&self) -> &str {
        match self {
            RunningMock::Threads(m) => &m.base_url,
            RunningMock::Process(m) => &m.base_url,
        }
    }
    fn root_url(&self) -> &str {
        match self {
            RunningMock::Threads(m) => &m.root_url,
            RunningMock::Process(m) => &m.root_url,
        }
    }
    fn pid(&self) -> Option<u32> {
        match self {
            RunningMock::Threads(_) => None,
            RunningMock::Process(m) => Some(m.pid()),
        }
    }
}

/// The mock profile that serves a level's conditions exactly (no jitter).
fn profile(spec: &LevelSpec) -> ModelProfile {
    ModelProfile {
        ttft_ms: spec.ttft_ms,
        inter_token_ms: Some(spec.inter_token_ms),
        tokens_per_chunk: spec.tokens_per_chunk,
        batch_first_chunk: spec.batch_first_chunk,
        jitter: 0.0,
        context_length: 1_000_000,
        default_max_tokens: spec.tokens,
        ..ModelProfile::named(spec.model)
    }
}

/// The mock on threads of its own (named `bakeoff-mock…`, so the harness does not count their
/// CPU): one current-thread runtime, or a multi-thread runtime with `threads` workers.
struct MockThread {
    base_url: String,
    root_url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}
impl MockThread {
    fn start(profiles: Vec<ModelProfile>, threads: u32, tls: Option<(PathBuf, PathBuf)>) -> anyhow::Result<MockThread> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(EXCLUDED_THREAD_PREFIX.to_string())
            .spawn(move || {
                let built = if threads <= 1 {
                    tokio::runtime::Builder::new_current_thread().enable_all().build()
                } else {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(threads as usize)
                        .thread_name(EXCLUDED_THREAD_PREFIX)
                        .enable_all()
                        .build()
                };
                let runtime = match built {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = addr_tx.send(Err(format!("mock runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let started = async {
                        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                        let config = MockConfig {
                            profiles,
                            answer_keys: Vec::new(),
                            seed: 42,
                        };
                        match tls {
                            Some((cert, key)) => {
                                let tls = crate::mock::tls::server_config(&cert, &key)
                                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                                crate::mock::spawn_tls(config, listener, TRUTH_CAPACITY, tls).await
                            }
                            None => crate::mock::spawn_with_log(config, listener, TRUTH_CAPACITY).await,
                        }
                    };
                    match started.await {
                        Ok(server) => {
                            let _ = addr_tx.send(Ok((server.base_url(), server.root_url())));
                            let _ = stop_rx.await;
                            let _ = server.shutdown().await;
                        }
                        Err(e) => {
                            let _ = addr_tx.send(Err(format!("starting the mock: {e}")));
                        }
                    }
                });
            })
            .context("starting the mock's thread")?;
        let (base_url, root_url) = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .context("the mock did not start within 10 s")?
            .map_err(anyhow::Error::msg)?;
        Ok(MockThread {
            base_url,
            root_url,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for MockThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The mock as a process of its own (`EXE mock …`), killed when dropped.
struct MockProcess {
    child: Child,
    base_url: String,
    root_url: String,
    /// The core it is pinned to (None: not pinned).
    core: Option<u32>,
}

impl MockProcess {
    /// Starts `exe mock` serving `profiles` on a free loopback port, with `threads` runtime
    /// workers, pinned to `core` when `taskset` can pin it (else unpinned).
    fn start(
        exe: &Path,
        profiles: &[ModelProfile],
        threads: u32,
        core: Option<u32>,
        tls: Option<(PathBuf, PathBuf)>,
    ) -> anyhow::Result<MockProcess> {
        let file = ProfilesFile::write(profiles)?;
        let command = |pinned: Option<u32>| {
            let mut c = match pinned {
                Some(core) => {
                    let mut c = Command::new("taskset");
                    c.arg("-c").arg(core.to_string()).arg(exe);
                    c
                }
                None => Command::new(exe),
            };
            c.args(["--log", "warn", "mock", "--listen", "127.0.0.1:0", "--seed", "42"])
                .arg("--truth-capacity")
                .arg(TRUTH_CAPACITY.to_string())
                .arg("--profiles")
                .arg(&file.0)
                .args(tls.iter().flat_map(|(cert, key)| {
                    [
                        "--tls-cert".as_ref(),
                        cert.as_os_str(),
                        "--tls-key".as_ref(),
                        key.as_os_str(),
                    ]
                }))
                .env("TOKIO_WORKER_THREADS", threads.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            c
        };
        // No `taskset` (or it refuses): the mock runs unpinned, and the report says so.
        let (mut child, core) = match core.map(|c| (command(Some(c)).spawn(), c)) {
            Some((Ok(child), c)) => (child, Some(c)),
            _ => (
                command(None)
                    .spawn()
                    .with_context(|| format!("starting the mock process {}", exe.display()))?,
                None,
            ),
        };
        let stdout = child.stdout.take().context("the mock process's standard output")?;
        let (line_tx, line_rx) = std::sync::mpsc::channel();
        // Reads the listening line, then drains the rest so the mock never blocks on a full pipe.
        std::thread::Builder::new()
            .name(format!("{EXCLUDED_THREAD_PREFIX}-stdout"))
            .spawn(move || {
                let mut reader = std::io::BufReader::new(stdout);
                let mut line = String::new();
                let _ = line_tx.send(reader.read_line(&mut line).map(|_| line));
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            })
            .context("starting the mock's output reader")?;
        let mut mock = MockProcess {
            child,
            base_url: String::new(),
            root_url: String::new(),
            core: None,
        };
        let line = line_rx
            .recv_timeout(START_TIMEOUT)
            .context("the mock process did not start within 10 s")?
            .context("reading the mock process's output")?;
        let Some(root) = line.trim().strip_prefix(LISTENING_LINE) else {
            anyhow::bail!("the mock process exited before listening (see its message above)");
        };
        mock.root_url = root.to_string();
        mock.base_url = format!("{root}/v1");
        // Pinned only if the kernel says so.
        mock.core = core.filter(|&c| {
            let status = std::fs::read_to_string(format!("/proc/{}/status", mock.pid())).unwrap_or_default();
            allowed_cores(&status) == [c]
        });
        drop(file);
        Ok(mock)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for MockProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The calibration profiles as a `[[model]]` TOML file for the mock process, removed on drop.
struct ProfilesFile(PathBuf);

impl ProfilesFile {
    fn write(profiles: &[ModelProfile]) -> anyhow::Result<ProfilesFile> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        #[derive(serde::Serialize)]
        struct File<'a> {
            model: &'a [ModelProfile],
        }
        let text = toml::to_string(&File { model: profiles }).context("writing the mock's profiles")?;
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("bakeoff-calibrate-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(ProfilesFile(path))
    }
}

impl Drop for ProfilesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Every thread of this process pinned to one core while calibrating (threads started later
/// inherit it); the cores allowed before are restored on drop.
struct ClientPin {
    core: u32,
    before: String,
}

impl ClientPin {
    /// None when `taskset` is missing or the kernel did not apply it.
    fn to(core: u32) -> Option<ClientPin> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let before = cpus_allowed_list(&status)?.to_string();
        taskset_all(&core.to_string()).then_some(())?;
        let now = std::fs::read_to_string("/proc/self/status").ok()?;
        (allowed_cores(&now) == [core]).then_some(ClientPin { core, before })
    }
}

impl Drop for ClientPin {
    fn drop(&mut self) {
        taskset_all(&self.before);
    }
}

/// `taskset -a -p -c LIST <this process>`: every thread of this process onto `list`.
fn taskset_all(list: &str) -> bool {
    Command::new("taskset")
        .args(["-a", "-p", "-c", list, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `Cpus_allowed_list` of a `/proc/…/status` text ("0-1", "0,2-3").
fn cpus_allowed_list(status: &str) -> Option<&str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
}

/// The cores a `/proc/…/status` text allows, in order (empty when unknown).
fn allowed_cores(status: &str) -> Vec<u32> {
    let mut cores = Vec::new();
    for part in cpus_allowed_list(status).unwrap_or_default().split(',') {
        let (from, to) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(from), Ok(to)) = (from.trim().parse::<u32>(), to.trim().parse::<u32>()) {
            cores.extend(from..=to);
        }
    }
    cores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_cores_reads_ranges_and_lists() {
        let status = "Name:\tbakeoff\nCpus_allowed:\t3\nCpus_allowed_list:\t0,2-4\n";
        assert_eq!(allowed_cores(status), vec![0, 2, 3, 4]);
        assert_eq!(allowed_cores("Cpus_allowed_list:\t1\n"), vec![1]);
        assert!(allowed_cores("no such line").is_empty());
    }
}
