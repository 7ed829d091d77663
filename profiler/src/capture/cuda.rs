//! CUDA runtime tracing, userspace half: finds the libcudart each tracked
//! process has mapped (PyTorch loads libcudart.so.N from the
//! nvidia-cuda-runtime wheel; other jobs a system one) and probes it once
//! per library file, for every process mapping it. The kernel programs keep
//! tracked processes only.
//!
//! Processes are scanned when tracking starts, when one appears or execs
//! (the drain loop), and once a second (a job that imports torch, or a
//! worker that maps the library, after tprof started). Calls before a
//! library's probes were attached are not seen; its `attached_ns` says when.
//!
//! [`CudaTracer`] looks for `libcudart*.so*` in each process's executable
//! mappings and probes each file once, by device and inode, through
//! `/proc/<pid>/root` (so a container's library is the one probed). Pinned
//! ranges come from the job's own pinning calls, so no GPU is needed: the
//! tests run the real library without one.

use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;

use anyhow::Result;

use super::programs::{CudaProbes, KernelPrograms};
use tprof_core::recording::{CudaInfo, CudaLibrary};

/// A library file mapped executable by a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedLibrary {
    /// Device ("fd:01") and inode: the file's identity across processes,
    /// mount namespaces and hard links.
    pub dev: String,
    pub inode: u64,
    pub path: String,
}

/// True for a CUDA runtime library's file name: libcudart.so,
/// libcudart.so.12, libcudart.so.12.4.127, libcudart-fake.so (not the
/// static archive).
pub fn is_cuda_runtime(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libcudart") && name.contains(".so")
}

/// The executable file mappings of a `/proc/<pid>/maps` text whose path
/// `wanted` accepts, each file once.
pub fn mapped_libraries(maps: &str, wanted: fn(&str) -> bool) -> Vec<MappedLibrary> {
    let mut out: Vec<MappedLibrary> = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode [path, which may contain spaces]
        let mut fields = line.splitn(6, ' ');
        let (Some(_), Some(perms), Some(_), Some(dev), Some(inode), Some(path)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = path.trim_start();
        // A deleted file cannot be probed by path any more.
        if !perms.contains('x') || !wanted(path) || path.ends_with(" (deleted)") {
            continue;
        }
        let Ok(inode) = inode.parse() else { continue };
        if !out.iter().any(|l| l.dev == dev && l.inode == inode) {
            out.push(MappedLibrary {
                dev: dev.to_string(),
                inode,
                path: path.to_string(),
            });
        }
    }
    out
}

/// Library files of one kind to probe, each once, as processes map them.
#[derive(Default)]
pub(super) struct NewLibraries {
    /// Files already returned (probed, or tried), by (dev, inode).
    seen: HashSet<(String, u64)>,
}

impl NewLibraries {
    /// The files `wanted` accepts among `pid`'s executable mappings that no
    /// earlier call returned, each with the path to open it by: through
    /// the process's root, so a job in another mount namespace (a
    /// container) resolves to its own file. None when the process is gone.
    pub(super) fn in_process(
        &mut self,
        pid: u32,
        wanted: fn(&str) -> bool,
    ) -> Vec<(MappedLibrary, PathBuf)> {
        let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return Vec::new();
        };
        self.in_maps(pid, &maps, wanted)
    }

    /// As [`NewLibraries::in_process`], from `pid`'s maps read already.
    pub(super) fn in_maps(
        &mut self,
        pid: u32,
        maps: &str,
        wanted: fn(&str) -> bool,
    ) -> Vec<(MappedLibrary, PathBuf)> {
        mapped_libraries(maps, wanted)
            .into_iter()
            .filter(|lib| self.seen.insert((lib.dev.clone(), lib.inode)))
            .map(|lib| {
                let file = PathBuf::from(format!("/proc/{pid}/root{}", lib.path));
                (lib, file)
            })
            .collect()
    }
}

/// A library's probes, said on stderr ("tprof: tracing WHAT in PATH (N of
/// ALL functions)") and as the recording keeps them.
pub(super) fn probed_library(
    what: &str,
    lib: MappedLibrary,
    pid: u32,
    now_ns: u64,
    probes: CudaProbes,
    all: usize,
) -> CudaLibrary {
    eprintln!(
        "tprof: tracing {what} in {} ({} of {all} functions)",
        lib.path,
        probes.probed.len(),
    );
    CudaLibrary {
        path: lib.path,
        pid,
        attached_ns: now_ns,
        probed: probes.probed,
        missing: probes.missing,
    }
}

