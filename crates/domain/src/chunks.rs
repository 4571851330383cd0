//! A streamed response's token-bearing chunks, held compactly.
//!
//! Every record keeps (offset µs from send, tokens) for each token-bearing chunk: ITL, TPOT and
//! the token timeline rest on them. As pairs that is 16 bytes a chunk — most of a long
//! response's record (8 KB for a 500-token stream) — and a run's summaries, exports and live
//! views hold every record of a candidate at once. Here each chunk is one varint: its gap from
//! the chunk before, zigzagged, shifted left, its low bit set when the chunk carried one token
//! (most servers send one a chunk); any other count follows as a varint of its own. The gap is
//! written as it is (first order), or as its difference from the gap before it (second order),
//! whichever packs the record smaller: a steady stream's gaps differ by far less than they
//! measure (10 ms ± 2 ms: 2 bytes a chunk instead of 3), while a bursty one's (gaps of nothing,
//! then a long one) pack better as they are. Lossless for any offsets (out of order or negative
//! ones too): the differences wrap and come back.
//!
//! [`ChunkText`], the bytes of text each chunk carried (kept for a record a server tokenizer may
//! recount), is packed the same way: 8 bytes a chunk as pairs, about 2 here.
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Set in [`Chunks`]'s count when its gaps are written second order (a record of 2³¹ chunks
/// would take gigabytes: the bit is free).
const SECOND_ORDER: u32 = 1 << 31;
/// Set in [`Chunks`]'s count when every chunk's time was let go ([`Chunks::keep_first_only`]):
/// its bytes then hold only the first chunk's tokens, and nothing when that is one.
const TIMES_DROPPED: u32 = 1 << 30;
const FLAGS: u32 = SECOND_ORDER | TIMES_DROPPED;

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Chunks {
    bytes: Box<[u8]>,
    /// The number of chunks, with [`SECOND_ORDER`] set when their gaps are written so and
    /// [`TIMES_DROPPED`] when their times were let go.
    len_and_order: u32,
    /// Tokens over every chunk, or `u32::MAX` when that does not fit (then counted on demand):
    /// the per-request figures ask for it of every record, and it fits beside the count for free.
    tokens: u32,
}

impl Chunks {
    pub fn len(&self) -> usize {
        (self.len_and_order & !FLAGS) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (offset µs, tokens) of every chunk, in the order they were stored.
    ///
    /// Panics when the chunks' times were let go ([`Chunks::keep_first_only`]): a figure
    /// computed from the one chunk left would be wrong, not slower.
    pub fn iter(&self) -> Iter<'_> {
        assert!(
            !self.times_dropped(),
            "the chunk times of this record were let go once the figures that read them were fed"
        );
        self.iter_over(self.len())
    }

    fn iter_over(&self, chunks: usize) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            left: chunks as u32,
            second_order: self.len_and_order & SECOND_ORDER != 0,
            at: 0,
            gap: 0,
            first: true,
        }
    }

    /// (offset µs, tokens) of the first chunk. Panics, as [`Chunks::iter`] does, when the
    /// chunks' times were let go.
    pub fn first(&self) -> Option<(i64, u32)> {
        self.iter().next()
    }

    /// Tokens of the first chunk, whether or not the chunks' times were let go.
    pub fn first_tokens(&self) -> Option<u32> {
        if !self.times_dropped() {
            return self.first().map(|(_, k)| k);
        }
        let mut bytes = &self.bytes[..];
        Some(if bytes.is_empty() {
            1
        } else {
            take_varint(&mut bytes) as u32
        })
    }

    /// Lets every chunk's time go, keeping the number of chunks, the tokens over them and the
    /// first chunk's: all that the figures read of a record once its chunk times were fed to
    /// the few that read them (a big run's end step, `app::pages::summaries`), so holding a
    /// candidate's records no longer costs what their answers' lengths do. The first chunk's
    /// tokens are held only when not one (most servers send one a chunk): then the record
    /// holds no allocation for them. A record whose tokens are counted on demand (over
    /// `u32::MAX`) keeps every chunk.
    pub fn keep_first_only(&mut self) {
        let Some(tokens) = self.first_tokens() else {
            return;
        };
        if self.len() == 1 || self.tokens == u32::MAX || self.times_dropped() {
            return;
        }
        let mut bytes = Vec::new();
        if tokens != 1 {
            put_varint(&mut bytes, u128::from(tokens));
        }
        self.bytes = bytes.into_boxed_slice();
        self.len_and_order = self.len_and_order & !SECOND_ORDER | TIMES_DROPPED;
    }

    fn times_dropped(&self) -> bool {
        self.len_and_order & TIMES_DROPPED != 0
    }

    /// Tokens over every chunk.
    pub fn tokens(&self) -> u64 {
        if self.tokens == u32::MAX {
            self.iter().map(|(_, k)| u64::from(k)).sum()
        } else {
            u64::from(self.tokens)
        }
    }

    /// The same chunks with their token counts replaced, in order, by `counts` (a chunk beyond
    /// the last count keeps its own).
    pub fn with_counts(&self, counts: impl IntoIterator<Item = u32>) -> Chunks {
        let mut counts = counts.into_iter();
        self.iter().map(|(at, k)| (at, counts.next().unwrap_or(k))).collect()
    }
}

