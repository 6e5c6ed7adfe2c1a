//! `moto_server` (PyPI `moto[server]`): an S3-compatible server on a free loopback port, for
//! the cache's S3 test and benchmark. It keeps objects in memory and checks no signatures.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::process::{Process, free_port};

/// A running `moto_server`, killed when dropped.
pub struct Moto {
    _process: Process,
    /// `http://127.0.0.1:<port>`: the S3 endpoint.
    pub url: String,
}

impl Moto {
    /// Starts `bin` (a `moto_server`) and waits until it answers.
    pub async fn start(bin: &Path) -> Moto {
        let port = free_port();
        let process = Process::spawn(
            Command::new(bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        crate::wait::eventually("moto_server answers", || async {
            http.get(&url).send().await.ok().map(|_| ())
        })
        .await;
        Moto {
            _process: process,
            url,
        }
    }

    /// Creates the bucket `name`.
    pub async fn bucket(&self, name: &str) {
        let created = reqwest::Client::new()
            .put(format!("{}/{name}", self.url))
            .send()
            .await
            .unwrap();
        assert!(
            created.status().is_success(),
            "bucket: {}",
            created.status()
        );
    }
}
