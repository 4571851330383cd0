//! A TCP proxy on 127.0.0.1 between bakeoff and a database, that can cut the database away:
//! [`FaultProxy::cut_for`] resets every open connection and resets every new one until the
//! time is up, as a database restart or a network fault does.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct FaultProxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    /// Bumped on every cut: open connections end when it changes.
    cuts: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// Ends a connection with a reset (RST) rather than an orderly close.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

impl FaultProxy {
    /// Forwards 127.0.0.1:(free port) to `target`.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy");
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let task = {
            let down = down.clone();
            let cuts = cuts.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if down.load(Ordering::SeqCst) {
                        reset(client);
                        continue;
                    }
                    let mut cut = cuts.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(target).await else {
                            reset(client);
                            return;
                        };
                        let mut client = client;
                        let was_cut = tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                            _ = cut.changed() => true,
                        };
                        if was_cut {
                            reset(client);
                            reset(server);
                        }
                    });
                }
            })
        };
        FaultProxy { addr, down, cuts, task }
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
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
