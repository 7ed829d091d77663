//! A frame laid out as lines of text: the header, the threads by role,
//! the disks, and on the screen a status line. The full-screen view draws
//! these lines with ratatui; the batch mode prints them. One layout, so a
//! frame in a CI log reads as it did on the screen.
//!
//! It degrades by width and height the way `top` does: a narrow terminal
//! drops table columns (the function first, then the pid, the sleep,
//! futex and IO shares, the name), never a header row, which is clipped
//! instead; a short one drops thread rows (the rest counted on one line),
//! then disks, never the header. Styles (colour, bold) only where asked:
//! not with NO_COLOR, never in batch text.

use std::collections::BTreeSet;

use ratatui::{
    style::{Color, Modifier, Style},
    text::{Line, Span},
};
use tprof_core::analysis::roles::Role;

use super::analyst::ANALYSIS_SHARE;
use super::frame::{DeviceRow, Frame, RoleGroup, Shares, ThreadRow};

/// What the person at the screen chose, and what the view says about
/// itself.
#[derive(Debug, Clone, Default)]
pub(super) struct ViewState {
    pub sort: SortKey,
    /// Roles whose threads are folded into their group's line.
    pub hidden: BTreeSet<Role>,
    pub paused: bool,
    /// The file `r` is writing.
    pub recording: Option<String>,
    /// The last note (a recording written, an error).
    pub note: Option<String>,
    /// `q` was pressed: capture is stopping.
    pub quitting: bool,
    pub styled: bool,
}

/// The column the threads are sorted by, largest first (names and ids
/// smallest first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum SortKey {
    #[default]
    Cpu,
    Runnable,
    Io,
    Futex,
    Sleep,
    Tid,
    Name,
}

impl SortKey {
    const ALL: [SortKey; 7] = [
        SortKey::Cpu,
        SortKey::Runnable,
        SortKey::Io,
        SortKey::Futex,
        SortKey::Sleep,
        SortKey::Tid,
        SortKey::Name,
    ];

    /// The next column (`s`), or the previous (`S`).
    pub(super) fn step(self, forward: bool) -> SortKey {
        let i = SortKey::ALL.iter().position(|&k| k == self).unwrap_or(0);
        let n = SortKey::ALL.len();
        SortKey::ALL[if forward {
            (i + 1) % n
        } else {
            (i + n - 1) % n
        }]
    }

    fn column(self) -> Col {
        match self {
            SortKey::Cpu => Col::Cpu,
            SortKey::Runnable => Col::Run,
            SortKey::Io => Col::Io,
            SortKey::Futex => Col::Futex,
            SortKey::Sleep => Col::Sleep,
            SortKey::Tid => Col::Tid,
            SortKey::Name => Col::Name,
        }
    }

    fn order(self, a: &ThreadRow, b: &ThreadRow) -> std::cmp::Ordering {
        let by = |f: fn(&Shares) -> f64| f(&b.share).total_cmp(&f(&a.share));
        match self {
            SortKey::Cpu => by(|s| s.on_cpu_pct),
            SortKey::Runnable => by(|s| s.runnable_pct),
            SortKey::Io => by(|s| s.io_pct),
            SortKey::Futex => by(|s| s.futex_pct),
            SortKey::Sleep => by(|s| s.sleep_pct),
            SortKey::Tid => a.tid.cmp(&b.tid),
            SortKey::Name => a.comm.cmp(&b.comm),
        }
        .then(a.tid.cmp(&b.tid))
    }
}

/// The key that shows or hides a role's threads, and the role's heading.
pub(super) fn role_key(role: Role) -> (char, &'static str) {
    match role {
        Role::Trainer => ('t', "trainer"),
        Role::DataWorker => ('w', "data workers"),
        Role::PinMemory => ('m', "pin-memory"),
        Role::Pool => ('p', "pools"),
        Role::Helper => ('h', "helpers"),
        Role::Other => ('o', "other"),
    }
}

/// Where the text goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Area {
    pub width: u16,
    /// None: as many lines as the frame has (batch).
    pub height: Option<u16>,
}

