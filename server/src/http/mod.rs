//! The HTTP server of `tollgate serve`: transport only, over the service
//! (`crate::service`), on one database (axum on hyper, with our own
//! accept loop for the connection limits).
//!
//! - `native`: tollgate's own API, one file per resource, its JSON in
//!   `native/wire.rs`; `langgraph`: LangGraph's server API under a
//!   prefix, its shapes in `langgraph/wire.rs`. Neither imports the other.
//! - `extract`: the JSON body, path id and caller extractors every
//!   handler uses; `errors`: the one JSON error shape, for our errors and
//!   the framework's (unknown paths, wrong methods, unparsable queries).
//! - `auth`: the bearer token on every endpoint but `/healthz`.
//! - `metrics`: `GET /metrics` (Prometheus), here and on workers.
//! - `page`: the review page's files and the drawing's layout.

mod auth;
mod errors;
mod extract;
mod gate;
mod jwt;
mod langgraph;
mod metrics;
mod native;
mod page;
mod parse_errors;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, Method};
use axum::response::Redirect;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::ServiceError;
use crate::service::{Driver, Hub, Legs, Runs};

pub(crate) use crate::identity::Principal;
pub(crate) use auth::Check;
pub use auth::{credential, Auth, Authenticate, Refusal, Tokens};
pub use jwt::{ClaimNames, Jwt, JwtError};
pub use metrics::serve_metrics;
pub use native::wire::{
    listing_json, run_history_json, schedule_json, state_json, thread_history_json, thread_json,
    thread_storage_json,
};

/// How [`serve`] is configured.
#[derive(Debug)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The bearer token every endpoint but `/healthz` requires (with
    /// [`Auth::Token`], the default).
    pub token: Option<String>,
    /// How requests are authenticated.
    pub auth: Auth,
    /// Serve a non-loopback address without a token.
    pub insecure_no_auth: bool,
    /// Origins allowed by CORS (none: CORS off); `*` allows any.
    pub allow_origins: Vec<String>,
    /// Where `POST /runs` finds blueprints named by name, and the only
    /// folder an inline blueprint may name files in.
    pub blueprints: Option<PathBuf>,
    /// Accept inline blueprints that start programs.
    pub allow_inline_commands: bool,
    /// Hosts (`HOST` or `HOST:PORT`) inline blueprints' MCP servers may
    /// be reached on over HTTP.
    pub allow_mcp_hosts: Vec<String>,
    /// Hosts (`HOST` or `HOST:PORT`) the LangGraph API's run webhooks may
    /// be sent to (none by default: a client could make the server send
    /// requests anywhere).
    pub allow_webhook_hosts: Vec<String>,
    /// Variables of this process's environment programs of blueprints see.
    pub pass_env: Vec<String>,
    /// What protects the server from slow, idle or greedy clients.
    pub limits: Limits,
    /// Where LangGraph's server API is served (`/lg` by default; `None`:
    /// not at all): see docs/langgraph-api.md.
    pub langgraph_prefix: Option<String>,
    /// On SQLite, the API ([`Api::new`], and so [`serve`]) also runs a
    /// worker ([`Runs::work`]) in its process: it drives queued runs (a
    /// run decided or continued from another process among them), wakes
    /// sleeping workflows, recovers the runs of a process that died and
    /// fires schedules (default `true`; stopped by [`Api::release`]). On
    /// Postgres, runs go to `tollgate worker` processes.
    pub worker: bool,
    /// What the review page's sign-in form says the credential is (plain
    /// text; `None`: "This server needs its token (`TOLLGATE_TOKEN` or
    /// `--token-file`)"). An embedding service names its own: "The
    /// service's API key".
    pub sign_in_hint: Option<String>,
    /// How long a request key (`Idempotency-Key`) is kept: a retry within
    /// it is answered with what the first request made (24 h by default,
    /// [`DEFAULT_KEY_TTL`](crate::DEFAULT_KEY_TTL)).
    pub idempotency_ttl: Duration,
    /// What each named caller (named tokens, JWTs, an embedder's check)
    /// reaches: [`RolePolicy`](crate::RolePolicy)'s defaults unless told
    /// (users their own threads and runs, every other role everything);
    /// see docs/tenancy.md.
    pub policy: Arc<dyn crate::identity::Policy>,
}

