//! The C workloads in tests/workloads and their ground truth.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::Value;

/// Serializes workload builds: tests may run in parallel and must not race
/// gcc writing the same output file.
static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// The workspace root; this crate lives in its `tests/` directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf()
}

/// Compiles `tests/workloads/<name>.c` into `target/workloads/<name>` unless
/// the binary is newer than its sources, and returns the binary's path.
pub fn build_workload(name: &str) -> PathBuf {
    let sources = workspace_root().join("tests/workloads");
    let source = sources.join(format!("{name}.c"));
    let out_dir = workspace_root().join("target/workloads");
    let binary = out_dir.join(name);
    let _guard = BUILD_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if is_up_to_date(&binary, &[&source, &sources.join("truth.h")]) {
        return binary;
    }
    fs::create_dir_all(&out_dir).expect("create target/workloads");
    compile(&source, &binary);
    binary
}

/// Compiles one C file into a shared library `target/<dir>/<name>.so`
/// (dir and name from the caller, so variants of one source built with
/// different `defines`, such as `-DNO_SAMPLES`, sit side by side), unless it
/// is newer than its source; returns the library's path.
pub fn build_shared_lib(source: &Path, dir: &str, name: &str, defines: &[&str]) -> PathBuf {
    let out_dir = workspace_root().join("target").join(dir);
    let library = out_dir.join(format!("{name}.so"));
    let _guard = BUILD_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if is_up_to_date(&library, &[source]) {
        return library;
    }
    fs::create_dir_all(&out_dir).expect("create the library directory under target/");
    let out = Command::new("gcc")
        .args([
            "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
        ])
        .args(defines)
        .arg("-o")
        .arg(&library)
        .arg(source)
        .output()
        .expect("run gcc (install it with `cargo xtask setup`)");
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    library
}

fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn is_up_to_date(binary: &Path, sources: &[&Path]) -> bool {
    let Some(built) = modified(binary) else {
        return false;
    };
    sources
        .iter()
        .all(|s| modified(s).is_some_and(|m| m <= built))
}

/// How a workload is built: debug info for symbolization, and frame
/// pointers, except for the workloads that stand for code built the way
/// distributions and wheels build it (`-O2`, no frame pointers), which
/// only copied and CFI-unwound stacks get right.
fn flags(source: &Path) -> &'static [&'static str] {
    match source.file_stem().and_then(|s| s.to_str()) {
        Some("unwind_chains") => &["-O2", "-g", "-fomit-frame-pointer"],
        _ => &["-O1", "-g", "-fno-omit-frame-pointer"],
    }
}

fn compile(source: &Path, binary: &Path) {
    let out = Command::new("gcc")
        .args(flags(source))
        .args(["-pthread", "-Wall", "-o"])
        .arg(binary)
        .arg(source)
        .output()
        .expect("run gcc (install it with `cargo xtask setup`)");
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every line of `text` that is a JSON object; other lines (tprof's report,
/// when the workload's stdout is mixed into it) are skipped.
pub fn parse_json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

/// The JSON lines a workload wrote to its TPROF_TRUTH_FILE.
pub fn read_truth_file(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read ground truth {}: {e}", path.display()));
    parse_json_lines(&text)
}

/// A file of random data on the workspace's disk (under target/, not a
/// tmpfs), written through to the device: what O_DIRECT tests read.
pub struct DataFile {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl DataFile {
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
    }
}

/// Writes `mib` MiB of random data to a fresh file under target/.
pub fn data_file(mib: u64) -> DataFile {
    let parent = workspace_root().join("target");
    let dir = tempfile::tempdir_in(&parent).expect("temp dir under target/");
    let path = dir.path().join("data.bin");
    fill_random(&path, mib);
    DataFile { path, _dir: dir }
}

/// Writes `mib` MiB from /dev/urandom to `path`, through to its device.
fn fill_random(path: &Path, mib: u64) {
    let status = Command::new("dd")
        .args(["if=/dev/urandom", "bs=1M", "conv=fsync", "status=none"])
        .arg(format!("of={}", path.display()))
        .arg(format!("count={mib}"))
        .status()
        .expect("run dd");
    assert!(status.success(), "dd failed");
}

/// A loop block device over `mib` MiB of random data in RAM (/dev/shm):
/// a disk no other process touches, so the kernel's own counters for it
/// (/proc/diskstats, iostat) hold the workload's requests and nothing else.
/// Detached on drop.
pub struct LoopDevice {
    /// /dev/loopN
    pub path: PathBuf,
    /// Holds the backing file; removed after the device is detached.
    _backing_dir: tempfile::TempDir,
}

impl LoopDevice {
    pub fn new(mib: u64) -> LoopDevice {
        let dir = tempfile::tempdir_in("/dev/shm").expect("temp dir in /dev/shm");
        let backing = dir.path().join("disk.img");
        fill_random(&backing, mib);
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .expect("run losetup (util-linux)");
        assert!(
            out.status.success(),
            "losetup failed (needs root and a kernel with CONFIG_BLK_DEV_LOOP): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        LoopDevice {
            path,
            _backing_dir: dir,
        }
    }

    /// The device's name in /sys/class/block and iostat: "loopN".
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}
