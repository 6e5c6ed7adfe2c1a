//! Expected values worked out by hand from Kubernetes' documented behaviour (and the cases
//! apimachinery's own tests pin down), never from another parser.

use super::*;
use serde_json::json;

fn nanos(s: &str) -> i128 {
    Quantity::parse(s)
        .unwrap_or_else(|| panic!("{s:?} is a quantity"))
        .nanos
}

fn milli(s: &str) -> i128 {
    Quantity::parse(s).unwrap().milli_value()
}

fn value(s: &str) -> i128 {
    Quantity::parse(s).unwrap().value()
}

const G: i128 = 1_000_000_000;

#[test]
fn every_suffix_scales_as_documented() {
    let decimal = [
        ("5n", 5),
        ("4u", 4_000),
        ("3m", 3_000_000),
        ("9", 9 * G),
        ("8k", 8_000 * G),
        ("7M", 7_000_000 * G),
        ("6G", 6 * G * G),
        ("5T", 5_000 * G * G),
        ("2P", 2_000_000 * G * G),
        ("1E", G * G * G),
    ];
    for (input, expected) in decimal {
        assert_eq!(nanos(input), expected, "{input}");
    }
    let binary = [
        ("1Ki", 1 << 10),
        ("7Mi", 7 << 20),
        ("6Gi", 6 << 30),
        ("5Ti", 5 << 40),
        ("4Pi", 4 << 50),
        ("3Ei", 3 << 60),
    ];
    for (input, expected) in binary {
        assert_eq!(value(input), expected, "{input}");
        assert_eq!(nanos(input), expected * G, "{input}");
    }
    let exponents = [
        ("1e3", 1_000 * G),
        ("1E6", 1_000_000 * G),
        ("1E-3", 1_000_000),
        ("1.3E+6", 1_300_000 * G),
        ("0.5e-2", 5_000_000),
        ("5e0", 5 * G),
        ("1e0003", 1_000 * G),
    ];
    for (input, expected) in exponents {
        assert_eq!(nanos(input), expected, "{input}");
    }
    assert_eq!(milli("500m"), 500);
    assert_eq!(milli("2"), 2_000);
    assert_eq!(milli("1.5"), 1_500);
    assert_eq!(milli("0.0005k"), 500);
    assert_eq!(value("+1"), 1);
    assert_eq!(nanos("-1.025Ti"), -(1_025 * (1 << 40) * G / 1_000));
}

/// The apiserver keeps a quantity to the nano-unit, rounding a finer fraction up; the
/// scheduler's MilliValue and Value round what is left up again.
#[test]
fn fractions_round_up_never_down() {
    assert_eq!(nanos("3.001n"), 4);
    assert_eq!(nanos("1.1E-9"), 2);
    assert_eq!(nanos("0.0000000001"), 1);
    assert_eq!(nanos("0.00000012345"), 124);
    assert_eq!(nanos("0.000000000001Ki"), 2, "1.024n");
    assert_eq!(nanos(&format!("0.{}1", "0".repeat(100))), 1);
    assert_eq!(nanos(&format!("0.000000001{}1", "0".repeat(60))), 2);
    assert_eq!(milli("0.0001"), 1, "a tenth of a millicore is one");
    assert_eq!(milli("1n"), 1);
    assert_eq!(milli("1.0001"), 1_001);
    assert_eq!(milli("1m"), 1);
    assert_eq!(milli("0"), 0);
    assert_eq!(value("0.5"), 1, "half a byte is one");
    assert_eq!(value("100.035Ki"), 102_436, "102435.84 bytes");
    assert_eq!(value("0.5Mi"), 1 << 19);
    assert_eq!(value("1.5Gi"), 3 << 29);
    assert_eq!(value("0.05Gi"), 53_687_092, "53687091.2 bytes");
    assert_eq!(value("1"), 1);
    assert_eq!(milli("-0.0001"), -1, "away from zero");
}

