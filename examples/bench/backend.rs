//! Where the workloads' stores live: SQLite files in a folder, or schemas
//! on a Postgres server; what a store is opened as, and the bytes it left.

use std::sync::Arc;

use tollgate::{SqliteStore, Store};
use tollgate_postgres::{PostgresOptions, PostgresStore};

/// Where the workloads' stores live.
pub(crate) enum Backend {
    /// One SQLite file per workload in this folder.
    Sqlite(std::path::PathBuf),
    /// One schema per workload on the server of this URL.
    Postgres(String),
}

impl Backend {
    /// What a worker child is told to open for the workload `name`.
    pub(crate) fn location(&self, name: &str) -> String {
        match self {
            Backend::Sqlite(dir) => dir.join(format!("{name}.db")).display().to_string(),
            Backend::Postgres(_) => format!("bench_{name}"),
        }
    }

    /// A fresh, empty store for the workload `name`.
    pub(crate) async fn open(
        &self,
        name: &str,
    ) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
        Ok(match self {
            Backend::Sqlite(dir) => Arc::new(SqliteStore::open(dir.join(format!("{name}.db")))?),
            Backend::Postgres(url) => {
                let schema = format!("bench_{name}");
                let client = pg_client(url).await?;
                client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await?;
                let options = PostgresOptions::default().with_schema(schema);
                Arc::new(PostgresStore::connect_with(url, options).await?)
            }
        })
    }

    /// Bytes the workload `name` left: the SQLite file with its WAL, or the
    /// Postgres schema's tables with their TOAST and indexes.
    pub(crate) async fn bytes(&self, name: &str) -> Result<u64, Box<dyn std::error::Error>> {
        Ok(match self {
            Backend::Sqlite(dir) => db_bytes(&dir.join(format!("{name}.db"))),
            Backend::Postgres(url) => {
                let client = pg_client(url).await?;
                let row = client
                    .query_one(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $1 AND c.relkind = 'r'",
                        &[&format!("bench_{name}")],
                    )
                    .await?;
                row.get::<_, i64>(0) as u64
            }
        })
    }
}

pub(crate) async fn pg_client(
    url: &str,
) -> Result<tokio_postgres::Client, Box<dyn std::error::Error>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Bytes of a database with its WAL and shared-memory files, measured once
/// the store is closed (closing checkpoints the WAL into the database).
pub(crate) fn db_bytes(path: &std::path::Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).ok().map(|meta| meta.len())
        })
        .sum()
}
