//! tprof runs as root: what it writes must belong to the user who ran sudo,
//! and no path a user controls may turn its writes against the system (a
//! symlink or hard link at the output path, a FIFO, an existing file, a
//! directory another user planted in /tmp).

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Output;

use tprof_tests::{
    Running, build_workload, record_command, report_json, require_root, show, tprof,
};

/// The overflow user and group on Debian.
const NOBODY: u32 = 65534;

const PRECIOUS: &str = "precious contents\n";

/// `tprof record -o OUT EXTRA -- busy_threads 2 0.3`, with `env` added.
fn record(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let busy = build_workload("busy_threads");
    let mut cmd = record_command(out, extra, &[busy.to_str().unwrap(), "2", "0.3"]);
    cmd.envs(env.iter().copied());
    Running::spawn(&mut cmd)
        .wait(std::time::Duration::from_mins(2))
        .into_output()
}

fn refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a refusal: {}", show(out));
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {}", show(out)));
    assert!(line.contains(needle), "{needle:?} not in {line:?}");
    assert!(!err.contains("panicked"), "{}", show(out));
}

/// Under sudo (SUDO_UID/SUDO_GID set) the recording and both flamegraphs
/// belong to the invoking user, and so does a later `tprof flamegraph`.
#[test]
fn outputs_belong_to_the_sudo_user() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let nobody = NOBODY.to_string();
    let env = [("SUDO_UID", nobody.as_str()), ("SUDO_GID", nobody.as_str())];
    let out = record(&recording, &["--no-report"], &env);
    assert!(out.status.success(), "{}", show(&out));
    let diff = dir.path().join("offcpu.svg");
    let flame = tprof()
        .arg("flamegraph")
        .arg(&recording)
        .args(["--kind", "offcpu", "-o"])
        .arg(&diff)
        .envs(env)
        .output()
        .expect("run tprof flamegraph");
    assert!(flame.status.success(), "{}", show(&flame));
    let svgs = ["recording.tprof.cpu.svg", "recording.tprof.wall.svg"];
    for path in [recording.clone(), diff]
        .into_iter()
        .chain(svgs.iter().map(|n| dir.path().join(n)))
    {
        let meta = fs::metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            (meta.uid(), meta.gid()),
            (NOBODY, NOBODY),
            "{}",
            path.display()
        );
    }
}

/// A symlink at the output path is refused, with or without --force, and
/// what it points at is untouched.
#[test]
fn symlink_at_output_is_refused() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let target = dir.path().join("target");
    fs::write(&target, PRECIOUS).expect("write target");
    let link = dir.path().join("recording.tprof");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    for extra in [&[][..], &["--force"][..]] {
        refused(&record(&link, extra, &[]), "symbolic link");
        assert_eq!(fs::read_to_string(&target).unwrap(), PRECIOUS);
    }
}

/// An existing file is kept unless --force; with --force it is replaced
/// by the recording.
#[test]
fn existing_file_needs_force() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    fs::write(&recording, PRECIOUS).expect("write file");
    refused(&record(&recording, &[], &[]), "--force");
    assert_eq!(fs::read_to_string(&recording).unwrap(), PRECIOUS);
    let out = record(&recording, &["--force", "--no-report"], &[]);
    assert!(out.status.success(), "{}", show(&out));
    report_json(&recording);
}

/// A hard link at the output path (a second name for a file root can
/// write) is not truncated even with --force; nor does a FIFO there hang
/// tprof.
#[test]
fn hard_link_and_fifo_are_refused_with_force() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let target = dir.path().join("target");
    fs::write(&target, PRECIOUS).expect("write target");
    let link = dir.path().join("recording.tprof");
    fs::hard_link(&target, &link).expect("hard link");
    refused(&record(&link, &["--force"], &[]), "hard links");
    assert_eq!(fs::read_to_string(&target).unwrap(), PRECIOUS);

    let fifo = dir.path().join("fifo.tprof");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0, "mkfifo");
    refused(&record(&fifo, &["--force"], &[]), "not a regular file");
}

/// A world-writable directory another user owns (planted in /tmp, say):
/// root must not write there at all.
#[test]
fn planted_directory_is_refused() {
    require_root();
    let planted = tempfile::Builder::new()
        .prefix("tprof-planted-")
        .tempdir_in("/tmp")
        .expect("create dir in /tmp");
    std::os::unix::fs::chown(planted.path(), Some(NOBODY), Some(NOBODY)).expect("chown");
    fs::set_permissions(planted.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    let recording = planted.path().join("recording.tprof");
    refused(&record(&recording, &[], &[]), "world-writable");
    assert!(
        !recording.exists(),
        "tprof wrote into the planted directory"
    );
}
