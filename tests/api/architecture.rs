//! The rules of docs/ARCHITECTURE.md that the compiler keeps only as long as the manifests say
//! so: each crate depends on the layers below it and no other, and `domain` does no I/O.
use std::collections::BTreeSet;
use std::path::Path;

/// Each crate of the workspace and the bakeoff crates it may depend on (the picture in
/// docs/ARCHITECTURE.md).
const GRAPH: &[(&str, &[&str])] = &[
    ("domain", &[]),
    ("kernel-stamps", &[]),
    ("store", &["domain"]),
    ("engine", &["domain", "kernel-stamps", "store"]),
    ("mock", &["domain", "kernel-stamps"]),
    ("app", &["domain", "engine", "mock", "store"]),
];

/// Crates that would let `domain` do I/O: a runtime, a database, HTTP.
const IO_CRATES: &[&str] = &[
    "tokio",
    "sqlx",
    "reqwest",
    "axum",
    "hyper",
    "hyper-util",
    "tower",
    "libc",
];

fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    ["dependencies", "dev-dependencies", "build-dependencies"]
        .iter()
        .filter_map(|section| doc.get(*section).and_then(|d| d.as_table()))
        .flat_map(|table| table.keys().cloned())
        .collect()
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let on_disk: BTreeSet<String> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|entry| entry.expect("crates/ entry").file_name().to_string_lossy().into_owned())
        .collect();
    let drawn: BTreeSet<String> = GRAPH.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(
        on_disk, drawn,
        "every crate under crates/ is drawn in docs/ARCHITECTURE.md and here"
    );
    for (name, allowed) in GRAPH {
        let deps = dependencies(&root.join("crates").join(name).join("Cargo.toml"));
        let ours: BTreeSet<&str> = deps.iter().filter_map(|d| d.strip_prefix("bakeoff-")).collect();
        let allowed: BTreeSet<&str> = allowed.iter().copied().collect();
        assert_eq!(ours, allowed, "bakeoff-{name} depends on exactly the layers below it");
    }
}

#[test]
fn the_domain_crate_does_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let deps = dependencies(&root.join("crates/domain/Cargo.toml"));
    let io: Vec<&&str> = IO_CRATES.iter().filter(|c| deps.contains(**c)).collect();
    assert!(io.is_empty(), "bakeoff-domain lists I/O crates: {io:?}");
}

/// Crates that serve HTTP or render pages: the web's alone (the root crate's `src/web`), and the
/// mock's, which is a server of its own.
const WEB_CRATES: &[&str] = &["axum", "askama", "tower-http"];

#[test]
fn only_the_web_serves_http_or_renders_pages() {
    // Use cases, their request/response shapes and page data live in `app` so the worker and the
    // CLI share them without a web type; a web crate there would let a handler's job creep back.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, _) in GRAPH.iter().filter(|(name, _)| *name != "mock") {
        let deps = dependencies(&root.join("crates").join(name).join("Cargo.toml"));
        let web: Vec<&&str> = WEB_CRATES.iter().filter(|c| deps.contains(**c)).collect();
        assert!(web.is_empty(), "bakeoff-{name} lists web crates: {web:?}");
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_web_answers_errors_through_its_two_error_types_only() {
    // WebError (pages: 500s logged, shown generically) and ApiError (RFC 9457 problem details)
    // are the only error responses; any other `IntoResponse` would be a second way to fail.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for (name, _) in GRAPH.iter().filter(|(name, _)| *name != "mock") {
        rust_files(&root.join("crates").join(name).join("src"), &mut files);
    }
    let mut responders = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.trim_start().strip_prefix("impl ")
                && let Some((_, ty)) = rest.split_once("IntoResponse for ")
            {
                responders.insert(ty.trim_end_matches(['{', ' ']).to_string());
            }
        }
    }
    let expected: BTreeSet<String> = ["ApiError", "WebError"].map(String::from).into();
    assert_eq!(responders, expected);
}