/// The lines of one frame (or of the wait for the first one).
pub(super) fn lines(frame: Option<&Frame>, state: &ViewState, area: Area) -> Vec<Line<'static>> {
    let paint = Paint(state.styled);
    let Some(frame) = frame else {
        let mut out = vec![Line::from(
            "tprof top: attaching; the first frame comes after one interval",
        )];
        if area.height.is_some() {
            out.push(status_line(state, paint));
        }
        return out;
    };
    let mut out = header(frame, state, paint);
    out.push(Line::default());
    let devices = device_lines(&frame.devices, area.width, paint);
    let table_rows = area.height.map(|h| {
        // The header, a blank line, the disks and the status line stay.
        let fixed = out.len() + devices.len().min(3) + 1 + 1;
        usize::from(h).saturating_sub(fixed).max(2)
    });
    out.extend(thread_table(frame, state, area.width, table_rows, paint));
    out.push(Line::default());
    match area.height {
        Some(h) => {
            let left = usize::from(h).saturating_sub(out.len() + 1);
            out.extend(devices.into_iter().take(left.max(1)));
            out.truncate(usize::from(h).saturating_sub(1));
            out.push(status_line(state, paint));
        }
        None => out.extend(devices),
    }
    out
}

/// Styles, or none at all.
#[derive(Debug, Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn span(self, text: String, style: Style) -> Span<'static> {
        if self.0 {
            Span::styled(text, style)
        } else {
            Span::raw(text)
        }
    }

    fn bold() -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
}

fn header(frame: &Frame, state: &ViewState, paint: Paint) -> Vec<Line<'static>> {
    let label = |text: &str| paint.span(format!("{text:<8}"), Paint::bold());
    vec![
        title_line(frame, state, paint),
        Line::from(vec![label("CPU"), Span::raw(cpu_text(frame))]),
        Line::from(vec![label("STEPS"), Span::raw(steps_text(frame))]),
        Line::from(vec![label("GPU"), Span::raw(gpu_text(frame))]),
        finding_line(frame, paint),
        Line::from(vec![label(""), Span::raw(fix_text(frame))]),
    ]
}

fn title_line(frame: &Frame, state: &ViewState, paint: Paint) -> Line<'static> {
    let what = if let Some(argv) = &frame.command {
        format!("command {}", argv.join(" "))
    } else {
        let pids: Vec<String> = frame.targets.iter().map(u32::to_string).collect();
        format!("pid {}", pids.join(","))
    };
    let mut spans = vec![
        paint.span("tprof top".into(), Paint::bold()),
        // The interval's end on CLOCK_MONOTONIC, Python's time.monotonic():
        // it lines the frame up with the job's own logs.
        Span::raw(format!(
            " · {what} · frame {}: {:.1} s to {:.2} (monotonic) · window {:.0} s",
            frame.seq,
            frame.interval.seconds,
            frame.interval.end_ns as f64 / 1e9,
            frame.window.seconds
        )),
    ];
    if frame.skipped > 0 {
        spans.push(Span::raw(format!(
            " · {} skipped (analysis kept to {:.0}% of a CPU)",
            frame.skipped,
            100.0 * ANALYSIS_SHARE
        )));
    }
    let alert = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    if let Some(path) = &state.recording {
        spans.push(paint.span(format!(" · RECORDING to {path}"), alert));
    }
    if state.paused {
        spans.push(paint.span(" · PAUSED".into(), alert));
    }
    Line::from(spans)
}

fn cpu_text(frame: &Frame) -> String {
    let d = &frame.cpu_demand;
    format!(
        "{:.1} usable ({}; machine {}) · demand {:.1} = {:.1} running + {:.1} waiting for a CPU · lost {}",
        frame.cores.usable,
        frame.cores.limit,
        frame.cores.machine,
        d.running + d.runnable,
        d.running,
        d.runnable,
        frame.lost_events
    )
}

fn steps_text(frame: &Frame) -> String {
    let s = &frame.steps;
    let p50 = s
        .p50_ms
        .map_or_else(|| "-".to_string(), |ms| format!("{ms:.0} ms"));
    let wait = s
        .data_wait_frac
        .map_or_else(|| "-".to_string(), |f| format!("{:.0}%", 100.0 * f));
    format!(
        "{:.1}/s ({} in the interval) · p50 {p50} · waiting for data {wait} · from {}",
        s.per_s, s.count, s.source
    )
}

