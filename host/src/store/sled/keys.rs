//! Key encoding for the sled engine's trees.
//!
//! A key is a sequence of segments. Text segments are UTF-8 and end with a
//! `0x00` byte; numbers are 8 bytes big-endian, so byte order is numeric order.
//! Keys therefore sort by their first segment, then the next, and all keys that
//! start with the same segments share a byte prefix: `prefix(&["team"])` lists
//! everything under that team with one range scan.
//!
//! Text segments must not contain `0x00`; [`Key::text`] rejects them rather
//! than letting two different keys collide.

/// A key under construction.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl Key {
    /// An empty key.
    pub fn new() -> Self {
        Key(Vec::new())
    }

    /// Appends a text segment.
    ///
    /// # Panics
    /// Never on input from clients: callers validate names first, and a NUL
    /// in a segment is a programming error caught here in debug builds.
    pub fn text(mut self, segment: &str) -> Self {
        debug_assert!(!segment.contains('\0'), "key segment contains NUL");
        self.0.extend(segment.bytes().filter(|b| *b != 0));
        self.0.push(0);
        self
    }

    /// Appends a number segment, ordered numerically.
    pub fn num(mut self, n: u64) -> Self {
        self.0.extend_from_slice(&n.to_be_bytes());
        self
    }

    /// The encoded bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Key> for Vec<u8> {
    fn from(key: Key) -> Vec<u8> {
        key.0
    }
}

/// The key prefix shared by every key that starts with `segments`.
pub fn prefix(segments: &[&str]) -> Key {
    segments.iter().fold(Key::new(), |key, s| key.text(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_segments_do_not_run_into_each_other() {
        let ab_c = prefix(&["ab", "c"]);
        let a_bc = prefix(&["a", "bc"]);
        assert_ne!(ab_c, a_bc);
    }

    #[test]
    fn prefixes_select_children_only() {
        let child = prefix(&["team", "p1"]).into_bytes();
        assert!(child.starts_with(prefix(&["team"]).as_ref()));
        assert!(!child.starts_with(prefix(&["tea"]).as_ref()));
    }

    #[test]
    fn numbers_sort_numerically() {
        let small = Key::new().num(9).into_bytes();
        let large = Key::new().num(10).into_bytes();
        assert!(small < large);
    }
}
