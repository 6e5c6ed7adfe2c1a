//! A task's cache grant: what names the task's repository and branch to the cache, and proves
//! them.
//!
//! `<task>.<attempt>.<expires>.<scope>.<token digests>.<MAC>`, where `scope` is base64url of
//! the repository, the ref the task saves under and the refs it may restore from (one per
//! line), `token digests` the first 16 bytes of SHA-256 of each runtime token the task's
//! runner may send (hex, `-` between), and the MAC HMAC-SHA256 with the capability key over
//! `cache:` and everything before it.
//!
//! It is minted with each executor's spec (`task::spec`, from the assignment opened once in
//! `task::opened`, as the SPIFFE ID is), whoever starts the executor (the worker, a
//! replacement, recovery), and written into the runner's `cache.external_server` URL, so the
//! job's `ACTIONS_CACHE_URL` carries it. The cache recomputes the MAC and compares in constant
//! time: nothing is looked up, so every dispatcher replica and a restarted one accept it.
//!
//! Why three more fields than a repository:
//! - **The runtime token.** `ACTIONS_CACHE_URL` is not a secret to the runner (act_runner
//!   does not mask it; a step that prints its environment shows it in the job log). So the
//!   URL alone opens nothing: every API call must also carry `Authorization: Bearer` with a
//!   token whose digest the grant holds, which `@actions/cache` sends from
//!   `ACTIONS_RUNTIME_TOKEN` and the runner masks as a secret. Only digests are in the grant.
//! - **An expiry.** The grant lives as long as its task may (`cache.grant_lifetime`), so a
//!   token and URL copied out of a finished job open nothing later.
//! - **Branch scopes, as GitHub scopes its cache.** A task saves under its own ref and
//!   restores from its own ref, its pull request's base branch and the default branch, in that
//!   order. A pull-request job (from a fork, say) can therefore never put an entry where the
//!   default branch's jobs restore from.
//!
//! A download is the one call the toolkit makes without the token (it fetches
//! `archiveLocation` with a bare HTTP client), so a lookup's `archiveLocation` carries a
//! download ticket instead: a MAC over the grant, the entry and a near expiry, valid for
//! [`TICKET_LIFETIME`].
//!
//! Why not check the runtime token at Gitea: the cache would then need Gitea on every call,
//! and the facade holds a task's context only until the executor's first report.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::capability::CapabilityKey;
use crate::queue::assignment::{context_path, context_str};
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::proto::Task;

/// Gitea's repository names are `owner/name`, each at most 255 bytes.
const MAX_REPOSITORY: usize = 512;
/// A git ref name; Gitea's branch names are far shorter.
const MAX_REF: usize = 512;
/// Digests of the runtime tokens a runner may send (act_runner's and forgejo-runner's choices).
const MAX_TOKENS: usize = 4;
/// Whatever a grant holds, it is no longer than this.
const MAX_GRANT: usize = 4096;
/// How long a lookup's download ticket lets the job start fetching the entry.
pub const TICKET_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// The context fields a runner takes `ACTIONS_RUNTIME_TOKEN` from: act_runner the
/// `gitea_runtime_token` (the task `token` on older Gitea); forgejo-runner may name it
/// `forgejo_runtime_token`. Every one present is admitted.
const RUNTIME_TOKENS: [&str; 3] = ["gitea_runtime_token", "forgejo_runtime_token", "token"];

/// Where a task's cache entries live and which it may restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// `owner/name`, lower-cased: Gitea's names are case-insensitive.
    pub repository: String,
    /// The ref the task's saves go under (`refs/heads/main`, `refs/pull/3/head`); empty when
    /// its context names none.
    pub write: String,
    /// The refs it restores from, in order: its own, its pull request's base, the default
    /// branch.
    pub reads: Vec<String>,
}

/// What the worker mints a grant from: the task's scope and its runtime tokens' digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCache {
    /// The task's repository and refs.
    pub scope: Scope,
    token_digests: Vec<String>,
}

