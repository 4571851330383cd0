//! The mock over TLS (`bakeoff mock --tls-cert --tls-key`), so `https` candidates and
//! `bakeoff calibrate --tls` are checked against the same ground truth as plain ones.
//!
//! Each connection's handshake runs inside its first read or write (never in the accept loop,
//! which a slow client would otherwise hold up), over the stamped stream: the request's receipt
//! is still the kernel's receive time of the read that brought its last bytes.
use std::future::Future as _;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use anyhow::Context as _;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::{Accept, TlsAcceptor, server::TlsStream};

use crate::listener::{LastRead, StampedStream};

/// The server configuration from a PEM certificate chain and its PEM private key; ALPN
/// `http/1.1`. Errors name the file and what is wrong with it.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: {e:?}", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("--tls-cert {}: no PEM certificate in it", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| anyhow::anyhow!("--tls-key {}: {e:?}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS setup")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("--tls-cert and --tls-key do not make a usable certificate")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A connection the mock serves: plain, or TLS (handshaking until its first bytes).
pub(crate) enum MockStream {
    Plain(StampedStream),
    Handshaking(Box<Accept<StampedStream>>, LastRead),
    Tls(Box<TlsStream<StampedStream>>, LastRead),
    /// The handshake failed: every read and write says so.
    Failed(LastRead),
}

impl MockStream {
    pub(crate) fn new(stream: StampedStream, tls: Option<&TlsAcceptor>) -> MockStream {
        match tls {
            None => MockStream::Plain(stream),
            Some(acceptor) => {
                let last = stream.last_read();
                MockStream::Handshaking(Box::new(acceptor.accept(stream)), last)
            }
        }
    }

    pub(crate) fn last_read(&self) -> LastRead {
        match self {
            MockStream::Plain(s) => s.last_read(),
            MockStream::Handshaking(_, last) | MockStream::Tls(_, last) | MockStream::Failed(last) => last.clone(),
        }
    }

    /// Drives the handshake; ready once the connection carries application data.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let MockStream::Handshaking(accept, last) = self {
            let last = last.clone();
            match ready!(Pin::new(accept.as_mut()).poll(cx)) {
                Ok(stream) => *self = MockStream::Tls(Box::new(stream), last),
                Err(e) => {
                    *self = MockStream::Failed(last);
                    return Poll::Ready(Err(e));
                }
            }
        }
        match self {
            MockStream::Failed(_) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the TLS handshake failed",
            ))),
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncRead for MockStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_ready(cx))?;
        match this {
            MockStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MockStream::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
            _ => unreachable!("poll_ready leaves a connection plain, TLS or failed (an error)"),
        }
    }
}

impl AsyncWrite for MockStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_ready(cx))?;
        match this {
            MockStream::Plain(s) => Pin::new(s).poll_write(cx, data),
            MockStream::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, data),
            _ => unreachable!("poll_ready leaves a connection plain, TLS or failed (an error)"),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_ready(cx))?;
        match this {
            MockStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MockStream::Tls(s, _) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            _ => unreachable!("poll_ready leaves a connection plain, TLS or failed (an error)"),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MockStream::Plain(s) => s.is_write_vectored(),
            MockStream::Tls(s, _) => s.is_write_vectored(),
            _ => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_flush(cx),
            MockStream::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MockStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MockStream::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}

/// A certificate authority and a loopback server certificate it signed, made with the
/// `openssl` command in `dir`: for tests and `bakeoff calibrate --tls`, never for a real server.
#[derive(Debug, Clone)]
pub struct LoopbackCerts {
    /// The CA certificate (PEM): what a client trusts.
    pub ca: PathBuf,
    /// The server's certificate (PEM), for `127.0.0.1`, `::1` and `localhost`.
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// A second CA's certificate that signed nothing here: trusting it is trusting the wrong one.
    pub other_ca: PathBuf,
}

impl LoopbackCerts {
    /// Makes the files (P-256 keys, valid for a day). Needs the `openssl` command.
    pub fn make(dir: &Path) -> anyhow::Result<LoopbackCerts> {
        let path = |name: &str| dir.join(name);
        let run = |args: &[&str]| -> anyhow::Result<()> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .context("running `openssl` to make a test certificate (is OpenSSL's command installed?)")?;
            if !out.status.success() {
                anyhow::bail!(
                    "openssl {} failed: {}",
                    args.first().unwrap_or(&""),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for (name, subject) in [("ca", "/CN=bakeoff test CA"), ("other-ca", "/CN=bakeoff other CA")] {
            let (key, cert) = (format!("{name}.key"), format!("{name}.pem"));
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend([
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "1",
                "-subj",
                subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            run(&args)?;
        }
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend(["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]);
        run(&args)?;
        std::fs::write(
            path("server.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
             subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n",
        )?;
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "1",
            "-extfile",
            "server.ext",
        ])?;
        Ok(LoopbackCerts {
            ca: path("ca.pem"),
            cert: path("server.pem"),
            key: path("server.key"),
            other_ca: path("other-ca.pem"),
        })
    }
}
