//! The CUDA runtime libraries the CUDA tests trace: the fake libcudart in
//! tests/fake_cudart (sleeps stand in for transfers), and the real one from
//! the nvidia-cuda-runtime wheel that `cargo xtask setup` installs.

use std::path::PathBuf;

use crate::tprof::wait_for_release_helpers;
use crate::workload::{build_shared_lib, workspace_root};

/// Builds tests/fake_cudart/fake_cudart.c (once) as
/// target/fake_cudart/libcudart-fake.so: a name tprof takes for a CUDA
/// runtime, as it would libcudart.so.12.
pub fn fake_cudart() -> PathBuf {
    wait_for_release_helpers();
    let source = workspace_root().join("tests/fake_cudart/fake_cudart.c");
    build_shared_lib(&source, "fake_cudart", "libcudart-fake", &[])
}

/// The real libcudart.so.12 of the nvidia-cuda-runtime-cu12 wheel, as
/// `cargo xtask setup` installs it (xtask/src/setup.rs).
pub fn real_cudart() -> PathBuf {
    wait_for_release_helpers();
    let path =
        workspace_root().join("target/cuda-runtime/site/nvidia/cuda_runtime/lib/libcudart.so.12");
    assert!(
        path.is_file(),
        "the real CUDA runtime is missing at {}: run `cargo xtask setup` (it pip-installs \
         nvidia-cuda-runtime-cu12 into target/)",
        path.display()
    );
    path
}
