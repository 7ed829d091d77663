//! Every output tprof makes of a recording, in one registry: [`Output`]
//! names each, [`write()`] makes its bytes. The `tprof` binary
//! (profiler/src/main.rs) writes them to stdout and files; the golden tests
//! (profiler/core/tests/golden.rs) compare them with committed files; the
//! fuzz target and the odd-recording tests run [`Output::all`] over
//! recordings no kernel would produce ([`every_output`]). All
//! take this path, so a new output added here is fuzzed, and the goldens
//! hold the bytes a user gets.
//!
//! recording → model ([`load_model`]) → analysis ([`analysis::summarize`])
//! → render: nothing here touches the live system; [`load_model`] reads only
//! the file it is given.

use std::cell::OnceCell;
use std::io;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::analysis::{
    self, Summary,
    flame::{self, Filter, FlameKind},
    select::Selection,
};
use crate::model::{Assembly, Model};
use crate::recording;
use crate::render::{
    self,
    timeline::{Limits, TimelineInput},
};

/// Folded stacks: (`frame;frame;…`, weight) lines.
pub type Folded = Vec<(String, u64)>;

/// One output of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// `tprof report`: the terminal report, or with `json` the `--json`
    /// document.
    Report { json: bool },
    /// `tprof flamegraph --folded --kind K`: folded stacks as text.
    Folded(FlameKind),
    /// `tprof flamegraph --kind K`: an SVG.
    Flamegraph(FlameKind),
    /// `tprof flamegraph --diff BEFORE AFTER --kind K`: the differential
    /// SVG against [`Input::after`].
    FlamegraphDiff(FlameKind),
    /// `tprof timeline -o FILE.json|FILE.html|FILE.pftrace`, and `tprof
    /// export --format perfetto` (a Perfetto timeline of every slice).
    Timeline(TimelineFormat),
    /// `tprof export --format pprof --kind K`: a gzipped pprof profile.
    Pprof(FlameKind),
}

const KINDS: [FlameKind; 3] = [FlameKind::Cpu, FlameKind::OffCpu, FlameKind::Wall];

impl Output {
    /// Every output, each kind and format.
    pub fn all() -> Vec<Output> {
        let mut all = vec![
            Output::Report { json: false },
            Output::Report { json: true },
        ];
        for kind in KINDS {
            all.extend([
                Output::Folded(kind),
                Output::Flamegraph(kind),
                Output::FlamegraphDiff(kind),
                Output::Pprof(kind),
            ]);
        }
        all.extend(TimelineFormat::ALL.map(Output::Timeline));
        all
    }
}

/// What an output is made of.
#[derive(Debug)]
pub struct Input<'a> {
    pub model: &'a Model,
    /// The model's analysis, made when an output first needs it (folded
    /// stacks and flamegraphs do not).
    summary: OnceCell<Summary>,
    /// The recording's path: titles and errors name it.
    pub path: &'a Path,
    pub limits: Limits,
    /// The processes and threads of flamegraphs and profiles.
    pub filter: Filter,
    /// The part of the recording flamegraphs, profiles and timelines show
    /// (`--phase`, `--steps`, `--slowest`, `--role`).
    pub selection: Selection,
    /// The AFTER recording of a differential flamegraph, and its path.
    pub after: Option<(&'a Model, &'a Path)>,
}

impl<'a> Input<'a> {
    /// A recording's model, with the default settings.
    pub fn new(model: &'a Model, path: &'a Path) -> Input<'a> {
        Input {
            model,
            summary: OnceCell::new(),
            path,
            limits: Limits::default(),
            filter: Filter::default(),
            selection: Selection::default(),
            after: None,
        }
    }

    /// The model's analysis.
    pub fn summary(&self) -> &Summary {
        self.summary.get_or_init(|| {
            let mut summary = analysis::summarize(self.model);
            summary.name_recording(&self.path.display().to_string());
            summary
        })
    }
}

