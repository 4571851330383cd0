//! A real `bakeoff serve` process (env!("CARGO_BIN_EXE_bakeoff")) on a free port, for tests
//! that kill it with SIGKILL and start it again on the same database.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Longest a server may take to listen.
const DEADLINE: Duration = Duration::from_secs(90);

/// A `bakeoff serve` child process; killed (SIGKILL) when dropped.
pub struct Server {
    child: Child,
    pub base_url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `bakeoff serve` on a free port with `env` set besides the test defaults, and
    /// returns once its log says it is listening.
    pub fn start(database_url: &str, env: &[(&str, &str)]) -> Server {
        // The port is picked by binding :0 and releasing it; the child binds it at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("finding a free port")
            .port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_bakeoff"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--database-url",
                database_url,
            ])
            // A restarted server is another worker (another port, another name): its units
            // are taken over once the killed one's 2 s leases run out (a test may set more).
            .env("BAKEOFF_LEASE_SECS", "2")
            .envs(env.iter().copied())
            .env("BAKEOFF_LOG", "info")
            .env("NO_COLOR", "1")
            // The same server key across restarts, and no key file left beside a PostgreSQL run.
            .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting bakeoff serve");
        let stdout = child.stdout.take().expect("the server's stdout");
        // Read the log on a thread until the "listening" line (or EOF), bounded by DEADLINE.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut told = false;
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                if !told && line.contains("listening on") {
                    let _ = tx.send(Ok(()));
                    told = true;
                }
                if !told && line.contains("ERROR") {
                    let _ = tx.send(Err(line));
                    told = true;
                }
            }
            if !told {
                let _ = tx.send(Err("the server exited before listening".to_string()));
            }
        });
        let mut server = Server {
            child,
            base_url: format!("http://127.0.0.1:{port}"),
        };
        match rx.recv_timeout(DEADLINE) {
            Ok(Ok(())) => server,
            Ok(Err(line)) => {
                let status = server.child.try_wait();
                panic!("bakeoff serve did not start: {line} ({status:?})")
            }
            Err(_) => panic!("bakeoff serve did not listen within {DEADLINE:?}"),
        }
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as `kill -9` would: no graceful shutdown, nothing flushed.
    pub fn kill(mut self) {
        self.child.kill().expect("killing the server");
        self.child.wait().expect("reaping the server");
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}

/// POSTs the run form; returns the new run's id from the redirect.
pub async fn start_run(base_url: &str, fields: &[(String, String)]) -> i64 {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let response = crate::support::app::browser_client(base_url)
        .await
        .post(format!("{base_url}/runs"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .expect("POST /runs");
    assert_eq!(response.status().as_u16(), 303, "the run form redirects to the run");
    let location = response.headers()["location"].to_str().expect("a location").to_string();
    location
        .strip_prefix("/runs/")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("unexpected redirect {location}"))
}
