//! The GitLab API client against the GitLab double (real HTTP on 127.0.0.1).

use std::time::Duration;

use tenantci_runner::gitlab::api::{ApiError, Client, CreateRunner, RunnerType};
use tenantci_runner::gitlab::config::Secret;
use tenantci_testkit::gitlab::{
    Behaviour, DEFAULT_ACCESS_TOKEN, GitlabDouble, READ_ONLY_ACCESS_TOKEN,
};

fn request(runner_type: RunnerType) -> CreateRunner {
    CreateRunner {
        runner_type,
        group_id: None,
        project_id: None,
        description: Some("tenant-a".into()),
        tag_list: vec!["tenant-a".into(), "pod".into()],
        run_untagged: false,
        locked: true,
        paused: false,
    }
}

fn client(gitlab: &GitlabDouble, token: &str) -> Client {
    Client::new(
        &gitlab.url(),
        Secret::new(token),
        None,
        Duration::from_secs(10),
    )
    .unwrap()
}

#[tokio::test]
async fn runner_api_creates_and_verifies_a_group_runner() {
    let gitlab = GitlabDouble::start().await.unwrap();
    let mut req = request(RunnerType::GroupType);
    req.group_id = Some(7);
    let created = client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .create_and_verify(&req)
        .await
        .unwrap();
    assert!(created.token.expose().starts_with("glrt-"));
    let runners = gitlab.runners();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0].id, created.id);
    assert_eq!(runners[0].runner_type, "group_type");
    assert_eq!(runners[0].tag_list, vec!["tenant-a", "pod"]);
    assert!(runners[0].locked);
    assert_eq!(runners[0].verified_by.len(), 1, "the token was verified");
    assert_eq!(
        gitlab.requests(),
        vec!["POST /api/v4/user/runners", "POST /api/v4/runners/verify"]
    );
}

#[tokio::test]
async fn runner_api_double_requires_group_id_as_gitlab_does() {
    let gitlab = GitlabDouble::start().await.unwrap();
    // Bypass client-side validation to see the server's answer.
    let err = client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .create_runner(&request(RunnerType::GroupType))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ApiError::BadRequest { status: 400, message } if message.contains("group_id")),
        "{err:?}"
    );
    // And the client refuses it before sending anything.
    let err = client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .create_and_verify(&request(RunnerType::ProjectType))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.message().contains("--project-id"), "{err:?}");
    assert_eq!(gitlab.requests().len(), 1);
}

#[tokio::test]
async fn runner_api_401_for_an_unknown_token() {
    let gitlab = GitlabDouble::start().await.unwrap();
    let err = client(&gitlab, "glpat-wrong")
        .create_and_verify(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.message().contains("401"), "{err:?}");
    gitlab.set_behaviour(Behaviour::Unauthorized);
    let err = client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .create_runner(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unauthorized));
}

#[tokio::test]
async fn runner_api_403_when_the_token_lacks_create_runner() {
    let gitlab = GitlabDouble::start().await.unwrap();
    let err = client(&gitlab, READ_ONLY_ACCESS_TOKEN)
        .create_runner(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::MissingScope), "{err:?}");
    let err = tenantci_core::Error::from(err);
    assert_eq!(err.exit_code(), 2);
    assert!(err.render().contains("create_runner"));
    gitlab.set_behaviour(Behaviour::Forbidden);
    let err = client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .create_runner(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::MissingScope), "{err:?}");
}

#[tokio::test]
async fn runner_api_410_registration_disabled() {
    let gitlab = GitlabDouble::start().await.unwrap();
    gitlab.set_behaviour(Behaviour::Gone);
    let err = client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .create_and_verify(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 3);
    assert!(err.render().contains("registration"), "{err:?}");
}

#[tokio::test]
async fn runner_api_timeout_is_external() {
    let gitlab = GitlabDouble::start().await.unwrap();
    gitlab.set_behaviour(Behaviour::Hang);
    let client = Client::new(
        &gitlab.url(),
        Secret::new(DEFAULT_ACCESS_TOKEN),
        None,
        Duration::from_millis(300),
    )
    .unwrap();
    let err = client
        .create_runner(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Timeout(_)), "{err:?}");
    assert_eq!(tenantci_core::Error::from(err).exit_code(), 3);
}

#[tokio::test]
async fn runner_api_connection_refused_is_external() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let client = Client::new(&url, Secret::new("x"), None, Duration::from_secs(5)).unwrap();
    let err = client
        .create_runner(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Network(_)), "{err:?}");
    assert_eq!(tenantci_core::Error::from(err).exit_code(), 3);
}

#[tokio::test]
async fn runner_api_legacy_registration_endpoint_is_gone() {
    let gitlab = GitlabDouble::start().await.unwrap();
    let response = reqwest::Client::new()
        .post(format!("{}/api/v4/runners", gitlab.url()))
        .json(&serde_json::json!({"token": "GR1348941old"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 410);
}

#[tokio::test]
async fn runner_api_https_with_a_custom_ca() {
    let (gitlab, ca_pem) = GitlabDouble::start_tls().await.unwrap();
    assert!(gitlab.url().starts_with("https://127.0.0.1:"));
    let dir = crate::util::scratch();
    let ca_file = dir.path().join("gitlab-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let trusted = Client::new(
        &gitlab.url(),
        Secret::new(DEFAULT_ACCESS_TOKEN),
        Some(&ca_file),
        Duration::from_secs(10),
    )
    .unwrap();
    let created = trusted
        .create_and_verify(&request(RunnerType::InstanceType))
        .await
        .unwrap();
    assert!(created.token.expose().starts_with("glrt-"));

    // Without the CA the certificate is not trusted: a network error, exit 3.
    let untrusted = client(&gitlab, DEFAULT_ACCESS_TOKEN);
    let err = untrusted
        .create_runner(&request(RunnerType::InstanceType))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ApiError::Network(m) if m.contains("certificate")),
        "{err:?}"
    );
    assert_eq!(gitlab.runners().len(), 1);
}

/// The check a run makes before it changes anything: GitLab reached, the token valid and
/// allowed to create runners, and nothing created at GitLab.
#[tokio::test]
async fn runner_api_token_check_reads_the_tokens_scopes_and_creates_nothing() {
    let gitlab = GitlabDouble::start().await.unwrap();
    client(&gitlab, DEFAULT_ACCESS_TOKEN)
        .check_token()
        .await
        .unwrap();
    let err = client(&gitlab, READ_ONLY_ACCESS_TOKEN)
        .check_token()
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::MissingScope), "{err:?}");
    let err = client(&gitlab, "glpat-unknown")
        .check_token()
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unauthorized), "{err:?}");
    assert!(gitlab.runners().is_empty(), "a check creates nothing");
    assert_eq!(
        gitlab.requests(),
        vec!["GET /api/v4/personal_access_tokens/self"; 3]
    );
}
