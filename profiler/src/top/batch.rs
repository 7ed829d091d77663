//! `tprof top --batch`: one frame per interval on stdout, for scripts and
//! CI logs, as plain text laid out as on the screen (no colour, no status
//! line, every thread) or, with `--json`, as one JSON object per line
//! (docs/json.md). After `-n` frames it asks capture to stop; a reader
//! that closes stdout (`| head`) stops it too.

use std::{fs::File, io::Write as _, sync::mpsc::Receiver};

use anyhow::{Context as _, Result};
use profiler::capture::StopRequests;

use super::analyst::Update;
use super::frame::Frame;
use super::view::{self, Area, ViewState};

/// What the batch presenter needs.
pub(super) struct Batch {
    pub out: File,
    pub json: bool,
    pub width: u16,
    /// Stop after this many frames.
    pub frames: Option<u64>,
    pub stop: StopRequests,
}

impl Batch {
    /// Prints frames until the analysis thread ends.
    pub(super) fn run(mut self, updates: &Receiver<Update>) -> Result<()> {
        let mut printed = 0;
        for update in updates {
            match update {
                Update::Frame(frame) if self.frames.is_none_or(|n| printed < n) => {
                    if let Err(err) = self.print(&frame) {
                        self.stop.stop();
                        return match err.downcast_ref::<std::io::Error>() {
                            Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                            _ => Err(err),
                        };
                    }
                    printed += 1;
                    if self.frames.is_some_and(|n| printed >= n) {
                        self.stop.stop();
                    }
                }
                Update::Frame(_) | Update::Recording(_) => {}
                Update::Note(note) => eprintln!("tprof: {note}"),
            }
        }
        Ok(())
    }

    fn print(&mut self, frame: &Frame) -> Result<()> {
        let text = if self.json {
            let mut line = serde_json::to_string(frame).context("cannot encode a frame")?;
            line.push('\n');
            line
        } else {
            text(frame, self.width)
        };
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        Ok(())
    }
}

/// A frame as plain text, and a blank line after it.
pub(super) fn text(frame: &Frame, width: u16) -> String {
    let state = ViewState::default();
    let area = Area {
        width,
        height: None,
    };
    let mut out = String::new();
    for line in view::lines(Some(frame), &state, area) {
        out.push_str(view::plain(&line).trim_end());
        out.push('\n');
    }
    out.push('\n');
    out
}
