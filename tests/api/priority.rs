//! In a real `bakeoff serve`, the measurement runtime's threads outrank the threads serving
//! pages: every `bakeoff-engine` thread runs at the process's own priority, every thread of the
//! runtime serving pages (its workers and its blocking pool) `PAGE_THREAD_NICE` below, so a big
//! page being computed never delays a stream's timestamps on a busy machine; and the page
//! threads carry the name the harness leaves out of the client's CPU time.
use bakeoff::engine::run::runtime::{MAX_NICE, PAGE_THREAD_NAME, PAGE_THREAD_NICE, THREAD_NAME};

use crate::support::serve::{Server, http};

/// (thread id, name, nice value) of every thread of process `pid`, from `/proc`.
fn threads_of(pid: u32) -> Vec<(u32, String, i32)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads") {
        let path = task.expect("a thread").path();
        let tid = path
            .file_name()
            .and_then(|n| n.to_str()?.parse().ok())
            .expect("a thread id");
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the parenthesised command name: state is field 3, nice field 19.
        let after_name = stat.rsplit_once(')').expect("a stat line").1;
        let nice = after_name.split_whitespace().nth(16).expect("the nice field");
        out.push((tid, name.trim().to_string(), nice.parse().expect("a nice value")));
    }
    out
}

#[tokio::test]
async fn the_measurement_runtime_outranks_the_threads_serving_pages() {
    let (url, _dir) = crate::support::db::sqlite_url();
    let server = Server::start(&url, &[]);
    // Pages served (a blocking-pool thread may start for one) before the threads are read.
    for path in ["/", "/runs", "/evalsets"] {
        let status = http()
            .get(format!("{}{path}", server.base_url))
            .send()
            .await
            .expect("GET")
            .status();
        assert!(status.is_success() || status.is_redirection(), "{path}: {status}");
    }
    // The main thread (its id is the process's) keeps the priority the process started at.
    let pid = server.pid();
    let (mut threads, mut base) = (Vec::new(), 0);
    // A thread caught between its start and its first step (it starts at its starter's
    // priority) is read again: a few reads, 200 ms apart.
    for _ in 0..5 {
        threads = threads_of(pid);
        base = threads.iter().find(|t| t.0 == pid).expect("the main thread").2;
        if threads
            .iter()
            .all(|t| !t.1.starts_with(PAGE_THREAD_NAME) || t.2 == (base + PAGE_THREAD_NICE).min(MAX_NICE))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let engine: Vec<i32> = threads
        .iter()
        .filter(|t| t.1.starts_with(THREAD_NAME))
        .map(|t| t.2)
        .collect();
    let pages: Vec<i32> = threads
        .iter()
        .filter(|t| t.1.starts_with(PAGE_THREAD_NAME))
        .map(|t| t.2)
        .collect();
    assert!(!engine.is_empty() && !pages.is_empty(), "{threads:?}");
    // Every thread of the runtime serving pages carries the name the harness leaves out.
    assert!(!threads.iter().any(|t| t.1.starts_with("tokio-runtime")), "{threads:?}");
    assert!(
        engine.iter().all(|&n| n == base),
        "engine threads at the process's priority: {threads:?}"
    );
    let lowered = (base + PAGE_THREAD_NICE).min(MAX_NICE);
    assert!(
        pages.iter().all(|&n| n == lowered),
        "page threads at nice {lowered}: {threads:?}"
    );
}
