//! Where the cache's bytes and manifests live: an `object_store` (a directory through
//! `LocalFileSystem`, or an S3-compatible bucket through `AmazonS3`), laid out per repository
//! so that no request can reach another repository's objects by any id:
//!
//! - `v1/<repo>/uploads/<id>.json`: a reservation, until its commit;
//! - `v1/<repo>/parts/<id>/<start>`: one uploaded range each, streamed in as it arrives;
//! - `v1/<repo>/joined/<id>`: with `s3_direct_downloads`, the entry's parts joined into one
//!   object at the commit, which a presigned URL can name (the toolkit downloads one URL);
//! - `v1/<repo>/entries/<name>.json`: a committed entry's manifest, named by the entry's
//!   scope, key and version (32 hex digits of their SHA-256; an earlier tenantci's by its id).
//!   Its single create-only `put` is the commit: before it the entry does not exist, after it
//!   every part it lists does, and a second commit of the same scope, key and version finds
//!   the name taken (the directory links the file in only where none is; S3 puts with
//!   `If-None-Match: *`). So of concurrent commits exactly one wins, in one replica or
//!   several. Within one replica the commits of one entry also take turns
//!   ([`Storage::commit`]): a store whose conditional put is a check then a write (moto's is)
//!   still makes one entry per replica. A kill -9 mid-upload leaves no half entry visible,
//!   and the index is the store itself (nothing in memory to lose at a restart, nothing to
//!   share between replicas).
//!
//! Every manifest and reservation carries `format` ([`KIND`]), read by the one version rule
//! (`tenantci_core::record_version`): one without is version 1; one a newer release wrote is
//! reported once and skipped, never rewritten, evicted or deleted here ([`StoreError::Newer`]).
//!
//! `<repo>` is the first 32 hex digits of SHA-256 of the repository's lower-cased name: a
//! fixed-width, path-safe name that never spells a path a job chose.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, WriteMultipart};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use tenantci_core::record_version::{Field, Kind, Newer};

use crate::cache::eviction::Stored;
use crate::cache::index::{Entry, Part, Reservation};
use crate::cache::settings::CacheSettings;

/// The manifests' and reservations' kind for the version rule (their `version` is the
/// toolkit's, so the format is held in `format`).
pub const KIND: Kind = Kind::new("cache_manifest", 1).in_field(Field::Format);

/// The largest manifest read (an entry of thousands of parts).
const MAX_MANIFEST: u64 = 4 << 20;

/// What a read or write of the cache's store failed with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store (the directory or the bucket) failed the request.
    #[error("the cache storage failed: {0}")]
    Store(#[from] object_store::Error),
    /// A manifest larger than any this cache writes (4 MiB, `MAX_MANIFEST`); not read.
    #[error("a cache manifest is damaged: {at} has {size} bytes")]
    Oversized {
        /// The manifest's path in the store.
        at: Path,
        /// Its size, in bytes.
        size: u64,
    },
    /// A manifest whose JSON does not decode.
    #[error("a cache manifest is damaged: {at}: {source}")]
    Damaged {
        /// The manifest's path in the store.
        at: Path,
        /// What the JSON decoder said.
        #[source]
        source: serde_json::Error,
    },
    /// A manifest or reservation a newer release wrote: left as it is (reported once).
    #[error("{at}: {newer}")]
    Newer {
        /// Its path in the store.
        at: Path,
        /// Its version and what to do.
        newer: Newer,
    },
}

/// `value` as stored: its JSON with `format` ([`KIND`]) beside its own fields (which no
/// release's reader denies, so the field costs the previous release nothing).
fn stored_json<T: Serialize>(value: &T) -> Vec<u8> {
    let mut v = serde_json::to_value(value).expect("manifests serialize");
    if let Some(fields) = v.as_object_mut() {
        fields.insert("format".to_string(), KIND.current.into());
    }
    serde_json::to_vec(&v).expect("manifests serialize")
}

