//! Signed blueprint packs through the real binary: keys, build, inspect,
//! verify, running a pack (verified, cached, announced in the events),
//! continuing one after a crash, and every kind of bad pack refused with
//! nothing run and nothing written.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A folder with keys, a blueprint folder, a cache and a database path.
struct Packs {
    dir: tempfile::TempDir,
}

impl Packs {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("refunds");
        std::fs::create_dir(&source).unwrap();
        std::fs::write(
            source.join("refund.sh"),
            "read args\necho \"refunding $args\" >&2\necho '{\"refunded\": true}'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(source.join("refund.sh"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        let replies = json!([
            {"tool_calls": [{"name": "lookup_order", "args": {"id": 7}}]},
            {"tool_calls": [{"name": "issue_refund", "args": {"id": 7}}]},
            {"text": "Refunded 20 EUR for order 7."}
        ]);
        std::fs::write(source.join("replies.json"), replies.to_string()).unwrap();
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
        let blueprint = json!({
            "name": "refunds", "version": 4, "model": "scripted:replies.json",
            "tools": [
                {"name": "lookup_order", "description": "Find an order", "parameters": schema,
                 "fixture": {"id": 7, "amount": 20}},
                {"name": "issue_refund", "description": "Refund an order", "parameters": schema,
                 "command": ["/bin/sh", "refund.sh"], "approval": true}
            ]
        });
        std::fs::write(source.join("refunds.json"), blueprint.to_string()).unwrap();
        std::fs::create_dir(dir.path().join("trusted")).unwrap();
        let packs = Self { dir };
        packs.ok(&["pack", "keygen", "--out", "keys/alice"]);
        packs.ok(&["pack", "keygen", "--out", "keys/bob"]);
        std::fs::copy(packs.path("keys/alice.pub"), packs.path("trusted/alice.pub")).unwrap();
        packs
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        std::fs::create_dir_all(self.path("keys")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command
            .arg("--db")
            .arg(self.path("runs.db"))
            .args(args)
            .current_dir(self.dir.path())
            .env("TOLLGATE_PACK_CACHE", self.path("cache"))
            .env_remove("TOLLGATE_TRUSTED_KEYS")
            .env_remove("TOLLGATE_DB");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `args`, expecting exit `code`; stdout.
    fn expect(&self, args: &[&str], code: i32) -> String {
        let output = self.run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        self.expect(args, 0)
    }

    fn json(&self, args: &[&str], code: i32) -> Value {
        serde_json::from_str(self.expect(args, code).trim()).unwrap()
    }

    /// Builds the refunds folder into `name`, signed by `key` if given.
    fn build(&self, name: &str, key: Option<&str>) -> Value {
        let mut args = vec!["pack", "build", "refunds", "--out", name, "--json"];
        if let Some(key) = key {
            args.extend(["--sign", key]);
        }
        self.json(&args, 0)
    }

    fn events(&self, run: &str) -> Vec<Value> {
        self.ok(&["runs", "events", run, "--json"])
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Every file under the folder but the cache, the keys and the
    /// sources (what a refused run must leave as it was).
    fn outside_cache(&self) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name != "cache" {
                found.push(name);
            }
        }
        found.sort();
        found
    }
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_writes_a_key_pair_the_private_half_for_its_owner_only() {
    let packs = Packs::new();
    let said = packs.ok(&["pack", "keygen", "--out", "keys/carol"]);
    let id = said.trim().rsplit(' ').next().unwrap().to_owned();
    assert_eq!(id.len(), 16, "{said}");
    assert_eq!(mode(&packs.path("keys/carol")), 0o600);
    let public = std::fs::read_to_string(packs.path("keys/carol.pub")).unwrap();
    assert!(
        public.starts_with("tollgate-ed25519-public-v1 ") && public.trim().ends_with(&id),
        "{public}"
    );
    // The key id is the fingerprint of the public key.
    let key_hex = public.split_whitespace().nth(1).unwrap();
    let key: Vec<u8> =
        (0..32).map(|i| u8::from_str_radix(&key_hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    let digest = Sha256::digest(&key);
    let fingerprint: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    assert_eq!(fingerprint, id);
    // Never overwritten.
    let before = std::fs::read(packs.path("keys/carol")).unwrap();
    let again = packs.run(&["pack", "keygen", "--out", "keys/carol"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwritten"));
    assert_eq!(std::fs::read(packs.path("keys/carol")).unwrap(), before);
    // A private key others can read is not used.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(packs.path("keys/carol"), std::fs::Permissions::from_mode(0o644))
        .unwrap();
    let refused =
        packs.run(&["pack", "build", "refunds", "--out", "x.tgpack", "--sign", "keys/carol"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("chmod 600"));
    assert!(!packs.path("x.tgpack").exists());
}

#[test]
fn build_inspect_and_verify() {
    let packs = Packs::new();
    let built = packs.build("one.tgpack", Some("keys/alice"));
    packs.build("two.tgpack", Some("keys/alice"));
    assert_eq!(
        std::fs::read(packs.path("one.tgpack")).unwrap(),
        std::fs::read(packs.path("two.tgpack")).unwrap(),
        "the same folder gives the same bytes"
    );
    assert_eq!(
        (built["signed"].clone(), built["entries"].clone(), built["version"].clone()),
        (json!(true), json!(3), json!(4))
    );
    let inspected = packs.json(&["pack", "inspect", "one.tgpack", "--json"], 0);
    assert_eq!(inspected["bundle_hash"], built["bundle_hash"]);
    assert_eq!(inspected["key_id"], built["key_id"]);
    assert_eq!(
        (inspected["name"].as_str(), inspected["version"].as_u64()),
        (Some("refunds"), Some(4))
    );
    let entries: Vec<&str> = inspected["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(entries, ["refund.sh", "refunds.json", "replies.json"]);
    let text = packs.ok(&["pack", "inspect", "one.tgpack"]);
    assert!(
        text.contains("refund.sh") && text.contains(built["bundle_hash"].as_str().unwrap()),
        "{text}"
    );
    // Verified against the trusted folder, by flag or environment.
    let verified =
        packs.json(&["pack", "verify", "one.tgpack", "--trusted-keys", "trusted", "--json"], 0);
    assert_eq!(verified["signature_verified"], true);
    let by_env = packs
        .command(&["pack", "verify", "one.tgpack"])
        .env("TOLLGATE_TRUSTED_KEYS", packs.path("trusted"))
        .output()
        .unwrap();
    assert_eq!(by_env.status.code(), Some(0));
    // Not without trusted keys, not for another key, not unsigned.
    packs.expect(&["pack", "verify", "one.tgpack"], 2);
    packs.build("bob.tgpack", Some("keys/bob"));
    packs.expect(&["pack", "verify", "bob.tgpack", "--trusted-keys", "trusted"], 2);
    let unsigned = packs.build("plain.tgpack", None);
    assert_eq!(unsigned["signed"], false);
    assert_eq!(
        unsigned["bundle_hash"], built["bundle_hash"],
        "the hash covers the content, not the signature"
    );
    packs.expect(&["pack", "verify", "plain.tgpack", "--trusted-keys", "trusted"], 2);
}

#[test]
fn a_pack_runs_verified_from_its_cache_and_says_so_in_its_events() {
    let packs = Packs::new();
    let built = packs.build("refunds.tgpack", Some("keys/alice"));
    let hash = built["bundle_hash"].as_str().unwrap();
    // Only verified: nothing run, nothing extracted, no database.
    let report = packs.json(
        &["run", "refunds.tgpack", "--trusted-keys", "trusted", "--dry-run-verify", "--json"],
        0,
    );
    assert_eq!(
        report,
        json!({"bundle_hash": hash, "signature_verified": true, "key_id": built["key_id"], "cache_hit": false, "dry_run_verify": true, "name": "refunds", "version": 4})
    );
    assert!(!packs.path("runs.db").exists() && !packs.path("cache").exists());

    let first = packs.json(
        &["run", "refunds.tgpack", "--trusted-keys", "trusted", "--input", "Refund 7", "--json"],
        10,
    );
    let run = first["id"].as_str().unwrap();
    let events = packs.events(run);
    assert_eq!(events[0]["event_type"], "run_started");
    assert_eq!(events[1]["event_type"], "pack_run", "pack_run comes right after run_started");
    assert_eq!(
        (
            events[1]["bundle_hash"].as_str(),
            events[1]["signature_verified"].as_bool(),
            events[1]["cache_hit"].as_bool(),
            events[1]["dry_run_verify"].as_bool()
        ),
        (Some(hash), Some(true), Some(false), Some(false))
    );
    assert_eq!(events[1]["key_id"], built["key_id"]);
    let entry = packs.path("cache").join(hash);
    let script = entry.join("refund.sh");
    assert_eq!(mode(&script), 0o755);
    let extracted_at = std::fs::metadata(&script).unwrap().modified().unwrap();

    // Again: a cache hit, nothing extracted.
    std::thread::sleep(Duration::from_millis(20));
    let second = packs.json(
        &["run", "refunds.tgpack", "--trusted-keys", "trusted", "--input", "Refund 7", "--json"],
        10,
    );
    let events = packs.events(second["id"].as_str().unwrap());
    assert_eq!(events[1]["cache_hit"], true);
    assert_eq!(std::fs::metadata(&script).unwrap().modified().unwrap(), extracted_at);

    // What a run's program wrote into the pack's folder is not the pack's:
    // the pack still verifies, and extracting it again keeps the file.
    let saved = entry.join("saved-by-a-tool.json");
    std::fs::write(&saved, "{\"notes\": 1}").unwrap();
    let kept = packs.json(
        &["run", "refunds.tgpack", "--trusted-keys", "trusted", "--input", "Refund 7", "--json"],
        10,
    );
    assert_eq!(packs.events(kept["id"].as_str().unwrap())[1]["cache_hit"], true);

    // A cache entry changed on disk is noticed and extracted again.
    std::fs::write(&script, "echo '{\"refunded\": \"twice\"}'\n").unwrap();
    let third = packs.json(
        &["run", "refunds.tgpack", "--trusted-keys", "trusted", "--input", "Refund 7", "--json"],
        10,
    );
    let events = packs.events(third["id"].as_str().unwrap());
    assert_eq!(events[1]["cache_hit"], false);
    assert!(std::fs::read_to_string(&script).unwrap().starts_with("read args"));
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), "{\"notes\": 1}", "the run's file stays");

    // Approving runs the verified program; the next leg says which bundle.
    let done = packs.json(&["runs", "resume", run, "--approve", "--json"], 0);
    assert_eq!(done["status"], "completed");
    let legs: Vec<Value> =
        packs.events(run).into_iter().filter(|e| e["event_type"] == "pack_run").collect();
    assert_eq!(legs.len(), 2, "one pack_run per leg");
    assert_eq!(
        (legs[1]["bundle_hash"].as_str(), legs[1]["cache_hit"].as_bool()),
        (Some(hash), Some(true))
    );

    // Unsigned: refused unless allowed, then run unverified.
    packs.build("plain.tgpack", None);
    packs.expect(&["run", "plain.tgpack", "--trusted-keys", "trusted", "--input", "x"], 2);
    let allowed =
        packs.json(&["run", "plain.tgpack", "--allow-unsigned", "--input", "x", "--json"], 10);
    let events = packs.events(allowed["id"].as_str().unwrap());
    assert_eq!(
        (events[1]["signature_verified"].as_bool(), events[1].get("key_id")),
        (Some(false), None)
    );
    // A pack cannot be queued for workers elsewhere.
    packs.expect(&["run", "refunds.tgpack", "--trusted-keys", "trusted", "--queue"], 2);
}

#[test]
fn a_crashed_pack_run_continues_on_the_same_verified_bundle_and_not_on_a_changed_one() {
    let packs = Packs::new();
    // The refund hangs the first time (the process is killed in it).
    let marker = packs.path("hung-once");
    let script = format!("read args\nif [ ! -e '{m}' ]; then touch '{m}'; sleep 60; fi\necho '{{\"refunded\": true}}'\n", m = marker.display());
    std::fs::write(packs.path("refunds/refund.sh"), script).unwrap();
    let mut blueprint: Value =
        serde_json::from_str(&std::fs::read_to_string(packs.path("refunds/refunds.json")).unwrap())
            .unwrap();
    blueprint["tools"][1]["approval"] = json!(false);
    std::fs::write(packs.path("refunds/refunds.json"), blueprint.to_string()).unwrap();
    let built = packs.build("refunds.tgpack", Some("keys/alice"));
    let child = packs
        .command(&[
            "run",
            "refunds.tgpack",
            "--trusted-keys",
            "trusted",
            "--input",
            "Refund 7",
            "--json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed if the wait below fails, too.
    let mut child = Killed(child);
    let started = Instant::now();
    while !marker.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "the refund never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let listed = packs.json(&["runs", "list", "--json"], 0);
    let run = listed["runs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed["runs"][0]["status"], "running");

    // The extracted bundle was changed meanwhile: refused, nothing run.
    let entry = packs.path("cache").join(built["bundle_hash"].as_str().unwrap());
    let original = std::fs::read(entry.join("refund.sh")).unwrap();
    std::fs::write(entry.join("refund.sh"), "echo '{\"refunded\": \"elsewhere\"}'\n").unwrap();
    let refused = packs.run(&["runs", "continue", &run]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("changed on disk"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(packs.json(&["runs", "show", &run, "--json"], 0)["status"], "running");

    // Restored (the same bytes): continued to the end on that bundle.
    std::fs::write(entry.join("refund.sh"), original).unwrap();
    let done = packs.json(&["runs", "continue", &run, "--json"], 0);
    assert_eq!(done["status"], "completed");
    let events = packs.events(&run);
    let starts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["event_type"] == "run_started")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2);
    for start in starts {
        assert_eq!(events[start + 1]["event_type"], "pack_run");
        assert_eq!(events[start + 1]["bundle_hash"], built["bundle_hash"]);
    }
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gap-free across the crash");
}

/// A tar archive with raw entries, as an attacker would write it.
fn crafted(entries: &[(&str, tar::EntryType, &[u8])], manifest: Option<String>) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut all: Vec<(String, tar::EntryType, Vec<u8>)> = Vec::new();
    if let Some(manifest) = manifest {
        all.push(("tgpack.json".into(), tar::EntryType::Regular, manifest.into_bytes()));
    }
    all.extend(entries.iter().map(|(name, kind, data)| ((*name).to_owned(), *kind, data.to_vec())));
    for (name, kind, data) in all {
        let mut header = tar::Header::new_ustar();
        let field = &mut header.as_old_mut().name;
        field.fill(0);
        field[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(kind);
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            header.set_link_name("/etc/passwd").unwrap();
        }
        header.set_cksum();
        builder.append(&header, data.as_slice()).unwrap();
    }
    builder.into_inner().unwrap()
}

/// The manifest `pack build` would write for these files (its fields in
/// their order).
fn manifest_of(blueprint: &str, files: &[(&str, &[u8])]) -> String {
    let files: Vec<String> = files
        .iter()
        .map(|(path, data)| {
            let sha: String = Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect();
            format!(
                r#"{{"path":"{path}","size":{},"sha256":"{sha}","executable":false}}"#,
                data.len()
            )
        })
        .collect();
    format!(
        r#"{{"format":"tgpack","version":1,"blueprint":"{blueprint}","name":"x","blueprint_version":1,"files":[{}]}}"#,
        files.join(",")
    )
}

#[test]
fn bad_packs_are_refused_with_nothing_run_and_nothing_written() {
    let packs = Packs::new();
    packs.build("good.tgpack", Some("keys/alice"));
    packs.build("bob.tgpack", Some("keys/bob"));
    let good = std::fs::read(packs.path("good.tgpack")).unwrap();
    let mut bad: Vec<(String, Vec<u8>, &str)> = Vec::new();
    for at in [
        10,
        300,
        600,
        700,
        1100,
        1600,
        2100,
        good.len() - 1500,
        good.len() - 1200,
        good.len() - 700,
        good.len() - 10,
    ] {
        let mut flipped = good.clone();
        flipped[at] ^= 0x04;
        bad.push((format!("flip-{at}"), flipped, ""));
    }
    bad.push((
        "bob".into(),
        std::fs::read(packs.path("bob.tgpack")).unwrap(),
        "not among the trusted keys",
    ));
    bad.push(("truncated".into(), good[..good.len() - 1024].to_vec(), ""));
    bad.push(("cut".into(), good[..good.len() / 2 + 7].to_vec(), "cut short"));
    bad.push(("empty".into(), Vec::new(), "not a tollgate pack"));
    bad.push(("text".into(), "hello\n".repeat(300).into_bytes(), "not a tollgate pack"));
    let bp: &[u8] = br#"{"name": "x", "model": "scripted:r.json"}"#;
    let r: &[u8] = br#"[{"text": "hi"}]"#;
    let files = [("bp.json", bp), ("r.json", r)];
    let regular = tar::EntryType::Regular;
    for (name, path, kind, message) in [
        ("dotdot", "../escape", regular, "not a plain relative path"),
        ("absolute", "/tmp/escape", regular, "not a plain relative path"),
        ("symlink", "link", tar::EntryType::Symlink, "symbolic link"),
        ("hardlink", "link", tar::EntryType::Link, "hard link"),
        ("duplicate", "r.json", regular, "appears twice"),
    ] {
        let mut entries: Vec<(&str, tar::EntryType, &[u8])> =
            files.iter().map(|(p, d)| (*p, regular, *d)).collect();
        entries.push((path, kind, r));
        bad.push((name.into(), crafted(&entries, Some(manifest_of("bp.json", &files))), message));
    }
    // An entry claiming more than the limit (an archive bomb).
    let mut bomb = crafted(
        &[("bp.json", regular, bp), ("r.json", regular, r)],
        Some(manifest_of("bp.json", &files)),
    );
    let mut header = tar::Header::new_ustar();
    header.set_path("bomb").unwrap();
    header.set_size(1 << 34);
    header.set_mode(0o644);
    header.set_cksum();
    let end = bomb.len() - 1024;
    bomb.splice(end..end, header.as_bytes().iter().copied());
    bad.push(("bomb".into(), bomb, "over the limit"));
    // A well-formed pack whose blueprint is invalid.
    let invalid: &[u8] = br#"{"name": "x"}"#;
    let files = [("bp.json", invalid)];
    bad.push((
        "invalid-blueprint".into(),
        crafted(&[("bp.json", regular, invalid)], Some(manifest_of("bp.json", &files))),
        "model",
    ));

    for (name, bytes, message) in bad {
        let file = format!("{name}.tgpack");
        std::fs::write(packs.path(&file), &bytes).unwrap();
        let before = packs.outside_cache();
        let cache_before = std::fs::read_dir(packs.path("cache")).map(|d| d.count()).unwrap_or(0);
        // The strictest test: unsigned packs allowed (a pack by an untrusted
        // key is then allowed too, so bob's is tried without).
        let mut args = vec!["run", file.as_str(), "--trusted-keys", "trusted", "--input", "x"];
        if name != "bob" {
            args.push("--allow-unsigned");
        }
        let output = packs.run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(message), "{name}: {stderr}");
        assert!(!packs.path("runs.db").exists(), "{name}: a database was created");
        assert_eq!(packs.outside_cache(), before, "{name}: something was written");
        let cache_after = std::fs::read_dir(packs.path("cache")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(cache_after, cache_before, "{name}: the cache kept something");
        if name != "bob" && name != "invalid-blueprint" {
            packs.expect(&["pack", "inspect", &file], 2);
        }
        packs.expect(&["pack", "verify", &file, "--trusted-keys", "trusted"], 2);
    }
}

/// A child killed and reaped when dropped (on a failing assertion too).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
