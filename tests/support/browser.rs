//! Headless Chromium (Debian's `chromium`, installed by `cargo xtask
//! setup`) for checking the HTML timeline the way a user opens it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::Running;

/// A page load should take seconds; this is for a hung browser.
const LOAD_TIMEOUT: Duration = Duration::from_secs(90);

/// What loading a page showed.
#[derive(Debug)]
pub struct PageLoad {
    /// Every console message (console.log, errors, uncaught exceptions).
    pub console: Vec<String>,
    pub stderr: String,
}

/// Opens `page` (with `fragment`, e.g. "#zoom=0,1000", or "") in headless
/// Chromium, saves a `width`×`height` screenshot to `png`, and returns the
/// console messages, which Chromium logs to stderr with --enable-logging.
pub fn chromium_screenshot(page: &Path, fragment: &str, png: &Path, size: (u32, u32)) -> PageLoad {
    let profile = tempfile::tempdir().expect("create a browser profile directory");
    let url = format!("file://{}{fragment}", page.display());
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--screenshot={}", png.display()))
    .arg(format!("--window-size={},{}", size.0, size.1))
    .arg(url);
    assert!(
        Command::new("chromium").arg("--version").output().is_ok(),
        "chromium not found: install it with `cargo xtask setup` (Debian package chromium)"
    );
    let done = Running::spawn(&mut cmd).wait(LOAD_TIMEOUT);
    assert!(done.status.success(), "chromium failed: {done:#?}");
    let console = done
        .stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(console_message)
        .collect();
    PageLoad {
        console,
        stderr: done.stderr,
    }
}

/// `[…:INFO:CONSOLE:12] "message", source: file:///… (12)` → `message`.
fn console_message(line: &str) -> String {
    let text = line.split_once("] ").map_or(line, |(_, rest)| rest);
    let text = text.rsplit_once(", source:").map_or(text, |(msg, _)| msg);
    text.trim().trim_matches('"').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_console_lines() {
        let line = r#"[1:1:1202/155545.346985:INFO:CONSOLE:416] "tprof-timeline: drawn 19 tracks", source: file:///tmp/t.html (416)"#;
        assert_eq!(console_message(line), "tprof-timeline: drawn 19 tracks");
    }
}
