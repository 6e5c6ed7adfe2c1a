//! The deny-list: certificates the front refuses (`front revoke`), one per line in a 0600 file,
//! `#` comments kept. An entry names the cluster whose ClientCA issued the certificate and its
//! serial (`ci 1aff`), or a serial alone, which is refused on every cluster the front serves
//! (the form of earlier releases, still read). `serve` re-reads it every second and publishes
//! each change, so new handshakes and open tunnels see it within seconds. Revocation fails
//! closed: a list missing at start stops the start, and a list that disappears or cannot be
//! read while serving keeps the last good one in force. Does not decide (`admit` does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tenantci_core::{Error, Result};

/// (cluster, or None for every cluster; serial normalised) -> the note written beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DenyList {
    entries: BTreeMap<(Option<String>, String), String>,
}

/// One entry of the list, as `front status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// None: every cluster.
    pub cluster: Option<&'a str>,
    /// Lower-case hex, as [`normalize`] spells it.
    pub serial: &'a str,
    /// What follows `#` on the entry's line (`front revoke` writes the certificate's subject
    /// or the operator's note); may be empty.
    pub note: &'a str,
}

/// `CLUSTER SERIAL`, or `SERIAL` for every cluster: the entry as the file spells it.
impl std::fmt::Display for Entry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cluster {
            Some(c) => write!(f, "{c} {}", self.serial),
            None => f.write_str(self.serial),
        }
    }
}

/// Lower-case hex without separators or leading zeros; None when it is not hex.
pub fn normalize(serial: &str) -> Option<String> {
    let hex: String = serial
        .trim()
        .trim_start_matches("0x")
        .chars()
        .filter(|c| *c != ':')
        .collect::<String>()
        .to_ascii_lowercase();
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let trimmed = hex.trim_start_matches('0');
    Some(if trimmed.is_empty() {
        "0".into()
    } else {
        trimmed.into()
    })
}

const HEADER: &str = "# tenantci front: certificates refused at the front (tenantci front revoke)\n\
# CLUSTER SERIAL  # note    (a SERIAL alone is refused on every cluster)\n";

