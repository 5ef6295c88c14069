//! Opening a [`PostgresStore`]: URL, TLS, the connection pool, errors.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;
use tollgate_checkpoint::StoreError;

use crate::commit::Commits;
use crate::conn::{pool_error, prepared};
use crate::frontiers::Frontiers;
use crate::schema;
use crate::sql::{Pooling, Stmt};
use crate::tls;

/// Settings of a [`PostgresStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// Most connections the store keeps open (default 16). Each concurrent
    /// store call holds one for its duration (one round trip for a write).
    /// The URL's `pool_size=N`, or `TOLLGATE_PG_POOL_SIZE`, overrides it
    /// (for the CLI's processes).
    pub pool_size: usize,
    /// A schema of tollgate's own inside a shared database: created when
    /// missing and set as every pooled connection's `search_path`. `None`
    /// uses the connection's `search_path` (normally `public`). A plain
    /// identifier: lowercase letters, digits and `_`, not starting with a
    /// digit, at most 63 characters.
    pub schema: Option<String>,
    /// How long opening a connection may take when the URL sets no
    /// `connect_timeout` (default 10 s).
    pub connect_timeout: Duration,
    /// How long a call waits for a free connection (default 30 s).
    pub wait_timeout: Duration,
    /// Whether a pooler in transaction mode sits in between (default
    /// [`Pooling::Session`]); the URL's `pool_mode=transaction`, or
    /// `TOLLGATE_PG_POOL_MODE`, says so too.
    pub pooling: Pooling,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            schema: None,
            connect_timeout: Duration::from_secs(10),
            wait_timeout: Duration::from_secs(30),
            pooling: Pooling::Session,
        }
    }
}

impl PostgresOptions {
    /// These options with tollgate's tables in `schema`.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// These options with `pooling`.
    pub fn with_pooling(mut self, pooling: Pooling) -> Self {
        self.pooling = pooling;
        self
    }

    /// These options with at most `size` connections.
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }
}

/// A [`Store`](tollgate_checkpoint::Store) in PostgreSQL, shared by any
/// number of processes on any number of machines.
///
/// Every write is one call of a SQL function of the schema: one round trip
/// and one transaction that locks the run's row, checks the writer (epoch,
/// status, step, event sequence) and then writes, or refuses and writes
/// nothing. A write that changed a run's status is then announced on
/// `tollgate_runs`, and one of a watched run on `tollgate_events`, in a
/// transaction of its own on the same connection. Steps of running runs
/// committing at the same moment share one call (group commit), each
/// still atomic on its own. Reads of a checkpoint run in one
/// repeatable-read snapshot. Connections come from a pool; a connection
/// that broke is replaced on its next use.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Pool,
    /// What connections are opened with: the pool's, and the listener's.
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: MakeRustlsConnect,
    /// Runs' recent full frontiers (`frontiers.rs`), shared by clones.
    pub(crate) frontiers: Arc<Frontiers>,
    /// Commits, and the committer task that groups steps (`commit.rs`).
    pub(crate) commits: Arc<Commits>,
    /// Long-term memory's vectors, for searches with a query (`items.rs`).
    pub(crate) vectors: Arc<tollgate_checkpoint::VectorCache>,
    /// Through a transaction pooler: statements unnamed, no `LISTEN`.
    pub(crate) unnamed: bool,
}

/// `name` when it is a plain identifier (it is put into SQL text).
fn checked_schema(name: Option<&str>) -> Result<Option<&str>, StoreError> {
    let Some(name) = name else { return Ok(None) };
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63;
    if plain {
        Ok(Some(name))
    } else {
        Err(StoreError::InvalidSettings { source: InvalidSchema(name.to_owned()).into() })
    }
}

/// A `pool_size` that is not a number from 1 to 10,000.
#[derive(Debug, thiserror::Error)]
#[error("pool_size=`{0}` is not a number of connections from 1 to 10000")]
struct InvalidPoolSize(String);

/// A `pool_mode` that is neither `session` nor `transaction`.
#[derive(Debug, thiserror::Error)]
#[error("pool_mode=`{0}` is not a pooling mode (session or transaction)")]
struct UnknownPoolMode(String);

/// A schema asked for through a transaction pooler.
#[derive(Debug, thiserror::Error)]
#[error("a schema of tollgate's own needs a session (its search_path is set per connection), which a transaction pooler does not keep: set the role's search_path instead (ALTER ROLE … SET search_path = …), or give tollgate a database of its own")]
struct SchemaNeedsSession;

