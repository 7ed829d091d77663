//! The Python environment of the real training job (tests/workloads/
//! train_job.py): a virtual environment with PyTorch, OpenCV and numpy at
//! pinned versions, created by `cargo xtask setup` outside the clone (it is
//! 5-6 GB: torch's Linux wheels bring the CUDA libraries, which torch needs
//! to import even on a machine without a GPU) and shared by every clone of
//! the machine.
//!
//! The directory is named for the pinned versions, so changing a pin makes
//! a new one beside the old. It counts as present only with its stamp file,
//! written after pip succeeded and the interpreter imported all three
//! packages at the pinned versions; a directory without a stamp (an install
//! that was interrupted) is removed and made again.
//!
//! The tests and `cargo xtask bench real` find its interpreter through
//! `target/train-job-python`, a one-line file setup writes in the clone, or
//! through `TPROF_JOB_PYTHON`, which `cargo xtask test` sets.

use std::fs;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command, probe, run as run_cmd};

pub(crate) const TORCH: &str = "2.15.0";
pub(crate) const OPENCV: &str = "5.1.0.95";
pub(crate) const NUMPY: &str = "2.4.6";
/// The interpreter series the environment is built on.
const PYTHON_SERIES: &str = "3.11";
/// Written inside the environment once it is complete.
const STAMP: &str = "tprof-venv.json";
/// In the clone: the path of the environment's interpreter, for the tests.
pub(crate) const POINTER_FILE: &str = "target/train-job-python";
/// Overrides the directory environments are kept in.
const ROOT_VAR: &str = "TPROF_VENV_ROOT";
/// Overrides the base interpreter.
const BASE_VAR: &str = "TPROF_BASE_PYTHON";

/// Makes sure the environment exists; returns its interpreter.
pub(crate) fn ensure() -> Result<PathBuf> {
    let dir = venv_root()?.join(venv_name());
    let python = dir.join("bin/python");
    if dir.join(STAMP).is_file() {
        println!("train-job venv: ok ({})", dir.display());
    } else {
        create(&dir)?;
    }
    let pointer = cmd::root().join(POINTER_FILE);
    fs::create_dir_all(pointer.parent().expect("target/"))?;
    fs::write(&pointer, format!("{}\n", python.display()))
        .with_context(|| format!("write {}", pointer.display()))?;
    Ok(python)
}

fn venv_name() -> String {
    format!("torch-{TORCH}-cv-{OPENCV}-np-{NUMPY}-py{PYTHON_SERIES}")
}

/// `$TPROF_VENV_ROOT`, else /var/cache/tprof/venvs for root (and anyone who
/// may write there), else ~/.cache/tprof/venvs.
fn venv_root() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(ROOT_VAR) {
        return Ok(PathBuf::from(dir));
    }
    let system = PathBuf::from("/var/cache/tprof/venvs");
    if cmd::is_root() || fs::create_dir_all(&system).is_ok() {
        return Ok(system);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set; set TPROF_VENV_ROOT")?;
    Ok(cache.join("tprof/venvs"))
}

fn create(dir: &Path) -> Result<()> {
    let root = dir.parent().expect("venvs live in a directory");
    fs::create_dir_all(root).with_context(|| format!("create {}", root.display()))?;
    // Two clones may set up at once: one installs, the other waits and
    // then finds the stamp.
    let _lock = Lock::take(&root.join(".lock"))?;
    if dir.join(STAMP).is_file() {
        println!("train-job venv: ok ({}, made meanwhile)", dir.display());
        return Ok(());
    }
    if dir.exists() {
        println!(
            "train-job venv: {} has no stamp (an install was cut short); making it again",
            dir.display()
        );
        fs::remove_dir_all(dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    let base = base_python()?;
    println!(
        "train-job venv: creating {} from {} ({}); pip installs torch=={TORCH} \
         opencv-python-headless=={OPENCV} numpy=={NUMPY}, about 5.6 GB with torch's CUDA \
         libraries (minutes on a cold machine)",
        dir.display(),
        base.path.display(),
        base.why
    );
    run_cmd(
        command(base.path.to_str().context("utf-8 path")?)
            .args(["-m", "venv"])
            .arg(dir),
    )
    .context("python -m venv failed (Debian's own python3.11 needs the python3.11-venv package)")?;
    let python = dir.join("bin/python");
    run_cmd(
        command(python.to_str().context("utf-8 path")?)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--progress-bar",
                "off",
            ])
            .arg("--root-user-action=ignore")
            .arg(format!("torch=={TORCH}"))
            .arg(format!("opencv-python-headless=={OPENCV}"))
            .arg(format!("numpy=={NUMPY}")),
    )
    .context("pip install failed: the real-job tests need PyPI reachable")?;
    let versions = import_check(&python)?;
    let stamp = serde_json::json!({
        "base_python": base.path,
        "packages": versions,
    });
    fs::write(
        dir.join(STAMP),
        serde_json::to_string_pretty(&stamp)? + "\n",
    )?;
    println!("train-job venv: installed ({versions})");
    Ok(())
}

