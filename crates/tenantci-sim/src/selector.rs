//! Label and field selectors as kube-apiserver parses them (`labelSelector`, `fieldSelector`
//! query parameters). Parsing fails with the message kube-apiserver uses; matching is pure.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set(values: &str) -> Option<Vec<String>> {
    let v = values.trim();
    let inner = v.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parses a `labelSelector` (`a=b,c!=d,e in (f,g),!h`); the error is kube-apiserver's message.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for term in split_top(s) {
            let t = term.trim();
            let bad = || format!("unable to parse requirement: found '{t}', expected: identifier");
            if t.is_empty() {
                return Err(bad());
            }
            let req = if let Some((k, v)) = t.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some(k) = t.strip_prefix('!') {
                Req::NotExists(k.trim().into())
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set(rest).ok_or_else(bad)?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                Req::In(k.trim().into(), set(rest).ok_or_else(bad)?)
            } else if t.contains(' ') || t.contains('(') {
                return Err(bad());
            } else {
                Req::Exists(t.into())
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `obj`'s labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v),
            Req::Ne(k, v) => get(k) != Some(v),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector over the fields a resource supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields kube-apiserver lets you select on, per resource key.
fn supported(resource: &str) -> &'static [&'static str] {
    match resource {
        "pods" => &[
            "spec.nodeName",
            "status.phase",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "events" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "source",
            "type",
        ],
        "secrets" => &["type"],
        "namespaces" => &["status.phase"],
        "nodes" => &["spec.unschedulable"],
        _ => &[],
    }
}

fn field_value(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for part in path.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector` for `resource`: `=`, `==` or `!=` terms over `metadata.name`,
    /// `metadata.namespace` or the fields the resource supports; the error is kube-apiserver's
    /// message.
    pub fn parse(s: &str, resource: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for term in s.split(',') {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                ));
            };
            let k = k.trim();
            if k != "metadata.name"
                && k != "metadata.namespace"
                && !supported(resource).contains(&k)
            {
                return Err(format!("field label not supported: {k}"));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether `obj`'s fields satisfy every term.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }

    /// The name this selector pins, if any (kubectl's `get pod x --watch` sends it).
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let o = json!({"metadata": {"labels": {"app": "a", "tier": "web"}}});
        for (sel, want) in [
            ("app=a", true),
            ("app==a,tier=web", true),
            ("app!=a", false),
            ("app in (a,b)", true),
            ("app notin (a)", false),
            ("tier", true),
            ("!tier", false),
            ("missing", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}, "spec": {"nodeName": "n"}});
        let f = FieldSelector::parse("status.phase=Running,spec.nodeName!=x", "pods").unwrap();
        assert!(f.matches(&o));
        assert!(
            !FieldSelector::parse("metadata.name=q", "pods")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=1", "pods").unwrap_err(),
            "field label not supported: spec.foo"
        );
    }
}
