//! A TCP proxy on 127.0.0.1 between bakeoff and a database, that can cut the database away in
//! two ways: [`FaultProxy::cut_for`] resets every open connection and resets every new one until
//! the time is up, as a database restart does; [`FaultProxy::blackhole_for`] accepts every
//! connection but forwards nothing either way and never resets, as a network path that drops
//! packets silently does (what was sent meanwhile goes through once it ends, as TCP
//! retransmits it).
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct FaultProxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    /// Bumped on every cut: open connections end when it changes.
    cuts: watch::Sender<u64>,
    /// True while nothing is forwarded (and nothing reset).
    blackholed: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Ends a connection with a reset (RST) rather than an orderly close.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Waits until no blackhole is on.
async fn clear(blackholed: &mut watch::Receiver<bool>) {
    let _ = blackholed.wait_for(|on| !*on).await;
}

/// Copies `from` to `to`, holding whatever arrives while a blackhole is on until it ends.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut blackholed: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        clear(&mut blackholed).await;
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        clear(&mut blackholed).await;
        to.write_all(&buf[..n]).await?;
    }
}

impl FaultProxy {
    /// Forwards 127.0.0.1:(free port) to `target`.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy");
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let (blackholed, _) = watch::channel(false);
        let task = {
            let down = down.clone();
            let cuts = cuts.clone();
            let blackholed = blackholed.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if down.load(Ordering::SeqCst) {
                        reset(client);
                        continue;
                    }
                    let mut cut = cuts.subscribe();
                    let mut hole = blackholed.subscribe();
                    tokio::spawn(async move {
                        // Accepted, but not connected onwards while a blackhole is on.
                        clear(&mut hole).await;
                        let Ok(mut server) = TcpStream::connect(target).await else {
                            reset(client);
                            return;
                        };
                        let mut client = client;
                        let was_cut = {
                            let (client_read, client_write) = client.split();
                            let (server_read, server_write) = server.split();
                            tokio::select! {
                                _ = async {
                                    tokio::join!(
                                        pump(client_read, server_write, hole.clone()),
                                        pump(server_read, client_write, hole.clone())
                                    )
                                } => false,
                                _ = cut.changed() => true,
                            }
                        };
                        if was_cut {
                            reset(client);
                            reset(server);
                        }
                    });
                }
            })
        };
        FaultProxy {
            addr,
            down,
            cuts,
            blackholed,
            task,
        }
    }

    /// Resets every connection now and every new one for `duration`, then forwards again.
    pub async fn cut_for(&self, duration: Duration) {
        self.go_down();
        tokio::time::sleep(duration).await;
        self.come_back();
    }

    /// Resets every connection now and every new one until [`FaultProxy::come_back`].
    pub fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Forwards new connections again.
    pub fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// Starts a cut of `duration` in the background.
    pub fn cut_in_background(self: &Arc<Self>, duration: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move { me.cut_for(duration).await })
    }

    /// Forwards nothing, and resets nothing, for `duration`; then goes on where it stopped.
    pub async fn blackhole_for(&self, duration: Duration) {
        self.blackhole_on();
        tokio::time::sleep(duration).await;
        self.blackhole_off();
    }

    /// Forwards nothing, and resets nothing, until [`FaultProxy::blackhole_off`].
    pub fn blackhole_on(&self) {
        self.blackholed.send_replace(true);
    }

    /// Goes on where the blackhole stopped it.
    pub fn blackhole_off(&self) {
        self.blackholed.send_replace(false);
    }

    /// Starts a blackhole of `duration` in the background.
    pub fn blackhole_in_background(self: &Arc<Self>, duration: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move { me.blackhole_for(duration).await })
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
