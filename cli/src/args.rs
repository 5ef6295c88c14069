//! The command line, as clap sees it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand};

/// Durable state-graph workflows for LLM agents.
#[derive(Parser, Debug)]
#[command(name = "tollgate", version, about, long_about = None)]
pub(crate) struct Cli {
    /// The database (default: $TOLLGATE_DB, else ./tollgate.db).
    // The value from the environment may be a URL with a password: never
    // printed by --help.
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_DB",
        hide_env_values = true,
        default_value = "tollgate.db"
    )]
    pub(crate) db: PathBuf,
    /// A variable of this process's environment that programs blueprints
    /// start (command tools, MCP servers) may see (repeatable;
    /// `TOLLGATE_PASS_ENV` takes a `,`-separated list). They see only
    /// PATH, HOME, LANG, LC_ALL, LC_CTYPE, TZ and TMPDIR otherwise, plus
    /// what the blueprint's `env` entries set.
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "TOLLGATE_PASS_ENV",
        value_delimiter = ','
    )]
    pub(crate) pass_env: Vec<String>,
    /// The embedder long-term memory's semantic search uses
    /// (`openai:MODEL`, with OPENAI_BASE_URL and OPENAI_API_KEY); none by
    /// default: searches then take no query.
    #[arg(long, global = true, value_name = "SPEC", env = "TOLLGATE_EMBEDDER")]
    pub(crate) embedder: Option<String>,
    /// Dimensions of the embedder's vectors.
    #[arg(
        long,
        global = true,
        value_name = "N",
        env = "TOLLGATE_EMBED_DIMS",
        default_value_t = 1536
    )]
    pub(crate) embed_dims: usize,
    /// Fields of memory values that are embedded (`$` for the whole
    /// value).
    #[arg(
        long,
        global = true,
        value_name = "FIELD",
        env = "TOLLGATE_EMBED_FIELDS",
        value_delimiter = ',',
        default_value = "text"
    )]
    pub(crate) embed_fields: Vec<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Runs a blueprint (or a graph the binary serves) until it completes,
    /// pauses for a decision or fails.
    #[command(group(ArgGroup::new("what").required(true).args(["blueprint", "graph"])))]
    Run {
        /// The blueprint file (JSON), or a pack (`.tgpack`, see `pack`).
        blueprint: Option<PathBuf>,
        /// A typed graph this binary serves (one built with
        /// `tollgate_cli::main_with`), instead of a blueprint; `--input`
        /// is then JSON of its state's update.
        #[arg(long, value_name = "NAME")]
        graph: Option<String>,
        /// The user's message: text, or a JSON object (its `message` field,
        /// else the whole object, is sent).
        #[arg(long, default_value = "")]
        input: String,
        /// Use this model for every agent (`scripted:PATH`, `openai:MODEL`,
        /// `anthropic:MODEL`).
        #[arg(long)]
        model: Option<String>,
        /// Stream every agent's model calls: the reply's text is recorded
        /// as `model_delta` events while the model writes (as
        /// `"stream": true` on each agent of the blueprint does).
        #[arg(long)]
        stream: bool,
        /// Store the run `queued` and return at once: a `tollgate worker`
        /// (of any process sharing the database) drives it.
        #[arg(long)]
        queue: bool,
        /// Run on this thread: from the state its latest run left (the
        /// conversation so far), the input appended. Refused while the
        /// thread's latest run is running, queued or paused.
        #[arg(long)]
        thread: Option<String>,
        /// Folders of trusted public keys (`*.pub`) a pack's signature must
        /// verify against (repeatable; `TOLLGATE_TRUSTED_KEYS` takes a
        /// `:`-separated list).
        #[arg(long, value_name = "DIR", env = "TOLLGATE_TRUSTED_KEYS", value_delimiter = ':')]
        trusted_keys: Vec<PathBuf>,
        /// Run a pack that is unsigned or signed by a key that is not
        /// trusted (a signature that does not verify is still refused).
        #[arg(long)]
        allow_unsigned: bool,
        /// Verify the pack, report, and exit without running it.
        #[arg(long)]
        dry_run_verify: bool,
        /// Print the run summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drives blueprint runs no process drives (queued, decided, or whose
    /// owner died) until SIGTERM or SIGINT; then releases its legs at their
    /// next step boundary and exits 0.
    Worker {
        /// Legs driven at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Seconds a leg's ownership lasts without renewal (renewed every
        /// step and every third of it meanwhile): how long a frozen or
        /// unreachable worker keeps its runs from others.
        #[arg(long, default_value_t = 15.0)]
        lease: f64,
        /// A run whose owners disappeared this many times in a row is
        /// marked failed (`dead_letter`) instead of taken over again.
        #[arg(long, default_value_t = tollgate_engine::DEFAULT_MAX_LEASE_LOSSES)]
        max_lease_losses: u32,
        /// Serve Prometheus metrics at http://ADDR/metrics (no token:
        /// bind it where only the scraper reaches).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// Print the report at exit as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists, shows, decides, follows and continues runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Threads: conversations whose runs continue each other.
    #[command(subcommand)]
    Threads(ThreadsCommand),
    /// Long-term memory: items under namespaces written with slashes
    /// (`users/42/memories`), kept in the runs' database (docs/memory.md).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Builds, signs, inspects and verifies blueprint packs (docs/packs.md).
    #[command(subcommand)]
    Pack(PackCommand),
    /// Schedules: runs of a blueprint or a graph on a cron expression or
    /// at a time, started by whichever worker (or SQLite `serve`) fires
    /// them first (docs/workflows.md).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Serves the REST, SSE and WebSocket API. The bearer token every
    /// endpoint but /healthz then requires comes from the environment
    /// variable TOLLGATE_TOKEN or from --token-file.
    Serve {
        /// Address to bind (loopback by default; any other needs a token
        /// or --insecure-no-auth).
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        /// Create the SQLite database when it does not exist (without it,
        /// a missing file is "not found").
        #[arg(long)]
        create: bool,
        /// Read the bearer token from this file (its first line).
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// Named tokens with roles instead of one token: each line `NAME
        /// ROLE SHA256` (role `read`, `decide` or `admin`; the token's
        /// SHA-256 in hex). A decision records the caller's name.
        #[arg(long, value_name = "PATH", conflicts_with = "token_file")]
        tokens_file: Option<PathBuf>,
        /// Refused: a token on the command line shows in `ps`.
        #[arg(long, hide = true)]
        token: Option<String>,
        /// Serve a non-loopback address without a token.
        #[arg(long)]
        insecure_no_auth: bool,
        /// Allow browser pages of this origin (CORS; repeat it; `*` for
        /// any). Off by default.
        #[arg(long, value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// A folder of blueprints POST /runs may name (`NAME.json` or
        /// `NAME/NAME.json`); inline blueprints resolve paths from here.
        #[arg(long, value_name = "DIR")]
        blueprints: Option<PathBuf>,
        /// Accept inline blueprints that start programs: command tools and
        /// MCP servers started from a command, nested blueprints' included
        /// (refused by default: a client could run programs on the server).
        #[arg(long)]
        allow_inline_commands: bool,
        /// A host (`HOST` or `HOST:PORT`) that inline blueprints' MCP
        /// servers may be reached on over HTTP (repeatable; none by
        /// default: a client could make the server send requests anywhere).
        #[arg(long, value_name = "HOST")]
        allow_mcp_host: Vec<String>,
        /// A host (`HOST` or `HOST:PORT`) the LangGraph API's run webhooks
        /// may be sent to (repeatable; none by default: a client could make
        /// the server send requests anywhere).
        #[arg(long, value_name = "HOST")]
        allow_webhook_host: Vec<String>,
        /// Where LangGraph's server API is served, for clients written for
        /// LangGraph's server (docs/langgraph-api.md).
        #[arg(long, value_name = "PATH", default_value = tollgate_server::DEFAULT_LANGGRAPH_PREFIX)]
        langgraph_prefix: String,
        /// Do not serve LangGraph's server API.
        #[arg(long)]
        no_langgraph: bool,
        /// Connections served at once; more wait to be accepted.
        #[arg(long, default_value_t = 1024)]
        max_connections: usize,
        /// Seconds a client has to send a request's headers (and to start
        /// the next request on an idle kept-alive connection).
        #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
        header_timeout: f64,
        /// Seconds a client has to send a request's body.
        #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
        body_timeout: f64,
        /// Largest request body, in bytes.
        #[arg(long, default_value_t = 1_048_576, value_name = "BYTES")]
        max_body: usize,
        /// On SQLite, run no worker in this process: queued runs, sleeping
        /// workflows and schedules then wait for a `tollgate worker`.
        #[arg(long)]
        no_worker: bool,
    },
}

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

/// `text` (the value of `flag`) as a JSON object.
pub(crate) fn object_arg(
    flag: &str,
    text: &str,
) -> Result<serde_json::Value, tollgate_server::ServiceError> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(tollgate_server::ServiceError::invalid(format!(
            "{flag} must be a JSON object: the fields to write"
        ))),
        Err(error) => {
            Err(tollgate_server::ServiceError::invalid(format!("{flag} is not JSON: {error}")))
        }
    }
}
