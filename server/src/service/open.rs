//! Opening the runs' database (a SQLite file or a Postgres URL) with its
//! change signals, and what a `Runs` is built with: registered graphs,
//! an embedder for memory, the environment blueprints inherit; the
//! signals streams and the dispatcher wait on.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use tollgate_checkpoint::{
    Embedder, IndexConfig, ItemStore, Memory, RunId, SqliteStore, Store, StoreError,
};

use tollgate_engine::Executor;
use tollgate_postgres::PostgresStore;

use crate::error::ServiceError;

use super::{models, Backend, Graphs, Runs, WATCH_LEASE};

/// `url` with its password (if any) replaced by `***`, for messages.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_owned() };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => {
                format!("{}{}:***{}", &url[..scheme_end + 3], &rest[..colon], &rest[at..])
            }
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// How often the SQLite change watcher looks at `PRAGMA data_version`.
const SQLITE_CHANGE_CHECK: Duration = Duration::from_millis(5);

impl Runs {
    /// Opens the database `db` names: a `postgres://` (or `postgresql://`)
    /// URL selects PostgreSQL, anything else is a SQLite file's path.
    pub async fn open(db: &Path, create: bool) -> Result<Self, ServiceError> {
        let text = db.to_string_lossy();
        if !create && !PostgresStore::is_url(&text) && !db.exists() {
            return Err(ServiceError::missing(format!(
                    "no database at {text} (check --db or TOLLGATE_DB; `tollgate run` and `tollgate serve --create` create one)"
                )));
        }
        if !PostgresStore::is_url(&text) {
            let parent = db.parent().filter(|parent| !parent.as_os_str().is_empty());
            if let Some(parent) = parent.filter(|parent| !parent.is_dir()) {
                return Err(ServiceError::missing(format!(
                    "no directory {} for the database {text}: create it first (mkdir -p {})",
                    parent.display(),
                    parent.display()
                )));
            }
        }
        let opened = if PostgresStore::is_url(&text) {
            PostgresStore::connect(&text).await.map(|store| {
                let store = Arc::new(store);
                let memory = Memory::new(Arc::clone(&store) as Arc<dyn ItemStore>);
                let executor =
                    Executor::with_store(Arc::clone(&store) as Arc<dyn Store>).with_memory(memory);
                (Some(store.run_notifications()), Backend::Postgres(store), executor)
            })
        } else {
            SqliteStore::open(db).map(|store| {
                let store = Arc::new(store);
                let memory = Memory::new(Arc::clone(&store) as Arc<dyn ItemStore>);
                let executor =
                    Executor::with_store(Arc::clone(&store) as Arc<dyn Store>).with_memory(memory);
                (None, Backend::Sqlite(store), executor)
            })
        };
        let (wake, backend, executor) = opened.map_err(|error| {
            let message = format!("cannot open database {}: {error}", redact(&text));
            if PostgresStore::is_missing_database(&error) {
                let message = format!("{message} (create it first: createdb, or CREATE DATABASE)");
                return ServiceError::missing(message).with_source(error);
            }
            match error {
                StoreError::InvalidSettings { .. }
                | StoreError::ForeignDatabase { .. }
                | StoreError::UnknownSchemaVersion { .. } => {
                    ServiceError::invalid(message).with_source(error)
                }
                _ => ServiceError::failed(message).with_source(error),
            }
        })?;
        Ok(Self {
            executor: Arc::new(executor),
            models: models(),
            wake,
            backend,
            changes: Arc::default(),
            statuses: Arc::default(),
            pass_env: Arc::default(),
            graphs: Arc::default(),
            thread_ttl: None,
        })
    }

    /// Serves the typed graphs of `graphs` besides blueprints: the API
    /// starts them by name, decisions and `continue` drive their runs
    /// here, workers drive them too.
    pub fn with_graphs(mut self, graphs: Graphs) -> Self {
        self.graphs = Arc::new(graphs);
        self
    }

    /// Long-term memory semantic searches embed with `embedder`, as
    /// `config` says (without one, searches have no query).
    pub fn with_embedder(mut self, config: IndexConfig, embedder: Arc<dyn Embedder>) -> Self {
        let memory = self.memory().clone().with_index(config, embedder);
        let executor = Executor::with_store(Arc::clone(self.executor.store())).with_memory(memory);
        self.executor = Arc::new(executor);
        self
    }

