//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `512M`, `1e3`), as the apiserver
//! reads them, in milli-units so CPU and memory share one exact integer representation.
//! Written by hand: k8s-openapi keeps `Quantity` as an opaque string.

/// A quantity in thousandths of its unit (millicores for CPU, millibytes for memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Milli(pub i128);

impl Milli {
    /// `units` whole units (cores, bytes) as milli-units.
    pub fn from_units(units: i128) -> Self {
        Milli(units * 1000)
    }
    /// Whole units, rounded up (a pod asking 1.5 bytes needs 2).
    pub fn ceil_units(self) -> i128 {
        (self.0 + 999).div_euclid(1000)
    }
    /// `self - other`, zero when `other` is larger.
    pub fn saturating_sub(self, other: Milli) -> Milli {
        Milli((self.0 - other.0).max(0))
    }
}

impl std::ops::Add for Milli {
    type Output = Milli;
    fn add(self, o: Milli) -> Milli {
        Milli(self.0 + o.0)
    }
}

impl std::ops::AddAssign for Milli {
    fn add_assign(&mut self, o: Milli) {
        self.0 += o.0;
    }
}

impl std::iter::Sum for Milli {
    fn sum<I: Iterator<Item = Milli>>(iter: I) -> Milli {
        iter.fold(Milli(0), |a, b| a + b)
    }
}

/// Parses a quantity string; `None` when it is not one.
pub fn parse(input: &str) -> Option<Milli> {
    let s = input.trim();
    if s.is_empty() {
        return None;
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (sign, digits) = match number.as_bytes()[0] {
        b'-' => (-1i128, &number[1..]),
        b'+' => (1, &number[1..]),
        _ => (1, number),
    };
    if digits.contains(['+', '-']) || digits.is_empty() {
        return None;
    }
    // (multiplier numerator, power of ten) applied to the value in milli-units.
    let (mul, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        other if other.starts_with(['e', 'E']) => (1, other[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    // value = int.frac * mul * 10^exp10 * 1000 (milli)
    let mantissa: i128 = format!("{int_part}{frac_part}").parse().ok()?;
    // Checked: the exponent is the input's (`1e2147483647`), and zero times any power is zero
    // without raising ten to it.
    let exp = i64::from(exp10) + 3 - i64::try_from(frac_part.len()).ok()?;
    let mut value = mantissa.checked_mul(mul)?;
    if value != 0 && exp > 0 {
        value = value.checked_mul(10i128.checked_pow(u32::try_from(exp).ok()?)?)?;
    } else if value != 0 && exp < 0 {
        // Round up, as the apiserver does for sub-milli precision; a divisor past i128 leaves
        // less than one milli-unit, which rounds up to one.
        value = match u32::try_from(-exp).ok().and_then(|e| 10i128.checked_pow(e)) {
            Some(div) => value / div + i128::from(value % div != 0),
            None => 1,
        };
    }
    Some(Milli(sign * value))
}

/// Parses a resource request or limit as it appears in a pod spec or a gitlab-runner config
/// (`cpu_request = "500m"`): a [`parse`]able quantity, not negative (the apiserver refuses
/// negative requests and limits), and without surrounding whitespace (gitlab-runner hands the
/// string to `resource.ParseQuantity`, which, unlike the apiserver's JSON decoding, does not
/// trim). The one grammar for every quantity a user passes to tenantci.
pub fn parse_resource(input: &str) -> Option<Milli> {
    if input.trim() != input {
        return None;
    }
    parse(input).filter(|m| m.0 >= 0)
}

/// Formats CPU millicores the way people write them (`500m`, `2`).
pub fn format_cpu(m: Milli) -> String {
    if m.0 % 1000 == 0 {
        format!("{}", m.0 / 1000)
    } else {
        format!("{}m", m.0)
    }
}

/// Formats bytes (in milli-units) as Mi/Gi where exact, else bytes.
pub fn format_memory(m: Milli) -> String {
    let bytes = m.ceil_units();
    if bytes % (1 << 30) == 0 && bytes != 0 {
        format!("{}Gi", bytes >> 30)
    } else if bytes % (1 << 20) == 0 && bytes != 0 {
        format!("{}Mi", bytes >> 20)
    } else {
        format!("{bytes}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_memory() {
        assert_eq!(parse("500m"), Some(Milli(500)));
        assert_eq!(parse("2"), Some(Milli(2000)));
        assert_eq!(parse("1.5"), Some(Milli(1500)));
        assert_eq!(parse("0.1"), Some(Milli(100)));
        assert_eq!(parse("2Gi"), Some(Milli::from_units(2 << 30)));
        assert_eq!(parse("512Mi"), Some(Milli::from_units(512 << 20)));
        assert_eq!(parse("1.5Gi"), Some(Milli::from_units(3 << 29)));
        assert_eq!(parse("1G"), Some(Milli::from_units(1_000_000_000)));
        assert_eq!(parse("128k"), Some(Milli::from_units(128_000)));
        assert_eq!(parse("1e3"), Some(Milli::from_units(1000)));
        assert_eq!(parse("1E3"), Some(Milli::from_units(1000)));
    }

    /// Exponents and mantissas at the edge of their types: refused or rounded, never wrapped
    /// (in a debug build the exponent's arithmetic panicked), and a zero with a huge exponent
    /// answers at once.
    #[test]
    fn edge_exponents_and_mantissas_are_refused_or_rounded_never_wrapped() {
        assert_eq!(parse(&format!("1e{}", i32::MAX)), None);
        assert_eq!(parse(&format!("1.5e{}", i32::MAX)), None);
        assert_eq!(parse(&format!("0e{}", i32::MAX)), Some(Milli(0)));
        assert_eq!(parse(&format!("1e{}", i32::MIN)), Some(Milli(1)));
        assert_eq!(parse(&format!("-1e{}", i32::MIN)), Some(Milli(-1)));
        assert_eq!(parse("1e2147483648"), None, "past i32");
        assert_eq!(parse(&i128::MAX.to_string()), None);
        assert_eq!(parse(&format!("{}Ei", u64::MAX)), None);
        assert_eq!(
            parse("1e-4"),
            Some(Milli(1)),
            "a tenth of a milli rounds up"
        );
    }

    #[test]
    fn refuses_non_quantities() {
        for bad in ["", "abc", "1x", "1.2.3", "Gi", "--1", "1 Gi"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn resources_are_quantities_that_are_not_negative_nor_padded() {
        for ok in ["1e3", "500m", "2Gi", "0", "+1", "1.5"] {
            assert_eq!(parse_resource(ok), parse(ok), "{ok:?}");
            assert!(parse_resource(ok).is_some(), "{ok:?}");
        }
        for bad in ["-1", "-500m", " 1", "1 ", "1.5.2", "Gi", ""] {
            assert_eq!(parse_resource(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formats_back() {
        assert_eq!(format_cpu(Milli(500)), "500m");
        assert_eq!(format_cpu(Milli(2000)), "2");
        assert_eq!(format_memory(parse("2Gi").unwrap()), "2Gi");
        assert_eq!(format_memory(parse("1536Mi").unwrap()), "1536Mi");
    }
}
