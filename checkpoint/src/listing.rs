//! What listings read and return: which runs ([`RunFilter`]), pages and
//! their cursors, the rows that could not be read, thread records and their
//! searches ([`ThreadQuery`], [`ThreadStatus`]), and
//! the count of runs waiting for a decision.

use std::fmt;

use crate::ids::RunId;
use crate::record::RunRecord;
use crate::status::RunStatus;

/// Runs waiting for a decision ([`RunStore::waiting`](crate::RunStore::waiting)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Runs with status `awaiting_hitl`.
    pub runs: u64,
    /// The earliest time one of them paused (its last transition),
    /// milliseconds since the Unix epoch; `None` when none waits.
    pub oldest_since_ms: Option<i64>,
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this graph name.
    pub graph: Option<String>,
    /// Only runs of this thread.
    pub thread: Option<String>,
    /// Only runs on threads whose record names this holder
    /// ([`ThreadRecord::owner`], [`ThreadRecord::tenant`]): a user's
    /// runs. Runs on threads without a record, and runs without a
    /// thread, have no holder and are left out.
    pub held_by: Option<Holder>,
    /// With [`RunFilter::held_by`], also the runs waiting for a decision
    /// (`awaiting_hitl`) on threads one of these groups reviews
    /// ([`ThreadRecord::reviewers`]) and that wait for it: the thread's
    /// latest run, waiting ([`ThreadStatus::Interrupted`]).
    pub reviewed_by: Vec<String>,
}

impl RunFilter {
    /// The conditions that are set, as (field, value) pairs: `status`,
    /// `graph`, `thread`, each a run must equal. For stores that build
    /// queries: a new filter field appears here, for every store at once.
    pub fn equalities(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        [
            ("status", self.status.map(|status| status.as_str().to_owned())),
            ("graph", self.graph.clone()),
            ("thread", self.thread.clone()),
        ]
        .into_iter()
        .filter_map(|(field, value)| value.map(|value| (field, value)))
    }
}

/// Whose thread records (and so runs) a listing keeps
/// ([`ThreadQuery::held_by`], [`RunFilter::held_by`]): those of one owner,
/// or of every owner of one tenant. Persisted owners are plain names:
/// what a server's principals are called.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Holder {
    /// Records whose owner is this name and whose tenant is this one
    /// (`None`: records without a tenant).
    Owner {
        /// The owner's name.
        name: String,
        /// Their tenant.
        tenant: Option<String>,
    },
    /// Records of this tenant, whoever owns them.
    Tenant(String),
}

impl Holder {
    /// Whether a record owned by `owner` in `tenant` is held so.
    pub fn holds(&self, owner: Option<&str>, tenant: Option<&str>) -> bool {
        match self {
            Holder::Owner { name, tenant: wanted } => {
                owner == Some(name.as_str()) && tenant == wanted.as_deref()
            }
            Holder::Tenant(wanted) => tenant == Some(wanted.as_str()),
        }
    }

    /// The condition and its parameters as SQL over a `threads` row
    /// (columns `owner`, `tenant`), parameters numbered from `first` with
    /// `mark` (`?` for SQLite, `$` for Postgres): for the stores that
    /// build queries.
    pub fn sql(&self, mark: char, first: usize) -> (String, Vec<String>) {
        match self {
            Holder::Owner { name, tenant: Some(tenant) } => (
                format!("owner = {mark}{first} AND tenant = {mark}{}", first + 1),
                vec![name.clone(), tenant.clone()],
            ),
            Holder::Owner { name, tenant: None } => {
                (format!("owner = {mark}{first} AND tenant IS NULL"), vec![name.clone()])
            }
            Holder::Tenant(tenant) => (format!("tenant = {mark}{first}"), vec![tenant.clone()]),
        }
    }
}

/// Whether one of `groups` is among `reviewers`.
pub(crate) fn reviews(groups: &[String], reviewers: &[String]) -> bool {
    groups.iter().any(|group| reviewers.contains(group))
}

/// An opaque position in a run listing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor(String);

impl Cursor {
    /// The cursor that continues after `run` in newest-first order.
    pub fn after(run: RunId) -> Self {
        Self(run.to_string())
    }

    /// The run this cursor continues after.
    pub fn last_run(&self) -> Result<RunId, crate::StoreError> {
        self.0.parse().map_err(|_| crate::StoreError::InvalidCursor { cursor: self.0.clone() })
    }

    /// Rebuilds a cursor from its text (as printed by `Display`).
    pub fn from_text(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Page size and position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Most runs to return.
    pub limit: u64,
    /// Continue after this cursor; `None` starts at the newest run.
    pub cursor: Option<Cursor>,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { limit: 20, cursor: None }
    }
}

/// One page of runs, newest first.
#[derive(Debug, Clone)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// Rows of this page that could not be read as runs (an unknown
    /// status, a damaged failure record): reported, not fatal to the rest.
    pub damaged: Vec<DamagedRun>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// A stored run row that does not read as a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRun {
    /// The row's id, as stored.
    pub id: String,
    /// What is wrong with it.
    pub reason: String,
}

