//! The Assignment: the one message type on the queue.
//!
//! Versioned serde JSON ([`KIND`], read by the one rule of `tenantci_core::record_version`:
//! a newer release's assignment is [`AssignmentError::Newer`], never opened with this one's
//! meaning; unknown fields are ignored, so a later release may add one this release can do
//! without, and bumps the version for anything else) with the routing facts in clear (task id, attempt, backend, labels,
//! enqueued-at) and the task payload (which holds the task's secrets) sealed with
//! XChaCha20-Poly1305 under a key only the dispatcher holds: NATS, its store files and anyone
//! with read access to the stream see ciphertext only. The associated data binds the version,
//! task id, attempt and backend (and the resource class, when one is named), so a sealed
//! payload copied into another assignment does not open. [`SealingKey`] is that key and its
//! file.
//!
//! Does not publish or consume (`producer`, `consumer`); does not know what the payload means.

use std::path::Path;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore as _;
use serde::{Deserialize, Serialize};

use crate::backend_kind::BackendKind;
use crate::task_id::{TaskId, TaskIdError};
use tenantci_core::forge::gitea::proto::Task;
use tenantci_core::fsutil;
use tenantci_core::record_version::{Field, Kind, Newer};

/// The schema version this build writes and reads up to.
pub const VERSION: u32 = 1;
/// An assignment's kind for the version rule.
pub const KIND: Kind = Kind::new("assignment", VERSION).in_field(Field::V);
/// The AEAD recorded in `sealed.alg`.
pub const ALG: &str = "xchacha20poly1305";
/// Longest task id accepted.
pub const MAX_TASK_ID_LEN: usize = 128;

/// An assignment as it travels on NATS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// Schema version ([`VERSION`]).
    pub v: u32,
    /// The forge's task id (Gitea task ids are integers; any `[A-Za-z0-9_-]` string works).
    pub task_id: String,
    /// 1 for the first try; a retry of the same task is a new attempt (and a new Msg-Id).
    pub attempt: u32,
    /// The backend that runs it: it travels on that backend's subject to its consumer. Bound to
    /// the ciphertext.
    pub backend: BackendKind,
    /// The job's runs-on labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// The resource class the scheduler picked from the labels (none: no classes configured,
    /// or an assignment queued before the scheduler named it). Bound to the ciphertext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// When the scheduler enqueued it (RFC 3339, UTC).
    pub enqueued_at: chrono::DateTime<chrono::Utc>,
    /// The task payload, sealed.
    pub sealed: Sealed,
}

