//! Round trips to PostgreSQL, counted on the wire: a loopback TCP proxy between a gateway and
//! the server that forwards every byte unchanged and reads the client's side of the protocol.
//!
//! A round trip is a message after which the client waits for the server: `Sync` (extended
//! protocol) or `Query` (simple protocol). Each is classified by what preceded it since the
//! previous one: an `Execute` makes it a statement, a `Parse` without `Execute` a statement being
//! prepared (once per connection and statement), nothing at all a connection check (sqlx 0.8's
//! pool sends a bare `Sync` to every connection it takes back, and, unless configured otherwise,
//! to every connection it lends).
//! Needs a connection without TLS (`sslmode=disable`).

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Counters of every connection through one proxy.
#[derive(Debug, Default)]
pub struct Counters {
    statements: AtomicU64,
    prepares: AtomicU64,
    pings: AtomicU64,
}

/// A reading of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Round trips that executed statements.
    pub statements: u64,
    /// Round trips that only prepared a statement.
    pub prepares: u64,
    /// Round trips that carried nothing (connection checks).
    pub pings: u64,
}

impl Counts {
    /// All round trips.
    pub fn round_trips(&self) -> u64 {
        self.statements + self.prepares + self.pings
    }

    /// `self - earlier`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            statements: self.statements - earlier.statements,
            prepares: self.prepares - earlier.prepares,
            pings: self.pings - earlier.pings,
        }
    }
}

impl Counters {
    /// The counts now.
    pub fn read(&self) -> Counts {
        Counts {
            statements: self.statements.load(Ordering::SeqCst),
            prepares: self.prepares.load(Ordering::SeqCst),
            pings: self.pings.load(Ordering::SeqCst),
        }
    }
}

/// The protocol codes of untyped startup-phase requests.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// Reads the frontend's messages from a stream of bytes, counting round trips.
#[derive(Default)]
struct FrontendParser {
    buffer: Vec<u8>,
    /// Past the startup message: messages have a type byte.
    typed: bool,
    /// Since the last Sync/Query: an Execute, a Parse.
    executes: u64,
    parsed: bool,
}

impl FrontendParser {
    fn feed(&mut self, bytes: &[u8], counters: &Counters) {
        self.buffer.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            let rest = &self.buffer[at..];
            if !self.typed {
                let Some(length) = rest.get(..4) else { break };
                let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]);
                let length = length as usize;
                if rest.len() < length.max(8) {
                    break;
                }
                let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                if code != SSL_REQUEST && code != GSSENC_REQUEST {
                    // The startup message (or a cancel request, after which the connection ends).
                    self.typed = true;
                }
                at += length.max(8);
            } else {
                if rest.len() < 5 {
                    break;
                }
                let kind = rest[0];
                let length = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
                if rest.len() < 1 + length {
                    break;
                }
                self.message(kind, counters);
                at += 1 + length;
            }
        }
        self.buffer.drain(..at);
    }

    fn message(&mut self, kind: u8, counters: &Counters) {
        match kind {
            b'P' => self.parsed = true,
            b'E' => self.executes += 1,
            b'Q' => {
                counters.statements.fetch_add(1, Ordering::SeqCst);
            }
            b'S' => {
                let counter = if self.executes > 0 {
                    &counters.statements
                } else if self.parsed {
                    &counters.prepares
                } else {
                    &counters.pings
                };
                counter.fetch_add(1, Ordering::SeqCst);
                self.executes = 0;
                self.parsed = false;
            }
            _ => {}
        }
    }
}

/// A running proxy.
pub struct Proxy {
    /// Its loopback port.
    pub port: u16,
    /// What went through it.
    pub counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a proxy on a free loopback port to `upstream` (`host:port` of the server).
pub async fn start(upstream: String) -> Result<Proxy, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|error| format!("cannot listen: {error}"))?;
    let port = listener
        .local_addr()
        .map_err(|error| format!("cannot listen: {error}"))?
        .port();
    let counters = Arc::new(Counters::default());
    let shared = Arc::clone(&counters);
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let counters = Arc::clone(&shared);
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(&upstream).await {
                    relay(client, server, counters).await;
                }
            });
        }
    });
    Ok(Proxy {
        port,
        counters,
        task,
    })
}

/// Forwards both directions until either side closes, parsing the client's.
async fn relay(client: TcpStream, server: TcpStream, counters: Arc<Counters>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut parser = FrontendParser::default();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let read = match client_read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            if server_write.write_all(&chunk[..read]).await.is_err() {
                break;
            }
            parser.feed(&chunk[..read], &counters);
        }
        let _ = server_write.shutdown().await;
    };
    let downstream = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}

#[cfg(test)]
mod tests {
    use super::{Counters, Counts, FrontendParser};

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn classifies_round_trips() {
        let counters = Counters::default();
        let mut parser = FrontendParser::default();
        let mut stream = Vec::new();
        // Startup: protocol 3.0, one parameter.
        let params = b"user\0postgres\0\0";
        stream.extend_from_slice(&(8 + params.len() as u32).to_be_bytes());
        stream.extend_from_slice(&196_608u32.to_be_bytes());
        stream.extend_from_slice(params);
        stream.extend(message(b'Q', b"LISTEN x\0"));
        stream.extend(message(b'P', b"\0SELECT 1\0\0\0"));
        stream.extend(message(b'D', b"S\0"));
        stream.extend(message(b'S', b""));
        stream.extend(message(b'B', b"\0\0\0\0\0\0\0"));
        stream.extend(message(b'E', b"\0\0\0\0\0"));
        stream.extend(message(b'S', b""));
        stream.extend(message(b'S', b""));
        // Fed in awkward pieces.
        for piece in stream.chunks(3) {
            parser.feed(piece, &counters);
        }
        assert_eq!(
            counters.read(),
            Counts {
                statements: 2,
                prepares: 1,
                pings: 1
            }
        );
    }
}
