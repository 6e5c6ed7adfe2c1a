//! The protojson field mappings the `proto` messages need for Connect's `application/json`
//! codec, as serde `with` modules: int64 as a decimal string (numbers accepted), enums by
//! value name (numbers accepted), `google.protobuf.Timestamp` as RFC 3339 in UTC, bytes as
//! standard base64 (URL-safe accepted), `google.protobuf.Struct` as a plain JSON object.
//! JSON `null` reads as the field's default, as protojson specifies.

use base64::Engine;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Deserialize)]
#[serde(untagged)]
enum Num {
    Int(i64),
    Float(f64),
    Str(String),
}

/// A proto3 `int64`: written as a decimal string; read from a string or a JSON number (a
/// whole float below 9e15 too), `null` as 0.
pub mod int64 {
    use super::*;
    #[allow(unused_imports)]
    use serde::de::Error as _;

    /// Writes the value as a decimal string (`"42"`).
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    /// Reads a decimal string or a number; `null` is 0, a fraction or a non-number an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match Option::<Num>::deserialize(d)? {
            None => Ok(0),
            Some(Num::Int(i)) => Ok(i),
            Some(Num::Float(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            Some(Num::Float(f)) => Err(D::Error::custom(format!("{f} is not an int64"))),
            Some(Num::Str(s)) => s
                .parse()
                .map_err(|_| D::Error::custom(format!("{s:?} is not an int64"))),
        }
    }
}

/// A proto3 `optional int64`: absent stays None; a present value as `int64` maps it.
pub mod opt_int64 {
    use super::*;

    /// Writes `Some` as a decimal string, `None` as `null`.
    pub fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&v.to_string()),
            None => s.serialize_none(),
        }
    }

    /// Reads an absent field or `null` as `None`, anything else as [`int64`] does.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        match Option::<serde_json::Value>::deserialize(d)? {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => int64::deserialize(v).map(Some).map_err(D::Error::custom),
        }
    }
}

/// The protojson names of an enum's values (implemented by each `proto` enum).
pub trait ProtoEnum: Sized + Copy + Into<i32> + TryFrom<i32> {
    /// Each value's protojson name (`"RESULT_SUCCESS"`) and number.
    const NAMES: &'static [(&'static str, i32)];

    /// The name of value `v`; `None` for a number the enum does not define.
    fn proto_name(v: i32) -> Option<&'static str> {
        Self::NAMES.iter().find(|(_, n)| *n == v).map(|(s, _)| *s)
    }

    /// The number of the value named `name`; `None` for an unknown name.
    fn from_proto_name(name: &str) -> Option<i32> {
        Self::NAMES
            .iter()
            .find(|(s, _)| *s == name)
            .map(|(_, n)| *n)
    }
}

/// An enum field (an `i32` on the message) by its value's name; a value without one as its
/// number. `serialize_with = "json::enum_ser::<E, _>"`.
pub fn enum_ser<E: ProtoEnum, S: Serializer>(v: &i32, s: S) -> Result<S::Ok, S::Error> {
    match E::proto_name(*v) {
        Some(name) => s.serialize_str(name),
        None => s.serialize_i32(*v),
    }
}

/// An enum field by name or number; `null` is 0. `deserialize_with = "json::enum_de::<E, _>"`.
pub fn enum_de<'de, E: ProtoEnum, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    match Option::<Num>::deserialize(d)? {
        None => Ok(0),
        Some(Num::Int(i)) => i32::try_from(i).map_err(D::Error::custom),
        Some(Num::Float(f)) => Err(D::Error::custom(format!("{f} is not an enum value"))),
        Some(Num::Str(s)) => E::from_proto_name(&s)
            .ok_or_else(|| D::Error::custom(format!("unknown enum value {s:?}"))),
    }
}

/// An optional `google.protobuf.Timestamp` as an RFC 3339 string; `null` or absent is `None`.
pub mod opt_timestamp {
    use super::*;
    use prost_types::Timestamp;
    #[allow(unused_imports)]
    use serde::de::Error as _;

    /// Writes RFC 3339 in UTC (`2024-05-01T10:00:00Z`, fractional seconds only when present);
    /// an error when the time is out of chrono's range.
    pub fn serialize<S: Serializer>(v: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(ts) => {
                let dt = chrono::DateTime::from_timestamp(ts.seconds, ts.nanos.max(0) as u32)
                    .ok_or_else(|| serde::ser::Error::custom("timestamp out of range"))?;
                s.serialize_str(&dt.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
            }
        }
    }

    /// Reads RFC 3339 with any offset (converted to seconds since the Unix epoch).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let dt = chrono::DateTime::parse_from_rfc3339(&text)
            .map_err(|e| D::Error::custom(format!("{text:?} is not an RFC 3339 time: {e}")))?;
        Ok(Some(Timestamp {
            seconds: dt.timestamp(),
            nanos: dt.timestamp_subsec_nanos() as i32,
        }))
    }
}

/// An optional `bytes` field as base64; `null` or absent is `None`.
pub mod opt_bytes {
    use super::*;
    #[allow(unused_imports)]
    use serde::de::Error as _;

    /// Writes standard base64 with padding.
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
        }
    }

    /// Reads standard or URL-safe base64, padded or not.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let engines = [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ];
        engines
            .iter()
            .find_map(|e| e.decode(&text).ok())
            .map(Some)
            .ok_or_else(|| D::Error::custom("bytes field is not base64"))
    }
}

/// An optional `google.protobuf.Struct` as a plain JSON object; `null` or absent is `None`.
pub mod opt_struct {
    use super::*;
    use prost_types::Struct;
    #[allow(unused_imports)]
    use serde::de::Error as _;

    /// Writes the object [`struct_to_json`] makes.
    pub fn serialize<S: Serializer>(v: &Option<Struct>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(st) => struct_to_json(st).serialize(s),
        }
    }

    /// Reads a JSON object; any other JSON value is an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Struct>, D::Error> {
        match Option::<serde_json::Value>::deserialize(d)? {
            None => Ok(None),
            Some(serde_json::Value::Object(map)) => Ok(Some(struct_from_json(map))),
            Some(_) => Err(D::Error::custom(
                "a google.protobuf.Struct must be a JSON object",
            )),
        }
    }
}

/// `google.protobuf.Struct` as the JSON object it stands for.
pub fn struct_to_json(st: &prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        st.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

/// A JSON object as a `google.protobuf.Struct`.
pub fn struct_from_json(map: serde_json::Map<String, serde_json::Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map
            .into_iter()
            .map(|(k, v)| (k, value_from_json(v)))
            .collect(),
    }
}

fn value_to_json(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(value_to_json).collect())
        }
    }
}

fn value_from_json(v: serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.into_iter().map(value_from_json).collect(),
        }),
        serde_json::Value::Object(m) => Kind::StructValue(struct_from_json(m)),
    };
    prost_types::Value { kind: Some(kind) }
}
