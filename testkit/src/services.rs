//! Services a test needs from its environment.

/// The Postgres server a test should use: `TOLLGATE_PG_URL`
/// (`bash scripts/postgres` starts the machine's server and prints one).
/// `None` when it is not set, after a note on stderr that the test is
/// skipped; under `CI=true` a missing URL panics instead, so that CI never
/// passes without the tests that need the server.
///
/// ```
/// let Some(url) = tollgate_testkit::postgres_url() else { return };
/// assert!(url.starts_with("postgres"));
/// ```
pub fn postgres_url() -> Option<String> {
    match std::env::var("TOLLGATE_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("TOLLGATE_PG_URL is not set: CI must run the Postgres tests (bash scripts/postgres)")
        }
        _ => {
            eprintln!("skipped: TOLLGATE_PG_URL is not set (bash scripts/postgres prints one)");
            None
        }
    }
}
