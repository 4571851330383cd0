//! What the benches share: the synthetic eval set they load, the records they store and the
//! stores they run on (one `mod support;` per bench).
#![allow(dead_code)] // each bench uses its part

use std::future::Future;

use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::Grade;
use bakeoff::domain::run::{Phase, RecordTexts, RequestRecord, TokenSource};
use bakeoff::store::DynStore;

/// Runs `bench` on a fresh SQLite file, then — when `BAKEOFF_BENCH_POSTGRES_URL` (or the tests'
/// `BAKEOFF_TEST_POSTGRES_URL`) names a server — on PostgreSQL in a fresh schema named after
/// `schema_prefix`, dropped afterwards; each result labelled with its backend.
pub async fn on_each_store<T, Fut>(schema_prefix: &str, mut bench: impl FnMut(&'static str, DynStore) -> Fut) -> Vec<T>
where
    Fut: Future<Output = T>,
{
    let dir = tempfile::tempdir().expect("a temporary directory");
    // BAKEOFF_BENCH_KEEP_SQLITE=FILE: the SQLite database is written there and kept, to look
    // into afterwards (EXPLAIN QUERY PLAN, timing one query).
    let file = std::env::var_os("BAKEOFF_BENCH_KEEP_SQLITE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("bench.db"));
    let url = format!("sqlite://{}", file.display());
    let mut results = Vec::new();
    // BAKEOFF_BENCH_SKIP_SQLITE=1: PostgreSQL only (a million-request SQLite pass takes minutes).
    if std::env::var_os("BAKEOFF_BENCH_SKIP_SQLITE").is_none() {
        let store = bakeoff::store::connect(&url).await.expect("opening SQLite");
        results.push(bench("SQLite", store).await);
    }
    let Some(admin) = postgres_admin_url() else {
        println!("\nPostgreSQL: skipped (set BAKEOFF_BENCH_POSTGRES_URL=postgres://…)");
        return results;
    };
    let schema = format!("{schema_prefix}_{}", std::process::id());
    let result = in_postgres_schema(&admin, &schema, |url| async move {
        let store = bakeoff::store::connect(&url).await.expect("opening PostgreSQL");
        bench("PostgreSQL", store).await
    })
    .await;
    results.push(result);
    results
}

/// The PostgreSQL server the benches may use: `BAKEOFF_BENCH_POSTGRES_URL`, else the tests'
/// `BAKEOFF_TEST_POSTGRES_URL`; None when neither names one.
pub fn postgres_admin_url() -> Option<String> {
    std::env::var("BAKEOFF_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("BAKEOFF_TEST_POSTGRES_URL"))
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Runs `bench` with the URL of a fresh schema `schema` on the server `admin` names (selected
/// with `search_path`), dropped afterwards.
pub async fn in_postgres_schema<T, Fut>(admin: &str, schema: &str, bench: impl FnOnce(String) -> Fut) -> T
where
    Fut: Future<Output = T>,
{
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connecting to PostgreSQL");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&mut conn)
        .await
        .expect("creating the bench schema");
    let sep = if admin.contains('?') { '&' } else { '?' };
    let result = bench(format!("{admin}{sep}options=-c%20search_path%3D{schema}")).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .execute(&mut conn)
        .await
        .expect("dropping the bench schema");
    result
}

/// A classification eval set of `cases` short cases, tagged `en` or `zh`.
pub fn evalset(name: &str, cases: usize) -> EvalSetFile {
    let mut text = format!(
        "{{\"bakeoff_evalset\":1,\"name\":\"{name}\",\"task\":\"classification\",\"prompt\":\"Classify: {{{{text}}}}\",\"graders\":[{{\"kind\":\"exact\"}}],\"max_tokens\":16}}\n"
    );
    for i in 0..cases {
        let tag = if i % 3 == 0 { "en" } else { "zh" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:06}\",\"vars\":{{\"text\":\"item number {i} with some words to classify\"}},\"expected\":\"positive\",\"tags\":[\"{tag}\"]}}\n"
        ));
    }
    EvalSetFile::parse(&format!("{name}.jsonl"), &text).expect("the bench eval set parses")
}

/// Tokens a successful synthetic record streams, one a chunk about 10 ms apart (see
/// [`chunk_offsets`]): `BAKEOFF_BENCH_TOKENS` (default 16; real answers run to hundreds, and
/// their chunk times are most of a record's weight).
fn streamed_tokens() -> u32 {
    static TOKENS: std::sync::LazyLock<u32> =
        std::sync::LazyLock::new(|| u32::try_from(count_from_env("TOKENS", 16).max(1)).unwrap_or(u32::MAX));
    *TOKENS
}

/// A stream's chunk offsets as a real server's arrive: gaps of 10 ms ± 2 ms (an even spread,
/// different for every record) and a 30 ms stall every 50th chunk (another request's prefill
/// batched in). Their timing is what chunk packing compresses, so a metronome would flatter it.
fn chunk_offsets(ttft: i64, tokens: u32, seed: usize) -> Vec<i64> {
    let mut state = seed as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut at = ttft;
    (0..tokens)
        .map(|i| {
            if i > 0 {
                // xorshift: cheap, deterministic, spread evenly enough for jitter.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                at += 8_000 + (state % 4_001) as i64 + if i % 50 == 0 { 30_000 } else { 0 };
            }
            at
        })
        .collect()
}

/// `BAKEOFF_BENCH_<name>` as a count, or `default` when unset or not a number.
fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(format!("BAKEOFF_BENCH_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Characters of each answer (`BAKEOFF_BENCH_ANSWER_CHARS`; a real answer is a few hundred to
/// a few thousand) and of each reasoning text (`BAKEOFF_BENCH_REASONING_CHARS`; a reasoning
/// model's thinking runs to tens of thousands). Unset: the short answers and no reasoning the
/// earlier figures were measured with.
fn text_chars() -> (usize, usize) {
    static CHARS: std::sync::LazyLock<(usize, usize)> =
        std::sync::LazyLock::new(|| (count_from_env("ANSWER_CHARS", 0), count_from_env("REASONING_CHARS", 0)));
    *CHARS
}

/// `start` followed by filler words up to `chars` characters (at least `start`).
fn text_of(start: &str, chars: usize) -> String {
    let words = [
        "the", "item", "reads", "as", "fair", "on", "balance,", "with", "some", "detail",
    ];
    let mut text = start.to_string();
    let mut count = start.chars().count();
    for word in words.iter().cycle() {
        count += 1 + word.len();
        if count > chars {
            return text;
        }
        text.push(' ');
        text.push_str(word);
    }
    unreachable!("a cycle never ends")
}

/// A synthetic measured record of `case` at `repetition`: most pass, every fifth fails its
/// grade, about one in a hundred failed with HTTP 500 (the mix the page benches store).
#[allow(dead_code)] // not every bench stores records
pub fn record(run_id: i64, candidate_id: i64, case: usize, repetition: u32, sent_at_us: i64) -> RequestRecord {
    let pass = !(case + repetition as usize).is_multiple_of(5);
    let failed = (case * 7 + repetition as usize).is_multiple_of(97);
    let ttft = 40_000 + ((case * 13 + repetition as usize * 7) % 50) as i64 * 1_000;
    let tokens = streamed_tokens();
    let offsets = chunk_offsets(ttft, tokens, case * 31 + repetition as usize);
    let last_token = *offsets.last().expect("at least one token");
    let (answer_chars, reasoning_chars) = text_chars();
    let output = if failed {
        String::new()
    } else if pass {
        text_of("positive", answer_chars)
    } else {
        text_of("negative — the item reads as unfavourable overall", answer_chars)
    };
    let reasoning = (!failed && reasoning_chars > 0).then(|| text_of("Let me think.", reasoning_chars));
    RequestRecord {
        run_id,
        candidate_id,
        case_id: format!("case-{case:06}").into(),
        phase: Phase::Quality,
        repetition,
        attempt: 0,
        concurrency: 8,
        is_warmup: false,
        sent_at_us,
        client_queue_us: 15,
        connect_us: Some(300).into(),
        connection_reused: Some(true),
        headers_us: Some(ttft - 10_000).into(),
        first_chunk_us: Some(ttft).into(),
        first_reasoning_us: None.into(),
        first_content_us: (!failed).then_some(ttft).into(),
        last_token_us: (!failed).then_some(last_token).into(),
        end_us: Some(last_token + 10_000).into(),
        chunks: if failed {
            Default::default()
        } else {
            offsets.iter().map(|&at| (at, 1)).collect()
        },
        http_status: Some(if failed { 500 } else { 200 }),
        finish_reason: (!failed).then(|| "stop".into()),
        input_tokens: Some(24),
        output_tokens: (!failed).then_some(tokens),
        output_tokens_source: (!failed).then_some(TokenSource::Usage),
        reasoning_tokens: reasoning.as_ref().map(|t| t.len() as u32 / 4),
        canonical_tokens: (!failed).then_some(tokens),
        output_chars: output.chars().count() as u32,
        texts: RecordTexts {
            output,
            reasoning,
            error_detail: failed.then(|| "HTTP 500: upstream overloaded".to_string()),
            chunk_text: Default::default(),
            content_reasoning: None,
            tool_turn: None,
        }
        .into(),
        error_class: failed.then_some(bakeoff::domain::run::ErrorClass::HttpServerError),
        grades: if failed {
            vec![]
        } else {
            vec![Grade {
                grader: "exact".into(),
                score: if pass { 1.0 } else { 0.0 },
                passed: pass,
                reason: if pass {
                    String::new()
                } else {
                    "expected \"positive\"".into()
                },
                detail: None,
                weight: 1.0,
                required: true,
            }]
        },
        chunk_attribution: None,
        clock: None,
        rate_limit: None,
        turn: None,
        prompt_cache: None,
        cut: None,
    }
}

/// The `p`-th percentile (0–100) of ascending `sorted`, by nearest rank; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
