//! Impersonate-* headers.

use super::*;

#[test]
fn impersonation_needs_impersonate_on_each_value() {
    let admin = UserInfo::authenticated("admin", ["ops"]);
    let users_and_groups = impersonator(vec![
        named_rule(&["impersonate"], &[""], &["users"], &["gitlab-runner"]),
        named_rule(&["impersonate"], &[""], &["groups"], &["gitlab-runner"]),
    ]);
    // kubectl --as=gitlab-runner --as-group=gitlab-runner
    let h = headers(&[
        ("Impersonate-User", "gitlab-runner"),
        ("Impersonate-Group", "gitlab-runner"),
    ]);
    assert_eq!(
        impersonate(&admin, &h, &users_and_groups),
        Ok(UserInfo::new(
            "gitlab-runner",
            ["gitlab-runner", "system:authenticated"]
        ))
    );
    // No headers: the caller unchanged.
    assert_eq!(
        impersonate(&admin, &HeaderMap::new(), &RbacObjects::default()),
        Ok(admin.clone())
    );
    // No group requested: only system:authenticated (the caller's groups are not kept).
    let h = headers(&[("Impersonate-User", "gitlab-runner")]);
    assert_eq!(
        impersonate(&admin, &h, &users_and_groups),
        Ok(UserInfo::new("gitlab-runner", ["system:authenticated"]))
    );
    // An unlisted group is refused, with the Forbidden body for groups.
    let h = headers(&[
        ("Impersonate-User", "gitlab-runner"),
        ("Impersonate-Group", "gitlab-runner"),
        ("Impersonate-Group", "system:masters"),
    ]);
    let err = impersonate(&admin, &h, &users_and_groups).unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(
        err.status,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"groups \"system:masters\" is forbidden: User \"admin\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"name":"system:masters","kind":"groups"},"code":403})
    );
    // Without the right to impersonate users at all.
    let h = headers(&[("Impersonate-User", "root")]);
    let err = impersonate(&admin, &h, &users_and_groups).unwrap_err();
    assert_eq!(
        err.status["message"],
        "users \"root\" is forbidden: User \"admin\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // Groups without a user are an error.
    let h = headers(&[("Impersonate-Group", "gitlab-runner")]);
    let err = impersonate(&admin, &h, &users_and_groups).unwrap_err();
    assert_eq!(err.code, 500);
    assert!(
        err.status["message"]
            .as_str()
            .unwrap()
            .contains("without impersonating a user")
    );
    // system:masters may impersonate anyone, and the target's groups decide from then on.
    let root = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    let h = headers(&[("Impersonate-User", "u"), ("Impersonate-Group", "g")]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default()),
        Ok(UserInfo::new("u", ["g", "system:authenticated"]))
    );
    // Requested system:authenticated is not doubled; system:unauthenticated suppresses it.
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Group", "system:authenticated"),
    ]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default())
            .unwrap()
            .groups,
        ["system:authenticated"]
    );
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Group", "system:unauthenticated"),
    ]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default())
            .unwrap()
            .groups,
        ["system:unauthenticated"]
    );
    let h = headers(&[("Impersonate-User", "system:anonymous")]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default()),
        Ok(UserInfo::anonymous())
    );
}

#[test]
fn impersonating_service_accounts_uids_and_extras() {
    let admin = UserInfo::authenticated("admin", NO_GROUPS);
    let rbac = RbacObjects {
        roles: vec![role(
            "ci",
            "imp-sa",
            vec![rule(&["impersonate"], &[""], &["serviceaccounts"])],
        )],
        role_bindings: vec![rb(
            "ci",
            "imp-sa",
            "Role",
            "imp-sa",
            vec![subject("User", "admin")],
        )],
        ..impersonator(vec![
            rule(&["impersonate"], &[""], &["users"]),
            rule(
                &["impersonate"],
                &["authentication.k8s.io"],
                &["uids", "userextras/scopes"],
            ),
        ])
    };
    // A service account user is authorized as serviceaccounts in its namespace and gets its groups.
    let h = headers(&[("Impersonate-User", "system:serviceaccount:ci:runner")]);
    assert_eq!(
        impersonate(&admin, &h, &rbac),
        Ok(UserInfo::new(
            "system:serviceaccount:ci:runner",
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                "system:authenticated"
            ]
        ))
    );
    let h = headers(&[("Impersonate-User", "system:serviceaccount:prod:runner")]);
    let err = impersonate(&admin, &h, &rbac).unwrap_err();
    assert_eq!(
        err.status["message"],
        "serviceaccounts \"runner\" is forbidden: User \"admin\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"prod\""
    );
    // Not a valid SA name: a plain user (allowed through `users`).
    let h = headers(&[("Impersonate-User", "system:serviceaccount:Bad:runner")]);
    assert_eq!(
        impersonate(&admin, &h, &rbac).unwrap().name,
        "system:serviceaccount:Bad:runner"
    );
    // uid and extras.
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Uid", "1234"),
        ("Impersonate-Extra-Scopes", "view"),
    ]);
    assert_eq!(
        impersonate(&admin, &h, &rbac),
        Ok(UserInfo::new("u", ["system:authenticated"]))
    );
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Extra-Reason", "because"),
    ]);
    let err = impersonate(&admin, &h, &rbac).unwrap_err();
    assert_eq!(
        err.status["message"],
        "userextras.authentication.k8s.io \"because\" is forbidden: User \"admin\" cannot impersonate resource \"userextras/reason\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
    // Escaped extra keys are unescaped before authorization.
    let rbac2 = impersonator(vec![
        rule(&["impersonate"], &[""], &["users"]),
        rule(
            &["impersonate"],
            &["authentication.k8s.io"],
            &["userextras/example.com/scope"],
        ),
    ]);
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Extra-Example.com%2fscope", "x"),
    ]);
    assert!(impersonate(&admin, &h, &rbac2).is_ok());
    let h = headers(&[("Impersonate-User", "u"), ("Impersonate-Uid", "9")]);
    assert!(
        impersonate(&admin, &h, &rbac2).unwrap_err().status["message"]
            .as_str()
            .unwrap()
            .starts_with("uids.authentication.k8s.io \"9\" is forbidden")
    );
}
