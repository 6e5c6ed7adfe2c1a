//! `tenantci dispatch`: init against the simulator and its Gitea double.

mod init;
