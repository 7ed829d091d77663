//! Where each supported CPython keeps what tprof reads: the thread list and
//! frame chain the kernel walks ([`PyProcInfo`]), and the code objects,
//! strings and line tables capture reads to name frames ([`CodeLayout`]).
//!
//! 3.13 and later say so themselves: `_PyRuntime` begins with
//! `_Py_DebugOffsets`, statically initialised, so it is read from the ELF
//! file ([`from_debug_offsets`]). 3.10 to 3.12 do not: their offsets are a
//! table ([`table`]), checked against every installed interpreter by this
//! module's tests (which walk live interpreters with the kernel's own walk
//! code).

use profiler_ebpf::{
    PyProcInfo,
    python::{info_flags, layout},
};

/// A CPython minor version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Version {
    pub major: u8,
    pub minor: u8,
}

impl Version {
    pub(crate) const fn new(major: u8, minor: u8) -> Version {
        Version { major, minor }
    }

    /// From `PY_VERSION_HEX` (0x030b07f0 for 3.11.7 final).
    pub(crate) fn from_hex(hex: u64) -> Version {
        Version::new((hex >> 24) as u8, (hex >> 16) as u8)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The oldest and newest versions tprof walks.
pub(crate) const OLDEST: Version = Version::new(3, 10);
pub(crate) const NEWEST: Version = Version::new(3, 14);

/// How a code object maps instructions to lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineTable {
    /// 3.10: PEP 626 `co_linetable`, (byte delta, line delta) pairs.
    Pep626,
    /// 3.11+: the location table (`Objects/locations.md`).
    Locations,
}

/// Offsets capture reads a code object's names and lines at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodeLayout {
    pub filename: u64,
    pub name: u64,
    /// `co_qualname` (3.11+).
    pub qualname: Option<u64>,
    pub linetable: u64,
    pub firstlineno: u64,
    /// `PyASCIIObject.length` and `.state`.
    pub str_length: u64,
    pub str_state: u64,
    /// Where a compact ASCII string's characters start
    /// (`sizeof(PyASCIIObject)`), and any other compact string's
    /// (`sizeof(PyCompactUnicodeObject)`).
    pub ascii_data: u64,
    pub compact_data: u64,
    /// `PyBytesObject.ob_size` and `.ob_sval`.
    pub bytes_size: u64,
    pub bytes_data: u64,
    pub lines: LineTable,
}

/// Everything tprof needs to know about one CPython version's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub version: Version,
    /// For the kernel, with `runtime` left 0 (each process has its own).
    pub info: PyProcInfo,
    pub code: CodeLayout,
}

/// The layout of a version without `_Py_DebugOffsets` (3.10–3.12), or
/// None for any other.
pub(crate) fn table(version: Version) -> Option<Layout> {
    let v = |minor| version == Version::new(3, minor);
    let (info, code) = if v(10) {
        (
            PyProcInfo {
                layout: layout::FRAME_OBJECT,
                flags: info_flags::MATCH_FSBASE,
                interp_head: 32,
                interp_next: 0,
                threads_head: 8,
                ts_next: 8,
                ts_match: 176,
                ts_frame: 24,
                fr_back: 24,
                fr_code: 32,
                fr_instr: 96,
                // co_flags and co_firstlineno.
                co_fingerprint: 36,
                ..base_info()
            },
            CodeLayout {
                filename: 104,
                name: 112,
                qualname: None,
                linetable: 120,
                firstlineno: 40,
                ascii_data: 48,
                compact_data: 72,
                lines: LineTable::Pep626,
                ..base_code()
            },
        )
    } else if v(11) {
        (
            PyProcInfo {
                layout: layout::CFRAME,
                flags: info_flags::ENTRY_FLAG,
                interp_head: 40,
                interp_next: 0,
                threads_head: 16,
                ts_next: 8,
                ts_match: 160,
                ts_frame: 56,
                cframe_current: 8,
                fr_code: 32,
                fr_back: 48,
                fr_instr: 56,
                fr_owner: 68,
                co_adaptive: 184,
                // co_stacksize and co_firstlineno.
                co_fingerprint: 68,
                ..base_info()
            },
            CodeLayout {
                filename: 112,
                name: 120,
                qualname: Some(128),
                linetable: 136,
                firstlineno: 72,
                ascii_data: 48,
                compact_data: 72,
                ..base_code()
            },
        )
    } else if v(12) {
        (
            PyProcInfo {
                layout: layout::CFRAME,
                flags: info_flags::OWNER,
                interp_head: 40,
                interp_next: 0,
                threads_head: 72,
                ts_next: 8,
                ts_match: 144,
                ts_frame: 56,
                cframe_current: 0,
                fr_code: 0,
                fr_back: 8,
                fr_instr: 56,
                fr_owner: 70,
                co_adaptive: 192,
                co_fingerprint: 64,
                ..base_info()
            },
            CodeLayout {
                filename: 112,
                name: 120,
                qualname: Some(128),
                linetable: 136,
                firstlineno: 68,
                ascii_data: 40,
                compact_data: 56,
                ..base_code()
            },
        )
    } else {
        return None;
    };
    Some(Layout {
        version,
        info: PyProcInfo {
            version: u16::from(version.major) << 8 | u16::from(version.minor),
            ..info
        },
        code,
    })
}

