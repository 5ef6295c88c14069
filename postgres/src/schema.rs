//! Bringing a database's schema to this build's version: the marker table,
//! the checks that refuse a newer or foreign schema, and the migrations of
//! `migrations.rs` applied in order under an advisory lock.

use tollgate_checkpoint::StoreError;

use crate::conn::client_error;
use crate::migrations::MIGRATIONS;
use crate::sql::Sql;

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The application name recorded in the marker table.
const APPLICATION: &str = "tollgate";

/// Advisory lock class of migrations (the object is the schema's hash), so
/// that processes opening one database at once migrate it once.
const MIGRATION_LOCK: i32 = 0x7467;

/// Brings the schema to [`SCHEMA_VERSION`] under a transaction-scoped
/// advisory lock. A schema of a newer tollgate, or one holding tables of
/// another application, is refused before anything is written.
pub(crate) async fn migrate(
    client: &mut deadpool_postgres::Client,
    schema: Option<&str>,
    unnamed: bool,
) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(client_error)?;
    tx.exec_of(
        unnamed,
        "SELECT pg_advisory_xact_lock($1, hashtext(coalesce($2, current_schema(), '')))",
        &[&MIGRATION_LOCK, &schema],
    )
    .await
    .map_err(client_error)?;
    if let Some(name) = schema {
        let exists = tx
            .row_opt_of(unnamed, "SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&name])
            .await
            .map_err(client_error)?;
        if exists.is_none() {
            // The name is a checked plain identifier (`checked_schema`).
            tx.batch_execute(&format!("CREATE SCHEMA \"{name}\"")).await.map_err(client_error)?;
        }
    }
    let found = found_version(&tx, unnamed).await?;
    if found < 0 {
        return Err(StoreError::ForeignDatabase { tables: format!("tollgate_schema {found}") });
    }
    if found > SCHEMA_VERSION {
        let (found, supported) = (found as u32, SCHEMA_VERSION as u32);
        return Err(StoreError::SchemaTooNew { found, supported });
    }
    if found == SCHEMA_VERSION {
        return tx.commit().await.map_err(client_error);
    }
    if found == 0 {
        tx.batch_execute(
            "CREATE TABLE tollgate_schema (
                 singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                 version     integer NOT NULL,
                 application text NOT NULL
             )",
        )
        .await
        .map_err(client_error)?;
    }
    for migration in &MIGRATIONS[found as usize..] {
        tx.batch_execute(migration).await.map_err(client_error)?;
    }
    tx.exec_of(
        unnamed,
        "INSERT INTO tollgate_schema (singleton, version, application) VALUES (true, $1, $2)
         ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version",
        &[&SCHEMA_VERSION, &APPLICATION],
    )
    .await
    .map_err(client_error)?;
    tracing::info!(from = found, to = SCHEMA_VERSION, "migrated the tollgate schema");
    tx.commit().await.map_err(client_error)
}

/// The schema version the database's marker table records (0 for an
/// empty schema). A marker of another application, or no marker beside
/// tables of another application, is a foreign database.
async fn found_version(tx: &impl Sql, unnamed: bool) -> Result<i32, StoreError> {
    let marker = tx
        .row_of(
            unnamed,
            "SELECT to_regclass(quote_ident(current_schema()) || '.tollgate_schema') IS NOT NULL",
            &[],
        )
        .await
        .map_err(client_error)?;
    if marker.get::<_, bool>(0) {
        let row = tx
            .row_of(unnamed, "SELECT version, application FROM tollgate_schema", &[])
            .await
            .map_err(client_error)?;
        let (version, application): (i32, String) = (row.get(0), row.get(1));
        if application != APPLICATION {
            return Err(StoreError::ForeignDatabase { tables: "tollgate_schema".into() });
        }
        return Ok(version);
    }
    let tables = tx
        .rows_of(
            unnamed,
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY table_name LIMIT 5",
            &[],
        )
        .await
        .map_err(client_error)?;
    if !tables.is_empty() {
        let names: Vec<String> = tables.iter().map(|row| row.get(0)).collect();
        return Err(StoreError::ForeignDatabase { tables: names.join(", ") });
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::{MIGRATIONS, SCHEMA_VERSION};
    use crate::{PostgresOptions, PostgresStore};

    /// A schema left at version 1 by an older build is brought to the
    /// current version at open, each later migration applied once.
    #[tokio::test]
    async fn an_older_schema_is_migrated_forward() {
        let Some(url) = tollgate_testkit::postgres_url() else { return };
        let (client, connection) =
            tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(connection);
        let schema = format!("t{}", ulid::Ulid::new().to_string().to_lowercase());
        let version_one = format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema};
             CREATE TABLE tollgate_schema (
                 singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                 version integer NOT NULL, application text NOT NULL);
             INSERT INTO tollgate_schema VALUES (true, 1, 'tollgate');
             {}",
            MIGRATIONS[0]
        );
        client.batch_execute(&version_one).await.expect("a version 1 schema");

        let options = PostgresOptions::default().with_schema(schema.clone());
        PostgresStore::connect_with(&url, options).await.expect("open and migrate");
        let version: i32 = client
            .query_one("SELECT version FROM tollgate_schema", &[])
            .await
            .expect("marker")
            .get(0);
        assert_eq!(version, SCHEMA_VERSION);
        let decide: Vec<i16> = client
            .query(
                "SELECT pronargs FROM pg_proc \
                 WHERE proname = 'tollgate_decide' AND pronamespace = $1::text::regnamespace",
                &[&schema],
            )
            .await
            .expect("functions")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(decide, [12], "the old decide replaced, not overloaded");
        let language: String = client
            .query_one(
                "SELECT l.lanname::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang \
                 WHERE p.proname = 'tollgate_insert_interrupts' \
                 AND p.pronamespace = $1::text::regnamespace",
                &[&schema],
            )
            .await
            .expect("the interrupts function")
            .get(0);
        assert_eq!(language, "plpgsql", "migration 8 applied");
        let watchers: i64 = client
            .query_one("SELECT count(*) FROM watchers", &[])
            .await
            .expect("the watchers table")
            .get(0);
        assert_eq!(watchers, 0);
    }
}
