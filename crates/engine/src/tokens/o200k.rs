//! o200k_base in 3 MB instead of 50: the same ranks and the same splitting as `tiktoken`
//! (checked against `tiktoken-rs` by the tests), built in milliseconds.
//!
//! `tiktoken-rs` keeps every token three times as its own heap vector (encoder, decoder and a
//! sorted copy): parsing its ranks cost ~0.15–0.3 CPU-s and ~50 MB of peak memory per process,
//! the largest fixed cost of a run. Here the tokens stay in the binary (`o200k.bin`: each
//! token's length byte then its bytes, in rank order, 1.6 MB — OpenAI's `o200k_base.tiktoken`,
//! SHA-256 446a9538…1a2d, re-encoded), and the heap holds only where each starts and one
//! open-addressed table from bytes to rank.
use std::sync::LazyLock;

/// A token's rank (its id).
pub type Rank = u32;

/// Each token's length (one byte) followed by its bytes, rank 0 first.
static VOCABULARY: &[u8] = include_bytes!("o200k.bin");

/// tiktoken's o200k pattern, with its `\s+(?!\S)|\s+` (a look-ahead the `regex` crate has not)
/// as `\s+`, the look-ahead applied by hand in `pieces`.
const PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+",
);

/// The tokenizer, built on first use.
pub fn o200k() -> &'static O200k {
    static TOKENIZER: LazyLock<O200k> = LazyLock::new(O200k::new);
    &TOKENIZER
}

pub struct O200k {
    /// Where each rank's bytes start in `VOCABULARY` (just after its length byte).
    starts: Vec<u32>,
    /// Open addressing: rank + 1 per slot, 0 for empty; the length is a power of two.
    table: Vec<u32>,
    splitter: regex::Regex,
}

impl O200k {
    fn new() -> Self {
        let mut starts = Vec::with_capacity(200_000);
        let mut at = 0usize;
        while at < VOCABULARY.len() {
            let len = usize::from(VOCABULARY[at]);
            starts.push(u32::try_from(at + 1).expect("the vocabulary is under 4 GB"));
            at += 1 + len;
        }
        let mut table = vec![0u32; (starts.len() * 2).next_power_of_two()];
        let mask = table.len() - 1;
        let mut tokenizer = O200k {
            starts,
            table: Vec::new(),
            splitter: regex::Regex::new(PATTERN).expect("the o200k pattern compiles"),
        };
        for rank in 0..tokenizer.starts.len() {
            let mut slot = hash(tokenizer.token(rank as Rank)) & mask;
            while table[slot] != 0 {
                slot = (slot + 1) & mask;
            }
            table[slot] = rank as u32 + 1;
        }
        tokenizer.table = table;
        tokenizer
    }

