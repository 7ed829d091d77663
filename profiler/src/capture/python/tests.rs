//! The layouts and the kernel's walk, checked against live interpreters:
//! every CPython installed on this machine runs a script that parks two
//! threads at known places and prints where (its own `sys._current_frames`
//! and `traceback`), and the test finds the interpreter as capture does,
//! walks both threads with the kernel's walk code over
//! `process_vm_readv`, names the frames and compares. Interpreters that
//! are not installed are skipped, each with a line on stderr.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};

use profiler_ebpf::python::{
    MAX_PY_FRAMES, PY_NO_THREAD, PyFrame, PyStackEvent, PyStackRecord, find_thread_state,
    list_mark, walk,
};
use serde_json::Value;

use super::code::read_code;
use super::interpreter::{Finder, Interpreter};
use super::layout::Version;
use super::memory::ProcessMemory;

/// Every interpreter the issue names, with the version it is.
const INTERPRETERS: &[(&str, Version)] = &[
    (
        "/root/.pyenv/versions/3.10.13/bin/python3",
        Version::new(3, 10),
    ),
    (
        "/root/.pyenv/versions/3.11.7/bin/python3",
        Version::new(3, 11),
    ),
    (
        "/root/.pyenv/versions/3.12.1/bin/python3",
        Version::new(3, 12),
    ),
    (
        "/root/.pyenv/versions/3.13.0/bin/python3",
        Version::new(3, 13),
    ),
    // Debian's: static, non-PIE.
    ("/usr/bin/python3.11", Version::new(3, 11)),
];

/// Parks a worker thread in `time.sleep` under a C call (`sorted` calling
/// a lambda) and the main thread in `readline`, prints both stacks as
/// JSON (innermost first) and waits for a line on stdin.
const SCRIPT: &str = r#"
import json, sys, threading, time, traceback

def name(code):
    return getattr(code, "co_qualname", code.co_name)

def leaf_sleep(ready):
    ready.set()
    time.sleep(600)  # WORKER_HERE

def via_c(ready):
    return sorted([1], key=lambda _: leaf_sleep(ready))

class Runner:
    def middle(self, ready):
        via_c(ready)

def worker_main(ready):
    Runner().middle(ready)

