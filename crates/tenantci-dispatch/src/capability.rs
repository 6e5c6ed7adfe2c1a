//! Per-task capabilities: what an executor presents to the facade as its runner token.
//! `token = HMAC-SHA256(key, "<task id>:<attempt>")`, hex. The facade recomputes it from the
//! assignment named by the caller's uuid and compares in constant time, so the dispatcher
//! stores no per-task secret and a token for one task is worthless for another.
//!
//! With executor identity on, the task's SPIFFE ID is bound in too:
//! `HMAC-SHA256(key, "<task id>:<attempt>:<spiffe id>")`. The facade recomputes it with the
//! client's SPIFFE ID from the mTLS handshake, so a capability verifies only for the executor
//! holding its task's SVID, with nothing looked up (the ID needs the task's repository and
//! job, which only the sealed assignment holds, and no backend keeps that past the executor's
//! first report).

use crate::task_id::TaskId;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Minimum key length: 32 random bytes.
pub const KEY_LEN: usize = 32;

/// The dispatcher's capability key. `Debug` never prints it.
#[derive(Clone)]
pub struct CapabilityKey(Vec<u8>);

impl std::fmt::Debug for CapabilityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapabilityKey([redacted])")
    }
}

impl CapabilityKey {
    /// A new random key of [`KEY_LEN`] bytes, for `dispatch init` to write.
    pub fn generate() -> Self {
        CapabilityKey(rand::random::<[u8; KEY_LEN]>().to_vec())
    }

    /// From the key file's bytes; refuses short keys.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < KEY_LEN {
            return Err(format!(
                "the capability key has {} bytes; at least {KEY_LEN} are required",
                bytes.len()
            ));
        }
        Ok(CapabilityKey(bytes.to_vec()))
    }

    /// The raw key, as [`Self::from_bytes`] took it.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// HMAC-SHA256 of `input` under this key, hex: what every token made with it is.
    pub(crate) fn mac_hex(&self, input: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(input.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Constant-time check that `presented` is [`Self::mac_hex`] of `input`.
    pub(crate) fn verify_hex(&self, input: &str, presented: &str) -> bool {
        self.mac_hex(input)
            .as_bytes()
            .ct_eq(presented.as_bytes())
            .into()
    }

    /// The capability of one task attempt (hex).
    pub fn token(&self, task_id: TaskId, attempt: u32) -> String {
        self.token_for(task_id, attempt, None)
    }

    /// The capability of one task attempt whose executor must present `spiffe_id` (hex).
    pub fn token_for(&self, task_id: TaskId, attempt: u32, spiffe_id: Option<&str>) -> String {
        self.mac_hex(&capability_input(task_id, attempt, spiffe_id))
    }

    /// Constant-time check of a presented token.
    pub fn verify(&self, task_id: TaskId, attempt: u32, presented: &str) -> bool {
        self.verify_for(task_id, attempt, None, presented)
    }

    /// Constant-time check of a presented token bound to the client's `spiffe_id`.
    pub fn verify_for(
        &self,
        task_id: TaskId,
        attempt: u32,
        spiffe_id: Option<&str>,
        presented: &str,
    ) -> bool {
        self.verify_hex(&capability_input(task_id, attempt, spiffe_id), presented)
    }
}

/// What a capability signs. Unambiguous: task ids and attempts are digits, so the second `:`
/// starts the ID.
fn capability_input(task_id: TaskId, attempt: u32, spiffe_id: Option<&str>) -> String {
    match spiffe_id {
        None => format!("{task_id}:{attempt}"),
        Some(id) => format!("{task_id}:{attempt}:{id}"),
    }
}

/// The assignment id of one task attempt: the executor's runner uuid at the facade. It
/// carries the task id and attempt, so the facade authenticates a caller without a lookup.
pub fn assignment_id(task_id: TaskId, attempt: u32) -> String {
    format!("task-{task_id}-attempt-{attempt}")
}

/// The task id and attempt named by an assignment id; None for anything else.
pub fn parse_assignment_id(id: &str) -> Option<(TaskId, u32)> {
    let rest = id.strip_prefix("task-")?;
    let (task, attempt) = rest.split_once("-attempt-")?;
    let task: TaskId = task.parse().ok().filter(|t: &TaskId| t.get() > 0)?;
    let attempt: u32 = attempt.parse().ok().filter(|a| *a > 0)?;
    // Only the canonical spelling: `task-007-...` would alias task 7.
    (assignment_id(task, attempt) == id).then_some((task, attempt))
}

/// The key file's text: standard base64 of the key and a newline (as the sealing key).
pub fn encode_key(key: &CapabilityKey) -> String {
    use base64::Engine as _;
    format!(
        "{}\n",
        base64::engine::general_purpose::STANDARD.encode(&key.0)
    )
}

/// A key file is 45 bytes; anything much larger is another file.
const KEY_FILE_MAX: u64 = 4096;

/// Reads the key file `dispatch init` wrote (base64, 0600; refused when others may read it).
pub fn load_key(path: &std::path::Path) -> tenantci_core::Result<CapabilityKey> {
    use base64::Engine as _;
    let text = tenantci_core::input::read_private("the capability key", path, KEY_FILE_MAX)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| {
            tenantci_core::Error::bad_input(format!(
                "the capability key `{}` is not base64",
                path.display()
            ))
            .hint("restore the dispatcher's key file, or delete it and re-run `tenantci dispatch init` (running executors then lose their facade access)")
        })?;
    CapabilityKey::from_bytes(&bytes).map_err(|e| {
        tenantci_core::Error::bad_input(format!("{} ({})", e, path.display()))
            .hint("re-run `tenantci dispatch init`, which creates a 32-byte key where none exists")
    })
}

