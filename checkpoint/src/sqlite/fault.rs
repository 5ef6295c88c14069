//! How SQLite trouble becomes the store's errors, and why a write closure
//! stopped: shared by the store, its writers and its checkpointer.

use rusqlite::ErrorCode;

use crate::error::StoreError;

pub(crate) fn backend(error: rusqlite::Error) -> StoreError {
    StoreError::Backend { source: Box::new(error) }
}

pub(super) fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(failure.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Why a write closure stopped: a refusal to report, or SQLite trouble.
pub(crate) enum Abort {
    Refused(StoreError),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for Abort {
    fn from(error: rusqlite::Error) -> Self {
        Abort::Sqlite(error)
    }
}

impl From<StoreError> for Abort {
    fn from(error: StoreError) -> Self {
        Abort::Refused(error)
    }
}
