//! Following one run's log: the events of legs this server drives, from
//! memory as they are emitted ([`Hub`]), merged by sequence number with
//! what the store holds (read when its change signal fires: `PRAGMA
//! data_version` on SQLite, `NOTIFY` of watched runs on Postgres; a slow
//! poll remains as a fallback), so that each is delivered once and in
//! order ([`Follow`]). Live events run ahead of the store; one the store
//! never gets is taken back with a rewind.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, Notify};
use tollgate_checkpoint::{RunId, RunStatus};
use tollgate_engine::{Clock, EventEnvelope, EventSink, SystemClock};

use crate::error::ServiceError;
use crate::service::{self, Runs, WATCH_LEASE};

/// Fallback between store reads when no change signal came.
const FALLBACK: Duration = Duration::from_secs(1);

/// Live events buffered per run for subscribers that fall behind; one
/// that falls further reads the store instead.
const LIVE_BUFFER: usize = 4_096;

/// One event with its JSON line, shared by every subscriber (serialised
/// once, when it is emitted or read).
pub(crate) struct Logged {
    pub(crate) json: String,
    pub(crate) envelope: EventEnvelope,
}

impl Logged {
    pub(crate) fn seq(&self) -> u64 {
        self.envelope.seq
    }
}

/// Events of the legs this server drives, per run, as they are emitted,
/// with the recent ones kept for subscribers that arrive mid-step.
#[derive(Clone, Default)]
pub(crate) struct Hub {
    runs: Arc<Mutex<HashMap<RunId, Live>>>,
}

/// One run's live events.
struct Live {
    sender: broadcast::Sender<Arc<Logged>>,
    /// The latest events of the legs in flight, oldest first (at most
    /// [`LIVE_BUFFER`]).
    recent: VecDeque<Arc<Logged>>,
    /// Legs of the run this server drives now.
    legs: usize,
}

impl Live {
    fn new() -> Self {
        Self { sender: broadcast::channel(LIVE_BUFFER).0, recent: VecDeque::new(), legs: 0 }
    }

    /// Neither driven here nor followed: nothing to keep.
    fn idle(&self) -> bool {
        self.legs == 0 && self.sender.receiver_count() == 0
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Live>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A sink for a leg of `run` this server drives: its events go to the
    /// run's live subscribers until the leg ends.
    pub(crate) fn sink(&self, run: RunId) -> EventSink {
        let (sink, mut events) = EventSink::channel();
        self.lock().entry(run).or_insert_with(Live::new).legs += 1;
        let hub = self.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let json = serde_json::to_string(&event).unwrap_or_default();
                let event = Arc::new(Logged { json, envelope: event });
                let mut runs = hub.lock();
                let live = runs.entry(run).or_insert_with(Live::new);
                if live.recent.len() == LIVE_BUFFER {
                    live.recent.pop_front();
                }
                live.recent.push_back(Arc::clone(&event));
                // No subscriber is fine: the store has every event.
                let _ = live.sender.send(event);
            }
            // The leg is over: what it emitted is stored, or (a step that
            // never committed) taken back from followers with a rewind.
            let mut runs = hub.lock();
            if let Some(live) = runs.get_mut(&run) {
                live.legs = live.legs.saturating_sub(1);
                if live.legs == 0 {
                    live.recent.clear();
                }
                if live.idle() {
                    runs.remove(&run);
                }
            }
        });
        sink
    }

    /// Hands the live events other processes publish (Postgres workers) to
    /// the followers of their runs, until the listener ends. Runs nobody
    /// here follows are skipped: the store has every event.
    pub(crate) async fn relay(self, mut events: broadcast::Receiver<tollgate_postgres::LiveEvent>) {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                // Followers fill what was skipped from the store.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let followed = |runs: &HashMap<RunId, Live>| {
                runs.get(&event.run).is_some_and(|live| live.sender.receiver_count() > 0)
            };
            // Parsed only for a run someone here follows, outside the lock.
            if !followed(&self.lock()) {
                continue;
            }
            let record = tollgate_checkpoint::EventRecord { seq: event.seq, json: event.json };
            let Ok(envelope) = service::parse_event(&record) else { continue };
            let logged = Arc::new(Logged { json: record.json, envelope });
            let mut runs = self.lock();
            if !followed(&runs) {
                continue;
            }
            let Some(live) = runs.get_mut(&event.run) else { continue };
            if live.recent.len() == LIVE_BUFFER {
                live.recent.pop_front();
            }
            live.recent.push_back(Arc::clone(&logged));
            let _ = live.sender.send(logged);
        }
    }

    /// The run's recent live events and a receiver for the next ones, taken
    /// together so that none falls between.
    fn subscribe(&self, run: RunId) -> (Vec<Arc<Logged>>, broadcast::Receiver<Arc<Logged>>) {
        let mut runs = self.lock();
        // Runs whose followers all left.
        runs.retain(|_, live| !live.idle());
        let live = runs.entry(run).or_insert_with(Live::new);
        (live.recent.iter().cloned().collect(), live.sender.subscribe())
    }
}

