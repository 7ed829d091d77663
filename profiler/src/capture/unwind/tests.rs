//! The unwinder on stacks this test process copies of itself: registers and
//! stack bytes captured inside glibc's `qsort` (whose sort functions keep no
//! frame pointer), through the same code the recorder runs. Root-free.

use std::{arch::asm, cell::RefCell, ffi::c_void, fs, hint::black_box, os::raw::c_int};

use super::*;
use crate::capture::symbols::{Namer, return_site, user_site};

/// Registers and stack of a thread, as the kernel copies them.
struct Captured {
    regs: UserRegs,
    stack: Vec<u8>,
}

thread_local! {
    static CAPTURED: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// This thread's registers here, and its stack from sp up to the end of
/// its mapping (at most 256 KiB).
#[inline(never)]
fn capture() -> Captured {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers into outputs; no memory, no stack.
    unsafe {
        asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    Captured {
        regs: UserRegs { ip, sp, bp },
        stack: own_memory(sp, 256 << 10),
    }
}

/// Up to `max` bytes of this process's memory from `addr`, to the end of
/// the mapping holding it.
fn own_memory(addr: u64, max: u64) -> Vec<u8> {
    let maps = fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let end = maps
        .lines()
        .filter_map(|l| {
            let (start, end) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            ))
        })
        .find(|&(start, end)| start <= addr && addr < end)
        .expect("the stack pointer is in a mapping")
        .1;
    let mut bytes = vec![0; (end - addr).min(max) as usize];
    File::open("/proc/self/mem")
        .and_then(|f| f.read_exact_at(&mut bytes, addr))
        .expect("read own stack");
    bytes
}

/// qsort's comparator: captures the stack on its first call.
extern "C" fn compare(a: *const c_void, b: *const c_void) -> c_int {
    if CAPTURED.with_borrow(Option::is_none) {
        let captured = capture();
        CAPTURED.set(Some(captured));
    }
    // SAFETY: qsort passes pointers to two elements of the i32 array.
    let (a, b) = unsafe { (*a.cast::<i32>(), *b.cast::<i32>()) };
    a.cmp(&b) as c_int
}

// Each level uses its callee's result after the call, so none is a tail
// call: every level keeps its frame, as the expected chain says.
#[inline(never)]
fn level1() -> Captured {
    let captured = level2();
    black_box(&captured);
    captured
}

#[inline(never)]
fn level2() -> Captured {
    let captured = level3();
    black_box(&captured);
    captured
}

#[inline(never)]
fn level3() -> Captured {
    let mut values = [5i32, 3, 9, 1, 7, 2, 8, 6, 4, 0];
    // SAFETY: ten i32 values, compared as i32 by `compare`.
    unsafe {
        libc::qsort(
            values.as_mut_ptr().cast(),
            values.len(),
            size_of::<i32>(),
            Some(compare),
        );
    }
    black_box(&values);
    CAPTURED
        .take()
        .expect("qsort called the comparator at least once")
}

/// This process's executable mappings.
fn own_spaces() -> (AddressSpaces, u32) {
    let pid = std::process::id();
    let mut spaces = AddressSpaces::default();
    spaces.add_snapshot(pid, procfs::exec_maps(pid).expect("own maps"));
    (spaces, pid)
}

/// Each frame as "symbol" or "module+offset", leaf first.
fn names(spaces: &AddressSpaces, pid: u32, addrs: &[u64]) -> Vec<String> {
    let sites: Vec<_> = addrs
        .iter()
        .enumerate()
        .map(|(depth, &a)| user_site(spaces, pid, return_site(a, depth)))
        .collect();
    // Unnamed frames keep their offsets, which the tests print.
    Namer::default()
        .frames(&sites, spaces, &mut |_, _| None)
        .into_iter()
        .map(|f| match f.symbol {
            Some(symbol) => symbol,
            None => format!(
                "{}+{:#x}",
                f.module.rsplit('/').next().unwrap_or_default(),
                f.offset
            ),
        })
        .collect()
}

fn is_libc(name: &str) -> bool {
    name.starts_with("libc.so.6+") || name.contains("qsort") || name.contains("msort")
}

