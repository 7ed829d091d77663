//! The recording file capture writes, `tprof record`'s [`Sink`]: every
//! write failure names the file and says the prefix on disk is kept.
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

use super::resolve::Resolved;
use super::sink::{Sink, encode};
use tprof_core::recording::{Writer, record, writer};

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

/// The recording file being written, with every write failure naming it:
/// the [`Sink`] of `tprof record`.
pub(super) struct RecordingFile {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
}

impl RecordingFile {
    /// Starts the recording in `file` (its preamble, buffered).
    pub(super) fn create(file: File, path: PathBuf) -> Result<RecordingFile> {
        let failed = failed(&path);
        let writer =
            Writer::new(BufWriter::with_capacity(writer::FILE_BUFFER, file)).context(failed)?;
        Ok(RecordingFile { writer, path })
    }
}

impl Sink for RecordingFile {
    fn record(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
        self.writer
            .write_record(kind, payload)
            .with_context(|| failed(&self.path))
    }

    /// The new frames (FRAMES) and stacks (STACK_DEFS), then the events.
    fn events(&mut self, batch: &Resolved) -> Result<()> {
        if let Some(frames) = &batch.frames {
            self.record(record::FRAMES, &encode(frames)?)?;
        }
        if let Some(stacks) = &batch.stacks {
            self.record(record::STACK_DEFS, &encode(stacks)?)?;
        }
        for event in batch.events.in_order() {
            self.writer
                .push_event(event)
                .with_context(|| failed(&self.path))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.writer.flush().with_context(|| failed(&self.path))
    }

    /// Flushes everything and syncs it to the disk.
    fn finish(self: Box<Self>) -> Result<()> {
        let failed = failed(&self.path);
        let file = self
            .writer
            .finish()
            .context(failed.clone())?
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)
            .context(failed.clone())?;
        file.sync_all().context(failed)
    }
}

fn failed(path: &Path) -> String {
    format!("writing the recording to {} failed", path.display())
}