/// When a follow ends.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Until {
    /// When no leg of the run is in flight or queued (SSE: a paused run
    /// ends the stream; follow again after the decision).
    LegEnds,
    /// When the run is completed, failed, rejected or interrupted (the
    /// WebSocket stays open across pauses and decisions).
    Final,
}

impl Until {
    fn reached(self, status: RunStatus) -> bool {
        match self {
            Until::LegEnds => !matches!(status, RunStatus::Running | RunStatus::Queued),
            Until::Final => matches!(
                status,
                RunStatus::Completed
                    | RunStatus::Failed
                    | RunStatus::Rejected
                    | RunStatus::Interrupted
            ),
        }
    }
}

/// What a follow delivers.
pub(crate) enum Item {
    /// An event, with its JSON line.
    Event(Arc<Logged>),
    /// The run is `running` under an owner that is gone: nobody drives it.
    Orphaned { owner: String },
    /// The events delivered after `after` were never stored (their step
    /// did not commit: its leg was cancelled or its process died), and
    /// the run's log goes on from `after` with other events: the
    /// subscriber drops those it got past `after`.
    Rewind { after: u64 },
}

/// One subscriber's view of a run's log: stored events after `after`,
/// then new ones as they come.
pub(crate) struct Follow {
    pub(crate) runs: Runs,
    pub(crate) run: RunId,
    /// The last event delivered.
    after: u64,
    /// The last event delivered that the store holds (read from it, or
    /// delivered live and found there since). Live events past it are
    /// [`Follow::unconfirmed`].
    stored: u64,
    /// Events delivered live that the store does not hold yet, by number:
    /// each is compared with what the store then holds under its number.
    unconfirmed: BTreeMap<u64, Arc<Logged>>,
    until: Until,
    live: Option<broadcast::Receiver<Arc<Logged>>>,
    /// Live events past the next one to deliver, by number, until the
    /// ones before them arrive (live or from the store).
    ahead: BTreeMap<u64, Arc<Logged>>,
    changes: Option<Arc<Notify>>,
    pending: VecDeque<Item>,
    look: bool,
    orphan_told: bool,
    watched: Option<Instant>,
}

impl Follow {
    pub(crate) async fn new(
        hub: &Hub,
        runs: &Runs,
        run: RunId,
        after: u64,
        until: Until,
    ) -> Result<Self, ServiceError> {
        // Subscribe before reading the store, so nothing falls between.
        let (recent, live) = hub.subscribe(run);
        runs.watch(run).await?;
        Ok(Self {
            runs: runs.clone(),
            run,
            after,
            stored: after,
            unconfirmed: BTreeMap::new(),
            until,
            live: Some(live),
            ahead: recent.into_iter().map(|event| (event.seq(), event)).collect(),
            changes: runs.changes(),
            pending: VecDeque::new(),
            look: true,
            orphan_told: false,
            watched: Some(Instant::now()),
        })
    }