/// A schema name that is not a plain identifier.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a valid schema name (lowercase letters, digits and `_`, not starting with a digit, at most 63 characters)")]
struct InvalidSchema(String);

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds the password: only where the server is.
        f.debug_struct("PostgresStore")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// `true` for a `postgres://` or `postgresql://` URL: what selects this
    /// store wherever a database is named (anything else is a SQLite path).
    pub fn is_url(text: &str) -> bool {
        text.starts_with("postgres://") || text.starts_with("postgresql://")
    }

    /// Whether `error` (from connecting) says the URL's database does not
    /// exist on the server (SQLSTATE 3D000): the caller's "not found", as a
    /// missing SQLite file is.
    pub fn is_missing_database(error: &StoreError) -> bool {
        let source = match error {
            StoreError::Unavailable { source } | StoreError::Backend { source } => source,
            _ => return false,
        };
        source
            .downcast_ref::<tokio_postgres::error::DbError>()
            .is_some_and(|db| db.code() == &SqlState::INVALID_CATALOG_NAME)
    }

    /// Connects with default [`PostgresOptions`] and migrates the schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url`
    /// (`postgres://user:password@host:port/database?sslmode=require`, or
    /// any form `tokio-postgres` accepts) and brings its schema to this
    /// build's version under an advisory lock, so that many processes
    /// opening one database at once migrate it once.
    ///
    /// Refused, with nothing written: a schema of a newer tollgate
    /// ([`StoreError::SchemaTooNew`]), one holding tables of another
    /// application ([`StoreError::ForeignDatabase`]). An unreachable server
    /// or a refused login is [`StoreError::Unavailable`]; a malformed URL
    /// [`StoreError::InvalidSettings`].
    pub async fn connect_with(url: &str, mut options: PostgresOptions) -> Result<Self, StoreError> {
        let schema = checked_schema(options.schema.as_deref())?;
        let (rest, tls_settings, pool_keys) = tls::split(url, |name| std::env::var(name).ok())?;
        if let Some(text) = pool_keys.size.as_deref() {
            options.pool_size = match text.parse::<usize>() {
                Ok(size @ 1..=10_000) => size,
                _ => {
                    let source = InvalidPoolSize(text.to_owned()).into();
                    return Err(StoreError::InvalidSettings { source });
                }
            };
        }
        let pooling = match pool_keys.mode.as_deref() {
            None => options.pooling,
            Some(text) => Pooling::parse(text).ok_or_else(|| StoreError::InvalidSettings {
                source: UnknownPoolMode(text.to_owned()).into(),
            })?,
        };
        let unnamed = pooling == Pooling::Transaction;
        if unnamed && schema.is_some() {
            return Err(StoreError::InvalidSettings { source: Box::new(SchemaNeedsSession) });
        }
        let mut config: tokio_postgres::Config = rest
            .parse()
            .map_err(|error| StoreError::InvalidSettings { source: Box::new(error) })?;
        let (wire, tls) = tls::connector(&tls_settings)?;
        config.ssl_mode(wire);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("tollgate");
        }
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let mut builder = Pool::builder(manager);
        if let Some(name) = schema {
            // Set on each new connection rather than as a startup
            // `options` parameter, which poolers such as PgBouncer refuse.
            let set = Arc::<str>::from(format!("SET search_path TO {name}"));
            builder = builder.post_create(Hook::async_fn(move |client, _| {
                let set = Arc::clone(&set);
                Box::pin(
                    async move { client.batch_execute(&set).await.map_err(HookError::Backend) },
                )
            }));
        }
        let pool = builder
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.wait_timeout))
            .create_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|error| StoreError::InvalidSettings { source: Box::new(error) })?;
        let frontiers = Arc::<Frontiers>::default();
        let flights = Commits::flights(options.pool_size.max(1));
        let commits =
            Arc::new(Commits::start(pool.clone(), Arc::clone(&frontiers), flights, unnamed));
        let vectors = Arc::default();
        let store = PostgresStore { pool, config, tls, frontiers, commits, vectors, unnamed };
        let mut client = store.client().await?;
        schema::migrate(&mut client, schema, unnamed).await?;
        Ok(store)
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|error| pool_error(&self.pool, error))
    }

    /// A pooled connection and `sql` ready to run on it.
    pub(crate) async fn prepared(
        &self,
        sql: &str,
    ) -> Result<(deadpool_postgres::Client, Stmt), StoreError> {
        prepared(&self.pool, sql, self.unnamed).await
    }
}
