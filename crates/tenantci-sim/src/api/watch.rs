//! Watches: `?watch=true` streams `{"type","object"}` lines for changes after the requested
//! resourceVersion (or, without one, ADDED for every current object first). A version older
//! than the store's history gets one ERROR event with a 410 Expired Status, then the stream
//! closes, so clients relist. Bookmarks are sent when asked for (`allowWatchBookmarks`), and
//! after the initial events with `sendInitialEvents=true`. A client asking for metadata only
//! (`Accept: ...;as=PartialObjectMetadata`) gets each object as `PartialObjectMetadata`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::registry::ResourceDef;
use super::request::Shape;
use super::{ApiServer, Reply, Request, table};
use crate::api_error::{ApiError, ApiResult};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::Event;

const BOOKMARK_EVERY: Duration = Duration::from_secs(10);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct Filter {
    def: &'static ResourceDef,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    /// Objects as `PartialObjectMetadata`.
    metadata: bool,
}

impl Filter {
    /// What the request watches: its resource, namespace, selectors and shape.
    fn of(def: &'static ResourceDef, ns: Option<&str>, req: &Request) -> ApiResult<Filter> {
        Ok(Filter {
            def,
            ns: if def.namespaced {
                ns.map(str::to_string)
            } else {
                None
            },
            labels: LabelSelector::parse(req.param("labelSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?,
            fields: FieldSelector::parse(req.param("fieldSelector").unwrap_or(""), def.key)
                .map_err(ApiError::bad_request)?,
            metadata: req.shape() == Shape::Metadata,
        })
    }

    fn matches(&self, ev: &Event) -> bool {
        ev.resource == self.def.key
            && self.ns.as_deref().is_none_or(|n| n == ev.namespace)
            && self.labels.matches(&ev.object)
            && self.fields.matches(&ev.object)
    }

    /// The watch line of one object event, in the shape the client asked for.
    fn event(&self, kind: &str, object: &Value) -> Bytes {
        if self.metadata {
            line(kind, &table::partial(object))
        } else {
            line(kind, object)
        }
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta}),
    )
}

impl ApiServer {
    pub(super) fn watch(
        self: &Arc<Self>,
        def: &'static ResourceDef,
        ns: Option<&str>,
        req: &Request,
    ) -> ApiResult<Reply> {
        let filter = Filter::of(def, ns, req)?;
        let bookmarks = req.flag("allowWatchBookmarks");
        let send_initial = req.flag("sendInitialEvents");
        let timeout = req
            .param("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT);
        let since = req.param("resourceVersion").unwrap_or("0");
        let (tx, rx) = mpsc::channel::<Bytes>(256);
        let mut initial = Vec::new();
        let (rx_events, floor) = if since == "0" || send_initial {
            let (items, rv, events) = self.store.snapshot_and_watch(def.key, filter.ns.as_deref());
            for o in items
                .iter()
                .filter(|o| filter.labels.matches(o) && filter.fields.matches(o))
            {
                initial.push(filter.event("ADDED", o));
            }
            if send_initial {
                initial.push(bookmark(def, rv, true));
            }
            (events, rv)
        } else {
            let since: u64 = since
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {since}")))?;
            match self.store.watch_from(since) {
                Ok((past, events)) => {
                    let mut floor = since;
                    for ev in past.iter().filter(|e| filter.matches(e)) {
                        initial.push(filter.event(ev.kind.as_str(), &ev.object));
                        floor = ev.rv;
                    }
                    if let Some(last) = past.last() {
                        floor = floor.max(last.rv);
                    }
                    (events, floor)
                }
                Err(old) => {
                    let status = ApiError::expired(format!(
                        "too old resource version: {since} ({})",
                        old.oldest
                    ));
                    initial.push(line("ERROR", &status.body));
                    tokio::spawn(async move {
                        for b in initial {
                            let _ = tx.send(b).await;
                        }
                    });
                    return Ok(Reply::Stream(rx));
                }
            }
        };
        tokio::spawn(stream(
            tx,
            initial,
            rx_events,
            self.restarts.subscribe(),
            Follow {
                filter,
                floor,
                timeout,
                bookmarks,
            },
        ));
        Ok(Reply::Stream(rx))
    }
}

/// What a watch follows after its initial events: which objects, from which resource version,
/// for how long, and whether the client asked for bookmarks.
struct Follow {
    filter: Filter,
    floor: u64,
    timeout: Duration,
    bookmarks: bool,
}

/// Sends the initial events, then every matching store event above the floor, until the
/// timeout, the client going away, the apiserver restarting, or the watcher falling behind
/// the store's broadcast.
async fn stream(
    tx: mpsc::Sender<Bytes>,
    initial: Vec<Bytes>,
    mut events: broadcast::Receiver<Arc<Event>>,
    mut restarts: tokio::sync::watch::Receiver<u64>,
    mut f: Follow,
) {
    for b in initial {
        if tx.send(b).await.is_err() {
            return;
        }
    }
    let deadline = tokio::time::sleep(f.timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(BOOKMARK_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            _ = tx.closed() => return,
            _ = restarts.changed() => return,
            _ = tick.tick(), if f.bookmarks => {
                if tx.send(bookmark(f.filter.def, f.floor, false)).await.is_err() {
                    return;
                }
            }
            ev = events.recv() => match ev {
                Ok(ev) => {
                    if ev.rv <= f.floor {
                        continue;
                    }
                    f.floor = ev.rv;
                    if f.filter.matches(&ev) && tx.send(f.filter.event(ev.kind.as_str(), &ev.object)).await.is_err() {
                        return;
                    }
                }
                // A watcher that fell behind is closed; the client re-watches or relists.
                Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}
