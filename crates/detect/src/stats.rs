//! Robust statistics the detectors and the rules share.

/// The median and the median absolute deviation of `v` (reordered): the robust centre and
/// spread that baselines here are built on.
pub fn median_mad(v: &mut [f64]) -> (f64, f64) {
    let m = median(v);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    (m, median(&mut dev))
}

/// The median of `v` (reordered; 0 when empty).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}
