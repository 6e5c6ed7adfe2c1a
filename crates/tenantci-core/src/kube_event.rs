//! A Kubernetes Event as one line, as `kubectl describe pod` shows it: what `dispatch explain`
//! prints under an executor Pod and `runner status`/`runner explain` under a GitLab job Pod.

use k8s_openapi::api::core::v1::Event;

/// One event line: `Warning FailedScheduling (default-scheduler): 0/1 nodes are available...`.
/// The source is the reporting component (events.k8s.io/v1 writers), else the legacy source.
pub fn line(e: &Event) -> String {
    let source = e
        .reporting_component
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
        .unwrap_or_default();
    format!(
        "{} {} ({source}): {}",
        e.type_.as_deref().unwrap_or("Normal"),
        e.reason.as_deref().unwrap_or_default(),
        e.message.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EventSource;

    #[test]
    fn the_reporting_component_is_preferred_to_the_legacy_source() {
        let mut e = Event {
            type_: Some("Warning".into()),
            reason: Some("FailedScheduling".into()),
            message: Some("0/1 nodes are available".into()),
            source: Some(EventSource {
                component: Some("default-scheduler".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            line(&e),
            "Warning FailedScheduling (default-scheduler): 0/1 nodes are available"
        );
        e.reporting_component = Some("cluster-autoscaler".into());
        e.type_ = None;
        assert_eq!(
            line(&e),
            "Normal FailedScheduling (cluster-autoscaler): 0/1 nodes are available"
        );
    }
}
