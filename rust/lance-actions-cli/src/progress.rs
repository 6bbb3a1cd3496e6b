//! A spinner on stderr while long work runs (replays, merges, migrations, keyed writes), so an
//! interactive user sees the command is alive. Off when stdout is not a terminal (a pipe or a
//! script reads it) or with `--json`, so nothing but the result ever reaches a reader.
//!
//! The libraries report no progress while they work, so this shows what runs and for how long,
//! not how far along it is.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Cleared when dropped: on success, on error and on a conflict alike.
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    pub fn start(message: String, as_json: bool) -> Self {
        if as_json || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
            return Spinner(None);
        }
        let bar = ProgressBar::new_spinner().with_message(message);
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        Spinner(Some(bar))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
        }
    }
}
