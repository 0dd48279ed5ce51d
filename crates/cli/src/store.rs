//! `jitterscope store check [--repair]`: every CRC of every segment and lane verified, one line
//! per damaged file, and a repair that rebuilds what can be rebuilt and moves the rest aside.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use jitterscope_model::time::rfc3339;
use jitterscope_store::{
    check_store, lock_store, rebuild_index, restore_header, salvage, FileCheck, Kind, Lane,
};

/// Arguments of `store`.
#[derive(Args, Debug)]
pub struct StoreArgs {
    #[command(subcommand)]
    cmd: StoreCmd,
}

#[derive(Subcommand, Debug)]
enum StoreCmd {
    /// Verify every frame and record CRC of every segment, index and lane; print one line per
    /// damaged file (what, where, time range) and a summary.
    ///
    /// Exit status: 0 when no damage was found (with --repair: none is left), 1 when damage
    /// was found (with --repair: some is left, such as a file that could not be moved), 2 when
    /// the check could not run (no store, a recorder holds the lock).
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Repair: rebuild damaged, missing or empty indexes from their segments (written to a
    /// temporary file, then renamed), rebuild a damaged, empty or short signals lane from the
    /// main stream, rewrite a segment that lost frames, was cut or has garbage appended from
    /// every record that still reads (with a fresh index), and move files that cannot be read
    /// at all into `<dir>/damaged/`, with a line per finding in `damaged/repairs.log`
    /// (nothing is deleted). Refused while a recorder holds the store's lock.
    #[arg(long)]
    repair: bool,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// With --repair: repair a store directory that belongs to another user (the files it
    /// writes and the damaged/ directory it creates are then this user's). Refused without it.
    #[arg(long, requires = "repair")]
    allow_other_owner: bool,
}

/// Runs `store`; the exit status is the command's answer (see `store check --help`).
pub fn run(a: StoreArgs) -> ExitCode {
    let StoreCmd::Check(c) = a.cmd;
    match check(c) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            errln!("jitterscope: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether the store is (or, repaired, was left) free of damage.
fn check(a: CheckArgs) -> Result<bool> {
    let dir = crate::store_dir(a.dir);
    if !dir.is_dir() {
        anyhow::bail!("no store at {}", dir.display());
    }
    let _lock = if a.repair {
        // A repair writes: the same directory rules as the recorder's.
        jitterscope_store::perms::writable_store_dir(&dir, a.allow_other_owner)
            .map_err(|why| anyhow::anyhow!("store {} {why}", dir.display()))?;
        Some(lock_store(&dir).map_err(|e| match e {
            jitterscope_store::StoreError::Locked { .. } => anyhow::anyhow!(
                "store {} is being written by a recorder (LOCK is held): stop it before --repair",
                dir.display()
            ),
            e => e.into(),
        })?)
    } else {
        None
    };
    let found = check_store(&dir, true)?;
    for f in &found {
        outln!("{}", line(f));
    }
    let segments = jitterscope_store::Reader::open(&dir)?.segments()?.len();
    // A directory no recorder ever wrote (a typo, a link to /etc) is not a clean store.
    if segments == 0 && found.is_empty() && !dir.join("LOCK").exists() {
        anyhow::bail!(
            "no store at {}: it holds no segment and no LOCK (record into it with `jitterscope record --dir {}`)",
            dir.display(),
            dir.display()
        );
    }
    if found.is_empty() {
        outln!("store clean: {segments} segments checked");
        return Ok(true);
    }
    let lost: u64 = found.iter().map(|f| f.lost_records).sum();
    outln!(
        "{} damaged files in {segments} segments; {lost} records known lost{}",
        found.len(),
        if a.repair {
            ""
        } else {
            " (`--repair` rebuilds what it can)"
        }
    );
    if !a.repair {
        return Ok(false);
    }
    // A segment's own finding first: rewriting or moving it aside settles its index too, and
    // moving it aside its lanes.
    let mut order: Vec<&FileCheck> = found.iter().collect();
    order.sort_by_key(|f| f.kind != Kind::Segment);
    let mut rewritten: Vec<&Path> = Vec::new();
    for f in order {
        let gone = f.kind != Kind::Orphan && f.segment.symlink_metadata().is_err();
        if gone || (f.kind == Kind::Index && rewritten.contains(&f.segment.as_path())) {
            continue;
        }
        if f.kind == Kind::Segment {
            rewritten.push(&f.segment);
        }
        let done = repair(&dir, f);
        let said = match &done {
            Ok(done) => format!("repaired {}: {done}", f.path.display()),
            Err(e) => format!("not repaired {}: {e:#}", f.path.display()),
        };
        outln!("{said}");
        if let Err(e) = log_repair(&dir, f, &said) {
            outln!("cannot add to {}/{REPAIR_LOG}: {e}", DAMAGED);
        }
    }
    let left = check_store(&dir, true)?;
    for f in &left {
        outln!("left: {}", line(f));
    }
    outln!(
        "after repair: {} damaged files left{}",
        left.len(),
        if dir.join(DAMAGED).is_dir() {
            format!(" (moved aside: {})", dir.join(DAMAGED).display())
        } else {
            String::new()
        }
    );
    Ok(left.is_empty())
}

/// Where a repair moves what it cannot mend.
const DAMAGED: &str = "damaged";
/// The note a repair keeps in `damaged/`: one line per finding, what was wrong and done.
const REPAIR_LOG: &str = "repairs.log";

/// Adds a finding and what its repair did to `damaged/repairs.log`, so what was moved aside
/// or lost keeps its explanation after the store reads clean.
fn log_repair(dir: &Path, f: &FileCheck, said: &str) -> std::io::Result<()> {
    use std::io::Write;
    let d = dir.join(DAMAGED);
    jitterscope_store::perms::create_dir_all(&d)?;
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0);
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(jitterscope_store::perms::FILE_MODE)
        .open(d.join(REPAIR_LOG))?;
    writeln!(log, "{} {} -- {said}", rfc3339(now), line(f))?;
    log.sync_all()
}

fn line(f: &FileCheck) -> String {
    // Errors name their file already.
    let prefix = format!("{}: ", f.path.display());
    let what = f.what.strip_prefix(&prefix).unwrap_or(&f.what);
    let mut s = format!("{}: {what}", f.path.display());
    if let Some((a, b)) = f.time {
        s.push_str(&format!(" [{} .. {}]", rfc3339(a), rfc3339(b)));
    }
    if f.lost_records > 0 {
        s.push_str(&format!(" ({} records lost)", f.lost_records));
    }
    s
}

/// Repairs one finding; says what was done.
fn repair(dir: &Path, f: &FileCheck) -> Result<String> {
    match f.kind {
        Kind::Index | Kind::LaneIndex(_) => {
            let data = data_file_of_index(f);
            if !data.exists() {
                return Ok("its data file is gone; nothing to index".into());
            }
            if f.path.exists() {
                move_aside(dir, &f.path)?;
            }
            let n = rebuild_index(&data)?;
            Ok(format!("index rebuilt from its file ({n} frames)"))
        }
        Kind::Segment if f.unreadable => {
            let copy = |p: &Path| copy_aside(dir, p);
            if let Some(n) = restore_header(&f.path, copy)? {
                return Ok(format!(
                    "header restored, the rest checks out ({n} records; the damaged copy is in {DAMAGED}/)"
                ));
            }
            Ok(format!(
                "unreadable: moved aside ({})",
                move_segment_aside(dir, &f.segment)?
            ))
        }
        // What still reads becomes a clean segment of its own; the original goes aside with
        // its index, so the loss stays on record there (and in the repair log).
        Kind::Segment => {
            let keep = |p: &Path| -> std::io::Result<()> {
                let idx = p.with_extension("idx");
                move_aside(dir, p).map_err(std::io::Error::other)?;
                if idx.exists() {
                    move_aside(dir, &idx).map_err(std::io::Error::other)?;
                }
                Ok(())
            };
            match salvage(&f.path, keep)? {
                Some(n) => Ok(format!(
                    "rewritten with its {n} readable records and a fresh index; the original is in {DAMAGED}/"
                )),
                None => Ok(format!(
                    "no record reads: moved aside ({})",
                    move_segment_aside(dir, &f.segment)?
                )),
            }
        }
        Kind::Lane(Lane::Signals) => {
            if let Some(done) = restore_or_move_aside(dir, f)? {
                return Ok(done);
            }
            let n = rebuild_signals(dir, &f.segment)?;
            Ok(format!(
                "signals lane rebuilt from the main stream ({n} records; episode marks by a detector started at the segment)"
            ))
        }
        Kind::Lane(_) if f.unreadable || f.lost_records > 0 || f.what.contains("corrupt") => {
            if let Some(done) = restore_or_move_aside(dir, f)? {
                return Ok(done);
            }
            Ok("moved aside (its records are read without their detail)".into())
        }
        Kind::Lane(_) => Ok("left as it is (nothing of it can be rebuilt)".into()),
        Kind::Orphan => {
            move_aside(dir, &f.path)?;
            Ok("moved aside".into())
        }
    }
}

/// Moves every file of `seg` that exists into `<dir>/damaged/`; their names.
fn move_segment_aside(dir: &Path, seg: &Path) -> Result<String> {
    let mut moved = Vec::new();
    for p in segment_files(seg) {
        // A directory or a dangling link in a file's place is moved too.
        if p.symlink_metadata().is_ok() {
            move_aside(dir, &p)?;
            moved.push(file_name(&p));
        }
    }
    Ok(moved.join(", "))
}

/// A lane with a damaged header whose records all check out gets its header back (`Some`, what
/// was done); otherwise the lane and its index are moved aside (`None`: the caller says what
/// replaces them).
fn restore_or_move_aside(dir: &Path, f: &FileCheck) -> Result<Option<String>> {
    if f.unreadable {
        let copy = |p: &Path| copy_aside(dir, p);
        if let Some(n) = restore_header(&f.path, copy)? {
            return Ok(Some(format!(
                "header restored, the rest checks out ({n} records)"
            )));
        }
    }
    for p in [f.path.clone(), f.path.with_extension("idx")] {
        if p.exists() {
            move_aside(dir, &p)?;
        }
    }
    Ok(None)
}

/// Writes the signals lane of `seg` anew from its samples, as the recorder derives it
/// (`events::Online` + the signals record). The detector starts at the segment's first
/// sample, so its marks can differ from the recorder's, which had the history before.
fn rebuild_signals(dir: &Path, seg: &Path) -> Result<usize> {
    let reader = jitterscope_store::Reader::open(dir)?;
    let segs = reader.segments()?;
    let name_ts = |p: &Path| -> Option<i64> { file_name(p).get(4..24)?.parse().ok() };
    let from = name_ts(seg).unwrap_or(i64::MIN);
    let to = segs
        .iter()
        .find(|s| s.as_path() > seg)
        .and_then(|s| name_ts(s))
        .map_or(i64::MAX, |n| n - 1);
    let samples = jitterscope_model::stored::SampleReader::open(dir)?;
    let mut online = jitterscope_detect::Online::new();
    let mut prev: Option<jitterscope_model::Sample> = None;
    let mut recs = Vec::new();
    for s in samples.samples(from, to, jitterscope_model::codec::Parts::ALL)? {
        let rec = online.step(&s, prev.as_ref());
        let mut buf = Vec::new();
        rec.encode(&mut buf);
        recs.push((s.ts_ns, buf));
        prev = Some(s);
    }
    jitterscope_store::write_lane(seg, Lane::Signals, &recs)?;
    Ok(recs.len())
}

/// The segment-format file an index belongs to.
fn data_file_of_index(f: &FileCheck) -> PathBuf {
    f.path.with_extension("jss")
}

/// Every file of a segment: its lanes with their indexes, its index, itself.
fn segment_files(seg: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for l in ["d", "s"] {
        let lane = seg.with_extension(format!("{l}.jss"));
        v.push(lane.with_extension("idx"));
        v.push(lane);
    }
    v.push(seg.with_extension("idx"));
    v.push(seg.to_path_buf());
    v
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}

/// A free name for `p` in `<dir>/damaged/` (never over an earlier one of the same name).
fn aside_name(dir: &Path, p: &Path) -> std::io::Result<PathBuf> {
    let to_dir = dir.join(DAMAGED);
    jitterscope_store::perms::create_dir_all(&to_dir)?;
    let name = file_name(p);
    let mut to = to_dir.join(&name);
    let mut n = 1;
    while to.exists() {
        to = to_dir.join(format!("{name}.{n}"));
        n += 1;
    }
    Ok(to)
}

/// Moves `p` into `<dir>/damaged/`.
fn move_aside(dir: &Path, p: &Path) -> Result<PathBuf> {
    let to = aside_name(dir, p)?;
    std::fs::rename(p, &to)
        .with_context(|| format!("cannot move {} to {}", p.display(), to.display()))?;
    Ok(to)
}

/// Copies `p` into `<dir>/damaged/` (before a repair replaces it).
fn copy_aside(dir: &Path, p: &Path) -> std::io::Result<()> {
    std::fs::copy(p, aside_name(dir, p)?).map(|_| ())
}