/// What a request body's stream failed with, as its own type (`downcast_ref` finds it).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// Why an uploaded range was not kept.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The body went past its Content-Range's length (that length, in bytes).
    #[error("the body holds more bytes than its Content-Range ({0})")]
    TooLong(u64),
    #[error("the body ended after {got} of the {expected} bytes its Content-Range announced")]
    /// The body ended before its Content-Range's length.
    TooShort {
        /// Bytes received.
        got: u64,
        /// Bytes the Content-Range announced.
        expected: u64,
    },
    /// The request body's stream failed (the client went away, or the connection broke).
    #[error("the upload broke off: {0}")]
    Body(#[source] BodyError),
    /// The store failed while the range was written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The cache's object store, laid out as the module header says, and what this process
/// remembers of it: manifests read before, commits in progress.
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    /// `s3_direct_downloads`: the bucket, which signs the URLs restores read it by.
    signer: Option<Arc<object_store::aws::AmazonS3>>,
    /// The manifests read before, per repository directory, by path, with the version the
    /// listing gave them: a lookup lists its repository and reads only the manifests that
    /// changed since, not every one (an S3 GET each). The listing stays the truth, so every
    /// replica sees the others' commits, touches and evictions.
    manifests: Mutex<HashMap<String, Manifests>>,
    /// Bytes per multipart part and parts in flight per upload: what one stream holds in
    /// memory (S3 wants parts of at least 5 MiB; a directory takes any size).
    chunk: usize,
    in_flight: usize,
    /// The manifests being committed in this process: one committer per entry at a time.
    committing: Mutex<HashMap<Path, Arc<tokio::sync::Mutex<()>>>>,
}

/// A repository's directory name.
pub fn repo_dir(repository: &str) -> String {
    let digest = Sha256::digest(repository.to_lowercase().as_bytes());
    hex::encode(&digest[..16])
}

fn path(repo: &str, rest: &str) -> Path {
    Path::from(format!("v1/{repo}/{rest}"))
}

/// An entry's manifest: named by its scope, key and version (each length-prefixed into the
/// digest, so no two triples share a name), or an earlier tenantci's by its id.
fn manifest(repo: &str, entry: &Entry) -> Path {
    if !entry.by_key {
        return path(repo, &format!("entries/{}.json", entry.id));
    }
    let mut digest = Sha256::new();
    for part in [&entry.scope, &entry.key, &entry.version] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    let name = hex::encode(&digest.finalize()[..16]);
    path(repo, &format!("entries/{name}.json"))
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The entry is visible (or was already: a commit retried after a crash).
    Made,
    /// Another upload of the same scope, key and version was committed first; this one's
    /// ranges and reservation are gone.
    Taken,
}

