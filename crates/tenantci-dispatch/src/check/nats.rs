//! The NATS side of `dispatch check`: each user's grants tried as that user ([`super::probe`]),
//! and the consumers and buckets read and compared with what `queue init` creates for this
//! config (the stream `CI_RUNNER` too when ci-admin's password is at hand: ci-worker may not
//! read it). Sends nothing that changes the queue.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use async_nats::{Client, Event, HeaderMap, ServerError};
use tokio::sync::mpsc;

use super::Need;
use super::probe::{self, NEVER_SEQUENCE, Probe, Try};
use crate::backend::catalog;
use crate::config::Config;
use crate::queue::topology::{self, TopologySpec};
use crate::queue::{connect, history_bucket, ledger_bucket, permissions, users};
use tenantci_core::Result;

/// How long a probe waits for an answer; a denied one is told by the server's violation
/// message long before.
const ANSWER: Duration = Duration::from_secs(5);

/// The server's `-ERR` lines, as they arrive.
type Violations = mpsc::UnboundedReceiver<String>;

/// The fix for every missing grant: this release's fragment, then a reload.
fn permission_fix(cfg: &Config) -> String {
    format!(
        "tenantci queue nats-config --secrets-dir {} --out <the fragment nats-server includes> && nats-server --signal reload",
        cfg.nats.secrets_dir.display()
    )
}

/// `queue init`'s command line for this config.
fn init_fix(cfg: &Config) -> String {
    let caps: Vec<String> = catalog::kinds()
        .into_iter()
        .map(|b| format!("--{b}-capacity {}", cfg.capacity.of(b)))
        .collect();
    format!(
        "tenantci queue init --nats {} --user ci-admin --password-file {} {}",
        cfg.nats.url,
        permissions::password_file(&cfg.nats.secrets_dir, users::ADMIN).display(),
        caps.join(" ")
    )
}

/// Connects as `user`, passing the server's error lines to the returned receiver.
async fn connect_as(cfg: &Config, user: &str) -> Result<(Client, Violations)> {
    let file = permissions::password_file(&cfg.nats.secrets_dir, user);
    let password = permissions::read_password(&file)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut opts = connect::options(user, &password).event_callback(move |e| {
        if let Event::ServerError(ServerError::Other(text)) = e {
            let _ = tx.send(text);
        }
        std::future::ready(())
    });
    if let Some(ca) = &cfg.nats.ca_file {
        opts = opts.add_root_certificates(ca.clone());
    }
    Ok((connect::connect_with(&cfg.nats.url, opts, user).await?, rx))
}

/// Every grant this release's fragment gives the users (whose password files are in the
/// secrets dir) that the server does not: one [`Need`] each.
pub async fn grants(cfg: &Config) -> Result<Vec<Need>> {
    let mut needs = Vec::new();
    let all = probe::probes(&catalog::kinds());
    for user in users::ALL {
        let file = permissions::password_file(&cfg.nats.secrets_dir, user);
        if user == users::ADMIN && !file.exists() {
            continue; // Optional: without it, `dispatch run` uses the topology as it is.
        }
        let (client, mut violations) = connect_as(cfg, user).await?;
        for p in all.iter().filter(|p| p.user == user) {
            if let Some(need) = try_grant(cfg, &client, &mut violations, p).await? {
                needs.push(need);
            }
        }
    }
    Ok(needs)
}

/// Tries one grant: None when the server allows it (and, for a write, keeps it conditional).
async fn try_grant(
    cfg: &Config,
    client: &Client,
    violations: &mut Violations,
    p: &Probe,
) -> Result<Option<Need>> {
    let request = async {
        match &p.try_ {
            Try::Read { body } => client.request(p.subject.clone(), body.clone().into()).await,
            Try::ConditionalWrite => {
                let mut headers = HeaderMap::new();
                let never = NEVER_SEQUENCE.to_string();
                headers.insert("Nats-Expected-Last-Subject-Sequence", never.as_str());
                client
                    .request_with_headers(p.subject.clone(), headers, "".into())
                    .await
            }
        }
    };
    let denied = async {
        while let Some(text) = violations.recv().await {
            if text.contains("Permissions Violation") && text.contains(&p.subject) {
                return;
            }
        }
        std::future::pending::<()>().await
    };
    let answer = tokio::select! {
        a = tokio::time::timeout(ANSWER, request) => a,
        () = denied => {
            return Ok(Some(Need {
                what: format!("NATS user `{}` may not publish to `{}`, which this release's `queue nats-config` grants", p.user, p.grant),
                fix: permission_fix(cfg),
            }));
        }
    };
    let reply = match answer {
        Ok(Ok(m)) => m,
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
            return Ok(Some(Need {
                what: format!(
                    "no stream at NATS takes `{}` (user `{}`)",
                    p.subject, p.user
                ),
                fix: init_fix(cfg),
            }));
        }
        Ok(Err(e)) => {
            return Err(tenantci_core::Error::external(format!(
                "NATS did not answer `{}` as user `{}`",
                p.subject, p.user
            ))
            .caused_by(e));
        }
        Err(_) => {
            return Err(tenantci_core::Error::external(format!(
                "NATS answered `{}` as user `{}` neither with a reply nor a refusal within {ANSWER:?}",
                p.subject, p.user
            )));
        }
    };
    Ok(match p.try_ {
        Try::Read { .. } => None,
        Try::ConditionalWrite => conditional(cfg, p, &reply.payload),
    })
}

