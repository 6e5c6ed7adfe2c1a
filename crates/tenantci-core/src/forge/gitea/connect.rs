//! The Connect unary protocol as both ends of the RunnerService use it: the two codecs
//! (`application/proto`, `application/json`), gzip bodies, and Connect errors (`{"code",
//! "message"}` with the HTTP status the Connect spec assigns to each code).
//!
//! Transport-agnostic: no HTTP client or server here (`client` and `facade` use it).
//! Invariants: decoding never panics on hostile input; a gzip body inflates to at most
//! [`MAX_BODY`] bytes.

use std::fmt;
use std::io::{Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Largest request or response body accepted, before and after inflating.
pub const MAX_BODY: usize = 32 * 1024 * 1024;

/// Responses at least this large are gzipped when the peer accepts gzip (Gitea does the same).
pub const GZIP_MIN: usize = 1024;

/// A RunnerService message: prost for the binary codec, serde (protojson) for JSON.
pub trait Wire: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static {}

impl<T: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static> Wire for T {}

/// A Connect unary codec, named by the request's `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// Binary protobuf, `application/proto` (act_runner's choice).
    Proto,
    /// Protojson, `application/json`.
    Json,
}

impl Codec {
    /// The codec for a `Content-Type` value (parameters such as `charset` ignored), or `None`
    /// when it is not one Connect unary defines.
    pub fn from_content_type(value: &str) -> Option<Codec> {
        let essence = value.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/proto") {
            Some(Codec::Proto)
        } else if essence.eq_ignore_ascii_case("application/json") {
            Some(Codec::Json)
        } else {
            None
        }
    }

    /// The `Content-Type` value that names this codec.
    pub fn content_type(self) -> &'static str {
        match self {
            Codec::Proto => "application/proto",
            Codec::Json => "application/json",
        }
    }

    /// Encodes `msg` in this codec.
    pub fn encode<M: Wire>(self, msg: &M) -> Vec<u8> {
        match self {
            Codec::Proto => msg.encode_to_vec(),
            // Serialising these plain structs cannot fail; an empty object is still valid.
            Codec::Json => serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec()),
        }
    }

    /// Decodes a message; a body that does not parse is `invalid_argument`.
    pub fn decode<M: Wire>(self, body: &[u8]) -> Result<M, ConnectError> {
        match self {
            Codec::Proto => M::decode(body).map_err(|e| {
                ConnectError::new(Code::InvalidArgument, format!("malformed protobuf: {e}"))
            }),
            Codec::Json => {
                let body = if body.iter().all(u8::is_ascii_whitespace) {
                    &b"{}"[..]
                } else {
                    body
                };
                serde_json::from_slice(body).map_err(|e| {
                    ConnectError::new(Code::InvalidArgument, format!("malformed JSON: {e}"))
                })
            }
        }
    }
}

/// Connect error codes (lower-case on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// `canceled` (HTTP 499): the caller cancelled the call.
    Canceled,
    /// `unknown` (HTTP 500): an error with no better code, or a status with no Connect body.
    Unknown,
    /// `invalid_argument` (HTTP 400): the request is malformed or has a bad value.
    InvalidArgument,
    /// `deadline_exceeded` (HTTP 504): the call ran out of time.
    DeadlineExceeded,
    /// `not_found` (HTTP 404): no such method or entity.
    NotFound,
    /// `already_exists` (HTTP 409): it exists already (Gitea: rows for a log already archived).
    AlreadyExists,
    /// `permission_denied` (HTTP 403): the caller is known but not allowed (e.g. a wrong
    /// registration token).
    PermissionDenied,
    /// `resource_exhausted` (HTTP 429): a quota or rate limit.
    ResourceExhausted,
    /// `failed_precondition` (HTTP 400): the system is not in a state for this call.
    FailedPrecondition,
    /// `aborted` (HTTP 409): the call lost a race with another.
    Aborted,
    /// `out_of_range` (HTTP 400): a value beyond the valid range.
    OutOfRange,
    /// `unimplemented` (HTTP 501): the server does not serve this method.
    Unimplemented,
    /// `internal` (HTTP 500): the server broke an invariant.
    Internal,
    /// `unavailable` (HTTP 503): the server cannot answer now; worth retrying.
    Unavailable,
    /// `data_loss` (HTTP 500): data was lost or corrupted.
    DataLoss,
    /// `unauthenticated` (HTTP 401): missing or unknown runner credentials.
    Unauthenticated,
}

