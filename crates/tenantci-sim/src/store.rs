//! The in-memory object store: one table per resource, one global resourceVersion counter,
//! and a bounded event history that watches replay from.
//!
//! Invariants: every write bumps the counter and stamps `metadata.resourceVersion` with it;
//! events are appended (and broadcast) under the same lock as the write, so a watcher that
//! subscribes under that lock sees every change after its starting version exactly once.
//! The store itself does no I/O: `persist` saves a [`Store::snapshot`] and builds a store back
//! with [`Store::restore`], whose version continues where the saved one ended.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, RwLock};

use serde_json::Value;
use tokio::sync::broadcast;

/// How many events a watch can start behind the head before it gets 410 Expired.
const HISTORY: usize = 10_000;
const CHANNEL: usize = 16_384;

/// What a change did to an object, as a watch event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

impl EventType {
    /// The watch event's `type`: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watches replay and receive it.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion the change got.
    pub rv: u64,
    /// The resource (store key) changed.
    pub resource: &'static str,
    /// The object's namespace ("" for a cluster-scoped object).
    pub namespace: String,
    /// What the change did.
    pub kind: EventType,
    /// The object after the change (for a deletion: as it was, at the new version).
    pub object: Arc<Value>,
}

/// An object's key in its table: (namespace, name), namespace "" when cluster-scoped.
pub type Key = (String, String);
/// One object with its resource and key, as a snapshot lists it.
pub type Stored = (&'static str, Key, Arc<Value>);
type Table = BTreeMap<Key, Arc<Value>>;

struct Inner {
    rv: u64,
    tables: HashMap<&'static str, Table>,
    history: VecDeque<Arc<Event>>,
    /// Versions at or below this are no longer in `history`.
    compacted: u64,
}

/// Past events to replay and the receiver for the ones after them.
pub type Replay = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>);

/// Why a watch cannot start.
#[derive(Debug)]
pub struct TooOld {
    /// The oldest version a watch can start from now.
    pub oldest: u64,
}

/// The object store of one apiserver; see the module header for its invariants.
pub struct Store {
    inner: RwLock<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
    /// Last version at which each resource changed (RBAC caching keys off it).
    changed: RwLock<HashMap<&'static str, u64>>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

impl Store {
    /// An empty store at version 1.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CHANNEL);
        Store {
            inner: RwLock::new(Inner {
                rv: 1,
                tables: HashMap::new(),
                history: VecDeque::new(),
                compacted: 1,
            }),
            tx,
            changed: RwLock::new(HashMap::new()),
        }
    }

    /// The current resourceVersion (the last write's).
    pub fn resource_version(&self) -> u64 {
        self.inner.read().unwrap().rv
    }