impl ServeOptions {
    /// Loopback `addr` without a token, the default limits, nothing else
    /// allowed.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            token: None,
            auth: Auth::Token,
            insecure_no_auth: false,
            allow_origins: Vec::new(),
            blueprints: None,
            allow_inline_commands: false,
            allow_mcp_hosts: Vec::new(),
            allow_webhook_hosts: Vec::new(),
            pass_env: Vec::new(),
            limits: Limits::default(),
            langgraph_prefix: Some(DEFAULT_LANGGRAPH_PREFIX.to_owned()),
            worker: true,
            sign_in_hint: None,
            idempotency_ttl: crate::service::DEFAULT_KEY_TTL,
            policy: Arc::new(crate::identity::RolePolicy::default()),
        }
    }
}

/// Where LangGraph's server API is served unless told otherwise.
pub const DEFAULT_LANGGRAPH_PREFIX: &str = "/lg";

/// A LangGraph API prefix: `/` and a path of plain segments, not one of
/// the native API's.
fn checked_prefix(prefix: &str) -> Result<String, ServiceError> {
    let trimmed = prefix.trim_end_matches('/');
    let plain = trimmed.starts_with('/')
        && trimmed.len() > 1
        && trimmed[1..].split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    let first = trimmed[1.min(trimmed.len())..].split('/').next().unwrap_or("");
    let native = ["runs", "threads", "graphs", "ui", "me", "metrics", "healthz", "changes"];
    if !plain || native.contains(&first) {
        return Err(ServiceError::invalid(format!(
            "`{prefix}` cannot be the LangGraph API's prefix: give a path such as /lg, not one of the native API's"
        )));
    }
    Ok(trimmed.to_owned())
}

/// What protects the server from slow, idle or greedy clients.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Limits {
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Time to send a request's headers, and to start the next request on
    /// a kept-alive connection.
    pub header_timeout: Duration,
    /// Time to send a request's body.
    pub body_timeout: Duration,
    /// Largest request body.
    pub max_body: usize,
    /// Longest request target (path and query).
    pub max_uri: usize,
}

impl Default for Limits {
    /// 1,024 connections, 10 s for headers, 30 s for a body, 1 MiB bodies,
    /// 8 KiB targets (the CLI's defaults).
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_body: 1_048_576,
            max_uri: 8_192,
        }
    }
}

/// The state every handler shares.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) runs: Runs,
    pub(crate) hub: Hub,
    /// The legs this server drives, released when it stops.
    pub(crate) legs: Legs,
    pub(crate) settings: Arc<Settings>,
    /// Wakes the LangGraph API's dispatcher (work was added to the
    /// outbox).
    pub(crate) outbox: Arc<tokio::sync::Notify>,
    /// The worker this API runs in its process, if it does.
    pub(crate) driver: Option<Arc<Driver>>,
}

/// How long a stopping server waits for its legs to reach a step boundary.
const RELEASE_PATIENCE: Duration = Duration::from_secs(30);

/// The options handlers consult.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) auth: Check,
    /// What callers may have the server run and reach.
    pub(crate) admission: Arc<crate::service::Admission>,
    pub(crate) limits: Limits,
    /// The process's Prometheus recorder.
    pub(crate) metrics: tollgate_telemetry::Metrics,
    /// Where the LangGraph API is served, if it is.
    pub(crate) langgraph: Option<String>,
    /// What the page's sign-in form says the credential is.
    pub(crate) sign_in_hint: Option<String>,
    /// The addresses this server listens on (webhooks never go there).
    pub(crate) own: std::sync::Mutex<Vec<SocketAddr>>,
    /// How long request keys are kept.
    pub(crate) idempotency_ttl: Duration,
    /// What each named caller reaches.
    pub(crate) policy: Arc<dyn crate::identity::Policy>,
}

impl Settings {
    /// The addresses this server listens on, as far as it was told.
    pub(crate) fn own_addrs(&self) -> Vec<SocketAddr> {
        self.own.lock().map(|own| own.clone()).unwrap_or_default()
    }
}

/// Refuses options that would expose runs: a non-loopback address without
/// a token or another check (unless `--insecure-no-auth`). Checked before
/// anything is opened or created.
pub fn check_exposure(options: &ServeOptions) -> Result<(), ServiceError> {
    let open = options.token.is_none() && matches!(options.auth, Auth::Token);
    if !options.addr.ip().is_loopback() && open && !options.insecure_no_auth {
        return Err(ServiceError::invalid(format!(
            "refusing to serve {} without a token: anyone who can reach it could read and decide runs. Set TOLLGATE_TOKEN or --token-file, or pass --insecure-no-auth",
            options.addr
        )));
    }
    cors(&options.allow_origins)?;
    Ok(())
}

