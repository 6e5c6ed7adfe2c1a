//! `pods/{name}/portforward` as the kubelet serves it over WebSocket (subprotocol
//! `v4.channel.k8s.io`), to the local process that stands for the Pod.
//!
//! The protocol (apiserver's `wsstream`, kubelet's `portforward/websocket.go`): every message is
//! binary, its first byte the channel. Port number i of the request has the data channel 2i and
//! the error channel 2i+1; the server's first frame on each is the port, 2 bytes little-endian.
//! Data frames carry bytes both ways; the error channel carries at most one text, after which
//! the port is done (a connection the kubelet could not open inside the Pod). When every port
//! is done the server closes the WebSocket; the v4 protocol has no half-close.
//!
//! The simulator runs no containers: a Pod's annotation [`ANNOTATION`] names, per container
//! port, the loopback address of the process that plays it (`9464=127.0.0.1:40123`). A port
//! without an entry is a port nobody listens on in that Pod: connection refused, as the kubelet
//! answers it.
//!
//! Pure parts ([`ports`], [`targets`], the frames) apart from the relay, which is I/O.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// The one subprotocol served (kube's client offers `v5.channel.k8s.io, v4.channel.k8s.io`; the
/// kubelet's port-forward speaks v4 only).
pub const PROTOCOL: &str = "v4.channel.k8s.io";

/// The simulator-only Pod annotation mapping container ports to loopback addresses:
/// `PORT=127.0.0.1:HOSTPORT[,PORT=...]`.
pub const ANNOTATION: &str = "sim.tenantci.io/port-forward";

/// At most this many ports in one request: two channels each, numbered by one byte.
pub const MAX_PORTS: usize = 128;

/// The `ports` query parameter (comma-separated), as the kubelet reads its `port` parameter.
pub fn ports(param: Option<&str>) -> Result<Vec<u16>, String> {
    let Some(param) = param else {
        return Err("query parameter \"port\" is required".into());
    };
    if param.is_empty() {
        return Err("query parameter \"port\" cannot be empty".into());
    }
    let mut out = Vec::new();
    for p in param.split(',') {
        let port: u16 = p
            .parse()
            .map_err(|_| format!("unable to parse {param:?} as a port"))?;
        if port == 0 {
            return Err(format!("port {param:?} must be > 0"));
        }
        out.push(port);
    }
    if out.len() > MAX_PORTS {
        return Err(format!("at most {MAX_PORTS} ports in one request"));
    }
    Ok(out)
}

/// The annotation's map from container port to the loopback address that plays it. Only
/// loopback addresses: the simulator forwards to nothing beyond this machine.
pub fn targets(annotation: &str) -> Result<BTreeMap<u16, SocketAddr>, String> {
    let mut map = BTreeMap::new();
    for entry in annotation
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (port, addr) = entry
            .split_once('=')
            .ok_or_else(|| format!("{ANNOTATION}: `{entry}` is not PORT=127.0.0.1:HOSTPORT"))?;
        let port: u16 = port
            .trim()
            .parse()
            .map_err(|_| format!("{ANNOTATION}: `{port}` is not a port"))?;
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{ANNOTATION}: `{addr}` is not IP:PORT"))?;
        if !addr.ip().is_loopback() {
            return Err(format!("{ANNOTATION}: {addr} is not a loopback address"));
        }
        map.insert(port, addr);
    }
    Ok(map)
}

/// The server's first frame on `channel`: the port, little-endian.
pub fn init_frame(channel: u8, port: u16) -> Vec<u8> {
    let [lo, hi] = port.to_le_bytes();
    vec![channel, lo, hi]
}

/// A frame carrying `data` on `channel`.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(data.len() + 1);
    f.push(channel);
    f.extend_from_slice(data);
    f
}

/// A client frame's channel and payload; None for an empty message.
pub fn split(frame: &[u8]) -> Option<(u8, &[u8])> {
    frame.split_first().map(|(c, rest)| (*c, rest))
}

/// The kubelet's error text for a port it could not open inside the Pod.
pub fn refused(port: u16, pod: &str, uid: &str, cause: &str) -> String {
    format!(
        "error forwarding port {port} to pod {pod}, uid {uid}: failed to connect to localhost:{port} inside the Pod: {cause}"
    )
}

/// One accepted port-forward: the Pod and, per requested port, the address playing it.
#[derive(Debug, Clone)]
pub struct Forward {
    /// The Pod's name.
    pub pod: String,
    /// The Pod's uid (in error texts, as the kubelet writes them).
    pub uid: String,
    /// Per requested port, in the request's order: the address that plays it, if any.
    pub targets: Vec<(u16, Option<SocketAddr>)>,
}

