//! The server's secret key: seals API keys at rest (it belongs with the data it protects, so the
//! store opens it) and signs CSRF tokens. Taken from
//! `BAKEOFF_SECRET_KEY` (64 hex digits or base64 of 32 bytes), else from a key file that is
//! created on first start with mode 0600, beside the SQLite database by default.
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::StoreError;

/// 32 secret bytes; `Debug` redacts them.
#[derive(Clone)]
pub struct ServerKey([u8; 32]);

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKey(****)")
    }
}

impl ServerKey {
    pub fn from_bytes(bytes: [u8; 32]) -> ServerKey {
        ServerKey(bytes)
    }

    /// The key API keys are sealed with.
    pub fn sealing_key(&self) -> [u8; 32] {
        self.derive(b"api keys")
    }

    /// The key CSRF tokens are signed with (derived, so one never reveals the other).
    pub fn csrf_key(&self) -> [u8; 32] {
        self.derive(b"csrf")
    }

    fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"bakeoff server key v1\0");
        mac.update(purpose);
        mac.finalize().into_bytes().into()
    }

    /// Parses the environment's value: 64 hex digits, or base64 of 32 bytes.
    pub fn parse(raw: &str) -> Result<ServerKey, StoreError> {
        let raw = raw.trim();
        let bytes = hex::decode(raw)
            .ok()
            .or_else(|| base64::engine::general_purpose::STANDARD.decode(raw).ok());
        match bytes.and_then(|b| <[u8; 32]>::try_from(b).ok()) {
            Some(b) => Ok(ServerKey(b)),
            None => Err(StoreError::Key(
                "BAKEOFF_SECRET_KEY must be 32 bytes as 64 hex digits or base64 (e.g. `openssl rand -hex 32`)".into(),
            )),
        }
    }
}

/// The default key file: beside an SQLite database (`bakeoff.db` → `bakeoff.db.key`), else in
/// the working directory.
pub fn default_key_file(database_url: &str) -> PathBuf {
    super::beside_sqlite_file(database_url, ".key").unwrap_or_else(|| PathBuf::from("bakeoff-secret.key"))
}

/// The key for the database at `url`: `BAKEOFF_SECRET_KEY`, else the file named by
/// `BAKEOFF_SECRET_KEY_FILE`, else [`default_key_file`]; an in-memory database (nothing
/// persists) gets a fresh random key.
pub fn from_environment(url: &str) -> Result<ServerKey, StoreError> {
    if super::is_in_memory(url) && std::env::var("BAKEOFF_SECRET_KEY").is_err() {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        return Ok(ServerKey(bytes));
    }
    let file = std::env::var_os("BAKEOFF_SECRET_KEY_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_key_file(url));
    load(std::env::var("BAKEOFF_SECRET_KEY").ok().as_deref(), &file)
}

/// The key from `env_value` when set, else read from `file` (refused when others can read it),
/// else created there with mode 0600.
pub fn load(env_value: Option<&str>, file: &Path) -> Result<ServerKey, StoreError> {
    if let Some(raw) = env_value.filter(|v| !v.trim().is_empty()) {
        return ServerKey::parse(raw);
    }
    let shown = file.display();
    match std::fs::read_to_string(file) {
        Ok(text) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(file)
                    .map_err(|e| StoreError::Key(format!("reading {shown}: {e}")))?
                    .permissions()
                    .mode();
                if mode & 0o077 != 0 {
                    return Err(StoreError::Key(format!(
                        "the key file {shown} can be read by other users (mode {:o}); run `chmod 600 {shown}`",
                        mode & 0o777
                    )));
                }
            }
            ServerKey::parse(&text).map_err(|_| StoreError::Key(format!("{shown} does not hold a 32-byte key")))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).expect("the operating system's random source");
            // Written whole to a temporary file, then linked into place: a process starting at the
            // same moment either wins or reads the complete key of the one that did.
            let tmp = file.with_extension(format!("tmp{}", hex::encode(&bytes[..4])));
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let written = options
                .open(&tmp)
                .and_then(|mut f| f.write_all(format!("{}\n", hex::encode(bytes)).as_bytes()))
                .and_then(|()| std::fs::hard_link(&tmp, file));
            let _ = std::fs::remove_file(&tmp);
            match written {
                Ok(()) => {
                    tracing::info!(file = %shown, "created the server's secret key file (mode 0600); back it up with the database");
                    Ok(ServerKey(bytes))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load(None, file),
                Err(e) => Err(StoreError::Key(format!("creating the key file {shown}: {e}"))),
            }
        }
        Err(e) => Err(StoreError::Key(format!("reading the key file {shown}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_is_created_0600_then_reused_and_refused_when_readable_by_others() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k.key");
        let first = load(None, &file).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(load(None, &file).unwrap().0, first.0);
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(load(None, &file).unwrap_err().to_string().contains("chmod 600"));
        }
        let hex_key = "11".repeat(32);
        assert_eq!(load(Some(&hex_key), &file).unwrap().0, [0x11; 32]);
        assert!(load(Some("short"), &file).is_err());
        assert_ne!(first.sealing_key(), first.csrf_key());
        assert_eq!(format!("{first:?}"), "ServerKey(****)");
        assert_eq!(default_key_file("sqlite://data/b.db"), PathBuf::from("data/b.db.key"));
    }
}
