//! Per-task capabilities: what an executor Pod presents to the facade as its runner token.
//! `token = HMAC-SHA256(key, "<task id>:<attempt>")`, hex. The facade recomputes it from the
//! assignment named by the caller's uuid and compares in constant time, so the dispatcher
//! stores no per-task secret and a token for one task is worthless for another.

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

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, task_id: i64, attempt: u32) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(format!("{task_id}:{attempt}").as_bytes());
        mac
    }

    /// The capability of one task attempt (hex).
    pub fn token(&self, task_id: i64, attempt: u32) -> String {
        hex::encode(self.mac(task_id, attempt).finalize().into_bytes())
    }

    /// Constant-time check of a presented token.
    pub fn verify(&self, task_id: i64, attempt: u32, presented: &str) -> bool {
        let expected = self.token(task_id, attempt);
        expected.as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_bound_to_its_task_and_attempt() {
        let k = CapabilityKey::generate();
        let t = k.token(7, 1);
        assert_eq!(t.len(), 64);
        assert!(k.verify(7, 1, &t));
        assert!(!k.verify(8, 1, &t), "another task");
        assert!(!k.verify(7, 2, &t), "another attempt");
        assert!(!CapabilityKey::generate().verify(7, 1, &t), "another key");
        assert!(!k.verify(7, 1, "forged"));
        assert!(!format!("{k:?}").contains(&hex::encode(k.as_bytes())));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(CapabilityKey::from_bytes(&[0; 31]).is_err());
        assert!(CapabilityKey::from_bytes(&[0; 32]).is_ok());
    }
}
