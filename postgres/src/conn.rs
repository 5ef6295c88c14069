//! A pooled connection with a statement ready on it, and what the
//! database's and the pool's errors mean as [`StoreError`]s (the schema's
//! refusals, `TG...` codes, included).

use deadpool_postgres::{HookError, Pool, PoolError};
use tokio_postgres::error::SqlState;
use tollgate_checkpoint::{RunId, RunStatus, StoreError};

use crate::sql::{Sql, Stmt};

/// A connection of `pool` and `sql` ready to run on it (prepared and
/// cached per connection, or, `unnamed`, its parameter types).
pub(crate) async fn prepared(
    pool: &Pool,
    sql: &str,
    unnamed: bool,
) -> Result<(deadpool_postgres::Client, Stmt), StoreError> {
    let client = pool.get().await.map_err(|error| pool_error(pool, error))?;
    let statement = client.statement(sql, unnamed).await.map_err(client_error)?;
    Ok((client, statement))
}

pub(crate) fn pool_error(pool: &Pool, error: PoolError) -> StoreError {
    match error {
        PoolError::Backend(error) | PoolError::PostCreateHook(HookError::Backend(error)) => {
            client_error(error)
        }
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StoreError::PoolExhausted {
            size: pool.status().max_size,
            waited_ms: pool.timeouts().wait.map_or(0, |wait| wait.as_millis() as u64),
        },
        PoolError::Timeout(kind) => {
            StoreError::Unavailable { source: format!("timed out ({kind:?})").into() }
        }
        other => StoreError::Unavailable { source: Box::new(other) },
    }
}

/// A client error that is not one of the schema's refusals.
pub(crate) fn client_error(error: tokio_postgres::Error) -> StoreError {
    let unavailable = match error.code() {
        None => true,
        // Class 08, connection exception (a pooler such as PgBouncer
        // reports a refused login as a protocol violation, 08P01).
        Some(code) if code.code().starts_with("08") => true,
        Some(code) => [
            SqlState::INVALID_PASSWORD,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SqlState::INVALID_CATALOG_NAME,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code),
    };
    // Named statements that clash or vanish between statements: a pooler
    // in transaction mode hands each statement another server session.
    let pooled = error.code().is_some_and(|code| {
        [SqlState::DUPLICATE_PSTATEMENT, SqlState::INVALID_SQL_STATEMENT_NAME].contains(code)
    });
    if pooled {
        return StoreError::InvalidSettings {
            source: format!(
                "{}: the database is reached through a pooler in transaction mode (PgBouncer's pool_mode = transaction, or a managed pooler on its transaction port); add `pool_mode=transaction` to the URL (or set TOLLGATE_PG_POOL_MODE=transaction) so that tollgate uses no named statements across transactions",
                error.as_db_error().map_or_else(|| error.to_string(), |db| db.message().to_owned())
            )
            .into(),
        };
    }
    // A server's error says what it is ("password authentication failed
    // for user ..."); the client's wrapper says only "db error".
    let source: Box<dyn std::error::Error + Send + Sync> = match error.as_db_error() {
        Some(db) => Box::new(db.clone()),
        // tokio-postgres's words when the server asks for a password the
        // URL does not give.
        None if error.to_string().contains("password missing") => {
            "the server asks for a password and the URL gives none (postgres://USER:PASSWORD@HOST/DB)"
                .into()
        }
        None => Box::new(Chain::of(&error)),
    };
    if unavailable {
        StoreError::Unavailable { source }
    } else {
        StoreError::Backend { source }
    }
}

/// What a write was about, to turn the schema's refusals (`TG...` codes)
/// into [`StoreError`]s.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusal {
    pub(crate) run: RunId,
    pub(crate) epoch: u64,
    pub(crate) step: u64,
    pub(crate) first_seq: u64,
    pub(crate) interrupt: String,
}

impl Refusal {
    pub(crate) fn new(run: RunId) -> Self {
        Self { run, ..Self::default() }
    }

    /// The interrupt a refusal names (its detail), else the one asked about.
    fn named(&self, detail: &str) -> String {
        if detail.is_empty() {
            self.interrupt.clone()
        } else {
            detail.to_owned()
        }
    }

    pub(crate) fn map(&self, error: tokio_postgres::Error) -> StoreError {
        let Some(db) = error.as_db_error() else { return client_error(error) };
        let detail = db.detail().unwrap_or_default();
        let mut numbers = detail.split(',').map(|part| part.trim().parse::<u64>().ok());
        let first = numbers.next().flatten();
        let second = numbers.next().flatten();
        let status = detail.parse::<RunStatus>();
        let run = self.run;
        match (db.code().code(), first, status) {
            ("TG001", _, _) => StoreError::RunNotFound { run },
            ("TG002", _, _) => StoreError::RunExists { run },
            ("TG003", Some(current), _) => StoreError::Fenced { run, writer: self.epoch, current },
            ("TG004", Some(current), _) => {
                StoreError::StepOutOfOrder { run, current, found: second.unwrap_or(self.step) }
            }
            ("TG005", Some(expected), _) => {
                StoreError::EventGap { run, expected, found: self.first_seq }
            }
            ("TG006", _, Ok(status)) => StoreError::RunTerminal { run, status },
            ("TG007", _, Ok(status)) => StoreError::NotAwaitingDecision { run, status },
            ("TG008", _, _) => StoreError::InterruptNotFound { run, interrupt: self.named(detail) },
            ("TG009", _, _) => StoreError::InterruptAnswered { run, interrupt: self.named(detail) },
            _ => client_error(error),
        }
    }
}

/// A client error with its causes in one line ("error performing TLS
/// handshake: sslmode=verify-full: …"): tokio-postgres's own message
/// names only the step that failed.
#[derive(Debug)]
pub(crate) struct Chain(String);

impl Chain {
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = error.to_string();
        let mut cause = error.source();
        while let Some(next) = cause {
            let said = next.to_string();
            if !text.contains(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
            cause = next.source();
        }
        if text.contains("server does not support TLS") {
            text.push_str(" (sslmode require, verify-ca and verify-full need TLS: turn it on at the server, or use sslmode=prefer or disable)");
        }
        Chain(text)
    }
}

impl std::fmt::Display for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Chain {}
