//! A state update or a `goto` given from outside the run, and the run
//! continued at once by the same process: LangGraph's `Command(goto=…)` or
//! `Command(update=…)` sent with a new run, and "mark as resolved". The
//! checkpoint is written under the claim the leg then drives with, so no
//! reader sees the run stopped in between, and no other process continues
//! it first.

use tollgate_checkpoint::RunId;

use crate::graph::CompiledGraph;
use crate::state::State;
use crate::START;

use super::config::RunConfig;
use super::error::RunError;
use super::executor::{Claimed, Executor};
use super::handle::RunHandle;
use super::history::{targets, Then, Written};
use super::setup::{breakpoints, Breakpoints};

impl Executor {
    /// [`Executor::update_state`], then the run continued here from the
    /// new checkpoint. Between the two the run stays `running` under this
    /// process's lease (where `update_state` leaves it `interrupted`): a
    /// reader never sees it stopped, and should this process die before
    /// the leg commits, the run is an orphan a worker takes over.
    pub async fn update_state_and_continue<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        update: S::Update,
        as_node: Option<&str>,
        config: RunConfig,
    ) -> Result<WriteContinued<S>, RunError> {
        let points = breakpoints(graph, &config)?;
        let written = self
            .write_checkpoint(
                graph,
                run,
                Some(update),
                as_node,
                None,
                Then::Continue,
                config.clone(),
            )
            .await?;
        self.continue_written(graph, run, written, points, config).await
    }

    /// [`Executor::goto`], then the run continued here from the new
    /// checkpoint, as [`Executor::update_state_and_continue`] does. With
    /// no nodes, the run completes with the state as written (LangGraph's
    /// `goto: "__end__"`).
    pub async fn goto_and_continue<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        update: Option<S::Update>,
        nodes: &[&str],
        config: RunConfig,
    ) -> Result<WriteContinued<S>, RunError> {
        let targets = targets(graph, nodes)?;
        let points = breakpoints(graph, &config)?;
        let written = self
            .write_checkpoint(
                graph,
                run,
                update,
                Some(START),
                Some(targets),
                Then::Continue,
                config.clone(),
            )
            .await?;
        self.continue_written(graph, run, written, points, config).await
    }

    /// The leg that continues `run` from the checkpoint just written under
    /// this process's claim.
    async fn continue_written<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        written: Written,
        points: Breakpoints,
        config: RunConfig,
    ) -> Result<WriteContinued<S>, RunError> {
        let Written { step, epoch, last_seq } = written;
        let claimed = Claimed { run, epoch, last_seq, checkpoint: None };
        let leg = self.continue_claimed(graph, claimed, points, config).await?.spawn();
        Ok(WriteContinued { step, last_seq, leg })
    }
}

/// A state write continued at once ([`Executor::update_state_and_continue`],
/// [`Executor::goto_and_continue`]).
#[derive(Debug)]
pub struct WriteContinued<S> {
    /// The step the write made.
    pub step: u64,
    /// The run's last event sequence number after the write: the leg's
    /// events follow it.
    pub last_seq: u64,
    /// The leg that continues the run.
    pub leg: RunHandle<S>,
}
