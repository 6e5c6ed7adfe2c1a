//! GitLab, as gitlab-runner reaches it: the entry's `url` with its `tls-ca-file`, and the token
//! accepted by `POST /api/v4/runners/verify`. The token never reaches output.

use std::path::Path;

use crate::checklist::Check;
use crate::gitlab::api::{ApiError, Client};
use crate::gitlab::entry::{self, EntryView, TokenError, system_id};
use tenantci_core::Secret;

const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

fn token(view: &EntryView) -> Result<Secret, Check> {
    entry::runner_token(view).map_err(|e| match e {
        TokenError::Missing => Check::fail(
            "gitlab",
            e.to_string(),
            "re-run `tenantci bootstrap runner` with a token or --gitlab-api-token-file",
        ),
        TokenError::Unset(_) => Check::skip(
            "gitlab",
            format!("{e}: run the check with gitlab-runner's environment"),
        ),
    })
}

pub async fn check(config: &Path, view: &EntryView, lines: &mut Vec<Check>) {
    let Some(url) = view.url.as_deref().filter(|u| !u.starts_with('$')) else {
        lines.push(Check::skip(
            "gitlab",
            "the entry's url is not set or a $VAR",
        ));
        return;
    };
    let token = match token(view) {
        Ok(t) => t,
        Err(line) => {
            lines.push(line);
            return;
        }
    };
    // The API token is not needed for verify; the client is built only for its TLS and URL.
    let client = match Client::new(url, Secret::new(""), view.tls_ca_file.as_deref(), TIMEOUT) {
        Ok(c) => c,
        Err(e) => {
            lines.push(Check::fail(
                "gitlab",
                e.message().to_string(),
                e.hint_text().unwrap_or("fix tls-ca-file"),
            ));
            return;
        }
    };
    let trust = match &view.tls_ca_file {
        Some(p) => format!("tls-ca-file {}", p.display()),
        None => "the public roots".to_string(),
    };
    lines.push(match client.verify_runner(&token, &system_id(config)).await {
        Ok(_) => Check::ok(
            "gitlab",
            format!("{url} reached with {trust}; the runner token is accepted"),
        ),
        Err(ApiError::VerifyRejected) => Check::fail(
            "gitlab",
            format!("{url} does not accept the runner token (403 on /api/v4/runners/verify)"),
            "the runner was deleted or its token revoked or expired: create it again (`tenantci bootstrap runner --gitlab-api-token-file FILE --recreate`)",
        ),
        Err(e @ (ApiError::Network(_) | ApiError::Timeout(_))) => {
            let text = e.to_string();
            let fix = if text.to_ascii_lowercase().contains("certificate") {
                "gitlab-runner cannot verify GitLab either: set tls-ca-file to GitLab's CA (`tenantci bootstrap runner --gitlab-ca-file FILE`)"
            } else {
                "check the url and this host's path to GitLab (DNS, firewall, proxy): gitlab-runner runs here and needs it too"
            };
            Check::fail("gitlab", format!("{url} with {trust}: {text}"), fix)
        }
        Err(e) => Check::fail("gitlab", format!("{url}: {e}"), "check GitLab's health"),
    });
}
