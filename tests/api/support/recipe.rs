//! A shipped recipe gating a run from the terminal: docs/recipes/<file> pointed at a real
//! server, in `bakeoff run start` (the built binary), as a pipeline would run it.

/// One recipe gate.
pub struct RecipeGate<'a> {
    /// The file under docs/recipes.
    pub recipe: &'a str,
    /// (text as shipped, text for this server): the address and model line. Each must be in
    /// the recipe, so a moved address fails here rather than testing something else.
    pub replace: Vec<(String, String)>,
    /// The eval set's file name and text.
    pub evalset: (&'a str, &'a str),
    /// The request timeout of the run (a real model on a CPU is slow).
    pub timeout_secs: u32,
    /// The candidate name the report must give.
    pub candidate: &'a str,
}

/// Runs the gate: every request must succeed (what a small model answers is not the point), the
/// verdict is GO, and the JUnit report has test cases and no failure. `server_log` is added to a
/// failure's message.
pub async fn recipe_gates(gate: RecipeGate<'_>, server_log: impl Fn() -> String) {
    let recipe = gate.recipe;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let mut text = std::fs::read_to_string(format!("{}/docs/recipes/{recipe}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for (shipped, here) in &gate.replace {
        assert!(
            text.contains(shipped.as_str()),
            "{recipe} no longer says {shipped}: update this test"
        );
        text = text.replace(shipped.as_str(), here);
    }
    let candidates = write("candidates.toml", &text);
    let evalset = write(gate.evalset.0, gate.evalset.1);
    let profile = write(
        "profile.toml",
        "bakeoff_profile = 1\nname = \"answers\"\n[[rule]]\nmetric = \"failure_rate\"\ncomparator = \"<\"\nvalue = 50\n",
    );
    let settings = write(
        "settings.toml",
        &format!(
            "bakeoff_settings = 1\nconcurrency = 2\nwarmup_requests = 1\nretries = 0\ntimeout_secs = {}\n",
            gate.timeout_secs
        ),
    );
    let (report_json, junit) = (dir.path().join("report.json"), dir.path().join("report.xml"));
    let db = format!("sqlite://{}", dir.path().join("gate.db").display());
    let args: Vec<String> = [
        "run",
        "start",
        "--evalset",
        &evalset,
        "--candidates",
        &candidates,
        "--profile",
        &profile,
        "--settings",
        &settings,
        "--report-json",
        &report_json.display().to_string(),
        "--report-junit",
        &junit.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::gate::bakeoff(&args, &db)
    })
    .await
    .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{recipe}: {said}\n{}", server_log());
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report_json).unwrap()).unwrap();
    assert_eq!(report["exit_code"], 0, "{report}");
    assert_eq!(report["candidates"][0]["name"], gate.candidate, "{report}");
    assert_eq!(report["candidates"][0]["verdict"], "GO", "{report}");
    let junit = std::fs::read_to_string(&junit).unwrap();
    assert!(
        junit.contains("<testsuite") && junit.contains("<testcase") && !junit.contains("<failure"),
        "{junit}"
    );
}