/// What a verified grant says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The task the grant was minted for.
    pub task: TaskId,
    /// Its attempt.
    pub attempt: u32,
    /// The task's repository and refs, as minted.
    pub scope: Scope,
    token_digests: Vec<String>,
    /// The grant's text without its MAC: what download tickets are bound to.
    body: String,
}

/// Why a presented grant opens nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Malformed, or its MAC does not verify (forged, damaged, another key).
    Forged,
    /// Genuine, but past its expiry (unix seconds).
    Expired(i64),
    /// No `Authorization: Bearer` token with the call.
    NoToken,
    /// A token that is not one of the grant's task.
    WrongToken,
    /// A download without a valid, unexpired ticket for that entry.
    NoTicket,
}

/// First 16 bytes of SHA-256, hex: enough to tell tokens apart, nothing to recover them from.
fn token_digest(token: &str) -> String {
    hex::encode(&Sha256::digest(token.as_bytes())[..16])
}

fn scope_text(s: &Scope) -> String {
    let mut lines = vec![s.repository.as_str(), s.write.as_str()];
    lines.extend(s.reads.iter().map(String::as_str));
    lines.join("\n")
}

fn parse_scope(text: &str) -> Option<Scope> {
    let mut lines = text.split('\n');
    let repository = lines.next()?.to_string();
    let write = lines.next()?.to_string();
    let reads: Vec<String> = lines.map(str::to_string).collect();
    (!repository.is_empty() && !reads.is_empty()).then_some(Scope {
        repository,
        write,
        reads,
    })
}

/// The scope and tokens of `task` (from its context, as Gitea sends it).
pub fn task_cache(task: &Task) -> Result<TaskCache, String> {
    let id = task.id;
    let repository = context_str(task, "repository")
        .ok_or_else(|| format!("task {id} has no repository in its context, so no cache"))?
        .to_lowercase();
    if repository.len() > MAX_REPOSITORY || repository.contains('\n') {
        return Err(format!(
            "task {id}'s repository name is not one the cache can hold ({} bytes)",
            repository.len()
        ));
    }
    let write = context_str(task, "ref").unwrap_or_default().to_string();
    let branch = |name: Option<&str>| name.map(|n| format!("refs/heads/{n}"));
    let mut reads = vec![write.clone()];
    for r in [
        branch(context_str(task, "base_ref")),
        branch(context_path(
            task,
            &["event", "repository", "default_branch"],
        )),
    ]
    .into_iter()
    .flatten()
    {
        if !reads.contains(&r) {
            reads.push(r);
        }
    }
    if reads.iter().any(|r| r.len() > MAX_REF || r.contains('\n')) {
        return Err(format!(
            "task {id}'s ref or base ref is not one the cache can hold"
        ));
    }
    let mut token_digests: Vec<String> = RUNTIME_TOKENS
        .iter()
        .filter_map(|name| context_str(task, name))
        .map(token_digest)
        .collect();
    token_digests.dedup();
    if token_digests.is_empty() {
        return Err(format!(
            "task {id} has no runtime token in its context, so its cache calls could not be authenticated"
        ));
    }
    Ok(TaskCache {
        scope: Scope {
            repository,
            write,
            reads,
        },
        token_digests,
    })
}

fn signed(body: &str) -> String {
    format!("cache:{body}")
}

/// The grant of one task attempt, valid until `expires` (unix seconds).
pub fn mint(
    key: &CapabilityKey,
    task: TaskId,
    attempt: u32,
    expires: i64,
    t: &TaskCache,
) -> String {
    let body = format!(
        "{task}.{attempt}.{expires}.{}.{}",
        URL_SAFE_NO_PAD.encode(scope_text(&t.scope)),
        t.token_digests.join("-")
    );
    format!("{body}.{}", key.mac_hex(&signed(&body)))
}

