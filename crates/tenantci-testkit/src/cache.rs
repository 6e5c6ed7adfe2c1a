//! The shared cache's HTTP calls one at a time, as `@actions/cache` makes them (reserve, upload
//! a range, commit, look up): for the inputs the toolkit never sends and for the benchmark's
//! saves and restores. Each call returns the answer as it came; the caller asserts on it.

use serde_json::Value;

/// One cache API (`ACTIONS_CACHE_URL` + `_apis/artifactcache`), reached with `http`, every
/// call with the job's runtime token (`ACTIONS_RUNTIME_TOKEN`) as the toolkit sends it.
#[derive(Clone)]
pub struct RawCache {
    /// The HTTP client every call uses.
    pub http: reqwest::Client,
    /// The cache API's base URL, `ACTIONS_CACHE_URL` + `_apis/artifactcache`, without a trailing
    /// `/`.
    pub api: String,
    /// The job's runtime token, sent as `Authorization: Bearer`.
    pub token: String,
}

impl RawCache {
    /// `POST caches` with `{key, version: "v1", cacheSize: size}`: the answer as it came.
    pub async fn reserve(&self, key: &str, size: u64) -> reqwest::Response {
        self.http
            .post(format!("{}/caches", self.api))
            .bearer_auth(&self.token)
            .json(&serde_json::json!({"key": key, "version": "v1", "cacheSize": size}))
            .send()
            .await
            .unwrap()
    }

    /// Reserves `size` bytes under `key`; the reservation's id.
    pub async fn reserved(&self, key: &str, size: u64) -> u64 {
        let r = self.reserve(key, size).await;
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["cacheId"]
            .as_u64()
            .unwrap()
    }

    /// Uploads bytes `start..=end` of reservation `id`.
    pub async fn patch(
        &self,
        id: u64,
        start: u64,
        end: u64,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.http
            .patch(format!("{}/caches/{id}", self.api))
            .bearer_auth(&self.token)
            .header("content-range", format!("bytes {start}-{end}/*"))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST caches/{id}` with `{size}`, committing reservation `id`: the answer as it came.
    pub async fn commit(&self, id: u64, size: u64) -> reqwest::Response {
        self.http
            .post(format!("{}/caches/{id}", self.api))
            .bearer_auth(&self.token)
            .json(&serde_json::json!({"size": size}))
            .send()
            .await
            .unwrap()
    }

    /// Reserves, uploads in one range and commits `size` bytes of `body` under `key`; the id.
    pub async fn save(&self, key: &str, size: u64, body: impl Into<reqwest::Body>) -> u64 {
        let id = self.reserved(key, size).await;
        assert_eq!(self.patch(id, 0, size - 1, body).await.status(), 200);
        assert_eq!(self.commit(id, size).await.status(), 200);
        id
    }

    /// The bytes of `key`'s entry, as the toolkit restores it: the lookup's `archiveLocation`,
    /// downloaded. Panics on a miss.
    pub async fn restore(&self, key: &str) -> Vec<u8> {
        let hit: Value = self.lookup(key).await.json().await.unwrap();
        let location = hit["archiveLocation"]
            .as_str()
            .unwrap_or_else(|| panic!("`{key}` is a hit: {hit}"));
        let answer = self.http.get(location).send().await.unwrap();
        answer.bytes().await.unwrap().to_vec()
    }

    /// `GET cache?keys=<key>&version=v1` (`key` not escaped): the answer as it came (200 with
    /// `archiveLocation` on a hit, 204 on a miss).
    pub async fn lookup(&self, key: &str) -> reqwest::Response {
        self.http
            .get(format!("{}/cache?keys={key}&version=v1", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }
}
