//! API keys sealed at rest with an authenticated cipher (XChaCha20-Poly1305, random 192-bit
//! nonce per value): a database dump holds only ciphertext, and a value altered or moved to
//! another column fails to open instead of decrypting to garbage.
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// Prefix of a sealed value as stored; anything without it is a plaintext key from before
/// sealing (migrated on start).
pub const SEALED_PREFIX: &str = "sealed:v1:";

/// Bound into every ciphertext, so a sealed key only opens as an API key.
const CONTEXT: &[u8] = b"bakeoff api key v1";

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

    /// `sealed:v1:` + base64(nonce ‖ ciphertext).
    pub fn seal(&self, plaintext: &str) -> String {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).expect("the operating system's random source");
        let ciphertext = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: CONTEXT,
                },
            )
            .expect("XChaCha20-Poly1305 seals any length that fits in memory");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&ciphertext);
        format!("{SEALED_PREFIX}{}", B64.encode(bytes))
    }

    pub fn open(&self, stored: &str) -> Result<String, SealError> {
        let encoded = stored.strip_prefix(SEALED_PREFIX).ok_or(SealError::NotSealed)?;
        let bytes = B64.decode(encoded).map_err(|_| SealError::WrongKeyOrAltered)?;
        if bytes.len() < 24 {
            return Err(SealError::WrongKeyOrAltered);
        }
        let (nonce, ciphertext) = bytes.split_at(24);
        let nonce: [u8; 24] = nonce.try_into().map_err(|_| SealError::WrongKeyOrAltered)?;
        let plain = self
            .cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: CONTEXT,
                },
            )
            .map_err(|_| SealError::WrongKeyOrAltered)?;
        String::from_utf8(plain).map_err(|_| SealError::WrongKeyOrAltered)
    }
}

pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
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
        assert_eq!(sealer.open(&a).unwrap(), "sk-live-123456");
        assert_eq!(KeySealer::new(&[2; 32]).open(&a), Err(SealError::WrongKeyOrAltered));
        let mut altered = a.clone();
        let i = a.len() - 10;
        let flipped = if &a[i..=i] == "A" { "B" } else { "A" };
        altered.replace_range(i..=i, flipped);
        assert!(sealer.open(&altered).is_err());
        assert_eq!(sealer.open("sk-plain"), Err(SealError::NotSealed));
        assert_eq!(format!("{sealer:?}"), "KeySealer(****)");
    }
}