/// The sealed payload: nonce and ciphertext (with tag), base64.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The AEAD that sealed it ([`ALG`]).
    pub alg: String,
    /// The 24-byte XChaCha20 nonce, base64.
    pub nonce: String,
    /// The ciphertext with its tag, base64.
    pub ciphertext: String,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealed")
            .field("alg", &self.alg)
            .field("ciphertext_len", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

/// Why an assignment could not be built, decoded or opened.
#[derive(Debug, thiserror::Error)]
pub enum AssignmentError {
    /// The offending id as given (data shown to the operator, not a lost cause).
    #[error("the task id `{0}` is not 1-128 characters of [A-Za-z0-9_-]")]
    BadTaskId(String),
    /// An attempt of 0; attempts count from 1.
    #[error("the attempt must be at least 1")]
    BadAttempt,
    /// Not JSON of this schema (or not JSON at all).
    #[error("the assignment is not valid JSON of schema v{VERSION}: {0}")]
    Decode(#[source] serde_json::Error),
    /// A newer release's schema version: left for that release.
    #[error("the assignment: {0}")]
    Newer(Newer),
    /// The algorithm the assignment names (data shown to the operator, not a lost cause).
    #[error("the sealed payload uses `{0}`; this build opens `{ALG}`")]
    Alg(String),
    /// The sealed payload does not open; which part failed.
    #[error(
        "the sealed payload does not open with this key (wrong key, or it was tampered with or moved)"
    )]
    Open(#[from] Unopened),
    /// The AEAD refused to seal (it says no more than that).
    #[error("cannot seal the payload")]
    Seal(chacha20poly1305::aead::Error),
}

/// Which part of a sealed payload did not open ([`AssignmentError::Open`]).
#[derive(Debug, thiserror::Error)]
pub enum Unopened {
    /// The nonce is not standard base64.
    #[error("the nonce is not base64: {0}")]
    NonceEncoding(#[source] base64::DecodeError),
    /// The nonce's length in bytes (XChaCha20 takes 24).
    #[error("the nonce has {0} bytes, not 24")]
    NonceLength(usize),
    /// The ciphertext is not standard base64.
    #[error("the ciphertext is not base64: {0}")]
    CiphertextEncoding(#[source] base64::DecodeError),
    /// The tag does not verify: another key, or a changed ciphertext or bound field. The
    /// AEAD's error says no more than that.
    #[error("the ciphertext does not authenticate")]
    Tag(chacha20poly1305::aead::Error),
}

/// The dispatcher's 256-bit sealing key. Never logged (Debug is redacted).
#[derive(Clone)]
pub struct SealingKey([u8; 32]);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(..)")
    }
}

impl SealingKey {
    /// A new random key (what [`Self::load_or_create`] writes where none exists).
    pub fn generate() -> Self {
        let mut k = [0u8; 32];
        rand::rng().fill_bytes(&mut k);
        SealingKey(k)
    }

    /// The key from its 32 raw bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        SealingKey(bytes)
    }

    /// Reads the key file (base64 of 32 bytes; refused when others may read it), or creates it
    /// (0600) when it does not exist.
    pub fn load_or_create(path: &Path) -> tenantci_core::Result<Self> {
        if path.exists() {
            let raw = tenantci_core::input::read_private("the sealing key", path, 4096)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(raw.trim())
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| {
                    tenantci_core::Error::bad_input(format!(
                        "the sealing key `{}` is not base64 of 32 bytes",
                        path.display()
                    ))
                    .hint("restore the dispatcher's key file, or delete it to start with a new key (queued assignments then cannot be opened)")
                })?;
            return Ok(SealingKey(bytes));
        }
        let key = SealingKey::generate();
        let text = base64::engine::general_purpose::STANDARD.encode(key.0);
        fsutil::write_new_atomic(path, text.as_bytes(), fsutil::MODE_SECRET)
            .map_err(|e| tenantci_core::Error::unwritable("the sealing key", path, e))?;
        Ok(key)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&self.0).into())
    }
}

/// Validates a task id: it is part of the Msg-Id and of log lines, so keep it plain.
pub fn validate_task_id(id: &str) -> Result<(), AssignmentError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_TASK_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(AssignmentError::BadTaskId(id.to_string()))
    }
}

/// The associated data: binds the ciphertext to this assignment's identity. A class is
/// appended only when there is one, so an assignment without one reads as before classes
/// were named.
fn associated_data(
    task_id: &str,
    attempt: u32,
    backend: BackendKind,
    class: Option<&str>,
) -> Vec<u8> {
    let mut aad = format!("tenantci-assignment\0v{VERSION}\0{task_id}\0{attempt}\0{backend}");
    if let Some(class) = class {
        aad.push_str("\0class=");
        aad.push_str(class);
    }
    aad.into_bytes()
}

impl Assignment {
    /// Builds an assignment, sealing `payload` with `key`.
    pub fn seal(
        key: &SealingKey,
        task_id: &str,
        attempt: u32,
        backend: BackendKind,
        labels: Vec<String>,
        payload: &[u8],
    ) -> Result<Self, AssignmentError> {
        Self::seal_in_class(key, task_id, attempt, backend, labels, None, payload)
    }