/// Writes `output` of `input` into `out`; an output the recording cannot
/// give (stacks of a recording without stacks) is an error naming it.
pub fn write(output: Output, input: &Input, mut out: impl io::Write) -> Result<()> {
    match output {
        Output::Report { json } => out.write_all(report(input.summary(), json).as_bytes())?,
        Output::Folded(kind) => {
            let filter = stack_filter(input, input.model, input.summary(), input.path)?;
            let lines = folded(input.model, input.path, kind, &filter)?;
            out.write_all(flame::folded_text(&lines).as_bytes())?;
        }
        Output::Flamegraph(kind) => {
            let filter = stack_filter(input, input.model, input.summary(), input.path)?;
            let lines = folded(input.model, input.path, kind, &filter)?;
            let note = render::loss_note(&input.model.lost, input.model.cut_short);
            let title = flamegraph_title(kind, input.path);
            render::flamegraph::svg(&lines, kind, &title, note.as_deref(), out)?;
        }
        Output::FlamegraphDiff(kind) => flamegraph_diff(input, kind, out)?,
        Output::Timeline(format) => timeline(input, format, out)?,
        Output::Pprof(kind) => {
            let model = input.model;
            no_stacks(model, input.path)?;
            let title = format!("tprof {} profile — {}", kind.name(), input.path.display());
            let roles = &input.summary().roles;
            let filter = stack_filter(input, model, input.summary(), input.path)?;
            if render::pprof::write(model, roles, kind, &filter, &title, out)?.is_none() {
                bail!(
                    "{} has no {} stacks for the chosen processes and threads",
                    input.path.display(),
                    kind.name()
                );
            }
        }
    }
    Ok(())
}

/// The model of the recording at `path`, its events streamed from the file
/// in timestamp order rather than held in memory all at once.
pub fn load_model(path: &Path) -> Result<Model> {
    model_of(&recording::reader::open(path)?)
}

/// The model of an opened recording (its events read now).
pub fn model_of(opened: &recording::reader::Opened) -> Result<Model> {
    let mut assembly = Assembly::new(&opened.meta, opened.last_event_ns);
    let stats = opened.events_in_order(|event| assembly.apply(event))?;
    Ok(assembly.finish(stats))
}

/// One recording of a merge: its model, its path as the report names it,
/// and its machine's name in the trace ([`node_names`]).
pub type MergeInput = (Model, String, String);

/// `tprof merge`: the recordings of one job into one Perfetto trace (when
/// `trace` is given), each its own machine on its own wall clock, every
/// interval as recorded; and the cross-node report. Each recording is
/// written and dropped before the next is asked for, so a merge holds one
/// model at a time.
pub fn merge(
    recordings: impl IntoIterator<Item = Result<MergeInput>>,
    mut trace: Option<impl io::Write>,
) -> Result<analysis::cross_node::CrossNode> {
    use crate::render::timeline::tracks::{self, Placement, SlicePolicy};
    use crate::render::trace::TraceSink as _;
    let mut sink = trace
        .as_mut()
        .map(render::trace::perfetto::PerfettoSink::new);
    let mut facts = Vec::new();
    for (n, recording) in recordings.into_iter().enumerate() {
        let (model, file, name) = recording?;
        let input = Input::new(&model, Path::new(&file));
        let summary = input.summary();
        if let Some(sink) = &mut sink {
            let facts = analysis::timeline::derive(&model, summary);
            let title = format!("tprof merge — {file}");
            // Every interval as recorded.
            let limits = Limits {
                min_slice_ns: 1,
                ..input.limits
            };
            let timeline = TimelineInput::new(&model, summary, &facts, title, limits);
            let placement = Placement {
                index: n as u32 + 1,
                clock_offset_ns: model.start_anchor.offset_ns(),
                name: Some(name.clone()),
            };
            tracks::lay_out(&timeline, SlicePolicy::Uncapped, placement, sink)
                .context("writing the merged trace failed")?;
        }
        facts.push(analysis::cross_node::RankFacts::of(
            &file, name, &model, summary,
        ));
    }
    if let Some(sink) = &mut sink {
        sink.finish().context("writing the merged trace failed")?;
    }
    Ok(analysis::cross_node::report(&facts))
}

