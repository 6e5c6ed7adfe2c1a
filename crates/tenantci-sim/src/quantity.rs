//! Kubernetes resource quantities (`resource.Quantity`: `500m`, `2`, `1.5Gi`, `1e3`), read by
//! the simulator's own code from Kubernetes' documented grammar and behaviour, not with the
//! product's reader (core's `quantity`): a double that measured requests with the product's
//! parser would schedule exactly as the product sized, and hide a sizing bug.
//!
//! As `resource.ParseQuantity`: an optional sign, digits with an optional fraction, then one
//! suffix, case-sensitive: decimal SI `n u m "" k M G T P E`, binary SI `Ki Mi Gi Ti Pi Ei`, or
//! a decimal exponent `e`/`E` with an optional sign. The value is kept exact to the nano-unit; a
//! finer fraction rounds up (away from zero), so a request is never read as nothing. A
//! binary-SI value above 2^63-1 is capped there, as Kubernetes caps it. No whitespace is
//! allowed (the JSON decoder trims it first: [`Quantity::from_json`]).
//!
//! Kubernetes' parser is more lenient than its documented grammar in ways this one follows:
//! the digits may be absent (`.`, `-`, `Gi` and `k` read as zero; apimachinery issue 165), a
//! fraction may be empty (`1.`, `1.G`), and an exponent is cut to 32 bits as Go's `int32()`
//! conversion does.
//!
//! The scheduler's view is kube-scheduler's: CPU as `MilliValue` ([`MilliCpu`]) and memory as
//! `Value` ([`Bytes`]), each rounding a remaining fraction up.

use serde_json::Value;

/// Nano-units in one unit.
const NANO: i128 = 1_000_000_000;
/// Where an amount too large for this representation stops (it fits no node).
const SATURATED: i128 = i128::MAX;
/// Kubernetes' cap for binary-SI quantities, 2^63-1 units, in nano-units.
const BINARY_CAP: i128 = i64::MAX as i128 * NANO;

/// A quantity exact to the nano-unit, as the apiserver holds it once parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    nanos: i128,
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// `resource.ParseQuantity`; `None` where it returns an error.
    pub fn parse(input: &str) -> Option<Quantity> {
        let (negative, rest) = match input.as_bytes().first()? {
            b'-' => (true, &input[1..]),
            b'+' => (false, &input[1..]),
            _ => (false, input),
        };
        let (whole, rest) = split_digits(rest);
        let (fraction, suffix) = match rest.strip_prefix('.') {
            Some(after_point) => split_digits(after_point),
            None => ("", rest),
        };
        let magnitude = Suffix::read(suffix)?.nanos(whole, fraction);
        Some(Quantity {
            nanos: if negative { -magnitude } else { magnitude },
        })
    }

    /// A quantity in a JSON object as the apiserver decodes it (`Quantity.UnmarshalJSON`): a
    /// string with surrounding whitespace trimmed, or a bare JSON number; `null` is zero.
    pub fn from_json(value: &Value) -> Option<Quantity> {
        match value {
            Value::String(s) => Quantity::parse(s.trim()),
            Value::Number(n) => Quantity::parse(&n.to_string()),
            Value::Null => Some(Quantity::ZERO),
            _ => None,
        }
    }

    /// `MilliValue`: thousandths of the unit, a finer fraction rounded up (`1n` is `1m`).
    pub fn milli_value(self) -> i128 {
        div_away_from_zero(self.nanos, NANO / 1000)
    }

    /// `Value`: whole units, a fraction rounded up (`0.5` bytes is 1).
    pub fn value(self) -> i128 {
        div_away_from_zero(self.nanos, NANO)
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    fn add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }
}

impl std::ops::AddAssign for Quantity {
    fn add_assign(&mut self, other: Quantity) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

/// The leading ASCII digits of `s`, and what follows them.
fn split_digits(s: &str) -> (&str, &str) {
    s.split_at(s.bytes().take_while(u8::is_ascii_digit).count())
}

/// `n / d` with a remainder rounding the magnitude up (Go's `ScaledValue`).
fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    match n % d {
        0 => q,
        _ if n > 0 => q + 1,
        _ => q - 1,
    }
}

/// What a suffix multiplies the number by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suffix {
    /// 10^n (decimal SI, or an `e`/`E` exponent).
    Decimal(i32),
    /// 2^n (binary SI).
    Binary(u32),
}

