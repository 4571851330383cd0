//! A small SMTP receiver on loopback (plain SMTP, RFC 5321's minimal command set plus AUTH
//! PLAIN): records every message accepted, with the credentials it was sent with, and answers
//! `451` (try again later) to the first `failures` messages' data, as a busy server does.
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One message as received.
#[derive(Debug, Clone, Default)]
pub struct Mail {
    pub from: String,
    pub to: Vec<String>,
    /// `user\0password` of AUTH PLAIN, when the client authenticated.
    pub auth: Option<String>,
    /// The DATA section, dot-unstuffed, CRLF line ends.
    pub data: String,
}

pub struct SmtpReceiver {
    pub port: u16,
    accepted: Arc<Mutex<Vec<Mail>>>,
    refused: Arc<Mutex<usize>>,
    _task: tokio::task::JoinHandle<()>,
}

impl SmtpReceiver {
    pub async fn start(failures: usize) -> SmtpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted: Arc<Mutex<Vec<Mail>>> = Default::default();
        let refused: Arc<Mutex<usize>> = Default::default();
        let (a, r) = (accepted.clone(), refused.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (a, r) = (a.clone(), r.clone());
                tokio::spawn(async move {
                    let _ = session(stream, failures, &a, &r).await;
                });
            }
        });
        SmtpReceiver {
            port,
            accepted,
            refused,
            _task: task,
        }
    }

    pub fn accepted(&self) -> Vec<Mail> {
        self.accepted.lock().unwrap().clone()
    }

    /// Messages answered 451.
    pub fn refused(&self) -> usize {
        *self.refused.lock().unwrap()
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    failures: usize,
    accepted: &Mutex<Vec<Mail>>,
    refused: &Mutex<usize>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    write.write_all(b"220 receiver.test ESMTP\r\n").await?;
    let mut mail = Mail::default();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let command = line.trim_end();
        let upper = command.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") {
            b"250-receiver.test\r\n250-8BITMIME\r\n250 AUTH PLAIN\r\n"
        } else if upper.starts_with("HELO") {
            b"250 receiver.test\r\n"
        } else if upper.starts_with("AUTH PLAIN ") {
            use base64::Engine;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(command[11..].trim())
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&decoded);
            mail.auth = Some(text.trim_start_matches('\0').to_string());
            b"235 2.7.0 accepted\r\n"
        } else if upper.starts_with("MAIL FROM:") {
            mail.from = command[10..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches(['<', '>'])
                .to_string();
            b"250 2.1.0 ok\r\n"
        } else if upper.starts_with("RCPT TO:") {
            mail.to.push(command[8..].trim().trim_matches(['<', '>']).to_string());
            b"250 2.1.5 ok\r\n"
        } else if upper == "DATA" {
            write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
            let mut data = String::new();
            loop {
                line.clear();
                if lines.read_line(&mut line).await? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" {
                    break;
                }
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            mail.data = data;
            let mut no = refused.lock().unwrap();
            if *no < failures {
                *no += 1;
                b"451 4.3.0 try again later\r\n"
            } else {
                accepted.lock().unwrap().push(std::mem::take(&mut mail));
                b"250 2.0.0 queued\r\n"
            }
        } else if upper == "RSET" || upper == "NOOP" {
            b"250 ok\r\n"
        } else if upper == "QUIT" {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else {
            b"502 5.5.2 not implemented\r\n"
        };
        write.write_all(reply).await?;
    }
}