/// Relays `ws` (the upgraded connection) to the Pod's ports until every port is done or the
/// client closes.
pub async fn relay<S>(ws: WebSocketStream<S>, forward: Forward)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(16);
    let writer = tokio::spawn(async move {
        while let Some(f) = out_rx.recv().await {
            if sink.send(Message::binary(f)).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });
    let mut inbound = Vec::new();
    let mut ports = tokio::task::JoinSet::new();
    for (i, (port, target)) in forward.targets.iter().enumerate() {
        let data = u8::try_from(2 * i).expect("at most MAX_PORTS ports");
        for f in [init_frame(data, *port), init_frame(data + 1, *port)] {
            let _ = out.send(f).await;
        }
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        inbound.push(tx);
        let one = OnePort {
            data,
            port: *port,
            target: *target,
            out: out.clone(),
        };
        let (pod, uid) = (forward.pod.clone(), forward.uid.clone());
        ports.spawn(async move { one.run(rx, &pod, &uid).await });
    }
    drop(out);
    let from_client = async {
        while let Some(Ok(msg)) = stream.next().await {
            match msg {
                Message::Binary(b) => {
                    let Some((ch, payload)) = split(&b) else {
                        continue;
                    };
                    let Some(tx) = inbound.get(usize::from(ch / 2)).filter(|_| ch % 2 == 0) else {
                        continue;
                    };
                    if !payload.is_empty() {
                        let _ = tx.send(Bytes::copy_from_slice(payload)).await;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        // The client is gone: each port's write side ends.
        inbound.clear();
    };
    let all_done = async { while ports.join_next().await.is_some() {} };
    // Whichever ends first ends the forward: the client gone, or every port done.
    tokio::select! {
        () = from_client => {}
        () = all_done => {}
    }
    ports.abort_all();
    let _ = writer.await;
}

/// One requested port: its connection to the address that plays it.
struct OnePort {
    data: u8,
    port: u16,
    target: Option<SocketAddr>,
    out: mpsc::Sender<Vec<u8>>,
}

impl OnePort {
    async fn run(self, mut from_client: mpsc::Receiver<Bytes>, pod: &str, uid: &str) {
        let connected = match self.target {
            Some(addr) => TcpStream::connect(addr).await.map_err(|e| e.to_string()),
            None => Err("connect: connection refused".to_string()),
        };
        let tcp = match connected {
            Ok(t) => t,
            Err(cause) => {
                let text = refused(self.port, pod, uid, &cause);
                let _ = self.out.send(frame(self.data + 1, text.as_bytes())).await;
                return;
            }
        };
        let (mut rd, mut wr) = tcp.into_split();
        let to_pod = async move {
            while let Some(b) = from_client.recv().await {
                if wr.write_all(&b).await.is_err() {
                    return;
                }
            }
            let _ = wr.shutdown().await;
        };
        let out = self.out.clone();
        let data = self.data;
        let from_pod = async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if out.send(frame(data, &buf[..n])).await.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        // Done when the Pod's side ends its output: the v4 protocol cannot half-close.
        tokio::pin!(to_pod);
        tokio::select! {
            () = from_pod => {}
            () = &mut to_pod => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_as_the_kubelet_reads_them() {
        assert_eq!(ports(Some("9464")), Ok(vec![9464]));
        assert_eq!(ports(Some("80,1234")), Ok(vec![80, 1234]));
        assert_eq!(
            ports(None),
            Err("query parameter \"port\" is required".into())
        );
        assert!(ports(Some("")).is_err());
        assert!(ports(Some("0")).unwrap_err().contains("must be > 0"));
        assert!(ports(Some("70000")).unwrap_err().contains("as a port"));
        assert!(ports(Some("80,x")).is_err());
        let many = vec!["1"; MAX_PORTS + 1].join(",");
        assert!(ports(Some(&many)).is_err());
    }

    #[test]
    fn the_annotation_maps_ports_to_loopback_only() {
        let m = targets("9464=127.0.0.1:40123, 8443=[::1]:5").unwrap();
        assert_eq!(m[&9464], "127.0.0.1:40123".parse().unwrap());
        assert_eq!(m[&8443], "[::1]:5".parse().unwrap());
        assert!(targets("").unwrap().is_empty());
        assert!(
            targets("9464=10.0.0.1:80")
                .unwrap_err()
                .contains("loopback")
        );
        assert!(targets("9464").is_err());
        assert!(targets("x=127.0.0.1:1").is_err());
        assert!(targets("1=localhost:1").is_err());
    }

    #[test]
    fn frames_carry_the_channel_first_and_the_port_little_endian() {
        assert_eq!(init_frame(0, 9464), vec![0, 0xf8, 0x24]);
        assert_eq!(init_frame(3, 80), vec![3, 80, 0]);
        assert_eq!(frame(2, b"GET"), b"\x02GET".to_vec());
        assert_eq!(split(b"\x04abc"), Some((4, &b"abc"[..])));
        assert_eq!(split(b"\x01"), Some((1, &b""[..])));
        assert_eq!(split(b""), None);
    }

    #[test]
    fn a_refused_port_reads_as_the_kubelet_writes_it() {
        let t = refused(9464, "d-0", "u1", "connect: connection refused");
        assert!(
            t.starts_with("error forwarding port 9464 to pod d-0, uid u1: "),
            "{t}"
        );
    }
}
