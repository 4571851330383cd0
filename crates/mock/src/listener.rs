//! The mock's connections: every read stamped by the kernel (`crate::kernel_stamps`), so a
//! request's receipt is when it reached the machine. A mock whose thread is busy (calibration
//! at c=256 on two cores) reads a request milliseconds late; its ground truth must not start
//! that late, or the harness it calibrates is blamed for the mock's queue.
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::kernel_stamps;
use crate::tls::MockStream;

/// Accepts connections with receive stamps on and no Nagle delay (tokens are small writes that
/// must leave at once); over TLS when given an acceptor.
pub(crate) struct StampedListener(TcpListener, Option<tokio_rustls::TlsAcceptor>);

impl StampedListener {
    pub(crate) fn new(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) -> StampedListener {
        kernel_stamps::enable(&listener);
        StampedListener(listener, tls)
    }
}

impl Listener for StampedListener {
    type Io = MockStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (MockStream, SocketAddr) {
        let (stream, addr) = Listener::accept(&mut self.0).await;
        let _ = stream.set_nodelay(true);
        // Receive stamps are inherited from the listener.
        let stream = StampedStream {
            stream,
            last_read: LastRead {
                ns: Arc::default(),
                peer: Some(addr),
                connection: CONNECTIONS.fetch_add(1, Ordering::Relaxed) + 1,
            },
        };
        (MockStream::new(stream, self.1.as_ref()), addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// Connections accepted by every mock of the process: numbers each one (from 1).
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// What a handler knows of the connection its request came on: when the latest read of its
/// bytes reached the machine (kernel ns since the Unix epoch; 0 before any stamped read) —
/// HTTP/1 carries one request at a time, so when a handler runs with the whole request read,
/// this is the receipt of that request's last byte — and which connection it is (the client's
/// address and port, and the connection's number), the ground truth of which requests shared
/// a connection.
#[derive(Clone, Default)]
pub(crate) struct LastRead {
    ns: Arc<AtomicI64>,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) connection: u64,
}

impl LastRead {
    pub(crate) fn kernel_ns(&self) -> Option<i64> {
        Some(self.ns.load(Ordering::Relaxed)).filter(|&ns| ns > 0)
    }
}

impl Connected<IncomingStream<'_, StampedListener>> for LastRead {
    fn connect_info(stream: IncomingStream<'_, StampedListener>) -> Self {
        stream.io().last_read()
    }
}

pub(crate) struct StampedStream {
    stream: TcpStream,
    last_read: LastRead,
}

impl StampedStream {
    pub(crate) fn last_read(&self) -> LastRead {
        self.last_read.clone()
    }
}

impl AsyncRead for StampedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.stream.poll_read_ready(cx))?;
            // SAFETY: recv only writes bytes into the unfilled part, and they are marked
            // initialised below only up to the count it returned.
            let unfilled = unsafe { buf.unfilled_mut() };
            match this
                .stream
                .try_io(Interest::READABLE, || kernel_stamps::recv(&this.stream, unfilled))
            {
                Ok((n, stamp)) => {
                    // SAFETY: recv initialised the first n bytes of the unfilled part.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if let Some(ns) = stamp.filter(|_| n > 0) {
                        this.last_read.ns.store(ns, Ordering::Relaxed);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for StampedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
