//! `r` in `tprof top`: a recording file of what follows, for a deep dive
//! later with `tprof report`, flamegraphs and timelines. It reads like one
//! `tprof record -p` would have made from the moment `r` was pressed.
//!
//! The file opens with what such a recording starts with, taken from the
//! window: the header (its start anchor moved to now), the GPUs, the
//! processes' latest snapshots, the threads alive now with their states,
//! every frame and stack named so far (the events that follow refer to
//! them by id), and the CUDA and step-probe state. Then every record and
//! event capture sends, in order, flushed at each drain tick as `record`
//! flushes its file, so a killed tprof leaves a readable prefix. Pressing
//! `r` again ends it with the LOST and FOOTER records; the capture's end
//! ends it with the capture's own.
//!
//! LOST counts are tprof top's since it started: the file gets them when
//! any loss happened while it was written, zeros otherwise.

use std::{
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use tprof_core::recording::{
    ClockAnchor, FrameBatch, LostCounts, StackBatch, Writer, record, writer,
};

use super::window::Window;

/// A recording file being written from the live feed.
pub(super) struct Tee {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
    /// The losses when it started, to tell whether any happened since.
    lost_at_start: LostCounts,
    /// The capture's own FOOTER came through: the file is whole.
    footed: bool,
}

impl Tee {
    /// Creates `path` (as every tprof output: no clobbering without
    /// `force`, owned by the sudo user) and writes what the window knows.
    pub(super) fn start(path: &Path, force: bool, window: &Window) -> Result<Tee> {
        let file = profiler::output::create(path, force)?;
        let failed = || format!("writing the recording to {} failed", path.display());
        let writer = Writer::new(BufWriter::with_capacity(writer::FILE_BUFFER, file))
            .with_context(failed)?;
        let mut tee = Tee {
            writer,
            path: path.to_path_buf(),
            lost_at_start: window.meta().lost.clone(),
            footed: false,
        };
        tee.prologue(window).with_context(failed)?;
        Ok(tee)
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    fn prologue(&mut self, window: &Window) -> Result<()> {
        let meta = window.meta();
        let w = &mut self.writer;
        let mut header = meta.header.clone();
        header.start = window.anchor(window.watermark_ns());
        w.write_json(record::HEADER, &header)?;
        if let Some(gpu) = &meta.gpu {
            w.write_json(record::GPU_INFO, gpu)?;
        }
        for process in &meta.processes {
            w.write_json(record::PROCESS, process)?;
        }
        for thread in window.threads_now() {
            w.write_json(record::THREAD, &thread)?;
        }
        let dictionary = &meta.dictionary;
        if !dictionary.frames.is_empty() {
            let frames = FrameBatch {
                first: 0,
                frames: dictionary.frames.clone(),
            };
            w.write_json(record::FRAMES, &frames)?;
        }
        if !dictionary.stacks.is_empty() {
            let stacks = StackBatch {
                first: 0,
                stacks: dictionary.stacks.clone(),
            };
            w.write_json(record::STACK_DEFS, &stacks)?;
        }
        if let Some(cuda) = &meta.cuda {
            w.write_json(record::CUDA, cuda)?;
        }
        if let Some(probes) = &meta.step_probes {
            w.write_json(record::STEP_PROBES, probes)?;
        }
        w.flush()?;
        Ok(())
    }

    /// A record as capture sent it.
    pub(super) fn record(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
        self.footed |= kind == record::FOOTER;
        self.writer
            .write_record(kind, payload)
            .with_context(|| self.failed())
    }

    /// One drain's events, as capture sent them.
    pub(super) fn events(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.push_event(bytes).with_context(|| self.failed())
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        self.writer.flush().with_context(|| self.failed())
    }

    /// Ends the file, with the LOST and FOOTER records unless the
    /// capture's own came through, and syncs it to the disk.
    pub(super) fn finish(mut self, end: ClockAnchor, lost: &LostCounts) -> Result<PathBuf> {
        let failed = self.failed();
        if !self.footed {
            let lost = if *lost == self.lost_at_start {
                LostCounts::default()
            } else {
                lost.clone()
            };
            let footer = tprof_core::recording::Footer {
                end,
                stop_reason: STOPPED_BY_R.to_string(),
                command_exit: None,
                clock_sync: None,
            };
            self.writer
                .write_json(record::LOST, &lost)
                .context(failed.clone())?;
            self.writer
                .write_json(record::FOOTER, &footer)
                .context(failed.clone())?;
        }
        let file = self
            .writer
            .finish()
            .context(failed.clone())?
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)
            .context(failed.clone())?;
        file.sync_all().context(failed)?;
        Ok(self.path)
    }

    fn failed(&self) -> String {
        format!("writing the recording to {} failed", self.path.display())
    }
}

/// The stop reason of a recording `r` ended.
pub(super) const STOPPED_BY_R: &str = "r in tprof top";
