//! `sslmode` as libpq reads it, against the test server of
//! `scripts/postgres` (TLS on, a certificate of a test CA valid for
//! `localhost` and 127.0.0.1, client certificates of that CA asked for):
//! each mode connects or refuses as libpq does, and a refusal says which
//! mode refused what. What each connection is, is read off `pg_stat_ssl`
//! by a second, plain connection.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::PathBuf;

use tokio_postgres::NoTls;
use tollgate_checkpoint::StoreError;
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_testkit::postgres_url;

/// The folder of the test CA (`TOLLGATE_PG_TLS`); required under CI.
fn tls_dir() -> Option<PathBuf> {
    match std::env::var("TOLLGATE_PG_TLS") {
        Ok(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("TOLLGATE_PG_TLS is not set: CI must run the TLS tests (see scripts/postgres)")
        }
        _ => {
            eprintln!("skipped: TOLLGATE_PG_TLS is not set (scripts/postgres makes the test CA)");
            None
        }
    }
}

/// Whether the session named `name` is encrypted, and its client
/// certificate's subject.
async fn session(plain: &tokio_postgres::Client, name: &str) -> (bool, Option<String>) {
    let row = plain
        .query_one(
            "SELECT s.ssl, s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1 LIMIT 1",
            &[&name],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn sslmode_connects_or_refuses_as_libpq_does() {
    let (Some(url), Some(dir)) = (postgres_url(), tls_dir()) else { return };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let (plain, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(connection);
        // postgres://user:password@127.0.0.1:5432/db?sslmode=disable
        let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base).to_owned();
        let file = |name: &str| dir.join(name).display().to_string();
        let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
        let options = || PostgresOptions::default().with_schema("tls_test").with_pool_size(1);
        let connects = [
            ("tls_default", String::new(), true, None),
            ("tls_disable", "sslmode=disable".to_owned(), false, None),
            ("tls_prefer", "sslmode=prefer".to_owned(), true, None),
            ("tls_require", "sslmode=require".to_owned(), true, None),
            ("tls_verify_ca", format!("sslmode=verify-ca&sslrootcert={ca}"), true, None),
            ("tls_verify_full", format!("sslmode=verify-full&sslrootcert={ca}"), true, None),
            (
                "tls_client_cert",
                format!("sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}"),
                true,
                Some("/CN=tollgate-client".to_owned()),
            ),
        ];
        let mut stores = Vec::new();
        for (name, query, encrypted, client_dn) in connects {
            let at = format!("{base}?application_name={name}&{query}");
            let store = PostgresStore::connect_with(&at, options())
                .await
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!(session(&plain, name).await, (encrypted, client_dn), "{name}");
            stores.push(store);
        }

        // Refusals say which mode refused what.
        let refused = |query: String, host: &'static str| {
            let at = base.replacen("127.0.0.1", host, 1);
            async move { PostgresStore::connect_with(&format!("{at}?{query}"), options()).await }
        };
        // The Mozilla roots do not hold the test CA.
        let error = refused("sslmode=verify-full".into(), "127.0.0.1").await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
        let text = error.to_string();
        assert!(
            text.contains("sslmode=verify-full")
                && text.contains("does not verify against the roots"),
            "{text}"
        );
        // A host name the certificate does not list (reached at its
        // address): verify-full refuses, naming the host; verify-ca does not
        // look at names.
        let wrong = format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}");
        let error = refused(wrong, "db.invalid").await.unwrap_err();
        assert!(error.to_string().contains("not valid for host `db.invalid`"), "{error}");
        let names_ignored = format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={ca}");
        refused(names_ignored, "db.invalid").await.unwrap();
        // Files that do not read, and modes that do not exist.
        let error =
            refused("sslmode=verify-ca&sslrootcert=/nonexistent/ca.crt".into(), "127.0.0.1")
                .await
                .unwrap_err();
        assert!(matches!(error, StoreError::InvalidSettings { .. }), "{error:?}");
        assert!(error.to_string().contains("/nonexistent/ca.crt"), "{error}");
        let error = refused("sslmode=verify".into(), "127.0.0.1").await.unwrap_err();
        assert!(error.to_string().contains("sslmode `verify` is not one of"), "{error}");
        drop(stores);
        plain.batch_execute("DROP SCHEMA IF EXISTS tls_test CASCADE").await.unwrap();
    });
}
