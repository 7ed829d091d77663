//! The `tprof` binary: parse arguments, run one pipeline, print `error: …`
//! and exit non-zero on failure. What each output is made of lives in
//! `tprof_core::outputs` (the list of exporters the fuzzer runs too); this
//! file picks from it and adds files, stdout and messages.
//!
//! `tprof top` watches live (`top::run`, on `capture::watch`).
//! `tprof record` records (`capture::record`), then `record_outputs` loads
//! the model once and writes REC.cpu.svg and REC.wall.svg and
//! REC.timeline.html and REC.timeline.json beside the recording (each can
//! be turned off), then prints the report. Every command that reads a
//! recording loads its model the same way (`outputs::load_model`, which
//! streams the events). A closed stdout pipe (`tprof report x | head`)
//! exits 0.

use std::{
    io::{self, Write as _},
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context as _, Result};
use clap::Parser as _;
use profiler::{
    analysis::{self, flame::FlameKind},
    capture,
    model::Model,
    output,
    outputs::{self, Exporter, Input, load_model},
    render::{
        flamegraph::{FLAMEGRAPH, FLAMEGRAPH_DIFF, FOLDED},
        json::JSON,
        report::REPORT,
        timeline::Limits,
        trace::{chrome::CHROME, html::HTML},
    },
};

mod cli;
mod merge;
mod top;

fn main() -> ExitCode {
    // The helper that finishes detaching after tprof exits
    // (capture::release), started by tprof itself, not by users: kept out
    // of the command line's subcommands and help.
    // Read as OsStrings: any argument may be a path that is not UTF-8.
    let args: Vec<_> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == capture::RELEASE_SUBCOMMAND)
    {
        let fds: Vec<i32> = args[2..]
            .iter()
            .filter_map(|a| a.to_str()?.parse().ok())
            .collect();
        capture::release(&fds);
        return ExitCode::SUCCESS;
    }
    capture::serve_release();
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
            let flamegraphs = options.capture.sample_hz.is_some() && !args.no_flamegraphs;
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
        cli::Command::Top(args) => top::run(&args.to_options()?),
        cli::Command::Report(args) => report(&args.path, args.json),
        cli::Command::Flamegraph(args) => flamegraph(&args),
        cli::Command::Timeline(args) => timeline(&args),
        cli::Command::Export(args) => export(&args),
        cli::Command::Merge(args) => merge::run(&args),
    }
}

/// `tprof timeline`: the timeline of a recording as trace event JSON, a
/// Perfetto trace or an HTML page.
fn timeline(args: &cli::TimelineArgs) -> Result<()> {
    let (out, format) = args.output_and_format()?;
    let model = load_model(&args.path)?;
    let mut input = Input::new(&model, &args.path);
    input.limits = Limits {
        min_slice_ns: args.min_slice.as_nanos().max(1) as u64,
        ..Limits::default()
    };
    input.selection = args.select.selection();
    write_file(format, &input, &out, args.force)?;
    eprintln!("tprof: wrote {}", out.display());
    Ok(())
}

/// `tprof export`: a recording for other tools, in any format of the list
/// (a Perfetto trace of every slice, a pprof profile, …).
fn export(args: &cli::ExportArgs) -> Result<()> {
    let model = load_model(&args.path)?;
    let mut input = Input::new(&model, &args.path);
    input.kind = FlameKind::from(args.kind);
    input.filter = args.filter();
    input.selection = args.select.selection();
    // Every interval as recorded: Perfetto loads them all, and a format
    // that cannot merges only what it must to fit.
    input.limits.min_slice_ns = 1;
    let out = args.output_path();
    write_file(args.format, &input, &out, args.force)?;
    eprintln!("tprof: wrote {}", out.display());
    Ok(())
}

/// Writes one output to the file `out`. Timelines stream into the file as
/// they are laid out; the others are made first, so an output the
/// recording cannot give (no stacks) leaves no empty file behind.
fn write_file(exporter: &Exporter, input: &Input, out: &Path, force: bool) -> Result<()> {
    let failed = || format!("writing {} failed", out.display());
    if exporter.is_timeline() {
        let file = io::BufWriter::with_capacity(1 << 20, output::create(out, force)?);
        return outputs::write(exporter, input, file).with_context(failed);
    }
    let mut bytes = Vec::new();
    outputs::write(exporter, input, &mut bytes)?;
    output::create(out, force)?
        .write_all(&bytes)
        .with_context(failed)
}

