//! The Kubernetes protobuf envelope for access reviews, decoded by hand (no protoc).
//!
//! Wire format: the magic `k8s\0`, then `runtime.Unknown{typeMeta=1 {apiVersion=1, kind=2},
//! raw=2, contentEncoding=3, contentType=4}` where `raw` is the object:
//! `(Self)SubjectAccessReview{metadata=1, spec=2, status=3}`; SelfSubjectAccessReviewSpec
//! `{resourceAttributes=1, nonResourceAttributes=2}`; SubjectAccessReviewSpec
//! `{resourceAttributes=1, nonResourceAttributes=2, user=3, groups=4, extra=5, uid=6}`;
//! ResourceAttributes `{namespace=1, verb=2, group=3, version=4, resource=5, subresource=6,
//! name=7}`; NonResourceAttributes `{path=1, verb=2}`; SubjectAccessReviewStatus
//! `{allowed=1, reason=2, evaluationError=3, denied=4}` (k8s.io/api authorization/v1).
//! ObjectMeta is skipped on decode and written empty on encode; unknown fields are skipped.

use serde_json::{Map, Value, json};

/// The 4 bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";
/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or("truncated varint")?;
            self.buf = rest;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".to_string())
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err(format!("field of {n} bytes overruns the message"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field: its number and value (`Varint` or `Bytes`; fixed-width values are
    /// skipped and returned as `Skipped`).
    fn field(&mut self) -> Result<Option<(u64, Field<'a>)>, String> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return Err("field number 0".to_string());
        }
        let value = match (key & 7) as u8 {
            VARINT => Field::Varint(self.varint()?),
            FIXED64 => {
                self.bytes(8)?;
                Field::Skipped
            }
            LEN => {
                let n = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                Field::Bytes(self.bytes(n)?)
            }
            FIXED32 => {
                self.bytes(4)?;
                Field::Skipped
            }
            other => return Err(format!("unsupported wire type {other} (field {number})")),
        };
        Ok(Some((number, value)))
    }
}

pub(crate) enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Skipped,
}

/// Calls `f(number, value)` for every field of `msg`.
pub(crate) fn fields<'a>(
    msg: &'a [u8],
    mut f: impl FnMut(u64, Field<'a>) -> Result<(), String>,
) -> Result<(), String> {
    let mut r = Reader { buf: msg };
    while let Some((n, v)) = r.field()? {
        f(n, v)?;
    }
    Ok(())
}

pub(crate) fn string(v: Field<'_>, what: &str) -> Result<String, String> {
    match v {
        Field::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| format!("{what}: not UTF-8")),
        _ => Err(format!("{what}: expected a length-delimited string")),
    }
}

pub(crate) fn message<'a>(v: Field<'a>, what: &str) -> Result<&'a [u8], String> {
    match v {
        Field::Bytes(b) => Ok(b),
        _ => Err(format!("{what}: expected a message")),
    }
}

/// Inserts the non-empty strings of a message whose string fields are numbered `names[i] = i+1`
/// (JSON omits empty strings, as the Go types' `omitempty` does).
fn string_message(msg: &[u8], names: &[&str], what: &str) -> Result<Value, String> {
    let mut out = Map::new();
    fields(msg, |n, v| {
        if let Some(name) = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| names.get(i))
        {
            let s = string(v, &format!("{what}.{name}"))?;
            if !s.is_empty() {
                out.insert((*name).to_string(), Value::String(s));
            }
        }
        Ok(())
    })?;
    Ok(Value::Object(out))
}

const RESOURCE_ATTRIBUTES: [&str; 7] = [
    "namespace",
    "verb",
    "group",
    "version",
    "resource",
    "subresource",
    "name",
];
const NON_RESOURCE_ATTRIBUTES: [&str; 2] = ["path", "verb"];