/// The grant `presented` proves, at `now` (unix seconds).
pub fn verify(key: &CapabilityKey, presented: &str, now: i64) -> Result<Grant, Denied> {
    if presented.len() > MAX_GRANT {
        return Err(Denied::Forged);
    }
    let (body, mac) = presented.rsplit_once('.').ok_or(Denied::Forged)?;
    if !key.verify_hex(&signed(body), mac) {
        return Err(Denied::Forged);
    }
    // Genuine from here: we wrote every field, so a field that fails to parse is a grant of
    // an older format, not an attack.
    let fields: Vec<&str> = body.split('.').collect();
    let [task, attempt, expires, scope, tokens] = fields[..] else {
        return Err(Denied::Forged);
    };
    let task: TaskId = task.parse().map_err(|_| Denied::Forged)?;
    let attempt: u32 = attempt.parse().map_err(|_| Denied::Forged)?;
    let expires: i64 = expires.parse().map_err(|_| Denied::Forged)?;
    let scope = URL_SAFE_NO_PAD
        .decode(scope)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| parse_scope(&s))
        .ok_or(Denied::Forged)?;
    let token_digests: Vec<String> = tokens.split('-').map(str::to_string).collect();
    if token_digests.len() > MAX_TOKENS {
        return Err(Denied::Forged);
    }
    if now >= expires {
        return Err(Denied::Expired(expires));
    }
    Ok(Grant {
        task,
        attempt,
        scope,
        token_digests,
        body: body.to_string(),
    })
}

impl Grant {
    /// Whether `bearer` (the call's `Authorization: Bearer` token) is the grant's task's.
    pub fn admits(&self, bearer: Option<&str>) -> Result<(), Denied> {
        let presented = token_digest(bearer.ok_or(Denied::NoToken)?);
        let known = self.token_digests.iter().fold(false, |found, d| {
            found
                | bool::from(subtle::ConstantTimeEq::ct_eq(
                    d.as_bytes(),
                    presented.as_bytes(),
                ))
        });
        if known {
            Ok(())
        } else {
            Err(Denied::WrongToken)
        }
    }

    fn ticket_input(&self, entry: u64, expires: i64) -> String {
        format!("cache-download:{}:{entry}:{expires}", self.body)
    }

    /// A download ticket for `entry`, valid until `expires` (unix seconds).
    pub fn ticket(&self, key: &CapabilityKey, entry: u64, expires: i64) -> String {
        format!(
            "{expires}.{}",
            key.mac_hex(&self.ticket_input(entry, expires))
        )
    }