impl RunPage {
    /// A page from up to `limit + 1` runs read newest first: the extra run,
    /// if any, only says that another page follows.
    pub fn from_overfetch(runs: Vec<RunRecord>, limit: u64) -> Self {
        Self::from_rows(runs.into_iter().map(Ok).collect(), limit)
    }

    /// [`RunPage::from_overfetch`] for rows some of which may be damaged:
    /// they take their place in the page and the cursor like any run.
    pub fn from_rows(mut rows: Vec<Result<RunRecord, DamagedRun>>, limit: u64) -> Self {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|row| match row {
                Ok(record) => Cursor::after(record.id),
                Err(damaged) => Cursor::from_text(damaged.id.clone()),
            })
        } else {
            None
        };
        let (mut runs, mut damaged) = (Vec::new(), Vec::new());
        for row in rows {
            match row {
                Ok(record) => runs.push(record),
                Err(row) => damaged.push(row),
            }
        }
        Self { runs, damaged, next }
    }
}

/// A thread's own record: a thread exists once created (before any run on
/// it) with its metadata, as LangGraph's threads do. Runs name their
/// thread by id whether it has a record or not.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThreadRecord {
    /// The thread's id (the `thread` of its runs).
    pub id: String,
    /// When it was created, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// When its metadata last changed.
    pub updated_at_ms: i64,
    /// Its metadata: a JSON object.
    pub metadata: serde_json::Value,
    /// How long, in milliseconds, the thread may stay idle (no run in
    /// flight or waiting for a decision, none started or changed and its
    /// metadata unchanged for that long) before it is removed
    /// ([`ThreadStore::expired_threads`](crate::ThreadStore::expired_threads)).
    /// `None`: kept until deleted.
    pub ttl_ms: Option<i64>,
    /// Who created it (a server's principal; `None`: nobody said, as for
    /// threads made by an open server or through the engine).
    pub owner: Option<String>,
    /// The owner's tenant, if they have one.
    pub tenant: Option<String>,
    /// Groups whose members review the thread's runs: they see the thread
    /// while its latest run waits for a decision
    /// ([`ThreadQuery::reviewed_by`]). Set by
    /// [`ThreadStore::set_thread_reviewers`](crate::ThreadStore::set_thread_reviewers).
    pub reviewers: Vec<String>,
}

impl ThreadRecord {
    /// Thread `id` created at `at_ms` with `metadata`, kept until deleted.
    pub fn new(id: impl Into<String>, at_ms: i64, metadata: serde_json::Value) -> Self {
        Self {
            id: id.into(),
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            metadata,
            ttl_ms: None,
            owner: None,
            tenant: None,
            reviewers: Vec::new(),
        }
    }

    /// The same record, owned by `owner` of `tenant`.
    pub fn with_owner(mut self, owner: Option<String>, tenant: Option<String>) -> Self {
        self.owner = owner;
        self.tenant = tenant;
        self
    }

    /// The same record, removed once idle for `ttl_ms` milliseconds.
    pub fn with_ttl(mut self, ttl_ms: Option<i64>) -> Self {
        self.ttl_ms = ttl_ms;
        self
    }
}

/// What a thread's runs occupy in the store
/// ([`ThreadStore::thread_storage`](crate::ThreadStore::thread_storage)),
/// as the store keeps them (Postgres: after its own compression).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadStorage {
    /// Its runs.
    pub runs: u64,
    /// Bytes of their checkpoints: steps (frontiers and updates),
    /// snapshots, pending writes, interrupts and their decisions.
    pub checkpoint_bytes: u64,
    /// Bytes of their events.
    pub event_bytes: u64,
}

impl ThreadStorage {
    /// What a store measured.
    pub fn new(runs: u64, checkpoint_bytes: u64, event_bytes: u64) -> Self {
        Self { runs, checkpoint_bytes, event_bytes }
    }
}

/// Where a thread is, as its latest run (the newest by id) says: what
/// thread searches filter on ([`ThreadQuery::status`]) and LangGraph's
/// threads show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThreadStatus {
    /// No run, or the latest run ended (completed, rejected, interrupted).
    Idle,
    /// The latest run is queued or running.
    Busy,
    /// The latest run waits for a decision.
    Interrupted,
    /// The latest run failed.
    Error,
}

impl ThreadStatus {
    /// Every status.
    pub const ALL: [ThreadStatus; 4] =
        [ThreadStatus::Idle, ThreadStatus::Busy, ThreadStatus::Interrupted, ThreadStatus::Error];

    /// The status of a thread whose latest run has status `latest`
    /// (`None`: no run). The stores keep the same rule in SQL.
    pub fn of(latest: Option<RunStatus>) -> Self {
        match latest {
            Some(RunStatus::Queued | RunStatus::Running) => ThreadStatus::Busy,
            Some(RunStatus::AwaitingHitl) => ThreadStatus::Interrupted,
            Some(RunStatus::Failed) => ThreadStatus::Error,
            _ => ThreadStatus::Idle,
        }
    }

