//! A disk probe for `memex-bench ingest --fsync-probe DIR`: while single appends run, a thread
//! writes 8 KB to a file in DIR and `fdatasync`s it every 10 ms, as Postgres does with its WAL on
//! every commit. With DIR on the WAL's file system, a slow second of appends that lines up with a
//! slow `fdatasync` here is the disk's, not memex's.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The probe's thread; `stop` ends it and returns its samples.
pub(crate) struct DiskProbe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<Vec<(Duration, Duration)>>>,
    path: PathBuf,
}

const INTERVAL: Duration = Duration::from_millis(10);
const BLOCK: [u8; 8192] = [0x5a; 8192];

impl DiskProbe {
    /// Starts probing a new file in `dir`; sample times count from `start`.
    pub(crate) fn start(dir: &Path, start: Instant) -> anyhow::Result<DiskProbe> {
        let path = dir.join(format!("memex-fsync-probe-{}", std::process::id()));
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("--fsync-probe: create {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut written = 0usize;
            while !flag.load(Ordering::Relaxed) {
                // A small file rewritten in place, like a WAL segment being filled.
                if written >= 16 << 20 {
                    use std::io::Seek as _;
                    file.seek(std::io::SeekFrom::Start(0))?;
                    written = 0;
                }
                file.write_all(&BLOCK)?;
                written += BLOCK.len();
                let t = Instant::now();
                file.sync_data()?;
                samples.push((t.duration_since(start), t.elapsed()));
                std::thread::sleep(INTERVAL);
            }
            Ok(samples)
        });
        Ok(DiskProbe { stop, thread, path })
    }

    /// Stops the probe, deletes its file and returns (when, how long) of every `fdatasync`.
    pub(crate) fn stop(self) -> anyhow::Result<Vec<(Duration, Duration)>> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().map_err(|_| anyhow::anyhow!("the fsync probe panicked"))??;
        let _ = std::fs::remove_file(&self.path);
        Ok(samples)
    }
}

/// The slowest `fdatasync` of each second, in µs.
pub(crate) fn max_by_second(samples: &[(Duration, Duration)]) -> std::collections::BTreeMap<u32, u64> {
    let mut out = std::collections::BTreeMap::new();
    for &(at, took) in samples {
        let s = u32::try_from(at.as_secs()).unwrap_or(u32::MAX);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let m = out.entry(s).or_insert(0);
        *m = us.max(*m);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_syncs_until_stopped_and_leaves_no_file() {
        let dir = std::env::temp_dir();
        let start = Instant::now();
        let probe = DiskProbe::start(&dir, start).unwrap();
        let path = probe.path.clone();
        std::thread::sleep(Duration::from_millis(60));
        let samples = probe.stop().unwrap();
        assert!(samples.len() >= 2, "{} samples in 60 ms", samples.len());
        assert!(samples.windows(2).all(|w| w[0].0 < w[1].0), "samples in time order");
        assert!(!path.exists());
        let by_second = max_by_second(&[
            (Duration::from_millis(100), Duration::from_micros(300)),
            (Duration::from_millis(900), Duration::from_micros(90)),
            (Duration::from_millis(1500), Duration::from_micros(40)),
        ]);
        assert_eq!(by_second.into_iter().collect::<Vec<_>>(), vec![(0, 300), (1, 40)]);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_flag() {
        let err = DiskProbe::start(Path::new("/nonexistent/memex"), Instant::now()).err().unwrap();
        assert!(err.to_string().contains("--fsync-probe"), "{err}");
    }
}
