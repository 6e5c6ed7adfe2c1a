//! The front's part of a renewal: after the same handshake and admission as a tunnel, read the
//! runner's one request, ask the signer (the front holds no ClientCA key), pass its answer
//! back, and remember the presented serial as superseded ([`Superseded`], pure: time passed
//! in): after the overlap it opens no new tunnel. Kept in memory: a restarted front forgets
//! it, and the old certificate then works until its own end (bounded by `max_lifetime`).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};

use super::renew::{self, Answer, RenewRequest, SignRequest};

/// Serials renewed, each refused from its instant on.
#[derive(Debug, Default)]
pub struct Superseded {
    refused_from: HashMap<(String, String), Instant>,
}

impl Superseded {
    /// `serial` of `cluster` was renewed at `now`: refused from `now + overlap` on. Entries
    /// older than `forget_after` go (their certificate has ended by then).
    pub fn renewed(
        &mut self,
        cluster: &str,
        serial: &str,
        now: Instant,
        overlap: Duration,
        forget_after: Duration,
    ) {
        self.refused_from
            .retain(|_, from| now.saturating_duration_since(*from) < forget_after);
        let key = (cluster.to_string(), serial.to_string());
        let from = now.checked_add(overlap).unwrap_or(now);
        // A second renewal of the same serial (an answer lost on the way) keeps the first end.
        self.refused_from.entry(key).or_insert(from);
    }

    /// Whether `serial` of `cluster` was renewed and its overlap has ended at `now`.
    pub fn refuses(&self, cluster: &str, serial: &str, now: Instant) -> bool {
        self.refused_from
            .get(&(cluster.to_string(), serial.to_string()))
            .is_some_and(|from| now >= *from)
    }
}

/// One renewal on an admitted session: the request read, the signer asked on `socket`, the
/// answer written back. Returns the audit's end (`renewed`, or `renewal_` and the refusal's
/// reason) and whether a certificate was signed.
pub async fn renewal(
    session: &mut (impl AsyncRead + AsyncWrite + Unpin),
    cluster: &str,
    presented_der: &[u8],
    socket: &Path,
) -> (String, bool) {
    let req: RenewRequest = match renew::read(session).await {
        Ok(r) => r,
        Err(why) => {
            let answer = Answer::refused("bad_message", why);
            let _ = renew::write(session, &answer).await;
            return ("bad_message".into(), false);
        }
    };
    let sign = SignRequest {
        version: renew::VERSION,
        cluster: cluster.to_string(),
        presented: pem::encode(&pem::Pem::new("CERTIFICATE", presented_der.to_vec())),
        csr: req.csr,
        valid_for_seconds: req.valid_for_seconds,
    };
    let answer = signer_answer(socket, &sign).await;
    let end = match &answer {
        Answer::Signed { .. } => "renewed".to_string(),
        Answer::Refused { reason, .. } => format!("renewal_{reason}"),
    };
    let signed = matches!(answer, Answer::Signed { .. });
    let _ = renew::write(session, &answer).await;
    (end, signed)
}

async fn signer_answer(socket: &Path, sign: &SignRequest) -> Answer {
    match super::signer::ask(socket, sign).await {
        Ok(a) => a,
        Err(why) => {
            tracing::warn!(
                "front: {why}; renewals are refused until `tenantci front signer` runs (systemctl status tenantci-front-signer), runners retry"
            );
            Answer::refused(
                "signer_unavailable",
                "the front cannot reach its signer; the runner retries, and the front's log says why",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewed_serial_is_refused_only_after_its_overlap() {
        let t0 = Instant::now();
        let mut s = Superseded::default();
        let (overlap, forget) = (Duration::from_secs(60), Duration::from_secs(3600));
        s.renewed("ci", "1a", t0, overlap, forget);
        assert!(!s.refuses("ci", "1a", t0 + Duration::from_secs(59)));
        assert!(s.refuses("ci", "1a", t0 + overlap));
        assert!(!s.refuses("other", "1a", t0 + overlap), "per cluster");
        // Renewed again later (a lost answer): the first end stays.
        s.renewed("ci", "1a", t0 + Duration::from_secs(30), overlap, forget);
        assert!(s.refuses("ci", "1a", t0 + overlap));
        // Forgotten once the certificate has surely ended.
        s.renewed("ci", "2b", t0 + forget + overlap, overlap, forget);
        assert!(!s.refuses("ci", "1a", t0 + forget + overlap));
    }
}
