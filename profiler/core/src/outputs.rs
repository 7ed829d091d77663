//! What the commands make of a recording file, one function per output.
//! The `tprof` binary (profiler/src/main.rs) writes them to stdout and
//! files; the golden tests (profiler/core/tests/golden.rs) compare them
//! with committed files. Both take this path, so the goldens hold the bytes
//! a user gets.
//!
//! recording → model ([`load_model`]) → analysis ([`analysis::summarize`])
//! → render: nothing here touches the live system; [`load_model`] reads only
//! the file it is given.

use std::io;
use std::path::Path;

use anyhow::{Result, bail};

use crate::analysis::{
    self, Summary,
    flame::{self, Filter, FlameKind},
};
use crate::model::{Assembly, Model};
use crate::recording;
use crate::render::{
    self,
    timeline::{Limits, TimelineInput},
};

/// Folded stacks: (`frame;frame;…`, weight) lines.
pub type Folded = Vec<(String, u64)>;

/// The model of the recording at `path`, its events streamed from the file
/// in timestamp order rather than held in memory all at once.
pub fn load_model(path: &Path) -> Result<Model> {
    let opened = recording::reader::open(path)?;
    let mut assembly = Assembly::new(&opened.meta, opened.last_event_ns);
    let stats = opened.events_in_order(|event| assembly.apply(event))?;
    Ok(assembly.finish(stats))
}

/// `tprof report`: the terminal report, or with `json` the `--json`
/// document.
pub fn report(summary: &Summary, json: bool) -> String {
    if json {
        render::json::render(summary)
    } else {
        render::report::render(summary)
    }
}

/// The folded stacks of the recording at `path` (named in the errors): an
/// error when it has no stacks, or none of this kind for `filter`.
pub fn folded(model: &Model, path: &Path, kind: FlameKind, filter: &Filter) -> Result<Folded> {
    if model.stacks.is_none() {
        bail!(
            "{} has no stacks (recorded with --no-stacks, or cut short before the end)",
            path.display()
        );
    }
    let lines = flame::fold(model, kind, filter);
    if lines.is_empty() {
        bail!(
            "{} has no {} stacks for the chosen processes and threads",
            path.display(),
            kind.name()
        );
    }
    Ok(lines)
}

/// A timeline file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimelineFormat {
    /// Chrome trace event JSON.
    Json,
    Html,
}

impl TimelineFormat {
    /// The format a file name asks for.
    pub fn of(path: &Path) -> Result<TimelineFormat> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("json") => Ok(TimelineFormat::Json),
            Some("html" | "htm") => Ok(TimelineFormat::Html),
            _ => bail!(
                "cannot tell the timeline format of {}: name it FILE.json (Perfetto UI, \
                 chrome://tracing) or FILE.html (any browser)",
                path.display()
            ),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            TimelineFormat::Json => "json",
            TimelineFormat::Html => "html",
        }
    }
}

/// `tprof timeline`: model and analysis (roles, steps, deliveries, stalls)
/// → one timeline, titled after the recording at `recording`, into `out`.
pub fn timeline(
    model: &Model,
    summary: &Summary,
    recording: &Path,
    format: TimelineFormat,
    limits: Limits,
    out: impl io::Write,
) -> io::Result<()> {
    let facts = analysis::timeline::derive(model, summary);
    let title = format!("tprof timeline — {}", recording.display());
    let input = TimelineInput::new(model, summary, &facts, title, limits);
    match format {
        TimelineFormat::Json => render::timeline::chrome::write(&input, out),
        TimelineFormat::Html => render::timeline::html::write(&input, out),
    }
}