/// The API, its streams and the review page over one database, as an
/// axum [`Router`] a service can nest under any prefix of its own app,
/// beside its own routes, behind its own middleware. [`serve`] is this
/// router behind tollgate's own accept loop.
///
/// ```no_run
/// # async fn demo(runs: tollgate_server::Runs) -> Result<(), tollgate_server::ServiceError> {
/// use tollgate_server::{Api, Auth, ServeOptions};
/// let mut options = ServeOptions::new(([127, 0, 0, 1], 8080).into());
/// // The service's own middleware checks callers (layered on the router).
/// options.auth = Auth::External;
/// let api = Api::new(runs, options)?;
/// let app = axum::Router::new().nest("/tollgate", api.router());
/// // ... serve `app`; at shutdown:
/// api.release(std::time::Duration::from_secs(30)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Api {
    app: App,
    cors: Option<CorsLayer>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("runs", &self.app.runs).finish_non_exhaustive()
    }
}

impl Api {
    /// The API over `runs`, configured by `options` (its `addr` is not
    /// used: the service that serves the router decides where). With the
    /// LangGraph API on, and inside a Tokio runtime, it also starts that
    /// API's dispatcher (pending runs, webhooks: docs/langgraph-api.md),
    /// which ends once the `Api` and its routers are dropped.
    pub fn new(runs: Runs, options: ServeOptions) -> Result<Self, ServiceError> {
        let cors = cors(&options.allow_origins)?;
        let settings = Settings {
            auth: match options.auth {
                Auth::Token => match options.token {
                    Some(token) => Check::Token(token),
                    None => Check::Open,
                },
                Auth::Tokens(tokens) => Check::Tokens(tokens),
                Auth::Jwt(jwt, tokens) => Check::Jwt(Box::new(jwt), tokens),
                Auth::External => Check::Open,
                Auth::Custom(check) => Check::Custom(check),
            },
            admission: Arc::new(crate::service::Admission {
                blueprints: options.blueprints,
                inline_commands: options.allow_inline_commands,
                mcp_hosts: options.allow_mcp_hosts,
                webhook_hosts: options.allow_webhook_hosts,
                pass_env: options.pass_env,
            }),
            limits: options.limits,
            metrics: metrics::recorder()?,
            langgraph: options.langgraph_prefix.as_deref().map(checked_prefix).transpose()?,
            sign_in_hint: options.sign_in_hint,
            idempotency_ttl: options.idempotency_ttl,
            policy: options.policy,
            own: std::sync::Mutex::new(
                Some(options.addr).filter(|addr| addr.port() != 0).into_iter().collect(),
            ),
        };
        let hub = Hub::default();
        // On Postgres, the events workers publish as they emit them reach
        // this server's followers before their step commits.
        if let (Ok(runtime), Some(events)) =
            (tokio::runtime::Handle::try_current(), runs.live_events())
        {
            runtime.spawn(hub.clone().relay(events));
        }
        let drive = options.worker && !runs.shared();
        let driver = drive.then(|| Driver::start(&runs)).flatten().map(Arc::new);
        let app = App {
            runs,
            hub,
            legs: Legs::default(),
            settings: Arc::new(settings),
            outbox: Arc::default(),
            driver,
        };
        if app.settings.langgraph.is_some() {
            langgraph::spawn_dispatcher(app.clone());
        }
        Ok(Self { app, cors })
    }

    /// Tells the API an address it is served on (besides its options'
    /// `addr`), so that no webhook is sent to the server itself. [`serve`]
    /// says where it listens; a service serving [`Api::router`] on a
    /// listener of its own should say so too.
    pub fn listening_on(&self, addr: SocketAddr) {
        if let Ok(mut own) = self.app.settings.own.lock() {
            if !own.contains(&addr) {
                own.push(addr);
            }
        }
    }

    /// The router: every endpoint of docs/openapi.yaml, the streams, the
    /// page at `/` (and `/ui/…`), with the JSON error shape, the request
    /// target limit, CORS as configured and the configured [`Auth`].
    pub fn router(&self) -> Router {
        let mut router = routes(self.app.clone());
        if let Some(cors) = self.cors.clone() {
            router = router.layer(cors);
        }
        router.layer(axum::middleware::map_response(errors::json_errors))
    }