    /// The bytes of token `rank` (empty for a rank beyond the vocabulary).
    pub fn token(&self, rank: Rank) -> &'static [u8] {
        match self.starts.get(rank as usize) {
            Some(&start) => {
                let start = start as usize;
                &VOCABULARY[start..start + usize::from(VOCABULARY[start - 1])]
            }
            None => &[],
        }
    }

    fn rank(&self, bytes: &[u8]) -> Option<Rank> {
        let mask = self.table.len() - 1;
        let mut slot = hash(bytes) & mask;
        loop {
            match self.table[slot] {
                0 => return None,
                entry if self.token(entry - 1) == bytes => return Some(entry - 1),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// The tokens of `text`, special tokens read as ordinary text (tiktoken's `encode_ordinary`).
    pub fn encode(&self, text: &str) -> Vec<Rank> {
        let mut out = Vec::with_capacity(text.len() / 3);
        let mut parts = Vec::new();
        for piece in self.pieces(text) {
            let bytes = piece.as_bytes();
            if let Some(rank) = self.rank(bytes) {
                out.push(rank);
                continue;
            }
            self.merge(bytes, &mut parts);
            out.extend(
                parts
                    .windows(2)
                    .map(|w| self.rank(&bytes[w[0].0..w[1].0]).expect("every merged part is a token")),
            );
        }
        out
    }

    /// How many tokens `text` is, without building them.
    pub fn count(&self, text: &str) -> usize {
        let mut parts = Vec::new();
        self.pieces(text)
            .map(|piece| {
                if self.rank(piece.as_bytes()).is_some() {
                    1
                } else {
                    self.merge(piece.as_bytes(), &mut parts);
                    parts.len() - 1
                }
            })
            .sum()
    }

    /// The pre-tokenizer's pieces of `text`. `\s+(?!\S)`: a run of whitespace followed by
    /// something else gives up its last character, which then starts the next piece.
    fn pieces<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'t str> + 't {
        let mut at = 0;
        std::iter::from_fn(move || {
            let found = self.splitter.find_at(text, at)?;
            let mut end = found.end();
            let piece = found.as_str();
            if end < text.len()
                && piece.chars().all(char::is_whitespace)
                && !piece.contains(['\r', '\n'])
                && let Some(last) = piece.chars().last()
                && piece.len() > last.len_utf8()
            {
                end -= last.len_utf8();
            }
            let piece = &text[found.start()..end];
            at = end;
            Some(piece)
        })
    }

    /// tiktoken's byte-pair merge: `parts` becomes the start of every token of `piece` (and its
    /// end), the lowest-ranked adjacent pair merged first.
    fn merge(&self, piece: &[u8], parts: &mut Vec<(usize, Rank)>) {
        parts.clear();
        let rank_of = |from: usize, to: usize| self.rank(&piece[from..to]).unwrap_or(Rank::MAX);
        let mut min = (Rank::MAX, usize::MAX);
        for i in 0..piece.len().saturating_sub(1) {
            let rank = rank_of(i, i + 2);
            if rank < min.0 {
                min = (rank, i);
            }
            parts.push((i, rank));
        }
        parts.push((piece.len() - 1, Rank::MAX));
        parts.push((piece.len(), Rank::MAX));
        let pair_rank = |parts: &Vec<(usize, Rank)>, i: usize| {
            if i + 3 < parts.len() {
                rank_of(parts[i].0, parts[i + 3].0)
            } else {
                Rank::MAX
            }
        };
        while min.0 != Rank::MAX {
            let i = min.1;
            if i > 0 {
                parts[i - 1].1 = pair_rank(parts, i - 1);
            }
            parts[i].1 = pair_rank(parts, i);
            parts.remove(i + 1);
            min = (Rank::MAX, usize::MAX);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < min.0 {
                    min = (rank, i);
                }
            }
        }
    }
}

/// FNV-1a: tokens are short, and the table is built once.
fn hash(bytes: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 29)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> &'static tiktoken_rs::CoreBPE {
        tiktoken_rs::o200k_base_singleton()
    }

    #[test]
    fn the_vocabulary_is_tiktokens() {
        let t = o200k();
        assert_eq!(t.starts.len(), 199_998);
        for rank in (0..199_998u32).step_by(7).chain([0, 199_997]) {
            assert_eq!(reference().decode_bytes(&[rank]).unwrap(), t.token(rank), "rank {rank}");
            assert_eq!(t.rank(t.token(rank)), Some(rank));
        }
    }

    #[test]
    fn encodes_as_tiktoken_does() {
        let texts = [
            "",
            "hello world",
            "Hello, World! It's 2024-06-01; we'll   see   what\tthey've done.\n\n  Indented\r\nline",
            "你好，世界。これは日本語です。 Привет, мир! مرحبا بالعالم",
            "emoji 🎉🎉 and  trailing spaces   ",
            "   leading spaces and numbers 1234567890 12 3",
            "code: fn main() { println!(\"{}\", x + 1); }\n    return;\n\t\tdone",
            "<|endoftext|> is ordinary text here",
            "mixedCASEWords and CamelCase, ALLCAPS's, don't",
            "\u{3000}ideographic\u{3000}\u{3000}space\u{a0}nbsp  \n \n",
            "a\n\n\n   b \r\n\r\n c",
        ];
        let t = o200k();
        for text in texts {
            let want = reference().encode_ordinary(text);
            assert_eq!(t.encode(text), want, "{text:?}");
            assert_eq!(t.count(text), want.len(), "{text:?}");
        }
        // A long generated text of every kind of character above, cut at odd places.
        let long: String = texts.concat().repeat(20);
        let cut: String = long.chars().take(3001).collect();
        assert_eq!(t.encode(&cut), reference().encode_ordinary(&cut));
        // Deterministic soup of letters, CJK, emoji, apostrophes and every kind of whitespace.
        let mut state: u64 = 7;
        for _ in 0..20 {
            let soup: String = (0..2000)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    match state % 10 {
                        0 => ' ',
                        1 => '\n',
                        2 => '\t',
                        3 => char::from_u32((state >> 8) as u32 % 0x3000).unwrap_or('x'),
                        4 => '\u{3000}',
                        5 => '\r',
                        6 => char::from_u32(0x1F600 + (state >> 20) as u32 % 80).unwrap_or('x'),
                        7 => '\'',
                        _ => char::from(b'a' + ((state >> 11) % 26) as u8),
                    }
                })
                .collect();
            assert_eq!(t.encode(&soup), reference().encode_ordinary(&soup), "{soup:?}");
        }
    }
}
