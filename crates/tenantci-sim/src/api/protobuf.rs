//! Protobuf request bodies of kubectl's typed generators (`kubectl create deployment`,
//! `create configmap|secret|namespace|serviceaccount`), which always send
//! `application/vnd.kubernetes.protobuf`. Decoded by hand into the JSON the rest of the
//! server handles, from tables of the k8s.io/api `generated.proto` field numbers for the fields
//! those generators set; other fields are skipped. Answers stay JSON, which client-go accepts.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::authz::proto::{self, Field};

/// How one protobuf field becomes JSON.
enum Ty {
    Str,
    /// An int kept only when non-zero (Go's non-pointer ints, `omitempty`).
    Int,
    /// A pointer int: present means set, zero included.
    IntPtr,
    Bool,
    Msg(&'static [Fld]),
    RepStr,
    RepMsg(&'static [Fld]),
    StrMap,
    BytesMap,
}

type Fld = (u64, &'static str, Ty);

const OBJECT_META: &[Fld] = &[
    (1, "name", Ty::Str),
    (2, "generateName", Ty::Str),
    (3, "namespace", Ty::Str),
    (11, "labels", Ty::StrMap),
    (12, "annotations", Ty::StrMap),
    (14, "finalizers", Ty::RepStr),
];
const LABEL_SELECTOR: &[Fld] = &[(1, "matchLabels", Ty::StrMap)];
const CONTAINER_PORT: &[Fld] = &[
    (1, "name", Ty::Str),
    (3, "containerPort", Ty::Int),
    (4, "protocol", Ty::Str),
];
const ENV_VAR: &[Fld] = &[(1, "name", Ty::Str), (2, "value", Ty::Str)];
const CONTAINER: &[Fld] = &[
    (1, "name", Ty::Str),
    (2, "image", Ty::Str),
    (3, "command", Ty::RepStr),
    (4, "args", Ty::RepStr),
    (5, "workingDir", Ty::Str),
    (6, "ports", Ty::RepMsg(CONTAINER_PORT)),
    (7, "env", Ty::RepMsg(ENV_VAR)),
    (8, "resources", Ty::Msg(&[])),
    (14, "imagePullPolicy", Ty::Str),
];
const POD_SPEC: &[Fld] = &[
    (2, "containers", Ty::RepMsg(CONTAINER)),
    (3, "restartPolicy", Ty::Str),
    (4, "terminationGracePeriodSeconds", Ty::IntPtr),
    (6, "dnsPolicy", Ty::Str),
    (7, "nodeSelector", Ty::StrMap),
    (8, "serviceAccountName", Ty::Str),
    (20, "initContainers", Ty::RepMsg(CONTAINER)),
    (24, "priorityClassName", Ty::Str),
];
const POD_TEMPLATE_SPEC: &[Fld] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "spec", Ty::Msg(POD_SPEC)),
];
const DEPLOYMENT_STRATEGY: &[Fld] = &[(1, "type", Ty::Str)];
const DEPLOYMENT_SPEC: &[Fld] = &[
    (1, "replicas", Ty::IntPtr),
    (2, "selector", Ty::Msg(LABEL_SELECTOR)),
    (3, "template", Ty::Msg(POD_TEMPLATE_SPEC)),
    (4, "strategy", Ty::Msg(DEPLOYMENT_STRATEGY)),
    (5, "minReadySeconds", Ty::Int),
    (6, "revisionHistoryLimit", Ty::IntPtr),
    (7, "paused", Ty::Bool),
    (9, "progressDeadlineSeconds", Ty::IntPtr),
];
const DEPLOYMENT: &[Fld] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "spec", Ty::Msg(DEPLOYMENT_SPEC)),
];
const CONFIG_MAP: &[Fld] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "data", Ty::StrMap),
    (3, "binaryData", Ty::BytesMap),
    (4, "immutable", Ty::Bool),
];
const SECRET: &[Fld] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (2, "data", Ty::BytesMap),
    (3, "type", Ty::Str),
    (4, "stringData", Ty::StrMap),
    (5, "immutable", Ty::Bool),
];
const NAMESPACE: &[Fld] = &[(1, "metadata", Ty::Msg(OBJECT_META))];
const SERVICE_ACCOUNT: &[Fld] = &[
    (1, "metadata", Ty::Msg(OBJECT_META)),
    (4, "automountServiceAccountToken", Ty::Bool),
];

fn message_type(api_version: &str, kind: &str) -> Option<&'static [Fld]> {
    Some(match (api_version, kind) {
        ("apps/v1", "Deployment") => DEPLOYMENT,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        _ => return None,
    })
}

fn map_entry(msg: &[u8], bytes: bool) -> Result<(String, Value), String> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    proto::fields(msg, |n, f| {
        match n {
            1 => k = proto::string(f, "map key")?,
            2 if bytes => {
                let b = proto::message(f, "map value")?;
                v = json!(base64::engine::general_purpose::STANDARD.encode(b));
            }
            2 => v = json!(proto::string(f, "map value")?),
            _ => {}
        }
        Ok(())
    })?;
    Ok((k, v))
}

