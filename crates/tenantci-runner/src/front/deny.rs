//! The deny-list: certificate serials the front refuses (`front revoke`), one per line in a
//! 0600 file, `#` comments kept. `serve` re-reads it every second and publishes each change,
//! so new handshakes and open tunnels see it within seconds. Does not decide (`admit` does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tenantci_core::{Error, Result};

/// Serial (normalised) -> the note written beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DenyList {
    serials: BTreeMap<String, String>,
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

impl DenyList {
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut serials = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let (value, note) = line.split_once('#').unwrap_or((line, ""));
            if value.trim().is_empty() {
                continue;
            }
            let serial = normalize(value)
                .ok_or_else(|| format!("line {}: `{}` is not a hex serial", n + 1, value.trim()))?;
            serials.insert(serial, note.trim().to_string());
        }
        Ok(DenyList { serials })
    }

    /// Reads `path`; a missing file is an empty list.
    pub fn load(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Ok(DenyList::default());
        }
        let text = tenantci_core::input::read_text(
            "the front's deny-list",
            path,
            tenantci_core::input::MAX_CONFIG,
        )?;
        DenyList::parse(&text).map_err(|e| {
            Error::bad_input(format!("the deny-list `{}` is damaged: {e}", path.display()))
                .hint("fix or remove that line; each line is one hex serial, optionally followed by # and a note")
        })
    }

    pub fn contains(&self, serial: &str) -> bool {
        self.serials.contains_key(serial)
    }

    pub fn len(&self) -> usize {
        self.serials.len()
    }

    pub fn is_empty(&self) -> bool {
        self.serials.is_empty()
    }

    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.serials.iter().map(|(s, n)| (s.as_str(), n.as_str()))
    }

    /// Adds `serial` with `note`; false when it was already there.
    pub fn add(&mut self, serial: String, note: String) -> bool {
        self.serials.insert(serial, note).is_none()
    }

    pub fn render(&self) -> String {
        let mut out = String::from(
            "# tenantci front: serials refused at the front (tenantci front revoke)\n",
        );
        for (serial, note) in &self.serials {
            if note.is_empty() {
                out.push_str(&format!("{serial}\n"));
            } else {
                out.push_str(&format!("{serial}  # {note}\n"));
            }
        }
        out
    }

    /// Writes the list atomically, 0600.
    pub fn save(&self, path: &Path) -> Result<()> {
        tenantci_core::fsutil::write_atomic(path, self.render().as_bytes(), 0o600)
            .map_err(|e| Error::unwritable("the front's deny-list", path, e))
    }
}

/// Re-reads `path` every `every` and publishes a changed list. A list that fails to read keeps
/// the last good one (logged): a half-edited file must not let a revoked serial back in.
pub fn watch(path: PathBuf, initial: DenyList, every: Duration) -> watch::Receiver<Arc<DenyList>> {
    let (tx, rx) = watch::channel(Arc::new(initial));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                return;
            }
            match DenyList::load(&path) {
                Ok(list) if *tx.borrow() != Arc::new(list.clone()) => {
                    tracing::info!(
                        serials = list.len(),
                        "front: deny-list changed; re-checking open tunnels"
                    );
                    let _ = tx.send(Arc::new(list));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    "front: cannot re-read the deny-list {}: {}; keeping the previous list",
                    path.display(),
                    e.message()
                ),
            }
        }
    });
    rx
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
        assert!(list.contains("1aff"));
        assert_eq!(DenyList::parse(&list.render()).unwrap(), list);
        assert!(DenyList::parse("nope\n").unwrap_err().contains("line 1"));
    }
}
