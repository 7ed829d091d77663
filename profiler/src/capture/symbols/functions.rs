//! The functions [`Namer`] has named so far, by their extent in each file,
//! so that a new address inside one is named without blazesym.
//!
//! Every on-CPU sample's leaf is a new address, nearly always in a
//! function named already; asking blazesym again (its file found, the
//! offset made an address, a binary search over the symbol table, the name
//! copied and looked up among the demangled) was a fifth of the resolve
//! stage's naming on the real job.
//!
//! Most of the rest were addresses in functions blazesym has no name for
//! (the internals of OpenCV's stripped wheel, and of libc): such a
//! function is remembered by its start in the file's CFI, which every
//! address in it shares.
//!
//! The extent is the one blazesym reported: the offset less the answer's
//! distance into its symbol, for the symbol's size. Symbols without a size
//! are not remembered (blazesym stretches them to the next symbol, which
//! only it knows). This assumes that function symbols do not nest, as a
//! compiler's never do: blazesym names an address by the symbol that
//! starts last at or before it, and a symbol starting inside a known one
//! would be hidden by it here. The test at the end checks that against
//! real libraries.
//!
//! [`Namer`]: super::Namer

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Functions named, per file, by their first file offset.
#[derive(Debug, Default)]
pub(super) struct Functions {
    files: HashMap<Arc<str>, BTreeMap<u64, Function>>,
    /// Functions without a name, per file, by their start in its CFI.
    unnamed: HashMap<Arc<str>, HashSet<u64>>,
}

#[derive(Debug)]
struct Function {
    /// One past its last byte, as a file offset.
    end: u64,
    /// Demangled.
    name: String,
}

/// What blazesym said of one offset: the symbol's name (demangled), how
/// far into the symbol the offset lies, and the symbol's size if known.
pub(super) struct Named {
    pub name: String,
    pub into: u64,
    pub size: Option<u64>,
}

impl Functions {
    /// The name of the known function of `path` holding `offset`.
    pub(super) fn name(&self, path: &str, offset: u64) -> Option<&str> {
        let (_, function) = self.files.get(path)?.range(..=offset).next_back()?;
        (offset < function.end).then_some(function.name.as_str())
    }

    /// Remembers the function `named` says holds `offset` in `path`.
    pub(super) fn learn(&mut self, path: &Arc<str>, offset: u64, named: &Named) {
        let Some(size) = named.size.filter(|&s| s > 0) else {
            return;
        };
        let Some(start) = offset.checked_sub(named.into) else {
            return;
        };
        let function = Function {
            end: start.saturating_add(size),
            name: named.name.clone(),
        };
        let file = self.files.entry(Arc::clone(path)).or_default();
        file.insert(start, function);
    }

    /// Whether blazesym found no name in `path` for the function whose CFI
    /// starts at `start`.
    pub(super) fn is_unnamed(&self, path: &str, start: u64) -> bool {
        self.unnamed
            .get(path)
            .is_some_and(|starts| starts.contains(&start))
    }

    /// Remembers that blazesym found no name in the function of `path`
    /// whose CFI starts at `start`.
    pub(super) fn learn_unnamed(&mut self, path: &Arc<str>, start: u64) {
        let starts = self.unnamed.entry(Arc::clone(path)).or_default();
        starts.insert(start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::symbols::{Elf, Input, Namer, Site, Source, resolve};
    use crate::capture::unwind::Unwinder;

    #[test]
    fn an_offset_inside_a_named_function_gets_its_name() {
        let mut known = Functions::default();
        let path: Arc<str> = "/lib/libx.so".into();
        let named = |name: &str, into, size| Named {
            name: name.to_string(),
            into,
            size,
        };
        known.learn(&path, 0x1010, &named("f", 0x10, Some(0x20)));
        known.learn(&path, 0x2000, &named("sizeless", 0, None));
        assert_eq!(known.name(&path, 0x1000), Some("f"));
        assert_eq!(known.name(&path, 0x101f), Some("f"));
        assert_eq!(known.name(&path, 0x1020), None, "one past its end");
        assert_eq!(known.name(&path, 0xfff), None);
        assert_eq!(known.name(&path, 0x2000), None, "no size, not remembered");
        assert_eq!(known.name("/lib/liby.so", 0x1010), None);
    }

    /// The file offsets of the executable mappings of this process's
    /// libraries: (path, first offset, end).
    fn own_code() -> Vec<(Arc<str>, u64, u64)> {
        crate::capture::procfs::exec_maps(std::process::id())
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.path.starts_with('/') && m.path.contains(".so"))
            .map(|m| (Arc::clone(&m.path), m.offset, m.offset + (m.end - m.start)))
            .collect()
    }

    /// Named in batches, each after what the batches before taught the
    /// namer, offsets all through every library this test maps get the
    /// frames they got before the namer remembered functions: blazesym's
    /// names for all of them asked at once, and the start of their
    /// function in the CFI where blazesym has none.
    #[test]
    fn remembered_functions_name_as_blazesym_does() {
        let libraries = own_code();
        assert!(!libraries.is_empty(), "no shared library mapped");
        let spaces = Default::default();
        let mut namer = Namer::default();
        let mut unwinder = Unwinder::default();
        let mut function_start = |path: &str, offset| unwinder.function_start(path, offset);
        let (mut named, mut unnamed, mut remembered) = (0, 0, 0);
        for (path, start, end) in libraries {
            // The first 256 KiB, every 13th byte: functions are met many
            // times, in batches after the one that named them.
            let end = end.min(start + (256 << 10));
            let offsets: Vec<(u64, usize)> = (start..end).step_by(13).map(|o| (o, 0)).collect();
            let source = Source::Elf(Elf::new(&*path));
            let oracle = resolve(
                &namer.symbolizer,
                &source,
                |a: &[u64]| Input::FileOffset(a),
                &offsets,
            );
            for (batch, expected) in offsets.chunks(64).zip(oracle.chunks(64)) {
                let sites: Vec<Site> = batch
                    .iter()
                    .map(|&(offset, _)| Site::File(Arc::clone(&path), offset))
                    .collect();
                remembered += batch
                    .iter()
                    .filter(|&&(offset, _)| {
                        namer.functions.name(&path, offset).is_some()
                            || function_start(&path, offset)
                                .is_some_and(|s| namer.functions.is_unnamed(&path, s))
                    })
                    .count();
                let frames = namer.frames(&sites, &spaces, &mut function_start);
                for ((&(offset, _), frame), expected) in batch.iter().zip(frames).zip(expected) {
                    let symbol = expected.as_ref().map(|n| namer.demangled.of(&n.name));
                    let at = match symbol {
                        Some(_) => offset,
                        None => function_start(&path, offset).unwrap_or(offset),
                    };
                    assert_eq!(
                        (&frame.symbol, frame.offset),
                        (&symbol, at),
                        "{path} {offset:#x}"
                    );
                    named += usize::from(symbol.is_some());
                    unnamed += usize::from(symbol.is_none());
                }
            }
        }
        assert!(named > 1000, "only {named} offsets had names");
        assert!(
            unnamed > 0,
            "every offset had a name: the unnamed are not tested"
        );
        let all = named + unnamed;
        assert!(remembered > all / 2, "{remembered} of {all} remembered");
    }
}