    /// Long-term memory, in the runs' database: what agents' `remember`
    /// and `recall` tools use, and the API's `/store` endpoints.
    pub fn memory(&self) -> &Memory {
        self.executor.memory().expect("Runs::open gives the executor its memory")
    }

    /// Removes expired memory items and request keys every `every`, until
    /// the runtime ends (both are invisible from the moment they expire;
    /// this reclaims their space), and the threads whose time to live ran
    /// out (see `retention.rs`). Keys go in batches of 500, each its own
    /// short transaction, threads one at a time, so a sweep never holds
    /// up runs.
    pub fn sweep_expired_every(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let runs = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                match runs.memory().sweep().await {
                    Ok(0) => {}
                    Ok(removed) => tracing::debug!(removed, "expired memory items removed"),
                    Err(error) => tracing::warn!(%error, "sweeping expired memory items failed"),
                }
                match runs.sweep_keys().await {
                    Ok(0) => {}
                    Ok(removed) => tracing::debug!(removed, "expired request keys removed"),
                    Err(error) => tracing::warn!(%error, "sweeping expired request keys failed"),
                }
                match runs.sweep_threads().await {
                    Ok(0) => {}
                    Ok(removed) => tracing::info!(removed, "expired threads removed"),
                    Err(error) => tracing::warn!(%error, "sweeping expired threads failed"),
                }
            }
        })
    }

    /// The executor behind the runs.
    pub(crate) fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Lets programs of the blueprints this process drives see `names`
    /// of its environment (`--pass-env`).
    pub fn with_pass_env(mut self, names: Vec<String>) -> Self {
        self.pass_env = Arc::new(names);
        self
    }

    /// Whether runs are shared with worker processes (Postgres): runs
    /// started over the API are then queued for them.
    pub(crate) fn shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// On Postgres, the live events other processes publish for watched
    /// runs (`PostgresStore::live_events`); `None` on SQLite.
    pub(crate) fn live_events(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<tollgate_postgres::LiveEvent>> {
        match &self.backend {
            Backend::Postgres(store) => Some(store.live_events()),
            Backend::Sqlite(_) => None,
        }
    }

    /// On Postgres, a publisher of the live events of the legs this
    /// process drives, for the servers that follow them; `None` on SQLite
    /// (a server reads another process's events from the file as they
    /// commit).
    pub(crate) fn live_publisher(&self) -> Option<tollgate_postgres::LivePublisher> {
        match &self.backend {
            Backend::Postgres(store) => Some(store.live_publisher()),
            Backend::Sqlite(_) => None,
        }
    }

    /// A signal woken by commits of any process (of watched runs, on
    /// Postgres), or `None` where there is none and readers poll.
    pub(crate) fn changes(&self) -> Option<Arc<Notify>> {
        self.changes
            .get_or_init(|| match &self.backend {
                Backend::Postgres(store) => Some(store.event_notifications()),
                Backend::Sqlite(store) => store
                    .changes(SQLITE_CHANGE_CHECK)
                    .map_err(|error| tracing::warn!(%error, "no change signal; streams poll"))
                    .ok(),
            })
            .clone()
    }

    /// A signal that wakes every waiter when runs change status (any
    /// commit, on SQLite), or `None` where there is none.
    pub(crate) fn status_changes(&self) -> Option<Arc<Notify>> {
        match &self.backend {
            Backend::Sqlite(_) => self.changes(),
            Backend::Postgres(store) => {
                self.statuses.get_or_init(|| Some(store.status_notifications())).clone()
            }
        }
    }

    /// Registers `run` as streamed, so that its commits wake
    /// [`Runs::changes`] (Postgres; a no-op on SQLite, where every commit
    /// does).
    pub(crate) async fn watch(&self, run: RunId) -> Result<(), ServiceError> {
        if let Backend::Postgres(store) = &self.backend {
            store.watch(run, WATCH_LEASE).await?;
        }
        Ok(())
    }
}