fn base_info() -> PyProcInfo {
    PyProcInfo {
        code_mask: !0,
        ..PyProcInfo::default()
    }
}

fn base_code() -> CodeLayout {
    CodeLayout {
        filename: 0,
        name: 0,
        qualname: None,
        linetable: 0,
        firstlineno: 0,
        str_length: 16,
        str_state: 32,
        ascii_data: 0,
        compact_data: 0,
        bytes_size: 16,
        bytes_data: 32,
        lines: LineTable::Locations,
    }
}

/// `_Py_DebugOffsets.cookie`.
pub(crate) const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";
/// Bytes of `_Py_DebugOffsets` read: more than either layout's fields.
pub(crate) const DEBUG_OFFSETS_LEN: usize = 1024;

/// Why a build cannot be walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// A version tprof has no layout for.
    Version(Version),
    /// A free-threaded (no-GIL) build: other frame tags and bytecode copies.
    FreeThreaded(Version),
    /// `_Py_DebugOffsets` that do not read as any layout tprof knows.
    DebugOffsets(String),
    /// No way to tell the version.
    UnknownVersion,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsupported::Version(v) => write!(f, "CPython {v} (tprof reads {OLDEST} to {NEWEST})"),
            Unsupported::FreeThreaded(v) => write!(f, "free-threaded CPython {v}"),
            Unsupported::DebugOffsets(why) => write!(f, "unreadable _Py_DebugOffsets: {why}"),
            Unsupported::UnknownVersion => write!(f, "a CPython of unknown version"),
        }
    }
}

/// Word indexes of the fields tprof reads in `_Py_DebugOffsets`, which
/// grew new fields in 3.14 (so everything after the interpreter state
/// moved).
struct DebugFields {
    interpreters_head: usize,
    interp_next: usize,
    threads_head: usize,
    ts_next: usize,
    ts_interp: usize,
    ts_current_frame: usize,
    ts_native_thread_id: usize,
    frame_size: usize,
    frame_previous: usize,
    frame_executable: usize,
    frame_instr_ptr: usize,
    frame_owner: usize,
    code_filename: usize,
    code_name: usize,
    code_qualname: usize,
    code_linetable: usize,
    code_firstlineno: usize,
    code_adaptive: usize,
    pyobject_ob_type: usize,
    bytes_ob_size: usize,
    bytes_ob_sval: usize,
    unicode_state: usize,
    unicode_length: usize,
    unicode_ascii_size: usize,
}

/// 3.13: no `threads_main` and friends.
const FIELDS_3_13: DebugFields = DebugFields {
    interpreters_head: 5,
    interp_next: 8,
    threads_head: 9,
    ts_next: 21,
    ts_interp: 22,
    ts_current_frame: 23,
    ts_native_thread_id: 25,
    frame_size: 28,
    frame_previous: 29,
    frame_executable: 30,
    frame_instr_ptr: 31,
    frame_owner: 33,
    code_filename: 35,
    code_name: 36,
    code_qualname: 37,
    code_linetable: 38,
    code_firstlineno: 39,
    code_adaptive: 43,
    pyobject_ob_type: 45,
    bytes_ob_size: 65,
    bytes_ob_sval: 66,
    unicode_state: 68,
    unicode_length: 69,
    unicode_ascii_size: 70,
};

