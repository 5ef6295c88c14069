//! What several of the server's test binaries share.

#![allow(clippy::unwrap_used, dead_code)] // Tests unwrap; each binary uses some.

/// A new, empty database on the PostgreSQL server of `TOLLGATE_PG_URL`,
/// as a URL; `None` without one (`tollgate_testkit::postgres_url`).
pub(crate) async fn postgres_database() -> Option<String> {
    let url = tollgate_testkit::postgres_url()?;
    let name = format!("tg_{}", tollgate_checkpoint::RunId::new().to_string().to_lowercase());
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    // postgres://user:password@host:port/DATABASE?options
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let (server, _) = base.rsplit_once('/').unwrap();
    let query = if query.is_empty() { String::new() } else { format!("?{query}") };
    Some(format!("{server}/{name}{query}"))
}
