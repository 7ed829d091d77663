//! The recording file capture writes: every write failure names the file
//! and says the prefix on disk is kept.
//!
//! On ENOSPC or EDQUOT the error also says to free space or record to
//! another disk with `-o`.
//! `Unstarted` removes the file of a recording that never started, so a
//! failed attach leaves no empty file behind.

use std::{
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, anyhow};
use serde::Serialize;

use tprof_core::recording::Writer;

/// Removes the output file of a recording that failed to start, when
/// dropped; forgotten once it starts.
pub(super) struct Unstarted<'a>(pub(super) &'a Path);

impl Drop for Unstarted<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// The error a recording that could not be finished ends with: what went
/// wrong, then that the prefix on disk is kept, and how to fix a full disk.
pub(super) fn cut_short_error(path: &Path, err: anyhow::Error) -> anyhow::Error {
    let no_space = err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| code == libc::ENOSPC || code == libc::EDQUOT)
    });
    let fix = if no_space {
        "; free some space or record to another disk with -o"
    } else {
        ""
    };
    anyhow!(
        "{err:#}; the recording so far is kept in {} (`tprof report` reads it as cut short){fix}",
        path.display()
    )
}

/// The recording file being written, with every write failure naming it.
pub(super) struct RecordingFile {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
}

impl RecordingFile {
    pub(super) fn new(writer: Writer<BufWriter<File>>, path: PathBuf) -> RecordingFile {
        RecordingFile { writer, path }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn failed(&self) -> String {
        format!("writing the recording to {} failed", self.path.display())
    }

    pub(super) fn write_json<T: Serialize>(&mut self, kind: u32, value: &T) -> Result<()> {
        self.writer
            .write_json(kind, value)
            .with_context(|| self.failed())
    }

    /// A record whose payload is already encoded.
    pub(super) fn write_record(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
        self.writer
            .write_record(kind, payload)
            .with_context(|| self.failed())
    }

    pub(super) fn push_event(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.push_event(bytes).with_context(|| self.failed())
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        self.writer.flush().with_context(|| self.failed())
    }

    /// Flushes everything and syncs it to the disk.
    pub(super) fn finish(self) -> Result<()> {
        let failed = self.failed();
        let file = self
            .writer
            .finish()
            .context(failed.clone())?
            .into_inner()
            .map_err(|e| e.into_error())
            .context(failed.clone())?;
        file.sync_all().context(failed)
    }
}
