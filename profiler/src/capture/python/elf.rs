//! A CPython build as its ELF file shows it: where `_PyRuntime` is, which
//! version it is, the layout that version has, and where the eval loop's
//! code lies (to find the native frames Python frames replace). The same
//! for every process that runs the file, so it is read once per file.
//!
//! Only exported symbols are needed: `_PyRuntime`, `Py_Version` and
//! `_PyEval_EvalFrameDefault` are in `.dynsym` even in stripped builds
//! (Debian's static /usr/bin/python3.11 among them), and `_PyRuntime` of
//! 3.13+ begins with `_Py_DebugOffsets`, initialised in the file's data.

use object::{Object, ObjectKind, ObjectSegment, ObjectSymbol};

use super::layout::{self, DEBUG_COOKIE, DEBUG_OFFSETS_LEN, Layout, Unsupported, Version};

/// What one interpreter file holds.
#[derive(Debug, Clone)]
pub(crate) struct Build {
    /// Its layout, or why it has none tprof can walk.
    pub layout: Result<Layout, Unsupported>,
    /// `_PyRuntime`'s virtual address in the file.
    pub runtime_vaddr: u64,
    /// File-offset ranges of the eval loop (`_PyEval_EvalFrameDefault` and
    /// any `.cold` part the symbol table names).
    pub eval_ranges: Vec<(u64, u64)>,
    /// (virtual address, file offset) of each loadable segment, for the
    /// load bias of a mapping.
    pub segments: Vec<(u64, u64)>,
    /// An `ET_EXEC` file (non-PIE): loaded at its own addresses.
    pub fixed_address: bool,
}

/// The build in an ELF file, or None when it holds no `_PyRuntime` (not a
/// CPython interpreter, or not an ELF file). `path` is the file's name,
/// the only clue to 3.10's version (libpython3.10.so, python3.10).
pub(crate) fn inspect(data: &[u8], path: &str) -> Option<Build> {
    let file = object::File::parse(data).ok()?;
    let symbol = |name: &str| {
        file.dynamic_symbols()
            .chain(file.symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .map(|s| s.address())
    };
    let runtime_vaddr = symbol("_PyRuntime")?;
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| (s.address(), s.file_range().0, s.file_range().1))
        .collect();
    let file_offset = |vaddr: u64| -> Option<u64> {
        segments
            .iter()
            .find(|&&(addr, _, size)| vaddr >= addr && vaddr < addr + size)
            .map(|&(addr, offset, _)| vaddr - addr + offset)
    };
    let bytes_at = |vaddr: u64, len: usize| -> Option<&[u8]> {
        let start = file_offset(vaddr)? as usize;
        data.get(start..start.checked_add(len)?)
    };
    let debug_offsets =
        bytes_at(runtime_vaddr, DEBUG_OFFSETS_LEN).filter(|b| b.starts_with(DEBUG_COOKIE));
    let version = match debug_offsets {
        Some(b) => Some(Version::from_hex(u64::from_le_bytes(
            b[8..16].try_into().expect("8 bytes"),
        ))),
        None => symbol("Py_Version")
            .and_then(|v| bytes_at(v, 4))
            .map(|b| Version::from_hex(u64::from(u32::from_le_bytes(b.try_into().expect("4")))))
            .or_else(|| version_in_name(path)),
    };
    let layout = match version {
        Some(v) => layout::layout(v, debug_offsets),
        None => Err(Unsupported::UnknownVersion),
    };
    let eval_ranges = file
        .dynamic_symbols()
        .chain(file.symbols())
        .filter(|s| {
            s.name().is_ok_and(|n| {
                n == "_PyEval_EvalFrameDefault" || n.starts_with("_PyEval_EvalFrameDefault.")
            }) && s.size() > 0
        })
        .filter_map(|s| file_offset(s.address()).map(|start| (start, start + s.size())))
        .collect();
    Some(Build {
        layout,
        runtime_vaddr,
        eval_ranges,
        segments: segments.iter().map(|&(a, o, _)| (a, o)).collect(),
        fixed_address: file.kind() == ObjectKind::Executable,
    })
}

/// 3.10 from a file name such as `libpython3.10.so.1.0` or `python3.10`.
pub(crate) fn version_in_name(path: &str) -> Option<Version> {
    let name = path.rsplit('/').next()?;
    let rest = &name[name.find("python")? + "python".len()..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(Version::new(major.parse().ok()?, minor.parse().ok()?))
}

impl Build {
    /// Where the file is loaded in a process that maps its bytes at file
    /// offset `offset` to address `start`: what to add to a virtual address
    /// of the file.
    pub(crate) fn load_bias(&self, start: u64, offset: u64) -> Option<u64> {
        if self.fixed_address {
            return Some(0);
        }
        const PAGE: u64 = 4096;
        // The segment this mapping begins: its page-aligned file offset.
        let &(vaddr, _) = self
            .segments
            .iter()
            .find(|&&(_, off)| off & !(PAGE - 1) == offset)?;
        start.checked_sub(vaddr & !(PAGE - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        assert_eq!(
            version_in_name("/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0"),
            Some(Version::new(3, 10))
        );
        assert_eq!(
            version_in_name("/usr/bin/python3.11"),
            Some(Version::new(3, 11))
        );
        assert_eq!(version_in_name("/usr/bin/python3"), None);
        assert_eq!(version_in_name("/usr/lib/libc.so.6"), None);
    }

    #[test]
    fn not_python() {
        let own = std::fs::read("/proc/self/exe").unwrap();
        assert!(inspect(&own, "/proc/self/exe").is_none());
        assert!(inspect(b"not an elf", "x").is_none());
    }

    #[test]
    fn bias_of_shared_and_fixed_builds() {
        let shared = Build {
            layout: Err(Unsupported::UnknownVersion),
            runtime_vaddr: 0,
            eval_ranges: Vec::new(),
            segments: vec![(0, 0), (0x6_5000, 0x6_5000), (0x2a_4d30, 0x2a_3d30)],
            fixed_address: false,
        };
        assert_eq!(
            shared.load_bias(0x7f00_0000_0000, 0),
            Some(0x7f00_0000_0000)
        );
        assert_eq!(
            shared.load_bias(0x7f00_0006_5000, 0x6_5000),
            Some(0x7f00_0000_0000)
        );
        assert_eq!(
            shared.load_bias(0x7f00_002a_4000, 0x2a_3000),
            Some(0x7f00_0000_0000)
        );
        let fixed = Build {
            fixed_address: true,
            ..shared
        };
        assert_eq!(fixed.load_bias(0x40_0000, 0), Some(0));
    }
}