def stack_of(frame):
    out = []
    while frame is not None:
        out.append([name(frame.f_code), frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return out

def wait_for_test(ready):
    ready.wait()
    time.sleep(0.2)
    worker = [t for t in threading.enumerate() if t.name == "worker"][0]
    main = [[f.name, f.filename, f.lineno] for f in reversed(traceback.extract_stack())]
    main[0][2] = MAIN_HERE
    frames = sys._current_frames()
    print(json.dumps({
        "main": {"tid": threading.get_native_id(), "ident": threading.get_ident(), "frames": main},
        "worker": {"tid": worker.native_id, "ident": worker.ident,
                   "frames": stack_of(frames[worker.ident])},
    }), flush=True)
    sys.stdin.readline()  # MAIN_HERE

def main():
    ready = threading.Event()
    threading.Thread(target=worker_main, args=(ready,), name="worker", daemon=True).start()
    wait_for_test(ready)

main()
"#;

/// A running interpreter with the script, killed on drop.
struct Parked {
    child: Child,
    truth: Value,
}

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn park(python: &str, dir: &std::path::Path) -> Parked {
    let line = SCRIPT
        .lines()
        .position(|l| l.contains("sys.stdin.readline()  # MAIN_HERE"))
        .unwrap()
        + 1;
    let script = dir.join("parked.py");
    std::fs::write(&script, SCRIPT.replace("= MAIN_HERE", &format!("= {line}"))).unwrap();
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {python}: {e}"));
    let mut out = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut out)
        .unwrap();
    let truth: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{python} printed {out:?}: {e}"));
    // The main thread printed before it reached `readline`: walking it
    // before it sleeps there may find it on the line of the print.
    let stat = format!("/proc/{}/stat", child.id());
    let asleep = || {
        std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('S'))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !asleep() {
        assert!(
            std::time::Instant::now() < deadline,
            "{python} never waits in readline"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Parked { child, truth }
}

/// The installed interpreters, each missing one named on stderr.
fn installed() -> Vec<(&'static str, Version)> {
    INTERPRETERS
        .iter()
        .filter(|(path, _)| {
            let there = std::path::Path::new(path).exists();
            if !there {
                eprintln!("skipped: {path} is not installed (or not readable by this user)");
            }
            there
        })
        .copied()
        .collect()
}

/// (name, file name, line) of each frame a walk found, and the boundary
/// marks.
fn named(pid: u32, interp: &Interpreter, frames: &[PyFrame]) -> Vec<(String, String, u32, bool)> {
    let mem = ProcessMemory { pid };
    let layout = interp.layout().unwrap();
    frames
        .iter()
        .map(|f| {
            let code = read_code(
                mem,
                &layout.info,
                &layout.code,
                f.code_object(),
                f.fingerprint,
            )
            .unwrap_or_else(|| panic!("code object {:#x} unreadable", f.code_object()));
            (
                code.name.to_string(),
                code.file.to_string(),
                code.line(f.lasti),
                f.is_boundary(),
            )
        })
        .collect()
}

/// What the kernel finds `thread` by: 3.10 lists threads by
/// pthread_self(), which the kernel reads as the thread's fsbase (the
/// script printed it as the thread's ident); later versions by tid.
fn key(interp: &Interpreter, thread: &Value) -> u64 {
    if interp.layout().unwrap().version == Version::new(3, 10) {
        thread["ident"].as_u64().unwrap()
    } else {
        thread["tid"].as_u64().unwrap()
    }
}

fn walk_thread(pid: u32, interp: &Interpreter, thread: &Value) -> (u16, Vec<PyFrame>) {
    let info = interp.proc_info().unwrap();
    let mem = ProcessMemory { pid };
    let tstate = find_thread_state(&mem, &info, key(interp, thread))
        .expect("the thread is in the thread list");
    let mut rec = Box::new(PyStackRecord {
        head: PyStackEvent::default(),
        frames: [PyFrame::default(); MAX_PY_FRAMES],
    });
    let flags = walk(&mem, &info, tstate, &mut rec);
    (flags, rec.frames[..rec.head.frames as usize].to_vec())
}

#[test]
fn walks_every_installed_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    let mut finder = Finder::default();
    for (python, version) in installed() {
        let parked = park(python, dir.path());
        let pid = parked.child.id();
        let interp = finder
            .find(pid)
            .unwrap_or_else(|| panic!("{python}: no interpreter found in pid {pid}"));
        let layout = interp.layout().unwrap_or_else(|e| panic!("{python}: {e}"));
        assert_eq!(layout.version, version, "{python}");
        for role in ["worker", "main"] {
            let thread = &parked.truth[role];
            let (flags, frames) = walk_thread(pid, &interp, thread);
            assert_eq!(flags, 0, "{python} {role}: the walk was cut short");
            let got = named(pid, &interp, &frames);
            let want: Vec<(String, String, u32)> = thread["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f[0].as_str().unwrap().to_string(),
                        f[1].as_str().unwrap().to_string(),
                        f[2].as_u64().unwrap() as u32,
                    )
                })
                .collect();
            let got_names: Vec<(String, String, u32)> = got
                .iter()
                .map(|(n, f, l, _)| (n.clone(), f.clone(), *l))
                .collect();
            assert_eq!(got_names, want, "{python} {role}");
            // The outermost frame of each C-level evaluation: every frame
            // on 3.10; on 3.11+ the lambda `sorted` called and the thread's
            // first frame, and on 3.11 also the target `Thread.run` calls
            // through `PyObject_Call` (3.12 evaluates CALL_FUNCTION_EX of a
            // Python function in place).
            let boundaries: Vec<&str> = got
                .iter()
                .filter(|(_, _, _, b)| *b)
                .map(|(n, ..)| n.as_str())
                .collect();
            let all: Vec<&str> = got.iter().map(|(n, ..)| n.as_str()).collect();
            let expected: Vec<&str> = if version == Version::new(3, 10) {
                all.clone()
            } else if role == "worker" && version == Version::new(3, 11) {
                vec![
                    "via_c.<locals>.<lambda>",
                    "worker_main",
                    "Thread._bootstrap",
                ]
            } else if role == "worker" {
                vec!["via_c.<locals>.<lambda>", "Thread._bootstrap"]
            } else {
                vec!["<module>"]
            };
            assert_eq!(boundaries, expected, "{python} {role}: {all:?}");
        }
        // The newest thread heads the list, and the mark is its state
        // folded with its key: what tells a thread that missed that the
        // list has gained one since, or that the head took a new thread's
        // identity (a forked child's).
        let info = interp.proc_info().unwrap();
        let mem = ProcessMemory { pid };
        let worker_key = key(&interp, &parked.truth["worker"]);
        let worker = find_thread_state(&mem, &info, worker_key).expect("the worker's state");
        assert_eq!(
            list_mark(&mem, &info),
            Some(worker ^ worker_key.rotate_left(32)),
            "{python}"
        );
        eprintln!("{python}: both threads' frames and lines match");
        let _ = parked.child.stdin.as_ref().unwrap().write_all(b"\n");
    }
}

#[test]
fn a_thread_without_python_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut finder = Finder::default();
    for (python, _) in installed().into_iter().take(1) {
        let parked = park(python, dir.path());
        let pid = parked.child.id();
        let interp = finder.find(pid).unwrap();
        let info = interp.proc_info().unwrap();
        let mem = ProcessMemory { pid };
        assert_eq!(find_thread_state(&mem, &info, 1), None);
        let _ = PY_NO_THREAD;
    }
}