/// A conditional write's answer: JetStream's refusal is what a store that checks the
/// expected sequence gives; a stored message means it does not.
fn conditional(cfg: &Config, p: &Probe, payload: &[u8]) -> Option<Need> {
    let v: serde_json::Value = serde_json::from_slice(payload).unwrap_or_default();
    if v.get("error").is_some() {
        return None;
    }
    Some(Need {
        what: format!(
            "the stream behind `{}` stored a write whose expected last sequence was wrong: it does not honour conditional puts, which the claim ledger's compare-and-set needs",
            p.subject
        ),
        fix: format!(
            "upgrade nats-server to 2.9 or later, then {}",
            init_fix(cfg)
        ),
    })
}

/// The consumers and buckets (and with ci-admin the stream) compared with what `queue init`
/// creates for this config.
pub async fn topology(cfg: &Config) -> Result<Vec<Need>> {
    let admin = permissions::password_file(&cfg.nats.secrets_dir, users::ADMIN).exists();
    let user = if admin { users::ADMIN } else { users::WORKER };
    let (client, _) = connect_as(cfg, user).await?;
    let js = jetstream::new(client);
    let mut spec = cfg.topology_spec();
    let mut needs = Vec::new();
    let drifted = |object: String, fields: Vec<&str>| Need {
        what: format!(
            "{object} differs from what this release's `queue init` creates for this config: {}",
            fields.join(", ")
        ),
        fix: init_fix(cfg),
    };
    if admin {
        let (stream, max_deliver) = topology::live_configs(&js, catalog::default_kind())
            .await
            .map_err(|e| nats_error(cfg, e))?;
        spec = topology::keeping_init_choices(spec, stream.as_ref(), max_deliver);
        match stream {
            None => needs.push(missing(cfg, "the stream CI_RUNNER")),
            Some(s) => {
                let fields = topology::stream_drift(&topology::desired_stream(&spec), &s);
                if !fields.is_empty() {
                    needs.push(drifted("the stream CI_RUNNER".into(), fields));
                }
            }
        }
    }
    for b in spec.backends().collect::<Vec<_>>() {
        let object = format!("the consumer `{}`", b.consumer());
        let found = js
            .get_consumer_from_stream::<pull::Config, _, _>(b.consumer(), crate::queue::STREAM)
            .await;
        let Ok(c) = found else {
            needs.push(missing(cfg, &object));
            continue;
        };
        let live = c.cached_info().config.clone();
        let own = TopologySpec {
            max_deliver: live.max_deliver,
            ..spec.clone()
        };
        let fields = topology::consumer_drift(&topology::desired_consumer(&own, b), &live);
        if !fields.is_empty() {
            needs.push(drifted(object, fields));
        }
    }
    needs.extend(buckets(cfg, &js, &spec, admin).await?);
    Ok(needs)
}

/// The claim ledger's and the task history's buckets: there, read by direct get, and with
/// ci-admin (whose view of the stream sets the ledger's bounds) as `queue init` makes them.
async fn buckets(
    cfg: &Config,
    js: &jetstream::Context,
    spec: &TopologySpec,
    admin: bool,
) -> Result<Vec<Need>> {
    let ledger =
        ledger_bucket::desired_bucket(spec.replicas, spec.max_message_size, spec.max_bytes);
    let history = history_bucket::desired_bucket(spec.replicas, &spec.history);
    type Drift = fn(&jetstream::stream::Config, &jetstream::stream::Config) -> Vec<&'static str>;
    let mut needs = Vec::new();
    let pairs: [(jetstream::stream::Config, Drift); 2] = [
        (ledger, topology::ledger_drift),
        (history, history_bucket::drift),
    ];
    for (desired, drift) in pairs {
        let object = format!("the bucket stream `{}`", desired.name);
        let Ok(stream) = js.get_stream(&desired.name).await else {
            needs.push(missing(cfg, &object));
            continue;
        };
        let live = stream.cached_info().config.clone();
        let mut fields = if admin {
            drift(&desired, &live)
        } else {
            Vec::new()
        };
        if !live.allow_direct {
            fields.push("allow_direct");
        }
        if !fields.is_empty() {
            needs.push(Need {
                what: format!(
                    "{object} differs from what this release's `queue init` creates for this config: {}",
                    fields.join(", ")
                ),
                fix: init_fix(cfg),
            });
        }
    }
    Ok(needs)
}

fn missing(cfg: &Config, object: &str) -> Need {
    Need {
        what: format!("{object} does not exist at NATS (or this user may not read it)"),
        fix: init_fix(cfg),
    }
}

fn nats_error(
    cfg: &Config,
    e: impl std::error::Error + Send + Sync + 'static,
) -> tenantci_core::Error {
    tenantci_core::Error::external(format!(
        "cannot read the queue's topology at NATS {}",
        cfg.nats.url
    ))
    .caused_by(e)
}
