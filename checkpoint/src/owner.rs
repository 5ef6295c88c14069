//! Who owns a running run: a process on a host, and whether it still lives.

use std::fmt;
use std::sync::OnceLock;

/// The process that owns a running run. Recorded with the run so another
/// process on the same host can tell at once that the owner died (its pid
/// is gone, or now belongs to a process started at another time) instead
/// of waiting for the lease to expire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// Host identity: host name and boot id (pids restart at every boot).
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Process start time in clock ticks since boot (0 when unknown).
    pub started: u64,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        CURRENT
            .get_or_init(|| {
                let pid = std::process::id();
                Owner { host: host_identity(), pid, started: process_start(pid).unwrap_or(0) }
            })
            .clone()
    }

    /// The stored form, `host|pid|started`.
    pub fn to_text(&self) -> String {
        format!("{}|{}|{}", self.host, self.pid, self.started)
    }

    /// Parses the stored form; `None` for text this version did not write.
    pub fn parse(text: &str) -> Option<Owner> {
        let mut parts = text.rsplitn(3, '|');
        let started = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let host = parts.next()?.to_owned();
        Some(Owner { host, pid, started })
    }

    /// `true` when the owner is a process of this host that no longer
    /// exists. `false` when it is alive, or on another host (then only the
    /// lease tells), or when this platform cannot tell.
    pub fn is_dead_here(&self) -> bool {
        if self.host != Owner::current().host || self.started == 0 {
            return false;
        }
        match process_start(self.pid) {
            None => std::path::Path::new("/proc/self/stat").exists(),
            Some(started) => started != self.started,
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} on {}", self.pid, self.host.split('|').next().unwrap_or(&self.host))
    }
}

fn host_identity() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|text| text.trim().to_owned());
    let name = read("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    match read("/proc/sys/kernel/random/boot_id") {
        Some(boot) => format!("{name}#{boot}"),
        None => name,
    }
}

/// Field 22 of `/proc/PID/stat`: the process start time. `None` when the
/// process does not exist, has ended and waits to be reaped (a zombie,
/// state `Z`, or `X`: it runs nothing any more), or the platform has no
/// procfs.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; the
    // fields after its closing parenthesis are plain.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_round_trips() {
        let me = Owner::current();
        assert!(me.started > 0, "procfs gives a start time on Linux");
        assert!(!me.is_dead_here());
        assert_eq!(Owner::parse(&me.to_text()), Some(me.clone()));
        let reused_pid = Owner { started: me.started + 1, ..me.clone() };
        assert!(reused_pid.is_dead_here(), "a pid now owned by another process is dead");
        let elsewhere = Owner { host: "other-host".into(), ..reused_pid };
        assert!(!elsewhere.is_dead_here(), "another host's owner is judged by its lease");
    }

    #[test]
    fn a_killed_child_not_yet_reaped_is_dead() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let pid = child.id();
        let started = process_start(pid).expect("a running child has a start time");
        let owner = Owner { host: Owner::current().host, pid, started };
        assert!(!owner.is_dead_here(), "running");
        child.kill().expect("kill");
        // Not reaped yet: a zombie until `wait`, which runs nothing.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !owner.is_dead_here() {
            assert!(std::time::Instant::now() < deadline, "a zombie counts as alive");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.wait().expect("wait");
    }

    #[test]
    fn a_finished_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        let started = process_start(pid);
        child.wait().expect("wait");
        if let Some(started) = started {
            let owner = Owner { host: Owner::current().host, pid, started };
            assert!(owner.is_dead_here());
        }
    }
}
