//! MemMachine's core: the domain error, the domain types every layer shares, and the
//! storage contract (`store`) that each backend crate implements. It depends on no
//! backend and on nothing of the server, so storage never imports the domain.

pub mod access;
pub mod error;
pub mod model;
pub mod store;
pub mod urls;