/// Each recording's machine name in a merged trace: `host:rank`, else
/// `host`; a name two recordings share gets its file's name too, so every
/// recording is a machine of its own. `recordings` are (host, rank, file).
pub fn node_names(recordings: &[(String, Option<u32>, String)]) -> Vec<String> {
    let base: Vec<String> = recordings
        .iter()
        .map(|(host, rank, _)| {
            let host = if host.is_empty() { "?" } else { host };
            match rank {
                Some(rank) => format!("{host}:{rank}"),
                None => host.to_string(),
            }
        })
        .collect();
    base.iter()
        .zip(recordings)
        .map(|(name, (_, _, file))| {
            if base.iter().filter(|b| *b == name).count() > 1 {
                let file = Path::new(file)
                    .file_name()
                    .map_or(file.into(), |f| f.to_string_lossy());
                format!("{name} ({file})")
            } else {
                name.clone()
            }
        })
        .collect()
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

/// The folded stacks of the recording at `path` (named in the errors): an
/// error when it has no stacks, or none of this kind for `filter`.
pub fn folded(model: &Model, path: &Path, kind: FlameKind, filter: &Filter) -> Result<Folded> {
    no_stacks(model, path)?;
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

/// The input's filter with its selection resolved for `model` (the
/// recording at `path`): its time spans and the threads of its roles.
fn stack_filter(input: &Input, model: &Model, summary: &Summary, path: &Path) -> Result<Filter> {
    let resolved = input
        .selection
        .resolve(model, summary)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let timed = model.stacks.as_ref().is_some_and(|t| !t.timed.is_empty());
    let spans = match resolved.spans {
        Some(_) if !timed && resolved.explicit && model.stacks.is_some() => bail!(
            "{}: its stacks carry no times (a recording of format 3 or older): \
             --phase, --steps and --slowest need a newer one; use --phase all",
            path.display()
        ),
        spans if timed => spans,
        _ => None,
    };
    Ok(Filter {
        spans,
        role_threads: resolved.threads,
        ..input.filter.clone()
    })
}

/// A flamegraph's title: what it shows, of which recording.
pub fn flamegraph_title(kind: FlameKind, recording: &Path) -> String {
    let what = match kind {
        FlameKind::Cpu => "on-CPU samples",
        FlameKind::OffCpu => "off-CPU time by reason",
        FlameKind::Wall => "wall-clock time (on- and off-CPU)",
    };
    format!("tprof: {what} — {}", recording.display())
}

/// The differential flamegraph of `input` (before) and its `after`.
fn flamegraph_diff(input: &Input, kind: FlameKind, out: impl io::Write) -> Result<()> {
    let Some((after, after_path)) = input.after else {
        bail!("a differential flamegraph needs a second recording");
    };
    let before_filter = stack_filter(input, input.model, input.summary(), input.path)?;
    let before = folded(input.model, input.path, kind, &before_filter)?;
    let after_summary = analysis::summarize(after);
    let after_filter = stack_filter(input, after, &after_summary, after_path)?;
    let after_lines = folded(after, after_path, kind, &after_filter)?;
    let note = diff_note(
        input.path,
        render::loss_note(&input.model.lost, input.model.cut_short),
        after_path,
        render::loss_note(&after.lost, after.cut_short),
    );
    let title = format!(
        "tprof {} flamegraph: {} → {}",
        kind.name(),
        input.path.display(),
        after_path.display()
    );
    render::flamegraph::diff_svg(&before, &after_lines, kind, &title, note.as_deref(), out)?;
    Ok(())
}

/// The losses of both recordings of a differential flamegraph, each named.
fn diff_note(
    before: &Path,
    before_note: Option<String>,
    after: &Path,
    after_note: Option<String>,
) -> Option<String> {
    let named =
        |path: &Path, note: Option<String>| note.map(|n| format!("{}: {n}", path.display()));
    let notes: Vec<String> = [named(before, before_note), named(after, after_note)]
        .into_iter()
        .flatten()
        .collect();
    (!notes.is_empty()).then(|| notes.join(" | "))
}

/// A timeline file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimelineFormat {
    /// Chrome trace event JSON, merged to fit chrome://tracing.
    Json,
    Html,
    /// Perfetto's protobuf trace, uncapped.
    Perfetto,
}

impl TimelineFormat {
    pub const ALL: [TimelineFormat; 3] = [
        TimelineFormat::Json,
        TimelineFormat::Html,
        TimelineFormat::Perfetto,
    ];

    /// The format a file name asks for.
    pub fn of(path: &Path) -> Result<TimelineFormat> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("json") => Ok(TimelineFormat::Json),
            Some("html" | "htm") => Ok(TimelineFormat::Html),
            Some("pftrace" | "perfetto-trace") => Ok(TimelineFormat::Perfetto),
            _ => bail!(
                "cannot tell the timeline format of {}: name it FILE.pftrace (Perfetto UI, \
                 trace_processor), FILE.json (chrome://tracing, Perfetto UI) or FILE.html (any \
                 browser)",
                path.display()
            ),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            TimelineFormat::Json => "json",
            TimelineFormat::Html => "html",
            TimelineFormat::Perfetto => "pftrace",
        }
    }
}

