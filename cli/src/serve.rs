//! `tollgate serve` and `tollgate worker`: their options, checked before
//! the database is opened, the signals that stop them, the worker's
//! report.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tollgate_server::{code, Runs, ServeOptions, ServiceError};

use crate::args::Command;
use crate::print_json;

/// `serve`'s options, checked before the database is opened (or
/// created): a refused start leaves nothing behind. `None` for another
/// command.
pub(crate) fn options(
    command: &Command,
    pass_env: &[String],
) -> Result<Option<ServeOptions>, ServiceError> {
    let Command::Serve {
        addr,
        token_file,
        tokens_file,
        jwt_secret_file,
        jwks_file,
        jwt_issuer,
        jwt_audience,
        jwt_claim,
        policy,
        insecure_no_auth,
        allow_origin,
        blueprints,
        allow_inline_commands,
        allow_mcp_host,
        allow_webhook_host,
        langgraph_prefix,
        no_langgraph,
        max_connections,
        header_timeout,
        body_timeout,
        max_body,
        idempotency_ttl,
        thread_ttl,
        sweep_every,
        no_worker,
        ..
    } = command
    else {
        return Ok(None);
    };
    let mut limits = tollgate_server::Limits::default();
    limits.max_connections = *max_connections;
    limits.header_timeout = seconds("header-timeout", *header_timeout)?;
    limits.body_timeout = seconds("body-timeout", *body_timeout)?;
    limits.max_body = *max_body;
    let mut options = tollgate_server::ServeOptions::new(*addr);
    options.token = server_token(token_file.as_deref())?;
    let tokens = tokens_file.as_deref().map(tollgate_server::Tokens::load).transpose()?;
    let jwt = match (jwt_secret_file, jwks_file) {
        (Some(path), _) => Some(tollgate_server::Jwt::load_secret(path)?),
        (None, Some(path)) => Some(tollgate_server::Jwt::load_jwks(path)?),
        (None, None) => None,
    };
    if jwt.is_none() && (jwt_issuer.is_some() || jwt_audience.is_some() || !jwt_claim.is_empty()) {
        return Err(ServiceError::invalid(
            "--jwt-issuer, --jwt-audience and --jwt-claim need --jwt-secret-file or --jwks-file",
        ));
    }
    if (tokens.is_some() || jwt.is_some()) && options.token.is_some() {
        return Err(ServiceError::invalid(
            "--tokens-file and JWTs replace the one token: unset TOLLGATE_TOKEN",
        ));
    }
    options.auth = match (jwt, tokens) {
        (Some(jwt), tokens) => {
            let jwt = jwt_options(jwt, jwt_issuer, jwt_audience, jwt_claim)?;
            tollgate_server::Auth::Jwt(jwt, tokens)
        }
        (None, Some(tokens)) => tollgate_server::Auth::Tokens(tokens),
        (None, None) => options.auth,
    };
    if let Some(path) = policy {
        let policy = tollgate_server::RolePolicy::load(path)
            .map_err(|error| ServiceError::invalid(error.to_string()).with_source(error))?;
        options.policy = std::sync::Arc::new(policy);
    }
    options.insecure_no_auth = *insecure_no_auth;
    options.allow_origins = allow_origin.clone();
    options.blueprints = blueprints.clone();
    options.allow_inline_commands = *allow_inline_commands;
    options.allow_mcp_hosts = allow_mcp_host.clone();
    options.allow_webhook_hosts = allow_webhook_host.clone();
    options.pass_env = pass_env.to_vec();
    options.limits = limits;
    options.langgraph_prefix = (!*no_langgraph).then(|| langgraph_prefix.clone());
    options.worker = !*no_worker;
    options.idempotency_ttl = seconds("idempotency-ttl", *idempotency_ttl)?;
    // Used once the runs are open (`open`); checked before.
    thread_ttl.map(|ttl| seconds("thread-ttl", ttl)).transpose()?;
    seconds("sweep-every", *sweep_every)?;
    tollgate_server::check_exposure(&options)?;
    Ok(Some(options))
}

