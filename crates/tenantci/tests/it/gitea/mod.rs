//! The Gitea protocol layer: the Connect client against the Gitea double (plain HTTP, the
//! double keeping Gitea's server behaviours) and against the facade (HTTPS with a generated CA),
//! in both codecs, plus the wire-level failure cases (bad bodies, content types, headers).

mod double;
mod facade;
mod sim_flag;

use std::time::Duration;

use tenantci_core::forge::gitea::{ClientConfig, Codec, Credentials, RunnerClient};

/// A client for `base` with short timeouts and fast retries.
pub fn client(base: &str, codec: Codec) -> RunnerClient {
    let mut cfg = ClientConfig::new(base);
    cfg.codec = codec;
    cfg.request_timeout = Duration::from_secs(10);
    cfg.retry.initial_backoff = Duration::from_millis(10);
    RunnerClient::new(cfg).expect("build the client")
}

pub fn with_creds(c: RunnerClient, uuid: &str, token: &str) -> RunnerClient {
    c.with_credentials(Credentials {
        uuid: uuid.into(),
        token: token.into(),
    })
}
