//! Named crash points for crash tests.
//!
//! With the `failpoints` feature, `TOLLGATE_FAILPOINTS` lists points that
//! abort the process when reached: `commit:inside` aborts at the first hit,
//! `node:after@3` at the third. Without the feature the calls compile to
//! nothing.

/// Aborts the process if `name` is armed (feature `failpoints`).
#[doc(hidden)]
#[inline(always)]
pub fn __failpoint(name: &'static str) {
    #[cfg(feature = "failpoints")]
    armed::hit(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    /// Armed points and the hit that fires each (1 = first).
    fn points() -> &'static Mutex<HashMap<String, (u64, u64)>> {
        static POINTS: OnceLock<Mutex<HashMap<String, (u64, u64)>>> = OnceLock::new();
        POINTS.get_or_init(|| {
            let spec = std::env::var("TOLLGATE_FAILPOINTS").unwrap_or_default();
            let armed = spec
                .split(',')
                .filter(|entry| !entry.is_empty())
                .map(|entry| match entry.split_once('@') {
                    Some((name, nth)) => (name.to_owned(), (nth.parse().unwrap_or(1), 0)),
                    None => (entry.to_owned(), (1, 0)),
                })
                .collect();
            Mutex::new(armed)
        })
    }

    pub(super) fn hit(name: &str) {
        let mut points = points().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((fire_at, hits)) = points.get_mut(name) {
            *hits += 1;
            if *hits == *fire_at {
                eprintln!("failpoint {name} fired");
                std::process::abort();
            }
        }
    }
}
