//! Connects to NATS as one of the queue's users: user/password (the password read from a file,
//! never argv), and the user's own inbox prefix, which its permissions require.
//!
//! Errors are `tenantci::Error`s naming the URL: unreachable or refused -> exit 3, a bad URL
//! or an unreadable password file -> exit 2.

use std::path::Path;
use std::time::Duration;

use async_nats::{Client, ConnectErrorKind, ConnectOptions, ServerAddr};

use super::permissions::read_password;
use super::users;

/// How long one connect attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses a NATS URL (`nats://host:port`, `host:port`).
pub fn parse_url(url: &str) -> tenantci_core::Result<ServerAddr> {
    url.parse::<ServerAddr>().map_err(|e| {
        tenantci_core::Error::bad_input(format!("the NATS URL `{url}` is not valid"))
            .caused_by(e)
            .hint("pass --nats as nats://HOST:PORT, e.g. nats://127.0.0.1:4222")
    })
}

/// Client options for `user`: credentials and the inbox prefix `_INBOX_<user>`.
pub fn options(user: &str, password: &str) -> ConnectOptions {
    ConnectOptions::new()
        .user_and_password(user.to_string(), password.to_string())
        .custom_inbox_prefix(users::inbox_prefix(user))
        .connection_timeout(CONNECT_TIMEOUT)
        .name(format!("tenantci/{user}"))
}

/// Connects as `user` with the password in `password_file`.
pub async fn connect(url: &str, user: &str, password_file: &Path) -> tenantci_core::Result<Client> {
    let password = read_password(password_file)?;
    connect_with(url, options(user, &password), user).await
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