/// The libraries found so far and what was probed in each.
pub struct CudaTracer {
    enabled: bool,
    libraries: NewLibraries,
    info: CudaInfo,
    /// `info` changed since it was last written.
    dirty: bool,
}

impl CudaTracer {
    /// A tracer that probes what it finds, or with `enabled` false one that
    /// only records that CUDA tracing was off.
    pub fn new(enabled: bool) -> CudaTracer {
        CudaTracer {
            enabled,
            libraries: NewLibraries::default(),
            info: CudaInfo {
                status: (!enabled).then(|| "CUDA tracing was off (--no-cuda)".to_string()),
                ..Default::default()
            },
            dirty: false,
        }
    }

    /// Probes the CUDA runtime libraries `pid` has mapped that no other
    /// tracked process had. A process that is gone has nothing to scan.
    pub fn scan(&mut self, programs: &mut KernelPrograms, pid: u32, now_ns: u64) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let found = self.libraries.in_process(pid, is_cuda_runtime);
        self.probe(programs, pid, now_ns, found)
    }

    /// As [`CudaTracer::scan`], in `pid`'s maps read already.
    pub fn scan_maps(
        &mut self,
        programs: &mut KernelPrograms,
        pid: u32,
        maps: &str,
        now_ns: u64,
    ) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let found = self.libraries.in_maps(pid, maps, is_cuda_runtime);
        self.probe(programs, pid, now_ns, found)
    }

    fn probe(
        &mut self,
        programs: &mut KernelPrograms,
        pid: u32,
        now_ns: u64,
        found: Vec<(MappedLibrary, PathBuf)>,
    ) -> Result<()> {
        for (lib, file) in found {
            let probes = programs.attach_cuda(&file)?;
            let all = profiler_ebpf::cuda_fn::ALL.len();
            let library = probed_library("CUDA runtime calls", lib, pid, now_ns, probes, all);
            self.info.libraries.push(library);
            self.dirty = true;
        }
        Ok(())
    }

    /// Reads the cudaLaunchKernel counts; a change is written next time.
    pub fn refresh_launches(&mut self, programs: &KernelPrograms) -> Result<()> {
        if self.info.libraries.is_empty() {
            return Ok(());
        }
        let launches = programs.cuda_launches()?;
        if launches != self.info.launches {
            self.info.launches = launches;
            self.dirty = true;
        }
        Ok(())
    }

    /// The CUDA record, if it changed since the last call.
    pub fn take_changed(&mut self) -> Option<CudaInfo> {
        std::mem::take(&mut self.dirty).then(|| self.info.clone())
    }

    /// The CUDA record as it stands (written once more at the end, so a
    /// recording says that no library was found).
    pub fn info(&self) -> &CudaInfo {
        &self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cuda_runtime_libraries_once() {
        let maps = "\
7f0000000000-7f0000010000 r--p 00000000 fe:01 4242 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
7f0000010000-7f0000080000 r-xp 00010000 fe:01 4242 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
7f0000090000-7f00000a0000 r-xp 00000000 fe:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
7f00000a0000-7f00000b0000 r-xp 00000000 fe:01 99 /tmp/old/libcudart.so.11.0 (deleted)
7f00000b0000-7f00000c0000 r-xp 00000000 fe:02 5 /opt/my libs/libcudart-fake.so
7f00000c0000-7f00000d0000 rw-p 00000000 00:00 0 
";
        let libs = mapped_libraries(maps, is_cuda_runtime);
        assert_eq!(
            libs,
            vec![
                MappedLibrary {
                    dev: "fe:01".into(),
                    inode: 4242,
                    path:
                        "/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
                            .into(),
                },
                MappedLibrary {
                    dev: "fe:02".into(),
                    inode: 5,
                    path: "/opt/my libs/libcudart-fake.so".into(),
                },
            ]
        );
    }

    #[test]
    fn names_of_the_runtime() {
        assert!(is_cuda_runtime("/usr/local/cuda/lib64/libcudart.so"));
        assert!(is_cuda_runtime("libcudart.so.12.4.127"));
        assert!(!is_cuda_runtime("/usr/local/cuda/lib64/libcudart_static.a"));
        assert!(!is_cuda_runtime("/usr/lib/libcuda.so.1"));
        assert!(!is_cuda_runtime("/usr/lib/libcudnn.so.9"));
    }
}