/// Each caller's return address lies on the stack where the walk says it
/// read it, above the one before: the words the kernel checks before it
/// reuses a copy.
#[test]
fn return_offsets_point_at_the_return_addresses() {
    let captured = level1();
    let (spaces, pid) = own_spaces();
    let unwound = Unwinder::default().unwind(&spaces, pid, captured.regs, &captured.stack);
    assert_eq!(unwound.return_offsets.len(), unwound.addrs.len() - 1);
    assert!(unwound.addrs.len() > 5, "{unwound:?}");
    for (&offset, &ra) in unwound.return_offsets.iter().zip(&unwound.addrs[1..]) {
        let at = offset as usize;
        let word = u64::from_le_bytes(captured.stack[at..at + 8].try_into().unwrap());
        assert_eq!(word, ra, "at +{offset:#x}: {unwound:x?}");
    }
    assert!(
        unwound.return_offsets.is_sorted_by(|a, b| a < b),
        "{unwound:x?}"
    );
}

/// Two copies of one thread's stack from two call sites of one function:
/// the second walk meets the first below the caller they share and
/// finishes with its frames, and comes out as a walk of its own would.
#[test]
fn a_walk_finishes_with_the_threads_last() {
    let (first, second) = (level1(), level1());
    black_box((&first, &second));
    let (spaces, pid) = own_spaces();
    let mut unwinder = Unwinder::default();
    let thread = (pid, 7);
    let is_code = |addr| spaces.is_code(pid, addr);
    let a = unwinder.unwind_with(&spaces, thread, first.regs, &first.stack, &is_code);
    let b = unwinder.unwind_with(&spaces, thread, second.regs, &second.stack, &is_code);
    assert_eq!(unwinder.met, 1, "the second walk met the first");
    let alone = Unwinder::default().unwind(&spaces, pid, second.regs, &second.stack);
    assert_eq!(b, alone);
    assert_eq!(a.end, End::Root);
    assert_ne!(a.addrs, b.addrs, "two call sites, two stacks");
    // Another thread's walk is not this one's.
    unwinder.unwind_with(&spaces, (pid, 8), second.regs, &second.stack, &is_code);
    assert_eq!(unwinder.met, 1);
}

/// A word the last walk read that holds something else in this copy (a
/// return address overwritten): the walk does not take the last walk's
/// rest, and ends as a walk of its own would.
#[test]
fn a_changed_word_is_walked_again() {
    let captured = level1();
    let (spaces, pid) = own_spaces();
    let mut unwinder = Unwinder::default();
    let is_code = |addr| spaces.is_code(pid, addr);
    let whole = unwinder.unwind_with(&spaces, (pid, 7), captured.regs, &captured.stack, &is_code);
    let mut changed = captured.stack.clone();
    let at = whole.return_offsets[3] as usize;
    changed[at..at + 8].copy_from_slice(&0x10u64.to_le_bytes());
    let again = unwinder.unwind_with(&spaces, (pid, 7), captured.regs, &changed, &is_code);
    let alone = Unwinder::default().unwind(&spaces, pid, captured.regs, &changed);
    assert_eq!(again, alone);
    assert_eq!(
        again.addrs.len(),
        4,
        "cut at the overwritten return address"
    );
    assert_eq!(unwinder.met, 0);
    // The same copy again: met at the leaf, the whole walk taken.
    let same = unwinder.unwind_with(&spaces, (pid, 7), captured.regs, &changed, &is_code);
    assert_eq!((same, unwinder.met), (alone, 1));
}

/// The whole chain, exactly: the capture, the comparator, glibc's sort
/// (frameless), its caller's three levels, and on to the thread's root.
#[test]
fn unwinds_through_glibc_qsort() {
    let captured = level1();
    let (spaces, pid) = own_spaces();
    let unwound = Unwinder::default().unwind(&spaces, pid, captured.regs, &captured.stack);
    let names = names(&spaces, pid, &unwound.addrs);
    assert_eq!(unwound.end, End::Root, "{names:#?}");
    assert!(!unwound.unknown_address, "{names:#?}");
    assert!(names[0].ends_with("::capture"), "{names:#?}");
    assert!(names[1].ends_with("::compare"), "{names:#?}");
    let level3 = names
        .iter()
        .position(|n| n.ends_with("::level3"))
        .unwrap_or_else(|| panic!("no level3: {names:#?}"));
    let sort = &names[2..level3];
    assert!(
        !sort.is_empty() && sort.iter().all(|n| is_libc(n)),
        "only glibc's sort between the comparator and level3: {names:#?}"
    );
    assert!(sort.last().unwrap().contains("qsort"), "{names:#?}");
    assert!(names[level3 + 1].ends_with("::level2"), "{names:#?}");
    assert!(names[level3 + 2].ends_with("::level1"), "{names:#?}");
    // libtest runs a test on a thread of its own (root: glibc's clone3,
    // which Debian's libc names in no symbol table), or on the main thread
    // with --test-threads=1 (root: _start).
    let root = names.last().unwrap();
    assert!(
        root.starts_with("libc.so.6+") || root == "_start",
        "{names:#?}"
    );
}

