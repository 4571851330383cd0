//! A lean HTTP/1.1 client for plain-`http` candidates, so the measured path can read when each
//! byte reached this machine rather than when bakeoff got round to reading it.
//!
//! Every read is a `recvmsg` with `SO_TIMESTAMPNS` on (Linux, `crate::kernel_stamps`): the
//! kernel hands back, beside the bytes, the wall-clock time its network stack received the
//! read's last packet. A client busy with other streams reads a chunk late; the kernel's time for
//! it is not late. Elsewhere (or if the kernel gives no time) a read's arrival is when it
//! returned, as with any client.
//!
//! It does what the measured requests need and no more: one request at a time per connection,
//! keep-alive pooled per host, `Content-Length`, `chunked` and close-delimited bodies, no
//! redirects, no compression asked for. `https` goes through TLS read the same way (`tls`): a
//! token's time is the kernel's receive time of the segment that completed its TLS record.
//! Proxied candidates go through reqwest.
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use reqwest::header::HeaderMap;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use url::{Host, Position, Url};

use super::failure::Failure;
use super::tls;
use crate::domain::rate_limit::is_rate_limit_header;
use crate::domain::run::ErrorClass;
use crate::kernel_stamps;

/// Most bytes of a response's status line and headers.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most bytes of one chunk-size or trailer line of a chunked body.
const MAX_LINE_BYTES: usize = 4 * 1024;
/// The read buffer's first size; every read has at least a quarter of it free.
const READ_BYTES: usize = 16 * 1024;
/// How long, and for how many bytes, a body left unfinished is read on so its connection can
/// be reused (an OpenAI stream is done at `[DONE]`, before its chunked body's last bytes).
const DRAIN_TIME: Duration = Duration::from_secs(1);
const DRAIN_BYTES: usize = 64 * 1024;
/// How long a finished stream's caller waits inline for those last bytes (they usually follow
/// the end marker at once); the rest is read in the background.
pub const FINISH_WAIT: Duration = Duration::from_millis(20);

/// What `Pool::post` tells its caller about a new connection, so a caller that times out knows
/// whether it was connecting.
#[derive(Debug, Clone, Copy)]
pub enum Connecting {
    Started,
    Made(Duration),
    Failed,
}

/// Idle keep-alive connections, per `host:port` (and per session, see `Pool::post`), shared by
/// all requests of one candidate.
pub struct Pool {
    idle: Mutex<HashMap<String, Vec<Conn>>>,
    max_idle_per_host: usize,
    connect_timeout: Duration,
    user_agent: String,
    /// For `https` URLs (None: an `https` URL is refused).
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// The response's status line and the headers the measurement looks at.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
    /// The rate-limit headers (`domain::rate_limit`), name and value: only those.
    pub rate_limit: Vec<(String, String)>,
    /// The kernel's receive time of the head's last packet (ns since the Unix epoch).
    pub arrived_ns: Option<i64>,
    keep_alive: bool,
    framing: Framing,
}

/// A response body being read; the connection goes back to the pool when the body ends.
pub struct Body {
    conn: Option<Conn>,
    framing: Framing,
    keep_alive: bool,
    /// Kernel receive time of the body's latest bytes.
    last_stamp: Option<i64>,
    /// This is the background read of a dropped body's rest: dropped, it just closes.
    draining: bool,
    pool: Arc<Pool>,
    host: String,
    /// The body bytes decoded from the latest read. Handed out with `split` and reclaimed when
    /// the reader has dropped them, so a stream of reads allocates once, not once per read.
    decoded: BytesMut,
}

/// A connection and the bytes read from it that are not yet consumed.
struct Conn {
    stream: TcpStream,
    /// The TLS session of an `https` connection: reads and writes go through it.
    tls: Option<Box<tls::Session>>,
    buf: Vec<u8>,
    start: usize,
    /// Kernel receive time of the last read's last packet (ns since the Unix epoch).
    stamp: Option<i64>,
}

