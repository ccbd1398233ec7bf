//! Progress of long operations (an import's upload, a reindex): a bar on a terminal, a few
//! plain lines on stderr otherwise (logs and CI keep a record without control characters).
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Clone it into callbacks; every clone moves the same bar.
#[derive(Clone)]
pub struct Progress(Arc<Inner>);

struct Inner {
    bar: Option<ProgressBar>,
    label: String,
    total: u64,
    bytes: bool,
    /// Plain mode: when the last line was printed, and at which tenth.
    last: Mutex<(Instant, u64)>,
}

impl Progress {
    /// Progress over `total` bytes.
    pub fn bytes(label: &str, total: u64) -> Progress {
        Self::new(label, total, true, "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg}")
    }

    /// Progress over `total` items (namespaces, …).
    pub fn items(label: &str, total: u64) -> Progress {
        Self::new(label, total, false, "{prefix} [{bar:30}] {pos}/{len} {elapsed} {msg}")
    }

    fn new(label: &str, total: u64, bytes: bool, template: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(label.to_owned());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let last = Mutex::new((Instant::now(), 0));
        Progress(Arc::new(Inner { bar, label: label.to_owned(), total, bytes, last }))
    }

    /// `done` of the total reached. Plain mode prints at each further tenth, at most every 2 s
    /// (the last tenth always).
    pub fn set(&self, done: u64) {
        let p = &self.0;
        if let Some(bar) = &p.bar {
            bar.set_position(done);
            return;
        }
        let tenth = (done * 10).checked_div(p.total).unwrap_or(10);
        let Ok(mut last) = p.last.lock() else { return };
        if tenth > last.1 && (tenth >= 10 || last.0.elapsed() >= Duration::from_secs(2)) {
            *last = (Instant::now(), tenth);
            eprintln!("{}: {} of {}", p.label, self.amount(done), self.amount(p.total));
        }
    }

    /// What is happening now (a namespace's name, "compiling on the server", …).
    pub fn message(&self, msg: &str) {
        match &self.0.bar {
            Some(bar) => bar.set_message(msg.to_owned()),
            None => eprintln!("{}: {msg}", self.0.label),
        }
    }

    /// A line of output above the bar (plain: on stderr).
    pub fn line(&self, msg: &str) {
        match &self.0.bar {
            Some(bar) => bar.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    /// Removes the bar (the caller prints the outcome).
    pub fn finish(&self) {
        if let Some(bar) = &self.0.bar {
            bar.finish_and_clear();
        }
    }

    fn amount(&self, n: u64) -> String {
        match (self.0.bytes, n < 1 << 20) {
            (false, _) => n.to_string(),
            (true, true) => format!("{:.1} KiB", n as f64 / 1024.0),
            (true, false) => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        }
    }
}