fn gpu_text(frame: &Frame) -> String {
    if frame.gpus.is_empty() {
        return format!(
            "none: {}",
            frame.gpu_status.as_deref().unwrap_or("no GPU found")
        );
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let each: Vec<String> = frame
        .gpus
        .iter()
        .map(|g| {
            let util = g
                .util_pct
                .map_or_else(|| "-".to_string(), |u| format!("{u:.0}%"));
            let mem = match (g.mem_used_bytes, g.mem_total_bytes) {
                (Some(used), Some(total)) => format!("{:.1}/{:.1} GiB", gib(used), gib(total)),
                (Some(used), None) => format!("{:.1} GiB", gib(used)),
                _ => "- GiB".to_string(),
            };
            format!("{}: {util} busy, {mem}", g.index)
        })
        .collect();
    each.join(" · ")
}

fn finding_line(frame: &Frame, paint: Paint) -> Line<'static> {
    let label = paint.span(format!("{:<8}", "FINDING"), Paint::bold());
    let Some(f) = &frame.finding else {
        return Line::from(vec![
            label,
            Span::raw(format!("none in the last {:.0} s", frame.window.seconds)),
        ]);
    };
    let severity = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    // The share first: a narrow terminal clips the end of the title.
    Line::from(vec![
        label,
        paint.span(format!("[{}] ", f.severity.name()), severity),
        Span::raw(format!(
            "{:.0}% of the trainer's time: {}",
            100.0 * f.explains_frac,
            f.title
        )),
    ])
}

/// The finding's `changes` as settings, else its fix in words.
fn fix_text(frame: &Frame) -> String {
    let Some(f) = &frame.finding else {
        return String::new();
    };
    if f.changes.is_empty() {
        return format!("fix: {}", f.fix);
    }
    let changes: Vec<String> = f
        .changes
        .iter()
        .map(|c| {
            let to = serde_json::to_string(&c.to).unwrap_or_default();
            let to = to.trim_matches('"');
            match c.from.and_then(|v| serde_json::to_string(&v).ok()) {
                Some(from) => format!("{} {} → {to}", c.setting, from.trim_matches('"')),
                None => format!("{} → {to}", c.setting),
            }
        })
        .collect();
    format!("changes: {}", changes.join(", "))
}

/// A table column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Tid,
    Pid,
    Name,
    Cpu,
    Run,
    Io,
    Futex,
    Sleep,
    Function,
}

impl Col {
    /// Its heading and width (the function's: the least it is shown in).
    fn spec(self) -> (&'static str, usize) {
        match self {
            Col::Tid => ("TID", 9),
            Col::Pid => ("PID", 7),
            Col::Name => ("NAME", 15),
            Col::Cpu => ("CPU%", 6),
            Col::Run => ("RUN%", 6),
            Col::Io => ("IO%", 6),
            Col::Futex => ("FUTEX%", 6),
            Col::Sleep => ("SLEEP%", 6),
            Col::Function => ("FUNCTION", 10),
        }
    }
}

/// Every column, in order.
const COLUMNS: [Col; 9] = [
    Col::Tid,
    Col::Pid,
    Col::Name,
    Col::Cpu,
    Col::Run,
    Col::Io,
    Col::Futex,
    Col::Sleep,
    Col::Function,
];
/// Which go first when the width is short.
const DROP_ORDER: [Col; 6] = [
    Col::Function,
    Col::Pid,
    Col::Sleep,
    Col::Futex,
    Col::Io,
    Col::Name,
];

/// The columns that fit `width`, and the function column's width.
fn columns(width: u16) -> (Vec<Col>, usize) {
    let mut cols = COLUMNS.to_vec();
    let need = |cols: &[Col]| cols.iter().map(|c| c.spec().1 + 1).sum::<usize>();
    for drop in DROP_ORDER {
        if need(&cols) <= usize::from(width) {
            break;
        }
        cols.retain(|&c| c != drop);
    }
    let fixed: usize = cols
        .iter()
        .filter(|&&c| c != Col::Function)
        .map(|c| c.spec().1 + 1)
        .sum();
    (cols, usize::from(width).saturating_sub(fixed))
}