impl Storage {
    /// The storage `settings` names (a loaded config has exactly one of dir and bucket).
    pub fn open(settings: &CacheSettings) -> Result<Storage, String> {
        if let Some(dir) = &settings.dir {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the cache directory {}: {e}", dir.display()))?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| format!("cannot open the cache directory {}: {e}", dir.display()))?;
            return Ok(Storage {
                store: Arc::new(store),
                signer: None,
                manifests: Mutex::default(),
                chunk: 1 << 20,
                in_flight: 2,
                committing: Mutex::default(),
            });
        }
        let bucket = settings.s3_bucket.as_deref().unwrap_or_default();
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(region) = &settings.s3_region {
            b = b.with_region(region);
        }
        if let Some(endpoint) = &settings.s3_endpoint {
            b = b
                .with_allow_http(endpoint.starts_with("http://"))
                .with_endpoint(endpoint);
        }
        if let Some(file) = &settings.s3_credentials_file {
            let (id, secret) = read_credentials(file)?;
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        let store = Arc::new(
            b.build()
                .map_err(|e| format!("cannot use the S3 bucket `{bucket}`: {e}"))?,
        );
        Ok(Storage {
            signer: settings.s3_direct_downloads.then(|| store.clone()),
            manifests: Mutex::default(),
            store,
            chunk: 5 << 20,
            in_flight: 1,
            committing: Mutex::default(),
        })
    }

    async fn put_json<T: Serialize>(&self, at: &Path, value: &T) -> Result<(), StoreError> {
        self.store
            .put(at, PutPayload::from(stored_json(value)))
            .await?;
        Ok(())
    }

    async fn get_json<T: DeserializeOwned>(&self, at: &Path) -> Result<Option<T>, StoreError> {
        let got = match self.store.get(at).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if got.meta.size > MAX_MANIFEST {
            return Err(StoreError::Oversized {
                at: at.clone(),
                size: got.meta.size,
            });
        }
        let bytes = got.bytes().await?;
        let damaged = |source| StoreError::Damaged {
            at: at.clone(),
            source,
        };
        if let Err(newer) = KIND.check_json(&bytes).map_err(damaged)? {
            crate::newer_records::report(&newer, &format!("cache {at}"));
            return Err(StoreError::Newer {
                at: at.clone(),
                newer,
            });
        }
        serde_json::from_slice(&bytes).map(Some).map_err(damaged)
    }

    /// Writes the reservation `r` of a new upload into the repository directory `repo`.
    pub async fn reserve(&self, repo: &str, r: &Reservation) -> Result<(), StoreError> {
        self.put_json(&path(repo, &format!("uploads/{}.json", r.id)), r)
            .await
    }

    /// The reservation `id` in `repo`; None when there is none (never made, committed, or dropped
    /// as stale).
    pub async fn reservation(
        &self,
        repo: &str,
        id: u64,
    ) -> Result<Option<Reservation>, StoreError> {
        self.get_json(&path(repo, &format!("uploads/{id}.json")))
            .await
    }

    /// The ranges uploaded so far for `id`.
    pub async fn parts(&self, repo: &str, id: u64) -> Result<Vec<Part>, StoreError> {
        let prefix = path(repo, &format!("parts/{id}"));
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let start = m.location.filename()?.parse().ok()?;
                Some(Part { start, len: m.size })
            })
            .collect())
    }

    /// Streams `body` into the part at `part.start`, keeping at most `chunk * (in_flight + 1)`
    /// bytes in memory. The part appears only when all `part.len` bytes arrived; anything else
    /// aborts it.
    pub async fn upload_part<S, E>(
        &self,
        repo: &str,
        id: u64,
        part: Part,
        body: S,
    ) -> Result<(), UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Into<BodyError>,
    {
        let at = path(repo, &format!("parts/{id}/{}", part.start));
        let upload = self
            .store
            .put_multipart(&at)
            .await
            .map_err(StoreError::from)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.chunk);
        match self.stream_into(&mut writer, part.len, body).await {
            Ok(()) => {
                writer.finish().await.map_err(StoreError::from)?;
                Ok(())
            }
            Err(e) => {
                let _ = writer.abort().await;
                Err(e)
            }
        }
    }

    async fn stream_into<S, E>(
        &self,
        writer: &mut WriteMultipart,
        expected: u64,
        mut body: S,
    ) -> Result<(), UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Into<BodyError>,
    {
        let mut got = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| UploadError::Body(e.into()))?;
            got += chunk.len() as u64;
            if got > expected {
                return Err(UploadError::TooLong(expected));
            }
            writer
                .wait_for_capacity(self.in_flight)
                .await
                .map_err(StoreError::from)?;
            writer.put(chunk);
        }
        if got != expected {
            return Err(UploadError::TooShort { got, expected });
        }
        Ok(())
    }

    /// Whether restores read the store directly ([`Self::direct_url`]).
    pub fn downloads_directly(&self) -> bool {
        self.signer.is_some()
    }

    /// Makes `entry` visible (its manifest's one create-only put, named by its key) unless an
    /// entry of its scope, key and version is, then forgets the reservation. With direct
    /// downloads, an entry of several parts is first joined into one object (streamed: the
    /// toolkit uploads 32 MiB ranges, a presigned URL names one object).
    pub async fn commit(&self, repo: &str, entry: &Entry) -> Result<Committed, StoreError> {
        let mut entry = Entry {
            by_key: true,
            ..entry.clone()
        };
        if self.downloads_directly() && entry.parts.len() > 1 {
            self.join_parts(repo, &entry).await?;
            entry.joined = true;
        }
        let at = manifest(repo, &entry);
        let body = PutPayload::from(stored_json(&entry));
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let turn = self.turn(&at).await;
        let committed = match self.store.put_opts(&at, body, create).await {
            Ok(_) => {
                self.finish_commit(repo, &entry).await;
                Ok(Committed::Made)
            }
            Err(object_store::Error::AlreadyExists { .. }) => {
                self.settle_taken(repo, &at, entry.id).await
            }
            Err(e) => Err(e.into()),
        };
        self.end_turn(&at, turn);
        if let Ok(Committed::Taken) = committed {
            self.discard(repo, entry.id).await?;
        }
        committed
    }

    /// Waits for this process's other commits of the manifest `at` to end.
    async fn turn(&self, at: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = self
            .committing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(at.clone())
            .or_default()
            .clone();
        turn.lock_owned().await
    }

    /// Ends a [`Self::turn`]; the last one forgets the manifest (waiters take their clone
    /// under the same lock, so none is left behind).
    fn end_turn(&self, at: &Path, turn: tokio::sync::OwnedMutexGuard<()>) {
        let mut committing = self.committing.lock().unwrap_or_else(|p| p.into_inner());
        drop(turn);
        if committing
            .get(at)
            .is_some_and(|t| Arc::strong_count(t) == 1)
        {
            committing.remove(at);
        }
    }

    /// The manifest at `at` exists already: upload `id`'s own when a commit is retried after a
    /// crash before the reservation went (finished now), else another's (`id` to discard,
    /// after the turn: the next committer need not wait for it).
    async fn settle_taken(&self, repo: &str, at: &Path, id: u64) -> Result<Committed, StoreError> {
        let found = match self.get_json::<Entry>(at).await {
            Err(StoreError::Newer { .. }) => None,
            found => found?,
        };
        match found {
            Some(ours) if ours.id == id => {
                self.finish_commit(repo, &ours).await;
                Ok(Committed::Made)
            }
            _ => Ok(Committed::Taken),
        }
    }

    /// Drops upload `id`, which will never be committed: its ranges, joined object and
    /// reservation.
    pub async fn discard(&self, repo: &str, id: u64) -> Result<(), StoreError> {
        self.delete_parts(repo, id).await?;
        self.delete_if_present(&path(repo, &format!("uploads/{id}.json")))
            .await
    }

    /// After the manifest's put: the reservation, and a joined entry's ranges, are not needed.
    async fn finish_commit(&self, repo: &str, entry: &Entry) {
        let _ = self
            .store
            .delete(&path(repo, &format!("uploads/{}.json", entry.id)))
            .await;
        // A joined entry is read from its one object: its ranges would only double what it
        // holds in the bucket. Left behind by a failure here, they go with the entry.
        if entry.joined
            && let Err(e) = self.delete_ranges(repo, entry.id).await
        {
            tracing::warn!(error = %e, "cache: cannot delete a joined entry's ranges; they go when the entry is evicted");
        }
    }

    /// Rewrites an entry's manifest (its `used` after a restore).
    pub async fn touch(&self, repo: &str, entry: &Entry) -> Result<(), StoreError> {
        self.put_json(&manifest(repo, entry), entry).await
    }

    /// Committed entry `id` of `repo` (manifests are named by key: found in the listing).
    pub async fn entry(&self, repo: &str, id: u64) -> Result<Option<Entry>, StoreError> {
        Ok(self.entries(repo).await?.into_iter().find(|e| e.id == id))
    }

    /// One repository's committed entries (a manifest deleted meanwhile is skipped): one
    /// listing, and a read of each manifest the listing shows changed since the last.
    pub async fn entries(&self, repo: &str) -> Result<Vec<Entry>, StoreError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&path(repo, "entries")))
            .try_collect()
            .await?;
        let fresh = self.read_manifests(repo, metas).await?;
        let out = fresh.values().map(|(_, e)| e.clone()).collect();
        self.remembered().insert(repo.to_string(), fresh);
        Ok(out)
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, HashMap<String, Manifests>> {
        self.manifests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The manifests `metas` lists (one repository's), each read only when the listing shows
    /// it changed since the last read; a manifest deleted meanwhile is skipped.
    async fn read_manifests(
        &self,
        repo: &str,
        metas: Vec<object_store::ObjectMeta>,
    ) -> Result<Manifests, StoreError> {
        let known = self.remembered().get(repo).cloned().unwrap_or_default();
        let mut fresh = HashMap::with_capacity(metas.len());
        for m in metas {
            let version = manifest_version(&m);
            let entry = match known.get(&m.location) {
                Some((seen, e)) if *seen == version => e.clone(),
                _ => match self.get_json(&m.location).await {
                    Ok(Some(e)) => e,
                    Ok(None) | Err(StoreError::Newer { .. }) => continue,
                    Err(e) => return Err(e),
                },
            };
            fresh.insert(m.location, (version, entry));
        }
        Ok(fresh)
    }

    /// The objects holding an entry's bytes, in order: its joined object, or its parts.
    fn objects(repo: &str, entry: &Entry) -> Vec<Path> {
        if entry.joined {
            return vec![path(repo, &format!("joined/{}", entry.id))];
        }
        entry
            .parts
            .iter()
            .map(|p| path(repo, &format!("parts/{}/{}", entry.id, p.start)))
            .collect()
    }

    /// Streams an entry's parts into its one joined object.
    async fn join_parts(&self, repo: &str, entry: &Entry) -> Result<(), StoreError> {
        let at = path(repo, &format!("joined/{}", entry.id));
        let upload = self.store.put_multipart(&at).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.chunk);
        let mut bytes = self.download(repo, entry);
        let copied: Result<(), object_store::Error> = async {
            while let Some(chunk) = bytes.next().await {
                writer.wait_for_capacity(self.in_flight).await?;
                writer.put(chunk?);
            }
            Ok(())
        }
        .await;
        match copied {
            Ok(()) => {
                writer.finish().await?;
                Ok(())
            }
            Err(e) => {
                let _ = writer.abort().await;
                Err(e.into())
            }
        }
    }

    /// A presigned GET of the entry's one object, valid for `valid`; None when restores do
    /// not read the store directly (or the entry was committed before they did, in parts).
    pub async fn direct_url(
        &self,
        repo: &str,
        entry: &Entry,
        valid: std::time::Duration,
    ) -> Result<Option<String>, StoreError> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let [object] = &Self::objects(repo, entry)[..] else {
            return Ok(None);
        };
        let url = signer
            .signed_url(reqwest::Method::GET, object, valid)
            .await?;
        Ok(Some(url.to_string()))
    }

    /// An entry's bytes, its parts one after the other (or its joined object).
    pub fn download(
        &self,
        repo: &str,
        entry: &Entry,
    ) -> BoxStream<'static, Result<Bytes, object_store::Error>> {
        let store = self.store.clone();
        let paths = Self::objects(repo, entry);
        futures::stream::iter(paths)
            .then(move |p| {
                let store = store.clone();
                async move { Ok::<_, object_store::Error>(part_stream(store.get(&p).await?)) }
            })
            .try_flatten()
            .boxed()
    }

    /// Every repository's committed entries and pending reservations, from one listing of
    /// the store (a sweep's whole view: listing `v1/` also walks every part object).
    pub async fn inventory(&self) -> Result<Inventory, StoreError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&Path::from("v1")))
            .try_collect()
            .await?;
        let mut out = Inventory::default();
        let mut listed: HashMap<String, Vec<object_store::ObjectMeta>> = HashMap::new();
        for m in metas {
            let parts: Vec<_> = m.location.parts().collect();
            if parts.len() != 4 {
                continue;
            }
            let repository = parts[1].as_ref().to_string();
            match parts[2].as_ref() {
                "entries" => listed.entry(repository).or_default().push(m),
                "uploads" => out.uploads.push((repository, m.location)),
                _ => {}
            }
        }
        // Read as lookups read them; what they remember becomes what the store holds (a
        // repository nobody looks up again would otherwise keep its evicted manifests).
        let mut all = HashMap::with_capacity(listed.len());
        for (repository, metas) in listed {
            let fresh = self.read_manifests(&repository, metas).await?;
            out.entries.extend(fresh.values().map(|(_, entry)| Stored {
                repository: repository.clone(),
                entry: entry.clone(),
            }));
            all.insert(repository, fresh);
        }
        *self.remembered() = all;
        Ok(out)
    }

    /// Deletes an entry: its manifest first (it is gone for lookups at once), then its parts.
    /// A manifest of the same name but another id is not this entry's (another replica's
    /// sweep evicted it and a job saved the key again since this sweep listed): it stays.
    pub async fn delete_entry(&self, repo: &str, entry: &Entry) -> Result<(), StoreError> {
        let at = manifest(repo, entry);
        let recommitted = match self.get_json::<Entry>(&at).await {
            Ok(Some(e)) => e.id != entry.id,
            // A newer release's commit of the key since: not this entry's.
            Err(StoreError::Newer { .. }) => true,
            _ => false,
        };
        if !recommitted {
            self.delete_if_present(&at).await?;
        }
        self.delete_parts(repo, entry.id).await
    }

    /// An entry's parts and its joined object (if any).
    async fn delete_parts(&self, repo: &str, id: u64) -> Result<(), StoreError> {
        self.delete_ranges(repo, id).await?;
        self.delete_if_present(&path(repo, &format!("joined/{id}")))
            .await
    }

    /// Deletes the object at `at`; one already gone (another replica's sweep, a retried
    /// cleanup) is what the caller wanted too.
    async fn delete_if_present(&self, at: &Path) -> Result<(), StoreError> {
        match self.store.delete(at).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The uploaded ranges of `id`.
    async fn delete_ranges(&self, repo: &str, id: u64) -> Result<(), StoreError> {
        let prefix = path(repo, &format!("parts/{id}"));
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        for m in metas {
            self.store.delete(&m.location).await?;
        }
        Ok(())
    }

    /// Drops the `uploads` (an [`Inventory`]'s) reserved before `before` (unix milliseconds)
    /// and never committed, with their parts; a reservation whose entry exists (a crash
    /// between the commit's two steps) loses only the reservation. Returns how many went.
    pub async fn drop_stale_uploads(
        &self,
        uploads: &[(String, Path)],
        before: i64,
    ) -> Result<usize, StoreError> {
        let mut dropped = 0;
        for (repo, at) in uploads {
            let r = match self.get_json::<Reservation>(at).await {
                Ok(Some(r)) => r,
                Ok(None) | Err(StoreError::Newer { .. }) => continue,
                Err(e) => return Err(e),
            };
            if r.created >= before {
                continue;
            }
            if self.entry(repo, r.id).await?.is_none() {
                self.delete_parts(repo, r.id).await?;
            }
            self.store.delete(at).await?;
            dropped += 1;
        }
        Ok(dropped)
    }
}

