//! Helpers for sled transactions whose closures fail with the API's error.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use crate::error::Error;

/// What a transaction closure returns.
pub type TxResult<T> = Result<T, ConflictableTransactionError<Error>>;

/// Aborts the transaction with `e`.
pub fn abort<T>(e: Error) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

/// Decodes a JSON record inside a transaction.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> TxResult<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| ConflictableTransactionError::Abort(Error::Internal(e.into())))
}

/// Encodes a JSON record inside a transaction.
pub fn encode<T: Serialize>(value: &T) -> TxResult<Vec<u8>> {
    super::to_json(value).map_err(|e| ConflictableTransactionError::Abort(Error::Internal(e)))
}

/// A transaction's outcome in the API's error type.
pub fn finish<T>(result: Result<T, TransactionError<Error>>) -> crate::error::Result<T> {
    result.map_err(|e| match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => Error::Internal(e.into()),
    })
}
