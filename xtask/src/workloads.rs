//! Builds the C workloads of tests/workloads and the fake libraries of
//! tests/fake_cudart and tests/fake_nvml with the flags the integration
//! tests use (tests/support/workload.rs), for the tasks that record them.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::cmd::{self, command, run as run_cmd};

/// Compiles tests/workloads/NAME.c into DIR/NAME: frame pointers and debug
/// info, so stacks walk and symbolize as they would in a real build.
pub(crate) fn build(name: &str, dir: &Path) -> Result<PathBuf> {
    let source = cmd::root()
        .join("tests/workloads")
        .join(format!("{name}.c"));
    let binary = dir.join(name);
    run_cmd(
        command("gcc")
            .args([
                "-O1",
                "-g",
                "-fno-omit-frame-pointer",
                "-pthread",
                "-Wall",
                "-o",
            ])
            .arg(&binary)
            .arg(source),
    )?;
    Ok(binary)
}

/// Compiles SOURCE (relative to the workspace root) into the shared library
/// DIR/FILE_NAME.
pub(crate) fn build_shared(source: &str, dir: &Path, file_name: &str) -> Result<PathBuf> {
    let library = dir.join(file_name);
    run_cmd(
        command("gcc")
            .args([
                "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o",
            ])
            .arg(&library)
            .arg(cmd::root().join(source)),
    )?;
    Ok(library)
}