/// `level1` below 8 KiB of this frame's own: a copy cut at 4 KiB then
/// always ends inside the stack, however little the test harness's frames
/// above take (they shrank below 4 KiB once, with a smaller local).
#[inline(never)]
fn level1_deep() -> Captured {
    let pad = [1u8; 8 << 10];
    black_box(&pad);
    let captured = level1();
    black_box(&pad);
    captured
}

/// A copy cut at 4 KiB keeps the frames it holds, exactly as the whole
/// copy gives them, and says the copy ended.
#[test]
fn a_short_copy_ends_at_the_copy() {
    let captured = level1_deep();
    let (spaces, pid) = own_spaces();
    let mut unwinder = Unwinder::default();
    let whole = unwinder.unwind(&spaces, pid, captured.regs, &captured.stack);
    let short = unwinder.unwind(&spaces, pid, captured.regs, &captured.stack[..4096]);
    assert_eq!(short.end, End::PastCopy, "{short:x?}");
    assert!(short.addrs.len() >= 3, "{short:x?}");
    assert!(short.addrs.len() < whole.addrs.len());
    assert_eq!(short.addrs, whole.addrs[..short.addrs.len()]);
}

/// Stopped on the first instruction of one of glibc's PLT entries (where
/// CFI is an expression of rip): the caller is found from the return
/// address the call pushed, and the rest of the chain follows.
#[test]
fn unwinds_from_a_plt_entry() {
    let captured = level1();
    let (spaces, pid) = own_spaces();
    let (_, _, maps) = spaces.mappings(pid).unwrap();
    let libc = maps
        .iter()
        .find(|m| m.path.ends_with("/libc.so.6"))
        .expect("libc is mapped");
    let file = ElfFiles::default().get(&libc.path, None).unwrap();
    let plt = plt_svma(&libc.path);
    // The second PLT entry (the first is the resolver stub, PLT0).
    let entry = file.bias(libc).unwrap() + plt + 16;
    // As if capture() had just called through that entry.
    let mut stack = captured.regs.ip.to_le_bytes().to_vec();
    stack.extend_from_slice(&captured.stack);
    let regs = UserRegs {
        ip: entry,
        sp: captured.regs.sp - 8,
        bp: captured.regs.bp,
    };
    let whole = Unwinder::default().unwind(&spaces, pid, captured.regs, &captured.stack);
    let from_plt = Unwinder::default().unwind(&spaces, pid, regs, &stack);
    assert_eq!(from_plt.end, End::Root, "{from_plt:x?}");
    assert_eq!(from_plt.addrs[0], entry);
    assert_eq!(from_plt.addrs[1], captured.regs.ip);
    assert_eq!(from_plt.addrs[2..], whole.addrs[1..]);
}

fn plt_svma(path: &str) -> u64 {
    let data = fs::read(path).unwrap();
    let elf = object::File::parse(data.as_slice()).unwrap();
    elf.section_by_name(".plt")
        .expect("glibc has a .plt")
        .address()
}

/// An instruction pointer in no mapping, with a frame pointer that points
/// nowhere: the leaf is kept, nothing is made up past it, and the walk
/// says the address is unknown (worth re-reading the mappings).
#[test]
fn an_address_in_no_module_is_cut() {
    let captured = level1();
    let (spaces, pid) = own_spaces();
    let regs = UserRegs {
        ip: 0x10,
        sp: captured.regs.sp,
        bp: 0x5ec0_ffee,
    };
    let unwound = Unwinder::default().unwind(&spaces, pid, regs, &captured.stack);
    assert_eq!(
        unwound,
        Unwound {
            addrs: vec![0x10],
            return_offsets: vec![],
            end: End::Cut,
            unknown_address: true
        }
    );
}

