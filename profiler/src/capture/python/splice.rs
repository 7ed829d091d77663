//! Python frames put where they run in a native stack: each native frame
//! of the eval loop (`_PyEval_EvalFrameDefault`) is replaced by the Python
//! frames that C-level evaluation ran, so native code Python called (cv2,
//! libtorch, libc) sits under the Python call that made it, as
//! `py-spy record --native` shows it.
//!
//! The kernel marks the outermost frame of each evaluation (a boundary),
//! which splits the Python frames into groups; the k-th group from the
//! leaf replaces the k-th eval-loop frame from the leaf. A native stack
//! with fewer eval-loop frames than groups is incomplete (a frame-pointer
//! walk through a build without frame pointers): then every Python frame
//! goes first, and only the native frames below the innermost eval-loop
//! frame follow, since whatever the walk found above it is not to be
//! trusted.

/// One Python frame: what to put in the stack, and whether it is the
/// outermost of its C-level evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PyEntry<S> {
    pub site: S,
    pub boundary: bool,
}

/// The spliced stack, outermost first. `native` is outermost first,
/// `python` innermost first (as the kernel walked it); `is_eval` tells the
/// eval loop's native frames.
pub(crate) fn splice<S: Clone>(
    native: &[S],
    python: &[PyEntry<S>],
    is_eval: impl Fn(&S) -> bool,
) -> Vec<S> {
    // Groups innermost first, each outermost first.
    let mut groups: Vec<Vec<S>> = Vec::new();
    let mut group: Vec<S> = Vec::new();
    for entry in python {
        group.insert(0, entry.site.clone());
        if entry.boundary {
            groups.push(std::mem::take(&mut group));
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    // The eval-loop frames, innermost first.
    let evals: Vec<usize> = (0..native.len())
        .rev()
        .filter(|&i| is_eval(&native[i]))
        .collect();
    let mut out = Vec::with_capacity(native.len() + python.len());
    if groups.is_empty() {
        out.extend_from_slice(native);
        return out;
    }
    if evals.len() < groups.len() {
        for g in groups.iter().rev() {
            out.extend_from_slice(g);
        }
        let below = evals.first().map_or(0, |&innermost| innermost + 1);
        out.extend_from_slice(&native[below..]);
        return out;
    }
    for (i, frame) in native.iter().enumerate() {
        match evals
            .iter()
            .position(|&e| e == i)
            .and_then(|k| groups.get(k))
        {
            Some(g) => out.extend_from_slice(g),
            None => out.push(frame.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(frames: &[(&'static str, bool)]) -> Vec<PyEntry<&'static str>> {
        frames
            .iter()
            .map(|&(site, boundary)| PyEntry { site, boundary })
            .collect()
    }

    fn eval(s: &&str) -> bool {
        s.starts_with("_PyEval")
    }

    #[test]
    fn each_group_replaces_its_eval_frame() {
        // main → step (one evaluation) → sorted (C) → key (another
        // evaluation) → zlib.
        let native = [
            "_start",
            "Py_RunMain",
            "_PyEval_1",
            "builtin_sorted",
            "_PyEval_2",
            "zlib_compress",
            "deflate",
        ];
        let python = py(&[("key", true), ("step", false), ("main", true)]);
        assert_eq!(
            splice(&native, &python, eval),
            [
                "_start",
                "Py_RunMain",
                "main",
                "step",
                "builtin_sorted",
                "key",
                "zlib_compress",
                "deflate"
            ]
        );
    }

    #[test]
    fn extra_eval_frames_stay_native() {
        let native = ["_PyEval_0", "_PyEval_1", "leaf"];
        let python = py(&[("f", true)]);
        assert_eq!(splice(&native, &python, eval), ["_PyEval_0", "f", "leaf"]);
    }

    #[test]
    fn an_incomplete_native_stack_puts_python_first() {
        // 3.10: one evaluation per frame; the frame-pointer walk found only
        // the innermost eval frame, then garbage.
        let native = ["garbage", "_PyEval_x", "time_sleep", "clock_nanosleep"];
        let python = py(&[("nap", true), ("step", true), ("main", true)]);
        assert_eq!(
            splice(&native, &python, eval),
            ["main", "step", "nap", "time_sleep", "clock_nanosleep"]
        );
        // No eval frame at all: every native frame follows.
        let native = ["garbage", "deflate"];
        assert_eq!(
            splice(&native, &python, eval),
            ["main", "step", "nap", "garbage", "deflate"]
        );
    }

    #[test]
    fn no_python_frames_leave_the_stack_alone() {
        let native = ["a", "_PyEval_x", "b"];
        assert_eq!(splice(&native, &[], eval), native);
        // A walk without a boundary (truncated): one group.
        let python = py(&[("leaf", false), ("mid", false)]);
        assert_eq!(splice(&native, &python, eval), ["a", "mid", "leaf", "b"]);
    }
}
