//! Running a compiled agent: input, memory, and the run's result.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tollgate_checkpoint::{RunId, RunStatus};
use tollgate_engine::{
    CompiledGraph, DecisionRequest, EventEnvelope, Executor, PendingInterrupt, Resumed, RunConfig,
    RunError, RunOutcome,
};

use super::{AgentProgress, AgentState, AgentStateUpdate};
use crate::error::HarnessError;
use crate::memory::ShortTermMemory;
use crate::message::Message;
use tollgate_engine::MessageOp;

/// An agent compiled into its graph, ready to run on an
/// [`Executor`].
#[derive(Debug, Clone)]
pub struct CompiledAgent {
    name: String,
    graph: CompiledGraph<AgentState>,
    memory: Option<Arc<dyn ShortTermMemory>>,
}

/// What an agent run came to.
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The run.
    pub run_id: RunId,
    /// Its status (`completed`, `awaiting_hitl`, ...).
    pub status: RunStatus,
    /// The final (or paused) state.
    pub state: AgentState,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The agent's validated structured answer, if it has one.
    pub structured_response: Option<Value>,
    /// What the run waits for, when `awaiting_hitl`.
    pub interrupts: Vec<PendingInterrupt>,
    /// Every stored event of the run, all legs, in order.
    pub events: Vec<EventEnvelope>,
}

impl AgentRun {
    /// The run's events.
    pub fn events(&self) -> &[EventEnvelope] {
        &self.events
    }

    /// The last assistant message's text.
    pub fn final_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| matches!(m, Message::Assistant { .. }))
            .map(Message::content)
    }

    /// The structured answer decoded as `T`.
    pub fn structured<T: DeserializeOwned>(&self) -> Option<Result<T, serde_json::Error>> {
        self.structured_response.clone().map(serde_json::from_value)
    }
}

impl CompiledAgent {
    pub(crate) fn new(name: String, graph: CompiledGraph<AgentState>) -> Self {
        Self { name, graph, memory: None }
    }

    /// Loads a thread's conversation before each run in a thread, and
    /// saves it after (see [`CompiledAgent::run_in_thread`]).
    pub fn with_memory(mut self, memory: Arc<dyn ShortTermMemory>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The agent's graph (to run it yourself, export it, or `recover`).
    pub fn graph(&self) -> &CompiledGraph<AgentState> {
        &self.graph
    }

    /// Runs the agent on `input` (the user's message) until it answers,
    /// pauses or fails.
    pub async fn run(
        &self,
        executor: &Executor,
        input: &str,
        config: RunConfig,
    ) -> Result<AgentRun, HarnessError> {
        let outcome = executor.run(&self.graph, input_state(Vec::new(), input), config).await?;
        self.finish(executor, outcome).await
    }

    /// Runs the agent in `thread`, durably: the run starts from the state
    /// the thread's latest run left (its conversation, structured
    /// answers), with `input` appended as the user's next message
    /// ([`CompiledAgent::thread_input`]); a thread runs one leg at a time
    /// ([`Executor::run_on_thread`]). With [`CompiledAgent::with_memory`]
    /// the conversation is also saved there when the run completes.
    pub async fn run_in_thread(
        &self,
        executor: &Executor,
        thread: &str,
        input: &str,
        config: RunConfig,
    ) -> Result<AgentRun, HarnessError> {
        let run = config.id().unwrap_or_default();
        let update = self.thread_input(executor, thread, run, input).await?;
        let outcome =
            executor.run_on_thread(&self.graph, thread, update, config.run_id(run)).await?;
        let run = self.finish(executor, outcome).await?;
        if let (Some(memory), RunStatus::Completed) = (&self.memory, run.status) {
            memory.save(thread, &run.messages).await?;
        }
        Ok(run)
    }

    /// The update a run `run` of `thread` starts with: `input` as a user
    /// message (id `input.RUN`, distinct across the thread's runs), and
    /// every agent's counters of the thread's latest run set back to zero
    /// (the turn limit is per run, and a scripted model starts its script
    /// again). For [`Executor::run_on_thread`] with this agent's graph.
    pub async fn thread_input(
        &self,
        executor: &Executor,
        thread: &str,
        run: RunId,
        input: &str,
    ) -> Result<AgentStateUpdate, HarnessError> {
        let earlier = executor.thread_values(&self.graph, thread).await?;
        let reset = earlier
            .map(|values| {
                values.progress.into_keys().map(|agent| (agent, AgentProgress::default()))
            })
            .into_iter()
            .flatten()
            .collect();
        Ok(AgentStateUpdate::default()
            .messages(vec![MessageOp::Upsert(Message::user(format!("input.{run}"), input))])
            .progress(reset))
    }

    /// Records `decision` on a paused run and continues it in this process.
    pub async fn resume(
        &self,
        executor: &Executor,
        run: RunId,
        decision: DecisionRequest,
        config: RunConfig,
    ) -> Result<AgentRun, HarnessError> {
        match executor.resume_run(&self.graph, run, decision, config).await? {
            Resumed::Continuing(outcome) => self.finish(executor, outcome).await,
            Resumed::Waiting(decided) | Resumed::Rejected(decided) => {
                self.load(executor, run, decided.pending).await
            }
        }
    }

    /// Continues a run that was interrupted or whose owner died.
    pub async fn continue_run(
        &self,
        executor: &Executor,
        run: RunId,
        config: RunConfig,
    ) -> Result<AgentRun, HarnessError> {
        let handle = executor.continue_run(&self.graph, run, config).await?;
        let outcome = handle.wait().await?;
        self.finish(executor, outcome).await
    }

    /// The run as it stands in the store, with the interrupts it waits for.
    async fn load(
        &self,
        executor: &Executor,
        run: RunId,
        interrupts: Vec<PendingInterrupt>,
    ) -> Result<AgentRun, HarnessError> {
        let record = executor.store().run(run).await.map_err(RunError::from)?;
        let state = executor.state_at(&self.graph, run, record.step).await?;
        let outcome =
            RunOutcome { run_id: run, status: record.status, step: record.step, state, interrupts };
        self.finish(executor, outcome).await
    }

    async fn finish(
        &self,
        executor: &Executor,
        outcome: RunOutcome<AgentState>,
    ) -> Result<AgentRun, HarnessError> {
        let events = stored_events(executor, outcome.run_id).await?;
        Ok(AgentRun {
            run_id: outcome.run_id,
            status: outcome.status,
            messages: outcome.state.messages.clone(),
            structured_response: outcome.state.structured.get(&self.name).cloned(),
            state: outcome.state,
            interrupts: outcome.interrupts,
            events,
        })
    }
}

/// The state a run starts from: earlier messages, then the input.
pub(crate) fn input_state(mut messages: Vec<Message>, input: &str) -> AgentState {
    let id = format!("input.{}", messages.len());
    messages.push(Message::user(id, input));
    AgentState { messages, ..AgentState::default() }
}

/// Every stored event of `run`, parsed.
pub(crate) async fn stored_events(
    executor: &Executor,
    run: RunId,
) -> Result<Vec<EventEnvelope>, HarnessError> {
    let records = executor.store().events(run, 0, u64::MAX).await.map_err(RunError::from)?;
    records
        .iter()
        .map(|record| {
            serde_json::from_str(&record.json).map_err(|source| HarnessError::EventDecode {
                run,
                seq: record.seq,
                source,
            })
        })
        .collect()
}