/// `tprof flamegraph`: one recording's SVG or folded stacks, or the
/// differential SVG of two.
fn flamegraph(args: &cli::FlamegraphArgs) -> Result<()> {
    let kind = FlameKind::from(args.kind);
    let model = load_model(&args.path)?;
    let mut input = Input::new(&model, &args.path);
    input.kind = kind;
    input.filter = args.filter();
    input.selection = args.select.selection();
    if args.folded {
        let mut text = Vec::new();
        outputs::write(&FOLDED, &input, &mut text)?;
        io::stdout().lock().write_all(&text)?;
        return Ok(());
    }
    let after_model = match &args.after {
        Some(after) => Some((load_model(after)?, after.as_path())),
        None => None,
    };
    input.after = after_model.as_ref().map(|(m, p)| (m, *p));
    // record already wrote REC.cpu.svg and REC.wall.svg: a diff gets a name
    // of its own.
    let (exporter, default_out) = match &args.after {
        Some(after) => (&FLAMEGRAPH_DIFF, svg_path(after, kind, ".diff")),
        None => (&FLAMEGRAPH, svg_path(&args.path, kind, "")),
    };
    let out = args.output.clone().unwrap_or(default_out);
    write_file(exporter, &input, &out, args.force)?;
    eprintln!("tprof: wrote {}", out.display());
    Ok(())
}

/// What `tprof record` writes next to the recording: the flamegraphs and
/// the timelines, from one reading of it. Each that fails is a warning and
/// does not stop the others.
fn record_outputs(recording: &Path, flamegraphs: bool, timelines: bool, force: bool) -> Result<()> {
    let model = load_model(recording)?;
    let mut input = Input::new(&model, recording);
    if flamegraphs {
        record_flamegraphs(&mut input, recording, force);
    }
    if !timelines {
        return Ok(());
    }
    for format in [&HTML, &CHROME] {
        let out = cli::timeline_path(recording, format);
        match write_file(format, &input, &out, force) {
            Ok(()) => eprintln!("tprof: timeline written to {}", out.display()),
            Err(err) => eprintln!("tprof: warning: {err:#}"),
        }
    }
    Ok(())
}

/// `tprof record`'s flamegraphs: cpu and wall, next to the recording. A
/// job that never ran while sampled has no cpu graph; that is a note, not a
/// failure of the recording.
fn record_flamegraphs(input: &mut Input, recording: &Path, force: bool) {
    for kind in [FlameKind::Cpu, FlameKind::Wall] {
        if !has_stacks(input.model, kind) {
            eprintln!(
                "tprof: no {} stacks were sampled; no {} flamegraph",
                kind.name(),
                kind.name()
            );
            continue;
        }
        let out = svg_path(recording, kind, "");
        input.kind = kind;
        match write_file(&FLAMEGRAPH, input, &out, force) {
            Ok(()) => eprintln!(
                "tprof: {} flamegraph written to {}",
                kind.name(),
                out.display()
            ),
            Err(err) => eprintln!("tprof: warning: {err:#}"),
        }
    }
}

fn has_stacks(model: &Model, kind: FlameKind) -> bool {
    !analysis::flame::fold(model, kind, &Default::default()).is_empty()
}

/// `REC.KIND[SUFFIX].svg` next to the recording `REC`.
fn svg_path(recording: &Path, kind: FlameKind, suffix: &str) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(format!(".{}{suffix}.svg", kind.name()));
    PathBuf::from(name)
}

/// `tprof report`: recording → model → analysis → render, to stdout.
fn report(path: &Path, json: bool) -> Result<()> {
    let model = load_model(path)?;
    let mut text = Vec::new();
    let exporter = if json { &JSON } else { &REPORT };
    outputs::write(exporter, &Input::new(&model, path), &mut text)?;
    io::stdout().lock().write_all(&text)?;
    Ok(())
}

/// A reader that closed our stdout (`tprof report x | head`) is not an error.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
