//! Test and benchmark helpers for tenantci (not published, never linked into the product):
//! the GitLab REST double, nats-server processes with generated permissions, and `eventually`.

pub mod gitlab;