/// One repository's manifests as read: by path, with the version the listing gave.
type Manifests = HashMap<Path, (String, Entry)>;

/// What a listing says of a manifest's version: its ETag where the store gives one (S3: the
/// content's hash; a directory: inode, mtime and size, and every put is a new file), and its
/// time and size besides.
fn manifest_version(m: &object_store::ObjectMeta) -> String {
    format!(
        "{}/{}/{}",
        m.e_tag.as_deref().unwrap_or_default(),
        m.last_modified.timestamp_nanos_opt().unwrap_or_default(),
        m.size
    )
}

/// What one listing of the store holds: committed entries, and where reservations are.
#[derive(Default)]
pub struct Inventory {
    /// Every committed entry, with its repository directory.
    pub entries: Vec<Stored>,
    /// `(repository directory, reservation manifest)`.
    pub uploads: Vec<(String, Path)>,
}

/// Bytes per read of a part in a directory: `LocalFileSystem`'s own stream reads 8 KiB at a
/// time, which makes a restore as many small TLS records and costs most of its throughput
/// (docs/benchmarks/cache.md).
const FILE_READ: usize = 256 << 10;

/// A part's bytes: a file read in [`FILE_READ`] chunks, or the store's own stream (S3).
fn part_stream(
    got: object_store::GetResult,
) -> BoxStream<'static, Result<Bytes, object_store::Error>> {
    match got.payload {
        object_store::GetResultPayload::File(file, path) => {
            let file = tokio::fs::File::from_std(file);
            futures::stream::try_unfold((file, path), |(mut file, path)| async move {
                use tokio::io::AsyncReadExt as _;
                let mut buf = bytes::BytesMut::with_capacity(FILE_READ);
                let n =
                    file.read_buf(&mut buf)
                        .await
                        .map_err(|e| object_store::Error::Generic {
                            store: "LocalFileSystem",
                            source: format!("reading {}: {e}", path.display()).into(),
                        })?;
                Ok((n > 0).then(|| (buf.freeze(), (file, path))))
            })
            .boxed()
        }
        object_store::GetResultPayload::Stream(stream) => stream,
    }
}

