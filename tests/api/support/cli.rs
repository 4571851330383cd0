//! The built `bakeoff` binary's run export and import, as the tests that check both ends call them.
use std::path::Path;

/// `bakeoff run export --run-id RUN --output PATH --database-url URL`, which must succeed;
/// returns what it printed on stderr.
pub fn export_run(database_url: &str, run: i64, path: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(["run", "export", "--run-id", &run.to_string(), "--output"])
        .arg(path)
        .args(["--database-url", database_url])
        .env("BAKEOFF_SECRET_KEY", hex::encode(super::db::TEST_SERVER_KEY))
        .output()
        .expect("running bakeoff run export");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// `bakeoff run import PATH --database-url URL`, which must succeed; returns the new run's id.
pub fn import_run(database_url: &str, path: &Path) -> i64 {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(["run", "import"])
        .arg(path)
        .args(["--database-url", database_url])
        .env("BAKEOFF_SECRET_KEY", hex::encode(super::db::TEST_SERVER_KEY))
        .output()
        .expect("running bakeoff run import");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the imported run's id on stdout")
}
