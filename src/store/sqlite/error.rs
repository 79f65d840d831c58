//! The one mapping of SQLite errors to the domain's: what an operator can fix (a full
//! disk, a read-only file, a database busy past the timeout) is never `INTERNAL`.

use rusqlite::ErrorCode;

use crate::error::Error;

pub(super) fn storage_error(err: rusqlite::Error) -> Error {
    classify(&err)
}

pub(super) fn classify(err: &rusqlite::Error) -> Error {
    let rusqlite::Error::SqliteFailure(failure, _) = err else {
        return Error::Internal(format!("storage: {err}"));
    };
    match failure.code {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
            Error::Unavailable(format!("the database is busy; retry shortly ({err})"))
        }
        ErrorCode::DiskFull => Error::ResourceExhausted {
            message: format!("the data directory's disk is full: {err}"),
            retry_after: None,
        },
        ErrorCode::ReadOnly => {
            Error::Unavailable(format!("the database cannot be written (read-only): {err}"))
        }
        ErrorCode::SystemIoFailure
        | ErrorCode::CannotOpen
        | ErrorCode::FileLockingProtocolFailed => Error::Unavailable(format!(
            "the database file cannot be read or written: {err}"
        )),
        ErrorCode::OutOfMemory => Error::ResourceExhausted {
            message: format!("out of memory: {err}"),
            retry_after: None,
        },
        ErrorCode::ConstraintViolation
            if matches!(
                failure.extended_code,
                rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            ) =>
        {
            Error::AlreadyExists(format!("already exists: {err}"))
        }
        _ => Error::Internal(format!("storage: {err}")),
    }
}