/// What Kubernetes' parser accepts beyond its documented grammar.
#[test]
fn the_leniencies_of_kubernetes_parser() {
    for zero in [
        ".", "-", "+", "-.", "Gi", "k", "m", "e3", "0Ki", "-0", "0e99999",
    ] {
        assert_eq!(Quantity::parse(zero), Some(Quantity::ZERO), "{zero:?}");
    }
    assert_eq!(nanos("1."), G);
    assert_eq!(nanos("1.G"), G * G);
    assert_eq!(nanos(".5"), G / 2);
    assert_eq!(milli(".001"), 1);
    // Go converts the 64-bit exponent to int32, which wraps: 2^32 is 0 and 2^32-1 is -1.
    assert_eq!(nanos("1e4294967296"), G);
    assert_eq!(nanos("1e4294967295"), G / 10);
    assert_eq!(nanos("1e-2147483648"), 1);
}

#[test]
fn what_kubernetes_refuses() {
    let refused = [
        "",
        " 1",
        "1 ",
        "1 Gi",
        "1.1.M",
        "1.5.5",
        "1+1.0M",
        "--1",
        "+-1",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        "1K",
        "1Kb",
        "1KiB",
        "1KI",
        "1gi",
        "1g",
        "1iG",
        "1e",
        "1e+",
        "1ee3",
        "1e3.5",
        "1m5",
        "0x10",
        "1_000",
        "1,5",
        "\u{661}",
        "1e9223372036854775808",
    ];
    for input in refused {
        assert_eq!(Quantity::parse(input), None, "{input:?}");
    }
}

/// Binary-SI values cap at 2^63-1 units as Kubernetes caps them; decimal ones do not, and
/// what exceeds this representation saturates, never wraps.
#[test]
fn caps_and_saturation() {
    let max = i128::from(i64::MAX);
    assert_eq!(value("7Ei"), 7 << 60);
    assert_eq!(value("8Ei"), max);
    assert_eq!(value("9Ei"), max);
    assert_eq!(value("9223372036854775807Ki"), max);
    assert_eq!(value("12E"), 12 * G * G);
    assert_eq!(nanos("1e40"), SATURATED);
    assert_eq!(nanos(&format!("1{}", "0".repeat(50))), SATURATED);
    assert_eq!(nanos("-1e40"), -SATURATED);
    let huge = Quantity::parse("1e40").unwrap();
    assert_eq!((huge + huge).nanos, SATURATED);
    assert_eq!(MilliCpu(i128::MAX) + MilliCpu(1), MilliCpu(i128::MAX));
    assert_eq!(Bytes(i128::MIN) - Bytes(1), Bytes(i128::MIN));
}

/// The JSON decoder trims a string and takes a bare number; null is zero.
#[test]
fn from_json_as_the_apiserver_decodes() {
    let read = |v: Value| Quantity::from_json(&v);
    assert_eq!(read(json!(" 1Gi\n")), Quantity::parse("1Gi"));
    assert_eq!(read(json!(2)), Quantity::parse("2"));
    assert_eq!(read(json!(0.5)), Quantity::parse("0.5"));
    assert_eq!(read(json!(null)), Some(Quantity::ZERO));
    assert_eq!(read(json!(" 1 Gi")), None);
    assert_eq!(read(json!(true)), None);
    assert_eq!(read(json!({"cpu": "1"})), None);
}

#[test]
fn millicores_print_as_kubernetes_writes_them() {
    assert_eq!(MilliCpu(1_900).to_quantity_string(), "1900m");
    assert_eq!(MilliCpu(2_000).to_quantity_string(), "2");
    assert_eq!(MilliCpu(0).to_quantity_string(), "0");
    let sum: MilliCpu = [MilliCpu(100), MilliCpu(250)].into_iter().sum();
    assert_eq!(sum, MilliCpu(350));
}