impl Suffix {
    fn read(suffix: &str) -> Option<Suffix> {
        let decimal = match suffix {
            "n" => -9,
            "u" => -6,
            "m" => -3,
            "" => 0,
            "k" => 3,
            "M" => 6,
            "G" => 9,
            "T" => 12,
            "P" => 15,
            "E" => 18,
            "Ki" => return Some(Suffix::Binary(10)),
            "Mi" => return Some(Suffix::Binary(20)),
            "Gi" => return Some(Suffix::Binary(30)),
            "Ti" => return Some(Suffix::Binary(40)),
            "Pi" => return Some(Suffix::Binary(50)),
            "Ei" => return Some(Suffix::Binary(60)),
            _ => return Suffix::exponent(suffix),
        };
        Some(Suffix::Decimal(decimal))
    }

    /// `e`/`E`, an optional sign and at least one digit, read as a 64-bit integer (Go's
    /// `strconv.ParseInt`) and then cut to 32 bits (Go's `int32()`; `1e4294967296` is 1).
    fn exponent(suffix: &str) -> Option<Suffix> {
        let rest = suffix.strip_prefix(['e', 'E'])?;
        let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let exponent: i64 = rest.parse().ok()?;
        Some(Suffix::Decimal(exponent as i32))
    }

    /// `whole.fraction` times this suffix, in nano-units, rounded up and capped.
    fn nanos(self, whole: &str, fraction: &str) -> i128 {
        let digits = format!("{whole}{fraction}").into_bytes();
        let point = i64::try_from(fraction.len()).unwrap_or(i64::MAX);
        match self {
            Suffix::Decimal(exponent) => {
                scaled_up(&digits, (i64::from(exponent) + 9).saturating_sub(point))
            }
            Suffix::Binary(power) => scaled_up(
                &times_power_of_two(&digits, power),
                9i64.saturating_sub(point),
            )
            .min(BINARY_CAP),
        }
    }
}

/// `digits` (ASCII, most significant first) times 2^power, exactly, as decimal digits.
fn times_power_of_two(digits: &[u8], power: u32) -> Vec<u8> {
    let factor = 1u128 << power;
    let mut product = Vec::with_capacity(digits.len() + 20);
    let mut carry = 0u128;
    for &d in digits.iter().rev() {
        let x = u128::from(d - b'0') * factor + carry;
        product.push(b'0' + (x % 10) as u8);
        carry = x / 10;
    }
    while carry > 0 {
        product.push(b'0' + (carry % 10) as u8);
        carry /= 10;
    }
    product.reverse();
    product
}

/// `digits` times 10^shift as an integer, a dropped non-zero fraction rounding up, saturating.
fn scaled_up(digits: &[u8], shift: i64) -> i128 {
    let significant = match digits.iter().position(|&d| d != b'0') {
        Some(first) => &digits[first..],
        None => return 0,
    };
    if shift >= 0 {
        let zeros = u32::try_from(shift).unwrap_or(u32::MAX);
        return integer(significant)
            .and_then(|v| v.checked_mul(10i128.checked_pow(zeros)?))
            .unwrap_or(SATURATED);
    }
    let dropped = usize::try_from(shift.unsigned_abs()).unwrap_or(usize::MAX);
    let (kept, fraction) = significant.split_at(significant.len().saturating_sub(dropped));
    let round_up = fraction.iter().any(|&d| d != b'0');
    integer(kept).map_or(SATURATED, |v| v.saturating_add(i128::from(round_up)))
}

/// ASCII digits as an integer; `None` past `i128`.
fn integer(digits: &[u8]) -> Option<i128> {
    digits.iter().try_fold(0i128, |v, &d| {
        v.checked_mul(10)?.checked_add(i128::from(d - b'0'))
    })
}

/// Units kube-scheduler counts in (`framework.Resource`): sums saturate instead of wrapping.
macro_rules! scheduler_unit {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
        pub struct $name(pub i128);

        impl std::ops::Add for $name {
            type Output = $name;
            fn add(self, other: $name) -> $name {
                $name(self.0.saturating_add(other.0))
            }
        }

        impl std::ops::Sub for $name {
            type Output = $name;
            fn sub(self, other: $name) -> $name {
                $name(self.0.saturating_sub(other.0))
            }
        }

        impl std::ops::AddAssign for $name {
            fn add_assign(&mut self, other: $name) {
                *self = *self + other;
            }
        }

        impl std::iter::Sum for $name {
            fn sum<I: Iterator<Item = $name>>(iter: I) -> $name {
                iter.fold($name(0), |a, b| a + b)
            }
        }
    };
}

scheduler_unit!(
    /// CPU in thousandths of a core (`MilliValue`).
    MilliCpu
);
scheduler_unit!(
    /// Memory in bytes (`Value`).
    Bytes
);

impl MilliCpu {
    /// The canonical form Kubernetes writes: whole cores as `2`, otherwise `1900m`.
    pub fn to_quantity_string(self) -> String {
        if self.0 % 1000 == 0 {
            format!("{}", self.0 / 1000)
        } else {
            format!("{}m", self.0)
        }
    }
}

#[cfg(test)]
mod tests;
