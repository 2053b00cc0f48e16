//! Sealing secrets at rest with ChaCha20-Poly1305.
//!
//! The master key is 32 bytes: from `SWITCHYARD_MASTER_KEY` (64 hex digits)
//! when set, otherwise from `<data_dir>/master.key`, created on first start
//! with mode 0600. A sealed value is `nonce (12 bytes) ‖ ciphertext`, bound by
//! the AEAD's associated data to the place it is stored (team and name), so a
//! sealed value copied to another secret does not open.

use std::path::Path;

use anyhow::{Context, bail};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

const KEY_FILE: &str = "master.key";
const NONCE_LEN: usize = 12;

/// The master key. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct Sealer {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// A scratch store (see `Store::scratch`) and a sealer with its own key
    /// beside it, for unit tests.
    #[cfg(test)]
    pub fn scratch() -> (tempfile::TempDir, crate::store::Store, Sealer) {
        let (dir, store) = crate::store::Store::scratch();
        let sealer = Sealer::load(dir.path(), None).unwrap();
        (dir, store, sealer)
    }

    /// The key from `from_env` (hex) if given, else from the data directory,
    /// creating it there on first use.
    pub fn load(data_dir: &Path, from_env: Option<&str>) -> anyhow::Result<Sealer> {
        let key = match from_env {
            Some(hex_key) => decode_key(hex_key.trim())
                .context("SWITCHYARD_MASTER_KEY must be 64 hex digits (32 bytes)")?,
            None => load_or_create(&data_dir.join(KEY_FILE))?,
        };
        Ok(Sealer {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    /// Refuses a master key other than the one this store's secrets are
    /// sealed with: a known value sealed under the first key is kept in the
    /// store, and must open. Otherwise every secret would fail later, one
    /// by one, at send time.
    pub async fn verify(&self, store: &crate::store::Store) -> anyhow::Result<()> {
        const CHECK: &str = crate::store::MASTER_KEY_CHECK;
        match store.meta(CHECK).await? {
            None => Ok(store
                .set_meta(CHECK, &self.seal(CHECK.as_bytes(), CHECK.as_bytes())?)
                .await?),
            Some(sealed) if self.open(CHECK.as_bytes(), &sealed).is_ok() => Ok(()),
            Some(_) => bail!(
                "the master key does not match the one this store's secrets were sealed with; \
                 start with that key (SWITCHYARD_MASTER_KEY, or the data directory's {KEY_FILE})"
            ),
        }
    }

    /// Encrypts `plain`, bound to `context`.
    pub fn seal(&self, context: &[u8], plain: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        crate::ids::fill_random(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: context,
                },
            )
            .map_err(|_| anyhow::anyhow!("sealing failed"))?;
        Ok([nonce.as_slice(), &sealed].concat())
    }

    /// Decrypts a value sealed for `context`.
    pub fn open(&self, context: &[u8], sealed: &[u8]) -> anyhow::Result<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            bail!("sealed value is truncated");
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: body, aad: context })
            .map_err(|_| anyhow::anyhow!("a sealed secret does not open: wrong master key, or the store was tampered with"))
    }
}

fn decode_key(text: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = hex::decode(text)?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("the key is not 32 bytes"))
}

fn load_or_create(path: &Path) -> anyhow::Result<[u8; 32]> {
    if path.exists() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the master key {}", path.display()))?;
        return decode_key(text.trim())
            .with_context(|| format!("{} is not a valid master key", path.display()));
    }
    let mut key = [0u8; 32];
    crate::ids::fill_random(&mut key);
    if let Some(dir) = path.parent() {
        crate::files::create_dir(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    }
    // Durable before anything is sealed with it: a key lost to a power
    // cut loses every secret for good.
    match crate::files::create_private(path, hex::encode(key).as_bytes()) {
        Ok(()) => Ok(key),
        // Another process made it first: that one is the key.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create(path),
        Err(e) => Err(anyhow::Error::new(e)
            .context(format!("cannot create the master key {}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_in_their_context() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = Sealer::load(dir.path(), None).unwrap();
        let sealed = sealer.seal(b"team\0token", b"hunter2").unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(sealer.open(b"team\0token", &sealed).unwrap(), b"hunter2");
        assert!(sealer.open(b"team\0other", &sealed).is_err());
        // The key persists: a new Sealer on the same directory opens it.
        let again = Sealer::load(dir.path(), None).unwrap();
        assert_eq!(again.open(b"team\0token", &sealed).unwrap(), b"hunter2");
    }

    #[cfg(unix)]
    #[test]
    fn the_key_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        Sealer::load(dir.path(), None).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_bad_env_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Sealer::load(dir.path(), Some("abc")).is_err());
        assert!(Sealer::load(dir.path(), Some(&"ab".repeat(32))).is_ok());
    }
}
