//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/<group>`, and the resource lists with
//! verbs, scope, short names and subresources (the legacy, non-aggregated forms, which kubectl
//! and kube-rs accept).

use serde_json::{Value, json};

use super::registry::{self, ResourceDef};

/// `GET /version`: a fixed v1.32 version document naming the simulator.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-tenantci-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `GET /api`: the core group's one version, served at `server_address`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_doc(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `GET /apis`: every named group of `registry` with its version.
pub fn groups(registry: &'static [ResourceDef]) -> Value {
    let groups: Vec<Value> = registry::groups(registry)
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, v)| group_doc(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<name>`: that group's document, if `registry` serves it.
pub fn group(registry: &'static [ResourceDef], name: &str) -> Option<Value> {
    registry::groups(registry)
        .into_iter()
        .find(|(g, _)| *g == name && !g.is_empty())
        .map(|(g, v)| {
            let mut doc = group_doc(g, v);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

fn sub_verbs(sub: &str) -> &'static [&'static str] {
    match sub {
        "status" => &["get", "patch", "update"],
        "log" => &["get"],
        "exec" | "attach" | "portforward" => &["create", "get"],
        _ => &[],
    }
}

/// `GET /api/v1` or `/apis/<group>/<version>`: the resources served there, each subresource its own
/// entry; None when nothing is.
pub fn resource_list(
    registry: &'static [ResourceDef],
    group: &str,
    version: &str,
) -> Option<Value> {
    let defs: Vec<&ResourceDef> = registry
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in defs {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": d.verbs,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        resources.push(r);
        for sub in d.subresources {
            let kind = match *sub {
                "log" | "exec" | "attach" => "PodExecOptions",
                "portforward" => "PodPortForwardOptions",
                _ => d.kind,
            };
            resources.push(json!({
                "name": format!("{}/{sub}", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": if *sub == "log" { "Pod" } else { kind },
                "verbs": sub_verbs(sub),
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