/// 3.14: `threads_main`, `code_object_generation` and `tlbc_generation` in
/// the interpreter state, `stackpointer` and `tlbc_index` in the frame,
/// `co_tlbc` in the code object, and a set object before the dict.
const FIELDS_3_14: DebugFields = DebugFields {
    interpreters_head: 5,
    interp_next: 8,
    threads_head: 9,
    ts_next: 24,
    ts_interp: 25,
    ts_current_frame: 26,
    ts_native_thread_id: 28,
    frame_size: 31,
    frame_previous: 32,
    frame_executable: 33,
    frame_instr_ptr: 34,
    frame_owner: 36,
    code_filename: 40,
    code_name: 41,
    code_qualname: 42,
    code_linetable: 43,
    code_firstlineno: 44,
    code_adaptive: 48,
    pyobject_ob_type: 51,
    bytes_ob_size: 75,
    bytes_ob_sval: 76,
    unicode_state: 78,
    unicode_length: 79,
    unicode_ascii_size: 80,
};

/// The version and layout `_Py_DebugOffsets` (the first bytes of
/// `_PyRuntime`, at least [`DEBUG_OFFSETS_LEN`] of them) describe.
pub(crate) fn from_debug_offsets(bytes: &[u8]) -> Result<Layout, Unsupported> {
    let word = |i: usize| -> u64 {
        bytes.get(i * 8..i * 8 + 8).map_or(u64::MAX, |b| {
            u64::from_le_bytes(b.try_into().expect("8 bytes"))
        })
    };
    if bytes.get(..8) != Some(DEBUG_COOKIE.as_slice()) {
        return Err(Unsupported::DebugOffsets("no xdebugpy cookie".into()));
    }
    let version = Version::from_hex(word(1));
    if word(2) != 0 {
        return Err(Unsupported::FreeThreaded(version));
    }
    let f = match (version.major, version.minor) {
        (3, 13) => &FIELDS_3_13,
        (3, 14) => &FIELDS_3_14,
        _ => return Err(Unsupported::Version(version)),
    };
    // Fields every CPython has at the same place: a layout that does not
    // put them there was read with the wrong field list.
    let fixed = [
        (f.ts_next, 8, "PyThreadState.next"),
        (f.ts_interp, 16, "PyThreadState.interp"),
        (f.frame_previous, 8, "_PyInterpreterFrame.previous"),
        (f.pyobject_ob_type, 8, "PyObject.ob_type"),
        (f.bytes_ob_sval, 32, "PyBytesObject.ob_sval"),
        (f.unicode_length, 16, "PyASCIIObject.length"),
    ];
    for (index, expected, name) in fixed {
        if word(index) != expected {
            return Err(Unsupported::DebugOffsets(format!(
                "{name} at {} where every CPython has it at {expected}",
                word(index)
            )));
        }
    }
    let small = |index: usize, name: &str| -> Result<u16, Unsupported> {
        u16::try_from(word(index))
            .map_err(|_| Unsupported::DebugOffsets(format!("{name} at {} is too far", word(index))))
    };
    // The walk reads a frame's first 128 bytes.
    let in_frame = |index: usize, name: &str| -> Result<u16, Unsupported> {
        let off = small(index, name)?;
        if off > 120 || word(f.frame_size) < u64::from(off) {
            return Err(Unsupported::DebugOffsets(format!(
                "_PyInterpreterFrame.{name} at {off} is beyond what the walk reads"
            )));
        }
        Ok(off)
    };
    let firstlineno = small(f.code_firstlineno, "co_firstlineno")?;
    let info = PyProcInfo {
        runtime: 0,
        // 3.14's f_executable is a _PyStackRef, its low bits a tag.
        code_mask: if version.minor >= 14 { !7 } else { !0 },
        version: u16::from(version.major) << 8 | u16::from(version.minor),
        layout: layout::CURRENT_FRAME,
        flags: info_flags::OWNER,
        interp_head: small(f.interpreters_head, "interpreters.head")?,
        interp_next: small(f.interp_next, "PyInterpreterState.next")?,
        threads_head: small(f.threads_head, "threads.head")?,
        ts_next: 8,
        ts_match: small(f.ts_native_thread_id, "native_thread_id")?,
        ts_frame: small(f.ts_current_frame, "current_frame")?,
        cframe_current: 0,
        fr_code: in_frame(f.frame_executable, "f_executable")?,
        fr_back: 8,
        fr_instr: in_frame(f.frame_instr_ptr, "instr_ptr")?,
        fr_owner: in_frame(f.frame_owner, "owner")?,
        co_adaptive: small(f.code_adaptive, "co_code_adaptive")?,
        // The word ending in co_firstlineno (co_stacksize before it).
        co_fingerprint: firstlineno.saturating_sub(4),
    };
    let ascii = word(f.unicode_ascii_size);
    let code = CodeLayout {
        filename: word(f.code_filename),
        name: word(f.code_name),
        qualname: Some(word(f.code_qualname)),
        linetable: word(f.code_linetable),
        firstlineno: u64::from(firstlineno),
        str_length: 16,
        str_state: word(f.unicode_state),
        ascii_data: ascii,
        // PyCompactUnicodeObject: utf8_length and utf8 after the ASCII head.
        compact_data: ascii + 16,
        bytes_size: word(f.bytes_ob_size),
        bytes_data: 32,
        lines: LineTable::Locations,
    };
    Ok(Layout {
        version,
        info,
        code,
    })
}