/// `tprof timeline`: model and analysis (roles, steps, deliveries, stalls)
/// → one timeline, titled after the recording, into `out`.
fn timeline(input: &Input, format: TimelineFormat, out: impl io::Write) -> Result<()> {
    let summary = input.summary();
    let resolved = input
        .selection
        .resolve(input.model, summary)
        .map_err(|e| anyhow::anyhow!("{}: {e}", input.path.display()))?;
    let mut facts = analysis::timeline::derive(input.model, summary);
    let title = format!("tprof timeline — {}", input.path.display());
    // Only an explicit choice crops: a timeline is where startup (imports,
    // worker start) is seen, so by default it shows the whole recording.
    let window = resolved
        .spans
        .filter(|_| resolved.explicit)
        .and_then(|s| Some((s.first()?.0, s.last()?.1)));
    let cropped = (window.is_some() || resolved.threads.is_some()).then(|| {
        let (start, end) =
            window.unwrap_or((input.model.window_start_ns, input.model.window_end_ns));
        facts.keep(start, end, resolved.threads.as_ref());
        input.model.crop(start, end, resolved.threads.as_ref())
    });
    let model = cropped.as_ref().unwrap_or(input.model);
    let timeline = TimelineInput::new(model, summary, &facts, title, input.limits);
    match format {
        TimelineFormat::Json => render::timeline::chrome(&timeline, out)?,
        TimelineFormat::Html => render::timeline::html(&timeline, out)?,
        TimelineFormat::Perfetto => render::timeline::perfetto(&timeline, out)?,
    }
    Ok(())
}

/// Renders every output of a recording held in memory into a sink,
/// refusals (stacks of a recording without stacks) included. The odd- and
/// hostile-recording tests and the fuzz target run it over recordings no
/// kernel would produce: an output that panics there panics for a user.
pub fn every_output(rec: &recording::Recording) {
    let model = Model::build(rec);
    let path = Path::new("t");
    let mut input = Input::new(&model, path);
    input.after = Some((&model, path));
    for output in Output::all() {
        let _ = write(output, &input, io::sink());
    }
    // A merge of the recording with itself: two machines of one name.
    let me = (model.hostname.clone(), None, "a".to_string());
    let names = node_names(&[me.clone(), me]);
    let twice = names
        .into_iter()
        .map(|name| Ok((model.clone(), "a".to_string(), name)));
    if let Ok(report) = merge(twice, Some(io::sink())) {
        let _ = render::cross_node::text(&report);
        let _ = render::cross_node::json(&report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which variant an output is: a new variant must be added here (the
    /// match is exhaustive) and to [`Output::all`] (the test below).
    fn variant(output: Output) -> usize {
        match output {
            Output::Report { .. } => 0,
            Output::Folded(_) => 1,
            Output::Flamegraph(_) => 2,
            Output::FlamegraphDiff(_) => 3,
            Output::Timeline(_) => 4,
            Output::Pprof(_) => 5,
        }
    }

    #[test]
    fn all_lists_every_output() {
        let all = Output::all();
        for v in 0..=5 {
            assert!(all.iter().any(|&o| variant(o) == v), "variant {v} missing");
        }
        for format in TimelineFormat::ALL {
            assert!(all.contains(&Output::Timeline(format)));
        }
    }

    #[test]
    fn every_recording_of_a_merge_is_a_machine_of_its_own() {
        let r =
            |host: &str, rank: Option<u32>, file: &str| (host.to_string(), rank, file.to_string());
        let names = node_names(&[
            r("a", Some(0), "0.tprof"),
            r("a", Some(1), "1.tprof"),
            r("b", None, "2.tprof"),
            r("c", None, "3.tprof"),
            r("c", None, "d/4.tprof"),
        ]);
        assert_eq!(
            names,
            ["a:0", "a:1", "b", "c (3.tprof)", "c (4.tprof)"].map(String::from)
        );
    }

    #[test]
    fn timeline_format_from_the_extension() {
        let format = |p: &str| TimelineFormat::of(Path::new(p)).ok();
        assert_eq!(format("a.json"), Some(TimelineFormat::Json));
        assert_eq!(format("a.HTML"), Some(TimelineFormat::Html));
        assert_eq!(format("a.htm"), Some(TimelineFormat::Html));
        assert_eq!(format("a.pftrace"), Some(TimelineFormat::Perfetto));
        assert_eq!(format("a.svg"), None);
        assert_eq!(format("a"), None);
    }
}
