//! The full-screen view: ratatui over crossterm on the terminal's
//! alternate screen in raw mode, redrawn when a frame, a note or a key
//! comes. Raw mode turns Ctrl-C into a key, which quits like `q`: capture
//! is asked to stop ([`StopRequests`]), and the view stays, saying so,
//! until capture has detached and the analysis thread is done. The
//! terminal is put back however the view ends, a panic included.
//!
//! Keys are read here, not by crossterm's event reader, which fails a live
//! view twice: on a terminal that went away (its window closed, its tmux
//! session killed, an ssh connection dropped) its read loop spins for ever
//! (it retries on end-of-file and on EIO), and a key typed with a resize
//! (SIGWINCH) can be lost until the next one (it returns the resize and
//! drops the terminal's readiness, which its edge-triggered epoll does not
//! report again). So the view waits on the terminal with poll(2), reads
//! what was typed, and knows the few keys it uses (letters, space, Esc,
//! Ctrl-C; escape sequences such as arrows are ignored); it looks at the
//! terminal's size on every turn. A terminal that hung up ends the view,
//! and with it the capture.

use std::{
    fs::File,
    io::Write as _,
    os::fd::{AsRawFd as _, RawFd},
    sync::mpsc::{Receiver, Sender, TryRecvError},
    time::Duration,
};

use anyhow::{Context as _, Result};
use profiler::capture::StopRequests;
use ratatui::{
    Terminal,
    backend::CrosstermBackend,
    crossterm::{
        cursor,
        event::{KeyCode, KeyEvent, KeyModifiers},
        execute, terminal,
    },
    widgets::Paragraph,
};

use super::analyst::{Request, Update};
use super::frame::{Frame, ROLE_ORDER};
use super::stdio::Lines;
use super::view::{self, Area, ViewState, role_key};

/// How long the view waits for a key before looking for updates.
const KEY_POLL: Duration = Duration::from_millis(100);

/// What the screen presenter needs.
pub(super) struct Screen {
    pub terminal: File,
    /// Stop after this many frames.
    pub frames: Option<u64>,
    pub stop: StopRequests,
    pub requests: Sender<Request>,
    /// For the newest line written to stdout or stderr meanwhile.
    pub output: Lines,
}

/// The view's state between draws.
struct Shown {
    state: ViewState,
    /// The frame on the screen (held while paused).
    frame: Option<Box<Frame>>,
    /// The newest frame.
    latest: Option<Box<Frame>>,
    frames_seen: u64,
    /// The last line seen on stdout or stderr, to show it once.
    last_output: Option<String>,
}

impl Screen {
    /// Runs the view until the analysis thread ends.
    pub(super) fn run(self, updates: &Receiver<Update>) -> Result<()> {
        let restore = self
            .terminal
            .try_clone()
            .context("cannot copy the terminal")?;
        install_panic_restore(restore.try_clone().context("cannot copy the terminal")?);
        enter(&self.terminal)?;
        let result = self.show(updates);
        leave(&restore);
        result
    }

    fn show(&self, updates: &Receiver<Update>) -> Result<()> {
        let out = self
            .terminal
            .try_clone()
            .context("cannot copy the terminal")?;
        let mut terminal = Terminal::new(CrosstermBackend::new(out))?;
        let mut shown = Shown {
            state: ViewState {
                styled: colour_allowed(),
                ..ViewState::default()
            },
            frame: None,
            latest: None,
            frames_seen: 0,
            last_output: None,
        };
        let mut dirty = true;
        let input = input_fd(&self.terminal);
        let mut size = window_size(&self.terminal);
        loop {
            loop {
                match updates.try_recv() {
                    Ok(update) => {
                        self.take(update, &mut shown);
                        dirty = true;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            }
            dirty |= self.note_output(&mut shown);
            if dirty {
                draw(&mut terminal, &shown)?;
                dirty = false;
            }
            match read_input(input, KEY_POLL)? {
                Input::HungUp => {
                    // Nobody is watching: stop, and let the capture end.
                    self.quit(&mut shown);
                    return Ok(());
                }
                Input::Keys(keys) => {
                    for key in keys {
                        self.key(key, &mut shown);
                        dirty = true;
                    }
                }
            }
            let now = window_size(&self.terminal);
            if now != size {
                size = now;
                dirty = true;
            }
        }
    }

    fn take(&self, update: Update, shown: &mut Shown) {
        match update {
            Update::Frame(frame) => {
                shown.frames_seen += 1;
                if !shown.state.paused {
                    shown.frame = Some(frame.clone());
                }
                shown.latest = Some(frame);
                if self.frames.is_some_and(|n| shown.frames_seen >= n) {
                    self.quit(shown);
                }
            }
            Update::Recording(path) => {
                shown.state.recording = path.map(|p| p.display().to_string());
            }
            Update::Note(note) => shown.state.note = Some(note),
        }
    }

    /// Shows the newest line written to stdout or stderr (a warning, the
    /// command's output) once.
    fn note_output(&self, shown: &mut Shown) -> bool {
        let line = self.output.last();
        if line.is_none() || line == shown.last_output {
            return false;
        }
        shown.state.note.clone_from(&line);
        shown.last_output = line;
        true
    }

    fn key(&self, key: KeyEvent, shown: &mut Shown) {
        let state = &mut shown.state;
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        match key.code {
            _ if ctrl_c => self.quit(shown),
            KeyCode::Char('q') | KeyCode::Esc => self.quit(shown),
            KeyCode::Char('s') => state.sort = state.sort.step(true),
            KeyCode::Char('S') => state.sort = state.sort.step(false),
            KeyCode::Char(' ') => {
                state.paused = !state.paused;
                if !state.paused {
                    shown.frame.clone_from(&shown.latest);
                }
            }
            KeyCode::Char('r') => {
                let _ = self.requests.send(Request::ToggleRecording);
            }
            KeyCode::Char(c) => {
                if let Some(&role) = ROLE_ORDER.iter().find(|&&r| role_key(r).0 == c)
                    && !state.hidden.remove(&role)
                {
                    state.hidden.insert(role);
                }
            }
            _ => {}
        }
    }

    fn quit(&self, shown: &mut Shown) {
        if !shown.state.quitting {
            shown.state.quitting = true;
            self.stop.stop();
        }
    }
}

fn draw(terminal: &mut Terminal<CrosstermBackend<File>>, shown: &Shown) -> Result<()> {
    terminal.draw(|f| {
        let area = f.area();
        let lines = view::lines(
            shown.frame.as_deref(),
            &shown.state,
            Area {
                width: area.width,
                height: Some(area.height),
            },
        );
        f.render_widget(Paragraph::new(lines), area);
    })?;
    Ok(())
}

/// Colour unless NO_COLOR is set to anything (no-color.org).
fn colour_allowed() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// What the terminal had for the view.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    /// The keys typed, if any, within the wait.
    Keys(Vec<KeyEvent>),
    /// It hung up: nothing will ever be read from it or shown on it.
    HungUp,
}

/// The descriptor keys are typed on: stdin when it is a terminal, else
/// the terminal the view draws on.
fn input_fd(terminal: &File) -> RawFd {
    // SAFETY: isatty has no memory preconditions.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
        libc::STDIN_FILENO
    } else {
        terminal.as_raw_fd()
    }
}

