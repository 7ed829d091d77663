//! Flamegraph SVGs through inferno, from the folded stacks of
//! [`analysis::flame`](crate::analysis::flame), and those stacks as text.
//!
//! [`svg`] draws one kind; [`diff_svg`] a differential graph of two
//! recordings (`tprof flamegraph --diff BEFORE AFTER`). Both write to any
//! `io::Write` the caller hands them: renderers do no I/O of their own.
//! [`FOLDED`], [`FLAMEGRAPH`] and [`FLAMEGRAPH_DIFF`] are their exporters.

use std::io::{self, Write};
use std::path::Path;

use inferno::differential;
use inferno::flamegraph::{
    self, Options,
    color::{BasicPalette, Color, MultiPalette, Palette, PaletteMap},
};

use crate::analysis::flame::{FlameKind, folded_text, reason_label};
use crate::recording::StackKind;
use crate::render::exporter::{Exporter, Reads, Stacks};

/// `tprof flamegraph --folded`: one line per stack, `frame;frame;… weight`.
pub static FOLDED: Exporter = Exporter {
    name: "folded",
    about: "Folded stacks of one kind: one `frame;frame;… weight` line each",
    extensions: &["folded"],
    opens_in: "flamegraph.pl, inferno, speedscope",
    reads: Reads::Stacks(|stacks, out| {
        out.write_all(folded_text(&stacks.folded()?).as_bytes())?;
        Ok(())
    }),
};

/// `tprof flamegraph`.
pub static FLAMEGRAPH: Exporter = Exporter {
    name: "flamegraph",
    about: "A flamegraph of one kind of stacks",
    extensions: &["svg"],
    opens_in: "any browser",
    reads: Reads::Stacks(|stacks, out| {
        let lines = stacks.folded()?;
        let title = title(stacks.kind, stacks.recording);
        let note = stacks.loss_note();
        svg(&lines, stacks.kind, &title, note.as_deref(), out)?;
        Ok(())
    }),
};

/// `tprof flamegraph --diff BEFORE AFTER`.
pub static FLAMEGRAPH_DIFF: Exporter = Exporter {
    name: "flamegraph-diff",
    about: "A differential flamegraph of one kind of stacks, before and after",
    extensions: &["svg"],
    opens_in: "any browser",
    reads: Reads::TwoRecordings(|before, after, out| {
        let (old, new) = (before.folded()?, after.folded()?);
        let title = format!(
            "tprof {} flamegraph: {} → {}",
            before.kind.name(),
            before.recording.display(),
            after.recording.display()
        );
        let note = diff_note(before, after);
        diff_svg(&old, &new, before.kind, &title, note.as_deref(), out)?;
        Ok(())
    }),
};

/// A flamegraph's title: what it shows, of which recording.
fn title(kind: FlameKind, recording: &Path) -> String {
    let what = match kind {
        FlameKind::Cpu => "on-CPU samples",
        FlameKind::OffCpu => "off-CPU time by reason",
        FlameKind::Wall => "wall-clock time (on- and off-CPU)",
    };
    format!("tprof: {what} — {}", recording.display())
}

/// The losses of both recordings of a differential flamegraph, each named.
fn diff_note(before: &Stacks, after: &Stacks) -> Option<String> {
    let named = |stacks: &Stacks| {
        let note = stacks.loss_note()?;
        Some(format!("{}: {note}", stacks.recording.display()))
    };
    let notes: Vec<String> = [named(before), named(after)]
        .into_iter()
        .flatten()
        .collect();
    (!notes.is_empty()).then(|| notes.join(" | "))
}

/// Off-CPU reason leaves in the wall graph: one blue, so waiting stands
/// apart from running at a glance.
const WAIT_BLUE: Color = Color {
    r: 80,
    g: 120,
    b: 230,
};

/// Kernel frames of the off-CPU graph: violet against its blues (inferno
/// shows `_[k]` frames without the suffix, so color is what marks them).
const KERNEL_VIOLET: Color = Color {
    r: 170,
    g: 110,
    b: 220,
};