    /// [`Assignment::seal`] naming the resource class the scheduler picked, so whoever starts
    /// the executor takes that class rather than picking again.
    pub fn seal_in_class(
        key: &SealingKey,
        task_id: &str,
        attempt: u32,
        backend: BackendKind,
        labels: Vec<String>,
        class: Option<String>,
        payload: &[u8],
    ) -> Result<Self, AssignmentError> {
        validate_task_id(task_id)?;
        if attempt == 0 {
            return Err(AssignmentError::BadAttempt);
        }
        let mut nonce = [0u8; 24];
        rand::rng().fill_bytes(&mut nonce);
        let aad = associated_data(task_id, attempt, backend, class.as_deref());
        let ct = key
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: payload,
                    aad: &aad,
                },
            )
            .map_err(AssignmentError::Seal)?;
        let b64 = base64::engine::general_purpose::STANDARD;
        Ok(Assignment {
            v: VERSION,
            task_id: task_id.to_string(),
            attempt,
            backend,
            labels,
            class,
            enqueued_at: chrono::Utc::now(),
            sealed: Sealed {
                alg: ALG.to_string(),
                nonce: b64.encode(nonce),
                ciphertext: b64.encode(ct),
            },
        })
    }

    /// Opens the sealed payload; fails if the key is wrong or any bound field was changed.
    pub fn open(&self, key: &SealingKey) -> Result<Vec<u8>, AssignmentError> {
        if self.sealed.alg != ALG {
            return Err(AssignmentError::Alg(self.sealed.alg.clone()));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let nonce = b64
            .decode(&self.sealed.nonce)
            .map_err(Unopened::NonceEncoding)?;
        if nonce.len() != 24 {
            return Err(Unopened::NonceLength(nonce.len()).into());
        }
        let ct = b64
            .decode(&self.sealed.ciphertext)
            .map_err(Unopened::CiphertextEncoding)?;
        let aad = associated_data(
            &self.task_id,
            self.attempt,
            self.backend,
            self.class.as_deref(),
        );
        key.cipher()
            .decrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &ct,
                    aad: &aad,
                },
            )
            .map_err(|e| Unopened::Tag(e).into())
    }

    /// The Gitea task id the wire's `task_id` names: the one parse of it (the worker and
    /// `task::opened` both read it here, and refuse with the one [`TaskIdError`]).
    pub fn task(&self) -> Result<TaskId, TaskIdError> {
        self.task_id.parse()
    }

    /// The JetStream `Nats-Msg-Id`: task id and attempt (`:` never occurs in a task id).
    pub fn msg_id(&self) -> String {
        format!("{}:{}", self.task_id, self.attempt)
    }

    /// The JSON published on the queue (what [`Assignment::from_json`] reads back).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an assignment always serializes")
    }

    /// Decodes and checks version and identity fields (not the seal: see [`Assignment::open`]).
    pub fn from_json(bytes: &[u8]) -> Result<Self, AssignmentError> {
        KIND.check_json(bytes)
            .map_err(AssignmentError::Decode)?
            .map_err(AssignmentError::Newer)?;
        let a: Assignment = serde_json::from_slice(bytes).map_err(AssignmentError::Decode)?;
        validate_task_id(&a.task_id)?;
        if a.attempt == 0 {
            return Err(AssignmentError::BadAttempt);
        }
        Ok(a)
    }
}

/// A non-empty string field of a task's Gitea context (`repository`, `job`).
pub fn context_str<'t>(task: &'t Task, key: &str) -> Option<&'t str> {
    context_path(task, &[key])
}

