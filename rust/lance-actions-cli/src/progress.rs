//! Progress on stderr while long work runs (replays, merges, migrations, keyed writes, graph
//! merges), so an interactive user sees the command is alive and how far along it is. Off when
//! stdout is not a terminal (a pipe or a script reads it) or with `--json`, so nothing but the
//! result ever reaches a reader.
//!
//! It starts as a spinner saying what runs; the first report of the library (a replayed commit, a
//! committed chunk, a keyed branch, an examined type) turns it into a bar with counts, and the
//! bar stays on screen where the work stopped, as git leaves "13/13, done".

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lance_actions_commit::progress::{Progress, Tick};

const SPINNER: &str = "{spinner} {msg} ({elapsed})";
const BAR: &str = "{msg} [{bar:30}] {pos}/{len} {prefix} ({elapsed})";

/// The progress of one command; cleared (a spinner) or left in its last state (a bar) when
/// dropped: on success, on error and on a conflict alike.
pub struct Activity(Option<ProgressBar>);

impl Activity {
    pub fn start(message: String, as_json: bool) -> Self {
        if as_json || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
            return Activity(None);
        }
        Activity(Some(spinner(message, ProgressDrawTarget::stderr())))
    }

    /// What the library reports to, to move the bar; nowhere when progress is off.
    pub fn progress(&self) -> Progress {
        match &self.0 {
            None => Progress::default(),
            Some(bar) => {
                let bar = bar.clone();
                Progress::new(move |tick| advance(&bar, tick))
            }
        }
    }
}

fn spinner(message: String, target: ProgressDrawTarget) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target).with_message(message);
    if let Ok(style) = ProgressStyle::with_template(SPINNER) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// The first tick of a kind of unit turns the spinner into a bar of `total` units; later ones
/// move it.
fn advance(bar: &ProgressBar, tick: Tick<'_>) {
    if bar.length() != Some(tick.total) || bar.prefix() != tick.what {
        bar.set_length(tick.total);
        bar.set_prefix(tick.what.to_string());
        if let Ok(style) = ProgressStyle::with_template(BAR) {
            bar.set_style(style.progress_chars("=> "));
        }
    }
    bar.set_position(tick.done);
}

impl Drop for Activity {
    fn drop(&mut self) {
        let Some(bar) = self.0.take() else { return };
        if bar.length().is_none() {
            bar.finish_and_clear();
            return;
        }
        // Left where the work stopped (a conflict or an error may stop it short of the end).
        bar.abandon();
        // The bar's line ends where the bar does: the result starts on a line of its own.
        eprintln!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Library reports reach the bar: the first sets its length and unit, later ones its position,
    /// and a new unit (planning, then replaying) starts a bar of its own length.
    #[test]
    fn reports_turn_the_spinner_into_a_bar_with_counts() {
        let bar = spinner("merge feature into main".into(), ProgressDrawTarget::hidden());
        let activity = Activity(Some(bar.clone()));
        let progress = activity.progress();
        assert_eq!(bar.length(), None, "a spinner until the first report");
        progress.tell("commits planned", 0, 13);
        assert_eq!((bar.length(), bar.position(), bar.prefix()), (Some(13), 0, "commits planned".to_string()));
        progress.tell("commits", 1, 12);
        progress.tell("commits", 2, 12);
        assert_eq!((bar.length(), bar.position(), bar.prefix()), (Some(12), 2, "commits".to_string()));
        drop(activity);
        assert!(bar.is_finished());
        assert_eq!(bar.position(), 2, "left where the work stopped, not moved to the end");
    }

    #[test]
    fn off_with_json_reports_go_nowhere() {
        let activity = Activity::start("merge".into(), true);
        assert!(activity.0.is_none());
        activity.progress().tell("commits", 1, 2);
    }
}
