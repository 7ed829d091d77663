//! `tprof merge`: the recordings of a multi-node job, one per node or rank,
//! into one Perfetto trace (each recording a machine of its own, placed by
//! its wall-clock anchor) and the cross-node report on stdout.
//!
//! It opens every recording first (a bad one fails before any work), names
//! each machine (`outputs::node_names`), then `outputs::merge` loads one
//! model at a time, lays it out into the one Perfetto sink, keeps its
//! `RankFacts` and drops it, so memory is one model's however many nodes
//! there are.

use std::io::{self, Write as _};

use anyhow::{Context as _, Result};
use profiler::{output, outputs, recording::reader, render};

use crate::cli::MergeArgs;

pub(crate) fn run(args: &MergeArgs) -> Result<()> {
    // Every input is read as a recording before the trace is started, so a
    // wrong path fails before anything is written.
    let opened: Vec<reader::Opened> = args
        .paths
        .iter()
        .map(|p| reader::open(p))
        .collect::<Result<_>>()?;
    let files: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
    let identities: Vec<(String, Option<u32>, String)> = opened
        .iter()
        .zip(&files)
        .map(|(o, file)| {
            let header = &o.meta.header;
            let rank = header
                .node
                .as_ref()
                .and_then(|n| n.rank.as_ref())
                .and_then(|r| r.rank);
            (header.hostname.clone(), rank, file.clone())
        })
        .collect();
    let names = outputs::node_names(&identities);
    let recordings = opened
        .iter()
        .zip(files)
        .zip(names)
        .map(|((o, file), name)| Ok((outputs::model_of(o)?, file, name)));
    let trace = match &args.output {
        Some(path) => Some(io::BufWriter::with_capacity(
            1 << 20,
            output::create(path, args.force)?,
        )),
        None => None,
    };
    let report = outputs::merge(recordings, trace).with_context(|| match &args.output {
        Some(path) => format!("merging into {} failed", path.display()),
        None => "merging failed".to_string(),
    })?;
    if let Some(path) = &args.output {
        eprintln!("tprof: wrote {}", path.display());
    }
    let text = if args.json {
        render::cross_node::json(&report)
    } else {
        render::cross_node::text(&report)
    };
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
