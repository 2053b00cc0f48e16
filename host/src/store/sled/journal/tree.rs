//! Where the journal keeps its index between starts (`snapshot.rs`): a
//! sorted map that keeps what was last flushed. sled's tree in the store;
//! a map in memory in tests, flushed by copying it.

use std::collections::BTreeMap;

use anyhow::Result;

/// A change to a key: `None` removes it.
pub type Batch = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);

/// What the journal asks of the map its snapshot lives in.
pub trait Tree: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The pairs under `prefix`, in key order, newest (highest) first
    /// when `rev`.
    fn scan<'a>(&'a self, prefix: &[u8], rev: bool) -> Box<dyn Iterator<Item = Result<Pair>> + 'a>;
    /// Applies `batch`, key by key in order: a crash may keep any prefix.
    fn apply(&self, batch: &Batch) -> Result<()>;
}

impl Tree for sled::Tree {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(sled::Tree::get(self, key)?.map(|v| v.to_vec()))
    }

    fn scan<'a>(&'a self, prefix: &[u8], rev: bool) -> Box<dyn Iterator<Item = Result<Pair>> + 'a> {
        let pairs = self.scan_prefix(prefix);
        let pair = |p: sled::Result<(sled::IVec, sled::IVec)>| {
            p.map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(anyhow::Error::from)
        };
        if rev {
            Box::new(pairs.rev().map(pair))
        } else {
            Box::new(pairs.map(pair))
        }
    }

    // Not sled's batches: one holds every other operation on the store
    // (every request's) for as long as it takes.
    fn apply(&self, batch: &Batch) -> Result<()> {
        for (key, value) in batch {
            match value {
                Some(value) => self.insert(key.as_slice(), value.as_slice())?,
                None => self.remove(key.as_slice())?,
            };
        }
        Ok(())
    }
}

/// One write of a batch: `None` removes the key (tests).
#[cfg(test)]
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// A map in memory (tests): [`Memory::flushed`] is what a flush keeps;
/// [`Memory::writes`] every write applied, in order, of which a crash
/// after a flush may keep any prefix beyond it.
#[cfg(test)]
#[derive(Default)]
pub struct Memory {
    map: std::sync::Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    writes: std::sync::Mutex<Vec<Write>>,
}

#[cfg(test)]
impl Memory {
    /// A map holding `pairs`.
    pub fn from(pairs: BTreeMap<Vec<u8>, Vec<u8>>) -> std::sync::Arc<Memory> {
        std::sync::Arc::new(Memory {
            map: std::sync::Mutex::new(pairs),
            writes: Default::default(),
        })
    }

    /// Every write applied so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }

    /// How many writes were applied so far.
    pub fn written(&self) -> usize {
        self.writes.lock().unwrap().len()
    }

    /// Everything it holds now: what it keeps if flushed now.
    pub fn flushed(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.map.lock().unwrap().clone()
    }
}

#[cfg(test)]
impl Tree for Memory {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map.lock().unwrap().get(key).cloned())
    }

    fn scan<'a>(&'a self, prefix: &[u8], rev: bool) -> Box<dyn Iterator<Item = Result<Pair>> + 'a> {
        let mut pairs: Vec<Pair> = self
            .map
            .lock()
            .unwrap()
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if rev {
            pairs.reverse();
        }
        Box::new(pairs.into_iter().map(Ok))
    }

    fn apply(&self, batch: &Batch) -> Result<()> {
        let mut map = self.map.lock().unwrap();
        let mut writes = self.writes.lock().unwrap();
        for (key, value) in batch {
            writes.push((key.clone(), value.clone()));
            match value {
                Some(value) => map.insert(key.clone(), value.clone()),
                None => map.remove(key),
            };
        }
        Ok(())
    }
}
