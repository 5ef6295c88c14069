//! Statements as the connection allows them: prepared under a name and
//! cached per connection (directly, or through a session pooler), or sent
//! unnamed with their parameter types at each execution (through a
//! transaction pooler, where a name prepared on one server connection is
//! unknown on the next).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use async_trait::async_trait;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row};

/// How tollgate's connections reach the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooling {
    /// Directly, or through a pooler in session mode (PgBouncer's
    /// `pool_mode = session`): a connection is one server session for as
    /// long as it is open. Statements are prepared once per connection and
    /// `LISTEN` wakes workers and streams at once.
    #[default]
    Session,
    /// Through a pooler in transaction mode (PgBouncer's `pool_mode =
    /// transaction`): each transaction may run on another server
    /// connection. Statements are sent unnamed with their parameter types
    /// (learnt once per process, inside a transaction), nothing relies on
    /// session state, and `LISTEN` is replaced by polling (see
    /// `docs/postgres.md`, "Poolers"). A schema of tollgate's own
    /// ([`PostgresOptions::schema`](crate::PostgresOptions::schema)) is
    /// refused: set the role's `search_path` instead.
    Transaction,
}

impl Pooling {
    /// The pooling a URL's `pool_mode` names (`session` or `transaction`).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "session" => Some(Self::Session),
            "transaction" => Some(Self::Transaction),
            _ => None,
        }
    }
}

/// A statement ready to run on a connection.
pub(crate) enum Stmt {
    /// Prepared under a name on this connection (cached there).
    Named(tokio_postgres::Statement),
    /// Sent unnamed, with its parameters' types, at each execution.
    Unnamed { sql: Arc<str>, types: Arc<[Type]> },
}

/// Held while a statement is described outside a transaction.
static DESCRIBING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Statements' texts and their parameters' types.
type Known = HashMap<Arc<str>, Arc<[Type]>>;

/// Parameter types of the statements this process sent unnamed, by text.
static TYPES: LazyLock<Mutex<Known>> = LazyLock::new(Default::default);

fn known(sql: &str) -> Option<Stmt> {
    let types = TYPES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    types
        .get_key_value(sql)
        .map(|(sql, types)| Stmt::Unnamed { sql: Arc::clone(sql), types: Arc::clone(types) })
}

fn learnt(sql: &str, statement: &tokio_postgres::Statement) -> Stmt {
    let (sql, types): (Arc<str>, Arc<[Type]>) = (sql.into(), statement.params().into());
    let mut known = TYPES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    known.insert(Arc::clone(&sql), Arc::clone(&types));
    Stmt::Unnamed { sql, types }
}

fn typed<'a>(
    types: &[Type],
    params: &[&'a (dyn ToSql + Sync)],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params.iter().zip(types).map(|(param, ty)| (*param, ty.clone())).collect()
}

/// Running [`Stmt`]s on a pooled connection or in one of its transactions.
#[async_trait]
pub(crate) trait Sql: Sync {
    /// `sql` ready to run: prepared (`unnamed` false), or its types.
    async fn statement(&self, sql: &str, unnamed: bool) -> Result<Stmt, Error>;
    /// Its rows.
    async fn rows(&self, stmt: &Stmt, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error>;
    /// Its one row (an error otherwise).
    async fn row(&self, stmt: &Stmt, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error>;
    /// Its row, if any (an error for more than one).
    async fn row_opt(
        &self,
        stmt: &Stmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error>;
    /// The number of rows it changed.
    async fn exec(&self, stmt: &Stmt, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error>;

    // Statements run once: never tokio-postgres's own `query("…")`, whose
    // named statement lives as long as its rows (past a transaction's
    // end, through a transaction pooler).

    /// `sql`'s rows.
    async fn rows_of(
        &self,
        unnamed: bool,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        self.rows(&self.statement(sql, unnamed).await?, params).await
    }

    /// `sql`'s one row.
    async fn row_of(
        &self,
        unnamed: bool,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        self.row(&self.statement(sql, unnamed).await?, params).await
    }

    /// `sql`'s row, if any.
    async fn row_opt_of(
        &self,
        unnamed: bool,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        self.row_opt(&self.statement(sql, unnamed).await?, params).await
    }

    /// The number of rows `sql` changed.
    async fn exec_of(
        &self,
        unnamed: bool,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error> {
        self.exec(&self.statement(sql, unnamed).await?, params).await
    }
}

/// [`Sql`] for a type with tokio-postgres's query methods; `$describe`
/// learns a statement's types (a [`Stmt::Unnamed`]) on `$this`.
macro_rules! sql_for {
    ($type:ty, |$this:ident, $text:ident| $describe:expr) => {
        #[async_trait]
        impl Sql for $type {
            async fn statement(&self, sql: &str, unnamed: bool) -> Result<Stmt, Error> {
                if !unnamed {
                    return Ok(Stmt::Named(self.prepare_cached(sql).await?));
                }
                if let Some(known) = known(sql) {
                    return Ok(known);
                }
                let ($this, $text) = (self, sql);
                Ok($describe)
            }

            async fn rows(
                &self,
                stmt: &Stmt,
                params: &[&(dyn ToSql + Sync)],
            ) -> Result<Vec<Row>, Error> {
                match stmt {
                    Stmt::Named(statement) => self.query(statement, params).await,
                    Stmt::Unnamed { sql, types } => {
                        self.query_typed(sql, &typed(types, params)).await
                    }
                }
            }

            async fn row(&self, stmt: &Stmt, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
                match stmt {
                    Stmt::Named(statement) => self.query_one(statement, params).await,
                    Stmt::Unnamed { sql, types } => {
                        self.query_typed_one(sql, &typed(types, params)).await
                    }
                }
            }

            async fn row_opt(
                &self,
                stmt: &Stmt,
                params: &[&(dyn ToSql + Sync)],
            ) -> Result<Option<Row>, Error> {
                match stmt {
                    Stmt::Named(statement) => self.query_opt(statement, params).await,
                    Stmt::Unnamed { sql, types } => {
                        self.query_typed_opt(sql, &typed(types, params)).await
                    }
                }
            }

            async fn exec(
                &self,
                stmt: &Stmt,
                params: &[&(dyn ToSql + Sync)],
            ) -> Result<u64, Error> {
                match stmt {
                    Stmt::Named(statement) => self.execute(statement, params).await,
                    Stmt::Unnamed { sql, types } => {
                        self.execute_typed(sql, &typed(types, params)).await
                    }
                }
            }
        }
    };
}

// Outside a transaction, a statement is described inside one of its own,
// so that the name it is prepared under is closed on the same server
// connection (a transaction pooler keeps one for the transaction).
sql_for!(deadpool_postgres::Client, |client, sql| {
    // One at a time: two describes sent together on one connection would
    // share its transaction, and the first COMMIT would end it before the
    // second statement's Close (which would then reach another server
    // connection, leaving the statement's name taken on this one).
    let _alone = DESCRIBING.lock().await;
    client.batch_execute("BEGIN").await?;
    match client.prepare(sql).await {
        Ok(statement) => {
            let types_only = learnt(sql, &statement);
            // Its Close goes out now, before the transaction ends.
            drop(statement);
            client.batch_execute("COMMIT").await?;
            types_only
        }
        Err(error) => {
            client.batch_execute("ROLLBACK").await?;
            return Err(error);
        }
    }
});

// Its Close goes out as the statement is dropped, inside the transaction.
sql_for!(deadpool_postgres::Transaction<'_>, |tx, sql| learnt(sql, &tx.prepare(sql).await?));
