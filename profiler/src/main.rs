//! The `tprof` binary: parse arguments, run one pipeline, print `error: …`
//! and exit non-zero on failure.

use std::{
    io::{self, Write as _},
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context as _, Result};
use clap::Parser as _;
use profiler::{
    analysis::{
        self, Summary,
        flame::{self, Filter, FlameKind},
    },
    capture,
    model::Model,
    output,
    outputs::{self, Folded, TimelineFormat, load_model},
    render::{self, timeline::Limits},
};

mod cli;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: cli::Cli) -> Result<()> {
    match cli.command {
        cli::Command::Record(args) => {
            let options = args.to_options()?;
            let outcome = capture::record(&options)?;
            // The recording is safe on disk by now: a flamegraph or timeline
            // that cannot be written is a warning, not a failed recording.
            let flamegraphs = options.sample_hz.is_some() && !args.no_flamegraphs;
            if flamegraphs || !args.no_timeline {
                let outputs =
                    record_outputs(&outcome.path, flamegraphs, !args.no_timeline, options.force);
                if let Err(err) = outputs {
                    eprintln!("tprof: warning: {err:#}");
                }
            }
            if !args.no_report {
                report(&outcome.path, false)?;
            }
            Ok(())
        }
        cli::Command::Report(args) => report(&args.path, args.json),
        cli::Command::Flamegraph(args) => flamegraph(&args),
        cli::Command::Timeline(args) => timeline(&args),
    }
}

/// `tprof timeline`: the timeline of a recording as trace event JSON or
/// an HTML page.
fn timeline(args: &cli::TimelineArgs) -> Result<()> {
    let (out, format) = args.output_and_format()?;
    let model = load_model(&args.path)?;
    let summary = analysis::summarize(&model);
    let limits = Limits {
        min_slice_ns: args.min_slice.as_nanos().max(1) as u64,
        ..Limits::default()
    };
    write_timeline(
        &model, &summary, &args.path, &out, format, limits, args.force,
    )?;
    eprintln!("tprof: wrote {}", out.display());
    Ok(())
}

/// One timeline file ([`outputs::timeline`]).
fn write_timeline(
    model: &Model,
    summary: &Summary,
    recording: &Path,
    out: &Path,
    format: TimelineFormat,
    limits: Limits,
    force: bool,
) -> Result<()> {
    let file = io::BufWriter::new(output::create(out, force)?);
    outputs::timeline(model, summary, recording, format, limits, file)
        .with_context(|| format!("writing {} failed", out.display()))
}

/// `tprof flamegraph`: one recording's SVG or folded stacks, or the
/// differential SVG of two.
fn flamegraph(args: &cli::FlamegraphArgs) -> Result<()> {
    let kind = FlameKind::from(args.kind);
    let filter = args.filter();
    let (lines, note) = folded(&args.path, kind, &filter)?;
    if args.folded {
        io::stdout()
            .lock()
            .write_all(flame::folded_text(&lines).as_bytes())?;
        return Ok(());
    }
    // record already wrote REC.cpu.svg and REC.wall.svg: a diff gets a name
    // of its own.
    let default_out = match &args.after {
        Some(after) => svg_path(after, kind, ".diff"),
        None => svg_path(&args.path, kind, ""),
    };
    let out = args.output.clone().unwrap_or(default_out);
    let file = output::create(&out, args.force)?;
    match &args.after {
        Some(after) => {
            let (after_lines, after_note) = folded(after, kind, &filter)?;
            let note = diff_note(&args.path, note, after, after_note);
            let title = format!(
                "tprof {} flamegraph: {} → {}",
                kind.name(),
                args.path.display(),
                after.display()
            );
            render::flamegraph::diff_svg(&lines, &after_lines, kind, &title, note.as_deref(), file)
        }
        None => {
            let title = title(kind, &args.path);
            render::flamegraph::svg(&lines, kind, &title, note.as_deref(), file)
        }
    }
    .with_context(|| format!("writing {} failed", out.display()))?;
    eprintln!("tprof: wrote {}", out.display());
    Ok(())
}

/// The folded stacks of a recording ([`outputs::folded`]) and what it lost
/// ([`render::loss_note`]).
fn folded(path: &Path, kind: FlameKind, filter: &Filter) -> Result<(Folded, Option<String>)> {
    let model = load_model(path)?;
    let lines = outputs::folded(&model, path, kind, filter)?;
    Ok((lines, render::loss_note(&model.lost, model.cut_short)))
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

/// What `tprof record` writes next to the recording: the flamegraphs and
/// the timelines, from one reading of it. Each that fails is a warning and
/// does not stop the others.
fn record_outputs(recording: &Path, flamegraphs: bool, timelines: bool, force: bool) -> Result<()> {
    let model = load_model(recording)?;
    if flamegraphs && let Err(err) = record_flamegraphs(&model, recording, force) {
        eprintln!("tprof: warning: {err:#}");
    }
    if !timelines {
        return Ok(());
    }
    let summary = analysis::summarize(&model);
    for format in [TimelineFormat::Html, TimelineFormat::Json] {
        let out = cli::timeline_path(recording, format);
        let limits = Limits::default();
        match write_timeline(&model, &summary, recording, &out, format, limits, force) {
            Ok(()) => eprintln!("tprof: timeline written to {}", out.display()),
            Err(err) => eprintln!("tprof: warning: {err:#}"),
        }
    }
    Ok(())
}

/// `tprof record`'s flamegraphs: cpu and wall, next to the recording. A
/// job that never ran while sampled has no cpu graph; that is a note, not a
/// failure of the recording.
fn record_flamegraphs(model: &Model, recording: &Path, force: bool) -> Result<()> {
    let note = render::loss_note(&model.lost, model.cut_short);
    for kind in [FlameKind::Cpu, FlameKind::Wall] {
        let lines = flame::fold(model, kind, &Filter::default());
        if lines.is_empty() {
            eprintln!(
                "tprof: no {} stacks were sampled; no {} flamegraph",
                kind.name(),
                kind.name()
            );
            continue;
        }
        let out = svg_path(recording, kind, "");
        let file = output::create(&out, force)?;
        render::flamegraph::svg(&lines, kind, &title(kind, recording), note.as_deref(), file)
            .with_context(|| format!("writing {} failed", out.display()))?;
        eprintln!(
            "tprof: {} flamegraph written to {}",
            kind.name(),
            out.display()
        );
    }
    Ok(())
}

/// `REC.KIND[SUFFIX].svg` next to the recording `REC`.
fn svg_path(recording: &Path, kind: FlameKind, suffix: &str) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(format!(".{}{suffix}.svg", kind.name()));
    PathBuf::from(name)
}

fn title(kind: FlameKind, recording: &Path) -> String {
    let what = match kind {
        FlameKind::Cpu => "on-CPU samples",
        FlameKind::OffCpu => "off-CPU time by reason",
        FlameKind::Wall => "wall-clock time (on- and off-CPU)",
    };
    format!("tprof: {what} — {}", recording.display())
}

/// `tprof report`: recording → model → analysis → render, to stdout.
fn report(path: &Path, json: bool) -> Result<()> {
    let model = load_model(path)?;
    let summary = analysis::summarize(&model);
    let text = outputs::report(&summary, json);
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

/// A reader that closed our stdout (`tprof report x | head`) is not an error.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
