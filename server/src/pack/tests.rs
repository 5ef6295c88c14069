//! The pack format against every kind of bad input.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::json;

use super::read::{read, read_within};
use super::*;

/// A blueprint folder: the blueprint, its replies, a program.
fn folder(dir: &Path) {
    std::fs::write(
        dir.join("hello.json"),
        json!({"name": "hello", "version": 3, "model": "scripted:replies.json"}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("replies.json"), r#"[{"text": "Hello!"}]"#).unwrap();
    std::fs::create_dir(dir.join("bin")).unwrap();
    std::fs::write(dir.join("bin/tool.sh"), "#!/bin/sh\necho '{}'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("bin/tool.sh"), std::fs::Permissions::from_mode(0o755))
        .unwrap();
    std::fs::write(dir.join(".hidden"), "left out").unwrap();
}

struct Setup {
    _dir: tempfile::TempDir,
    bytes: Vec<u8>,
    trusted: TrustedKeys,
    alice: SigningKeyFile,
    bob: SigningKeyFile,
    source: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("hello");
    std::fs::create_dir(&source).unwrap();
    folder(&source);
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    generate(&keys.join("alice")).unwrap();
    generate(&dir.path().join("bob")).unwrap();
    let alice = SigningKeyFile::load(&keys.join("alice")).unwrap();
    let bob = SigningKeyFile::load(&dir.path().join("bob")).unwrap();
    let bytes = build(&source, None, Some(&alice)).unwrap().to_bytes().unwrap();
    let trusted = TrustedKeys::load(&[keys]).unwrap();
    Setup { _dir: dir, bytes, trusted, alice, bob, source }
}

fn refused(bytes: &[u8], trusted: &TrustedKeys) -> Option<PackError> {
    read(bytes, "test.tgpack").and_then(|pack| pack.verify(trusted, false)).err()
}

#[test]
fn a_pack_round_trips_and_builds_to_the_same_bytes() {
    let setup = setup();
    let again = build(&setup.source, None, Some(&setup.alice)).unwrap().to_bytes().unwrap();
    assert_eq!(again, setup.bytes, "the same folder gives the same bytes");
    let pack = read(&setup.bytes, "p").unwrap();
    let verified = pack.verify(&setup.trusted, false).unwrap();
    assert!(verified.signature_verified);
    assert_eq!(verified.bundle_hash, hex(&sha256(&pack.manifest_bytes)));
    assert_eq!((pack.manifest.name.as_str(), pack.manifest.blueprint_version), ("hello", 3));
    let paths: Vec<(&str, bool)> =
        pack.manifest.files.iter().map(|f| (f.path.as_str(), f.executable)).collect();
    assert_eq!(paths, [("bin/tool.sh", true), ("hello.json", false), ("replies.json", false)]);
    // Unsigned: the same content, the same bundle hash.
    let unsigned = build(&setup.source, None, None).unwrap();
    assert_eq!(unsigned.bundle_hash(), pack.bundle_hash());
    assert!(matches!(unsigned.verify(&setup.trusted, false), Err(PackError::Unsigned)));
    assert!(!unsigned.verify(&setup.trusted, true).unwrap().signature_verified);
    // A changed file changes the hash.
    std::fs::write(setup.source.join("replies.json"), r#"[{"text": "Bye!"}]"#).unwrap();
    assert_ne!(build(&setup.source, None, None).unwrap().bundle_hash(), pack.bundle_hash());
}

#[test]
fn every_flipped_byte_is_refused() {
    let setup = setup();
    assert!(refused(&setup.bytes, &setup.trusted).is_none());
    let mut kinds = std::collections::BTreeMap::new();
    for at in 0..setup.bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bytes = setup.bytes.clone();
            bytes[at] ^= bit;
            let error = refused(&bytes, &setup.trusted)
                .unwrap_or_else(|| panic!("flipping bit {bit:#x} of byte {at} went unnoticed"));
            let kind = format!("{error:?}");
            *kinds.entry(kind.split([' ', '{', '(']).next().unwrap().to_owned()).or_insert(0) += 1;
        }
    }
    // Each layer catches some: tar's checksum, the canonical form, the
    // manifest's hashes, the signature.
    for expected in ["NotAPack", "NotCanonical", "Mismatch", "BadManifest", "BadSignature"] {
        assert!(kinds.contains_key(expected), "{kinds:?}");
    }
}

#[test]
fn a_signature_by_another_key_is_refused_even_under_a_trusted_key_id() {
    let setup = setup();
    let mut pack = read(&setup.bytes, "p").unwrap();
    // Signed by bob: not trusted.
    pack.signature = Some(setup.bob.sign(&signed_message(&pack.bundle_hash)));
    let by_bob = pack.to_bytes().unwrap();
    assert!(matches!(refused(&by_bob, &setup.trusted), Some(PackError::UnknownKey { .. })));
    // Allowed to run unverified, but never called verified.
    let unverified = read(&by_bob, "p").unwrap().verify(&setup.trusted, true).unwrap();
    assert!(!unverified.signature_verified);
    // Bob's signature presented under alice's id and key: invalid, even
    // with --allow-unsigned.
    let alice = setup.alice.sign(&signed_message(&pack.bundle_hash));
    let bob = setup.bob.sign(&signed_message(&pack.bundle_hash));
    pack.signature = Some(SignatureDoc { signature: bob.signature.clone(), ..alice.clone() });
    let forged = pack.to_bytes().unwrap();
    assert!(matches!(read(&forged, "p"), Err(PackError::BadSignature { .. })));
    // Bob's whole signature entry under alice's id: bob's key is not the
    // one trusted under that id.
    pack.signature = Some(SignatureDoc { key_id: alice.key_id.clone(), ..bob });
    let renamed = pack.to_bytes().unwrap();
    assert!(matches!(read(&renamed, "p"), Err(PackError::BadSignature { .. })));
}

/// A tar archive with raw entries: any name, type and mode.
fn raw(entries: &[(&[u8], tar::EntryType, &[u8], u32)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, kind, data, mode) in entries {
        let mut header = tar::Header::new_ustar();
        let field = &mut header.as_old_mut().name;
        field.fill(0);
        field[..name.len()].copy_from_slice(name);
        header.set_size(data.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(*kind);
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            header.set_link_name("hello.json").unwrap();
        }
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

/// A pack of these files with a manifest that matches them.
fn with_manifest(files: &[(&str, &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let manifest = Manifest {
        format: "tgpack".into(),
        version: 1,
        blueprint: files[0].0.into(),
        name: "x".into(),
        blueprint_version: 1,
        files: files
            .iter()
            .map(|(path, data)| FileEntry {
                path: (*path).into(),
                size: data.len() as u64,
                sha256: hex(&sha256(data)),
                executable: false,
            })
            .collect(),
    };
    let mut out = vec![(MANIFEST.as_bytes().to_vec(), serde_json::to_vec(&manifest).unwrap())];
    out.extend(files.iter().map(|(path, data)| (path.as_bytes().to_vec(), data.to_vec())));
    out
}

fn archive(entries: &[(Vec<u8>, Vec<u8>)], kind_of: impl Fn(usize) -> tar::EntryType) -> Vec<u8> {
    let raw_entries: Vec<(&[u8], tar::EntryType, &[u8], u32)> = entries
        .iter()
        .enumerate()
        .map(|(index, (name, data))| (name.as_slice(), kind_of(index), data.as_slice(), 0o644))
        .collect();
    raw(&raw_entries)
}

#[test]
fn unsafe_entries_are_refused_by_name() {
    let bp: &[u8] = br#"{"name": "x", "model": "scripted:r.json"}"#;
    let regular = |_| tar::EntryType::Regular;
    for (name, expected) in [
        ("../escape.json", "UnsafePath"),
        ("/etc/passwd", "UnsafePath"),
        ("a/../../b", "UnsafePath"),
        ("a//b", "UnsafePath"),
        ("./x", "UnsafePath"),
    ] {
        let bytes = archive(&with_manifest(&[("bp.json", bp), (name, b"x")]), regular);
        let error = read(&bytes, "p").unwrap_err();
        assert!(format!("{error:?}").starts_with(expected), "{name}: {error:?}");
    }
    // A name with control characters cannot forge a line on the terminal.
    let forged = "x\r\x1b[2Kpack verified: OK\n";
    let bytes = archive(&with_manifest(&[("bp.json", bp), (forged, b"x")]), regular);
    let printed = match read(&bytes, "p") {
        Err(error) => error.to_string(),
        Ok(_) => panic!("a name with control characters was accepted"),
    };
    assert!(!printed.chars().any(char::is_control), "{printed:?}");
    assert!(printed.contains("\\u{1b}"), "{printed}");
    for (kind, expected) in [
        (tar::EntryType::Symlink, "symbolic link"),
        (tar::EntryType::Link, "hard link"),
        (tar::EntryType::Directory, "directory"),
        (tar::EntryType::Fifo, "entry of type"),
    ] {
        let bytes = archive(&with_manifest(&[("bp.json", bp), ("other", b"")]), |index| {
            if index == 2 {
                kind
            } else {
                tar::EntryType::Regular
            }
        });
        match read(&bytes, "p").unwrap_err() {
            PackError::NotAFile { kind, .. } => assert!(kind.starts_with(expected), "{kind}"),
            other => panic!("{other:?}"),
        }
    }
    let mut twice = with_manifest(&[("bp.json", bp), ("a", b"1")]);
    twice.push((b"a".to_vec(), b"1".to_vec()));
    assert!(matches!(read(&archive(&twice, regular), "p"), Err(PackError::Duplicate { .. })));
    // The manifest must come first.
    let mut swapped = with_manifest(&[("bp.json", bp)]);
    swapped.swap(0, 1);
    assert!(matches!(read(&archive(&swapped, regular), "p"), Err(PackError::NoManifest)));
}

#[test]
fn sizes_over_the_limits_are_refused_before_they_are_read() {
    let bp: &[u8] = br#"{"name": "x", "model": "scripted:r.json"}"#;
    let small = Limits { entry: 64, total: 100, entries: 3 };
    let big = vec![b'x'; 65];
    let bytes =
        archive(&with_manifest(&[("bp.json", bp), ("big", &big)]), |_| tar::EntryType::Regular);
    assert!(matches!(read_within(&bytes, "p", small), Err(PackError::TooLarge { .. })));
    let part = vec![b'x'; 40];
    let bytes = archive(&with_manifest(&[("bp.json", &part), ("a", &part), ("b", &part)]), |_| {
        tar::EntryType::Regular
    });
    let error = read_within(&bytes, "p", Limits { entry: 1_000, ..small }).unwrap_err();
    assert!(
        matches!(error, PackError::TooLarge { .. } | PackError::TooManyEntries { .. }),
        "{error:?}"
    );
    // A header that claims a huge size, with nothing behind it.
    let mut claims = archive(&with_manifest(&[("bp.json", bp)]), |_| tar::EntryType::Regular);
    let mut header = tar::Header::new_ustar();
    header.set_path("bomb").unwrap();
    header.set_size(1 << 40);
    header.set_mode(0o644);
    header.set_cksum();
    let end = claims.len() - 1024;
    claims.splice(end..end, header.as_bytes().iter().copied());
    let error = read(&claims, "p").unwrap_err();
    assert!(matches!(error, PackError::TooLarge { size, .. } if size == 1 << 40), "{error:?}");
}

#[test]
fn truncated_empty_and_foreign_files_are_refused() {
    let setup = setup();
    for cut in [
        0,
        100,
        511,
        512,
        1024,
        setup.bytes.len() / 2,
        setup.bytes.len() - 1024,
        setup.bytes.len() - 1,
    ] {
        let error = refused(&setup.bytes[..cut], &setup.trusted).unwrap();
        assert!(
            matches!(
                error,
                PackError::Truncated { .. }
                    | PackError::NotAPack { .. }
                    | PackError::NotCanonical
                    | PackError::Mismatch { .. }
            ),
            "cut at {cut}: {error:?}"
        );
    }
    assert!(matches!(read(b"", "p"), Err(PackError::NotAPack { .. })));
    assert!(matches!(read(&[7u8; 4096], "p"), Err(PackError::NotAPack { .. })));
    let text = "not a pack at all\n".repeat(200);
    assert!(matches!(read(text.as_bytes(), "p"), Err(PackError::NotAPack { .. })));
}

#[test]
fn build_refuses_symlinks_invalid_blueprints_and_reserved_names() {
    let setup = setup();
    std::os::unix::fs::symlink("/etc/passwd", setup.source.join("link")).unwrap();
    assert!(matches!(build(&setup.source, None, None), Err(PackError::NotAFile { .. })));
    std::fs::remove_file(setup.source.join("link")).unwrap();
    std::fs::write(setup.source.join("hello.json"), r#"{"name": "hello"}"#).unwrap();
    let error = build(&setup.source, None, None).unwrap_err();
    assert!(error.to_string().contains("invalid"), "{error}");
    assert!(matches!(build(&setup.source, Some("missing.json"), None), Err(PackError::Build(_))));
}
