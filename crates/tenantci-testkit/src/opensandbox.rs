//! The simulator's OpenSandbox double (`tenantci sim --opensandbox`) as tests use it: where
//! it is (`<state>/opensandbox.json`), a Lifecycle API client with its key, and its admin API
//! (every sandbox with its env, failing one, an outage, the figures).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use tenantci_core::Secret;
use tenantci_core::opensandbox::{ClientConfig, LifecycleClient};

/// The double, as `opensandbox.json` describes it.
#[derive(Debug, Clone)]
pub struct OpenSandbox {
    /// The Lifecycle API's base URL (`url`).
    pub url: String,
    /// The double's admin API base URL (`adminUrl`): no key, loopback only.
    pub admin_url: String,
    /// The file holding the API key (`apiKeyFile`, 0600).
    pub api_key_file: PathBuf,
}

impl OpenSandbox {
    /// Reads `<state_dir>/opensandbox.json`.
    pub fn from_state_dir(state_dir: &Path) -> Self {
        let path = state_dir.join("opensandbox.json");
        let doc: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        let field = |k: &str| doc[k].as_str().unwrap().to_string();
        OpenSandbox {
            url: field("url"),
            admin_url: field("adminUrl"),
            api_key_file: PathBuf::from(field("apiKeyFile")),
        }
    }

    /// The API key, read from `api_key_file` and trimmed.
    pub fn api_key(&self) -> String {
        std::fs::read_to_string(&self.api_key_file)
            .unwrap()
            .trim()
            .to_string()
    }

    /// A Lifecycle API client with the double's key and short timeouts.
    pub fn client(&self) -> LifecycleClient {
        let mut cfg = ClientConfig::new(
            &self.url,
            Secret::new(self.api_key()),
            self.api_key_file.clone(),
        );
        cfg.request_timeout = Duration::from_secs(10);
        LifecycleClient::new(cfg).expect("build the Lifecycle API client")
    }

    async fn admin(req: reqwest::RequestBuilder) -> Value {
        let resp = req
            .send()
            .await
            .expect("the OpenSandbox double's admin API");
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert!(status.is_success(), "admin call: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Every live sandbox with its env, entrypoint and metadata.
    pub async fn sandboxes(&self, http: &reqwest::Client) -> Vec<Value> {
        let v = Self::admin(http.get(format!("{}/sandboxes", self.admin_url))).await;
        v.as_array().cloned().unwrap_or_default()
    }

    /// The live sandboxes' ids (the admin list's `fields=id`: no env, cheap to poll).
    pub async fn ids(&self, http: &reqwest::Client) -> Vec<String> {
        let v = Self::admin(http.get(format!("{}/sandboxes?fields=id", self.admin_url))).await;
        serde_json::from_value(v).unwrap_or_default()
    }

    /// One sandbox as the admin view shows it: the record, or `{id, gone}` with a 404.
    pub async fn sandbox(&self, http: &reqwest::Client, id: &str) -> (u16, Value) {
        let resp = http
            .get(format!("{}/sandboxes/{id}", self.admin_url))
            .send()
            .await
            .expect("the OpenSandbox double's admin API");
        (
            resp.status().as_u16(),
            resp.json().await.unwrap_or(Value::Null),
        )
    }

    /// Turns a sandbox Failed (`runtime_error`).
    pub async fn fail(&self, http: &reqwest::Client, id: &str) {
        Self::admin(
            http.post(format!("{}/sandboxes/{id}/fail", self.admin_url))
                .json(&json!({})),
        )
        .await;
    }

    /// Every API call answers `status` for `for_`.
    pub async fn outage(&self, http: &reqwest::Client, status: u16, for_: Duration) {
        self.outage_of(http, &[], status, for_).await;
    }

    /// The calls of `methods` (every call when empty) answer `status` for `for_`: with
    /// `["POST"]`, creates fail while lists, patches and deletes work.
    pub async fn outage_of(
        &self,
        http: &reqwest::Client,
        methods: &[&str],
        status: u16,
        for_: Duration,
    ) {
        let body = json!({"status": status, "seconds": for_.as_secs_f64(), "methods": methods});
        Self::admin(http.post(format!("{}/faults", self.admin_url)).json(&body)).await;
    }

    /// Every call answers `status` with `body` (as `text/html`, not the API's JSON) for
    /// `for_`: a proxy's error page in front of the API.
    pub async fn outage_with_body(
        &self,
        http: &reqwest::Client,
        status: u16,
        body: &str,
        for_: Duration,
    ) {
        let body = json!({"status": status, "seconds": for_.as_secs_f64(), "body": body});
        Self::admin(http.post(format!("{}/faults", self.admin_url)).json(&body)).await;
    }

    /// Ends an injected outage.
    pub async fn end_outage(&self, http: &reqwest::Client) {
        Self::admin(http.delete(format!("{}/faults", self.admin_url))).await;
    }

    /// `{created, deleted, expired, live, maxLive, requests, calls, listed, connections}`.
    pub async fn stats(&self, http: &reqwest::Client) -> Value {
        Self::admin(http.get(format!("{}/stats", self.admin_url))).await
    }
}
