//! How an error relays an upstream refusal (OpenSandbox, Gitea, GitLab, SPIRE, an apiserver)
//! whose structured code and message are missing: the HTTP status and a bounded excerpt of the
//! body, so "refused the request (: )" never reaches an operator.
//!
//! Boundary: formats; it does not classify statuses (each client knows its API) or read
//! bodies (the caller has them, already bounded by its client).
//! Invariant: an excerpt is at most [`EXCERPT_CHARS`] characters of the body, with control
//! characters escaped, so a body cannot break a log line or a terminal.

/// How much of a body an error shows.
pub const EXCERPT_CHARS: usize = 200;

/// The first [`EXCERPT_CHARS`] characters of `body` (lossy UTF-8), control characters
/// escaped (`\n`, `\u{1b}`), whitespace runs at the ends trimmed; `...` and the length when cut.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    let mut out = String::new();
    for c in text.chars().take(EXCERPT_CHARS) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if text.chars().count() > EXCERPT_CHARS {
        out.push_str(&format!("... ({} bytes)", body.len()));
    }
    format!("\"{out}\"")
}

/// `HTTP 400 Bad Request, body "<html>..."`: what a refusal without structured fields says.
pub fn status_and_excerpt(status: u16, body: &[u8]) -> String {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map(|r| format!(" {r}"))
        .unwrap_or_default();
    if String::from_utf8_lossy(body).trim().is_empty() {
        return format!("HTTP {status}{reason}, empty body");
    }
    format!("HTTP {status}{reason}, body {}", excerpt(body))
}

/// The refusal's detail: `code: message` when the API gave either (each bounded), else the
/// status and an excerpt of the body.
pub fn detail(status: u16, code: &str, message: &str, body: &[u8]) -> String {
    match (code.trim(), message.trim()) {
        ("", "") => status_and_excerpt(status, body),
        ("", one) | (one, "") => excerpt_str(one),
        (c, m) => format!("{}: {}", excerpt_str(c), excerpt_str(m)),
    }
}

/// A structured field, bounded and escaped like an excerpt but not quoted.
fn excerpt_str(s: &str) -> String {
    let quoted = excerpt(s.as_bytes());
    quoted.trim_matches('"').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_html_body_is_cut_and_escaped() {
        let body = format!("<html>\n<body>\x1b[31m{}</body></html>", "x".repeat(500));
        let e = excerpt(body.as_bytes());
        assert!(e.starts_with("\"<html>\\n<body>\\u{1b}[31m"), "{e}");
        assert!(e.ends_with(&format!("... ({} bytes)\"", body.len())), "{e}");
        assert!(!e.contains('\n') && !e.contains('\x1b'));
        assert!(e.chars().count() < EXCERPT_CHARS + 40);
    }

    #[test]
    fn an_empty_body_says_so_with_the_status() {
        assert_eq!(
            status_and_excerpt(400, b"  \n"),
            "HTTP 400 Bad Request, empty body"
        );
        assert_eq!(status_and_excerpt(599, b"x"), "HTTP 599, body \"x\"");
    }

    #[test]
    fn structured_fields_win_over_the_body() {
        assert_eq!(
            detail(400, "INVALID_REQUEST", "bad image", b"{}"),
            "INVALID_REQUEST: bad image"
        );
        assert_eq!(
            detail(400, "", "", b"<h1>Bad</h1>"),
            "HTTP 400 Bad Request, body \"<h1>Bad</h1>\""
        );
        assert_eq!(detail(502, "", "upstream gone", b""), "upstream gone");
    }
}
