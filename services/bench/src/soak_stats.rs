//! The soak bench's arithmetic, apart from its I/O: what a server's `/proc` files say, one
//! interval's figures out of its histograms, and the least-squares slope of RSS over time.
use hdrhistogram::Histogram;
use serde_json::json;

use super::bench::round;

/// One reading of a process's `/proc/<pid>/status` and `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcSample {
    /// VmRSS: resident now (anonymous + file-backed + shared).
    pub rss_kb: u64,
    /// VmHWM: the most ever resident.
    pub hwm_kb: u64,
    /// RssAnon: the heap and stacks, what a leak grows.
    pub anon_kb: u64,
    /// RssFile: mapped files (the text index, the model) that the kernel can drop under pressure.
    pub file_kb: u64,
    pub threads: u64,
    /// User and system CPU time, in USER_HZ ticks (100 a second on Linux).
    pub cpu_ticks: u64,
}

impl ProcSample {
    /// From the text of `status` and `stat`; None when a field is missing.
    pub fn parse(status: &str, stat: &str) -> Option<ProcSample> {
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.split(':').next() == Some(name))?;
            line.split(':').nth(1)?.split_whitespace().next()?.parse().ok()
        };
        // The command name in parentheses may hold spaces: fields count from after its ')'.
        let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        Some(ProcSample {
            rss_kb: field("VmRSS")?,
            hwm_kb: field("VmHWM")?,
            anon_kb: field("RssAnon")?,
            file_kb: field("RssFile")?,
            threads: field("Threads")?,
            cpu_ticks: utime + stime,
        })
    }
}

/// The figures of one interval of a run (or of the whole run).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IntervalStats {
    /// Seconds since the run's start at the interval's end.
    pub end_secs: f64,
    pub seconds: f64,
    /// Turns sent in the interval.
    pub offered: u64,
    /// Turns answered in the interval: OK, refused (RESOURCE_EXHAUSTED), any other error.
    pub ok: u64,
    pub refused: u64,
    pub errors: u64,
    /// Latency of the OK turns, from their scheduled time.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Latency of the refusals (the refused pack call's own, not the turn's): how fast the
    /// server sheds.
    pub refused_p99_ms: f64,
    /// The server's RSS at the interval's end, and the most sampled in it (KiB).
    pub rss_kb: Option<u64>,
    pub rss_max_kb: Option<u64>,
    /// Cores of CPU the server used over the interval.
    pub cpu_cores: Option<f64>,
}

impl IntervalStats {
    /// Counts and latencies (µs histograms: OK turns, refused pack calls) of an interval `seconds`
    /// long ending at `end_secs`.
    pub fn of(
        end_secs: f64,
        seconds: f64,
        offered: u64,
        ok: &Histogram<u64>,
        refused: &Histogram<u64>,
        errors: u64,
    ) -> IntervalStats {
        let ms = |h: &Histogram<u64>, q: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1000.0 };
        IntervalStats {
            end_secs,
            seconds,
            offered,
            ok: ok.len(),
            refused: refused.len(),
            errors,
            p50_ms: ms(ok, 0.5),
            p99_ms: ms(ok, 0.99),
            max_ms: ok.max() as f64 / 1000.0,
            refused_p99_ms: ms(refused, 0.99),
            ..Default::default()
        }
    }

    /// `first` and `last` of the server during the interval, and the most RSS sampled in it.
    pub fn with_server(mut self, first: Option<&ProcSample>, last: Option<&ProcSample>, rss_max_kb: u64) -> Self {
        self.rss_kb = last.map(|l| l.rss_kb);
        self.rss_max_kb = last.map(|l| l.rss_kb.max(rss_max_kb));
        if let (Some(f), Some(l)) = (first, last) {
            self.cpu_cores = Some(l.cpu_ticks.saturating_sub(f.cpu_ticks) as f64 / 100.0 / self.seconds.max(1e-9));
        }
        self
    }

    fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.seconds.max(1e-9)
    }

    /// The report's row (see the header `soak` prints).
    pub fn row(&self) -> String {
        format!(
            "  {:>6.0} {:>9.1} {:>8.1} {:>9.1} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>6}",
            self.end_secs,
            self.per_sec(self.offered),
            self.per_sec(self.ok),
            self.per_sec(self.refused),
            self.errors,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.refused_p99_ms,
            self.rss_kb.map_or("-".into(), |kb| format!("{:.1}", kb as f64 / 1024.0)),
            self.cpu_cores.map_or("-".into(), |c| format!("{c:.2}")),
        )
    }

    /// One line, for a saturation step.
    pub fn line(&self) -> String {
        format!(
            "OK {:.1}/s, refused {:.1}/s, {} errors; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; refusals p99 {:.1} ms",
            self.per_sec(self.ok),
            self.per_sec(self.refused),
            self.errors,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.refused_p99_ms
        )
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "t_secs": round(self.end_secs), "offered_per_sec": round(self.per_sec(self.offered)),
            "ok_per_sec": round(self.per_sec(self.ok)), "refused_per_sec": round(self.per_sec(self.refused)),
            "errors": self.errors, "p50_ms": round(self.p50_ms), "p99_ms": round(self.p99_ms), "max_ms": round(self.max_ms),
            "refused_p99_ms": round(self.refused_p99_ms),
            "rss_mib": self.rss_kb.map(|kb| round(kb as f64 / 1024.0)),
            "rss_max_mib": self.rss_max_kb.map(|kb| round(kb as f64 / 1024.0)),
            "cpu_cores": self.cpu_cores.map(round),
        })
    }
}