    /// The version at which `resource` last changed (0: never).
    pub fn changed_at(&self, resource: &str) -> u64 {
        self.changed
            .read()
            .unwrap()
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// Object `name` of `resource` in namespace `ns` ("" for cluster scope), if stored.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.inner.read().unwrap();
        inner
            .tables
            .get(resource)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of `resource` (in namespace `ns` if given) sorted by (namespace, name), with the
    /// version the snapshot was taken at.
    pub fn list(&self, resource: &str, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.inner.read().unwrap();
        let items = match inner.tables.get(resource) {
            None => Vec::new(),
            Some(t) => match ns {
                None => t.values().cloned().collect(),
                Some(ns) => t
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, inner.rv)
    }

    fn record(
        &self,
        inner: &mut Inner,
        resource: &'static str,
        ns: &str,
        kind: EventType,
        obj: Arc<Value>,
    ) {
        let ev = Arc::new(Event {
            rv: inner.rv,
            resource,
            namespace: ns.to_string(),
            kind,
            object: obj,
        });
        inner.history.push_back(ev.clone());
        while inner.history.len() > HISTORY {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
        self.changed.write().unwrap().insert(resource, inner.rv);
        let _ = self.tx.send(ev);
    }

    /// Inserts a new object; `Err(existing)` if the name is taken.
    pub fn create(
        &self,
        resource: &'static str,
        ns: &str,
        name: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, Arc<Value>> {
        let mut inner = self.inner.write().unwrap();
        let key = (ns.to_string(), name.to_string());
        if let Some(existing) = inner.tables.get(resource).and_then(|t| t.get(&key)) {
            return Err(existing.clone());
        }
        inner.rv += 1;
        set_rv(&mut obj, inner.rv);
        let obj = Arc::new(obj);
        inner
            .tables
            .entry(resource)
            .or_default()
            .insert(key, obj.clone());
        self.record(&mut inner, resource, ns, EventType::Added, obj.clone());
        Ok(obj)
    }

    /// Read-modify-write under the write lock. `f` gets the current object (None if absent)
    /// and returns the new one; returning the current value unchanged writes nothing.
    pub fn update<E>(
        &self,
        resource: &'static str,
        ns: &str,
        name: &str,
        f: impl FnOnce(Option<&Value>) -> Result<Value, E>,
    ) -> Result<(Arc<Value>, bool), E> {
        let mut inner = self.inner.write().unwrap();
        let key = (ns.to_string(), name.to_string());
        let current = inner
            .tables
            .get(resource)
            .and_then(|t| t.get(&key))
            .cloned();
        let mut new = f(current.as_deref())?;
        if let Some(cur) = &current
            && **cur == new
        {
            return Ok((cur.clone(), false));
        }
        inner.rv += 1;
        set_rv(&mut new, inner.rv);
        let new = Arc::new(new);
        inner
            .tables
            .entry(resource)
            .or_default()
            .insert(key, new.clone());
        let kind = if current.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(&mut inner, resource, ns, kind, new.clone());
        Ok((new, current.is_none()))
    }

    /// Removes an object after `check` approves the current value.
    pub fn delete<E>(
        &self,
        resource: &'static str,
        ns: &str,
        name: &str,
        check: impl FnOnce(Option<&Value>) -> Result<(), E>,
    ) -> Result<Arc<Value>, E> {
        let mut inner = self.inner.write().unwrap();
        let key = (ns.to_string(), name.to_string());
        let current = inner
            .tables
            .get(resource)
            .and_then(|t| t.get(&key))
            .cloned();
        check(current.as_deref())?;
        let current = current.expect("check refuses a missing object");
        inner.tables.get_mut(resource).map(|t| t.remove(&key));
        inner.rv += 1;
        let mut gone = (*current).clone();
        set_rv(&mut gone, inner.rv);
        let gone = Arc::new(gone);
        self.record(&mut inner, resource, ns, EventType::Deleted, gone.clone());
        Ok(gone)
    }

    /// Deletes every namespaced object in `ns` (namespace deletion).
    pub fn delete_namespace_contents(&self, ns: &str) {
        let mut inner = self.inner.write().unwrap();
        let resources: Vec<&'static str> = inner.tables.keys().copied().collect();
        for resource in resources {
            let keys: Vec<Key> = inner.tables[resource]
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                if let Some(obj) = inner.tables.get_mut(resource).and_then(|t| t.remove(&key)) {
                    inner.rv += 1;
                    let mut gone = (*obj).clone();
                    set_rv(&mut gone, inner.rv);
                    self.record(&mut inner, resource, ns, EventType::Deleted, Arc::new(gone));
                }
            }
        }
    }

    /// Events after `since` still in history plus a receiver for later ones, taken atomically.
    pub fn watch_from(&self, since: u64) -> Result<Replay, TooOld> {
        let inner = self.inner.read().unwrap();
        if since < inner.compacted {
            return Err(TooOld {
                oldest: inner.compacted,
            });
        }
        let rx = self.tx.subscribe();
        let past = inner
            .history
            .iter()
            .filter(|e| e.rv > since)
            .cloned()
            .collect();
        Ok((past, rx))
    }

    /// Every object with the version the copy was taken at (objects shared, not copied).
    pub fn snapshot(&self) -> (u64, Vec<Stored>) {
        let inner = self.inner.read().unwrap();
        let objects = inner
            .tables
            .iter()
            .flat_map(|(resource, t)| t.iter().map(|(k, v)| (*resource, k.clone(), v.clone())))
            .collect();
        (inner.rv, objects)
    }

    /// A store holding `objects` at version `rv`, as after a restart: new writes continue after
    /// `rv`, and a watch from before it is too old (410 Gone, the client lists again), as
    /// kube-apiserver answers after etcd compacted.
    pub fn restore(rv: u64, objects: Vec<(&'static str, Key, Value)>) -> Self {
        let store = Store::new();
        {
            let mut inner = store.inner.write().unwrap();
            let mut changed = store.changed.write().unwrap();
            inner.rv = rv;
            inner.compacted = rv;
            for (resource, key, obj) in objects {
                changed.insert(resource, rv);
                inner
                    .tables
                    .entry(resource)
                    .or_default()
                    .insert(key, Arc::new(obj));
            }
        }
        store
    }

    /// What a kube-apiserver restart leaves a client with: its watch cache starts at etcd's
    /// current revision, which has moved on meanwhile, so a watch from any version served
    /// before is too old (410 Gone) and the client lists again. Objects stay.
    pub fn forget_history(&self) {
        let mut inner = self.inner.write().unwrap();
        inner.rv += 1;
        inner.compacted = inner.rv;
        inner.history.clear();
    }

    /// A receiver of every change from now on (the persister's wake-up).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Current objects of a resource and a receiver, taken atomically (watch without a version).
    pub fn snapshot_and_watch(
        &self,
        resource: &str,
        ns: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<Event>>) {
        let inner = self.inner.read().unwrap();
        let rx = self.tx.subscribe();
        drop(inner);
        // Subscribing first and listing after can show an object twice (ADDED from the list, then
        // its event); the watch loop drops events at or below the list version.
        let (items, rv) = self.list(resource, ns);
        (items, rv, rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_bump_the_global_version() {
        let s = Store::new();
        let a = s
            .create("pods", "ns", "a", json!({"metadata": {"name": "a"}}))
            .unwrap();
        let b = s
            .create("configmaps", "ns", "b", json!({"metadata": {"name": "b"}}))
            .unwrap();
        let rv = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        assert!(rv(&b) > rv(&a));
        assert!(
            s.create("pods", "ns", "a", json!({"metadata": {}}))
                .is_err()
        );
        let (past, _rx) = s.watch_from(rv(&a) - 1).unwrap();
        assert_eq!(past.len(), 2);
    }

    #[test]
    fn a_watch_behind_the_history_is_too_old() {
        let s = Store::new();
        for i in 0..HISTORY + 5 {
            s.create(
                "configmaps",
                "ns",
                &format!("c{i}"),
                json!({"metadata": {}}),
            )
            .unwrap();
        }
        assert!(s.watch_from(1).is_err());
        assert!(s.watch_from(s.resource_version() - 10).is_ok());
    }

    #[test]
    fn a_restored_store_continues_its_versions_and_refuses_older_watches() {
        let s = Store::new();
        s.create("pods", "ns", "a", json!({"metadata": {"name": "a"}}))
            .unwrap();
        let (rv, objects) = s.snapshot();
        let objects = objects
            .into_iter()
            .map(|(r, k, v)| (r, k, (*v).clone()))
            .collect();
        let r = Store::restore(rv, objects);
        assert_eq!(r.resource_version(), rv);
        assert!(r.get("pods", "ns", "a").is_some());
        assert!(r.watch_from(rv - 1).is_err(), "older than the restart: 410");
        assert!(r.watch_from(rv).is_ok());
        let b = r
            .create("pods", "ns", "b", json!({"metadata": {"name": "b"}}))
            .unwrap();
        assert_eq!(b["metadata"]["resourceVersion"], (rv + 1).to_string());
        assert_eq!(r.changed_at("pods"), rv + 1);
    }

    #[test]
    fn namespace_contents_go_with_it() {
        let s = Store::new();
        s.create("pods", "x", "a", json!({"metadata": {}})).unwrap();
        s.create("pods", "y", "a", json!({"metadata": {}})).unwrap();
        s.delete_namespace_contents("x");
        assert_eq!(s.list("pods", None).0.len(), 1);
    }
}