/// Packs chunks one at a time, both ways at once (a stream is read once and never held as
/// pairs); the smaller is kept.
#[derive(Default)]
struct Packer {
    first_order: Vec<u8>,
    second_order: Vec<u8>,
    len: u32,
    tokens: u64,
    prev_at: i64,
    /// The gap before, or 0 after the first chunk (whose offset is a time to first token, not a
    /// gap the next one resembles).
    prev_gap: i64,
}

impl Packer {
    fn with_capacity(chunks: usize) -> Packer {
        Packer {
            first_order: Vec::with_capacity(chunks * 3),
            second_order: Vec::with_capacity(chunks * 3),
            ..Packer::default()
        }
    }

    fn push(&mut self, (at, k): (i64, u32)) {
        let gap = at.wrapping_sub(self.prev_at);
        put_chunk(&mut self.first_order, gap, k);
        put_chunk(&mut self.second_order, gap.wrapping_sub(self.prev_gap), k);
        self.prev_gap = if self.len == 0 { 0 } else { gap };
        self.prev_at = at;
        self.len += 1;
        self.tokens += u64::from(k);
    }

    fn finish(self) -> Chunks {
        let second_order = self.second_order.len() < self.first_order.len();
        self.finish_as(second_order)
    }

    fn finish_as(self, second_order: bool) -> Chunks {
        assert!(self.len < TIMES_DROPPED, "{} chunks in one record", self.len);
        let bytes = if second_order {
            self.second_order
        } else {
            self.first_order
        };
        Chunks {
            bytes: bytes.into_boxed_slice(),
            len_and_order: self.len | if second_order { SECOND_ORDER } else { 0 },
            tokens: u32::try_from(self.tokens).unwrap_or(u32::MAX),
        }
    }
}

/// One chunk: `difference` zigzagged and shifted left, the low bit set for one token; any other
/// count after it.
fn put_chunk(out: &mut Vec<u8>, difference: i64, k: u32) {
    let zigzag = ((difference << 1) ^ (difference >> 63)) as u64;
    // Wider than 64 bits only for a difference beyond ±2⁶²: never a real stream's.
    put_varint(out, u128::from(zigzag) << 1 | u128::from(k == 1));
    if k != 1 {
        put_varint(out, u128::from(k));
    }
}

impl FromIterator<(i64, u32)> for Chunks {
    fn from_iter<I: IntoIterator<Item = (i64, u32)>>(chunks: I) -> Self {
        let chunks = chunks.into_iter();
        let mut packer = Packer::with_capacity(chunks.size_hint().0);
        chunks.for_each(|chunk| packer.push(chunk));
        packer.finish()
    }
}

impl From<Vec<(i64, u32)>> for Chunks {
    fn from(chunks: Vec<(i64, u32)>) -> Self {
        chunks.into_iter().collect()
    }
}

impl From<&[(i64, u32)]> for Chunks {
    fn from(chunks: &[(i64, u32)]) -> Self {
        chunks.iter().copied().collect()
    }
}

impl PartialEq<Vec<(i64, u32)>> for Chunks {
    fn eq(&self, other: &Vec<(i64, u32)>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().copied())
    }
}

impl std::fmt::Debug for Chunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.times_dropped() {
            let (chunks, first) = (self.len(), self.first_tokens());
            return write!(
                f,
                "[{chunks} chunks, the first of {first:?} tokens, their times let go]"
            );
        }
        f.debug_list().entries(self.iter()).finish()
    }
}

/// As a list of `[offset, tokens]` pairs, as records have always been written. Chunks whose
/// times were let go are an error: they are never stored or exported.
impl Serialize for Chunks {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.times_dropped() {
            return Err(serde::ser::Error::custom("the chunks' times were let go"));
        }
        serializer.collect_seq(self.iter())
    }
}

/// Packed as they are read (a list of pairs never held whole).
impl<'de> Deserialize<'de> for Chunks {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Chunks;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of [offset µs, tokens] pairs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Chunks, A::Error> {
                let mut packer = Packer::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(chunk) = seq.next_element::<(i64, u32)>()? {
                    packer.push(chunk);
                }
                Ok(packer.finish())
            }
        }
        deserializer.deserialize_seq(Pairs)
    }
}