fn decode_spec(msg: &[u8], subject: bool) -> Result<Value, String> {
    let mut spec = Map::new();
    let mut groups = Vec::new();
    let mut extra: Map<String, Value> = Map::new();
    fields(msg, |n, v| {
        match (n, subject) {
            (1, _) => {
                let m = message(v, "spec.resourceAttributes")?;
                spec.insert(
                    "resourceAttributes".into(),
                    string_message(m, &RESOURCE_ATTRIBUTES, "spec.resourceAttributes")?,
                );
            }
            (2, _) => {
                let m = message(v, "spec.nonResourceAttributes")?;
                spec.insert(
                    "nonResourceAttributes".into(),
                    string_message(m, &NON_RESOURCE_ATTRIBUTES, "spec.nonResourceAttributes")?,
                );
            }
            (3, true) => {
                let s = string(v, "spec.user")?;
                if !s.is_empty() {
                    spec.insert("user".into(), Value::String(s));
                }
            }
            (4, true) => groups.push(Value::String(string(v, "spec.groups")?)),
            (5, true) => {
                let (key, values) = decode_extra_entry(message(v, "spec.extra")?)?;
                extra.insert(key, Value::Array(values));
            }
            (6, true) => {
                let s = string(v, "spec.uid")?;
                if !s.is_empty() {
                    spec.insert("uid".into(), Value::String(s));
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if !groups.is_empty() {
        spec.insert("groups".into(), Value::Array(groups));
    }
    if !extra.is_empty() {
        spec.insert("extra".into(), Value::Object(extra));
    }
    Ok(Value::Object(spec))
}

/// A `map<string, ExtraValue{items=1}>` entry `{key=1, value=2}`.
fn decode_extra_entry(msg: &[u8]) -> Result<(String, Vec<Value>), String> {
    let mut key = String::new();
    let mut items = Vec::new();
    fields(msg, |n, v| {
        match n {
            1 => key = string(v, "spec.extra key")?,
            2 => fields(message(v, "spec.extra value")?, |n, v| {
                if n == 1 {
                    items.push(Value::String(string(v, "spec.extra item")?));
                }
                Ok(())
            })?,
            _ => {}
        }
        Ok(())
    })?;
    Ok((key, items))
}

fn decode_status(msg: &[u8]) -> Result<Value, String> {
    let mut status = Map::new();
    status.insert("allowed".into(), Value::Bool(false));
    fields(msg, |n, v| {
        match (n, v) {
            (1, Field::Varint(b)) => {
                status.insert("allowed".into(), Value::Bool(b != 0));
            }
            (4, Field::Varint(0)) => {}
            (4, Field::Varint(_)) => {
                status.insert("denied".into(), Value::Bool(true));
            }
            (2, v) => {
                let s = string(v, "status.reason")?;
                if !s.is_empty() {
                    status.insert("reason".into(), Value::String(s));
                }
            }
            (3, v) => {
                let s = string(v, "status.evaluationError")?;
                if !s.is_empty() {
                    status.insert("evaluationError".into(), Value::String(s));
                }
            }
            (1 | 4, _) => return Err("status: expected a bool".to_string()),
            _ => {}
        }
        Ok(())
    })?;
    Ok(Value::Object(status))
}

/// Decodes a protobuf (Self|Local)SubjectAccessReview body into the JSON object the same review
/// would have been sent as (`kind`, `apiVersion`, `metadata: {}`, `spec`, `status` if present).
pub fn decode_access_review(body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or("body does not start with the Kubernetes protobuf magic k8s\\0")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    let mut content_encoding = String::new();
    fields(unknown, |n, v| {
        match n {
            1 => fields(message(v, "typeMeta")?, |n, v| {
                match n {
                    1 => api_version = string(v, "typeMeta.apiVersion")?,
                    2 => kind = string(v, "typeMeta.kind")?,
                    _ => {}
                }
                Ok(())
            })?,
            2 => raw = Some(message(v, "raw")?),
            3 => content_encoding = string(v, "contentEncoding")?,
            _ => {}
        }
        Ok(())
    })?;
    if !content_encoding.is_empty() {
        return Err(format!("unsupported contentEncoding {content_encoding:?}"));
    }
    if api_version != "authorization.k8s.io/v1" {
        return Err(format!(
            "unsupported apiVersion {api_version:?} (want authorization.k8s.io/v1)"
        ));
    }
    let subject = match kind.as_str() {
        "SelfSubjectAccessReview" => false,
        "SubjectAccessReview" | "LocalSubjectAccessReview" => true,
        other => return Err(format!("unsupported kind {other:?}")),
    };
    let raw = raw.ok_or("envelope has no raw object")?;
    let mut object = Map::new();
    object.insert("kind".into(), Value::String(kind.clone()));
    object.insert("apiVersion".into(), Value::String(api_version.clone()));
    object.insert("metadata".into(), json!({}));
    object.insert("spec".into(), json!({}));
    fields(raw, |n, v| {
        match n {
            2 => {
                object.insert("spec".into(), decode_spec(message(v, "spec")?, subject)?);
            }
            3 => {
                object.insert("status".into(), decode_status(message(v, "status")?)?);
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(Value::Object(object))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    put_varint(out, (number << 3) | u64::from(LEN));
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_bool(out: &mut Vec<u8>, number: u64, b: bool) {
    put_varint(out, number << 3);
    out.push(u8::from(b));
}

fn text<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Writes every string field, empty or not, as Kubernetes' generated marshallers do.
fn encode_strings(obj: &Value, names: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        put_bytes(&mut out, i as u64 + 1, text(obj, name).as_bytes());
    }
    out
}

/// An empty ObjectMeta as Go writes it: the six strings, generation 0, a zero creationTimestamp.
fn empty_object_meta() -> Vec<u8> {
    let mut out = Vec::new();
    for n in 1..=6 {
        put_bytes(&mut out, n, b"");
    }
    put_varint(&mut out, 7 << 3);
    out.push(0);
    put_bytes(&mut out, 8, b"");
    out
}

/// Encodes a review object (the JSON shape [`decode_access_review`] returns) in the protobuf
/// envelope, byte for byte as kubectl 1.32 / kube-apiserver write it. Useful for tests and for
/// answering a client that asked for protobuf.
pub fn encode_access_review(object: &Value) -> Result<Vec<u8>, String> {
    let kind = text(object, "kind");
    let subject = match kind {
        "SelfSubjectAccessReview" => false,
        "SubjectAccessReview" | "LocalSubjectAccessReview" => true,
        other => return Err(format!("unsupported kind {other:?}")),
    };
    let api_version = match text(object, "apiVersion") {
        "" => "authorization.k8s.io/v1",
        v => v,
    };
    let null = Value::Null;
    let spec = encode_review_spec(object.get("spec").unwrap_or(&null), subject);
    let status = encode_review_status(object.get("status").unwrap_or(&null));

    let mut raw = Vec::new();
    put_bytes(&mut raw, 1, &empty_object_meta());
    put_bytes(&mut raw, 2, &spec);
    put_bytes(&mut raw, 3, &status);

    let mut type_meta = Vec::new();
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());

    let mut out = MAGIC.to_vec();
    put_bytes(&mut out, 1, &type_meta);
    put_bytes(&mut out, 2, &raw);
    put_bytes(&mut out, 3, b"");
    put_bytes(&mut out, 4, b"");
    Ok(out)
}

/// A review's `spec` message: the attributes, and for a `subject` review (not a self review)
/// the user, groups, extra and uid.
fn encode_review_spec(spec_json: &Value, subject: bool) -> Vec<u8> {
    let mut spec = Vec::new();
    if let Some(r) = spec_json
        .get("resourceAttributes")
        .filter(|v| v.is_object())
    {
        put_bytes(&mut spec, 1, &encode_strings(r, &RESOURCE_ATTRIBUTES));
    }
    if let Some(n) = spec_json
        .get("nonResourceAttributes")
        .filter(|v| v.is_object())
    {
        put_bytes(&mut spec, 2, &encode_strings(n, &NON_RESOURCE_ATTRIBUTES));
    }
    if subject {
        put_bytes(&mut spec, 3, text(spec_json, "user").as_bytes());
        for g in spec_json
            .get("groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            put_bytes(&mut spec, 4, g.as_str().unwrap_or("").as_bytes());
        }
        if let Some(extra) = spec_json.get("extra").and_then(Value::as_object) {
            for (key, values) in extra {
                let mut items = Vec::new();
                for v in values.as_array().into_iter().flatten() {
                    put_bytes(&mut items, 1, v.as_str().unwrap_or("").as_bytes());
                }
                let mut entry = Vec::new();
                put_bytes(&mut entry, 1, key.as_bytes());
                put_bytes(&mut entry, 2, &items);
                put_bytes(&mut spec, 5, &entry);
            }
        }
        put_bytes(&mut spec, 6, text(spec_json, "uid").as_bytes());
    }
    spec
}

/// A review's `status` message: allowed, reason, evaluationError, denied.
fn encode_review_status(status_json: &Value) -> Vec<u8> {
    let flag = |name: &str| {
        status_json
            .get(name)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let mut status = Vec::new();
    put_bool(&mut status, 1, flag("allowed"));
    put_bytes(&mut status, 2, text(status_json, "reason").as_bytes());
    put_bytes(
        &mut status,
        3,
        text(status_json, "evaluationError").as_bytes(),
    );
    put_bool(&mut status, 4, flag("denied"));
    status
}

/// Encodes a SelfSubjectAccessReview for `resourceAttributes` (JSON object) as kubectl
/// `auth can-i` sends it (status `allowed: false`).
pub fn encode_ssar_for_test(resource_attributes: &Value) -> Vec<u8> {
    let object = json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": {"resourceAttributes": resource_attributes},
        "status": {"allowed": false}
    });
    encode_access_review(&object).expect("SelfSubjectAccessReview is a supported kind")
}

#[cfg(test)]
mod tests;
