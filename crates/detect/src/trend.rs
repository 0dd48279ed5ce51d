//! The leak test: whether a series of RSS readings is a steady growth, and what the shape of
//! that growth says (a leak, a warm-up too young to tell, or a growth that stopped). The
//! `memory.leak` rule judges a window with it; the leak-trend detector, a sliding five minutes.

/// Fewest points a trend is judged on.
pub const MIN_POINTS: usize = 5;
/// Least growth, bytes (and at least [`MIN_GROWTH_SHARE`] of where it started).
pub const MIN_GROWTH_BYTES: f64 = 16.0 * 1024.0 * 1024.0;
/// Least growth as a share of the starting RSS.
pub const MIN_GROWTH_SHARE: f64 = 0.05;
/// Least share of steps that did not go down.
pub const MIN_UP_SHARE: f64 = 0.8;
/// Least R² of the line fit.
pub const MIN_R2: f64 = 0.8;
/// Least time, seconds, a growth must have lasted ([`Shape::grew_s`]) to be a leak, unless a
/// signal or the OOM killer ended it: below it, a working set being built.
pub const MIN_GREW_S: f64 = 20.0;
/// Time, seconds, after which a live process's unbroken growth is a leak rather than a
/// possible warm-up (services warm up for about a minute); the leak-trend detector opens an
/// episode only after it.
pub const CONFIRM_S: f64 = 90.0;
/// Least flat stretch, seconds, at the end of a growth for it to have stopped...
pub const MIN_FLAT_S: f64 = 10.0;
/// ...and least share of the time it grew: a steady leak sampled each second is "flat" for
/// about 1/8 of it (the last tenth of its rise), never a quarter.
pub const FLAT_SHARE: f64 = 0.25;
/// The shape of a growth: how long it rose and how long it has been flat since. Judged from
/// the 10% and 90% marks of the growth (first to last point), so one noisy sample at either
/// end does not move them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Seconds the growth lasted: its 10%→90% rise time divided by 0.8, which for a steady
    /// growth is the time from its start to its end.
    pub grew_s: f64,
    /// Seconds from when it reached 90% of its growth to the last point.
    pub flat_s: f64,
}

impl Shape {
    /// The shape of points (t seconds, value) that grew (last above first), or `None`.
    pub fn of(points: &[(f64, f64)]) -> Option<Shape> {
        let (&(_, first), &(t_end, last)) = (points.first()?, points.last()?);
        let g = last - first;
        if g <= 0.0 {
            return None;
        }
        let t_lo = points.iter().find(|p| p.1 > first + 0.1 * g)?.0;
        let t_hi = points.iter().find(|p| p.1 >= last - 0.1 * g)?.0;
        Some(Shape {
            grew_s: (t_hi - t_lo).max(0.0) / 0.8,
            flat_s: t_end - t_hi,
        })
    }

    /// Whether the growth stopped: flat at the end for long enough, absolutely and against
    /// how long it grew.
    pub fn stopped(&self) -> bool {
        self.flat_s >= MIN_FLAT_S && self.flat_s >= FLAT_SHARE * self.grew_s
    }
}

/// What a steady growth of a given [`Shape`] is, knowing how (and whether) the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A leak.
    Leak,
    /// Still growing, alive, for too short a time to tell a leak from a warm-up.
    Unconfirmed,
}

/// The verdict on a steady growth (one [`steady_growth`] passed): `None` when it is not a
/// leak. `killed`: a signal or the OOM killer ended the process. A normal exit weighs like a
/// live process: a tool slowed down on a busy host (a compiler sharing two cores with
/// everything else) builds its working set for longer, and exits all the same.
pub fn judge(shape: Shape, killed: bool) -> Option<Verdict> {
    if shape.stopped() {
        return None;
    }
    if killed {
        return Some(Verdict::Leak);
    }
    if shape.grew_s < MIN_GREW_S {
        return None;
    }
    if shape.grew_s >= CONFIRM_S {
        Some(Verdict::Leak)
    } else {
        Some(Verdict::Unconfirmed)
    }
}

/// The leak test, shared by the `memory.leak` rule (over a window) and the leak-trend
/// detector (over a sliding five minutes): `n` points from `first` to `last`, `ups` of the `n - 1` steps not
/// down, and the line `fit` gives (slope per second, R²). The cheap tests go first: most
/// processes fail them, and the fit runs only for the few that grow. The slope and R² when it
/// passes.
pub fn steady_growth(
    n: usize,
    first: f64,
    last: f64,
    ups: usize,
    fit: impl FnOnce() -> Option<(f64, f64)>,
) -> Option<(f64, f64)> {
    if n < MIN_POINTS {
        return None;
    }
    let growth = last - first;
    if growth < MIN_GROWTH_BYTES || growth < MIN_GROWTH_SHARE * first {
        return None;
    }
    if (ups as f64) < MIN_UP_SHARE * (n - 1) as f64 {
        return None;
    }
    fit().filter(|&(slope, r2)| slope > 0.0 && r2 >= MIN_R2)
}

/// Slope per second and R² of points (t seconds, value).
pub fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 {
        0.0
    } else {
        (sxy * sxy) / (sxx * syy)
    };
    Some((slope, r2))
}
