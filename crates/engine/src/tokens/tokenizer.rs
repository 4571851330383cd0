//! The canonical offline tokenizer (o200k, embedded in the binary: nothing is downloaded; see
//! `o200k` for why it is not `tiktoken-rs`'s) and everything bakeoff counts with it, always after a stream has ended, never in
//! the request loop:
//!
//! - `canonical_tokens` of every record: the o200k count of all generated text (reasoning +
//!   answer), so tok/s can be compared across models whose own tokenizers differ;
//! - `output_tokens` when the server sent no `usage` (source `tokenizer`);
//! - the per-chunk token counts of streams whose chunks carry several tokens, apportioned from
//!   the output-token total by each chunk's own o200k count (ITL splits a chunk's gap k ways),
//!   and how they were attributed (`ChunkAttribution`); a record a server tokenizer may recount
//!   keeps its chunk boundaries, so the recount can count prefixes there;
//! - synthetic prompts of an exact o200k length, for prompt-length sweeps.
use super::o200k::{Rank, o200k};

pub use crate::domain::run::apportion;
use crate::domain::run::{ChunkAttribution, RequestRecord, TokenSource};
use crate::wire::client::ChunkText;

/// The canonical tokenizer's name, stated with every canonical figure.
pub const CANONICAL_TOKENIZER: &str = "o200k_base";

/// Loads the ranks now, so the first counted record does not pay for it. Blocking: call it from
/// `spawn_blocking` or a plain thread.
pub fn warm_up() {
    let _ = count("warm up");
}

/// Tokens in `text` under o200k (special tokens are counted as ordinary text).
pub fn count(text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    u32::try_from(o200k().count(text)).unwrap_or(u32::MAX)
}

/// Completes a record's token counts (see the module comment). `chunk_text` has one entry per
/// entry of `record.chunks` when the stream was measured by the client; anything else (e.g. an
/// empty slice) leaves the per-chunk counts as they are.
pub fn complete_counts(record: &mut RequestRecord, chunk_text: &[ChunkText]) {
    let has_reasoning = record.reasoning().is_some_and(|t| !t.is_empty());
    let has_text = has_reasoning || !record.output().is_empty();
    // Each text is encoded once: its counts and, for multi-token chunks, the chunks' weights
    // all come from these tokens.
    let reasoning_tokens = encode(record.reasoning().unwrap_or(""));
    let output_tokens = encode(record.output());
    let canonical = len_u32(&reasoning_tokens).saturating_add(len_u32(&output_tokens));
    record.canonical_tokens = Some(canonical);
    if record.output_tokens_source != Some(TokenSource::Usage) && has_text {
        record.output_tokens = Some(canonical);
        record.output_tokens_source = Some(TokenSource::Tokenizer);
        if has_reasoning {
            record.reasoning_tokens = Some(len_u32(&reasoning_tokens));
        }
    }
    // Reasoning found in the content is inside the server's count, which says nothing of it:
    // its share is the o200k share of the reasoning text.
    if record.output_tokens_source == Some(TokenSource::Usage)
        && record.reasoning_tokens.is_none()
        && record.content_reasoning().is_some()
        && has_text
        && let Some(total) = record.output_tokens
    {
        let shares = apportion(total, &[len_u32(&reasoning_tokens), len_u32(&output_tokens)]);
        record.reasoning_tokens = shares.first().copied();
    }
    let Some(total) = record.output_tokens else { return };
    let chunks = record.chunks.len();
    if chunks == 0 {
        return;
    }
    // Without usage a server tokenizer may recount the record later: its prefixes are counted
    // at these chunk boundaries.
    if record.output_tokens_source != Some(TokenSource::Usage) && chunks > 1 && chunk_text.len() == chunks {
        record.texts.get_mut().chunk_text = chunk_text.into();
    }
    if record.chunks.tokens() == u64::from(total) {
        record.chunk_attribution = Some(if chunks == 1 {
            ChunkAttribution::SingleChunk
        } else {
            ChunkAttribution::AsStreamed
        });
        return;
    }
    if chunks == 1 {
        record.chunks = record.chunks.with_counts([total]);
        record.chunk_attribution = Some(ChunkAttribution::SingleChunk);
        return;
    }
    if chunk_text.len() != chunks {
        return;
    }
    let weights = chunk_weights(&reasoning_tokens, &output_tokens, chunk_text);
    record.chunks = record.chunks.with_counts(apportion(total, &weights));
    record.chunk_attribution = Some(ChunkAttribution::O200kProportional);
}

/// `text`'s o200k tokens (special tokens as ordinary text).
fn encode(text: &str) -> Vec<Rank> {
    if text.is_empty() {
        return Vec::new();
    }
    o200k().encode(text)
}

fn len_u32(tokens: &[Rank]) -> u32 {
    u32::try_from(tokens.len()).unwrap_or(u32::MAX)
}

