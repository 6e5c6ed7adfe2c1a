//! Leader election on a coordination.k8s.io Lease with client-go's semantics: GET; NotFound ->
//! create with holder = self; another holder's unexpired lease -> retry every RetryPeriod
//! (jittered); expiry is judged by local time since the record last changed (never by
//! comparing clocks); a takeover sets acquireTime and bumps leaseTransitions; every write is a
//! PUT of the last object read, so a stale copy gets 409. The leader renews as client-go's fast
//! path does: a PUT of the Lease it wrote last, without a GET (one request per RetryPeriod), and
//! reads it again only when that PUT fails.
//! A leader that cannot renew within RenewDeadline stops leading before its lease can expire.
//!
//! `decide` is the pure step; `run` is the loop that publishes "am I leader" on a watch channel;
//! `release` hands the lease back at shutdown. [`Leader`] is the `[leader]` config section.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use tenantci_core::duration::GoDuration;

/// The Lease the dispatchers of one install elect their one scheduler on, in the dispatcher's
/// namespace (`cluster.dispatcher_namespace`, by default the executors').
pub const LEASE_NAME: &str = "dynamic-runner-scheduler";

/// The election's three durations, client-go's LeaseDuration, RenewDeadline and RetryPeriod,
/// from the `[leader]` section ([`Leader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a lease lasts unrenewed before another instance may take it over.
    pub lease_duration: Duration,
    /// How long the leader goes on leading without a successful renewal; shorter than the
    /// lease, so it stops before another can take over.
    pub renew_deadline: Duration,
    /// How often an instance tries to acquire or renew (with up to 20% jitter while it does
    /// not lead).
    pub retry_period: Duration,
}

impl Default for Timing {
    /// client-go's defaults: 15 s / 10 s / 2 s.
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// LeaseDuration > RenewDeadline > 1.2 x RetryPeriod, as client-go requires.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err("the lease duration must be longer than the renew deadline".into());
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err("the renew deadline must be longer than 1.2 x the retry period".into());
        }
        Ok(())
    }
}

/// What the last GET showed, with when (locally) its record last changed.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The Lease's holderIdentity; None or empty: no one holds it.
    pub holder: Option<String>,
    /// What tells one write of the Lease from another: holderIdentity, renewTime (as text) and
    /// leaseTransitions. A change restarts the expiry clock.
    pub record: (Option<String>, Option<String>, Option<i32>),
    /// When, by the local monotonic clock, `record` was first seen as it is now.
    pub changed_at: Instant,
}

/// What one election step does, given the last GET ([`decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// No Lease: create it holding it.
    Create,
    /// We hold it: renew (PUT with renewTime = now).
    Renew,
    /// Another holder's lease expired (locally observed): take over.
    Takeover,
    /// Someone else holds a live lease.
    Wait,
}

/// One decision. `lease_duration` is the holder's advertised duration (ours when absent).
pub fn decide(me: &str, seen: Option<&Seen>, now: Instant, lease_duration: Duration) -> Step {
    match seen {
        None => Step::Create,
        Some(s) if s.holder.as_deref() == Some(me) => Step::Renew,
        Some(s) if s.holder.as_deref().is_none_or(str::is_empty) => Step::Takeover,
        Some(s) if now.saturating_duration_since(s.changed_at) > lease_duration => Step::Takeover,
        Some(_) => Step::Wait,
    }
}

fn micro_now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn record(lease: &Lease) -> (Option<String>, Option<String>, Option<i32>) {
    let spec = lease.spec.as_ref();
    (
        spec.and_then(|s| s.holder_identity.clone()),
        spec.and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string()),
        spec.and_then(|s| s.lease_transitions),
    )
}

/// Runs the election until `stop`; `leader` is true exactly while we may act as leader.
pub async fn run(
    api: Api<Lease>,
    me: String,
    timing: Timing,
    leader: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut seen: Option<Seen> = None;
    let mut last_renew: Option<Instant> = None;
    // The Lease as we last wrote it, while we lead.
    let mut held: Option<Lease> = None;
    loop {
        let now = Instant::now();
        let fast = match held.take() {
            Some(lease) if *leader.borrow() => renew_held(&api, lease).await,
            _ => None,
        };
        let outcome = match fast {
            Some(lease) => Ok(Some(lease)),
            None => step(&api, &me, timing, &mut seen, now).await,
        };
        match outcome {
            Ok(Some(lease)) => {
                held = Some(lease);
                last_renew = Some(now);
                let _ = leader.send_if_modified(|l| !std::mem::replace(l, true));
            }
            Ok(None) => {
                last_renew = None;
                let _ = leader.send_if_modified(|l| std::mem::replace(l, false));
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot read or renew the scheduler lease {LEASE_NAME} at the tenant apiserver; trying again in {:?} (a leader that cannot renew within {:?} stops claiming)",
                    timing.retry_period,
                    timing.renew_deadline
                );
                // Stop leading before the lease can expire for others.
                if last_renew
                    .is_some_and(|t| now.saturating_duration_since(t) >= timing.renew_deadline)
                {
                    last_renew = None;
                    let _ = leader.send_if_modified(|l| std::mem::replace(l, false));
                }
            }
        }
        let jitter = if *leader.borrow() {
            1.0
        } else {
            1.0 + rand::random::<f64>() * 0.2
        };
        tokio::select! {
            _ = tokio::time::sleep(timing.retry_period.mul_f64(jitter)) => {}
            _ = stop.changed() => {
                let _ = leader.send(false);
                return;
            }
        }
    }
}