    /// The next item, or `None` once the run got where the follow ends.
    pub(crate) async fn next(&mut self) -> Result<Option<Item>, ServiceError> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                if let Item::Event(event) = &item {
                    self.after = event.seq();
                }
                return Ok(Some(item));
            }
            // Live events that continue what was delivered.
            self.ahead.retain(|seq, _| *seq > self.after);
            if let Some(event) = self.ahead.remove(&(self.after + 1)) {
                self.unconfirmed.insert(event.seq(), Arc::clone(&event));
                self.pending.push_back(Item::Event(event));
                continue;
            }
            let changes = self.changes.clone();
            let notified = changes.as_deref().map(Notify::notified);
            tokio::pin!(notified);
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                // Armed before the store is read: a commit in between wakes it.
                notified.enable();
            }
            if self.look {
                self.look = false;
                if self.looked().await? {
                    return Ok(None);
                }
                continue;
            }
            let live = async {
                match self.live.as_mut() {
                    Some(live) => live.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                received = live => self.received(received),
                () = async {
                    match notified.as_pin_mut() {
                        Some(notified) => notified.await,
                        None => std::future::pending().await,
                    }
                } => self.look = true,
                () = tokio::time::sleep(if self.changes.is_some() { FALLBACK } else { Duration::from_millis(100) }) => {
                    self.look = true;
                }
            }
        }
    }

    /// Reads what the store holds past what was delivered and the run's
    /// record: whether the follow ended (the run got where it ends, all
    /// delivered). Queues an orphan notice once when its owner is gone,
    /// renews the watch on the run, and asks for another look where the
    /// store moved meanwhile.
    async fn looked(&mut self) -> Result<bool, ServiceError> {
        if self.read_store().await? {
            return Ok(false);
        }
        let record = self.runs.record(self.run).await?;
        if record.last_seq > self.stored {
            // Committed after the read: read again.
            self.look = true;
            return Ok(false);
        }
        if self.until.reached(record.status) {
            if self.after > self.stored {
                // Delivered live, and the run ended without them.
                self.rewind();
                self.look = true;
                return Ok(false);
            }
            return Ok(true);
        }
        let orphaned =
            record.status == RunStatus::Running && record.is_orphaned(SystemClock.now_ms());
        if orphaned && !self.orphan_told {
            let owner = record.owner.map_or_else(String::new, |owner| owner.to_string());
            self.pending.push_back(Item::Orphaned { owner });
        }
        self.orphan_told = orphaned;
        if self.watched.is_some_and(|at| at.elapsed() > WATCH_LEASE / 3) {
            self.runs.watch(self.run).await?;
            self.watched = Some(Instant::now());
        }
        Ok(false)
    }

    /// Takes what the hub sent: an event kept until what comes before it
    /// is in, or a look at the store once the hub lost some or closed.
    fn received(&mut self, received: Result<Arc<Logged>, broadcast::error::RecvError>) {
        match received {
            // Delivered already from the store.
            Ok(event) if event.seq() <= self.after => {}
            // Next, or ahead: kept until what comes before it is in.
            Ok(event) => {
                if self.ahead.len() < LIVE_BUFFER {
                    self.ahead.insert(event.seq(), event);
                }
            }
            // Fell behind: the store fills the gap once the step commits.
            Err(broadcast::error::RecvError::Lagged(_)) => self.look = true,
            Err(broadcast::error::RecvError::Closed) => {
                self.live = None;
                self.look = true;
            }
        }
    }

    /// The stored log so far (its first 500 events), delivered at once:
    /// what a WebSocket sends as its first message. Later events come from
    /// [`Follow::next`].
    pub(crate) async fn backlog(&mut self) -> Result<Vec<Arc<Logged>>, ServiceError> {
        self.read_store().await?;
        let mut events = Vec::new();
        while let Some(Item::Event(logged)) = self.pending.front() {
            self.after = logged.seq();
            events.push(Arc::clone(logged));
            self.pending.pop_front();
        }
        self.look = true;
        Ok(events)
    }

    /// Reads the store past the last event it was found to hold: events
    /// delivered live are confirmed (or, when the store holds another
    /// event under that number, taken back with a rewind), later ones are
    /// queued. Whether it read any.
    async fn read_store(&mut self) -> Result<bool, ServiceError> {
        let batch = self.runs.events(self.run, self.stored, 500).await?;
        let found = !batch.is_empty();
        for record in batch {
            if record.seq <= self.after {
                match self.unconfirmed.remove(&record.seq) {
                    Some(live) if live.json == record.json => {
                        self.stored = record.seq;
                        continue;
                    }
                    _ => self.rewind(),
                }
            }
            let envelope = service::parse_event(&record)?;
            self.stored = record.seq;
            self.pending.push_back(Item::Event(Arc::new(Logged { json: record.json, envelope })));
        }
        // More may follow a full batch.
        self.look = found;
        Ok(found)
    }

    /// Takes back the events delivered past the last one the store holds:
    /// queues a rewind to it, and forgets what came live after it.
    fn rewind(&mut self) {
        self.after = self.stored;
        self.unconfirmed.clear();
        self.ahead.clear();
        self.pending.retain(|item| !matches!(item, Item::Event(_)));
        self.pending.push_back(Item::Rewind { after: self.stored });
    }
}
