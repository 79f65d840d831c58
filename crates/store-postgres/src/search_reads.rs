//! `SearchReads` on PostgreSQL: the trait's reads one after another (head first), for
//! now; one snapshot would need them in one REPEATABLE READ transaction.

use super::PostgresStore;
use memmachine_core::store::SearchReads;

impl SearchReads for PostgresStore {}
