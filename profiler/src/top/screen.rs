//! The full-screen view: ratatui over crossterm on the terminal's
//! alternate screen in raw mode, redrawn when a frame, a note or a key
//! comes. Raw mode turns Ctrl-C into a key, which quits like `q`: capture
//! is asked to stop ([`StopRequests`]), and the view stays, saying so,
//! until capture has detached and the analysis thread is done. The
//! terminal is put back however the view ends, a panic included.
//!
//! A terminal that goes away (its window closed, its tmux session killed,
//! an ssh connection dropped) ends the view too, and with it the capture:
//! crossterm's reader would spin on the hung-up terminal for ever (its
//! read loop retries on end-of-file and on EIO), so the view looks at the
//! terminal with poll(2) first and reads keys only when it has some.

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
        event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers},
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
            if wait_for_input(input_fd(&self.terminal), KEY_POLL)? == Input::HungUp {
                // Nobody is watching: stop, and let the capture end.
                self.quit(&mut shown);
                return Ok(());
            }
            // Keys, and a resize (crossterm hears SIGWINCH), without
            // waiting: the terminal was just seen alive.
            while event::poll(Duration::ZERO)? {
                match event::read()? {
                    Event::Key(key) if key.kind == KeyEventKind::Press => {
                        self.key(key, &mut shown);
                        dirty = true;
                    }
                    Event::Resize(..) => dirty = true,
                    _ => {}
                }
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

/// What the terminal has for the view.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    /// Keys to read, or nothing within the wait.
    Alive,
    /// It hung up: nothing will ever be read from it or shown on it.
    HungUp,
}

/// The descriptor crossterm reads keys from: stdin when it is a terminal,
/// else the controlling terminal, which the view draws on.
fn input_fd(terminal: &File) -> RawFd {
    // SAFETY: isatty has no memory preconditions.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
        libc::STDIN_FILENO
    } else {
        terminal.as_raw_fd()
    }
}

/// Waits up to `timeout` for input on `fd`, and says whether the terminal
/// is still there.
fn wait_for_input(fd: RawFd, timeout: Duration) -> Result<Input> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pollfd is one valid pollfd for the length given.
    let n = unsafe { libc::poll(&mut pollfd, 1, timeout.as_millis() as libc::c_int) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::Interrupted {
            return Ok(Input::Alive);
        }
        return Err(err).context("cannot wait for keys");
    }
    let gone = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    Ok(if pollfd.revents & gone != 0 {
        Input::HungUp
    } else {
        Input::Alive
    })
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
