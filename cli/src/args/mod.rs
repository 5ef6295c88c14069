//! The command line, as clap sees it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand};

mod runs;
mod tools;

pub(crate) use runs::RunsCommand;
pub(crate) use tools::{PackCommand, ScheduleCommand, StoreCommand, ThreadsCommand};

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

// Parsed once per process: `serve`'s many options cost nothing worth boxing.
#[allow(clippy::large_enum_variant)]
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
        /// ROLE SHA256` (role `user`, `read`, `decide` or `admin`; the
        /// token's SHA-256 in hex). A decision records the caller's name.
        #[arg(long, value_name = "PATH", conflicts_with = "token_file")]
        tokens_file: Option<PathBuf>,
        /// Take JWTs signed (HS256) with the secret in this file (at least
        /// 32 bytes), as `Authorization: Bearer` or `x-api-key`; named
        /// tokens of --tokens-file keep working beside them.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["token_file", "jwks_file"])]
        jwt_secret_file: Option<PathBuf>,
        /// Take JWTs signed (RS256, ES256) by a key of this JWKS file.
        #[arg(long, value_name = "PATH", conflicts_with = "token_file")]
        jwks_file: Option<PathBuf>,
        /// Take only JWTs whose `iss` is this.
        #[arg(long, value_name = "ISSUER")]
        jwt_issuer: Option<String>,
        /// Take only JWTs whose `aud` names this.
        #[arg(long, value_name = "AUDIENCE")]
        jwt_audience: Option<String>,
        /// Read a JWT's KIND (subject, roles, groups, tenant) from claim
        /// NAME (defaults: sub, roles, groups, tenant); repeat it.
        #[arg(long, value_name = "KIND=NAME")]
        jwt_claim: Vec<String>,
        /// What each role reaches: each line `ROLE REACH` (reach `all`,
        /// `tenant` or `own`). By default `user` reaches its own threads
        /// and runs, the other roles everything (docs/tenancy.md).
        #[arg(long, value_name = "PATH")]
        policy: Option<PathBuf>,
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
        /// Seconds a request key (`Idempotency-Key`) is kept: a retry
        /// within them gets what the first request made (24 h).
        #[arg(long, default_value_t = 86_400.0, value_name = "SECONDS")]
        idempotency_ttl: f64,
        /// Seconds a thread record made through the LangGraph API without
        /// its own `ttl` may stay idle before it is removed with its runs
        /// (default: kept until deleted).
        #[arg(long, value_name = "SECONDS")]
        thread_ttl: Option<f64>,
        /// Seconds between two sweeps of what expired: threads past their
        /// time to live, request keys, memory items.
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        sweep_every: f64,
        /// On SQLite, run no worker in this process: queued runs, sleeping
        /// workflows and schedules then wait for a `tollgate worker`.
        #[arg(long)]
        no_worker: bool,
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
