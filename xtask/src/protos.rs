//! `cargo xtask protos [--check]`: regenerates tprof-core's protobuf code
//! from profiler/core/proto/ (tprof-protogen), or checks the committed code
//! is what the .proto files give.

use anyhow::Result;

use crate::cmd::{self, run};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Fail if the committed code differs instead of rewriting it.
    #[arg(long)]
    pub check: bool,
}

pub(crate) fn run_task(args: &Args) -> Result<()> {
    let core = cmd::root().join("profiler/core");
    let mut command = cmd::cargo();
    command
        .args(["run", "--quiet", "-p", "tprof-protogen", "--"])
        .arg(&core);
    if args.check {
        command.arg("--check");
    }
    run(&mut command)
}
