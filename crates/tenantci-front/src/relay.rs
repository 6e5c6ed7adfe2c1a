//! Bytes both ways between two streams, counted, until both sides close or the tunnel is cut:
//! idle for too long, or a signal (revocation, shutdown). Knows nothing of TLS or clusters;
//! `serve` and `connect` both use it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One TLS record's worth: memory per tunnel is two of these.
const BUFFER: usize = 16 * 1024;

/// Why a tunnel ended (the audit line's `end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both sides closed their direction.
    Closed,
    /// No byte either way for the idle timeout.
    Idle,
    /// The client's certificate went on the deny-list while the tunnel was open.
    Revoked,
    /// The rules changed while the tunnel was open and no longer admit its client (its
    /// subject or its cluster left the config).
    NotAllowed,
    /// The process is stopping (SIGTERM).
    Shutdown,
    /// A read or write failed on either side.
    Error,
}

impl End {
    /// The name the audit line's `end` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::Idle => "idle_timeout",
            End::Revoked => "revoked",
            End::NotAllowed => "not_allowed",
            End::Shutdown => "shutdown",
            End::Error => "error",
        }
    }
}

/// Bytes each way and the last activity, readable while the tunnel runs.
#[derive(Debug)]
pub struct Counts {
    /// Bytes from the client to the upstream.
    pub up: AtomicU64,
    /// Bytes from the upstream to the client.
    pub down: AtomicU64,
    start: Instant,
    last_ms: AtomicU64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Counts {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last_activity(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// How long the tunnel has run (since the counts were made).
    pub fn duration(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Relays `client` <-> `upstream` ("up" is client to upstream) until both directions end, one
/// fails, nothing moves for `idle`, or `cut` resolves with its reason.
pub async fn relay<C, U>(
    client: C,
    upstream: U,
    idle: Duration,
    cut: impl Future<Output = End>,
    counts: Arc<Counts>,
) -> End
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (client_r, client_w) = tokio::io::split(client);
    let (up_r, up_w) = tokio::io::split(upstream);
    // The first failure either way ends both: a peer waiting for an answer that will never
    // come must not hold the tunnel (and its caller) open.
    let both = async {
        let pumped = tokio::try_join!(
            pump(client_r, up_w, &counts.up, &counts),
            pump(up_r, client_w, &counts.down, &counts)
        );
        if pumped.is_ok() {
            End::Closed
        } else {
            End::Error
        }
    };
    tokio::select! {
        end = both => end,
        end = cut => end,
        end = idle_watch(&counts, idle) => end,
    }
}

async fn pump<R, W>(
    mut from: R,
    mut to: W,
    bytes: &AtomicU64,
    counts: &Counts,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            // Half-close: the other direction may still be answering.
            let _ = to.shutdown().await;
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
        bytes.fetch_add(n as u64, Ordering::Relaxed);
        counts.touch();
    }
}

async fn idle_watch(counts: &Counts, idle: Duration) -> End {
    loop {
        let deadline = counts.last_activity() + idle;
        if Instant::now() >= deadline {
            return End::Idle;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_are_counted_each_way_until_the_cut() {
        let (client, mut client_peer) = tokio::io::duplex(1024);
        let (upstream, mut up_peer) = tokio::io::duplex(1024);
        let counts = Arc::new(Counts::default());
        let (cut_tx, cut_rx) = tokio::sync::oneshot::channel::<()>();
        let cut = async move {
            let _ = cut_rx.await;
            End::Revoked
        };
        let idle = Duration::from_secs(3600);
        let task = tokio::spawn(relay(client, upstream, idle, cut, counts.clone()));
        client_peer.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        up_peer.read_exact(&mut got).await.unwrap();
        up_peer.write_all(b"hi").await.unwrap();
        let mut back = [0u8; 2];
        client_peer.read_exact(&mut back).await.unwrap();
        cut_tx.send(()).unwrap();
        assert_eq!(task.await.unwrap(), End::Revoked);
        assert_eq!(counts.up.load(Ordering::Relaxed), 5);
        assert_eq!(counts.down.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_quiet_tunnel_ends_as_idle() {
        let (client, _cp) = tokio::io::duplex(64);
        let (upstream, _up) = tokio::io::duplex(64);
        let idle = Duration::from_millis(50);
        let counts = Arc::new(Counts::default());
        let end = relay(client, upstream, idle, std::future::pending(), counts).await;
        assert_eq!(end, End::Idle);
    }

    #[tokio::test]
    async fn a_cut_ends_the_tunnel_with_its_reason() {
        let (client, _cp) = tokio::io::duplex(64);
        let (upstream, _up) = tokio::io::duplex(64);
        let end = relay(
            client,
            upstream,
            Duration::from_secs(3600),
            async { End::Revoked },
            Arc::new(Counts::default()),
        )
        .await;
        assert_eq!(end, End::Revoked);
    }
}
