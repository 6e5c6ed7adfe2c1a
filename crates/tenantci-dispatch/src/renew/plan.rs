//! When a certificate is due for renewal: pure, so the rule is tested without files or clocks.
//!
//! Due when a third or less of its life is left (the rule `dispatch init` and `bootstrap
//! runner` already follow: 10 of a credential's 720 h days, ~4 months of the facade's year),
//! when it ends within `--within` (an operator's margin, e.g. before a holiday), or with
//! `--force`. A certificate that already expired is due too; the caller still renews it,
//! since nothing else would.

use std::time::Duration;

use time::OffsetDateTime;

use tenantci_core::pki::inspect::rfc3339;

/// The operator's wishes on top of the third-of-life rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    /// Also due when it ends within this long.
    pub within: Option<Duration>,
    /// Due whatever its dates.
    pub force: bool,
}

/// Whether a certificate is due, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Not yet; it is valid until then.
    Keep {
        /// Its end.
        until: OffsetDateTime,
    },
    /// Due now.
    Renew {
        /// Which rule made it due, with its end, for the report.
        why: String,
    },
}

/// Whether a certificate valid from `not_before` to `not_after` is due at `now`.
pub fn due(
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    now: OffsetDateTime,
    policy: Policy,
) -> Due {
    let until = rfc3339(not_after);
    if policy.force {
        return Due::Renew {
            why: format!("--force (it is valid until {until})"),
        };
    }
    if now >= not_after {
        return Due::Renew {
            why: format!("it expired at {until}"),
        };
    }
    let life = (not_after - not_before).as_seconds_f64();
    let left = (not_after - now).as_seconds_f64();
    if life <= 0.0 || left <= life / 3.0 {
        return Due::Renew {
            why: format!("it expires at {until} (a third or less of its life left)"),
        };
    }
    if let Some(within) = policy.within
        && left <= within.as_secs_f64()
    {
        return Due::Renew {
            why: format!(
                "it expires at {until}, within --within {}",
                tenantci_core::duration::format(within)
            ),
        };
    }
    Due::Keep { until: not_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: time::Duration = time::Duration::DAY;

    fn at(days: i32) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + DAY * days
    }

    #[test]
    fn due_once_two_thirds_of_the_life_passed_and_not_before() {
        let p = Policy::default();
        // 30 days of life: kept on day 19, due from day 20 (10 days left).
        assert_eq!(due(at(0), at(30), at(19), p), Due::Keep { until: at(30) });
        assert!(
            matches!(due(at(0), at(30), at(20), p), Due::Renew { why } if why.contains("a third"))
        );
        assert!(
            matches!(due(at(0), at(30), at(31), p), Due::Renew { why } if why.contains("expired"))
        );
    }

    #[test]
    fn within_and_force_make_it_due_earlier() {
        let within = Policy {
            within: Some(Duration::from_secs(86400 * 15)),
            force: false,
        };
        assert!(
            matches!(due(at(0), at(30), at(15), within), Due::Renew { why } if why.contains("--within 360h"))
        );
        assert_eq!(
            due(at(0), at(30), at(14), within),
            Due::Keep { until: at(30) }
        );
        let force = Policy {
            within: None,
            force: true,
        };
        assert!(
            matches!(due(at(0), at(365), at(1), force), Due::Renew { why } if why.contains("--force"))
        );
    }

    #[test]
    fn a_certificate_without_a_life_is_due() {
        assert!(matches!(
            due(at(3), at(3), at(1), Policy::default()),
            Due::Renew { .. }
        ));
    }
}
