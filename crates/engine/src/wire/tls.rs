//! TLS for the stamped HTTP/1.1 client (`h1`), so `https` candidates are timed on the same clock
//! as plain-`http` ones: the kernel's receive time of the TCP segment that completed the TLS
//! record carrying a token.
//!
//! rustls is used sans-IO: `h1` reads ciphertext from the socket itself with `recvmsg` (and its
//! kernel stamp), feeds it to rustls, and takes whatever plaintext that read completed, stamped
//! with that read's time. A record split over two reads is plaintext only after the second, so
//! its bytes carry the second read's stamp, when the last of the record reached the machine.
//!
//! Certificates are verified against the system's roots (the OpenSSL bundle file, found as
//! OpenSSL finds it: `SSL_CERT_FILE` or the distribution's path), plus a candidate's own CA
//! file when it names one (an in-house server with a self-signed certificate). SNI is the URL's
//! host name; ALPN offers `http/1.1` only.
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::kernel_stamps;

/// Ciphertext bytes read from the socket at once (a TLS record is at most ~16 KiB).
const CIPHER_READ_BYTES: usize = 17 * 1024;

/// The system's trusted roots, read once: (certificates, where from, how many were unusable).
static SYSTEM_ROOTS: LazyLock<(Vec<CertificateDer<'static>>, String)> = LazyLock::new(|| {
    let probe = openssl_probe::probe();
    let Some(file) = probe.cert_file else {
        return (Vec::new(), "no system CA bundle found (set SSL_CERT_FILE)".into());
    };
    match CertificateDer::pem_file_iter(&file) {
        Ok(certs) => {
            let certs: Vec<_> = certs.filter_map(Result::ok).collect();
            let from = format!("{} ({} certificates)", file.display(), certs.len());
            (certs, from)
        }
        Err(e) => (Vec::new(), format!("reading {}: {e}", file.display())),
    }
});

/// The client configuration of one candidate: the system roots and, when given, the
/// certificates of `ca_file` (PEM). An unreadable or empty CA file is an error naming it.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    // A system bundle's odd certificate (an unsupported key type) costs only that certificate.
    let _ = roots.add_parsable_certificates(SYSTEM_ROOTS.0.iter().cloned());
    if let Some(path) = ca_file {
        let shown = path.display();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("TLS CA file {shown}: {}", pem_error(&e)))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("TLS CA file {shown}: {}", pem_error(&e)))?;
        if certs.is_empty() {
            return Err(format!(
                "TLS CA file {shown}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
            ));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("TLS CA file {shown}: a certificate is not usable as a CA: {e}"))?;
        }
    }
    if roots.is_empty() {
        return Err(format!("no trusted TLS roots: {}", SYSTEM_ROOTS.1));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What is wrong with a CA file, never quoting it (the path may be any file on the machine).
fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        _ => "not a PEM file of certificates".to_string(),
    }
}

/// One connection's TLS state.
pub struct Session {
    conn: ClientConnection,
    /// Ciphertext read from the socket, fed to rustls as it is read.
    cipher: Vec<u8>,
}

/// Why a handshake failed: the message names the host and what rustls refused.
#[derive(Debug)]
pub struct HandshakeError(pub String);

impl Session {
    /// Handshakes on a connected socket. `host` is the URL's host (SNI and the name the
    /// certificate must carry).
    pub async fn connect(stream: &TcpStream, config: &Arc<ClientConfig>, host: &str) -> Result<Self, HandshakeError> {
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
            .map_err(|e| HandshakeError(format!("TLS: {host} is not a valid server name: {e}")))?;
        let conn = ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| HandshakeError(format!("TLS setup for {host}: {e}")))?;
        let mut session = Session {
            conn,
            cipher: Vec::with_capacity(CIPHER_READ_BYTES),
        };
        let failed = |e: io::Error| HandshakeError(format!("TLS handshake with {host} failed: {e}"));
        while session.conn.is_handshaking() {
            if session.conn.wants_write() {
                session.flush(stream).await.map_err(failed)?;
                continue;
            }
            let mut plain = Vec::new();
            let (n, _) = stream
                .async_io(Interest::READABLE, || session.read_stamped(stream, &mut plain))
                .await
                .map_err(failed)?;
            if n == 0 {
                return Err(HandshakeError(format!(
                    "TLS handshake with {host} failed: the server closed the connection"
                )));
            }
        }
        // The Finished message (and anything else queued) goes out before the request.
        session.flush(stream).await.map_err(failed)?;
        Ok(session)
    }

    /// Encrypts `plain` and writes it whole to the socket.
    pub async fn write_all(&mut self, stream: &TcpStream, plain: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(plain)?;
        self.flush(stream).await
    }

    async fn flush(&mut self, stream: &TcpStream) -> io::Result<()> {
        while self.conn.wants_write() {
            let conn = &mut self.conn;
            stream
                .async_io(Interest::WRITABLE, || conn.write_tls(&mut SocketWriter(stream)))
                .await?;
        }
        Ok(())
    }

    /// One non-blocking read of ciphertext; the plaintext it completed is appended to `plain`.
    /// Returns (socket bytes read, 0 at the end of the stream; the read's kernel stamp). Called
    /// inside a readiness closure: a `WouldBlock` from the socket goes back to the reactor, and
    /// a read that completed no record reads on (it is not an end).
    pub fn read_stamped(&mut self, stream: &TcpStream, plain: &mut Vec<u8>) -> io::Result<(usize, Option<i64>)> {
        // A read during the handshake always returns, so the handshake's loop sees its progress.
        let handshaking = self.conn.is_handshaking();
        loop {
            self.cipher.clear();
            self.cipher.reserve(CIPHER_READ_BYTES);
            let spare: &mut [MaybeUninit<u8>] = &mut self.cipher.spare_capacity_mut()[..CIPHER_READ_BYTES];
            let (n, stamp) = kernel_stamps::recv(stream, spare)?;
            // SAFETY: recv initialised the first n bytes of the spare capacity.
            unsafe { self.cipher.set_len(n) };
            if n == 0 {
                // Ends the rustls stream too; a close without close_notify is an end like any.
                let _ = self.conn.read_tls(&mut io::empty());
                return Ok((0, stamp));
            }
            let before = plain.len();
            let mut input = &self.cipher[..];
            while !input.is_empty() {
                self.conn.read_tls(&mut input)?;
                self.conn
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))?;
                take_plaintext(&mut self.conn, plain)?;
            }
            // The handshake's replies (and a key update's) go out with the next write, or now.
            if plain.len() > before || handshaking || self.conn.wants_write() {
                return Ok((n, stamp));
            }
            // Records that carried no application data (a session ticket): read on.
        }
    }

    /// Whether rustls holds nothing unread (ciphertext or plaintext): a pooled connection must not.
    pub fn idle(&mut self) -> bool {
        !self.conn.wants_write()
            && matches!(self.conn.reader().read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// `io::Write` on a non-blocking socket, for rustls's `write_tls` inside a readiness closure.
struct SocketWriter<'a>(&'a TcpStream);

impl Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Moves the plaintext rustls has decrypted into `plain`.
fn take_plaintext(conn: &mut ClientConnection, plain: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 4096];
    loop {
        match conn.reader().read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => plain.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            // A TCP close without close_notify: the end, as on a plain connection.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
