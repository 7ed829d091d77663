//! Code objects named: the qualified name (3.11+; the plain name on 3.10),
//! the file, the first line and the line table, read from the process
//! while it lives, and checked against the fingerprint the kernel took, so
//! a code object freed and another allocated at its address is never named
//! after the wrong one.

use std::sync::Arc;

use profiler_ebpf::{PyProcInfo, python::fingerprint};

use super::layout::CodeLayout;
use super::lines::LineMap;
use super::memory::ProcessMemory;
use profiler_ebpf::python::ReadMem;

/// Longest name or file name read (characters).
const MAX_STR: u64 = 1024;
/// Longest line table read: a bigger one (a generated module-level
/// function) gives its frames no line rather than a long read.
const MAX_LINETABLE: u64 = 64 << 10;

/// What a frame's label needs from its code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeInfo {
    pub name: Arc<str>,
    pub file: Arc<str>,
    pub lines: LineMap,
}

impl CodeInfo {
    /// The line of instruction `lasti`, 0 when unknown.
    pub(crate) fn line(&self, lasti: i32) -> u32 {
        self.lines.line(lasti).unwrap_or(0)
    }
}

/// Reads the code object at `addr` of a process whose interpreter has
/// `info` and `layout`; None when it cannot be read or is not the code
/// object the kernel saw (its fingerprint differs).
pub(crate) fn read_code(
    mem: ProcessMemory,
    info: &PyProcInfo,
    layout: &CodeLayout,
    addr: u64,
    expected: u32,
) -> Option<CodeInfo> {
    let same = || {
        mem.read_u64(addr + u64::from(info.co_fingerprint))
            .is_some_and(|w| fingerprint(w) == expected)
    };
    if !same() {
        return None;
    }
    let name_at = layout.qualname.unwrap_or(layout.name);
    let name = read_str(mem, layout, mem.read_u64(addr + name_at)?)?;
    let file = read_str(mem, layout, mem.read_u64(addr + layout.filename)?)?;
    let firstlineno = mem.read_u32(addr + layout.firstlineno)?;
    let table = mem.read_u64(addr + layout.linetable)?;
    let len = mem.read_u64(table + layout.bytes_size)?;
    let linetable = if len <= MAX_LINETABLE {
        mem.read_vec(table + layout.bytes_data, len as usize)?
    } else {
        Vec::new()
    };
    // Read again: the object may have been freed while we read it.
    if !same() {
        return None;
    }
    Some(CodeInfo {
        name: name.into(),
        file: file.into(),
        lines: LineMap::new(layout.lines, &linetable, firstlineno),
    })
}

/// A `str` object's text: compact strings only (names and file names
/// always are), in their 1-, 2- or 4-byte kind.
fn read_str(mem: ProcessMemory, layout: &CodeLayout, addr: u64) -> Option<String> {
    let length = mem.read_u64(addr + layout.str_length)?;
    if length > MAX_STR {
        return None;
    }
    let state = mem.read_u32(addr + layout.str_state)?;
    // interned:2, kind:3, compact:1, ascii:1 from the low bit up.
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let data = addr
        + if ascii {
            layout.ascii_data
        } else {
            layout.compact_data
        };
    let bytes = mem.read_vec(data, (length * u64::from(kind)) as usize)?;
    Some(match kind {
        1 => bytes.iter().map(|&b| char::from(b)).collect(),
        2 => String::from_utf16_lossy(
            &bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect::<Vec<_>>(),
        ),
        _ => bytes
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}')
            })
            .collect(),
    })
}
