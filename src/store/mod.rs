//! Storage: the contract (`memmachine_core::store`, re-exported here so callers keep
//! one path), the backends, and the one place a backend is chosen (`open`).

pub use memmachine_core::store::*;

mod open;
pub mod postgres;
pub mod sqlite;

pub use open::{StoreLocation, open};
