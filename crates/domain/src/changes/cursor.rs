//! Cursors: opaque to clients, they carry the project's store handle (never reused, so
//! a project deleted and created again under the same id has another) and the change
//! id, versioned so that the format may change.

use crate::error::{Error, Result};
use crate::model::{ChangeSeq, ProjectHandle};

const VERSION: &str = "c1.";

pub fn encode(project: ProjectHandle, change: ChangeSeq) -> String {
    format!("{VERSION}{:016x}{:016x}", project.raw(), change.raw())
}

/// The cursor's project and change; anything else is INVALID_ARGUMENT on `after`.
pub fn decode(cursor: &str) -> Result<(ProjectHandle, ChangeSeq)> {
    let bad = || Error::invalid("after", "not a cursor this server gave out");
    let hex = cursor.strip_prefix(VERSION).ok_or_else(bad)?;
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let project = u64::from_str_radix(&hex[..16], 16).map_err(|_| bad())? as i64;
    let change = u64::from_str_radix(&hex[16..], 16).map_err(|_| bad())? as i64;
    if project < 0 || change < 0 {
        return Err(bad());
    }
    Ok((
        ProjectHandle::from_raw(project),
        ChangeSeq::from_raw(change),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let (p, c) = (
            ProjectHandle::from_raw(42),
            ChangeSeq::from_raw(7_000_000_001),
        );
        assert_eq!(decode(&encode(p, c)).unwrap(), (p, c));
        for garbage in [
            "",
            "c1.",
            "c2.00000000000000010000000000000001",
            "c1.zz",
            "hello",
        ] {
            let err = decode(garbage).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(ref v) if v[0].field == "after"));
        }
        assert!(
            decode(&format!("c1.{}", "f".repeat(32))).is_err(),
            "negative ids"
        );
    }
}