/// Draws `lines` as an SVG, with `note` (what the recording lost, see
/// [`super::loss_note`]) under the title. Fails when there is nothing to
/// draw.
pub fn svg(
    lines: &[(String, u64)],
    kind: FlameKind,
    title: &str,
    note: Option<&str>,
    out: impl Write,
) -> io::Result<()> {
    let mut palette_map = fixed_colors(kind, lines);
    let mut options = options(kind, title, note);
    options.palette_map = Some(&mut palette_map);
    let text = folded_text(lines);
    flamegraph::from_lines(&mut options, text.lines(), out)
}

/// Draws the differential flamegraph of two folded profiles: frames are
/// sized by `after` and colored red where they grew, blue where they shrank.
pub fn diff_svg(
    before: &[(String, u64)],
    after: &[(String, u64)],
    kind: FlameKind,
    title: &str,
    note: Option<&str>,
    out: impl Write,
) -> io::Result<()> {
    let mut merged = Vec::new();
    let opts = differential::Options {
        // Compare shapes, not totals: the two recordings may differ in length.
        normalize: true,
        ..Default::default()
    };
    differential::from_readers(
        opts,
        folded_text(before).as_bytes(),
        folded_text(after).as_bytes(),
        &mut merged,
    )?;
    let merged = String::from_utf8(merged).map_err(io::Error::other)?;
    let mut options = options(kind, title, note);
    flamegraph::from_lines(&mut options, merged.lines(), out)
}

fn options(kind: FlameKind, title: &str, note: Option<&str>) -> Options<'static> {
    let mut options = Options::default();
    options.title = title.to_string();
    options.subtitle = note.map(str::to_string);
    options.count_name = kind.unit().replace("us", "µs");
    // On-CPU: warm colors, kernel frames ("_[k]") orange. Off-CPU: blues.
    options.colors = match kind {
        FlameKind::Cpu | FlameKind::Wall => Palette::Multi(MultiPalette::Java),
        FlameKind::OffCpu => Palette::Basic(BasicPalette::Blue),
    };
    // Same input, same picture: colors from names, not a random generator.
    options.hash = true;
    options.deterministic = true;
    options
}

/// Colors decided by meaning rather than by the palette: off-CPU reason
/// leaves (wall graph) and kernel frames (off-CPU graph, where the blue
/// palette would not set them apart).
fn fixed_colors(kind: FlameKind, lines: &[(String, u64)]) -> PaletteMap {
    let mut map = PaletteMap::default();
    if kind == FlameKind::OffCpu {
        let frames = lines.iter().flat_map(|(stack, _)| stack.split(';'));
        for frame in frames.filter(|f| f.ends_with("_[k]")) {
            map.insert(frame, KERNEL_VIOLET);
        }
        return map;
    }
    if kind != FlameKind::Wall {
        return map;
    }
    for kind in [
        StackKind::Runnable,
        StackKind::DiskWait,
        StackKind::Sleep,
        StackKind::Other,
        StackKind::BlockIo,
        StackKind::Futex,
    ] {
        if let Some(label) = reason_label(kind) {
            map.insert(label, WAIT_BLUE);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_every_frame() {
        let lines = vec![
            ("app;main;burn_a".to_string(), 3),
            ("app;main;nanosleep_[k];[sleep]".to_string(), 1),
        ];
        let mut out = Vec::new();
        svg(
            &lines,
            FlameKind::Wall,
            "t",
            Some("warning: 3 events lost"),
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("<?xml"));
        // inferno draws "x_[k]" as "x", colored as a kernel frame.
        for name in ["burn_a", "nanosleep", "[sleep]", "warning: 3 events lost"] {
            assert!(text.contains(name), "{name} missing");
        }
        assert!(svg(&[], FlameKind::Cpu, "t", None, Vec::new()).is_err());
    }

    #[test]
    fn draws_a_differential_svg() {
        let before = vec![("a;b".to_string(), 10)];
        let after = vec![("a;b".to_string(), 5), ("a;c".to_string(), 5)];
        let mut out = Vec::new();
        diff_svg(&before, &after, FlameKind::Cpu, "d", None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("<title>c ("), "{text}");
    }
}