/// `text` cut or padded to `width` (numbers right-aligned).
fn cell(text: &str, width: usize, right: bool) -> String {
    let text: String = text.chars().take(width).collect();
    if right {
        format!("{text:>width$}")
    } else {
        format!("{text:<width$}")
    }
}

fn pct(value: f64) -> String {
    format!("{value:.1}")
}

fn thread_table(
    frame: &Frame,
    state: &ViewState,
    width: u16,
    rows: Option<usize>,
    paint: Paint,
) -> Vec<Line<'static>> {
    let (cols, function_width) = columns(width);
    let sorted = state.sort.column();
    let reverse = Style::new().add_modifier(Modifier::REVERSED);
    let heading: Vec<Span<'static>> = cols
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let (name, w) = c.spec();
            let w = if c == Col::Function {
                function_width
            } else {
                w
            };
            let right = !matches!(c, Col::Tid | Col::Name | Col::Function);
            let gap = if i > 0 { " " } else { "" };
            let style = if c == sorted {
                reverse.add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
            } else {
                reverse
            };
            paint.span(format!("{gap}{}", cell(name, w, right)), style)
        })
        .collect();
    let mut out = vec![Line::from(heading)];
    let mut body = Vec::new();
    for group in &frame.roles {
        body.push(group_line(group, state, &cols, function_width, paint));
        if state.hidden.contains(&group.role) {
            continue;
        }
        let mut mine: Vec<&ThreadRow> = frame
            .threads
            .iter()
            .filter(|t| t.role == group.role)
            .collect();
        mine.sort_by(|a, b| state.sort.order(a, b));
        body.extend(mine.iter().map(|t| thread_line(t, &cols, function_width)));
    }
    if let Some(rows) = rows
        && body.len() > rows
    {
        let more = body.len() - (rows - 1);
        body.truncate(rows - 1);
        body.push(Line::from(format!(
            "  … {more} more lines (hide a role's threads: t w m p h o)"
        )));
    }
    out.extend(body);
    out
}

fn group_line(
    group: &RoleGroup,
    state: &ViewState,
    cols: &[Col],
    function_width: usize,
    paint: Paint,
) -> Line<'static> {
    let (key, heading) = role_key(group.role);
    let label = format!(
        "{heading} ({} proc, {} thr)",
        group.processes, group.threads
    );
    let style = Paint::bold().fg(Color::Cyan);
    // The label spans the id and name columns; where they are too narrow
    // for it, the group's sums are left out.
    let span: usize = cols
        .iter()
        .take_while(|&&c| matches!(c, Col::Tid | Col::Pid | Col::Name))
        .map(|c| c.spec().1 + 1)
        .sum::<usize>()
        .saturating_sub(1);
    let mut text = cell(&label, span, false);
    if label.chars().count() > span {
        text = label;
    } else {
        for &c in cols
            .iter()
            .skip_while(|&&c| matches!(c, Col::Tid | Col::Pid | Col::Name))
        {
            text.push(' ');
            text.push_str(&share_cell(c, &group.share, function_width, None));
        }
    }
    if state.hidden.contains(&group.role) {
        text = format!("{} (hidden: {key} shows)", text.trim_end());
    }
    Line::from(paint.span(text.trim_end().to_string(), style))
}

fn thread_line(t: &ThreadRow, cols: &[Col], function_width: usize) -> Line<'static> {
    let cells: Vec<String> = cols
        .iter()
        .map(|&c| match c {
            Col::Tid => cell(&format!("  {}", t.tid), c.spec().1, false),
            Col::Pid => cell(&t.pid.to_string(), c.spec().1, true),
            Col::Name => {
                let name = if t.exited {
                    format!("{} (exited)", t.comm)
                } else {
                    t.comm.clone()
                };
                cell(&name, c.spec().1, false)
            }
            _ => share_cell(c, &t.share, function_width, Some(t)),
        })
        .collect();
    Line::from(cells.join(" ").trim_end().to_string())
}