    /// Whether `ticket` lets this grant's holder download `entry` at `now`.
    pub fn admits_download(
        &self,
        key: &CapabilityKey,
        entry: u64,
        ticket: Option<&str>,
        now: i64,
    ) -> Result<(), Denied> {
        let (expires, mac) = ticket
            .and_then(|t| t.split_once('.'))
            .ok_or(Denied::NoTicket)?;
        let expires: i64 = expires.parse().map_err(|_| Denied::NoTicket)?;
        if now < expires && key.verify_hex(&self.ticket_input(entry, expires), mac) {
            Ok(())
        } else {
            Err(Denied::NoTicket)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantci_core::forge::gitea::json::struct_from_json;

    fn task(context: serde_json::Value) -> Task {
        let serde_json::Value::Object(map) = context else {
            panic!("an object")
        };
        Task {
            id: 7,
            context: Some(struct_from_json(map)),
            ..Default::default()
        }
    }

    fn pull_request() -> Task {
        task(serde_json::json!({
            "repository": "Acme/Widgets",
            "ref": "refs/pull/3/head",
            "base_ref": "release",
            "event": {"repository": {"default_branch": "main"}},
            "gitea_runtime_token": "rt",
            "token": "tt",
        }))
    }

    #[test]
    fn a_pull_request_saves_under_its_ref_and_restores_from_its_base_and_the_default_branch() {
        let t = task_cache(&pull_request()).unwrap();
        assert_eq!(
            t.scope,
            Scope {
                repository: "acme/widgets".into(),
                write: "refs/pull/3/head".into(),
                reads: vec![
                    "refs/pull/3/head".into(),
                    "refs/heads/release".into(),
                    "refs/heads/main".into()
                ],
            }
        );
        // A push to the default branch reads its own ref once.
        let push = task(serde_json::json!({
            "repository": "acme/widgets", "ref": "refs/heads/main",
            "event": {"repository": {"default_branch": "main"}}, "token": "tt",
        }));
        assert_eq!(
            task_cache(&push).unwrap().scope.reads,
            vec!["refs/heads/main".to_string()]
        );
        let no_token = task(serde_json::json!({"repository": "acme/widgets"}));
        assert!(task_cache(&no_token).unwrap_err().contains("runtime token"));
        let no_repo = task(serde_json::json!({"token": "tt"}));
        assert!(task_cache(&no_repo).unwrap_err().contains("no repository"));
    }

    #[test]
    fn a_grant_opens_nothing_without_its_task_s_token_or_after_it_expires() {
        let key = CapabilityKey::generate();
        let t = task_cache(&pull_request()).unwrap();
        let grant = mint(&key, TaskId::new(7), 1, 1000, &t);
        let g = verify(&key, &grant, 999).unwrap();
        assert_eq!((g.task, g.attempt, &g.scope), (TaskId::new(7), 1, &t.scope));
        g.admits(Some("rt")).unwrap();
        g.admits(Some("tt")).unwrap();
        assert_eq!(g.admits(None), Err(Denied::NoToken));
        assert_eq!(g.admits(Some("another")), Err(Denied::WrongToken));
        assert_eq!(verify(&key, &grant, 1000), Err(Denied::Expired(1000)));
        // Any field changed, another key, garbage: forged.
        let (body, mac) = grant.rsplit_once('.').unwrap();
        let other = URL_SAFE_NO_PAD.encode("acme/other\nrefs/heads/main\nrefs/heads/main");
        let fields: Vec<&str> = body.split('.').collect();
        let moved = format!("7.1.1000.{other}.{}.{mac}", fields[4]);
        assert_eq!(verify(&key, &moved, 0), Err(Denied::Forged));
        let later = grant.replacen(".1000.", ".9999.", 1);
        assert_eq!(verify(&key, &later, 0), Err(Denied::Forged));
        assert_eq!(
            verify(&CapabilityKey::generate(), &grant, 0),
            Err(Denied::Forged)
        );
        assert_eq!(verify(&key, "", 0), Err(Denied::Forged));
        assert_eq!(verify(&key, &format!("{grant}.x"), 0), Err(Denied::Forged));
        // Never a capability: the inputs differ.
        assert_ne!(mac, key.token(TaskId::new(7), 1));
    }

    #[test]
    fn a_download_ticket_opens_one_entry_of_one_grant_for_a_while() {
        let key = CapabilityKey::generate();
        let t = task_cache(&pull_request()).unwrap();
        let g = verify(&key, &mint(&key, TaskId::new(7), 1, 5000, &t), 0).unwrap();
        let ticket = g.ticket(&key, 42, 100);
        g.admits_download(&key, 42, Some(&ticket), 99).unwrap();
        assert_eq!(
            g.admits_download(&key, 42, Some(&ticket), 100),
            Err(Denied::NoTicket)
        );
        assert!(g.admits_download(&key, 43, Some(&ticket), 0).is_err());
        assert!(g.admits_download(&key, 42, None, 0).is_err());
        let other = verify(&key, &mint(&key, TaskId::new(8), 1, 5000, &t), 0).unwrap();
        assert!(other.admits_download(&key, 42, Some(&ticket), 0).is_err());
    }
}
