//! The seam every output goes through. An [`Exporter`] says its name, the
//! file extensions it is written to, what opens it, and what it reads of a
//! recording ([`Reads`]), which is also how it writes: each kind of reading
//! hands the exporter that, prepared, and nothing else.
//!
//! A format is one file that declares its exporter beside its renderer
//! (`pub static`), and one line in [`crate::outputs::EXPORTERS`], the list
//! that `tprof` (by name and by extension), the golden tests and the fuzzer
//! go through. A timeline format is a [`TraceSink`]: the timeline's one
//! layout ([`tracks::lay_out`]) feeds it, so it cannot lay out its own.
//!
//! [`tracks::lay_out`]: crate::render::timeline::tracks::lay_out

use std::fmt;
use std::io;
use std::path::Path;

use anyhow::{Result, bail};

use crate::analysis::flame::{self, Filter, FlameKind};
use crate::analysis::{Summary, roles::Roles};
use crate::model::Model;
use crate::render::timeline::tracks::SlicePolicy;
use crate::render::trace::TraceSink;

/// Folded stacks: (`frame;frame;…`, weight) lines.
pub type Folded = Vec<(String, u64)>;

/// One output format of a recording.
pub struct Exporter {
    /// What `tprof export --format` calls it.
    pub name: &'static str,
    /// What it is, in a line: the help of `--format`.
    pub about: &'static str,
    /// The file extensions it is written to, the usual one first (a
    /// timeline's format is told by its file's).
    pub extensions: &'static [&'static str],
    /// What reads it, for help and errors.
    pub opens_in: &'static str,
    pub reads: Reads,
}

/// What an exporter reads of a recording, and the function that writes it
/// from that.
#[derive(Clone, Copy)]
pub enum Reads {
    /// The recording's analysis: the report, its JSON.
    Summary(fn(&Summary, &mut dyn io::Write) -> io::Result<()>),
    /// One kind of stacks of the recording, cut to the chosen processes,
    /// threads and time.
    Stacks(fn(&Stacks, &mut dyn io::Write) -> Result<()>),
    /// The same of two recordings: before, then after.
    TwoRecordings(fn(&Stacks, &Stacks, &mut dyn io::Write) -> Result<()>),
    /// The timeline, laid out into this format's sink, with its thread
    /// states made into slices by `slices`.
    Timeline {
        slices: SlicePolicy,
        sink: fn(&mut dyn io::Write) -> Box<dyn TraceSink + '_>,
    },
}

impl Exporter {
    /// The usual extension of its files.
    pub fn extension(&self) -> &'static str {
        self.extensions.first().copied().unwrap_or("out")
    }

    /// Whether it shows one kind of stacks (cpu, offcpu or wall), which
    /// the caller picks.
    pub fn shows_stacks(&self) -> bool {
        matches!(self.reads, Reads::Stacks(_) | Reads::TwoRecordings(_))
    }

    pub fn is_timeline(&self) -> bool {
        matches!(self.reads, Reads::Timeline { .. })
    }

    /// Whether it needs a second recording.
    pub fn reads_two(&self) -> bool {
        matches!(self.reads, Reads::TwoRecordings(_))
    }
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter")
            .field("name", &self.name)
            .field("extensions", &self.extensions)
            .finish_non_exhaustive()
    }
}

/// What a stack exporter reads: one recording's stacks of one kind, and
/// which of them to show.
#[derive(Debug)]
pub struct Stacks<'a> {
    pub model: &'a Model,
    /// The threads' roles, for labels.
    pub roles: &'a Roles,
    /// The recording's path: titles and errors name it.
    pub recording: &'a Path,
    pub kind: FlameKind,
    /// The processes, threads and time spans shown, resolved for this
    /// recording.
    pub filter: Filter,
}

impl Stacks<'_> {
    /// The folded stacks: an error naming the recording when it has no
    /// stacks, or none of this kind for the filter.
    pub fn folded(&self) -> Result<Folded> {
        folded(self.model, self.recording, self.kind, &self.filter)
    }

    /// An error naming the recording when it has no stacks at all.
    pub fn any(&self) -> Result<()> {
        no_stacks(self.model, self.recording)
    }

    /// The one line on what the recording lost.
    pub fn loss_note(&self) -> Option<String> {
        super::loss_note(&self.model.lost, self.model.cut_short)
    }

    /// The error for stacks of this kind that the filter leaves nothing of.
    pub fn none_chosen(&self) -> anyhow::Error {
        none_chosen(self.recording, self.kind)
    }
}

/// The folded stacks of the recording at `path` (named in the errors): an
/// error when it has no stacks, or none of this kind for `filter`.
pub fn folded(model: &Model, path: &Path, kind: FlameKind, filter: &Filter) -> Result<Folded> {
    no_stacks(model, path)?;
    let lines = flame::fold(model, kind, filter);
    if lines.is_empty() {
        return Err(none_chosen(path, kind));
    }
    Ok(lines)
}

fn none_chosen(path: &Path, kind: FlameKind) -> anyhow::Error {
    anyhow::anyhow!(
        "{} has no {} stacks for the chosen processes and threads",
        path.display(),
        kind.name()
    )
}

/// An error when the recording at `path` (named in it) has no stacks.
fn no_stacks(model: &Model, path: &Path) -> Result<()> {
    if model.stacks.is_none() {
        bail!(
            "{} has no stacks (recorded with --no-stacks, or cut short before the end)",
            path.display()
        );
    }
    Ok(())
}
