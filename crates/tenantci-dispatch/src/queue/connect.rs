//! Connects to NATS as one of the queue's users: user/password (the password read from a file,
//! never argv), and the user's own inbox prefix, which its permissions require. A URL may name
//! several servers of one cluster, comma-separated (`nats://n1:4222,nats://n2:4222`): the
//! client connects to one and fails over to the others; losing and regaining the connection
//! is logged.
//!
//! Errors are `tenantci_core::Error`s naming the URL: unreachable or refused -> exit 3, a bad URL
//! or an unreadable password file -> exit 2.

use std::path::Path;
use std::time::Duration;

use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event, ServerAddr};

use super::permissions::read_password;
use super::users;

/// How long one connect attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses a NATS URL (`nats://host:port`, `host:port`), or several separated by commas.
pub fn parse_url(url: &str) -> tenantci_core::Result<Vec<ServerAddr>> {
    url.split(',')
        .map(|one| {
            one.trim().parse::<ServerAddr>().map_err(|e| {
                tenantci_core::Error::bad_input(format!("the NATS URL `{url}` is not valid"))
                    .caused_by(e)
                    .hint("pass --nats as nats://HOST:PORT, e.g. nats://127.0.0.1:4222, or several of one cluster separated by commas")
            })
        })
        .collect()
}

/// Logs what happens to a connection: lost (the client reconnects on its own, to any
/// server of the list or that the cluster announced) and (re)established.
fn log_event(user: String) -> impl Fn(Event) -> std::future::Ready<()> + Send + Sync + 'static {
    move |event| {
        match &event {
            Event::Disconnected => {
                tracing::warn!(user = %user, "NATS connection lost; reconnecting on its own to a server of nats.url (claims and starts wait meanwhile)")
            }
            Event::Connected => tracing::info!(user = %user, "NATS connection (re)established"),
            Event::LameDuckMode => {
                tracing::warn!(user = %user, "the NATS server is shutting down (lame duck); moving to another server of nats.url")
            }
            other => tracing::debug!(user = %user, event = %other, "NATS client event"),
        }
        std::future::ready(())
    }
}

/// Client options for `user`: credentials and the inbox prefix `_INBOX_<user>`.
pub fn options(user: &str, password: &str) -> ConnectOptions {
    ConnectOptions::new()
        .user_and_password(user.to_string(), password.to_string())
        .custom_inbox_prefix(users::inbox_prefix(user))
        .connection_timeout(CONNECT_TIMEOUT)
        .name(format!("tenantci/{user}"))
        .event_callback(log_event(user.to_string()))
}

/// Connects as `user` with the password in `password_file`.
pub async fn connect(url: &str, user: &str, password_file: &Path) -> tenantci_core::Result<Client> {
    connect_trusting(url, user, password_file, None).await
}

/// As [`connect`], with the server's TLS certificate verified against the CA certificates in
/// `ca_file` (a private CA; `nats.ca_file`) instead of the system's roots.
pub async fn connect_trusting(
    url: &str,
    user: &str,
    password_file: &Path,
    ca_file: Option<&Path>,
) -> tenantci_core::Result<Client> {
    let password = read_password(password_file)?;
    let mut opts = options(user, &password);
    if let Some(ca) = ca_file {
        check_ca_file(ca)?;
        opts = opts.add_root_certificates(ca.to_path_buf());
    }
    connect_with(url, opts, user).await
}

/// The CA file must hold at least one PEM certificate: refused as bad input (exit 2, naming
/// the file) rather than as an unreachable server.
fn check_ca_file(path: &Path) -> tenantci_core::Result<()> {
    let text =
        tenantci_core::input::read_text("the NATS CA file", path, tenantci_core::input::MAX_PEM)?;
    if text.contains("-----BEGIN CERTIFICATE-----") {
        Ok(())
    } else {
        Err(tenantci_core::Error::bad_input(format!(
            "the NATS CA file `{}` holds no PEM certificate",
            path.display()
        ))
        .hint("set nats.ca_file (TENANTCI_DISPATCH_NATS_CA_FILE, init --nats-ca-file) to the CA certificate that signed the NATS server's certificate"))
    }
}

/// Connects with prepared `options` (tests add an event callback); maps errors to exit codes.
pub async fn connect_with(
    url: &str,
    options: ConnectOptions,
    user: &str,
) -> tenantci_core::Result<Client> {
    let addr = parse_url(url)?;
    options.connect(addr).await.map_err(|e| match e.kind() {
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
            tenantci_core::Error::external(format!(
                "NATS at {url} refused the credentials of user `{user}`"
            ))
            .hint("check --user and --password-file against the fragment from `tenantci queue nats-config`, and that nats-server includes it")
        }
        ConnectErrorKind::ServerParse => tenantci_core::Error::bad_input(format!(
            "the NATS URL `{url}` is not valid"
        ))
        .hint("pass --nats as nats://HOST:PORT"),
        _ => tenantci_core::Error::external(format!("cannot reach NATS at {url}"))
            .caused_by(e)
            .hint("is nats-server running and listening there? (`nats-server -c <config>`)"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_may_list_the_servers_of_a_cluster() {
        let one = super::parse_url("nats://127.0.0.1:4222").unwrap();
        assert_eq!(one.len(), 1);
        let three = super::parse_url("nats://n1:4222, nats://n2:4222,nats://n3:4222").unwrap();
        assert_eq!(three.len(), 3);
        let bad = super::parse_url("nats://n1:4222,nats://n2:notaport").unwrap_err();
        assert!(bad.to_string().contains("is not valid"), "{bad}");
    }
}
