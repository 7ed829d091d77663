//! Opens output files the way a root process on a shared machine must: no
//! following symlinks, no clobbering unless asked, and handing the file to
//! the user who ran sudo.
//!
//! Every command that writes a file goes through [`create`]: never through a
//! symlink, into a FIFO or device, over a file with other hard links, or in
//! a world-writable directory another user owns; no clobbering without
//! `--force` (which truncates only after those checks); the file is handed
//! to `$SUDO_UID`.

use std::{
    fs::{File, OpenOptions},
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

/// The user behind `sudo`, who should own what tprof writes.
fn invoking_user() -> Option<(u32, u32)> {
    let uid = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    Some((uid, gid))
}

/// Creates `path` for writing. Refuses an existing file unless `force`,
/// never follows a symlink at `path`, and refuses a world-writable directory
/// owned by another user (a path planted in such a directory could point a
/// root write anywhere).
pub fn create(path: &Path, force: bool) -> Result<File> {
    check_parent(path)?;
    let mut options = OpenOptions::new();
    // O_NONBLOCK: opening a FIFO planted at the path would otherwise block
    // until someone reads it; it fails or opens at once, and the check below
    // refuses it. (No effect on regular files.)
    options
        .write(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK);
    if force {
        // Not O_TRUNC: what is there is checked before anything is cut.
        options.create(true);
    } else {
        options.create_new(true);
    }
    let file = options.open(path).map_err(|e| match e.raw_os_error() {
        // O_EXCL does not follow a symlink either; name it for what it is.
        Some(libc::EEXIST) if path.is_symlink() => symlink(path),
        Some(libc::EEXIST) => anyhow::anyhow!(
            "{} already exists; choose another path with -o or pass --force to overwrite it",
            path.display()
        ),
        Some(libc::ELOOP) => symlink(path),
        Some(libc::ENXIO) => not_a_file(path),
        _ => anyhow::Error::new(e).context(format!("cannot create {}", path.display())),
    })?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    // A second name for the file (a hard link planted next to, say,
    // /etc/shadow) would let --force truncate what it points at.
    if meta.nlink() > 1 {
        bail!(
            "{} has other hard links; tprof does not overwrite it; remove it or choose another path with -o",
            path.display()
        );
    }
    if force {
        file.set_len(0)
            .with_context(|| format!("cannot truncate {}", path.display()))?;
    }
    if let Some((uid, gid)) = invoking_user() {
        use std::os::fd::AsRawFd as _;
        // SAFETY: fchown on a descriptor we own.
        unsafe { libc::fchown(file.as_raw_fd(), uid, gid) };
    }
    Ok(file)
}

fn symlink(path: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is a symbolic link; tprof does not write through links; choose another path with -o",
        path.display()
    )
}

fn not_a_file(path: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is not a regular file; choose another path with -o",
        path.display()
    )
}

fn check_parent(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let meta = parent
        .metadata()
        .with_context(|| format!("output directory {} does not exist", parent.display()))?;
    let world_writable = meta.mode() & 0o002 != 0;
    let owner_ok = meta.uid() == 0 || Some(meta.uid()) == invoking_user().map(|(u, _)| u);
    if world_writable && !owner_ok {
        bail!(
            "refusing to write into {}: it is world-writable and owned by another user; \
             choose another directory with -o",
            parent.display()
        );
    }
    Ok(())
}

/// `tprof-YYYYmmdd-HHMMSS.tprof` in the current directory.
pub fn default_path() -> PathBuf {
    // SAFETY: time with a null pointer only returns the time.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: localtime_r fills the zeroed struct from a valid time_t.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to valid locals.
    unsafe { libc::localtime_r(&raw const now, &raw mut tm) };
    PathBuf::from(format!(
        "tprof-{:04}{:02}{:02}-{:02}{:02}{:02}.tprof",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    ))
}
