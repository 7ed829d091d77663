//! The `tprof` binary: parse arguments, run one pipeline, print `error: …`
//! and exit non-zero on failure.

use std::{
    io::{self, Write as _},
    path::Path,
    process::ExitCode,
};

use anyhow::Result;
use clap::Parser as _;
use profiler::{analysis, capture, model::Model, recording, render};

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
            if !args.no_report {
                report(&outcome.path, false)?;
            }
            Ok(())
        }
        cli::Command::Report(args) => report(&args.path, args.json),
    }
}

/// recording → model → analysis → render: the one path every output takes.
fn report(path: &Path, json: bool) -> Result<()> {
    let rec = recording::read(path)?;
    let model = Model::build(&rec);
    let summary = analysis::summarize(&model);
    let text = if json {
        render::json::render(&summary)
    } else {
        render::report::render(&summary)
    };
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
