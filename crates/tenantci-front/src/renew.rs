//! A renewal of a runner's client certificate, as it crosses processes: `connect` asks the
//! front ([`RenewRequest`], over the outer mutual-TLS session whose ALPN is
//! [`super::renew_alpn_for`]), the front asks the signer ([`SignRequest`], over its Unix
//! socket) and passes the [`Answer`] back. Each message is a length-prefixed JSON document
//! carrying [`VERSION`]; another version is refused by name. [`decide`] is the signer's rule,
//! pure: the front's own admission ([`admit::decide`]) again on the presented certificate and
//! on the requested subject, the two subjects equal, the lifetime capped.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::admit::{self, Client};
use super::config::ClusterRule;
use super::deny::DenyList;
use tenantci_core::pki::kube_subject::KubeSubject;

/// The version of every renewal message; a reader refuses another.
pub const VERSION: u32 = 1;
/// The largest message either side reads: a request or a certificate is a few KiB.
pub const MAX_MESSAGE: u32 = 64 * 1024;
/// How long either side waits for the other's message.
pub const MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// `connect` to the front: sign this request for my own subject.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewRequest {
    /// [`VERSION`].
    pub version: u32,
    /// The PKCS#10 request (PEM), signed by the new key.
    pub csr: String,
    /// The lifetime asked for, in seconds.
    pub valid_for_seconds: u64,
}

/// The front to the signer: the runner's request and the certificate it presented.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignRequest {
    /// [`VERSION`].
    pub version: u32,
    /// The cluster the runner's session named (its ClientCA signs).
    pub cluster: String,
    /// The certificate the runner presented in the outer handshake (PEM, the leaf).
    pub presented: String,
    /// The runner's request, unchanged.
    pub csr: String,
    /// The lifetime asked for, in seconds.
    pub valid_for_seconds: u64,
}

/// The signer's answer, passed back to `connect` unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Answer {
    /// The new certificate (PEM), its serial (normalised hex) and its end (RFC 3339).
    #[serde(rename_all = "camelCase")]
    Signed {
        /// [`VERSION`].
        version: u32,
        /// The new certificate, PEM.
        cert: String,
        /// Its serial.
        serial: String,
        /// Its notAfter.
        not_after: String,
    },
    /// Nothing signed: the reason (as the audit names it) and a sentence saying what to do.
    #[serde(rename_all = "camelCase")]
    Refused {
        /// [`VERSION`].
        version: u32,
        /// The audit's reason.
        reason: String,
        /// What happened and what to do.
        message: String,
    },
}

