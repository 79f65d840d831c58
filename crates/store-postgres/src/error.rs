//! The one mapping of sqlx and PostgreSQL errors to the domain's `Error`. Every query of
//! the backend maps its failure here, so a client or an operator always learns what
//! they can do about it: retry (`Unavailable`), free capacity (`ResourceExhausted`), or
//! nothing (`Internal`, a fault of the server).

use memmachine_core::error::Error;

/// What a failed statement means for the caller.
pub(crate) fn db_error(err: sqlx::Error) -> Error {
    match &err {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            by_sqlstate(&code, db.message())
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => unavailable(&err),
        _ => Error::Internal(format!("postgres: {err}")),
    }
}

fn unavailable(err: &dyn std::fmt::Display) -> Error {
    Error::Unavailable(format!(
        "the database is unreachable or busy ({err}); retry"
    ))
}

/// The domain error for a PostgreSQL SQLSTATE.
fn by_sqlstate(code: &str, message: &str) -> Error {
    match code {
        "23505" => Error::AlreadyExists(format!("already exists: {message}")),
        // Lost or refused connections, shutdowns, serialisation failures: a retry
        // may well succeed.
        "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "55P03" | "57014" | "53400" => {
            Error::Unavailable(format!("database: {message} (SQLSTATE {code}); retry"))
        }
        c if c.starts_with("08") => {
            Error::Unavailable(format!("database: {message} (SQLSTATE {code}); retry"))
        }
        // Text PostgreSQL cannot hold (a NUL character): the client's to fix.
        "22021" | "22P05" => Error::invalid(
            "",
            format!("text the database cannot store (a NUL character?): {message}"),
        ),
        // Bad credentials, a database that is not there, missing privileges: the
        // operator's to fix, not a fault of the server.
        "28000" | "28P01" | "3D000" | "42501" => {
            Error::FailedPrecondition(format!("database: {message} (SQLSTATE {code})"))
        }
        // Too many connections passes as others close theirs; a full disk or memory
        // is the operator's to fix.
        "53300" => Error::ResourceExhausted {
            message: format!("database: {message} (SQLSTATE {code})"),
            retry_after: Some(std::time::Duration::from_secs(1)),
        },
        "53100" | "53200" => Error::ResourceExhausted {
            message: format!("database: {message} (SQLSTATE {code})"),
            retry_after: None,
        },
        _ => Error::Internal(format!("postgres: {message} (SQLSTATE {code})")),
    }
}

/// The SQLSTATE of a database error, if it is one.
pub(crate) fn sqlstate(err: &sqlx::Error) -> Option<String> {
    match err {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_what_the_caller_can_do() {
        assert!(matches!(
            by_sqlstate("23505", "dup"),
            Error::AlreadyExists(_)
        ));
        for code in [
            "40001", "40P01", "57P01", "57P02", "57P03", "08006", "08001",
        ] {
            assert!(
                matches!(by_sqlstate(code, "x"), Error::Unavailable(_)),
                "{code}"
            );
        }
        for code in ["53100", "53200", "53300"] {
            assert!(
                matches!(by_sqlstate(code, "x"), Error::ResourceExhausted { .. }),
                "{code}"
            );
        }
        for code in ["28P01", "3D000"] {
            assert!(
                matches!(by_sqlstate(code, "x"), Error::FailedPrecondition(_)),
                "{code}"
            );
        }
        assert!(matches!(
            by_sqlstate("22021", "x"),
            Error::InvalidArgument(_)
        ));
        assert!(matches!(by_sqlstate("42P01", "x"), Error::Internal(_)));
        assert!(matches!(
            db_error(sqlx::Error::PoolTimedOut),
            Error::Unavailable(_)
        ));
        assert!(matches!(
            db_error(sqlx::Error::PoolClosed),
            Error::Unavailable(_)
        ));
    }
}