/// The least-squares slope of y over x; None under two points or when every x is the same.
pub fn least_squares_slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_noise_around_it() {
        let line: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 300.0 + 2.5 * i as f64)).collect();
        assert!((least_squares_slope(&line).expect("a slope") - 2.5).abs() < 1e-9);
        // Sawtooth noise of ±4 around a flat line: no trend.
        let flat: Vec<(f64, f64)> = (0..40).map(|i| (i as f64, 500.0 + if i % 2 == 0 { 4.0 } else { -4.0 })).collect();
        assert!(least_squares_slope(&flat).expect("a slope").abs() < 0.02);
        assert_eq!(least_squares_slope(&[(1.0, 5.0)]), None);
        assert_eq!(least_squares_slope(&[(1.0, 5.0), (1.0, 7.0)]), None);
    }

    #[test]
    fn an_interval_in_rates_and_quantiles() {
        let mut ok = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
        for ms in 1..=100u64 {
            ok.record(ms * 1000).expect("in bounds");
        }
        let mut refused = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
        refused.record(800).expect("in bounds");
        let first = ProcSample { rss_kb: 400 * 1024, cpu_ticks: 1_000, ..Default::default() };
        let last = ProcSample { rss_kb: 410 * 1024, cpu_ticks: 1_000 + 30 * 150, ..Default::default() };
        let s = IntervalStats::of(60.0, 30.0, 300, &ok, &refused, 2).with_server(Some(&first), Some(&last), 420 * 1024);
        assert_eq!((s.offered, s.ok, s.refused, s.errors), (300, 100, 1, 2));
        assert!((s.per_sec(s.offered) - 10.0).abs() < 1e-9);
        assert!((s.p50_ms - 50.0).abs() < 0.1 && (s.p99_ms - 99.0).abs() < 0.1 && (s.max_ms - 100.0).abs() < 0.1);
        assert!((s.refused_p99_ms - 0.8).abs() < 0.01);
        assert_eq!((s.rss_kb, s.rss_max_kb), (Some(410 * 1024), Some(420 * 1024)));
        assert!((s.cpu_cores.expect("two samples") - 1.5).abs() < 1e-9);
        // Nothing answered: zeros, not a panic.
        let empty = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
        assert_eq!(IntervalStats::of(30.0, 30.0, 0, &empty, &empty, 0).p99_ms, 0.0);
    }

    #[test]
    fn proc_files_as_linux_writes_them() {
        let status = "Name:\tmemex\nVmPeak:\t 2000000 kB\nVmHWM:\t  812340 kB\nVmRSS:\t  640000 kB\n\
                      RssAnon:\t  500000 kB\nRssFile:\t  139000 kB\nRssShmem:\t    1000 kB\nThreads:\t41\n";
        let stat = "4242 (memex serve) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 41 0 100 0";
        let s = ProcSample::parse(status, stat).expect("every field");
        assert_eq!(
            s,
            ProcSample {
                rss_kb: 640_000,
                hwm_kb: 812_340,
                anon_kb: 500_000,
                file_kb: 139_000,
                threads: 41,
                cpu_ticks: 1234 + 567
            }
        );
        assert_eq!(ProcSample::parse("Name:\tmemex\n", stat), None);
    }
}
