//! Go-style durations (`720h`, `90m`, `1h30m`, `45s`, `1.5h`), as the runbook's
//! `SOCIALWEB_TENANTCREDENTIAL_VALID_FOR` and gitlab-runner's config use them.
//!
//! Written by hand because the crates that parse durations accept other syntaxes
//! (`1 day`, `2w`) that Go refuses, and we must accept exactly what the Go tooling does,
//! minus negatives (a validity or a timeout is never negative).
//!
//! [`format()`] writes a duration back the way an operator would; [`GoDuration`] keeps a config
//! value's own spelling.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a duration string was refused; `Display` is a phrase for an error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input is empty or only whitespace.
    #[error("is empty")]
    Empty,
    /// The input starts with `-`.
    #[error("is negative")]
    Negative,
    #[error("has no unit (write e.g. `720h`, `90m`, `1h30m`, `45s`)")]
    /// A number with no unit after it (`720`, or the `30` of `1h30`); only `0` may stand alone.
    MissingUnit,
    #[error("has an unknown unit `{0}` (use ns, us, ms, s, m or h)")]
    /// A unit other than ns, us (µs), ms, s, m or h; holds the unit as written (`d`, `w`).
    UnknownUnit(String),
    #[error("is not a number followed by a unit (write e.g. `720h`, `90m`, `1h30m`)")]
    /// A unit with no number before it, or a number with two dots (`h`, `1..5h`, `+`).
    Malformed,
    /// The total does not fit a `Duration` (or an integer part does not fit 128 bits).
    #[error("is too large")]
    Overflow,
    #[error("is zero (it must be positive)")]
    /// The value is zero where it must be positive (only [`parse_positive`] returns it).
    ZeroValue,
}

/// Parses a Go duration. `"0"` is zero, as in Go; callers that need a positive value check.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let s = match s.as_bytes()[0] {
        b'-' => return Err(DurationError::Negative),
        b'+' => &s[1..],
        _ => s,
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(DurationError::Malformed);
    }
    let mut total: u128 = 0; // nanoseconds
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(DurationError::Malformed);
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit);
        }
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => return Err(DurationError::UnknownUnit(other.to_string())),
        };
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| DurationError::Overflow)?
        };
        let mut value = int.checked_mul(unit_ns).ok_or(DurationError::Overflow)?;
        // Fractions are exact to the nanosecond, as in Go (digits past that are dropped).
        let mut scale = unit_ns;
        for d in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            value = value
                .checked_add(u128::from(d - b'0') * scale)
                .ok_or(DurationError::Overflow)?;
        }
        total = total.checked_add(value).ok_or(DurationError::Overflow)?;
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// Parses a duration that must be greater than zero.
pub fn parse_positive(input: &str) -> Result<Duration, DurationError> {
    let d = parse(input)?;
    if d.is_zero() {
        return Err(DurationError::ZeroValue);
    }
    Ok(d)
}

/// Formats like Go's `time.Duration.String()`, zero units dropped (`720h0m0s` is `720h`), so a
/// parsed value prints back the way an operator writes it. Exact: `parse(format(d)) == d`
/// (`1.5s`, `1m0.25s`; below a second the largest whole unit, `200ms`, `1500us`, `7ns`).
pub fn format(d: Duration) -> String {
    let mut secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if secs == 0 {
        return match nanos {
            0 => "0s".into(),
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}us", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let h = secs / 3600;
    secs %= 3600;
    let m = secs / 60;
    let s = secs % 60;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        out.push_str(&format!("{s}.{}s", fraction.trim_end_matches('0')));
    } else if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A positive Go-style duration (`"200ms"`, `"1m30s"`), parsed when the config is read and
/// written back as it was spelled, so a re-run of `init` leaves an operator's edit byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoDuration {
    value: Duration,
    text: String,
}

impl GoDuration {
    /// The parsed duration.
    pub fn get(&self) -> Duration {
        self.value
    }

    /// The text as it was written (or [`format()`]'s spelling, for one made from a `Duration`).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Spelled by [`format()`]; for durations the program chooses (defaults, tests), which
/// are positive.
impl From<Duration> for GoDuration {
    fn from(value: Duration) -> Self {
        GoDuration {
            value,
            text: format(value),
        }
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> std::result::Result<Self, DurationError> {
        Ok(GoDuration {
            value: parse_positive(text)?,
            text: text.to_string(),
        })
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// The error names the value; the config reader adds the key.
impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e| serde::de::Error::custom(format!("`{text}` {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_go_durations() {
        let cases: &[(&str, u64)] = &[
            ("720h", 720 * 3600),
            ("90m", 90 * 60),
            ("1h30m", 5400),
            ("45s", 45),
            ("1h0m0s", 3600),
            ("2h45m30s", 2 * 3600 + 45 * 60 + 30),
            ("+5m", 300),
            ("1.5h", 5400),
            (".5h", 1800),
            ("0", 0),
        ];
        for (input, secs) in cases {
            assert_eq!(parse(input).unwrap(), Duration::from_secs(*secs), "{input}");
        }
        assert_eq!(parse("1500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("3us").unwrap(), Duration::from_micros(3));
        assert_eq!(parse("7ns").unwrap(), Duration::from_nanos(7));
    }

    #[test]
    fn refuses_what_go_refuses_and_negatives() {
        let cases: &[(&str, DurationError)] = &[
            ("", DurationError::Empty),
            ("   ", DurationError::Empty),
            ("-1h", DurationError::Negative),
            ("720", DurationError::MissingUnit),
            ("1h30", DurationError::MissingUnit),
            ("5d", DurationError::UnknownUnit("d".into())),
            ("1w", DurationError::UnknownUnit("w".into())),
            ("30 days", DurationError::UnknownUnit(" days".into())),
            ("h", DurationError::Malformed),
            ("1..5h", DurationError::Malformed),
            (".h", DurationError::Malformed),
            ("+", DurationError::Malformed),
            ("99999999999999999999999h", DurationError::Overflow),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).unwrap_err(), *want, "{input:?}");
        }
    }

    /// A fraction that carries the total past 128 bits is an overflow, not a wrap (in a debug
    /// build it panicked).
    #[test]
    fn a_fraction_at_the_edge_of_the_total_is_an_overflow() {
        let hour: u128 = 3_600 * 1_000_000_000;
        let most_hours = u128::MAX / hour;
        assert_eq!(
            parse(&format!("{most_hours}.9h")).unwrap_err(),
            DurationError::Overflow
        );
        assert_eq!(
            parse(&format!("{}ns", u128::MAX)).unwrap_err(),
            DurationError::Overflow
        );
    }

    #[test]
    fn positive_refuses_zero() {
        assert_eq!(parse_positive("0").unwrap_err(), DurationError::ZeroValue);
        assert_eq!(parse_positive("0s").unwrap_err(), DurationError::ZeroValue);
        assert!(parse_positive("1s").is_ok());
    }

    #[test]
    fn formats_back_compactly() {
        assert_eq!(format(Duration::from_secs(720 * 3600)), "720h");
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(45)), "45s");
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_millis(200)), "200ms");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_millis(60_250)), "1m0.25s");
        assert_eq!(format(Duration::from_micros(1500)), "1500us");
    }

    #[test]
    fn formatting_is_exact() {
        for d in [
            Duration::from_nanos(7),
            Duration::from_micros(3),
            Duration::from_millis(250),
            Duration::from_millis(1500),
            Duration::new(3 * 3600 + 1, 1),
            Duration::from_secs(600),
        ] {
            assert_eq!(parse(&format(d)).unwrap(), d, "{}", format(d));
        }
    }
}
