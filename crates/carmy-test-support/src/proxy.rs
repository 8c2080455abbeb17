//! A loopback TCP proxy in front of PostgreSQL that a test can cut and restore: a network
//! partition between one gateway process and the database, while the others still reach it.
//! Two kinds of partition: [`CutProxy::cut`] closes every relayed connection and each new one as
//! soon as it is accepted (a link that resets); [`CutProxy::freeze`] forwards nothing in either
//! direction, holding what was sent until [`CutProxy::restore`] (a link that drops packets:
//! statements hang rather than fail). Restoring relays new connections again and resumes the
//! frozen ones; [`CutProxy::restore_new_only`] relays new connections but keeps the frozen ones
//! silent for good (a failover: the old connections' packets go nowhere).

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; stops relaying when dropped.
pub struct CutProxy {
    /// Its loopback port.
    pub port: u16,
    cut: Arc<watch::Sender<bool>>,
    /// The freeze that new connections follow; [`CutProxy::restore_new_only`] replaces it, so
    /// the connections made before keep the old one, frozen.
    frozen: Arc<std::sync::Mutex<Arc<watch::Sender<bool>>>>,
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
        let frozen = Arc::new(std::sync::Mutex::new(Arc::new(watch::Sender::new(false))));
        let (shared_cut, shared_frozen) = (Arc::clone(&cut), Arc::clone(&frozen));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *shared_cut.borrow() {
                    drop(client);
                    continue;
                }
                let frozen = shared_frozen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .subscribe();
                tokio::spawn(relay(
                    client,
                    upstream.clone(),
                    shared_cut.subscribe(),
                    frozen,
                ));
            }
        });
        Self {
            port,
            cut,
            frozen,
            task,
        }
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

    /// Freezes the link: nothing is forwarded either way (new connections are accepted and
    /// held), nothing is closed.
    pub fn freeze(&self) {
        self.current_freeze().send_replace(true);
    }

    /// Restores the link: new connections are relayed, frozen ones resume.
    pub fn restore(&self) {
        self.cut.send_replace(false);
        self.current_freeze().send_replace(false);
    }

    /// Relays new connections again while the frozen ones stay silent for good: what a client
    /// sees after a failover, where only a new connection reaches the server.
    pub fn restore_new_only(&self) {
        self.cut.send_replace(false);
        *self
            .frozen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(watch::Sender::new(false));
    }

    fn current_freeze(&self) -> Arc<watch::Sender<bool>> {
        Arc::clone(
            &self
                .frozen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut.send_replace(true);
        self.task.abort();
    }
}

/// Relays `client` to `upstream` until either side closes or the link is cut; while it is
/// frozen, holds what was read.
async fn relay(
    client: TcpStream,
    upstream: String,
    mut cut: watch::Receiver<bool>,
    frozen: watch::Receiver<bool>,
) {
    let mut thawed = frozen.clone();
    if thawed.wait_for(|frozen| !*frozen).await.is_err() {
        return;
    }
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = forward(client_read, server_write, frozen.clone()) => {}
        () = forward(server_read, client_write, frozen) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}

/// Copies `from` to `to` chunk by chunk, each chunk only while the link is not frozen.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if frozen.wait_for(|frozen| !*frozen).await.is_err()
            || to.write_all(&chunk[..read]).await.is_err()
        {
            return;
        }
    }
}