/// Waits up to `timeout` for keys on `fd` (a terminal in raw mode) and
/// reads them, or finds it hung up.
fn read_input(fd: RawFd, timeout: Duration) -> Result<Input> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pollfd is one valid pollfd for the length given.
    let n = unsafe { libc::poll(&raw mut pollfd, 1, timeout.as_millis() as libc::c_int) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::Interrupted {
            return Ok(Input::Keys(Vec::new()));
        }
        return Err(err).context("cannot wait for keys");
    }
    if pollfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return Ok(Input::HungUp);
    }
    if pollfd.revents & libc::POLLIN == 0 {
        return Ok(Input::Keys(Vec::new()));
    }
    let mut buf = [0u8; 64];
    // SAFETY: buf is valid for writes of its length. Raw mode reads what
    // is there (VMIN 1), and poll said something is: this does not block.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    match n {
        // The end of a terminal's input: it hung up.
        0 => Ok(Input::HungUp),
        n if n > 0 => Ok(Input::Keys(keys(&buf[..n as usize]))),
        _ => {
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN) => Ok(Input::Keys(Vec::new())),
                Some(libc::EIO) => Ok(Input::HungUp),
                _ => Err(err).context("cannot read keys"),
            }
        }
    }
}

/// The keys in what one read of a raw-mode terminal gave: printable ASCII
/// as characters, Ctrl-C (raw mode makes it a byte, 3, not a signal) and
/// a lone Esc. An escape sequence (an arrow, a function key) ends the
/// read's keys: the view uses none, and it has no end marker.
fn keys(bytes: &[u8]) -> Vec<KeyEvent> {
    let mut out = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            0x1b => {
                if i + 1 == bytes.len() {
                    out.push(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
                }
                break;
            }
            0x03 => out.push(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            0x20..=0x7e => out.push(KeyEvent::new(KeyCode::Char(b as char), KeyModifiers::NONE)),
            _ => {}
        }
    }
    out
}

/// The terminal's size (columns, rows); None when it cannot say.
fn window_size(terminal: &File) -> Option<(u16, u16)> {
    // SAFETY: a zeroed winsize is valid for the ioctl to fill.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into ws.
    let rc = unsafe { libc::ioctl(terminal.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0).then_some((ws.ws_col, ws.ws_row))
}

fn enter(mut out: &File) -> Result<()> {
    terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
    execute!(out, terminal::EnterAlternateScreen, cursor::Hide)
        .context("cannot open the alternate screen")?;
    Ok(())
}

/// Puts the terminal back as it was (best effort: it may be gone).
pub(super) fn leave(mut out: &File) {
    let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
    let _ = terminal::disable_raw_mode();
    let _ = out.flush();
}

/// A panic anywhere puts the terminal back before its message prints.
fn install_panic_restore(out: File) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        leave(&out);
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(bytes: &[u8]) -> Vec<(KeyCode, KeyModifiers)> {
        keys(bytes)
            .into_iter()
            .map(|k| (k.code, k.modifiers))
            .collect()
    }

    /// Letters, space, Ctrl-C and a lone Esc are keys; an escape
    /// sequence ends the read's keys, other bytes are dropped.
    #[test]
    fn keys_of_a_raw_terminal() {
        let none = KeyModifiers::NONE;
        assert_eq!(
            chars(b"r q"),
            [
                (KeyCode::Char('r'), none),
                (KeyCode::Char(' '), none),
                (KeyCode::Char('q'), none)
            ]
        );
        assert_eq!(
            chars(&[0x03]),
            [(KeyCode::Char('c'), KeyModifiers::CONTROL)]
        );
        assert_eq!(
            chars(&[b's', 0x1b]),
            [(KeyCode::Char('s'), none), (KeyCode::Esc, none)]
        );
        // An arrow (ESC [ A) is not Esc followed by keys.
        assert_eq!(chars(b"S\x1b[A"), [(KeyCode::Char('S'), none)]);
        assert_eq!(chars(&[b'\r', 0xc3, 0xa9]), []);
    }
}
