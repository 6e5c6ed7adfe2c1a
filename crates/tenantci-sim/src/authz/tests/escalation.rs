//! Escalation prevention on RBAC writes.

use super::*;

#[test]
fn role_writes_need_held_rules_or_escalate() {
    let user = alice();
    let none = escalation_fixture(vec![]);
    let covered = to_json(
        &role(
            "team",
            "new",
            vec![rule(&["get"], &[""], &["pods", "secrets"])],
        ),
        "Role",
    );
    let wider = to_json(
        &role(
            "team",
            "new",
            vec![rule(&["get", "delete"], &[""], &["pods"])],
        ),
        "Role",
    );
    let exec = to_json(
        &role(
            "team",
            "new",
            vec![rule(&["create"], &[""], &["pods/exec"])],
        ),
        "Role",
    );
    let named = to_json(
        &role(
            "team",
            "new",
            vec![named_rule(&["get"], &[""], &["secrets"], &["s1"])],
        ),
        "Role",
    );
    let urls = to_json(
        &cluster_role("new", vec![url_rule(&["get"], &["/healthz"])]),
        "ClusterRole",
    );

    assert_eq!(
        check_escalation(&user, Some("team"), &covered, &none),
        Ok(()),
        "rules already held"
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &named, &none),
        Ok(()),
        "a named rule is covered by the unnamed one"
    );
    let err = check_escalation(&user, Some("team"), &wider, &none).unwrap_err();
    assert_eq!(
        err,
        "user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}"
    );
    // Held in "team" is not held in "prod".
    let in_prod = to_json(
        &role("prod", "new", vec![rule(&["get"], &[""], &["pods"])]),
        "Role",
    );
    assert!(
        check_escalation(&user, Some("prod"), &in_prod, &none)
            .unwrap_err()
            .contains("is attempting to grant RBAC permissions not currently held")
    );
    // pods does not cover pods/exec for escalation either.
    assert!(check_escalation(&user, Some("team"), &exec, &none).is_err());
    assert!(
        check_escalation(&user, None, &urls, &none)
            .unwrap_err()
            .contains("NonResourceURLs:[\"/healthz\"]")
    );

    // `*/exec` and URL prefixes held cover the servant rules.
    let held = escalation_fixture(vec![
        rule(&["create"], &[""], &["*/exec"]),
        url_rule(&["get"], &["/heal*"]),
    ]);
    assert_eq!(check_escalation(&user, Some("team"), &exec, &held), Ok(()));
    assert_eq!(check_escalation(&user, None, &urls, &held), Ok(()));

    // `escalate` on roles lets anything through, in that namespace only.
    let mut esc = escalation_fixture(vec![]);
    esc.roles.push(role(
        "team",
        "esc",
        vec![rule(
            &["escalate"],
            &["rbac.authorization.k8s.io"],
            &["roles"],
        )],
    ));
    esc.role_bindings.push(rb(
        "team",
        "esc",
        "Role",
        "esc",
        vec![subject("User", "alice")],
    ));
    assert_eq!(check_escalation(&user, Some("team"), &wider, &esc), Ok(()));
    let wider_prod = to_json(
        &role("prod", "new", vec![rule(&["delete"], &[""], &["pods"])]),
        "Role",
    );
    assert!(check_escalation(&user, Some("prod"), &wider_prod, &esc).is_err());
    // escalate on roles is not escalate on clusterroles.
    assert!(check_escalation(&user, None, &urls, &esc).is_err());
    // escalate restricted by name follows the request name.
    let named_esc = escalation_fixture(vec![named_rule(
        &["escalate"],
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["new"],
    )]);
    assert_eq!(check_escalation(&user, None, &urls, &named_esc), Ok(()));
    let create = res("create", "rbac.authorization.k8s.io", "clusterroles");
    assert!(
        check_escalation_for(&user, &create, &urls, &named_esc).is_err(),
        "a create has no request name"
    );

    // system:masters may write anything; other kinds are not checked.
    let admin = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    assert_eq!(
        check_escalation(&admin, Some("team"), &wider, &RbacObjects::default()),
        Ok(())
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &json!({"kind": "Pod"}), &none),
        Ok(())
    );
    // A body without kind is recognised by its shape.
    let mut kindless = wider.clone();
    kindless.as_object_mut().unwrap().remove("kind");
    kindless.as_object_mut().unwrap().remove("apiVersion");
    assert!(check_escalation(&user, Some("team"), &kindless, &none).is_err());
    let mut kindless_crb = to_json(
        &crb("x", "cluster-admin", vec![subject("User", "alice")]),
        "ClusterRoleBinding",
    );
    kindless_crb.as_object_mut().unwrap().remove("kind");
    assert!(check_escalation(&user, None, &kindless_crb, &escalation_fixture(vec![])).is_err());
}

