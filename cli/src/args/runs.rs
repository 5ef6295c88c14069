//! `tollgate runs …`, as clap sees it.

use clap::{ArgGroup, Subcommand};

#[derive(Subcommand, Debug)]
pub(crate) enum RunsCommand {
    /// Runs newest first, one page.
    List {
        /// Only runs with this status.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this graph.
        #[arg(long)]
        graph: Option<String>,
        /// Only runs of this thread.
        #[arg(long)]
        thread: Option<String>,
        /// Runs per page.
        #[arg(long, default_value_t = 20)]
        limit: u64,
        /// Continue after this cursor (printed with the previous page).
        #[arg(long)]
        cursor: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One run: status, step, pending interrupts, result or error.
    Show {
        /// The run.
        run: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approves, edits or answers a pending interrupt.
    #[command(group(ArgGroup::new("decision").required(true).args(["approve", "edit", "respond"])))]
    Resume {
        /// The run.
        run: String,
        /// The interrupt (needed when several are pending).
        #[arg(long)]
        interrupt: Option<String>,
        /// Go ahead as proposed.
        #[arg(long)]
        approve: bool,
        /// Go ahead with this JSON value instead.
        #[arg(long, value_name = "JSON")]
        edit: Option<String>,
        /// Answer with this JSON value.
        #[arg(long, value_name = "JSON")]
        respond: Option<String>,
        /// Who decides, recorded with the decision (`decided_by`).
        #[arg(long, value_name = "NAME", env = "TOLLGATE_REVIEWER")]
        by: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rejects a pending interrupt.
    Reject {
        /// The run.
        run: String,
        /// The interrupt (needed when several are pending).
        #[arg(long)]
        interrupt: Option<String>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Who decides, recorded with the decision (`decided_by`).
        #[arg(long, value_name = "NAME", env = "TOLLGATE_REVIEWER")]
        by: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prints a run's events; `--follow` waits for new ones until no leg of
    /// the run is in flight.
    Events {
        /// The run.
        run: String,
        /// Keep printing new events.
        #[arg(long)]
        follow: bool,
        /// Print NDJSON, one event envelope a line.
        #[arg(long)]
        json: bool,
    },
    /// Writes fields of a paused, interrupted or failed blueprint run's
    /// state on its latest checkpoint, as if a node wrote them (through
    /// the state's reducers); the run is left interrupted: continue it
    /// with `runs continue`.
    UpdateState {
        /// The run.
        run: String,
        /// The fields to write, as a JSON object.
        #[arg(long)]
        values: String,
        /// The node taken as the writer (its successors run next); by
        /// default the one that wrote the latest checkpoint.
        #[arg(long)]
        as_node: Option<String>,
        /// Who asks, recorded with the checkpoint written (`by`).
        #[arg(long, value_name = "NAME", env = "TOLLGATE_REVIEWER")]
        by: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Starts a new run from a checkpoint of a blueprint run (its state,
    /// optionally edited, and what was to run next) and drives it; the
    /// source run is unchanged.
    Fork {
        /// The run.
        run: String,
        /// The checkpoint (default: the latest).
        #[arg(long)]
        step: Option<u64>,
        /// Fields to write on the forked state first, as a JSON object.
        #[arg(long)]
        values: Option<String>,
        /// Who asks, recorded with the new run's first checkpoint (`by`).
        #[arg(long, value_name = "NAME", env = "TOLLGATE_REVIEWER")]
        by: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continues a blueprint run that was interrupted or whose owner died.
    Continue {
        /// The run.
        run: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A run's checkpoints, newest first, one page; or with `--thread`, a
    /// thread's checkpoints across all its runs, numbered from its first
    /// run's input.
    History {
        /// The run.
        #[arg(required_unless_present = "thread")]
        run: Option<String>,
        /// A thread instead of a run: the checkpoints of all its runs, each
        /// with its run, step, source and state.
        #[arg(long, conflicts_with_all = ["run", "values"])]
        thread: Option<String>,
        /// Checkpoints before this step (with `--thread`, before this
        /// number): `next_before` of the previous page.
        #[arg(long)]
        before: Option<u64>,
        /// Checkpoints per page.
        #[arg(long, default_value_t = 20)]
        limit: u64,
        /// With the state and the next nodes at each (blueprint runs).
        #[arg(long)]
        values: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancels a running or queued run, wherever it is driven: it ends
    /// `interrupted` (the owner stops at its next write).
    Cancel {
        /// The run.
        run: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deletes a run that is not running: every stored row of it.
    Delete {
        /// The run.
        run: String,
    },
    /// Deletes runs that ended (completed, failed, dead-lettered,
    /// rejected, interrupted) and were last updated longer ago than a
    /// duration. Paused and queued runs are kept unless --status names
    /// them; running runs always are.
    Prune {
        /// How old: a number and a unit, `s`, `m`, `h` or `d` (`30d`).
        #[arg(long, value_name = "DURATION")]
        older_than: String,
        /// Only runs with these statuses (repeatable, or `,`-separated);
        /// the only way to prune `awaiting_hitl` or `queued` runs.
        #[arg(long, value_delimiter = ',')]
        status: Vec<String>,
        /// Say what would be deleted, and delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the deleted ids as JSON.
        #[arg(long)]
        json: bool,
    },
}