impl Answer {
    /// A refusal with `reason` and `message`.
    pub fn refused(reason: &str, message: impl Into<String>) -> Self {
        Answer::Refused {
            version: VERSION,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Writes one message: its length (u32, big-endian), then its JSON.
pub async fn write<T: Serialize>(
    w: &mut (impl AsyncWrite + Unpin),
    message: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_MESSAGE)
        .ok_or_else(|| std::io::Error::other("message too large"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&body).await?;
    w.flush().await
}

/// Reads one message of at most [`MAX_MESSAGE`] bytes within [`MESSAGE_TIMEOUT`]; the error
/// says what was wrong (too long, not JSON, another version).
pub async fn read<T: for<'de> Deserialize<'de> + Versioned>(
    r: &mut (impl AsyncRead + Unpin),
) -> std::result::Result<T, String> {
    let read = async {
        let mut len = [0u8; 4];
        r.read_exact(&mut len)
            .await
            .map_err(|e| format!("no message: {e}"))?;
        let len = u32::from_be_bytes(len);
        if len > MAX_MESSAGE {
            return Err(format!("a message of {len} bytes (at most {MAX_MESSAGE})"));
        }
        let mut body = vec![0u8; len as usize];
        r.read_exact(&mut body)
            .await
            .map_err(|e| format!("a message cut short: {e}"))?;
        let message: T =
            serde_json::from_slice(&body).map_err(|e| format!("not a renewal message: {e}"))?;
        match message.version() {
            VERSION => Ok(message),
            v => Err(format!(
                "a version {v} renewal message; this tenantci reads version {VERSION} (use the same release on both hosts)"
            )),
        }
    };
    tokio::time::timeout(MESSAGE_TIMEOUT, read)
        .await
        .map_err(|_| format!("no message within {MESSAGE_TIMEOUT:?}"))?
}

/// A message's version, checked by [`read`].
pub trait Versioned {
    /// The version the message says it is.
    fn version(&self) -> u32;
}

impl Versioned for RenewRequest {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Versioned for SignRequest {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Versioned for Answer {
    fn version(&self) -> u32 {
        match self {
            Answer::Signed { version, .. } | Answer::Refused { version, .. } => *version,
        }
    }
}

/// Why the signer refused; [`Refusal::reason`] names it in its audit and the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The front does not serve the cluster named.
    UnknownCluster,
    /// The presented certificate does not pass the front's admission (revoked, dropped from
    /// the allow-list, a system group...).
    Presented(admit::Refusal),
    /// The requested subject would not pass the front's admission.
    Requested(admit::Refusal),
    /// The requested subject is not the presented one.
    SubjectMismatch,
    /// A lifetime of zero, or above the config's `max_lifetime` (both in seconds).
    Lifetime {
        /// Asked for.
        asked: u64,
        /// The cap.
        max: u64,
    },
}

impl Refusal {
    /// The audit's reason: a short, bounded set.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::UnknownCluster => "unknown_cluster",
            Refusal::Presented(r) | Refusal::Requested(r) => r.reason(),
            Refusal::SubjectMismatch => "subject_mismatch",
            Refusal::Lifetime { .. } => "lifetime",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::UnknownCluster => f.write_str("the front config serves no such cluster"),
            Refusal::Presented(r) => write!(f, "the presented certificate: {r}"),
            Refusal::Requested(r) => write!(f, "the requested subject: {r}"),
            Refusal::SubjectMismatch => f.write_str(
                "the requested subject is not the presented certificate's: a renewal is for its own subject only",
            ),
            Refusal::Lifetime { asked, max } => write!(
                f,
                "a lifetime of {asked}s asked, the front config's [renewal] max_lifetime allows 1s to {max}s"
            ),
        }
    }
}

/// The signer's rule: the presented certificate passes the front's admission for `rule`
/// (checked by the caller to chain to the cluster's ClientCA), so does the requested subject,
/// the two are one identity (user and groups, in order), and the lifetime is within the cap.
pub fn decide(
    rule: Option<&ClusterRule>,
    presented: &Client,
    requested: &KubeSubject,
    valid_for: u64,
    max_lifetime: Duration,
    deny: &DenyList,
) -> Result<(), Refusal> {
    let rule = rule.ok_or(Refusal::UnknownCluster)?;
    admit::decide(rule, presented, deny).map_err(Refusal::Presented)?;
    let wanted = Client::from_subject(requested, &presented.serial);
    admit::decide(rule, &wanted, deny).map_err(Refusal::Requested)?;
    if wanted.common_name != presented.common_name
        || wanted.organizations != presented.organizations
    {
        return Err(Refusal::SubjectMismatch);
    }
    let max = max_lifetime.as_secs();
    if valid_for == 0 || valid_for > max {
        return Err(Refusal::Lifetime {
            asked: valid_for,
            max,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Subject;

    fn rule() -> ClusterRule {
        ClusterRule {
            name: "ci".into(),
            allow: vec![Subject {
                common_name: "gitlab-runner".into(),
                organization: "gitlab-runner".into(),
            }],
        }
    }

    fn subject(cn: &str, orgs: &[&str]) -> KubeSubject {
        use tenantci_core::pki::{KeyType, csr};
        let orgs: Vec<String> = orgs.iter().map(|s| s.to_string()).collect();
        let r = csr::new_request(cn, &orgs, KeyType::EcdsaP256).unwrap();
        csr::read(&r.csr_pem).unwrap().subject
    }

    fn client(cn: &str, orgs: &[&str]) -> Client {
        Client::from_subject(&subject(cn, orgs), "1a")
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn only_the_own_allowed_subject_within_the_cap_is_signed() {
        let deny = DenyList::default();
        let me = client("gitlab-runner", &["gitlab-runner"]);
        let same = subject("gitlab-runner", &["gitlab-runner"]);
        let r = rule();
        assert_eq!(decide(Some(&r), &me, &same, 3600, DAY, &deny), Ok(()));
        assert_eq!(
            decide(None, &me, &same, 3600, DAY, &deny),
            Err(Refusal::UnknownCluster)
        );
        let masters = subject("gitlab-runner", &["system:masters"]);
        let e = decide(Some(&r), &me, &masters, 3600, DAY, &deny).unwrap_err();
        assert_eq!(e.reason(), "system_masters");
        let other = subject("someone", &["gitlab-runner"]);
        let e = decide(Some(&r), &me, &other, 3600, DAY, &deny).unwrap_err();
        assert_eq!(e.reason(), "not_allowed", "another subject is not allowed");
        let long = decide(Some(&r), &me, &same, DAY.as_secs() + 1, DAY, &deny).unwrap_err();
        assert_eq!(long.reason(), "lifetime");
        assert_eq!(
            decide(Some(&r), &me, &same, 0, DAY, &deny)
                .unwrap_err()
                .reason(),
            "lifetime"
        );
        let revoked = DenyList::parse("ci 1a\n").unwrap();
        let e = decide(Some(&r), &me, &same, 3600, DAY, &revoked).unwrap_err();
        assert_eq!(e, Refusal::Presented(admit::Refusal::Revoked));
    }

    #[test]
    fn an_allowed_but_different_subject_is_a_mismatch() {
        let mut r = rule();
        r.allow.push(Subject {
            common_name: "other-runner".into(),
            organization: "gitlab-runner".into(),
        });
        let me = client("gitlab-runner", &["gitlab-runner"]);
        let other = subject("other-runner", &["gitlab-runner"]);
        let e = decide(Some(&r), &me, &other, 60, DAY, &DenyList::default()).unwrap_err();
        assert_eq!(e, Refusal::SubjectMismatch);
    }

    #[tokio::test]
    async fn a_message_of_another_version_or_size_is_refused_by_name() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let req = RenewRequest {
            version: 2,
            csr: String::new(),
            valid_for_seconds: 1,
        };
        write(&mut a, &req).await.unwrap();
        let e = read::<RenewRequest>(&mut b).await.unwrap_err();
        assert!(e.contains("version 2"), "{e}");
        a.write_all(&(MAX_MESSAGE + 1).to_be_bytes()).await.unwrap();
        let e = read::<RenewRequest>(&mut b).await.unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
