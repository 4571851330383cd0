//! A streamed response's token-bearing chunks, held compactly.
//!
//! Every record keeps (offset µs from send, tokens) for each token-bearing chunk: ITL, TPOT and
//! the token timeline rest on them. As pairs that is 16 bytes a chunk — most of a long
//! response's record (8 KB for a 500-token stream) — and a run's summaries, exports and live
//! views hold every record of a candidate at once. Here each chunk is one varint: the zigzag
//! difference of its offset from the previous one, shifted left, its low bit set when the chunk
//! carried one token (most servers send one a chunk); any other count follows as a varint of its
//! own. 3 bytes a chunk for real streams of one token a chunk (4 with other counts), and
//! lossless for any offsets (out of order or negative ones too).
//!
//! [`ChunkText`], the bytes of text each chunk carried (kept for a record a server tokenizer may
//! recount), is packed the same way: 8 bytes a chunk as pairs, about 2 here.
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Chunks {
    bytes: Box<[u8]>,
    len: u32,
    /// Tokens over every chunk, or `u32::MAX` when that does not fit (then counted on demand):
    /// the per-request figures ask for it of every record, and it fits beside `len` for free.
    tokens: u32,
}

impl Chunks {
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (offset µs, tokens) of every chunk, in the order they were stored.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            left: self.len,
            at: 0,
        }
    }

    pub fn first(&self) -> Option<(i64, u32)> {
        self.iter().next()
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

/// Packs chunks one at a time.
#[derive(Default)]
struct Packer {
    bytes: Vec<u8>,
    len: u32,
    tokens: u64,
    prev: i64,
}

impl Packer {
    fn with_capacity(chunks: usize) -> Packer {
        Packer {
            bytes: Vec::with_capacity(chunks * 3),
            ..Packer::default()
        }
    }

    fn push(&mut self, (at, k): (i64, u32)) {
        let delta = at.wrapping_sub(self.prev);
        let zigzag = ((delta << 1) ^ (delta >> 63)) as u64;
        // Wider than 64 bits only for a difference beyond ±2⁶²: never a real stream's.
        put_varint(&mut self.bytes, u128::from(zigzag) << 1 | u128::from(k == 1));
        if k != 1 {
            put_varint(&mut self.bytes, u128::from(k));
        }
        self.prev = at;
        self.len += 1;
        self.tokens += u64::from(k);
    }

    fn finish(self) -> Chunks {
        Chunks {
            bytes: self.bytes.into_boxed_slice(),
            len: self.len,
            tokens: u32::try_from(self.tokens).unwrap_or(u32::MAX),
        }
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
        f.debug_list().entries(self.iter()).finish()
    }
}

/// As a list of `[offset, tokens]` pairs, as records have always been written.
impl Serialize for Chunks {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
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
    /// The offset of the chunk before.
    at: i64,
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
        let delta = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        self.at = self.at.wrapping_add(delta);
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
        // 500 chunks ~25 ms apart, one token each: 16 bytes a chunk as pairs.
        let chunks: Chunks = (0..500).map(|i| (180_000 + i * 24_937, 1)).collect();
        assert!(chunks.bytes.len() <= 500 * 3, "{} bytes", chunks.bytes.len());
        // Several tokens a chunk: their count takes a byte more.
        let chunks: Chunks = (0..500).map(|i| (180_000 + i * 24_937, 8)).collect();
        assert!(chunks.bytes.len() <= 500 * 4, "{} bytes", chunks.bytes.len());
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
}
