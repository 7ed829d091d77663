//! Every output tprof makes of a recording, in one list: [`EXPORTERS`]
//! names each format ([`Exporter`]: its name, extensions, what opens it,
//! what it reads), [`write()`] prepares what an exporter reads and has it
//! write. The `tprof` binary (profiler/src/main.rs) picks from the list by
//! name (`tprof export --format`) and by extension ([`timeline_for`]) and
//! writes to stdout and files; the golden tests (profiler/core/tests/
//! golden.rs) compare the list's text outputs with committed files; the
//! fuzz target and the odd-recording tests run every exporter over
//! recordings no kernel would produce ([`every_output`]). All take this
//! path, so a format added to the list is fuzzed, reachable from `tprof`,
//! and the goldens hold the bytes a user gets.
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
    flame::{Filter, FlameKind},
    select::Selection,
};
use crate::model::{Assembly, Model};
use crate::recording;
use crate::render::{
    self, flamegraph, json, pprof, report,
    timeline::{
        Limits, TimelineInput,
        tracks::{self, Placement, SlicePolicy},
    },
    trace::{TraceSink, chrome, html, perfetto},
};

pub use crate::render::exporter::{Exporter, Folded, Reads, Stacks, folded};

/// Every format, one line each. The order is the order of help texts and
/// errors that list them.
pub static EXPORTERS: &[&Exporter] = &[
    &report::REPORT,
    &json::JSON,
    &flamegraph::FOLDED,
    &flamegraph::FLAMEGRAPH,
    &flamegraph::FLAMEGRAPH_DIFF,
    &pprof::PPROF,
    &perfetto::PERFETTO,
    &chrome::CHROME,
    &html::HTML,
];

/// The exporter called `name`.
pub fn exporter(name: &str) -> Option<&'static Exporter> {
    EXPORTERS.iter().copied().find(|e| e.name == name)
}

/// The timeline format a file name asks for, by its extension.
pub fn timeline_for(path: &Path) -> Result<&'static Exporter> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let timelines = || EXPORTERS.iter().copied().filter(|e| e.is_timeline());
    let found = timelines().find(|e| ext.as_deref().is_some_and(|x| e.extensions.contains(&x)));
    if let Some(exporter) = found {
        return Ok(exporter);
    }
    let names: Vec<String> = timelines()
        .map(|e| format!("FILE.{} ({})", e.extension(), e.opens_in))
        .collect();
    let names = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    bail!(
        "cannot tell the timeline format of {}: name it {names}",
        path.display()
    )
}

/// What an output is made of.
#[derive(Debug)]
pub struct Input<'a> {
    pub model: &'a Model,
    /// The model's analysis, made when an output first needs it.
    summary: OnceCell<Summary>,
    /// The recording's path: titles and errors name it.
    pub path: &'a Path,
    pub limits: Limits,
    /// The stacks of flamegraphs and profiles: cpu, offcpu or wall.
    pub kind: FlameKind,
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
            kind: FlameKind::Cpu,
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

/// Writes what `exporter` makes of `input` into `out`; an output the
/// recording cannot give (stacks of a recording without stacks) is an
/// error naming it.
pub fn write(exporter: &Exporter, input: &Input, mut out: impl io::Write) -> Result<()> {
    let out: &mut dyn io::Write = &mut out;
    match exporter.reads {
        Reads::Summary(write) => write(input.summary(), out)?,
        Reads::Stacks(write) => {
            let stacks = stacks(input, input.model, input.summary(), input.path)?;
            write(&stacks, out)?;
        }
        Reads::TwoRecordings(write) => {
            let Some((after, after_path)) = input.after else {
                bail!("{} needs a second recording", exporter.name);
            };
            let before = stacks(input, input.model, input.summary(), input.path)?;
            let after_summary = analysis::summarize(after);
            let after = stacks(input, after, &after_summary, after_path)?;
            write(&before, &after, out)?;
        }
        Reads::Timeline { slices, sink } => timeline_into(input, slices, &mut *sink(out))?,
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

/// The stacks of `model` (the recording at `path`, analysed in `summary`)
/// an exporter reads: the input's kind, and its filter with its selection
/// resolved for this recording (time spans, the threads of its roles).
fn stacks<'a>(
    input: &Input,
    model: &'a Model,
    summary: &'a Summary,
    path: &'a Path,
) -> Result<Stacks<'a>> {
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
    Ok(Stacks {
        model,
        roles: &summary.roles,
        recording: path,
        kind: input.kind,
        filter: Filter {
            spans,
            role_threads: resolved.threads,
            ..input.filter.clone()
        },
    })
}

/// `tprof timeline`: model and analysis (roles, steps, deliveries, stalls)
/// → the one layout, titled after the recording, with thread states made
/// into slices by `slices`, into `sink`, which it finishes. Every timeline
/// exporter writes through here.
pub fn timeline_into(input: &Input, slices: SlicePolicy, sink: &mut dyn TraceSink) -> Result<()> {
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
    tracks::lay_out(&timeline, slices, Placement::default(), sink)?;
    sink.finish()?;
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
    for exporter in EXPORTERS {
        let kinds: &[FlameKind] = if exporter.shows_stacks() {
            &FlameKind::ALL
        } else {
            &[FlameKind::Cpu]
        };
        for &kind in kinds {
            input.kind = kind;
            let _ = write(exporter, &input, io::sink());
        }
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

    #[test]
    fn names_are_unique_and_timelines_told_apart_by_extension() {
        for (n, exporter) in EXPORTERS.iter().enumerate() {
            assert!(!exporter.extensions.is_empty(), "{exporter:?}");
            assert!(
                EXPORTERS[..n].iter().all(|e| e.name != exporter.name),
                "two exporters called {}",
                exporter.name
            );
            assert_eq!(
                super::exporter(exporter.name).map(|e| e.name),
                Some(exporter.name)
            );
        }
        let timelines: Vec<&Exporter> = EXPORTERS
            .iter()
            .copied()
            .filter(|e| e.is_timeline())
            .collect();
        let extensions: Vec<&str> = timelines
            .iter()
            .flat_map(|e| e.extensions.iter().copied())
            .collect();
        for (n, ext) in extensions.iter().enumerate() {
            assert!(!extensions[..n].contains(ext), "two timelines write .{ext}");
        }
        assert_eq!(timelines.len(), 3);
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
        let format = |p: &str| timeline_for(Path::new(p)).ok().map(|e| e.name);
        assert_eq!(format("a.json"), Some("chrome"));
        assert_eq!(format("a.HTML"), Some("html"));
        assert_eq!(format("a.htm"), Some("html"));
        assert_eq!(format("a.pftrace"), Some("perfetto"));
        assert_eq!(format("a.svg"), None);
        assert_eq!(format("a"), None);
        let err = timeline_for(Path::new("a.svg")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot tell the timeline format of a.svg: name it FILE.pftrace (Perfetto UI, \
             trace_processor), FILE.json (chrome://tracing, Perfetto UI) or FILE.html (any \
             browser)"
        );
    }
}
