//! Exit status 3: the window holds nothing to answer with. A cron job or an alert script can
//! then tell "nothing was recorded then" (the host was down, the window is in the future, the
//! recorder ran without the profiler) from a failure (1) and from bad usage (2).

use std::path::Path;

use jitterscope_model::time::rfc3339;

/// The exit status of a command whose window held no data.
pub const STATUS: u8 = 3;

/// An answer-less window, with what was missing and where the store's data lies.
#[derive(Debug)]
pub struct NoData(pub String);

impl std::fmt::Display for NoData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoData {}

/// Whether the store at `dir` holds a sample in `[from, to]` (reads at most one record).
pub fn has_samples(dir: &Path, from: i64, to: i64) -> bool {
    jitterscope_store::Reader::open(dir)
        .and_then(|r| r.range_main(from, to))
        .is_ok_and(|mut r| r.any(|x| x.is_ok()))
}

/// No sample in `[from, to]`, saying what the store at `dir` does hold.
pub fn no_samples(dir: &Path, from: i64, to: i64) -> NoData {
    let held = jitterscope_store::Reader::open(dir)
        .ok()
        .and_then(|r| r.time_bounds().ok().flatten());
    NoData(format!(
        "no samples between {} and {} ({})",
        rfc3339(from),
        rfc3339(to),
        match held {
            Some((a, b)) => format!(
                "the store at {} holds {} to {}",
                dir.display(),
                rfc3339(a),
                rfc3339(b)
            ),
            None => format!("the store at {} holds none", dir.display()),
        }
    ))
}
