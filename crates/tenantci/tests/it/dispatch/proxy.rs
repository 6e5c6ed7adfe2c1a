//! `tenantci executor-proxy` against clients that hold half-sent request headers (issue 35):
//! before, no header deadline and an unbounded graceful shutdown let 50 such connections keep
//! it alive after SIGTERM for the Pod's whole grace. A real proxy process, real sockets; the
//! facade is not needed (nothing is forwarded).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use tenantci_core::pki::CertificateAuthority;
use tenantci_testkit::process::{Process, first_line};
use tenantci_testkit::wait::DEADLINE;

use crate::util::{scratch, tenantci};

/// A request cut off inside its headers.
const HALF: &[u8] = b"POST /api/actions/runner.v1.RunnerService/FetchTask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/proto\r\nx-runner-uu";

struct Proxy {
    process: Process,
    addr: String,
    _dir: tempfile::TempDir,
}

/// A proxy on a free loopback port with `flags` added; its facade never answers (unused).
fn start(flags: &[&str]) -> Proxy {
    let dir = scratch();
    let ca = CertificateAuthority::generate("facade CA", Duration::from_secs(3600)).unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let mut process = Process::spawn(
        tenantci()
            .args(["executor-proxy", "--listen", "127.0.0.1:0"])
            .args(["--facade-url", "https://127.0.0.1:9"])
            .arg("--facade-ca")
            .arg(&ca_file)
            .args(flags)
            .stdout(Stdio::piped()),
    );
    let line = first_line(process.child().stdout.take().unwrap(), "executor-proxy");
    let addr = line
        .strip_prefix("listening http://")
        .unwrap_or_else(|| panic!("ready line {line:?}"))
        .to_string();
    Proxy {
        process,
        addr,
        _dir: dir,
    }
}

fn half_sent(addr: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(HALF).unwrap();
    c
}

/// `/healthz` on a new connection. Connections are accepted in order, so an answer here
/// means every connection opened before it was accepted.
fn healthz(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    answer
}

/// Waits (up to the deadline, a deadlock guard) for the server to close `c`: end of stream
/// or a reset, not the read timeout.
fn closed_by_the_server(c: &mut TcpStream) {
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut buf = [0u8; 256];
    match c.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!(
            "an answer instead of a close: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
            "not closed within {DEADLINE:?}: {e}"
        ),
    }
}

#[test]
fn sigterm_ends_the_proxy_while_fifty_clients_hold_half_sent_headers() {
    // The header deadline out of reach: only the bounded shutdown can end these connections.
    let mut p = start(&["--header-read-timeout", "1h"]);
    let mut held: Vec<TcpStream> = (0..50).map(|_| half_sent(&p.addr)).collect();
    assert!(healthz(&p.addr).ends_with("ok"), "the proxy serves");
    // `terminate` waits for the exit up to the deadline, then SIGKILLs (None).
    assert_eq!(
        p.process.terminate(DEADLINE),
        Some(0),
        "the proxy exits on SIGTERM, with 50 half-sent requests open"
    );
    for c in &mut held {
        closed_by_the_server(c);
    }
}

#[test]
fn a_client_that_does_not_finish_its_headers_is_disconnected() {
    let mut p = start(&["--header-read-timeout", "1s"]);
    let mut c = half_sent(&p.addr);
    closed_by_the_server(&mut c);
    assert!(
        p.process.child().try_wait().unwrap().is_none(),
        "closed by the proxy, which still runs"
    );
    // Positive control: a request sent whole on a new connection is answered.
    assert!(healthz(&p.addr).ends_with("ok"));
    assert_eq!(p.process.terminate(DEADLINE), Some(0));
}

/// `GET path` on a new connection; the whole answer (status line, headers, body).
fn get(addr: &str, path: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn gitea_unreachable_is_a_502_with_a_sentence_not_a_hang() {
    // Port 9 (discard) is closed here: the connection is refused at once.
    let mut p = start(&["--gitea-url", "http://127.0.0.1:9"]);
    let answer = get(&p.addr, "/api/v1/repos/sim/demo");
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(
        answer.contains("Gitea at http://127.0.0.1:9 did not answer GET /api/v1/repos/sim/demo"),
        "{answer}"
    );
    assert_eq!(p.process.terminate(DEADLINE), Some(0));
}

#[test]
fn without_a_gitea_url_only_the_runner_service_passes() {
    let mut p = start(&[]);
    let answer = get(&p.addr, "/api/v1/version");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("--gitea-url"), "{answer}");
    assert_eq!(p.process.terminate(DEADLINE), Some(0));
}

#[test]
fn a_gitea_url_that_is_not_http_is_refused_before_listening() {
    let out = tenantci()
        .args(["executor-proxy", "--listen", "127.0.0.1:0"])
        .args([
            "--facade-url",
            "https://127.0.0.1:9",
            "--facade-ca",
            "/dev/null",
        ])
        .args(["--gitea-url", "gitea.example"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--gitea-url `gitea.example` is not an http(s) URL"),
        "{stderr}"
    );
}
