//! One `kube::Client` for the whole dispatcher whose credential can be replaced while it runs.
//!
//! The backends, the election and the term each hold clones of the client they were given at
//! start, so a renewed credential cannot be handed to them one by one. Instead they all hold
//! [`SwappableClient::client`]: a `kube::Client` whose service forwards each request to the
//! client currently in the slot. [`SwappableClient::swap`] puts a client built from the
//! renewed kubeconfig there; requests in flight (watches included) finish on the old one, every
//! later request goes out with the new credential.
//!
//! Errors come back unchanged: `kube::Client::send` boxes the inner client's `kube::Error` and
//! the outer client unboxes it again, so `Api` callers see the same error kinds as before.

use std::sync::{Arc, RwLock};

/// The slot, and the forwarding client every part of the dispatcher uses.
#[derive(Clone)]
pub struct SwappableClient {
    current: Arc<RwLock<kube::Client>>,
    outer: kube::Client,
}

impl SwappableClient {
    /// The slot holding `initial`, and the forwarding client over it (in `initial`'s default
    /// namespace).
    pub fn new(initial: kube::Client) -> Self {
        let namespace = initial.default_namespace().to_string();
        let current = Arc::new(RwLock::new(initial));
        let slot = current.clone();
        let forward = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let inner = slot.read().unwrap_or_else(|p| p.into_inner()).clone();
            async move { inner.send(request).await }
        });
        SwappableClient {
            current,
            outer: kube::Client::new(forward, namespace),
        }
    }

    /// The client to hand out: it always sends with the credential currently in the slot.
    pub fn client(&self) -> kube::Client {
        self.outer.clone()
    }

    /// From now on, requests go out through `next`.
    pub fn swap(&self, next: kube::Client) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A client whose transport answers every request with an empty ConfigMap and counts the
    /// requests: only the forwarding is under test here (the integration test
    /// `dispatch::renew` runs the swap against the simulator's apiserver).
    fn counting(calls: Arc<AtomicUsize>) -> kube::Client {
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#;
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    body.as_bytes().to_vec(),
                )))
            }
        });
        kube::Client::new(svc, "ns")
    }

    #[tokio::test]
    async fn requests_go_to_the_client_in_the_slot_from_the_swap_on() {
        let (old, new) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let s = SwappableClient::new(counting(old.clone()));
        let held = s.client(); // as the backends hold it, cloned at start
        let get = |c: kube::Client| async move {
            kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(c, "ns")
                .get("x")
                .await
                .unwrap()
        };
        get(held.clone()).await;
        assert_eq!(
            (old.load(Ordering::SeqCst), new.load(Ordering::SeqCst)),
            (1, 0)
        );
        s.swap(counting(new.clone()));
        get(held).await;
        assert_eq!(
            (old.load(Ordering::SeqCst), new.load(Ordering::SeqCst)),
            (1, 1)
        );
        assert_eq!(s.client().default_namespace(), "ns");
    }
}