impl<'a> IntoIterator for &'a Chunks {
    type Item = (i64, u32);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Bytes of (reasoning, answer) text each chunk of a record carried, packed as [`Chunks`] are.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChunkText(Chunks);

impl ChunkText {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, u32)> + '_ {
        // Every first value was written from a u32.
        self.0.iter().map(|(reasoning, answer)| (reasoning as u32, answer))
    }
}

impl From<&[(u32, u32)]> for ChunkText {
    fn from(text: &[(u32, u32)]) -> Self {
        ChunkText(
            text.iter()
                .map(|&(reasoning, answer)| (i64::from(reasoning), answer))
                .collect(),
        )
    }
}

impl PartialEq<Vec<(u32, u32)>> for ChunkText {
    fn eq(&self, other: &Vec<(u32, u32)>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().copied())
    }
}

/// A list of pairs, as `Chunks` (its values are never negative, so they read alike).
impl std::fmt::Debug for ChunkText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// As a list of `[reasoning bytes, answer bytes]` pairs, as records have always been written.
impl Serialize for ChunkText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ChunkText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Vec::<(u32, u32)>::deserialize(deserializer)?;
        Ok(ChunkText::from(text.as_slice()))
    }
}

pub struct Iter<'a> {
    bytes: &'a [u8],
    left: u32,
    second_order: bool,
    /// The offset of the chunk before.
    at: i64,
    /// The gap before (as `Packer::prev_gap`).
    gap: i64,
    first: bool,
}

impl Iterator for Iter<'_> {
    type Item = (i64, u32);

    #[inline]
    fn next(&mut self) -> Option<(i64, u32)> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let head = take_varint(&mut self.bytes);
        let zigzag = (head >> 1) as u64;
        let difference = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        let gap = match self.second_order {
            true => self.gap.wrapping_add(difference),
            false => difference,
        };
        self.gap = if self.first { 0 } else { gap };
        self.first = false;
        self.at = self.at.wrapping_add(gap);
        // Counts were written from u32s.
        let tokens = if head & 1 == 1 {
            1
        } else {
            take_varint(&mut self.bytes) as u32
        };
        Some((self.at, tokens))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Iter<'_> {}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one varint off the front of `bytes` (which this module wrote: never cut short). Most
