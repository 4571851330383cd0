//! API keys sealed at rest with an authenticated cipher (XChaCha20-Poly1305, random 192-bit
//! nonce per value): a database dump holds only ciphertext, and a value altered or moved to
//! another column fails to open instead of decrypting to garbage.
//!
//! `sealed:v2:` values are bound to the candidate they belong to (its id is the cipher's
//! additional data), so a sealed key copied to another candidate's row does not open there.
//! `sealed:v1:` values, from before, were bound to a constant: the store re-seals them as v2
//! when the database is opened ([`KeySealer::open_v1`] is kept for that migration only), and
//! a v1 value met afterwards is refused like an altered one.
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// Prefix of a value sealed before keys were bound to their candidate (migrated on start).
pub const SEALED_PREFIX: &str = "sealed:v1:";
/// Prefix of a sealed value bound to its candidate.
pub const SEALED_V2_PREFIX: &str = "sealed:v2:";

/// Bound into every v1 ciphertext, so a sealed key only opens as an API key.
const CONTEXT: &[u8] = b"bakeoff api key v1";

/// The additional data of a v2 value: the API key of candidate `id`, nothing else.
fn context_v2(candidate_id: i64) -> Vec<u8> {
    format!("bakeoff api key v2\0candidate {candidate_id}").into_bytes()
}

/// The additional data of a secret bound to `owner` (never equal to an API key's).
fn context_bound(owner: &str) -> Vec<u8> {
    format!("bakeoff secret v2\0{owner}").into_bytes()
}

/// Seals and opens API keys with the server's secret key.
#[derive(Clone)]
pub struct KeySealer {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for KeySealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySealer(****)")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("a stored API key is not in the sealed format")]
    NotSealed,
    #[error(
        "a stored API key could not be opened: the server's secret key is not the one it was sealed with, or the value was altered"
    )]
    WrongKeyOrAltered,
}

impl KeySealer {
    pub fn new(secret: &[u8; 32]) -> KeySealer {
        KeySealer {
            cipher: XChaCha20Poly1305::new(secret.into()),
        }
    }

    /// `sealed:v2:` + base64(nonce ‖ ciphertext), bound to candidate `candidate_id`.
    pub fn seal_for(&self, candidate_id: i64, plaintext: &str) -> String {
        self.seal_with(SEALED_V2_PREFIX, &context_v2(candidate_id), plaintext)
    }

    /// Opens the `sealed:v2:` value of candidate `candidate_id`; a value sealed for another
    /// candidate, or a v1 value, is refused.
    pub fn open_for(&self, candidate_id: i64, stored: &str) -> Result<String, SealError> {
        self.open_with(SEALED_V2_PREFIX, &context_v2(candidate_id), stored)
    }

    /// Opens a `sealed:v1:` value (bound to no candidate): only to re-seal it as v2.
    pub fn open_v1(&self, stored: &str) -> Result<String, SealError> {
        self.open_with(SEALED_PREFIX, CONTEXT, stored)
    }

    /// `sealed:v1:` + base64(nonce ‖ ciphertext): the format before v2, for tests of the migration.
    pub fn seal(&self, plaintext: &str) -> String {
        self.seal_with(SEALED_PREFIX, CONTEXT, plaintext)
    }

    /// A secret other than an API key (a notification target's signing secret or URL),
    /// sealed bound to `owner` ("notification target 3"): it opens only as that owner's.
    pub fn seal_bound(&self, owner: &str, plaintext: &str) -> String {
        self.seal_with(SEALED_V2_PREFIX, &context_bound(owner), plaintext)
    }

    /// Opens a value sealed by [`KeySealer::seal_bound`] for `owner`.
    pub fn open_bound(&self, owner: &str, stored: &str) -> Result<String, SealError> {
        self.open_with(SEALED_V2_PREFIX, &context_bound(owner), stored)
    }

    fn seal_with(&self, prefix: &str, aad: &[u8], plaintext: &str) -> String {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).expect("the operating system's random source");
        let ciphertext = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad,
                },
            )
            .expect("XChaCha20-Poly1305 seals any length that fits in memory");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&ciphertext);
        format!("{prefix}{}", B64.encode(bytes))
    }

    fn open_with(&self, prefix: &str, aad: &[u8], stored: &str) -> Result<String, SealError> {
        let encoded = match stored.strip_prefix(prefix) {
            Some(encoded) => encoded,
            // Sealed, but in the other format: not this value's.
            None if is_sealed(stored) => return Err(SealError::WrongKeyOrAltered),
            None => return Err(SealError::NotSealed),
        };
        let bytes = B64.decode(encoded).map_err(|_| SealError::WrongKeyOrAltered)?;
        if bytes.len() < 24 {
            return Err(SealError::WrongKeyOrAltered);
        }
        let (nonce, ciphertext) = bytes.split_at(24);
        let nonce: [u8; 24] = nonce.try_into().map_err(|_| SealError::WrongKeyOrAltered)?;
        let plain = self
            .cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: ciphertext, aad })
            .map_err(|_| SealError::WrongKeyOrAltered)?;
        String::from_utf8(plain).map_err(|_| SealError::WrongKeyOrAltered)
    }
}

/// Whether a stored value is sealed (in either format); anything else is a plaintext key from
/// before sealing.
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX) || stored.starts_with(SEALED_V2_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_keys_open_only_with_their_secret_and_never_show_the_plaintext() {
        let sealer = KeySealer::new(&[1; 32]);
        let a = sealer.seal("sk-live-123456");
        let b = sealer.seal("sk-live-123456");
        assert!(is_sealed(&a) && !a.contains("sk-live"));
        assert_ne!(a, b, "a fresh nonce per value");
        assert_eq!(sealer.open_v1(&a).unwrap(), "sk-live-123456");
        assert_eq!(KeySealer::new(&[2; 32]).open_v1(&a), Err(SealError::WrongKeyOrAltered));
        let mut altered = a.clone();
        let i = a.len() - 10;
        let flipped = if &a[i..=i] == "A" { "B" } else { "A" };
        altered.replace_range(i..=i, flipped);
        assert!(sealer.open_v1(&altered).is_err());
        assert_eq!(sealer.open_v1("sk-plain"), Err(SealError::NotSealed));
        assert_eq!(format!("{sealer:?}"), "KeySealer(****)");
    }

    #[test]
    fn a_v2_value_opens_only_for_its_candidate() {
        let sealer = KeySealer::new(&[1; 32]);
        let sealed = sealer.seal_for(3, "sk-live-123456");
        assert!(sealed.starts_with(SEALED_V2_PREFIX) && is_sealed(&sealed));
        assert_eq!(sealer.open_for(3, &sealed).unwrap(), "sk-live-123456");
        assert_eq!(sealer.open_for(4, &sealed), Err(SealError::WrongKeyOrAltered));
        // A v1 value is not read as v2 (it is re-sealed on start), nor v2 as v1.
        assert_eq!(sealer.open_for(3, &sealer.seal("k")), Err(SealError::WrongKeyOrAltered));
        assert_eq!(sealer.open_v1(&sealed), Err(SealError::WrongKeyOrAltered));
    }
}
