//! A PostgreSQL [`Store`](tollgate_checkpoint::Store) for tollgate: runs
//! shared by many processes on many machines.
//!
//! [`PostgresStore::connect`] opens a pool on a `postgres://` URL and
//! migrates the schema (once, under an advisory lock, however many
//! processes start together). It keeps the contract of every store, checked
//! by the same conformance suites as SQLite: one transaction per
//! transition, leases with epoch fencing, compare-and-set decisions,
//! newest-first keyset listing.
//!
//! ```no_run
//! use tollgate_postgres::{PostgresOptions, PostgresStore};
//!
//! # async fn open() -> Result<(), tollgate_checkpoint::StoreError> {
//! let url = "postgres://tollgate:secret@db.internal/tollgate?sslmode=require";
//! let store = PostgresStore::connect_with(url, PostgresOptions::default()).await?;
//! # drop(store);
//! # Ok(()) }
//! ```

mod announce;
mod cache;
mod checkpoint;
mod commit;
mod conn;
mod delete;
mod frontiers;
mod items;
mod keys;
mod listen;
mod live;
mod migrations;
mod ops;
mod outbox;
mod rows;
mod schedules;
mod schema;
mod sql;
mod store;
mod threads;
mod tls;

pub use live::{LiveEvent, LivePublisher};
pub use sql::Pooling;
pub use store::{PostgresOptions, PostgresStore};
