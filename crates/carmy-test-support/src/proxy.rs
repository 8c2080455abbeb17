//! A loopback TCP proxy in front of PostgreSQL that a test can cut and restore: a network
//! partition between one gateway process and the database, while the others still reach it.
//! Cutting closes every relayed connection and closes each new one as soon as it is accepted;
//! restoring relays new connections again.

use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; stops relaying when dropped.
pub struct CutProxy {
    /// Its loopback port.
    pub port: u16,
    cut: Arc<watch::Sender<bool>>,
    task: JoinHandle<()>,
}

impl CutProxy {
    /// Starts a proxy on a free loopback port to the server of `database_url`.
    ///
    /// # Panics
    /// When the URL cannot be read or no port can be bound.
    pub async fn start(database_url: &str) -> Self {
        let options: sqlx::postgres::PgConnectOptions = database_url.parse().expect("a URL");
        let upstream = format!("{}:{}", options.get_host(), options.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("its address").port();
        let cut = Arc::new(watch::Sender::new(false));
        let shared = Arc::clone(&cut);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *shared.borrow() {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, upstream.clone(), shared.subscribe()));
            }
        });
        Self { port, cut, task }
    }

    /// `database_url` with its host and port replaced by this proxy's, and TLS off (a
    /// loopback hop of the test).
    pub fn url(&self, database_url: &str) -> String {
        let mut url = url::Url::parse(database_url).expect("a URL");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(self.port)).expect("a port");
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(name, _)| name != "sslmode")
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("sslmode", "disable");
        url.to_string()
    }

    /// Cuts the link: every relayed connection is closed, new ones are closed at once.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Restores the link for new connections.
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut.send_replace(true);
        self.task.abort();
    }
}

/// Relays `client` to `upstream` until either side closes or the link is cut.
async fn relay(mut client: TcpStream, upstream: String, mut cut: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}
