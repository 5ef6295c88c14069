//! Where a run's events go live ([`EventSink`], [`EventStream`]) and the
//! views of that stream ([`StreamMode`]).

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{Event, EventEnvelope};

/// A view of the one event stream (docs/events.md, stream modes): a
/// filter, not another stream. Every mode but `final` keeps the run's
/// bookends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Model calls: `model_started`, `model_delta`, `model_completed`.
    Messages,
    /// Tool calls: `tool_started`, `tool_delta`, `tool_completed`.
    Tools,
    /// State changes: `node_completed`, `task_completed`,
    /// `checkpoint_saved`, `interrupt_raised`, `run_resumed`.
    Updates,
    /// Everything.
    Events,
    /// Only `run_ended`, with the result or error.
    Final,
}

impl StreamMode {
    /// Every mode.
    pub const ALL: [StreamMode; 5] = [
        StreamMode::Messages,
        StreamMode::Tools,
        StreamMode::Updates,
        StreamMode::Events,
        StreamMode::Final,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamMode::Messages => "messages",
            StreamMode::Tools => "tools",
            StreamMode::Updates => "updates",
            StreamMode::Events => "events",
            StreamMode::Final => "final",
        }
    }

    /// Whether this mode shows `event`.
    pub fn accepts(self, event: &Event) -> bool {
        let bookend = matches!(event, Event::RunStarted { .. } | Event::RunEnded { .. });
        match self {
            StreamMode::Events => true,
            StreamMode::Final => matches!(event, Event::RunEnded { .. }),
            StreamMode::Messages => {
                bookend
                    || matches!(
                        event,
                        Event::ModelStarted { .. }
                            | Event::ModelDelta { .. }
                            | Event::ModelCompleted { .. }
                    )
            }
            StreamMode::Tools => {
                bookend
                    || matches!(
                        event,
                        Event::ToolStarted { .. }
                            | Event::ToolDelta { .. }
                            | Event::ToolCompleted { .. }
                    )
            }
            StreamMode::Updates => {
                bookend
                    || matches!(
                        event,
                        Event::NodeCompleted { .. }
                            | Event::TaskCompleted { .. }
                            | Event::CheckpointSaved { .. }
                            | Event::InterruptRaised { .. }
                            | Event::RunResumed { .. }
                    )
            }
        }
    }
}

impl std::str::FromStr for StreamMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        StreamMode::ALL.into_iter().find(|mode| mode.as_str() == text).ok_or_else(|| {
            format!("unknown stream mode `{text}` (messages, tools, updates, events, final)")
        })
    }
}

/// Where a run sends its events live, as they happen. Create one with
/// [`EventSink::channel`] and pass it in the run's config.
#[derive(Debug, Clone)]
pub struct EventSink {
    sender: mpsc::UnboundedSender<EventEnvelope>,
}

/// The receiving end of an [`EventSink`].
#[derive(Debug)]
pub struct EventStream {
    receiver: mpsc::UnboundedReceiver<EventEnvelope>,
}

impl EventSink {
    /// A connected sink and stream. The stream ends when every run holding
    /// the sink has ended.
    pub fn channel() -> (EventSink, EventStream) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (EventSink { sender }, EventStream { receiver })
    }

    pub(crate) fn send(&self, event: EventEnvelope) {
        // A dropped stream means nobody listens; the run goes on.
        let _ = self.sender.send(event);
    }
}

impl EventStream {
    /// The next event; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<EventEnvelope> {
        self.receiver.recv().await
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<EventEnvelope> {
        self.receiver.try_recv().ok()
    }
}