/// Hands the lease back at shutdown (client-go's ReleaseOnCancel): an empty holder with a 1 s
/// duration, so a standby takes over at its next retry instead of waiting for expiry.
/// True when we held it and the release was written.
pub async fn release(api: &Api<Lease>, me: &str) -> bool {
    let Ok(Some(mut lease)) = api.get_opt(LEASE_NAME).await else {
        return false;
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(me) {
        return false;
    }
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(micro_now());
    spec.acquire_time = Some(micro_now());
    api.replace(LEASE_NAME, &PostParams::default(), &lease)
        .await
        .is_ok()
}

/// client-go's fast path: the leader renews with a PUT of the Lease it wrote last, no GET.
/// None when that fails for any reason (another writer: 409): the GET of [`step`] follows.
async fn renew_held(api: &Api<Lease>, mut lease: Lease) -> Option<Lease> {
    lease.spec.get_or_insert_with(Default::default).renew_time = Some(micro_now());
    match api
        .replace(LEASE_NAME, &PostParams::default(), &lease)
        .await
    {
        Ok(written) => Some(written),
        Err(e) => {
            tracing::debug!(error = %e, "lease {LEASE_NAME}: the renewal without a read failed; reading it again");
            None
        }
    }
}

/// One GET + decision + write; the Lease as written when we hold it afterwards.
async fn step(
    api: &Api<Lease>,
    me: &str,
    timing: Timing,
    seen: &mut Option<Seen>,
    now: Instant,
) -> Result<Option<Lease>, kube::Error> {
    let current = api.get_opt(LEASE_NAME).await?;
    match &current {
        Some(lease) => {
            let rec = record(lease);
            let changed = seen.as_ref().is_none_or(|s| s.record != rec);
            if changed {
                *seen = Some(Seen {
                    holder: rec.0.clone(),
                    record: rec,
                    changed_at: now,
                });
            }
        }
        None => *seen = None,
    }
    let advertised = current
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.lease_duration_seconds)
        .map(|s| Duration::from_secs(s.max(1) as u64))
        .unwrap_or(timing.lease_duration);
    let secs = timing.lease_duration.as_secs() as i32;
    match decide(me, seen.as_ref(), now, advertised) {
        Step::Wait => Ok(None),
        Step::Create => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.into()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(micro_now()),
                    renew_time: Some(micro_now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(written) => Ok(Some(written)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) => Err(e),
            }
        }
        step @ (Step::Renew | Step::Takeover) => {
            let mut lease = current.expect("renew and takeover follow a GET that found the lease");
            let spec = lease.spec.get_or_insert_with(Default::default);
            if step == Step::Takeover {
                spec.acquire_time = Some(micro_now());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.holder_identity = Some(me.into());
            spec.lease_duration_seconds = Some(secs);
            spec.renew_time = Some(micro_now());
            // A PUT of the object we read: its resourceVersion makes a stale copy a 409.
            match api
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => Ok(Some(written)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

/// The `[leader]` section: the scheduler Lease's timing (Go durations, client-go's defaults)
/// and this instance's identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leader {
    /// See [`Timing::lease_duration`]; default 15 s.
    #[serde(default = "defaults::lease_duration")]
    pub lease_duration: GoDuration,
    /// See [`Timing::renew_deadline`]; default 10 s.
    #[serde(default = "defaults::renew_deadline")]
    pub renew_deadline: GoDuration,
    /// See [`Timing::retry_period`]; default 2 s.
    #[serde(default = "defaults::retry_period")]
    pub retry_period: GoDuration,
    /// This instance's holder identity; absent: `<hostname>-<pid>` (the Pod name in-cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl Default for Leader {
    fn default() -> Self {
        Leader {
            lease_duration: defaults::lease_duration(),
            renew_deadline: defaults::renew_deadline(),
            retry_period: defaults::retry_period(),
            identity: None,
        }
    }
}

/// The section's defaults (`init` uses them for keys it has no flag for).
pub mod defaults {
    use std::time::Duration;

    use tenantci_core::duration::GoDuration;

    /// 15 s, client-go's LeaseDuration.
    pub fn lease_duration() -> GoDuration {
        Duration::from_secs(15).into()
    }
    /// 10 s, client-go's RenewDeadline.
    pub fn renew_deadline() -> GoDuration {
        Duration::from_secs(10).into()
    }
    /// 2 s, client-go's RetryPeriod.
    pub fn retry_period() -> GoDuration {
        Duration::from_secs(2).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(holder: &str, ago: Duration) -> Seen {
        Seen {
            holder: Some(holder.into()),
            record: (Some(holder.into()), None, None),
            changed_at: Instant::now() - ago,
        }
    }

    #[tokio::test]
    async fn decisions_follow_client_go() {
        let d = Duration::from_secs(15);
        let now = Instant::now();
        assert_eq!(decide("a", None, now, d), Step::Create);
        assert_eq!(
            decide("a", Some(&seen("a", Duration::ZERO)), now, d),
            Step::Renew
        );
        assert_eq!(
            decide("a", Some(&seen("b", Duration::from_secs(3))), now, d),
            Step::Wait
        );
        assert_eq!(
            decide("a", Some(&seen("b", Duration::from_secs(16))), now, d),
            Step::Takeover
        );
        assert_eq!(
            decide("a", Some(&seen("", Duration::ZERO)), now, d),
            Step::Takeover
        );
    }

    #[test]
    fn timing_constraints() {
        assert!(Timing::default().validate().is_ok());
        let bad = Timing {
            lease_duration: Duration::from_secs(5),
            ..Timing::default()
        };
        assert!(bad.validate().is_err());
        let bad = Timing {
            retry_period: Duration::from_secs(9),
            ..Timing::default()
        };
        assert!(bad.validate().is_err());
    }
}