const CODES: &[(Code, &str, u16)] = &[
    (Code::Canceled, "canceled", 499),
    (Code::Unknown, "unknown", 500),
    (Code::InvalidArgument, "invalid_argument", 400),
    (Code::DeadlineExceeded, "deadline_exceeded", 504),
    (Code::NotFound, "not_found", 404),
    (Code::AlreadyExists, "already_exists", 409),
    (Code::PermissionDenied, "permission_denied", 403),
    (Code::ResourceExhausted, "resource_exhausted", 429),
    (Code::FailedPrecondition, "failed_precondition", 400),
    (Code::Aborted, "aborted", 409),
    (Code::OutOfRange, "out_of_range", 400),
    (Code::Unimplemented, "unimplemented", 501),
    (Code::Internal, "internal", 500),
    (Code::Unavailable, "unavailable", 503),
    (Code::DataLoss, "data_loss", 500),
    (Code::Unauthenticated, "unauthenticated", 401),
];

impl Code {
    /// The code's name on the wire (`invalid_argument`).
    pub fn as_str(self) -> &'static str {
        CODES
            .iter()
            .find(|(c, ..)| *c == self)
            .map_or("unknown", |e| e.1)
    }

    /// The code with wire name `s`; `None` for a name Connect does not define.
    pub fn parse(s: &str) -> Option<Code> {
        CODES.iter().find(|(_, n, _)| *n == s).map(|e| e.0)
    }

    /// The HTTP status the Connect spec gives this code.
    pub fn http_status(self) -> u16 {
        CODES.iter().find(|(c, ..)| *c == self).map_or(500, |e| e.2)
    }

    /// The code the Connect spec infers from an HTTP status that carries no Connect error body.
    pub fn from_http_status(status: u16) -> Code {
        match status {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Connect error: a code and a message meant for the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectError {
    /// What kind of failure, which sets the HTTP status.
    pub code: Code,
    /// Text for the peer (may be empty); never put a secret in it.
    pub message: String,
}

#[derive(Serialize, serde::Deserialize)]
struct ErrorBody {
    code: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    message: String,
}

impl ConnectError {
    /// An error with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// An `unauthenticated` error (HTTP 401).
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(Code::Unauthenticated, message)
    }

    /// An `invalid_argument` error (HTTP 400).
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// A `not_found` error (HTTP 404).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    /// An `already_exists` error (HTTP 409).
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(Code::AlreadyExists, message)
    }

    /// A `permission_denied` error (HTTP 403).
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(Code::PermissionDenied, message)
    }

    /// An `unimplemented` error (HTTP 501).
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(Code::Unimplemented, message)
    }

    /// An `internal` error (HTTP 500).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// An `unavailable` error (HTTP 503).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Code::Unavailable, message)
    }

    /// The HTTP status to answer this error with.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// The Connect error body.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&ErrorBody {
            code: self.code.as_str().to_string(),
            message: self.message.clone(),
        })
        .unwrap_or_default()
    }

    /// The error a non-200 answer stands for: its Connect error body when it has one, else the
    /// code inferred from the status.
    pub fn from_response(status: u16, body: &[u8]) -> Self {
        if let Ok(b) = serde_json::from_slice::<ErrorBody>(body)
            && let Some(code) = Code::parse(&b.code)
        {
            return ConnectError::new(code, b.message);
        }
        ConnectError::new(
            Code::from_http_status(status),
            format!(
                "no Connect error body: {}",
                crate::upstream::status_and_excerpt(status, body)
            ),
        )
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

impl std::error::Error for ConnectError {}

/// Whether an `Accept-Encoding` value admits gzip (a `q=0` refusal is honoured).
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    accept_encoding.split(',').any(|part| {
        let mut it = part.split(';');
        let name = it.next().unwrap_or("").trim();
        let refused = it.any(|p| {
            let p = p.trim().replace(' ', "");
            p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
        });
        (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
    })
}

/// Gzips `data` (fast compression level).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// Inflates a gzip body; a corrupt body or one larger than [`MAX_BODY`] is `invalid_argument`.
pub fn gunzip(data: &[u8]) -> Result<Vec<u8>, ConnectError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ConnectError::invalid_argument(format!("corrupt gzip body: {e}")))?;
    if out.len() > MAX_BODY {
        return Err(ConnectError::invalid_argument(format!(
            "gzip body inflates beyond {MAX_BODY} bytes"
        )));
    }
    Ok(out)
}