/// A non-empty string field nested in a task's Gitea context, by its path of keys
/// (`event.repository.default_branch`).
pub fn context_path<'t>(task: &'t Task, path: &[&str]) -> Option<&'t str> {
    use prost_types::value::Kind;
    let (last, parents) = path.split_last()?;
    let mut fields = &task.context.as_ref()?.fields;
    for p in parents {
        match fields.get(*p)?.kind.as_ref()? {
            Kind::StructValue(s) => fields = &s.fields,
            _ => return None,
        }
    }
    match fields.get(*last)?.kind.as_ref()? {
        Kind::StringValue(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(key: &SealingKey) -> Assignment {
        Assignment::seal(
            key,
            "4711",
            1,
            BackendKind::new("pod"),
            vec!["ubuntu-latest".into()],
            b"{\"token\":\"s3cret-task-token\"}",
        )
        .unwrap()
    }

    #[test]
    fn seals_and_opens_and_the_json_has_no_secret() {
        let key = SealingKey::generate();
        let a = sample(&key);
        let json = a.to_json();
        assert!(
            !String::from_utf8_lossy(&json).contains("s3cret"),
            "secret in clear"
        );
        let back = Assignment::from_json(&json).unwrap();
        assert_eq!(back, a);
        assert_eq!(
            back.open(&key).unwrap(),
            b"{\"token\":\"s3cret-task-token\"}"
        );
        assert_eq!(back.msg_id(), "4711:1");
    }

    #[test]
    fn a_payload_moved_to_another_task_or_attempt_does_not_open() {
        let key = SealingKey::generate();
        let a = sample(&key);
        for tamper in [
            |a: &mut Assignment| a.task_id = "4712".into(),
            |a: &mut Assignment| a.attempt = 2,
            |a: &mut Assignment| a.backend = BackendKind::new("vm"),
        ] {
            let mut b = a.clone();
            tamper(&mut b);
            assert!(matches!(b.open(&key), Err(AssignmentError::Open(_))));
        }
        assert!(matches!(
            a.open(&SealingKey::generate()),
            Err(AssignmentError::Open(_))
        ));
    }

    /// The class the scheduler picked is bound as the backend is: an assignment moved to
    /// another class (a bigger one) does not open, nor one whose class was taken off; an
    /// assignment without a class is the JSON and associated data it was before classes were
    /// named, so those queued by an older build still open.
    #[test]
    fn the_class_is_bound_to_the_payload_and_absent_without_one() {
        let key = SealingKey::generate();
        let a = Assignment::seal_in_class(
            &key,
            "4711",
            1,
            BackendKind::new("pod"),
            vec!["large".into()],
            Some("large".into()),
            b"task",
        )
        .unwrap();
        assert_eq!(a.open(&key).unwrap(), b"task");
        for class in [Some("xlarge".to_string()), None] {
            let mut b = a.clone();
            b.class = class;
            assert!(matches!(b.open(&key), Err(AssignmentError::Open(_))));
        }
        let plain = sample(&key).to_json();
        assert!(!String::from_utf8_lossy(&plain).contains("class"));
    }

    /// Why a payload did not open is typed under one unchanged sentence.
    #[test]
    fn an_unopened_payload_keeps_its_cause_under_the_same_sentence() {
        let key = SealingKey::generate();
        let e = sample(&key).open(&SealingKey::generate()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the sealed payload does not open with this key (wrong key, or it was tampered with or moved)"
        );
        assert!(matches!(e, AssignmentError::Open(Unopened::Tag(_))));
        let mut short = sample(&key);
        short.sealed.nonce = "AAAA".into();
        assert!(matches!(
            short.open(&key),
            Err(AssignmentError::Open(Unopened::NonceLength(3)))
        ));
        short.sealed.nonce = "not base64!".into();
        assert!(matches!(
            short.open(&key),
            Err(AssignmentError::Open(Unopened::NonceEncoding(_)))
        ));
        let e = Assignment::from_json(b"{").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the assignment is not valid JSON of schema v1: "),
            "{e}"
        );
        let source = std::error::Error::source(&e).expect("the decoder's error");
        assert!(source.downcast_ref::<serde_json::Error>().is_some());
    }

    #[test]
    fn refuses_newer_versions_and_bad_ids_and_ignores_unknown_fields() {
        let key = SealingKey::generate();
        let mut v: serde_json::Value = serde_json::from_slice(&sample(&key).to_json()).unwrap();
        v["v"] = 2.into();
        assert!(matches!(
            Assignment::from_json(v.to_string().as_bytes()),
            Err(AssignmentError::Newer(n)) if n.found == "2"
        ));
        v["v"] = 1.into();
        v["extra"] = true.into();
        let a = Assignment::from_json(v.to_string().as_bytes()).unwrap();
        assert_eq!(
            a.open(&key).unwrap(),
            b"{\"token\":\"s3cret-task-token\"}",
            "a later field is ignored"
        );
        for bad in ["", "a:b", "a.b", "a b", &"x".repeat(129)] {
            assert!(Assignment::seal(&key, bad, 1, BackendKind::new("pod"), vec![], b"").is_err());
        }
        assert!(matches!(
            Assignment::seal(&key, "1", 0, BackendKind::new("pod"), vec![], b""),
            Err(AssignmentError::BadAttempt)
        ));
    }

    #[test]
    fn key_file_is_created_0600_and_reloaded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sealing.key");
        let k1 = SealingKey::load_or_create(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let k2 = SealingKey::load_or_create(&p).unwrap();
        assert_eq!(k1.0, k2.0);
        assert_eq!(format!("{k1:?}"), "SealingKey(..)");
    }
}