    /// Releases the legs this API drives (runs it started, decided or
    /// continued): each goes back to `queued` at its next step boundary,
    /// waiting up to `patience`, for a worker or `runs continue`, rather
    /// than staying `running` under an owner that is gone. Call it when
    /// the service stops. Returns how many were released, and how many
    /// were still in a step.
    pub async fn release(&self, patience: Duration) -> (usize, usize) {
        if let Some(driver) = &self.app.driver {
            driver.stop().await;
        }
        self.app.legs.release_all(patience).await
    }
}

/// `router` (an [`Api::router`], layered as the service wants, with its
/// own check say) nested under `prefix` (`/tollgate`), for a service's
/// own app to `merge`: the API and the page at `prefix`, and `prefix/`
/// redirected to the page (axum's `nest` alone leaves `prefix/` outside
/// the nested router, a 404). Paths inside `router` stay as the API sees
/// them (`/`, `/ui/app.js`, `/runs`), whatever the prefix.
///
/// # Panics
///
/// When `prefix` is not a path of its own (`/` or empty, or not starting
/// with `/`), as axum's `nest` does.
pub fn nest_under(prefix: &str, router: Router) -> Router {
    let root = prefix.to_owned();
    Router::new()
        .route(&format!("{prefix}/"), get(move || async move { Redirect::permanent(&root) }))
        .nest(prefix, router)
}

/// [`Api::new`] and [`Api::router`] in one call, for a service that
/// lets the runs it drives be taken over by lease expiry when it stops.
pub fn router(runs: Runs, options: ServeOptions) -> Result<Router, ServiceError> {
    Ok(Api::new(runs, options)?.router())
}

/// Serves `runs` until `shutdown` resolves, then releases the legs it
/// drives at their next step boundary. Prints `listening on http://ADDR`
/// first, so a caller that asked for port 0 learns the port.
pub async fn serve(
    runs: Runs,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let (addr, limits) = (options.addr, options.limits);
    let open = options.token.is_none() && matches!(options.auth, Auth::Token);
    let api = Api::new(runs, options)?;
    let listener = TcpListener::bind(addr).await.map_err(|error| {
        ServiceError::failed(format!("cannot listen on {addr}: {error}")).with_source(error)
    })?;
    let local = listener.local_addr().map_err(|error| {
        ServiceError::failed(format!("cannot read the bound address: {error}")).with_source(error)
    })?;
    api.listening_on(local);
    if open && !local.ip().is_loopback() {
        eprintln!("tollgate: warning: serving {local} without a token (--insecure-no-auth)");
    }
    println!("listening on http://{local}");
    accept(listener, api.router(), limits, shutdown).await;
    let (released, left) = api.release(RELEASE_PATIENCE).await;
    if released + left > 0 {
        eprintln!("tollgate: stopped; released {released} run(s) at a step boundary, {left} still in a step");
    }
    Ok(())
}

fn routes(app: App) -> Router {
    let mut router = Router::new();
    if let Some(prefix) = &app.settings.langgraph {
        router = router.nest(prefix, langgraph::routes());
    }
    router
        .merge(native::routes())
        .route("/metrics", get(metrics::scrape))
        .route("/", get(page::index))
        .route("/ui/{file}", get(page::asset))
        .fallback(errors::no_route)
        .layer(axum::middleware::from_fn_with_state(app.clone(), auth::check))
        .layer(axum::middleware::from_fn_with_state(app.clone(), errors::limit_uri))
        .with_state(app)
}

/// CORS for the listed origins, or none.
fn cors(origins: &[String]) -> Result<Option<CorsLayer>, ServiceError> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|origin| origin == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|origin| {
                HeaderValue::from_str(origin).map_err(|_| {
                    ServiceError::invalid(format!(
                        "--allow-origin `{origin}` is not a valid origin"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::HeaderName::from_static("last-event-id"),
                // LangGraph's browser clients.
                header::HeaderName::from_static("x-api-key"),
            ])
            .expose_headers([header::CONTENT_LOCATION]),
    ))
}

/// Accepts connections until `shutdown`, at most `max_connections` served
/// at once (more wait in the listen backlog), each with the header
/// timeout, which also closes a kept-alive connection idle for as long.
async fn accept(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, say: wait, then go on.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            if let Err(error) = http
                .serve_connection(TokioIo::new(parse_errors::JsonParseErrors::new(stream)), service)
                .with_upgrades()
                .await
            {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
}