/// `jwt` with the issuer, audience and claim names asked for
/// (`--jwt-claim KIND=NAME`).
fn jwt_options(
    jwt: tollgate_server::Jwt,
    issuer: &Option<String>,
    audience: &Option<String>,
    claims: &[String],
) -> Result<tollgate_server::Jwt, ServiceError> {
    let mut names = tollgate_server::ClaimNames::default();
    for given in claims {
        let Some((kind, name)) = given.split_once('=').filter(|(_, name)| !name.is_empty()) else {
            return Err(ServiceError::invalid(format!(
                "--jwt-claim takes KIND=NAME (subject, roles, groups, tenant), not `{given}`"
            )));
        };
        names = names.named(kind, name)?;
    }
    let mut jwt = jwt.claims(names);
    if let Some(issuer) = issuer {
        jwt = jwt.issuer(issuer);
    }
    if let Some(audience) = audience {
        jwt = jwt.audience(audience);
    }
    Ok(jwt)
}

/// `value` seconds of option `--NAME`: more than 0.
pub(crate) fn seconds(name: &str, value: f64) -> Result<Duration, ServiceError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| ServiceError::invalid(format!("--{name} takes seconds, more than 0")))
}

/// `worker`: drives runs no process drives until a signal, then reports.
pub(crate) async fn worker(
    runs: &Runs,
    (concurrency, lease, max_lease_losses): (usize, f64, u32),
    metrics_addr: Option<SocketAddr>,
    shutdown: impl std::future::Future<Output = ()>,
    json: bool,
) -> Result<u8, ServiceError> {
    let lease = Duration::try_from_secs_f64(lease)
        .ok()
        .filter(|lease| *lease >= Duration::from_millis(100))
        .ok_or_else(|| ServiceError::invalid("--lease takes seconds, at least 0.1"))?;
    if let Some(addr) = metrics_addr {
        tollgate_server::serve_metrics(runs.store().clone(), addr).await?;
    }
    let report = runs.work(concurrency, lease, max_lease_losses, shutdown).await;
    if json {
        print_json(&json!({
            "legs": report.legs,
            "completed": report.completed,
            "failed": report.failed,
            "released": report.released,
            "lost_claims": report.lost_claims,
            "dead_lettered": report.dead_lettered,
        }));
    } else {
        say!(
            "worker stopped: {} legs ({} completed, {} failed, {} released), {} claims lost to other workers, {} runs dead-lettered",
            report.legs, report.completed, report.failed, report.released,
            report.lost_claims, report.dead_lettered
        );
    }
    Ok(code::OK)
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed here, before
/// the future is first polled: a signal that comes early (a worker stopped
/// right after it started) still stops it gracefully rather than killing
/// it.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let watch = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(error) => {
            eprintln!("tollgate: cannot watch {name} ({error})");
            None
        }
    };
    let mut terminate = watch(SignalKind::terminate(), "SIGTERM");
    let mut interrupt = watch(SignalKind::interrupt(), "SIGINT");
    async move {
        tokio::select! {
            () = received(terminate.as_mut()) => {}
            () = received(interrupt.as_mut()) => {}
        }
    }
}

/// Waits for the signal, or forever when it could not be watched.
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The server's token: `--token-file`'s first line, else `TOLLGATE_TOKEN`
/// (read here rather than by the argument parser, so that `--help` never
/// shows it). Blank means none.
fn server_token(file: Option<&std::path::Path>) -> Result<Option<String>, ServiceError> {
    let token = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                ServiceError::invalid(format!(
                    "cannot read --token-file {}: {error}",
                    path.display()
                ))
            })?;
            let token = text.lines().next().unwrap_or_default().trim().to_owned();
            if token.is_empty() {
                return Err(ServiceError::invalid(format!(
                    "--token-file {} holds no token on its first line",
                    path.display()
                )));
            }
            token
        }
        None => std::env::var("TOLLGATE_TOKEN").unwrap_or_default().trim().to_owned(),
    };
    Ok((!token.is_empty()).then_some(token))
}
