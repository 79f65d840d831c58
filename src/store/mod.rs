//! Storage: the contract (`memmachine_core::store`) and the backend crates, re-exported
//! here so callers keep one path, and the one place a backend is chosen (`open`).

pub use memmachine_core::store::*;
pub use memmachine_store_postgres as postgres;
pub use memmachine_store_sqlite as sqlite;

mod open;

pub use open::{StoreLocation, open};
