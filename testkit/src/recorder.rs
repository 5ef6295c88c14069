//! Collecting events as runs emit them.

use std::sync::{Arc, Mutex, PoisonError};

use tollgate_engine::{EventEnvelope, EventSink, EventStream};

/// Gathers the live events of every run given its [`EventCollector::sink`].
/// Clones share the collection.
///
/// ```
/// use tollgate_engine::RunConfig;
/// use tollgate_testkit::EventCollector;
///
/// let collector = EventCollector::new();
/// let config = RunConfig::new().events(collector.sink());
/// // ... run with `config`, then:
/// assert!(collector.events().is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct EventCollector {
    sink: EventSink,
    inner: Arc<Mutex<(EventStream, Vec<EventEnvelope>)>>,
}

impl Default for EventCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl EventCollector {
    /// An empty collector.
    pub fn new() -> Self {
        let (sink, stream) = EventSink::channel();
        Self { sink, inner: Arc::new(Mutex::new((stream, Vec::new()))) }
    }

    /// The sink to pass to `RunConfig::events`.
    pub fn sink(&self) -> EventSink {
        self.sink.clone()
    }

    /// Every event received so far, in arrival order.
    pub fn events(&self) -> Vec<EventEnvelope> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (stream, events) = &mut *inner;
        while let Some(event) = stream.try_recv() {
            events.push(event);
        }
        events.clone()
    }

    /// The event kinds received so far.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.events().iter().map(|event| event.event.kind()).collect()
    }
}

/// An [`EventCollector`] by its other name (LangChain's callback recorder).
pub type EventRecorder = EventCollector;