/// Byte ends of each chunk's cumulative (reasoning, answer) text: the prefixes a server
/// tokenizer counts. Ends are widened to character boundaries like `slice`.
pub fn prefix_ends(reasoning: &str, output: &str, chunk_text: &[ChunkText]) -> Vec<(usize, usize)> {
    let (mut r_at, mut c_at) = (0usize, 0usize);
    chunk_text
        .iter()
        .map(|&(r, c)| {
            r_at += r as usize;
            c_at += c as usize;
            (char_end(reasoning, r_at), char_end(output, c_at))
        })
        .collect()
}

/// `at` moved forward to a character boundary of `text`, at most its length.
fn char_end(text: &str, at: usize) -> usize {
    let mut end = at.min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    end
}

/// Each chunk's weight: the tokens of the text's one encoding that end in it, at least 1 (every
/// such chunk carried a token). A token a chunk boundary splits counts once, in the chunk holding
/// its last byte; encoding each chunk's piece apart counted it in both chunks and encoded the
/// whole text a second time.
fn chunk_weights(reasoning: &[Rank], output: &[Rank], chunk_text: &[ChunkText]) -> Vec<u32> {
    let mut weights = vec![0u32; chunk_text.len()];
    let last = chunk_text.len().saturating_sub(1);
    for (tokens, answer) in [(reasoning, false), (output, true)] {
        let bytes = |i: usize| {
            let (r, c) = chunk_text[i];
            (if answer { c } else { r }) as usize
        };
        let (mut chunk, mut chunk_end, mut token_end) = (0usize, bytes(0), 0usize);
        for &token in tokens {
            token_end += o200k().token(token).len();
            while chunk < last && token_end > chunk_end {
                chunk += 1;
                chunk_end += bytes(chunk);
            }
            weights[chunk] += 1;
        }
    }
    weights.iter_mut().for_each(|w| *w = (*w).max(1));
    weights
}

/// Common words that are one o200k token each with their leading space.
const WORDS: [&str; 48] = [
    "the",
    "time",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
];

/// A prompt of exactly `tokens` o200k tokens (for `tokens` ≥ 4), different for every `seed` so
/// no server-side prefix cache can answer it: "The" and then common words, each one o200k token
/// with its leading space; the first three spell `seed` in base 48 (so prompts of seeds below
/// 110,592 differ within their first four tokens), the rest vary with it. Built without the
/// tokenizer (o200k splits text before every space-led word, and each of these words is one
/// token: the tests check both against the real tokenizer), so a synthetic workload never loads
/// the tokenizer's tables just to write its prompts.
pub fn synthetic_prompt(tokens: u32, seed: u64) -> String {
    let mut next_word = word_stream(seed);
    let base = WORDS.len() as u64;
    let mut text = String::with_capacity(tokens as usize * 8);
    text.push_str(FIRST_WORD);
    for i in 1..tokens {
        text.push(' ');
        text.push_str(match i {
            1..=3 => WORDS[((seed / base.pow(i - 1)) % base) as usize],
            _ => next_word(),
        });
    }
    text
}

/// Words of `seed`, one o200k token each with its leading space.
fn word_stream(seed: u64) -> impl FnMut() -> &'static str {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        // xorshift64*: cheap, deterministic, good enough to vary word order.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        WORDS[(state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 58) as usize % WORDS.len()]
    }
}

/// A replayed prompt (`domain::workload::replay`): each piece's tokens are words of its seed
/// alone, so pieces of equal seeds are equal text and a shorter piece is a prefix of a longer
/// one; the whole is exactly the pieces' tokens long in o200k (the first word is
/// [`FIRST_WORD`], as in [`synthetic_prompt`]).
pub fn replay_prompt(pieces: &[crate::domain::workload::replay::Piece]) -> String {
    let total: u32 = pieces.iter().map(|p| p.tokens).sum();
    let mut text = String::with_capacity(total as usize * 8);
    for (i, piece) in pieces.iter().enumerate() {
        let mut next_word = word_stream(piece.seed);
        for t in 0..piece.tokens {
            if i == 0 && t == 0 {
                text.push_str(FIRST_WORD);
                next_word();
                continue;
            }
            text.push(' ');
            text.push_str(next_word());
        }
    }
    text
}