/// The layout of `version`, from its debug offsets where it has them.
pub(crate) fn layout(
    version: Version,
    debug_offsets: Option<&[u8]>,
) -> Result<Layout, Unsupported> {
    if version < OLDEST || version > NEWEST {
        return Err(Unsupported::Version(version));
    }
    if version >= Version::new(3, 13) {
        let bytes = debug_offsets
            .ok_or_else(|| Unsupported::DebugOffsets("no _Py_DebugOffsets at _PyRuntime".into()))?;
        return from_debug_offsets(bytes);
    }
    table(version).ok_or(Unsupported::Version(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first KiB of `_PyRuntime` (its `_Py_DebugOffsets`) out of
    /// Debian sid's libpython3.14.so.1.0 (3.14.10-1) and
    /// libpython3.13.so.1.0 (3.13.18-1): `fixtures/README.md` says how they
    /// were cut. No 3.14 runs on these machines; this is its layout as the
    /// interpreter states it.
    const SID_3_14: &[u8] = include_bytes!("fixtures/debian-3.14-debug-offsets.bin");
    const SID_3_13: &[u8] = include_bytes!("fixtures/debian-3.13-debug-offsets.bin");

    #[test]
    fn reads_debian_3_14_and_3_13() {
        let l = from_debug_offsets(SID_3_14).unwrap();
        assert_eq!(l.version, Version::new(3, 14));
        let i = l.info;
        assert_eq!(
            (
                i.interp_head,
                i.interp_next,
                i.threads_head,
                i.ts_match,
                i.ts_frame
            ),
            (808, 7272, 7344, 160, 72)
        );
        assert_eq!(
            (i.fr_code, i.fr_back, i.fr_instr, i.fr_owner),
            (0, 8, 56, 74)
        );
        assert_eq!(
            (i.co_adaptive, i.co_fingerprint, i.code_mask),
            (208, 64, !7)
        );
        let c = l.code;
        assert_eq!(
            (c.filename, c.name, c.qualname, c.linetable, c.firstlineno),
            (112, 120, Some(128), 136, 68)
        );
        assert_eq!((c.str_state, c.ascii_data, c.compact_data), (32, 40, 56));
        assert_eq!((c.bytes_size, c.bytes_data), (16, 32));

        let l = from_debug_offsets(SID_3_13).unwrap();
        assert_eq!(l.version, Version::new(3, 13));
        let i = l.info;
        assert_eq!(
            (
                i.interp_head,
                i.interp_next,
                i.threads_head,
                i.ts_match,
                i.ts_frame
            ),
            (632, 7264, 7344, 160, 72)
        );
        assert_eq!(
            (i.fr_instr, i.fr_owner, i.co_adaptive, i.code_mask),
            (56, 70, 200, !0)
        );
        assert_eq!((l.code.ascii_data, l.code.compact_data), (40, 56));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        // Read as 3.13, the 3.14 image puts PyThreadState.next elsewhere.
        let mut bytes = SID_3_14.to_vec();
        bytes[8..16].copy_from_slice(&0x030d_00f0u64.to_le_bytes());
        assert!(matches!(
            from_debug_offsets(&bytes),
            Err(Unsupported::DebugOffsets(_))
        ));
        let mut free = SID_3_14.to_vec();
        free[16..24].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(
            from_debug_offsets(&free),
            Err(Unsupported::FreeThreaded(Version::new(3, 14)))
        );
        let mut future = SID_3_14.to_vec();
        future[8..16].copy_from_slice(&0x030f_00a1u64.to_le_bytes());
        assert_eq!(
            from_debug_offsets(&future),
            Err(Unsupported::Version(Version::new(3, 15)))
        );
        assert!(from_debug_offsets(b"not offsets").is_err());
        assert_eq!(
            layout(Version::new(3, 9), None),
            Err(Unsupported::Version(Version::new(3, 9)))
        );
    }
}