#[cfg(test)]
mod tests {
    use crate::task_id::TaskId;
    #[test]
    fn assignment_ids_round_trip_and_refuse_aliases() {
        assert_eq!(
            parse_assignment_id(&assignment_id(TaskId::new(42), 3)),
            Some((TaskId::new(42), 3))
        );
        for bad in [
            "task-07-attempt-1",
            "task-7-attempt-0",
            "task--1-attempt-1",
            "7",
            "task-7-attempt-1x",
            "",
        ] {
            assert_eq!(parse_assignment_id(bad), None, "{bad}");
        }
    }

    use super::*;

    #[test]
    fn a_token_is_bound_to_its_task_and_attempt() {
        let k = CapabilityKey::generate();
        let t = k.token(TaskId::new(7), 1);
        assert_eq!(t.len(), 64);
        assert!(k.verify(TaskId::new(7), 1, &t));
        assert!(!k.verify(TaskId::new(8), 1, &t), "another task");
        assert!(!k.verify(TaskId::new(7), 2, &t), "another attempt");
        assert!(
            !CapabilityKey::generate().verify(TaskId::new(7), 1, &t),
            "another key"
        );
        assert!(!k.verify(TaskId::new(7), 1, "forged"));
        assert!(!format!("{k:?}").contains(&hex::encode(k.as_bytes())));
    }

    #[test]
    fn a_bound_token_verifies_only_with_its_spiffe_id() {
        let k = CapabilityKey::generate();
        let a = "spiffe://example.org/gitea/acme/w/build";
        let t = k.token_for(TaskId::new(7), 1, Some(a));
        assert!(k.verify_for(TaskId::new(7), 1, Some(a), &t));
        assert!(!k.verify(TaskId::new(7), 1, &t), "not without the ID");
        assert!(!k.verify_for(
            TaskId::new(7),
            1,
            Some("spiffe://example.org/gitea/acme/w/test"),
            &t
        ));
        assert!(
            !k.verify_for(TaskId::new(8), 1, Some(a), &t),
            "another task"
        );
        assert!(
            !k.verify_for(TaskId::new(7), 1, Some(a), &k.token(TaskId::new(7), 1)),
            "an unbound token"
        );
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(CapabilityKey::from_bytes(&[0; 31]).is_err());
        assert!(CapabilityKey::from_bytes(&[0; 32]).is_ok());
    }
}