#[test]
fn aggregated_cluster_roles_need_full_authority() {
    let mut agg = to_json(&cluster_role("agg", vec![]), "ClusterRole");
    agg["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]});
    let user = alice();
    assert_eq!(
        check_escalation(&user, None, &agg, &escalation_fixture(vec![])),
        Err("must have cluster-admin privileges to use the aggregationRule".to_string())
    );
    let mut admin = escalation_fixture(vec![]);
    admin
        .cluster_role_bindings
        .push(crb("root", "cluster-admin", vec![subject("User", "alice")]));
    assert_eq!(check_escalation(&user, None, &agg, &admin), Ok(()));
}

#[test]
fn binding_writes_need_the_roles_rules_or_bind() {
    let user = alice();
    let none = escalation_fixture(vec![]);
    let bind_admin = to_json(
        &crb("mine", "cluster-admin", vec![subject("User", "alice")]),
        "ClusterRoleBinding",
    );
    let bind_reader_ns = to_json(
        &rb(
            "team",
            "mine",
            "ClusterRole",
            "pod-reader",
            vec![subject("User", "bob")],
        ),
        "RoleBinding",
    );
    let bind_reader_cluster = to_json(
        &crb("mine", "pod-reader", vec![subject("User", "bob")]),
        "ClusterRoleBinding",
    );
    let bind_exec = to_json(
        &rb("team", "mine", "Role", "exec", vec![subject("User", "bob")]),
        "RoleBinding",
    );
    let bind_missing = to_json(
        &rb("team", "mine", "Role", "gone", vec![subject("User", "bob")]),
        "RoleBinding",
    );

    let err = check_escalation(&user, None, &bind_admin, &none).unwrap_err();
    assert!(err.starts_with("user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n"), "{err}");
    assert!(
        err.contains("{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"),
        "{err}"
    );
    assert!(
        err.contains("{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"),
        "{err}"
    );
    // alice holds get pods in team: she may bind pod-reader there, not cluster-wide.
    assert_eq!(
        check_escalation(&user, Some("team"), &bind_reader_ns, &none),
        Ok(())
    );
    assert!(check_escalation(&user, None, &bind_reader_cluster, &none).is_err());
    assert!(check_escalation(&user, Some("team"), &bind_exec, &none).is_err());
    assert_eq!(
        check_escalation(&user, Some("team"), &bind_missing, &none),
        Err("role.rbac.authorization.k8s.io \"gone\" not found".to_string())
    );

    // `bind` on the referenced role (by name) allows it without holding its rules.
    let bind = escalation_fixture(vec![named_rule(
        &["bind"],
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["cluster-admin"],
    )]);
    assert_eq!(check_escalation(&user, None, &bind_admin, &bind), Ok(()));
    let bind_other = escalation_fixture(vec![named_rule(
        &["bind"],
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["view"],
    )]);
    assert!(check_escalation(&user, None, &bind_admin, &bind_other).is_err());
    // bind on clusterroles granted in a namespace allows RoleBindings there only.
    let mut ns_bind = escalation_fixture(vec![]);
    ns_bind.cluster_roles.push(cluster_role(
        "binder",
        vec![rule(
            &["bind"],
            &["rbac.authorization.k8s.io"],
            &["clusterroles", "roles"],
        )],
    ));
    ns_bind.role_bindings.push(rb(
        "team",
        "binder",
        "ClusterRole",
        "binder",
        vec![subject("User", "alice")],
    ));
    let rb_admin = to_json(
        &rb(
            "team",
            "mine",
            "ClusterRole",
            "cluster-admin",
            vec![subject("User", "bob")],
        ),
        "RoleBinding",
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &rb_admin, &ns_bind),
        Ok(())
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &bind_exec, &ns_bind),
        Ok(())
    );
    assert!(check_escalation(&user, None, &bind_admin, &ns_bind).is_err());
    let rb_admin_prod = to_json(
        &rb(
            "prod",
            "mine",
            "ClusterRole",
            "cluster-admin",
            vec![subject("User", "bob")],
        ),
        "RoleBinding",
    );
    assert!(check_escalation(&user, Some("prod"), &rb_admin_prod, &ns_bind).is_err());

    let status = escalation_forbidden_status("clusterrolebindings", "mine", &err);
    assert_eq!(status["code"], 403);
    assert_eq!(
        status["details"],
        json!({"group": "rbac.authorization.k8s.io", "kind": "clusterrolebindings", "name": "mine"})
    );
    assert!(status["message"].as_str().unwrap().starts_with(
        "clusterrolebindings.rbac.authorization.k8s.io \"mine\" is forbidden: user \"alice\""
    ));
}

#[test]
fn missing_rights_are_compacted_and_sorted() {
    let user = UserInfo::new("u", ["g"]);
    let wanted = to_json(
        &cluster_role(
            "new",
            vec![
                rule(&["get", "list"], &[""], &["pods", "secrets"]),
                named_rule(&["get"], &[""], &["configmaps"], &["a", "b"]),
            ],
        ),
        "ClusterRole",
    );
    let err = check_escalation(&user, None, &wanted, &RbacObjects::default()).unwrap_err();
    assert_eq!(
        err,
        "user \"u\" (groups=[\"g\"]) is attempting to grant RBAC permissions not currently held:\n\
{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"a\"], Verbs:[\"get\"]}\n\
{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"b\"], Verbs:[\"get\"]}\n\
{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\"]}\n\
{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
    );
}