    /// The status named `name` ([`ThreadStatus::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == name)
    }

    /// Its name in storage and on LangGraph's wire: `idle`, `busy`,
    /// `interrupted`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::Busy => "busy",
            ThreadStatus::Interrupted => "interrupted",
            ThreadStatus::Error => "error",
        }
    }
}

impl fmt::Display for ThreadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Which thread records a search returns
/// ([`ThreadStore::search_threads`](crate::ThreadStore::search_threads)):
/// newest first (by creation, then id, descending), `offset` of the
/// matching ones skipped, at most `limit`. Built with
/// [`ThreadQuery::page`] and the methods that narrow it.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ThreadQuery {
    /// Keys the metadata must have, each with an equal value (JSON
    /// equality: `1` is not `1.0`, a `null` is not a missing key).
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Only threads with this status.
    pub status: Option<ThreadStatus>,
    /// Threads that count as [`ThreadStatus::Busy`] whatever their latest
    /// run: a run of theirs waits to start elsewhere (LangGraph's pending
    /// runs, kept in the outbox).
    pub busy: Vec<String>,
    /// Only these threads (`None`: any).
    pub ids: Option<Vec<String>>,
    /// Only threads so held (`None`: anyone's).
    pub held_by: Option<Holder>,
    /// With [`ThreadQuery::held_by`], also the threads waiting for a
    /// decision ([`ThreadStatus::Interrupted`]) that name one of these
    /// groups among their [`ThreadRecord::reviewers`].
    pub reviewed_by: Vec<String>,
    /// Matching threads skipped.
    pub offset: u64,
    /// At most this many.
    pub limit: u64,
}

impl ThreadQuery {
    /// Every thread: `limit` after `offset`.
    pub fn page(offset: u64, limit: u64) -> Self {
        Self { offset, limit, ..Self::default() }
    }

    /// Only threads whose metadata has each of `metadata`'s keys with an
    /// equal value.
    pub fn metadata(mut self, metadata: serde_json::Map<String, serde_json::Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// Only threads with `status`, the `busy` ones counted busy whatever
    /// their latest run.
    pub fn status(mut self, status: Option<ThreadStatus>, busy: Vec<String>) -> Self {
        self.status = status;
        self.busy = busy;
        self
    }

    /// Only the threads named.
    pub fn ids(mut self, ids: Option<Vec<String>>) -> Self {
        self.ids = ids;
        self
    }

    /// Only the threads `holder` holds (`None`: anyone's).
    pub fn held_by(mut self, holder: Option<Holder>) -> Self {
        self.held_by = holder;
        self
    }

    /// With a holder, also the threads waiting for a decision that one
    /// of `groups` reviews.
    pub fn reviewed_by(mut self, groups: Vec<String>) -> Self {
        self.reviewed_by = groups;
        self
    }

    /// Whether `record`, with status `status` as stored, is one this
    /// query asks for (the stores' exact check after their indexes).
    pub fn admits(&self, record: &ThreadRecord, status: ThreadStatus) -> bool {
        let status = match self.busy.contains(&record.id) {
            true => ThreadStatus::Busy,
            false => status,
        };
        self.status.is_none_or(|wanted| wanted == status)
            && self.ids.as_ref().is_none_or(|ids| ids.contains(&record.id))
            && self.metadata.iter().all(|(key, value)| record.metadata.get(key) == Some(value))
            && self.held_by.as_ref().is_none_or(|holder| {
                holder.holds(record.owner.as_deref(), record.tenant.as_deref())
                    || (status == ThreadStatus::Interrupted
                        && reviews(&self.reviewed_by, &record.reviewers))
            })
    }
}

/// A page of a thread search as a store gathers it: the candidates it
/// reads, newest first, each checked ([`ThreadQuery::admits`]), the
/// query's offset skipped, until the page is full.
#[derive(Debug)]
pub struct ThreadMatches<'q> {
    query: &'q ThreadQuery,
    skip: u64,
    found: Vec<ThreadRecord>,
}

impl<'q> ThreadMatches<'q> {
    /// An empty page of `query`.
    pub fn new(query: &'q ThreadQuery) -> Self {
        Self { query, skip: query.offset, found: Vec::new() }
    }

    /// Offers the next candidate, with its status as stored (a name of no
    /// status reads as idle); whether the page is full.
    pub fn offer(&mut self, record: ThreadRecord, status: &str) -> bool {
        let status = ThreadStatus::from_name(status).unwrap_or(ThreadStatus::Idle);
        if self.query.admits(&record, status) {
            match self.skip {
                0 => self.found.push(record),
                _ => self.skip -= 1,
            }
        }
        self.is_full()
    }

    /// Whether the page holds the query's `limit`.
    pub fn is_full(&self) -> bool {
        self.found.len() as u64 >= self.query.limit
    }

    /// The page.
    pub fn into_found(self) -> Vec<ThreadRecord> {
        self.found
    }
}