/// The first word of every synthetic prompt: one o200k token without a leading space.
const FIRST_WORD: &str = "The";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::RecordTexts;

    fn record(output: &str, chunks: Vec<(i64, u32)>, usage: Option<u32>) -> RequestRecord {
        RequestRecord {
            end_us: Some(10).into(),
            chunks: chunks.into(),
            output_tokens: usage.or(Some(1)),
            output_tokens_source: Some(if usage.is_some() {
                TokenSource::Usage
            } else {
                TokenSource::Chunks
            }),
            output_chars: output.chars().count() as u32,
            texts: RecordTexts {
                output: output.into(),
                ..Default::default()
            }
            .into(),
            ..RequestRecord::test_quality("c")
        }
    }

    #[test]
    fn counts_with_o200k() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello world"), 2);
        assert!(count("你好，世界") >= 3);
    }

    #[test]
    fn tokenizer_fills_missing_usage_and_canonical_count() {
        let mut r = record("hello world", vec![(5, 1), (9, 1)], None);
        complete_counts(&mut r, &[(0, 5), (0, 6)]);
        assert_eq!(r.canonical_tokens, Some(2));
        assert_eq!(r.output_tokens, Some(2));
        assert_eq!(r.output_tokens_source, Some(TokenSource::Tokenizer));
        assert_eq!(r.chunks, vec![(5, 1), (9, 1)]);
        assert_eq!(r.chunk_attribution, Some(ChunkAttribution::AsStreamed));
    }

    #[test]
    fn usage_total_is_apportioned_over_multi_token_chunks() {
        // Three chunks: one word, then four, then four; usage says 9 tokens.
        let text = "the time people way day man thing woman life";
        let mut r = record(text, vec![(1, 1), (2, 1), (3, 1)], Some(9));
        let first = "the".len() as u32;
        let second = " time people way day".len() as u32;
        let third = text.len() as u32 - first - second;
        complete_counts(&mut r, &[(0, first), (0, second), (0, third)]);
        assert_eq!(r.output_tokens_source, Some(TokenSource::Usage));
        assert_eq!(r.chunks, vec![(1, 1), (2, 4), (3, 4)]);
        assert_eq!(r.chunk_attribution, Some(ChunkAttribution::O200kProportional));
        assert!(
            r.chunk_text().is_empty(),
            "usage is never recounted: no boundaries kept"
        );
        // Without usage the boundaries are kept for a server tokenizer's prefixes.
        let mut counted = record(text, vec![(1, 1), (2, 1), (3, 1)], None);
        complete_counts(&mut counted, &[(0, first), (0, second), (0, third)]);
        assert_eq!(*counted.chunk_text(), vec![(0, first), (0, second), (0, third)]);
        assert_eq!(
            prefix_ends("", text, &counted.chunk_text().iter().collect::<Vec<_>>()),
            vec![(0, 3), (0, (first + second) as usize), (0, text.len())]
        );
    }

    #[test]
    fn a_token_split_by_a_chunk_boundary_counts_once() {
        // " time" is one token, split "the ti" | "me people": it ends in the second chunk.
        let text = "the time people";
        let mut r = record(text, vec![(1, 1), (2, 1)], Some(3));
        complete_counts(&mut r, &[(0, 6), (0, text.len() as u32 - 6)]);
        assert_eq!(r.chunks, vec![(1, 1), (2, 2)]);
        assert_eq!(r.chunk_attribution, Some(ChunkAttribution::O200kProportional));
        // Reasoning and answer are weighed on their own sides of each chunk.
        let mut both = record("the time", vec![(1, 1), (2, 1)], Some(4));
        both.texts.get_mut().reasoning = Some("people way".into());
        complete_counts(&mut both, &[(10, 0), (0, 8)]);
        assert_eq!(both.chunks, vec![(1, 2), (2, 2)]);
    }

    #[test]
    fn synthetic_prompts_have_the_exact_length_and_differ_by_seed() {
        // What the construction relies on, checked against the real tokenizer.
        assert_eq!(count(FIRST_WORD), 1);
        for word in WORDS {
            assert_eq!(count(&format!(" {word}")), 1, "{word:?}");
        }
        for n in [4, 8, 64, 256, 2048] {
            for seed in [0, 3, 47, 48, 110_591, (64u64 << 32) | 255] {
                assert_eq!(count(&synthetic_prompt(n, seed)), n, "{n} tokens, seed {seed}");
            }
        }
        let first_tokens: std::collections::HashSet<String> = (0..3000).map(|seed| synthetic_prompt(4, seed)).collect();
        assert_eq!(first_tokens.len(), 3000, "every seed's first four tokens differ");
        assert_eq!(synthetic_prompt(64, 1), synthetic_prompt(64, 1));
    }

    #[test]
    fn replayed_prompts_are_exact_and_share_text_where_pieces_do() {
        use crate::domain::workload::replay::Piece;
        let shared = Piece { seed: 11, tokens: 512 };
        let a = replay_prompt(&[shared, Piece { seed: 12, tokens: 100 }]);
        let b = replay_prompt(&[shared, Piece { seed: 13, tokens: 7 }]);
        assert_eq!((count(&a), count(&b)), (612, 519));
        let head = replay_prompt(&[shared]);
        assert!(a.starts_with(&head) && b.starts_with(&head));
        let tail = |s: &str| s[head.len()..].split(' ').take(8).collect::<Vec<_>>().join(" ");
        assert_ne!(tail(&a), tail(&b));
        // A partial block of the same id is a prefix of the whole one.
        let short = replay_prompt(&[Piece { seed: 11, tokens: 300 }]);
        assert!(head.starts_with(&short) && count(&short) == 300);
    }
}
