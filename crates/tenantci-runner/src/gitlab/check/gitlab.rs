//! GitLab, as gitlab-runner reaches it: the entry's `url` with its `tls-ca-file`, and the token
//! accepted by `POST /api/v4/runners/verify`. The token never reaches output.

use std::path::Path;

use super::entry::EntryView;
use crate::checklist::Check;
use crate::gitlab::api::{self, ApiError, Client};
use tenantci_core::Secret;

const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// gitlab-runner's own system id, kept beside config.toml: verifying with it adds no
/// runner manager to GitLab's list.
pub(crate) fn system_id(config: &Path) -> String {
    let file = config.with_file_name(".runner_system_id");
    tenantci_core::fsutil::read_bounded(&file, 256)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(api::system_id)
}

/// `$VAR` tokens are expanded from this process's environment, as gitlab-runner's are from
/// its own.
pub(crate) fn token(view: &EntryView) -> Result<Secret, Check> {
    let raw = view.token.as_deref().unwrap_or_default();
    let Some(var) = raw.strip_prefix('$') else {
        return if raw.is_empty() {
            Err(Check::fail(
                "gitlab",
                "the entry has no token",
                "re-run `tenantci bootstrap runner` with a token or --gitlab-api-token-file",
            ))
        } else {
            Ok(Secret::new(raw))
        };
    };
    let var = var.trim_start_matches('{').trim_end_matches('}');
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v.trim())),
        _ => Err(Check::skip(
            "gitlab",
            format!(
                "the token is ${var}, not set here: run the check with gitlab-runner's environment"
            ),
        )),
    }
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
