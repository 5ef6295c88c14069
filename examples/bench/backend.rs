//! Where the workloads' stores live: SQLite files in a folder, or schemas
//! on a Postgres server; what a store is opened as, and the bytes it left.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use tollgate::{ItemStore, SqliteOptions, SqliteStore, Store};
use tollgate_postgres::{PostgresOptions, PostgresStore};

/// Where the workloads' stores live.
pub(crate) enum Backend {
    /// One SQLite file per workload in this folder, created with these
    /// settings.
    Sqlite(std::path::PathBuf, SqliteOptions),
    /// One schema per workload on the server of this URL.
    Postgres(String),
}

impl Backend {
    /// What a worker child is told to open for the workload `name`.
    pub(crate) fn location(&self, name: &str) -> String {
        match self {
            Backend::Sqlite(dir, _) => dir.join(format!("{name}.db")).display().to_string(),
            Backend::Postgres(_) => format!("bench_{name}"),
        }
    }

    /// What `tollgate serve --db` (or `Runs::open`) is given for the
    /// workload `name`: its SQLite file, or the server's URL with the
    /// workload's schema as the session's search path.
    pub(crate) fn url(&self, name: &str) -> String {
        match self {
            Backend::Sqlite(..) => self.location(name),
            Backend::Postgres(url) => {
                let join = if url.contains('?') { '&' } else { '?' };
                format!("{url}{join}options=-csearch_path%3Dbench_{name}")
            }
        }
    }

    /// A fresh, empty store for the workload `name`.
    pub(crate) async fn open(
        &self,
        name: &str,
    ) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
        Ok(self.fresh(name).await?.0)
    }

    /// A fresh, empty long-term memory store for the workload `name` (the
    /// run store's database: its `items` table).
    pub(crate) async fn open_items(
        &self,
        name: &str,
    ) -> Result<Arc<dyn ItemStore>, Box<dyn std::error::Error>> {
        if let Backend::Sqlite(dir, _) = self {
            let _ = std::fs::remove_file(dir.join(format!("{name}.db")));
        }
        Ok(self.fresh(name).await?.1)
    }

    /// The workload's store as a run store and as an item store (a Postgres
    /// schema dropped first).
    async fn fresh(
        &self,
        name: &str,
    ) -> Result<(Arc<dyn Store>, Arc<dyn ItemStore>), Box<dyn std::error::Error>> {
        Ok(match self {
            Backend::Sqlite(dir, options) => {
                let store = Arc::new(SqliteStore::open_with(
                    dir.join(format!("{name}.db")),
                    options.clone(),
                )?);
                (store.clone(), store)
            }
            Backend::Postgres(url) => {
                let schema = format!("bench_{name}");
                let client = pg_client(url).await?;
                client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await?;
                let options = PostgresOptions::default().with_schema(schema);
                let store = Arc::new(PostgresStore::connect_with(url, options).await?);
                (store.clone(), store)
            }
        })
    }

    /// Has Postgres gather the statistics of the workload `name`'s tables
    /// now, as autovacuum does a while after a table fills (its plans
    /// then are those of a database in use); nothing on SQLite, which
    /// gathers none unless asked.
    pub(crate) async fn analyze(&self, name: &str) -> Result<(), Box<dyn std::error::Error>> {
        if let Backend::Postgres(url) = self {
            let client = pg_client(url).await?;
            client
                .batch_execute(&format!("ANALYZE bench_{name}.threads, bench_{name}.runs"))
                .await?;
        }
        Ok(())
    }

    /// Bytes the workload `name` left: the SQLite file with its WAL, or the
    /// Postgres schema's tables with their TOAST and indexes.
    pub(crate) async fn bytes(&self, name: &str) -> Result<u64, Box<dyn std::error::Error>> {
        Ok(match self {
            Backend::Sqlite(dir, _) => db_bytes(&dir.join(format!("{name}.db"))),
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

/// The Postgres store of the workload `name` as it stands (not emptied).
pub(crate) async fn reopen(
    url: &str,
    name: &str,
) -> Result<PostgresStore, Box<dyn std::error::Error>> {
    let options = PostgresOptions::default().with_schema(format!("bench_{name}"));
    Ok(PostgresStore::connect_with(url, options).await?)
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

/// Commits of `pg_raw_commit`, on each count of connections.
const RAW_COMMITS: u64 = 1_000;

/// The Postgres floor: single-row INSERTs, each its own transaction (one
/// round trip and one commit), `synchronous_commit` as the server has it.
/// `per_step_us`: one connection, driven from the calling task, as
/// `cycle` drives its run (each round trip crosses from this thread to the
/// runtime worker polling the connection and back). Then the same 1,000
/// commits from spawned tasks: on one connection (`spawned_us`), and split
/// over 2 and over 4 connections committing at once (`c2`, `c4`: commits
/// per second, and their ratio to the spawned one connection's). Those
/// ratios bound what more worker processes, one leg each, can gain from
/// the server.
pub(crate) async fn pg_raw_commit(url: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let setup = pg_client(url).await?;
    setup
        .batch_execute(
            "DROP SCHEMA IF EXISTS bench_raw CASCADE; CREATE SCHEMA bench_raw; \
             CREATE TABLE bench_raw.t (id bigserial PRIMARY KEY, payload bytea NOT NULL)",
        )
        .await?;
    let synchronous: String = setup.query_one("SHOW synchronous_commit", &[]).await?.get(0);
    const INSERT: &str = "INSERT INTO bench_raw.t (payload) VALUES ($1)";
    let payload = vec![7u8; 64];
    let client = pg_client(url).await?;
    let insert = client.prepare(INSERT).await?;
    let started = Instant::now();
    for _ in 0..RAW_COMMITS {
        client.execute(&insert, &[&payload]).await?;
    }
    let calling = started.elapsed().as_secs_f64();
    let mut rates = serde_json::Map::new();
    // The one spawned connection's seconds, which the others are compared to.
    let mut single = 0.0;
    for connections in [1u64, 2, 4] {
        let mut clients = Vec::new();
        for _ in 0..connections {
            let client = pg_client(url).await?;
            let insert = client.prepare(INSERT).await?;
            clients.push((client, insert));
        }
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (client, insert) in clients {
            let payload = payload.clone();
            tasks.spawn(async move {
                for _ in 0..RAW_COMMITS / connections {
                    client.execute(&insert, &[&payload]).await?;
                }
                Ok::<_, tokio_postgres::Error>(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        let seconds = started.elapsed().as_secs_f64();
        if connections == 1 {
            single = seconds;
            rates.insert("spawned_us".into(), json!(seconds * 1e6 / RAW_COMMITS as f64));
        } else {
            let rate = RAW_COMMITS as f64 / seconds;
            rates.insert(format!("c{connections}_commits_per_s"), json!(rate));
            rates.insert(format!("c{connections}_over_c1"), json!(single / seconds));
        }
    }
    let stored: i64 = setup.query_one("SELECT count(*) FROM bench_raw.t", &[]).await?.get(0);
    assert_eq!(stored as u64, 4 * RAW_COMMITS, "every commit stored");
    let mut line = crate::line("pg_raw_commit", RAW_COMMITS, calling, RAW_COMMITS, 0, RAW_COMMITS);
    line["synchronous_commit"] = json!(synchronous);
    Ok(crate::extend(line, Value::Object(rates)))
}