impl DenyList {
    /// Parses the file's text: `SERIAL` or `CLUSTER SERIAL` per line, `#` starting a note;
    /// blank lines skipped. Fails naming the first bad line.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut entries = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let (value, note) = line.split_once('#').unwrap_or((line, ""));
            let fields: Vec<&str> = value.split_whitespace().collect();
            let (cluster, serial) = match fields.as_slice() {
                [] => continue,
                [serial] => (None, *serial),
                [cluster, serial] => (Some(cluster.to_string()), *serial),
                _ => {
                    return Err(format!(
                        "line {}: `{}` is neither `SERIAL` nor `CLUSTER SERIAL`",
                        n + 1,
                        value.trim()
                    ));
                }
            };
            let serial = normalize(serial)
                .ok_or_else(|| format!("line {}: `{serial}` is not a hex serial", n + 1))?;
            entries.insert((cluster, serial), note.trim().to_string());
        }
        Ok(DenyList { entries })
    }

    /// Reads `path`. A missing file is refused: read as empty, it would lift every
    /// revocation (`front init` writes an empty list).
    pub fn load(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(Error::bad_input(format!(
                "the front's deny-list `{}` does not exist; the front does not run without it, since a missing list would let every revoked certificate back in",
                path.display()
            ))
            .hint(format!(
                "restore it from a backup; if no certificate was ever revoked here, create an empty one with `install -m 600 /dev/null {}` (`tenantci front init` writes one)",
                path.display()
            )));
        }
        let text = tenantci_core::input::read_text(
            "the front's deny-list",
            path,
            tenantci_core::input::MAX_CONFIG,
        )?;
        DenyList::parse(&text).map_err(|e| {
            Error::bad_input(format!("the deny-list `{}` is damaged: {e}", path.display()))
                .hint("fix that line; each line is `CLUSTER SERIAL` or a SERIAL for every cluster, optionally followed by # and a note")
        })
    }

    /// Whether `serial`, issued by `cluster`'s ClientCA, is refused.
    pub fn contains(&self, cluster: &str, serial: &str) -> bool {
        let key = |c: Option<&str>| (c.map(str::to_string), serial.to_string());
        self.entries.contains_key(&key(None)) || self.entries.contains_key(&key(Some(cluster)))
    }

    /// How many entries the list has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the list has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, sorted (every-cluster entries first, then by cluster and serial).
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.entries.iter().map(|((c, s), n)| Entry {
            cluster: c.as_deref(),
            serial: s,
            note: n,
        })
    }

    /// Whether this list has `entry` itself (its cluster, or every cluster, and its serial).
    fn holds(&self, entry: &Entry<'_>) -> bool {
        let key = (entry.cluster.map(str::to_string), entry.serial.to_string());
        self.entries.contains_key(&key)
    }

    /// Adds `serial` of `cluster` (None: every cluster) with `note`; false when it was
    /// already there.
    pub fn add(&mut self, cluster: Option<String>, serial: String, note: String) -> bool {
        self.entries.insert((cluster, serial), note).is_none()
    }

    /// The file's text: a comment header, then one entry per line with its note.
    pub fn render(&self) -> String {
        let mut out = String::from(HEADER);
        for e in self.entries() {
            let mut line = e.to_string();
            if !e.note.is_empty() {
                line.push_str(&format!("  # {}", e.note));
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// Writes the list atomically, 0600.
    pub fn save(&self, path: &Path) -> Result<()> {
        tenantci_core::fsutil::write_atomic(path, self.render().as_bytes(), 0o600)
            .map_err(|e| Error::unwritable("the front's deny-list", path, e))
    }
}

/// Whether the list on disk is the one in force.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ReadHealth {
    /// The last read succeeded: the list in force is the file's.
    #[default]
    Current,
    /// The last read failed (the file is gone, unreadable or damaged): the last good list
    /// stays in force. Says why.
    Stale(String),
}

/// The list in force and whether the file still reads, as `serve` follows them.
pub struct Watched {
    /// The list in force: the last one read successfully.
    pub list: watch::Receiver<Arc<DenyList>>,
    /// Whether the last read succeeded (the `tenantci_front_deny_list_stale` gauge).
    pub health: watch::Receiver<ReadHealth>,
}

/// Re-reads `path` every `every` and publishes a changed list. A list that fails to read, or
/// has gone, keeps the last good one (revocation fails closed) and turns `health` stale,
/// logged once per change of cause: a half-edited or deleted file must not let a revoked
/// certificate back in.
pub fn watch(path: PathBuf, initial: DenyList, every: Duration) -> Watched {
    let (tx, list) = watch::channel(Arc::new(initial));
    let (health_tx, health) = watch::channel(ReadHealth::Current);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                return;
            }
            let now = match DenyList::load(&path) {
                Ok(list) => {
                    if **tx.borrow() != list {
                        report_change(&path, &tx.borrow(), &list);
                        let _ = tx.send(Arc::new(list));
                    }
                    ReadHealth::Current
                }
                Err(_) if !path.exists() => ReadHealth::Stale("the file is gone".into()),
                Err(e) => ReadHealth::Stale(e.message().to_string()),
            };
            report_health(&path, &health_tx, now);
        }
    });
    Watched { list, health }
}

/// Logs a change; an entry gone from the list is a warning naming it: a truncated file, an
/// old backup or a slip of the editor lifts a revocation as surely as `rm` would.
fn report_change(path: &Path, before: &DenyList, after: &DenyList) {
    tracing::info!(
        entries = after.len(),
        "front: deny-list changed; re-checking open tunnels"
    );
    let lifted: Vec<String> = before
        .entries()
        .filter(|e| !after.holds(e))
        .map(|e| e.to_string())
        .collect();
    if !lifted.is_empty() {
        tracing::warn!(
            "front: the deny-list {} no longer holds {}; those certificates are admitted again. If that was not meant, restore the file",
            path.display(),
            lifted.join(", ")
        );
    }
}

