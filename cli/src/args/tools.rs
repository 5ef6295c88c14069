//! `tollgate pack|schedule|threads|store …`, as clap sees them.

use std::path::PathBuf;

use clap::{ArgGroup, Subcommand};

/// `tollgate pack …`: signed blueprint packs.
#[derive(Debug, Subcommand)]
pub(crate) enum PackCommand {
    /// Writes a new Ed25519 key pair: KEY (private, mode 0600) and KEY.pub.
    Keygen {
        /// The private key's file (never overwritten).
        #[arg(long, value_name = "KEY")]
        out: PathBuf,
    },
    /// Packs a blueprint folder into one deterministic archive.
    Build {
        /// The folder: the blueprint, its scripted replies, fixtures and
        /// programs (hidden files are left out).
        dir: PathBuf,
        /// The pack to write.
        #[arg(long, value_name = "NAME.tgpack")]
        out: PathBuf,
        /// Sign it with this private key.
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
        /// The blueprint's file inside the folder (default: FOLDER_NAME.json).
        #[arg(long, value_name = "FILE")]
        blueprint: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows a pack: hash, signer, entries, the blueprint's name and version.
    Inspect {
        /// The pack.
        pack: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Exits 0 only when the pack's signature verifies against a trusted key.
    Verify {
        /// The pack.
        pack: PathBuf,
        /// Folders of trusted public keys (`*.pub`; repeatable;
        /// `TOLLGATE_TRUSTED_KEYS` takes a `:`-separated list).
        #[arg(long, value_name = "DIR", env = "TOLLGATE_TRUSTED_KEYS", value_delimiter = ':')]
        trusted_keys: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `tollgate schedule …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Adds a schedule.
    #[command(group(ArgGroup::new("what").required(true).args(["blueprint", "graph"])))]
    #[command(group(ArgGroup::new("when").required(true).args(["cron", "at"])))]
    Add {
        /// Its id: letters, digits, `-`, `_`, `.`.
        id: String,
        /// The blueprint file (JSON) its runs run.
        #[arg(long, value_name = "PATH")]
        blueprint: Option<PathBuf>,
        /// A typed graph this binary serves, instead of a blueprint;
        /// `--input` is then JSON of its state's update.
        #[arg(long, value_name = "NAME")]
        graph: Option<String>,
        /// A cron expression, read in UTC (`0 9 * * MON-FRI`; six fields
        /// with seconds first; `@daily` and the like).
        #[arg(long, value_name = "EXPR")]
        cron: Option<String>,
        /// One run at this time (RFC 3339: `2026-12-24T09:00:00Z`).
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// The runs' input: the user's message (text or a JSON object), or
        /// with --graph JSON of the state's update.
        #[arg(long, default_value = "")]
        input: String,
        /// Ticks missed while nothing ran: `run_once` (one run for them
        /// all) or `skip`.
        #[arg(long, default_value = "run_once")]
        missed: String,
        /// Seconds late a tick may fire and still be on time.
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        grace: f64,
        /// Print the schedule as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists schedules by id.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows one schedule.
    Show {
        /// Its id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deletes a schedule (the runs it started stay).
    Delete {
        /// Its id.
        id: String,
    },
}

/// `tollgate threads …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ThreadsCommand {
    /// A thread's latest run and its state (the state the next run of the
    /// thread starts from); its runs are `runs list --thread T`.
    Show {
        /// The thread.
        thread: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deletes threads whole (a run in flight cancelled first), or with
    /// --keep-latest keeps each one's latest run alone (the older runs
    /// deleted; the state the next run starts from unchanged).
    Prune {
        /// The threads.
        #[arg(required = true)]
        threads: Vec<String>,
        /// Keep each thread's latest run instead of deleting the thread.
        #[arg(long)]
        keep_latest: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What a thread's runs occupy in the database: their number and the
    /// bytes of their checkpoints and events.
    Storage {
        /// The thread.
        thread: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum StoreCommand {
    /// Stores a JSON value (replacing any under the namespace and key).
    Put {
        /// The namespace (`users/42/memories`).
        namespace: String,
        /// The key.
        key: String,
        /// The value (JSON).
        value: String,
        /// Expire after this long (`90s`, `15m`, `12h`, `30d`).
        #[arg(long, value_name = "DURATION")]
        ttl: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prints an item (exit 3 when there is none).
    Get {
        /// The namespace.
        namespace: String,
        /// The key.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Finds items under a namespace prefix: newest first, or ranked by
    /// similarity to --query (needs --embedder).
    Search {
        /// The prefix (`users/42`; empty for every item).
        prefix: String,
        /// Conditions on the value's fields (JSON: `{"kind": "pref",
        /// "n": {"$gte": 3}}`).
        #[arg(long)]
        filter: Option<String>,
        /// Rank by similarity to this text.
        #[arg(long)]
        query: Option<String>,
        /// Most items printed.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Matches skipped first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Removes an item (exit 3 when there was none).
    Delete {
        /// The namespace.
        namespace: String,
        /// The key.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists the namespaces holding items.
    Namespaces {
        /// Only those beginning with these parts (`users/*/memories`).
        #[arg(long)]
        prefix: Option<String>,
        /// Only those ending with these parts.
        #[arg(long)]
        suffix: Option<String>,
        /// Cut to this many parts.
        #[arg(long)]
        max_depth: Option<usize>,
        /// Most namespaces printed.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}
