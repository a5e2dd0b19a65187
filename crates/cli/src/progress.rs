//! A progress bar on stderr for long work over a trace, shown only when
//! stderr is a terminal: how far the decoded lines are through the
//! session's time span.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Lines between updates of the bar (a power of two).
const EVERY: u64 = 1 << 14;

pub struct Progress {
    bar: Option<ProgressBar>,
    start: u64,
    span: u64,
    lines: u64,
}

impl Progress {
    /// A bar named `what` over perf times `start..end`; hidden unless stderr is a terminal.
    pub fn over(what: &str, start: u64, end: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(1000);
            let style = ProgressStyle::with_template("{prefix} [{bar:40}] {percent}% {msg}").unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            bar.set_prefix(what.to_string());
            bar
        });
        Progress { bar, start, span: end.saturating_sub(start).max(1), lines: 0 }
    }

    /// A bar named `what` over the session span of `file` (read only when
    /// the bar shows: another pass over the records).
    pub fn over_file(what: &str, file: &perfdata::PerfFile) -> Progress {
        match std::io::stderr().is_terminal() {
            true => {
                let (start, end) = crate::lines::session_span(file).unwrap_or((0, 0));
                Progress::over(what, start, end)
            }
            false => Progress { bar: None, start: 0, span: 1, lines: 0 },
        }
    }

    /// A bar named `what` that counts to `total` (work items: instructions
    /// simulated), moved with [`Progress::at`].
    pub fn counting(what: &str, total: u64) -> Progress {
        Progress::over(what, 0, total)
    }

    /// `n` of the total done.
    pub fn at(&mut self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position((n.min(self.span) as u128 * 1000 / self.span as u128) as u64);
        }
    }

    /// A line decoded at perf time `t`.
    #[inline]
    pub fn line(&mut self, t: u64) {
        self.lines += 1;
        if self.lines & (EVERY - 1) != 0 {
            return;
        }
        if let Some(bar) = &self.bar {
            let done = t.saturating_sub(self.start).min(self.span) as u128 * 1000 / self.span as u128;
            bar.set_position(done as u64);
            bar.set_message(format!("{} lines", self.lines));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