/// chunks take two or three bytes, and most other token counts one.
#[inline]
fn take_varint(bytes: &mut &[u8]) -> u128 {
    let (mut v, mut i) = (0u128, 0);
    loop {
        let b = bytes[i];
        v |= u128::from(b & 0x7f) << (7 * i);
        i += 1;
        if b < 0x80 {
            *bytes = &bytes[i..];
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_offsets_and_counts_come_back_as_they_went_in() {
        let cases: Vec<Vec<(i64, u32)>> = vec![
            vec![],
            vec![(0, 0)],
            vec![(40_000, 1), (50_000, 1), (50_000, 3), (1_000_000_000_000, u32::MAX)],
            // Out of order, negative, and the extremes: the differences wrap and come back.
            vec![
                (5, 2),
                (-7, 1),
                (i64::MAX, 0),
                (i64::MIN, 9),
                (0, 1),
                (i64::MIN, 1),
                (i64::MAX, 4),
            ],
        ];
        for chunks in cases {
            // Either way of writing the gaps reads back the same chunks.
            for second_order in [false, true] {
                let mut packer = Packer::default();
                chunks.iter().for_each(|&c| packer.push(c));
                let held = packer.finish_as(second_order);
                assert_eq!(held.iter().collect::<Vec<_>>(), chunks, "second order: {second_order}");
                assert_eq!(held.len(), chunks.len());
            }
            let held = Chunks::from(chunks.clone());
            assert_eq!(held.iter().collect::<Vec<_>>(), chunks);
            assert_eq!(held.len(), chunks.len());
            assert_eq!(held.iter().len(), chunks.len());
            assert_eq!(held.first(), chunks.first().copied());
            assert_eq!(held.tokens(), chunks.iter().map(|c| u64::from(c.1)).sum::<u64>());
            let json = serde_json::to_string(&chunks).unwrap();
            assert_eq!(serde_json::from_str::<Chunks>(&json).unwrap(), held);
            assert_eq!(held, chunks);
        }
    }

    #[test]
    fn a_real_streams_chunks_take_a_few_bytes_each() {
        // 500 chunks of one token, ~25 ms apart with up to ±2 ms of jitter (varying), after a
        // 180 ms first token: 16 bytes a chunk as pairs, 3 with gaps written as they are.
        let jitter = |i: i64| (i * 7_919) % 4_001 - 2_000;
        let steady: Vec<(i64, u32)> = (0..500).map(|i| (180_000 + i * 24_937 + jitter(i), 1)).collect();
        let chunks = Chunks::from(steady.clone());
        assert!(chunks.bytes.len() <= 3 + 3 + 499 * 2, "{} bytes", chunks.bytes.len());
        assert_eq!(chunks, steady);
        // Several tokens a chunk: their count takes a byte more.
        let chunks: Chunks = steady.iter().map(|&(at, _)| (at, 8)).collect();
        assert!(chunks.bytes.len() <= 3 + 3 + 499 * 3, "{} bytes", chunks.bytes.len());
        // A bursty stream (five chunks at once, then 40 ms of nothing) packs as it did before.
        let bursty: Vec<(i64, u32)> = (0..500).map(|i| (180_000 + i / 5 * 40_000, 1)).collect();
        let chunks = Chunks::from(bursty.clone());
        assert!(chunks.bytes.len() <= 3 + 400 + 99 * 3, "{} bytes", chunks.bytes.len());
        assert_eq!(chunks, bursty);
    }

    #[test]
    fn written_and_read_as_pairs_as_before() {
        let chunks = Chunks::from(vec![(1_000, 1), (2_500, 3)]);
        let json = serde_json::to_string(&chunks).unwrap();
        assert_eq!(json, "[[1000,1],[2500,3]]");
        assert_eq!(serde_json::from_str::<Chunks>(&json).unwrap(), chunks);
        assert_eq!(format!("{chunks:?}"), "[(1000, 1), (2500, 3)]");
    }

    #[test]
    fn chunk_text_comes_back_as_it_went_in_and_is_written_as_pairs() {
        let text = vec![(0, 5), (12, 0), (u32::MAX, u32::MAX), (0, 1)];
        let held = ChunkText::from(text.as_slice());
        assert_eq!(held.iter().collect::<Vec<_>>(), text);
        assert_eq!(held, text);
        let json = serde_json::to_string(&held).unwrap();
        assert_eq!(json, serde_json::to_string(&text).unwrap());
        assert_eq!(serde_json::from_str::<ChunkText>(&json).unwrap(), held);
        assert!(ChunkText::default().is_empty());
    }

    #[test]
    fn counts_replaced_in_order_keep_the_offsets() {
        let chunks = Chunks::from(vec![(1, 2), (2, 6), (3, 4)]);
        assert_eq!(chunks.with_counts([1, 9, 2]), vec![(1, 1), (2, 9), (3, 2)]);
        assert_eq!(chunks.with_counts([7]), vec![(1, 7), (2, 6), (3, 4)]);
    }

    #[test]
    fn with_only_the_first_kept_a_record_still_answers_what_the_figures_read_of_it() {
        // A steady stream, packed second order, and a bursty one, first order.
        let steady: Vec<(i64, u32)> = (0..300).map(|i| (80_000 + i * 10_000 + (i % 3) * 700, 1)).collect();
        let bursty = vec![(40_000, 3), (40_000, 1), (900_000, 2), (900_001, 5)];
        for chunks in [steady, bursty] {
            let mut held = Chunks::from(chunks.clone());
            let before = held.bytes.len();
            held.keep_first_only();
            assert_eq!(held.first_tokens(), Some(chunks[0].1));
            assert_eq!(held.len(), chunks.len());
            assert_eq!(held.tokens(), chunks.iter().map(|c| u64::from(c.1)).sum::<u64>());
            assert!(held.bytes.len() < before, "{} of {before} bytes", held.bytes.len());
            // A first chunk of one token, the common case, holds no allocation at all.
            assert_eq!(held.bytes.is_empty(), chunks[0].1 == 1);
            // Letting go twice changes nothing.
            let again = held.clone();
            held.keep_first_only();
            assert_eq!(held, again);
            assert!(serde_json::to_string(&held).is_err(), "never written without its times");
            assert!(format!("{held:?}").contains("let go"));
        }
        // Nothing to let go of: one chunk, or none.
        for chunks in [vec![(7, 2)], vec![]] {
            let mut held = Chunks::from(chunks.clone());
            held.keep_first_only();
            assert_eq!(held, chunks);
        }
    }

    #[test]
    #[should_panic(expected = "let go")]
    fn chunks_whose_times_were_let_go_are_never_iterated() {
        let mut held = Chunks::from(vec![(1, 1), (2, 1)]);
        held.keep_first_only();
        let _ = held.iter().count();
    }
}