fn varint(f: Field<'_>, what: &str) -> Result<u64, String> {
    match f {
        Field::Varint(v) => Ok(v),
        _ => Err(format!("{what}: expected a varint")),
    }
}

fn decode(msg: &[u8], table: &'static [Fld]) -> Result<Value, String> {
    let mut out = Map::new();
    proto::fields(msg, |n, f| {
        let Some((_, name, ty)) = table.iter().find(|(num, _, _)| *num == n) else {
            return Ok(());
        };
        let key = (*name).to_string();
        match ty {
            Ty::Str => {
                let s = proto::string(f, name)?;
                if !s.is_empty() {
                    out.insert(key, json!(s));
                }
            }
            Ty::Int | Ty::IntPtr => {
                // int32/int64 as varints: negative numbers are two's complement in 64 bits.
                let v = varint(f, name)? as i64;
                if v != 0 || matches!(ty, Ty::IntPtr) {
                    out.insert(key, json!(v));
                }
            }
            Ty::Bool => {
                if varint(f, name)? != 0 {
                    out.insert(key, json!(true));
                }
            }
            Ty::Msg(t) => {
                out.insert(key, decode(proto::message(f, name)?, t)?);
            }
            Ty::RepStr => {
                let s = proto::string(f, name)?;
                push(&mut out, key, json!(s));
            }
            Ty::RepMsg(t) => {
                let v = decode(proto::message(f, name)?, t)?;
                push(&mut out, key, v);
            }
            Ty::StrMap | Ty::BytesMap => {
                let (k, v) = map_entry(proto::message(f, name)?, matches!(ty, Ty::BytesMap))?;
                let m = out.entry(key).or_insert_with(|| json!({}));
                m[k] = v;
            }
        }
        Ok(())
    })?;
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, key: String, v: Value) {
    if let Value::Array(a) = out.entry(key).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

/// The JSON object of a protobuf body (`k8s\0` + runtime.Unknown), for the kinds kubectl's
/// generators create; `Err` names what is not supported.
pub fn decode_object(body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(proto::MAGIC.as_slice())
        .ok_or("body does not start with the Kubernetes protobuf magic k8s\\0")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    proto::fields(unknown, |n, f| {
        match n {
            1 => proto::fields(proto::message(f, "typeMeta")?, |n, f| {
                match n {
                    1 => api_version = proto::string(f, "typeMeta.apiVersion")?,
                    2 => kind = proto::string(f, "typeMeta.kind")?,
                    _ => {}
                }
                Ok(())
            })?,
            2 => raw = Some(proto::message(f, "raw")?),
            3 => {
                let enc = proto::string(f, "contentEncoding")?;
                if !enc.is_empty() {
                    return Err(format!("unsupported contentEncoding {enc:?}"));
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    let table = message_type(&api_version, &kind).ok_or_else(|| {
        format!("protobuf bodies of {kind} ({api_version}) are not supported by the simulator; send JSON or YAML")
    })?;
    let mut obj = decode(raw.unwrap_or_default(), table)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, (n << 3) | 2);
        put_varint(&mut out, payload.len() as u64);
        out.extend_from_slice(payload);
        out
    }

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn entry(k: &str, v: &str) -> Vec<u8> {
        [len_field(1, k.as_bytes()), len_field(2, v.as_bytes())].concat()
    }

    #[test]
    fn decodes_a_deployment_as_kubectl_create_deployment_sends_it() {
        let meta = [len_field(1, b"web"), len_field(11, &entry("app", "web"))].concat();
        let container = [
            len_field(1, b"pause"),
            len_field(2, b"registry.k8s.io/pause:3.10"),
        ]
        .concat();
        let pod_spec = len_field(2, &container);
        let template = [
            len_field(1, &len_field(11, &entry("app", "web"))),
            len_field(2, &pod_spec),
        ]
        .concat();
        let mut spec = vec![1 << 3];
        put_varint(&mut spec, 1);
        spec.extend(len_field(2, &len_field(1, &entry("app", "web"))));
        spec.extend(len_field(3, &template));
        spec.extend(len_field(4, &[]));
        let raw = [len_field(1, &meta), len_field(2, &spec), len_field(3, &[])].concat();
        let type_meta = [len_field(1, b"apps/v1"), len_field(2, b"Deployment")].concat();
        let body = [
            proto::MAGIC.as_slice(),
            &len_field(1, &type_meta),
            &len_field(2, &raw),
        ]
        .concat();
        let obj = decode_object(&body).unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "strategy": {},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}},
            })
        );
    }

    #[test]
    fn refuses_kinds_it_does_not_know() {
        let type_meta = [len_field(1, b"v1"), len_field(2, b"Pod")].concat();
        let body = [proto::MAGIC.as_slice(), &len_field(1, &type_meta)].concat();
        assert!(decode_object(&body).unwrap_err().contains("Pod (v1)"));
    }
}