fn report_health(path: &Path, tx: &watch::Sender<ReadHealth>, now: ReadHealth) {
    if *tx.borrow() == now {
        return;
    }
    match &now {
        ReadHealth::Stale(why) => tracing::warn!(
            "front: cannot read the deny-list {}: {why}. The last good list stays in force: revoked certificates stay refused, but a new `front revoke` waits until the file reads again, and the front will not start again without it. Restore it from a backup",
            path.display()
        ),
        ReadHealth::Current => {
            tracing::info!("front: the deny-list {} reads again", path.display())
        }
    }
    let _ = tx.send(now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_one_spelling_whatever_the_input() {
        assert_eq!(normalize("00:1A:ff").as_deref(), Some("1aff"));
        assert_eq!(normalize("0x01AB").as_deref(), Some("1ab"));
        assert_eq!(normalize("zz"), None);
        let list = DenyList::parse("# head\n1A:FF  # CN=x\n\n").unwrap();
        assert!(list.contains("ci", "1aff"));
        assert_eq!(DenyList::parse(&list.render()).unwrap(), list);
        assert!(DenyList::parse("nope\n").unwrap_err().contains("line 1"));
        assert!(
            DenyList::parse("a b c\n")
                .unwrap_err()
                .contains("CLUSTER SERIAL")
        );
    }

    #[test]
    fn an_entry_names_its_cluster_and_a_bare_serial_every_cluster() {
        let list = DenyList::parse("ci 1a  # leaked\n2b\n").unwrap();
        assert!(list.contains("ci", "1a"));
        assert!(
            !list.contains("other", "1a"),
            "another CA's serial 1a is not this one"
        );
        assert!(list.contains("ci", "2b") && list.contains("other", "2b"));
        let mut more = list.clone();
        assert!(more.add(Some("other".into()), "1a".into(), String::new()));
        assert!(!more.add(None, "2b".into(), String::new()));
        let back = DenyList::parse(&more.render()).unwrap();
        assert_eq!(back, more);
        assert!(back.contains("other", "1a"));
    }

    #[test]
    fn a_missing_list_is_refused_with_how_to_create_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("denied-serials");
        let e = DenyList::load(&path).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("does not exist"), "{}", e.message());
        assert!(e.hint_text().unwrap().contains("install -m 600 /dev/null"));
        assert!(!path.exists(), "nothing is written");
    }

    /// The order of events the fix guards against: a list in force, then the file deleted
    /// (or damaged) while the front serves. The list in force stays, health turns stale,
    /// and a restored file is current again.
    #[tokio::test]
    async fn a_deleted_or_damaged_list_keeps_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("denied-serials");
        std::fs::write(&path, "ci 1a\n").unwrap();
        let initial = DenyList::load(&path).unwrap();
        let mut w = watch(path.clone(), initial, Duration::from_millis(10));
        std::fs::remove_file(&path).unwrap();
        w.health.changed().await.unwrap();
        assert!(matches!(&*w.health.borrow(), ReadHealth::Stale(why) if why.contains("gone")));
        assert!(w.list.borrow().contains("ci", "1a"));
        std::fs::write(&path, "not a serial\n").unwrap();
        w.health.changed().await.unwrap();
        assert!(matches!(&*w.health.borrow(), ReadHealth::Stale(why) if why.contains("damaged")));
        assert!(w.list.borrow().contains("ci", "1a"));
        std::fs::write(&path, "ci 1a\nci 2b\n").unwrap();
        w.list.changed().await.unwrap();
        assert!(w.list.borrow().contains("ci", "2b"));
        w.health.changed().await.unwrap();
        assert_eq!(*w.health.borrow(), ReadHealth::Current);
    }
}
