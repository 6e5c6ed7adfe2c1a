//! What the running front holds, for `front status`: its open tunnels (cluster, subject, age,
//! bytes) and the client credentials it has admitted (for the next expiry among them), kept by
//! `serve` as tunnels open and close; served as one JSON document to whoever connects to a Unix
//! socket beside the config (0600: the socket shows subjects and peers). The socket only
//! answers; it takes no command, so reaching it changes nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::watch;

use tenantci_core::{Error, Result};

use super::admit::Client;
use super::relay::Counts;
use super::status::{ExpiryStatus, SubjectStatus, TunnelStatus};

/// The socket's file name, beside the config.
pub const SOCKET_FILE: &str = "front.sock";

/// Where the front serving `config_path` answers `front status`.
pub fn socket_path(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(SOCKET_FILE)
}

/// How many admitted credentials are remembered for the next expiry: bounded whatever the
/// number of distinct certificates that connect.
const SEEN_MAX: usize = 4096;

/// The open tunnels and the credentials seen, shared by `serve`'s connections.
#[derive(Default)]
pub struct Registry {
    next_id: u64,
    open: HashMap<u64, Open>,
    seen: HashMap<(String, String), (String, OffsetDateTime)>,
}

struct Open {
    cluster: String,
    subject: String,
    serial: String,
    peer: SocketAddr,
    since: OffsetDateTime,
    counts: Arc<Counts>,
}

impl Registry {
    /// A tunnel opened; the id is for [`Registry::close`].
    pub fn open(
        &mut self,
        cluster: &str,
        client: &Client,
        peer: SocketAddr,
        counts: Arc<Counts>,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(
            id,
            Open {
                cluster: cluster.into(),
                subject: client.subject(),
                serial: client.serial.clone(),
                peer,
                since: OffsetDateTime::now_utc(),
                counts,
            },
        );
        self.saw(cluster, client);
        id
    }

    /// The tunnel `id` closed.
    pub fn close(&mut self, id: u64) {
        self.open.remove(&id);
    }

    fn saw(&mut self, cluster: &str, client: &Client) {
        let now = OffsetDateTime::now_utc();
        let key = (cluster.to_string(), client.serial.clone());
        if self.seen.len() >= SEEN_MAX && !self.seen.contains_key(&key) {
            self.seen.retain(|_, (_, not_after)| *not_after > now);
            // Still full: forget the latest expiry, the one the next-expiry question needs least.
            if self.seen.len() >= SEEN_MAX
                && let Some(latest) = self
                    .seen
                    .iter()
                    .max_by_key(|(_, (_, t))| *t)
                    .map(|(k, _)| k.clone())
            {
                self.seen.remove(&latest);
            }
        }
        self.seen.insert(key, (client.subject(), client.not_after));
    }

    /// The open tunnels, oldest first.
    pub fn tunnels(&self, now: OffsetDateTime) -> Vec<TunnelStatus> {
        let mut open: Vec<&Open> = self.open.values().collect();
        open.sort_by_key(|o| o.since);
        open.iter()
            .map(|o| TunnelStatus {
                cluster: o.cluster.clone(),
                subject: o.subject.clone(),
                serial: o.serial.clone(),
                peer: o.peer.to_string(),
                age_seconds: (now - o.since).whole_seconds().max(0),
                bytes_up: o.counts.up.load(Ordering::Relaxed),
                bytes_down: o.counts.down.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Open tunnels and bytes per cluster and subject.
    pub fn subjects(tunnels: &[TunnelStatus]) -> Vec<SubjectStatus> {
        let mut by: std::collections::BTreeMap<(&str, &str), SubjectStatus> = Default::default();
        for t in tunnels {
            let s = by
                .entry((&t.cluster, &t.subject))
                .or_insert_with(|| SubjectStatus {
                    cluster: t.cluster.clone(),
                    subject: t.subject.clone(),
                    open: 0,
                    bytes_up: 0,
                    bytes_down: 0,
                });
            s.open += 1;
            s.bytes_up = s.bytes_up.saturating_add(t.bytes_up);
            s.bytes_down = s.bytes_down.saturating_add(t.bytes_down);
        }
        by.into_values().collect()
    }

    /// The admitted credential that expires next and has not yet expired.
    pub fn next_expiry(&self, now: OffsetDateTime) -> Option<ExpiryStatus> {
        self.seen
            .iter()
            .filter(|(_, (_, t))| *t > now)
            .min_by_key(|(_, (_, t))| *t)
            .map(|((cluster, serial), (subject, t))| ExpiryStatus {
                cluster: cluster.clone(),
                subject: subject.clone(),
                serial: serial.clone(),
                not_after: tenantci_core::pki::inspect::rfc3339(*t),
            })
    }
}

/// Binds the status socket at `path` (0600). A socket left by a front that died is replaced;
/// one a running front answers on is refused, since two fronts would share one status.
pub async fn bind(path: &Path) -> Result<UnixListener> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(Error::bad_input(format!(
                "another front is running with this config: it answers on `{}`",
                path.display()
            ))
            .hint(
                "stop it first (or run this one from a copy of the config in another directory)",
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    let listener = UnixListener::bind(path).map_err(|e| {
        Error::bad_input(format!(
            "cannot create the front's status socket `{}`",
            path.display()
        ))
        .caused_by(e)
        .hint("the socket goes beside the config: is that directory writable by the front's user?")
    })?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::unwritable("the front's status socket", path, e))?;
    Ok(listener)
}

/// Answers each connection with `status()` as one JSON document, until `shutdown`; then
/// removes the socket.
pub async fn answer(
    listener: UnixListener,
    path: PathBuf,
    status: impl Fn() -> Vec<u8> + Send + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((mut stream, _)) = accepted else { continue };
                let body = status();
                tokio::spawn(async move {
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                });
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}