/// A share column, or the function column.
fn share_cell(c: Col, s: &Shares, function_width: usize, thread: Option<&ThreadRow>) -> String {
    let w = c.spec().1;
    match c {
        Col::Cpu => cell(&pct(s.on_cpu_pct), w, true),
        Col::Run => cell(&pct(s.runnable_pct), w, true),
        Col::Io => cell(&pct(s.io_pct), w, true),
        Col::Futex => cell(&pct(s.futex_pct), w, true),
        Col::Sleep => cell(&pct(s.sleep_pct), w, true),
        Col::Function => {
            let text = thread.map_or_else(String::new, |t| match (&t.function, &t.waiting_in) {
                (Some(f), _) => f.clone(),
                (None, Some(w)) => format!("(waits) {w}"),
                (None, None) => String::new(),
            });
            cell(&text, function_width, false)
        }
        Col::Tid | Col::Pid | Col::Name => String::new(),
    }
}

/// The disks as `iostat -x 1` has them, and who read the most.
fn device_lines(devices: &[DeviceRow], width: u16, paint: Paint) -> Vec<Line<'static>> {
    let reverse = Style::new().add_modifier(Modifier::REVERSED);
    let heading = format!(
        "{:<12} {:>8} {:>8} {:>8} {:>7} {:>6}  BUSIEST READER",
        "DEVICE", "r/s", "rMB/s", "r_await", "aqu-sz", "%util"
    );
    let mut out = vec![Line::from(paint.span(heading, reverse))];
    if devices.is_empty() {
        out.push(Line::from("  (no block IO in this interval)"));
    }
    for d in devices {
        let reader = d.busiest_reader.as_ref().map_or_else(
            || "-".to_string(),
            |r| {
                format!(
                    "{} (tid {}, pid {}) {:.1} MB",
                    r.comm,
                    r.tid,
                    r.pid,
                    r.read_bytes as f64 / 1e6
                )
            },
        );
        let text = format!(
            "{:<12} {:>8.1} {:>8.2} {:>8.2} {:>7.2} {:>6.1}  {reader}",
            d.name, d.io.r_s, d.io.rmb_s, d.io.r_await_ms, d.io.aqu_sz, d.io.util_pct
        );
        out.push(Line::from(
            cell(&text, usize::from(width), false)
                .trim_end()
                .to_string(),
        ));
    }
    out
}

fn status_line(state: &ViewState, paint: Paint) -> Line<'static> {
    let keys = if state.quitting {
        "detaching: the programs come off, the targets keep running…".to_string()
    } else {
        format!(
            "q quit · s/S sort ({}) · t w m p h o show/hide · space {} · r {}",
            state.sort.column().spec().0,
            if state.paused { "resume" } else { "pause" },
            if state.recording.is_some() {
                "stop recording"
            } else {
                "record"
            }
        )
    };
    let text = match &state.note {
        Some(note) => format!("{keys} · {note}"),
        None => keys,
    };
    Line::from(paint.span(text, Style::new().add_modifier(Modifier::REVERSED)))
}

/// A line's text, without its styles.
pub(super) fn plain(line: &Line<'_>) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Narrow terminals lose the function column first, then the pid and
    /// the blocked shares; the CPU and runnable shares always stay.
    #[test]
    fn narrow_widths_drop_columns_in_order() {
        let (wide, function) = columns(120);
        assert_eq!(wide.len(), 9);
        assert!(function > 20);
        let (eighty, _) = columns(80);
        assert!(eighty.contains(&Col::Function));
        let (narrow, _) = columns(60);
        assert!(!narrow.contains(&Col::Function) && !narrow.contains(&Col::Pid));
        assert!(narrow.contains(&Col::Name));
        let (tiny, _) = columns(20);
        assert_eq!(tiny, [Col::Tid, Col::Cpu, Col::Run]);
    }

    #[test]
    fn sort_keys_cycle_both_ways() {
        assert_eq!(SortKey::Cpu.step(true), SortKey::Runnable);
        assert_eq!(SortKey::Cpu.step(false), SortKey::Name);
        assert_eq!(SortKey::Name.step(true), SortKey::Cpu);
    }
}
