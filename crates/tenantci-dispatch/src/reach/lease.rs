//! Pure: who leads, from the scheduler Lease as a reader sees it. The dispatcher's own
//! election (`leader`) decides with its local clock; a reader elsewhere allows for skew.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::jiff::Timestamp;

/// What a Lease holder's `leaseDurationSeconds` is taken as when the Lease does not say
/// (client-go's default LeaseDuration).
const DEFAULT_DURATION_SECONDS: i64 = 15;

/// A renewal older than this many lease durations is expired for a reader: generous, since
/// the reader's clock is not the holder's.
const GRACE_DURATIONS: i64 = 2;

/// The Lease's holder, as a reader decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A holder whose last renewal is recent enough: the leader.
    Live(String),
    /// Nobody holds it: released (an empty holder) or never held.
    Nobody,
    /// A holder that has not renewed for longer than its duration allows (killed, or cut off
    /// from the apiserver); `age` since its last renewal.
    Expired {
        /// The stale holder's identity.
        holder: String,
        /// Seconds since its last renewal (or acquisition), as this reader's clock sees it;
        /// None when it never renewed.
        age_seconds: Option<i64>,
    },
}

/// The holder of a Lease with `spec`, at `now`.
pub fn holder(spec: Option<&LeaseSpec>, now: Timestamp) -> Holder {
    let Some(spec) = spec else {
        return Holder::Nobody;
    };
    let Some(who) = spec.holder_identity.clone().filter(|h| !h.is_empty()) else {
        return Holder::Nobody;
    };
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return Holder::Expired {
            holder: who,
            age_seconds: None,
        };
    };
    let seconds = spec
        .lease_duration_seconds
        .map_or(DEFAULT_DURATION_SECONDS, i64::from)
        .max(1);
    let allowed = seconds.saturating_mul(GRACE_DURATIONS);
    let age = now.as_second().saturating_sub(renewed.0.as_second());
    if age > allowed {
        Holder::Expired {
            holder: who,
            age_seconds: Some(age),
        }
    } else {
        Holder::Live(who)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn spec(holder: Option<&str>, renewed: Option<i64>, duration: Option<i32>) -> LeaseSpec {
        let at = |s: i64| MicroTime(Timestamp::from_second(s).unwrap());
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: renewed.map(at),
            lease_duration_seconds: duration,
            ..LeaseSpec::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn a_recent_renewal_is_a_live_holder() {
        let s = spec(Some("d-0"), Some(1000), Some(15));
        assert_eq!(holder(Some(&s), at(1010)), Holder::Live("d-0".into()));
        // Skew: up to two durations late still counts, and a renewal "in the future" too.
        assert_eq!(holder(Some(&s), at(1030)), Holder::Live("d-0".into()));
        assert_eq!(holder(Some(&s), at(990)), Holder::Live("d-0".into()));
    }

    #[test]
    fn a_renewal_older_than_two_durations_is_expired() {
        let s = spec(Some("d-0"), Some(1000), Some(15));
        assert_eq!(
            holder(Some(&s), at(1031)),
            Holder::Expired {
                holder: "d-0".into(),
                age_seconds: Some(31)
            }
        );
        // Without a duration, client-go's 15 s.
        let s = spec(Some("d-0"), Some(1000), None);
        assert!(matches!(holder(Some(&s), at(1031)), Holder::Expired { .. }));
        assert_eq!(holder(Some(&s), at(1030)), Holder::Live("d-0".into()));
    }

    #[test]
    fn an_empty_or_missing_holder_is_nobody() {
        assert_eq!(holder(None, at(0)), Holder::Nobody);
        let released = spec(Some(""), Some(1000), Some(1));
        assert_eq!(holder(Some(&released), at(1000)), Holder::Nobody);
        assert_eq!(holder(Some(&spec(None, None, None)), at(0)), Holder::Nobody);
    }

    #[test]
    fn a_holder_that_never_renewed_is_expired() {
        let s = spec(Some("d-0"), None, Some(15));
        assert!(matches!(holder(Some(&s), at(0)), Holder::Expired { .. }));
    }
}
