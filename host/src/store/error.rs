//! The store's own error type. The HTTP layer maps it (in `error.rs`): an
//! engine that cannot be reached is 503, anything else a logged 500.

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The engine cannot be reached or refused the work for now (a database
    /// that went away, a pool with no free connection); retrying later may
    /// succeed. It says nothing of where the store is: the engine logs that,
    /// without credentials, and this text reaches unauthenticated callers.
    #[error("the store is unavailable")]
    Unavailable,
    /// The store failed to write or sync and takes no more writes (it is
    /// fail-stop: the process stops, and the next start recovers from the
    /// disk). Says what failed.
    #[error("{0}")]
    Failed(String),
    /// The disk holding the store is full: the write was refused and
    /// changed nothing; writes resume once there is room (`sled/reserve.rs`).
    #[error("the disk holding the store is full")]
    Full,
    /// Anything else: an I/O error, a record that could not be encoded.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Other(e.into())
    }
}
