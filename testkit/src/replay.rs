//! Replay fixtures: a run's events as NDJSON, played back as a scripted
//! model plus the trajectory the replay must follow.

use serde_json::Value;
use tollgate_engine::{Event, EventEnvelope};
use tollgate_nodes::ScriptReply;

use crate::models::ScriptedModel;
use crate::trajectory::render;

/// Writes events as NDJSON, one envelope a line.
pub fn to_ndjson(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .map(|event| serde_json::to_string(event).expect("an envelope serializes"))
        .map(|line| line + "\n")
        .collect()
}

/// Reads NDJSON events; the error names the line (1-based).
pub fn from_ndjson(text: &str) -> Result<Vec<EventEnvelope>, (usize, serde_json::Error)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| serde_json::from_str(line).map_err(|error| (index + 1, error)))
        .collect()
}

/// One step of a recorded agent trajectory.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A model answered (after any retries).
    Model {
        /// The agent.
        agent: String,
    },
    /// A tool ran with these arguments.
    Tool {
        /// The tool.
        name: String,
        /// Its arguments.
        args: Value,
        /// Whether it succeeded.
        ok: bool,
    },
}

/// A recorded run turned into what replays it: the model's answers as a
/// script, and the trajectory a replay must follow.
#[derive(Debug, Clone)]
pub struct ReplayFixture {
    replies: Vec<ScriptReply>,
    steps: Vec<Step>,
}

impl ReplayFixture {
    /// From a recorded run's events (one agent's model calls).
    pub fn from_events(events: &[EventEnvelope]) -> Self {
        let mut replies = Vec::new();
        let mut steps = Vec::new();
        for envelope in events {
            match &envelope.event {
                Event::ModelCompleted { agent, message, .. } => {
                    let calls: Vec<(String, Value, Option<String>)> = message["tool_calls"]
                        .as_array()
                        .map(|calls| {
                            calls
                                .iter()
                                .map(|call| {
                                    let name = call["name"].as_str().unwrap_or_default().to_owned();
                                    let id = call["id"].as_str().map(str::to_owned);
                                    (name, call["args"].clone(), id)
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    replies.push(match calls.is_empty() {
                        true => ScriptReply::Text(
                            message["content"].as_str().unwrap_or_default().to_owned(),
                        ),
                        false => ScriptReply::ToolCalls(calls),
                    });
                    steps.push(Step::Model { agent: agent.clone() });
                }
                // Tools of one turn finish in any order; they start in call
                // order.
                Event::ToolStarted { tool, args, call_id, .. } => {
                    let ok = events.iter().any(|e| {
                        matches!(&e.event, Event::ToolCompleted { call_id: id, ok: true, .. } if id == call_id)
                    });
                    steps.push(Step::Tool { name: tool.clone(), args: args.clone(), ok });
                }
                _ => {}
            }
        }
        Self { replies, steps }
    }

    /// From NDJSON.
    pub fn from_ndjson(text: &str) -> Result<Self, (usize, serde_json::Error)> {
        Ok(Self::from_events(&from_ndjson(text)?))
    }

    /// A scripted model answering as the recorded one did.
    pub fn model(&self, name: &str) -> ScriptedModel {
        ScriptedModel::from_replies(name, self.replies.clone())
    }

    /// The recorded trajectory.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Panics, printing both, unless `events` follow the recorded
    /// trajectory.
    pub fn assert_replayed(&self, events: &[EventEnvelope]) {
        let replayed = Self::from_events(events);
        assert!(
            replayed.steps == self.steps,
            "the replay diverged.\nrecorded: {:#?}\nreplayed trajectory:\n{}",
            self.steps,
            render(events)
        );
    }
}
