//! Pod placement. Until node rental lands, every pod is bound to one built-in node and set
//! Running as soon as it is created (two writes: bind, then status). This is the one place a
//! later issue replaces with rented nodes.

use serde_json::{Value, json};

use super::api::ApiServer;

/// The built-in node every pod lands on.
pub const NODE_NAME: &str = "sim-node";

pub fn node() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": {
            "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "2", "memory": "2048Mi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "2048Mi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "tenantci sim node"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE_NAME}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-tenantci-sim", "operatingSystem": "linux", "architecture": "amd64"}
        }
    })
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Binds the pod to the built-in node, then marks it Running with ready containers.
pub fn place_pod(api: &ApiServer, ns: &str, name: &str) {
    let bound = api
        .store
        .update("pods", ns, name, |cur| -> Result<Value, ()> {
            let mut p = cur.cloned().ok_or(())?;
            if p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
            {
                return Ok(p);
            }
            p["spec"]["nodeName"] = json!(NODE_NAME);
            p["status"]["conditions"] =
                json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]);
            Ok(p)
        });
    if bound.is_err() {
        return;
    }
    let _ = api.store.update("pods", ns, name, |cur| {
        let mut p = cur.cloned().ok_or(())?;
        let t = now();
        let statuses: Vec<Value> = p["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| json!({
                        "name": c["name"], "image": c["image"], "imageID": "", "ready": true, "started": true,
                        "restartCount": 0, "state": {"running": {"startedAt": t}}
                    }))
                    .collect()
            })
            .unwrap_or_default();
        p["status"] = json!({
            "phase": "Running",
            "qosClass": p["status"]["qosClass"],
            "hostIP": "127.0.0.1",
            "podIP": "10.244.0.10",
            "podIPs": [{"ip": "10.244.0.10"}],
            "startTime": t,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
                {"type": "Initialized", "status": "True", "lastTransitionTime": t},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": t},
                {"type": "Ready", "status": "True", "lastTransitionTime": t}
            ],
            "containerStatuses": statuses,
        });
        Ok::<_, ()>(p)
    });
}