/// The S3 credentials file: 0600, the access key id on the first line, the secret on the
/// second.
fn read_credentials(file: &std::path::Path) -> Result<(String, String), String> {
    let text = tenantci_core::input::read_private(
        "the cache's S3 credentials file",
        file,
        tenantci_core::secret::MAX_SECRET_FILE,
    )
    .map_err(|e| e.message().to_string())?;
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    match (lines.next(), lines.next()) {
        (Some(id), Some(secret)) => Ok((id.to_string(), secret.to_string())),
        _ => Err(format!(
            "the cache's S3 credentials file {} needs the access key id on its first line and the secret key on its second",
            file.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(id: u64, created: i64) -> Reservation {
        Reservation {
            id,
            key: format!("k{id}"),
            version: "v".into(),
            size: Some(3),
            created,
            scope: "refs/heads/main".into(),
        }
    }

    /// One listing gives a sweep the entries and the reservations; a stale one goes with its
    /// parts, a recent one and a committed entry stay.
    #[tokio::test]
    async fn a_sweep_s_one_listing_finds_entries_and_drops_only_stale_uploads() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&CacheSettings::in_dir(dir.path())).unwrap();
        let repo = repo_dir("sim/demo");
        let part = Part { start: 0, len: 3 };
        let body = || futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"abc"))]);
        for (id, created) in [(1, 0), (2, 5_000), (3, 0)] {
            s.reserve(&repo, &reservation(id, created)).await.unwrap();
            s.upload_part(&repo, id, part, body()).await.unwrap();
        }
        let entry = Entry {
            id: 3,
            key: "k3".into(),
            version: "v".into(),
            size: 3,
            parts: vec![part],
            created: 0,
            used: 0,
            scope: "refs/heads/main".into(),
            joined: false,
            by_key: true,
        };
        s.commit(&repo, &entry).await.unwrap();

        let inventory = s.inventory().await.unwrap();
        assert_eq!(inventory.entries.len(), 1);
        assert_eq!(inventory.entries[0].entry, entry);
        assert_eq!(
            inventory.uploads.len(),
            2,
            "the committed one's reservation is gone"
        );
        assert_eq!(
            s.drop_stale_uploads(&inventory.uploads, 1_000)
                .await
                .unwrap(),
            1
        );
        assert!(s.reservation(&repo, 1).await.unwrap().is_none());
        assert!(
            s.parts(&repo, 1).await.unwrap().is_empty(),
            "its parts went too"
        );
        assert!(
            s.reservation(&repo, 2).await.unwrap().is_some(),
            "a recent upload stays"
        );
        assert_eq!(
            s.parts(&repo, 3).await.unwrap(),
            vec![part],
            "the entry's parts stay"
        );
    }

    /// The commit's create-only put: a second upload of the same scope, key and version is
    /// Taken and dropped whole; the first one's commit retried (a crash before its reservation
    /// went) is Made again, its parts kept.
    #[tokio::test]
    async fn a_second_commit_of_one_key_is_taken_and_a_retried_one_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&CacheSettings::in_dir(dir.path())).unwrap();
        let repo = repo_dir("sim/demo");
        let part = Part { start: 0, len: 3 };
        let body = || futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"abc"))]);
        let same_key = |id| Entry {
            id,
            key: "k".into(),
            version: "v".into(),
            size: 3,
            parts: vec![part],
            created: 0,
            used: 0,
            scope: "refs/heads/main".into(),
            joined: false,
            by_key: true,
        };
        for id in [1, 2] {
            s.reserve(&repo, &reservation(id, 0)).await.unwrap();
            s.upload_part(&repo, id, part, body()).await.unwrap();
        }
        assert_eq!(
            s.commit(&repo, &same_key(1)).await.unwrap(),
            Committed::Made
        );
        assert_eq!(
            s.commit(&repo, &same_key(2)).await.unwrap(),
            Committed::Taken
        );
        assert!(
            s.parts(&repo, 2).await.unwrap().is_empty(),
            "the loser's ranges went"
        );
        assert!(s.reservation(&repo, 2).await.unwrap().is_none());
        assert_eq!(
            s.commit(&repo, &same_key(1)).await.unwrap(),
            Committed::Made
        );
        assert_eq!(s.entries(&repo).await.unwrap(), vec![same_key(1)]);
        assert_eq!(s.parts(&repo, 1).await.unwrap(), vec![part]);
        // Another scope, same key and version: beside it.
        let pr = Entry {
            scope: "refs/pull/3/head".into(),
            ..same_key(3)
        };
        assert_eq!(s.commit(&repo, &pr).await.unwrap(), Committed::Made);
        assert_eq!(s.entries(&repo).await.unwrap().len(), 2);
    }

    /// A manifest that is not JSON is a damaged one, its decoder's error the source.
    #[tokio::test]
    async fn a_manifest_that_does_not_decode_is_damaged_with_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&CacheSettings::in_dir(dir.path())).unwrap();
        let repo = repo_dir("sim/demo");
        let at = path(&repo, "entries/0.json");
        s.store.put(&at, PutPayload::from("{")).await.unwrap();
        let e = s.entries(&repo).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "a cache manifest is damaged: {at}: EOF while parsing an object at line 1 column 1"
            )
        );
        assert!(matches!(e, StoreError::Damaged { at: ref p, .. } if *p == at));
    }

    /// The version rule: a manifest and a reservation a newer release wrote are skipped by
    /// lookups and the sweep, and neither is rewritten or deleted; ours carry `format`.
    #[tokio::test]
    async fn a_newer_releases_manifest_and_reservation_are_left_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&CacheSettings::in_dir(dir.path())).unwrap();
        let repo = repo_dir("sim/demo");
        let (at, upload) = (path(&repo, "entries/9.json"), path(&repo, "uploads/9.json"));
        let newer = br#"{"format":2,"id":9,"key":"k","version":"v","moved":true}"#;
        for p in [&at, &upload] {
            s.store
                .put(p, PutPayload::from_static(newer))
                .await
                .unwrap();
        }
        s.reserve(&repo, &reservation(1, 0)).await.unwrap();
        let ours = s.store.get(&path(&repo, "uploads/1.json")).await.unwrap();
        let ours: serde_json::Value = serde_json::from_slice(&ours.bytes().await.unwrap()).unwrap();
        assert_eq!(ours["format"], KIND.current);
        assert!(s.entries(&repo).await.unwrap().is_empty());
        let inventory = s.inventory().await.unwrap();
        assert!(inventory.entries.is_empty());
        assert_eq!(
            s.drop_stale_uploads(&inventory.uploads, i64::MAX)
                .await
                .unwrap(),
            1
        );
        assert!(matches!(
            s.reservation(&repo, 9).await,
            Err(StoreError::Newer { .. })
        ));
        for p in [&at, &upload] {
            let kept = s.store.get(p).await.unwrap().bytes().await.unwrap();
            assert_eq!(&kept[..], &newer[..], "{p} left as it was");
        }
    }

    /// Lookups remember manifests, but a change another replica made (a touch, a deletion, a
    /// new entry) shows in the next one: the listing decides which to read again.
    #[tokio::test]
    async fn a_lookup_sees_every_change_to_the_manifests_it_remembers() {
        let dir = tempfile::tempdir().unwrap();
        let settings = CacheSettings::in_dir(dir.path());
        let (s, other) = (
            Storage::open(&settings).unwrap(),
            Storage::open(&settings).unwrap(),
        );
        let repo = repo_dir("sim/demo");
        let entry = |id: u64| Entry {
            id,
            key: format!("k{id}"),
            version: "v".into(),
            size: 0,
            parts: vec![],
            created: 0,
            used: 0,
            scope: "refs/heads/main".into(),
            joined: false,
            by_key: true,
        };
        other.commit(&repo, &entry(1)).await.unwrap();
        assert_eq!(s.entries(&repo).await.unwrap(), vec![entry(1)]);
        let used = Entry {
            used: 42,
            ..entry(1)
        };
        other.touch(&repo, &used).await.unwrap();
        assert_eq!(s.entries(&repo).await.unwrap(), vec![used.clone()]);
        other.commit(&repo, &entry(2)).await.unwrap();
        other.delete_entry(&repo, &entry(1)).await.unwrap();
        assert_eq!(s.entries(&repo).await.unwrap(), vec![entry(2)]);
        s.inventory().await.unwrap();
        other.delete_entry(&repo, &entry(2)).await.unwrap();
        assert!(s.entries(&repo).await.unwrap().is_empty());
    }
}
