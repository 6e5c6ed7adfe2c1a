//! Who is asking: the user and groups the authenticator (or impersonation) established, and
//! the well-known names kube-apiserver gives them.

/// The group every authenticated user carries.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The anonymous user's name.
pub const ANONYMOUS: &str = "system:anonymous";
/// Members are allowed everything before RBAC runs (and may escalate).
pub const SYSTEM_MASTERS: &str = "system:masters";

/// Who is asking, as the authenticator (or impersonation) established it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// The user name (a client certificate's CN, or the user impersonated).
    pub name: String,
    /// The groups, in order.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user exactly as given (no group added): what a SubjectAccessReview evaluates.
    pub fn new(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.into_iter().map(Into::into).collect(),
        }
    }

    /// An authenticated user: the given groups plus `system:authenticated` (once).
    pub fn authenticated(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let mut user = UserInfo::new(name, groups);
        if !user.in_group(ALL_AUTHENTICATED) {
            user.groups.push(ALL_AUTHENTICATED.to_string());
        }
        user
    }

    /// The user of a request without credentials.
    pub fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS, [ALL_UNAUTHENTICATED])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Members of `system:masters` bypass authorization and escalation checks.
    pub fn is_privileged(&self) -> bool {
        self.in_group(SYSTEM_MASTERS)
    }
}