/// How the body's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked(ChunkState),
    /// Until the server closes the connection (no length, not chunked).
    Close,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailer,
}

/// Why an exchange failed, before the caller turns it into a record's class.
#[derive(Debug)]
pub enum Error {
    /// Each connect variant's detail names the host or address.
    Dns(String),
    Refused(String),
    ConnectTimeout(String),
    Connect(String),
    /// The TLS handshake failed (a certificate refused, no common protocol).
    Tls(String),
    /// Writing the request failed: the server did not get it whole.
    Unsent(io::Error),
    /// Reading the head failed.
    Io(io::Error),
    /// The server closed the connection before a whole head.
    Closed,
    Malformed(String),
}

impl Error {
    pub fn failure(&self) -> Failure {
        match self {
            Error::Dns(detail) => Failure::new(ErrorClass::Dns, detail),
            Error::Refused(detail) => Failure::new(ErrorClass::ConnectRefused, detail),
            Error::ConnectTimeout(detail) => Failure::new(ErrorClass::ConnectTimeout, detail),
            Error::Connect(detail) => Failure::new(ErrorClass::Other, detail),
            Error::Tls(detail) => Failure::new(ErrorClass::Tls, detail),
            Error::Unsent(e) => Failure::new(ErrorClass::Other, format!("sending the request failed: {e}")),
            Error::Io(e) => Failure::new(ErrorClass::Other, format!("request failed: {e}")),
            Error::Closed => Failure::new(
                ErrorClass::Other,
                "connection closed before a response (no status line)",
            ),
            Error::Malformed(detail) => Failure::new(ErrorClass::Other, format!("malformed HTTP response: {detail}")),
        }
    }

    /// The request never reached the server whole: on a pooled connection this is the server
    /// having closed it while idle, and the request is sent again on a new one.
    fn unsent(&self) -> bool {
        matches!(self, Error::Unsent(_))
    }

    /// The server closed (or reset) the connection without a byte of answer.
    fn unanswered(&self) -> bool {
        match self {
            Error::Closed => true,
            Error::Io(e) => e.kind() == io::ErrorKind::ConnectionReset,
            _ => false,
        }
    }
}

/// What a session's pool key adds to its host's.
fn session_suffix(session: u32) -> String {
    format!("#session-{session}")
}

