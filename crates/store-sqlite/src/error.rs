//! The one mapping of SQLite errors to the domain's: what an operator can fix (a full
//! disk, a read-only file, a database busy past the timeout) is never `INTERNAL`.

use rusqlite::ErrorCode;

use memmachine_core::error::Error;

pub(super) fn storage_error(err: rusqlite::Error) -> Error {
    classify(&err)
}

/// As `classify`, naming what the operating system said of a failed write on `conn`
/// (SQLite's own code is only "disk I/O error"): a read-only or full filesystem.
pub(super) fn classify_on(conn: &rusqlite::Connection, err: &rusqlite::Error) -> Error {
    let classified = classify(err);
    let rusqlite::Error::SqliteFailure(failure, _) = err else {
        return classified;
    };
    if failure.code != ErrorCode::SystemIoFailure {
        return classified;
    }
    // SAFETY: the handle is valid while `conn` lives, and this only reads the errno
    // SQLite kept of its last failed system call.
    let errno = unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) };
    let cause = std::io::Error::from_raw_os_error(errno);
    match cause.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem => Error::Unavailable(format!(
            "the data directory's filesystem is read-only: {err} ({cause})"
        )),
        std::io::ErrorKind::StorageFull => Error::ResourceExhausted {
            message: format!("the data directory's disk is full: {err} ({cause})"),
            retry_after: None,
        },
        _ if errno != 0 => Error::Unavailable(format!(
            "the database file cannot be read or written: {err} ({cause})"
        )),
        _ => classified,
    }
}

pub(super) fn classify(err: &rusqlite::Error) -> Error {
    let rusqlite::Error::SqliteFailure(failure, _) = err else {
        return Error::Internal(format!("storage: {err}"));
    };
    match failure.code {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
            Error::Unavailable(format!("the database is busy; retry shortly ({err})"))
        }
        // Only a read whose caller left is interrupted (connection.rs).
        ErrorCode::OperationInterrupted => {
            Error::DeadlineExceeded(format!("the read was stopped: its caller left ({err})"))
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