/// A process whose mappings tprof never read (gone before the read, and
/// exec'd, so its parent's do not stand for it): the leaf alone, marked.
#[test]
fn a_process_without_mappings_is_not_unwound() {
    let captured = level1();
    let (_, pid) = own_spaces();
    let unwound = Unwinder::default().unwind(
        &AddressSpaces::default(),
        pid,
        captured.regs,
        &captured.stack,
    );
    assert_eq!(
        unwound,
        Unwound {
            addrs: vec![captured.regs.ip],
            return_offsets: vec![],
            end: End::NoMappings,
            unknown_address: true
        }
    );
}

/// A frame without a symbol is named by its function's start, as its CFI
/// gives it: here, the start of `capture` for an address inside it.
#[test]
fn function_start_from_the_cfi() {
    let captured = level1();
    let (spaces, pid) = own_spaces();
    let (_, _, maps) = spaces.mappings(pid).unwrap();
    let file_offset = |addr: u64| {
        let m = maps
            .iter()
            .find(|m| m.start <= addr && addr < m.end)
            .unwrap();
        (m.path.clone(), addr - m.start + m.offset)
    };
    let (path, inside) = file_offset(captured.regs.ip);
    let (_, entry) = file_offset(capture as *const () as u64);
    assert!(entry < inside);
    let mut unwinder = Unwinder::default();
    assert_eq!(unwinder.function_start(&path, inside), Some(entry));
    assert_eq!(unwinder.function_start(&path, entry), Some(entry));
}

/// A leaf in code without CFI: whichever of the two rules such code
/// follows finds a caller, the frameless one first.
#[test]
fn a_leaf_without_cfi_gets_both_guesses() {
    const SP: u64 = 0x7000_0000;
    let code = |a: u64| (0x40_0000..0x50_0000).contains(&a);
    // Stack words from SP: [SP] holds data (a pushed register), a frame at
    // SP + 16 holds the saved bp (SP + 64) and the return address.
    let words = [0x1234u64, 0, SP + 64, 0x40_1005, 0, 0, 0, 0, 0, 0];
    let stack: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut read = |addr: u64| -> Result<u64, ()> {
        let at = addr.checked_sub(SP).ok_or(())? as usize;
        let word = stack.get(at..at + 8).ok_or(())?;
        Ok(u64::from_le_bytes(word.try_into().unwrap()))
    };
    let found = leaf_without_cfi(
        UnwindRegsX86_64::new(0x40_0100, SP, SP + 16),
        &mut read,
        &code,
    )
    .map(|(ra, regs)| (ra, regs.sp(), regs.bp()));
    assert_eq!(found, Some((0x40_1005, SP + 32, SP + 64)));
    // A frameless leaf: the return address at sp wins.
    let found = leaf_without_cfi(
        UnwindRegsX86_64::new(0x40_0100, SP + 24, 7),
        &mut read,
        &code,
    )
    .map(|(ra, regs)| (ra, regs.sp(), regs.bp()));
    assert_eq!(found, Some((0x40_1005, SP + 32, 7)));
    // Neither guess finds code: no caller, nothing made up.
    let found = leaf_without_cfi(
        UnwindRegsX86_64::new(0x40_0100, SP, 0x5ec0_ffee),
        &mut read,
        &code,
    );
    assert_eq!(found.map(|(ra, _)| ra), None);
}

/// Addresses that fight over one slot of a framehop cache (509 apart) are
/// spread over the caches, and an address always finds the cache it was
/// put in.
#[test]
fn addresses_sharing_a_slot_are_spread_over_the_caches() {
    let mut caches = RuleCaches::default();
    let cache_of = |caches: &mut RuleCaches, address: u64| {
        let chosen: *const CacheX86_64 = caches.for_address(address);
        caches
            .0
            .iter()
            .position(|c| std::ptr::eq(c, chosen))
            .unwrap()
    };
    let base = 0x7f12_3456_7000;
    let chosen: std::collections::HashSet<usize> = (0..RULE_CACHES as u64)
        .map(|i| cache_of(&mut caches, base + i * 509))
        .collect();
    assert_eq!(chosen.len(), RULE_CACHES);
    assert_eq!(cache_of(&mut caches, base), cache_of(&mut caches, base));
}