impl Pool {
    pub fn new(
        max_idle_per_host: usize,
        connect_timeout: Duration,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Arc<Self> {
        Arc::new(Pool {
            idle: Mutex::new(HashMap::new()),
            max_idle_per_host: max_idle_per_host.max(1),
            connect_timeout,
            user_agent: format!("bakeoff/{}", crate::VERSION),
            tls,
        })
    }

    /// Sends a POST and reads the response head. `on_connect` hears of every new connection:
    /// started, then made (in how long) or failed. A request of `session` goes on that
    /// session's own idle connection (a simulated user keeps one connection for all its turns,
    /// as a browser or SDK client would) and its connection goes back to that session only.
    pub async fn post(
        self: &Arc<Self>,
        url: &Url,
        headers: &HeaderMap,
        body: &[u8],
        session: Option<u32>,
        on_connect: &(dyn Fn(Connecting) + Sync),
    ) -> Result<(Head, Body), Error> {
        let host = authority(url)?;
        let request = self.request_bytes(url, &host, headers, body);
        // Pooled by scheme too: `https://h` and `http://h` are different servers.
        let host = match session {
            None => format!("{}://{host}", url.scheme()),
            Some(s) => format!("{}://{host}{}", url.scheme(), session_suffix(s)),
        };
        loop {
            let (mut conn, reused) = match self.take(&host) {
                Some(conn) => (conn, true),
                None => {
                    on_connect(Connecting::Started);
                    let started = Instant::now();
                    match self.connect(url).await {
                        Ok(conn) => {
                            on_connect(Connecting::Made(started.elapsed()));
                            (conn, false)
                        }
                        Err(e) => {
                            on_connect(Connecting::Failed);
                            return Err(e);
                        }
                    }
                }
            };
            match exchange_head(&mut conn, &request).await {
                Ok(head) => {
                    let body = Body {
                        conn: Some(conn),
                        framing: head.framing,
                        keep_alive: head.keep_alive,
                        last_stamp: head.arrived_ns,
                        draining: false,
                        pool: Arc::clone(self),
                        host,
                        decoded: BytesMut::new(),
                    };
                    return Ok((head, body));
                }
                Err(e) if reused && e.unsent() => continue,
                // A pooled connection the server closed as the request reached it (an idle
                // timeout racing the request): its kernel refused the request unread (a reset),
                // so it is sent again on a new connection. A server that read the request and
                // then closed without answering (a crash) failed it: that request is never sent
                // again (a second send would hide the failure and cost it twice).
                Err(e) if reused && e.unanswered() && refused_unread(&conn.stream).await => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn request_bytes(&self, url: &Url, host: &str, headers: &HeaderMap, body: &[u8]) -> Vec<u8> {
        let target = &url[Position::BeforePath..Position::AfterQuery];
        let mut out = Vec::with_capacity(256 + body.len());
        let line = format!(
            "POST {target} HTTP/1.1\r\nhost: {host}\r\nuser-agent: {}\r\ncontent-length: {}\r\n",
            self.user_agent,
            body.len()
        );
        out.extend_from_slice(line.as_bytes());
        for (name, value) in headers {
            // Framing and routing are this client's to state, once.
            if matches!(
                name.as_str(),
                "host" | "content-length" | "transfer-encoding" | "connection"
            ) {
                continue;
            }
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        out
    }

    /// A pooled connection that is still usable: one with unread bytes or a close already
    /// received is dropped.
    fn take(&self, host: &str) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let conns = idle.get_mut(host)?;
        while let Some(mut conn) = conns.pop() {
            if idle_and_open(&conn.stream) && conn.tls.as_mut().is_none_or(|t| t.idle()) {
                return Some(conn);
            }
        }
        None
    }

    /// Ends `session`: its idle connections go back to the shared pool of their host (as many
    /// as it has room for; the rest are closed).
    pub fn end_session(&self, session: u32) {
        let suffix = session_suffix(session);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let ended: Vec<String> = idle.keys().filter(|k| k.ends_with(&suffix)).cloned().collect();
        for key in ended {
            let Some(conns) = idle.remove(&key) else { continue };
            let shared = idle.entry(key[..key.len() - suffix.len()].to_string()).or_default();
            for conn in conns {
                if shared.len() < self.max_idle_per_host {
                    shared.push(conn);
                }
            }
        }
    }

    fn put(&self, host: String, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let conns = idle.entry(host).or_default();
        if conns.len() < self.max_idle_per_host {
            conns.push(conn);
        }
    }

    async fn connect(&self, url: &Url) -> Result<Conn, Error> {
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = match url.host() {
            Some(Host::Ipv4(ip)) => vec![SocketAddr::from((ip, port))],
            Some(Host::Ipv6(ip)) => vec![SocketAddr::from((ip, port))],
            Some(Host::Domain(name)) => {
                match timeout(self.connect_timeout, tokio::net::lookup_host((name, port))).await {
                    Err(_) => return Err(self.timed_out(name)),
                    Ok(Err(e)) => return Err(Error::Dns(format!("DNS lookup of {name} failed: {e}"))),
                    Ok(Ok(found)) => found.collect(),
                }
            }
            None => return Err(Error::Malformed("URL has no host".into())),
        };
        let deadline = Instant::now() + self.connect_timeout;
        let mut last = Error::Dns(format!(
            "DNS lookup of {} found no address",
            url.host_str().unwrap_or("?")
        ));
        for addr in addrs {
            match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
                Err(_) => return Err(self.timed_out(&addr.to_string())),
                Ok(Ok(stream)) => {
                    let mut conn = Conn::new(stream)
                        .map_err(|e| Error::Connect(format!("setting up the connection to {addr}: {e}")))?;
                    if url.scheme() == "https" {
                        let host = url.host_str().unwrap_or_default();
                        conn.tls = Some(Box::new(self.handshake(&conn.stream, host, deadline).await?));
                    }
                    return Ok(conn);
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    last = Error::Refused(format!("connection to {addr} refused: {e}"));
                }
                Ok(Err(e)) => last = Error::Connect(format!("connecting to {addr} failed: {e}")),
            }
        }
        Err(last)
    }

    /// The TLS handshake, within what is left of the connect timeout.
    async fn handshake(&self, stream: &TcpStream, host: &str, deadline: Instant) -> Result<tls::Session, Error> {
        let Some(config) = &self.tls else {
            return Err(Error::Tls(format!("https to {host}: no TLS configuration")));
        };
        match tokio::time::timeout_at(deadline, tls::Session::connect(stream, config, host)).await {
            Err(_) => Err(self.timed_out(&format!("{host} (TLS handshake)"))),
            Ok(Err(e)) => Err(Error::Tls(e.0)),
            Ok(Ok(session)) => Ok(session),
        }
    }

    fn timed_out(&self, to: &str) -> Error {
        let secs = self.connect_timeout.as_secs_f64();
        Error::ConnectTimeout(format!("no TCP connection to {to} within {secs:.1} s"))
    }
}

/// `host[:port]` as the `Host` header and the pool's key name it.
fn authority(url: &Url) -> Result<String, Error> {
    let host = url
        .host_str()
        .ok_or_else(|| Error::Malformed("URL has no host".into()))?;
    Ok(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

async fn exchange_head(conn: &mut Conn, request: &[u8]) -> Result<Head, Error> {
    match &mut conn.tls {
        Some(tls) => tls.write_all(&conn.stream, request).await,
        None => conn.stream.write_all(request).await,
    }
    .map_err(Error::Unsent)?;
    loop {
        if let Some(head) = conn.parse_head()? {
            // 1xx answers (100 Continue, 103 Early Hints) precede the real one.
            if (100..200).contains(&head.status) && head.status != 101 {
                continue;
            }
            return Ok(head);
        }
        match conn.fill().await {
            Ok(0) if conn.pending().is_empty() => return Err(Error::Closed),
            Ok(0) => return Err(Error::Malformed("connection closed inside the response head".into())),
            Ok(_) => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

impl Conn {
    fn new(stream: TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        kernel_stamps::enable(&stream);
        Ok(Conn {
            stream,
            tls: None,
            buf: Vec::with_capacity(READ_BYTES),
            start: 0,
            stamp: None,
        })
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads once more after what is pending; 0 at the end of the stream.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.reserve(READ_BYTES / 4);
        let stream = &self.stream;
        let before = self.buf.len();
        // The read appends inside the readiness closure, so a read cancelled while waiting (a
        // stream's timer firing) leaves the buffer as it was.
        let (n, stamp) = match &mut self.tls {
            Some(tls) => {
                let buf = &mut self.buf;
                stream
                    .async_io(Interest::READABLE, || tls.read_stamped(stream, buf))
                    .await?
            }
            None => {
                stream
                    .async_io(Interest::READABLE, || read_stamped(stream, &mut self.buf))
                    .await?
            }
        };
        // Under TLS, the stamp of the read that completed the record the new bytes came in.
        if self.buf.len() > before {
            self.stamp = stamp;
        }
        Ok(n)
    }

    /// The head, once all of it is pending (and consumed from the buffer).
    fn parse_head(&mut self) -> Result<Option<Head>, Error> {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(self.pending()) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if self.pending().len() > MAX_HEAD_BYTES => {
                return Err(Error::Malformed(format!("head longer than {MAX_HEAD_BYTES} bytes")));
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                let start = String::from_utf8_lossy(&self.pending()[..self.pending().len().min(80)]).into_owned();
                return Err(Error::Malformed(format!("{e} in {start:?}")));
            }
        };
        let status = response.code.unwrap_or_default();
        let http11 = response.version == Some(1);
        let (mut content_type, mut retry_after, mut length) = (None, None, None);
        let mut rate_limit = Vec::new();
        let (mut chunked, mut close, mut keep_alive_asked, mut llama_cpp) = (false, false, false, false);
        for h in response.headers.iter() {
            let value = String::from_utf8_lossy(h.value);
            let value = value.trim();
            let name = h.name;
            if is_rate_limit_header(name) {
                rate_limit.push((name.to_string(), value.to_string()));
            }
            if name.eq_ignore_ascii_case("content-type") {
                content_type = Some(value.to_ascii_lowercase());
            } else if name.eq_ignore_ascii_case("retry-after") {
                retry_after = Some(value.to_string());
            } else if name.eq_ignore_ascii_case("content-length") {
                let n = value
                    .parse::<u64>()
                    .map_err(|_| Error::Malformed(format!("content-length {value:?}")))?;
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                // The last coding decides the framing (RFC 9112 §6.3).
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            } else if name.eq_ignore_ascii_case("connection") {
                for token in value.split(',').map(str::trim) {
                    close |= token.eq_ignore_ascii_case("close");
                    keep_alive_asked |= token.eq_ignore_ascii_case("keep-alive");
                }
            } else if name.eq_ignore_ascii_case("server") {
                llama_cpp = value.starts_with("llama.cpp");
            }
        }
        // llama.cpp's server closes the connection after every chunked (streamed) answer,
        // although it says keep-alive (its cpp-httplib takes the stream's last `false` for a
        // cancel). Its close can come after the next request was sent on the connection, which
        // then fails unanswered: such a connection is never kept.
        close |= llama_cpp && chunked;
        let framing = if matches!(status, 100..=199 | 204 | 304) {
            Framing::Done
        } else if chunked {
            Framing::Chunked(ChunkState::Size)
        } else if let Some(n) = length {
            if n == 0 { Framing::Done } else { Framing::Length(n) }
        } else {
            Framing::Close
        };
        self.consume(len);
        Ok(Some(Head {
            status,
            content_type,
            retry_after,
            rate_limit,
            arrived_ns: self.stamp,
            keep_alive: !close && (http11 || keep_alive_asked),
            framing,
        }))
    }
}

impl Body {
    /// The next bytes of the body and their arrival (kernel ns since the Unix epoch, when known);
    /// `None` at its end. All bytes decoded from one read come together.
    pub async fn next(&mut self) -> Option<io::Result<(Bytes, Option<i64>)>> {
        loop {
            let conn = self.conn.as_mut()?;
            if !conn.pending().is_empty() && self.framing != Framing::Done {
                let used = match self.framing.decode(conn.pending(), &mut self.decoded) {
                    Ok(used) => used,
                    Err(e) => return Some(Err(self.fail(e))),
                };
                conn.consume(used);
            }
            let stamp = conn.stamp;
            if self.framing == Framing::Done {
                self.release();
            }
            if !self.decoded.is_empty() {
                self.last_stamp = stamp;
                return Some(Ok((self.decoded.split().freeze(), stamp)));
            }
            let conn = self.conn.as_mut()?;
            match conn.fill().await {
                Ok(0) if self.framing == Framing::Close => {
                    self.conn = None;
                    return None;
                }
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the body ended");
                    return Some(Err(self.fail(e)));
                }
                Ok(_) => {}
                Err(e) => return Some(Err(self.fail(e))),
            }
        }
    }

    /// Reads the rest of a body whose content is complete (a stream past its end marker) so the
    /// connection can carry the next request; what is not there within `wait` is left to the
    /// background read of `Drop` (which ends here too, and is then dropped for good).
    pub async fn finish(mut self, wait: Duration) {
        let _ = timeout(wait, async {
            let mut read = 0;
            while read <= DRAIN_BYTES {
                match self.next().await {
                    Some(Ok((bytes, _))) => read += bytes.len(),
                    _ => return,
                }
            }
        })
        .await;
    }

    /// The kernel's receive time of the body's last bytes (of the head, before any).
    pub fn last_arrival(&self) -> Option<i64> {
        self.last_stamp
    }

    fn fail(&mut self, e: io::Error) -> io::Error {
        self.conn = None;
        e
    }

    /// The body ended: its connection goes back to the pool if it can carry another request.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.pending().is_empty()
        {
            self.pool.put(std::mem::take(&mut self.host), conn);
        }
    }
}

impl Drop for Body {
    /// A body dropped before its end is read to its end in the background, briefly, so the
    /// connection goes back to the pool instead of being closed.
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        let (Ok(runtime), true, false) = (
            tokio::runtime::Handle::try_current(),
            self.keep_alive && !self.draining,
            matches!(self.framing, Framing::Close | Framing::Done),
        ) else {
            return;
        };
        let rest = Body {
            conn: Some(conn),
            framing: self.framing,
            keep_alive: true,
            last_stamp: None,
            draining: true,
            pool: Arc::clone(&self.pool),
            host: std::mem::take(&mut self.host),
            decoded: BytesMut::new(),
        };
        runtime.spawn(rest.finish(DRAIN_TIME));
    }
}

impl Framing {
    /// Decodes body bytes from `input` into `out`; returns how many input bytes were used
    /// (an incomplete size or trailer line is left for the next read).
    fn decode(&mut self, input: &[u8], out: &mut impl BufMut) -> io::Result<usize> {
        let mut at = 0;
        loop {
            let rest = &input[at..];
            match self {
                Framing::Done => return Ok(at),
                Framing::Close => {
                    out.put_slice(rest);
                    return Ok(input.len());
                }
                Framing::Length(left) => {
                    let take = rest.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    out.put_slice(&rest[..take]);
                    *left -= take as u64;
                    if *left == 0 {
                        *self = Framing::Done;
                    }
                    return Ok(at + take);
                }
                Framing::Chunked(ChunkState::Data(left)) => {
                    let take = rest.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    out.put_slice(&rest[..take]);
                    *left -= take as u64;
                    at += take;
                    if *left > 0 {
                        return Ok(at);
                    }
                    *self = Framing::Chunked(ChunkState::DataEnd);
                }
                Framing::Chunked(state) => {
                    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() > MAX_LINE_BYTES {
                            let start = String::from_utf8_lossy(&rest[..40]);
                            return Err(invalid(&format!("a chunked body's line is too long: {start:?}…")));
                        }
                        return Ok(at);
                    };
                    let line = rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
                    at += end + 1;
                    *self = match *state {
                        ChunkState::Size => match chunk_size(line)? {
                            0 => Framing::Chunked(ChunkState::Trailer),
                            n => Framing::Chunked(ChunkState::Data(n)),
                        },
                        ChunkState::DataEnd if line.is_empty() => Framing::Chunked(ChunkState::Size),
                        ChunkState::DataEnd => return Err(invalid("a chunk's data is longer than its size")),
                        ChunkState::Trailer if line.is_empty() => Framing::Done,
                        ChunkState::Trailer => Framing::Chunked(ChunkState::Trailer),
                        ChunkState::Data(_) => unreachable!("handled above"),
                    };
                }
            }
        }
    }
}

/// The hex size at the start of a chunk-size line (extensions after `;` are ignored).
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let text = std::str::from_utf8(line).map_err(|_| invalid("a chunk size is not text"))?;
    let digits = text.split(';').next().unwrap_or_default().trim();
    u64::from_str_radix(digits, 16).map_err(|_| invalid(&format!("bad chunk size {digits:?}")))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Whether the kernel holds nothing to read on an idle connection, not even its close: a peek,
/// asked of the kernel itself (tokio's `try_read` answers from the readiness it last saw, and a
/// close that arrived since, before the reactor ran, looks like an open connection).
fn idle_and_open(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut probe = [0u8; 1];
    // SAFETY: recv writes at most one byte into `probe`, a live one-byte buffer.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            probe.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    // 0: the peer closed; > 0: bytes nobody asked for; < 0: WouldBlock is the one good answer.
    n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

/// After a pooled connection ended without an answer: whether the peer reset it, i.e. the
/// request reached a socket its server had already closed, or was closing, and was never read
/// (a close with unread data is a reset). The reset follows the request within a round trip,
/// so the connection's state is watched for two, at least 20 ms, at most 1 s. Linux only:
/// elsewhere no request is sent again.
async fn refused_unread(stream: &TcpStream) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let info = || {
            // SAFETY: tcp_info is plain data; getsockopt fills at most `len` bytes of it.
            let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            let ok = unsafe {
                libc::getsockopt(
                    stream.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_INFO,
                    (&raw mut info).cast(),
                    &raw mut len,
                )
            } == 0;
            ok.then_some(info)
        };
        // The kernel's TCP_CLOSE: what a reset leaves (a peer's plain close leaves CLOSE_WAIT).
        const TCP_CLOSE: u8 = 7;
        let Some(first) = info() else { return false };
        let rtt = Duration::from_micros(u64::from(first.tcpi_rtt));
        let deadline = Instant::now() + (rtt * 2).clamp(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match info() {
                Some(now) if now.tcpi_state == TCP_CLOSE => return true,
                None => return false,
                Some(_) if Instant::now() >= deadline => return false,
                Some(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = stream;
        false
    }
}

/// One non-blocking read appended to `buf`, and the kernel's receive time of its last packet.
fn read_stamped(stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<(usize, Option<i64>)> {
    let (n, stamp) = kernel_stamps::recv(stream, buf.spare_capacity_mut())?;
    // SAFETY: recv initialised the first n bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok((n, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(framing: &mut Framing, reads: &[&[u8]]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut pending = Vec::new();
        for read in reads {
            pending.extend_from_slice(read);
            let used = framing.decode(&pending, &mut out)?;
            pending.drain(..used);
        }
        Ok(out)
    }

    #[test]
    fn a_chunked_body_decodes_whatever_the_read_boundaries() {
        let wire = b"8;ext=1\r\ndata: a\n\r\n2\r\n\n\n\r\n0\r\nx-trailer: t\r\n\r\n";
        for split in 1..wire.len() {
            let mut framing = Framing::Chunked(ChunkState::Size);
            let out = decode_all(&mut framing, &[&wire[..split], &wire[split..]]).unwrap();
            assert_eq!(out, b"data: a\n\n\n", "split at {split}");
            assert_eq!(framing, Framing::Done, "split at {split}");
        }
        // Bare LFs, as some servers send.
        let mut framing = Framing::Chunked(ChunkState::Size);
        assert_eq!(decode_all(&mut framing, &[b"2\nab\n0\n\n"]).unwrap(), b"ab");
        assert_eq!(framing, Framing::Done);
    }

    #[test]
    fn a_broken_chunked_body_is_an_error_not_a_guess() {
        let bad_size = decode_all(&mut Framing::Chunked(ChunkState::Size), &[b"zz\r\n"]);
        assert!(bad_size.unwrap_err().to_string().contains("bad chunk size"));
        let overlong = decode_all(&mut Framing::Chunked(ChunkState::Size), &[b"2\r\nabc\r\n"]);
        assert!(overlong.is_err());
    }

    #[test]
    fn a_length_body_stops_at_its_length_and_leaves_the_rest() {
        let mut framing = Framing::Length(3);
        let mut out = Vec::new();
        assert_eq!(framing.decode(b"abcHTTP/1.1", &mut out).unwrap(), 3);
        assert_eq!((out.as_slice(), framing), (&b"abc"[..], Framing::Done));
    }
}