/// Undoes a `Content-Encoding` (`identity`, absent or `gzip`); others are `unimplemented`,
/// as Connect specifies for an unsupported compression.
pub fn decode_body(content_encoding: Option<&str>, body: &[u8]) -> Result<Vec<u8>, ConnectError> {
    match content_encoding.map(str::trim) {
        None | Some("") | Some("identity") => Ok(body.to_vec()),
        Some(e) if e.eq_ignore_ascii_case("gzip") => gunzip(body),
        Some(other) => Err(ConnectError::unimplemented(format!(
            "unsupported content encoding {other:?} (supported: gzip, identity)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::gitea::proto::{FetchTaskRequest, UpdateLogResponse};

    #[test]
    fn content_types_name_codecs() {
        assert_eq!(
            Codec::from_content_type("application/proto"),
            Some(Codec::Proto)
        );
        assert_eq!(
            Codec::from_content_type("Application/JSON; charset=utf-8"),
            Some(Codec::Json)
        );
        assert_eq!(Codec::from_content_type("application/grpc"), None);
        assert_eq!(Codec::from_content_type("text/plain"), None);
        assert_eq!(Codec::from_content_type(""), None);
    }

    #[test]
    fn codes_round_trip_and_map_to_connect_statuses() {
        for (code, name, status) in CODES {
            assert_eq!(Code::parse(name), Some(*code));
            assert_eq!(code.as_str(), *name);
            assert_eq!(code.http_status(), *status);
        }
        assert_eq!(Code::parse("UNAUTHENTICATED"), None);
        assert_eq!(Code::from_http_status(401), Code::Unauthenticated);
        assert_eq!(Code::from_http_status(503), Code::Unavailable);
        assert_eq!(Code::from_http_status(404), Code::Unimplemented);
        assert_eq!(Code::from_http_status(418), Code::Unknown);
    }

    #[test]
    fn error_bodies_round_trip() {
        let err = ConnectError::already_exists("log file has been archived");
        let body = err.to_json();
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            r#"{"code":"already_exists","message":"log file has been archived"}"#
        );
        assert_eq!(ConnectError::from_response(409, &body), err);
        let bare = ConnectError::from_response(502, b"<html>bad gateway</html>");
        assert_eq!(bare.code, Code::Unavailable);
        let unknown_code = ConnectError::from_response(401, br#"{"code":"nope"}"#);
        assert_eq!(unknown_code.code, Code::Unauthenticated);
    }

    #[test]
    fn both_codecs_round_trip_and_reject_garbage() {
        let msg = FetchTaskRequest {
            tasks_version: 42,
            ..Default::default()
        };
        for codec in [Codec::Proto, Codec::Json] {
            let bytes = codec.encode(&msg);
            assert_eq!(codec.decode::<FetchTaskRequest>(&bytes).unwrap(), msg);
        }
        assert_eq!(Codec::Json.encode(&msg), br#"{"tasksVersion":"42"}"#);
        let from_number: FetchTaskRequest = Codec::Json.decode(br#"{"tasks_version":7}"#).unwrap();
        assert_eq!(from_number.tasks_version, 7);
        assert_eq!(
            Codec::Json.decode::<FetchTaskRequest>(b"").unwrap(),
            FetchTaskRequest::default()
        );
        // Field 1 as a length-delimited value claiming 16 bytes that are not there.
        let err = Codec::Proto
            .decode::<UpdateLogResponse>(b"\x0a\x10ab")
            .unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        let err = Codec::Json
            .decode::<UpdateLogResponse>(b"{not json")
            .unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
    }

    #[test]
    fn gzip_round_trips_and_rejects_corruption() {
        let data = b"hello hello hello hello".repeat(100);
        let packed = gzip(&data);
        assert!(packed.len() < data.len());
        assert_eq!(gunzip(&packed).unwrap(), data);
        assert_eq!(decode_body(Some("gzip"), &packed).unwrap(), data);
        assert_eq!(decode_body(None, b"raw").unwrap(), b"raw");
        assert_eq!(
            decode_body(Some("gzip"), b"not gzip").unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(
            decode_body(Some("br"), b"x").unwrap_err().code,
            Code::Unimplemented
        );
    }

    #[test]
    fn accept_encoding_parsing() {
        assert!(accepts_gzip("gzip"));
        assert!(accepts_gzip("br, gzip;q=0.8"));
        assert!(accepts_gzip("*"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("identity"));
        assert!(!accepts_gzip(""));
    }
}