/// Imports the three packages and checks their versions: a wheel that
/// installs but cannot load (a missing CUDA library) fails here, before
/// the stamp is written.
fn import_check(python: &Path) -> Result<String> {
    let script = "import torch, cv2, numpy; \
                  print(torch.__version__.split('+')[0], cv2.__version__, numpy.__version__)";
    let out = command(python.to_str().context("utf-8 path")?)
        .args(["-c", script])
        .output()
        .context("run the venv's python")?;
    if !out.status.success() {
        bail!(
            "the new venv cannot import torch, cv2 and numpy:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let got: Vec<&str> = text.split_whitespace().collect();
    // opencv-python's wheel version has a fourth part its module does not.
    let cv_module = OPENCV.rsplit_once('.').map_or(OPENCV, |(module, _)| module);
    if got != [TORCH, cv_module, NUMPY] {
        bail!("the new venv has torch, cv2, numpy {text}; expected {TORCH} {cv_module} {NUMPY}");
    }
    Ok(format!("torch {TORCH}, opencv {cv_module}, numpy {NUMPY}"))
}

struct Base {
    path: PathBuf,
    why: &'static str,
}

/// The interpreter to build the venv on: `$TPROF_BASE_PYTHON`, else the
/// newest pyenv CPython 3.11 (a shared-libpython build, like most users'
/// Pythons), else python3.11 on PATH (Debian's is static).
fn base_python() -> Result<Base> {
    if let Some(path) = std::env::var_os(BASE_VAR) {
        return Ok(Base {
            path: PathBuf::from(path),
            why: "from $TPROF_BASE_PYTHON",
        });
    }
    if let Some(path) = newest_pyenv_311() {
        return Ok(Base {
            path,
            why: "pyenv's newest CPython 3.11, a shared-libpython build",
        });
    }
    for candidate in ["python3.11", "/usr/bin/python3.11"] {
        if probe(command(candidate).args(["-c", "import venv, ensurepip"])).is_some() {
            return Ok(Base {
                path: PathBuf::from(candidate),
                why: "python3.11 on PATH (no pyenv 3.11 found)",
            });
        }
    }
    bail!(
        "no Python {PYTHON_SERIES} found for the train-job venv: install one with pyenv, or \
         Debian's python3.11 and python3.11-venv, or point {BASE_VAR} at an interpreter"
    )
}

fn newest_pyenv_311() -> Option<PathBuf> {
    let roots = [
        std::env::var_os("PYENV_ROOT").map(PathBuf::from),
        std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")),
        Some(PathBuf::from("/root/.pyenv")),
    ];
    let prefix = format!("{PYTHON_SERIES}.");
    let mut found: Vec<(u32, PathBuf)> = Vec::new();
    for versions in roots.into_iter().flatten().map(|r| r.join("versions")) {
        let Ok(entries) = fs::read_dir(&versions) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(patch) = name.strip_prefix(&prefix).and_then(|p| p.parse().ok()) else {
                continue;
            };
            let python = versions
                .join(&name)
                .join(format!("bin/python{PYTHON_SERIES}"));
            if python.is_file() {
                found.push((patch, python));
            }
        }
    }
    found.sort();
    found.pop().map(|(_, path)| path)
}

/// An exclusive flock on a file, released when dropped.
struct Lock {
    _file: fs::File,
}

impl Lock {
    fn take(path: &Path) -> Result<Lock> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("open {}", path.display()))?;
        // SAFETY: flock on a file descriptor we own; blocks until granted.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(Lock { _file: file })
    }
}
