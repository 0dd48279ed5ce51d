//! `jitterscope flame` and `jitterscope top-functions`: the stack samples of any past window as a
//! flame graph (SVG), folded stacks, a pprof profile, or the hottest kernel and user functions.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use jitterscope_model::time::rfc3339;
use jitterscope_profile::system::FileSymbolizer;
use jitterscope_profile::window::{Filter, Hot, Named};

use crate::timearg::Window;

/// Which window and which samples of it.
#[derive(Args, Debug)]
pub struct Selection {
    // --since/--from/--to; without --from or --since, the last minute.
    #[command(flatten)]
    window: Window,
    /// Only this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Only processes or threads with this name.
    #[arg(long)]
    comm: Option<String>,
    /// Only tasks whose cgroup path contains this.
    #[arg(long)]
    cgroup: Option<String>,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Arguments of `flame`.
#[derive(Args, Debug)]
pub struct FlameArgs {
    #[command(flatten)]
    sel: Selection,
    /// Only kernel frames, of samples taken in the kernel.
    #[arg(long)]
    kernel_only: bool,
    /// Write folded stacks (`comm;root;…;leaf count`, kernel frames `_[k]`) instead of SVG.
    #[arg(long, conflicts_with = "pprof")]
    folded: bool,
    /// Write a gzipped pprof profile to this file (for `go tool pprof`, Pyroscope).
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Write the SVG (or folded stacks) to this file instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE", conflicts_with = "pprof")]
    output: Option<PathBuf>,
}

/// Arguments of `top-functions`.
#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    sel: Selection,
    /// Functions listed per table.
    #[arg(short = 'n', long, default_value_t = 15)]
    limit: usize,
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// A window read and named, with what it was.
struct Read {
    named: Named,
    from: i64,
    to: i64,
    host: String,
    filter: String,
}

fn read(sel: &Selection, kernel_only: bool) -> Result<Read> {
    let now = chrono::Utc::now();
    let (from, to) = sel
        .window
        .resolve(std::time::Duration::from_secs(60), now)
        .map_err(anyhow::Error::msg)?;
    if from > to {
        bail!("--from ({}) is after --to ({})", rfc3339(from), rfc3339(to));
    }
    let dir = crate::store_dir(sel.dir.clone());
    if !dir.is_dir() {
        bail!("no store at {}", dir.display());
    }
    let filter = Filter {
        pid: sel.pid,
        comm: sel.comm.clone(),
        cgroup: sel.cgroup.clone(),
        kernel_only,
        skip_idle: false,
    };
    let (w, host, damage) = jitterscope_profile::window::read_store(&dir, from, to, &filter)
        .with_context(|| format!("cannot read store {}", dir.display()))?;
    if let Some(note) = damage.note() {
        eprintln!("jitterscope: {note}");
    }
    if w.slices == 0 {
        if !crate::nodata::has_samples(&dir, from, to) {
            return Err(crate::nodata::no_samples(&dir, from, to).into());
        }
        return Err(crate::nodata::NoData(format!(
            "no stack samples recorded between {} and {}, only samples without stacks (the recorder ran with --profile-hz 0, or without perf events: `jitterscope tracers` says which)",
            rfc3339(from),
            rfc3339(to)
        ))
        .into());
    }
    let mut parts = Vec::new();
    if let Some(p) = sel.pid {
        parts.push(format!("pid {p}"));
    }
    if let Some(c) = &sel.comm {
        parts.push(format!("comm {c}"));
    }
    if let Some(g) = &sel.cgroup {
        parts.push(format!("cgroup *{g}*"));
    }
    if kernel_only {
        parts.push("kernel only".into());
    }
    let named = w.resolve(&mut FileSymbolizer::new());
    if named.samples == 0 {
        return Err(crate::nodata::NoData(format!(
            "no stack samples match {} between {} and {} ({} samples in the window)",
            parts.join(", "),
            rfc3339(from),
            rfc3339(to),
            named.total
        ))
        .into());
    }
    Ok(Read {
        named,
        from,
        to,
        host,
        filter: parts.join(", "),
    })
}

impl Read {
    fn summary(&self) -> String {
        let n = &self.named;
        let mut s = format!("{} samples at {} Hz in {} s", n.samples, n.hz, n.slices);
        if !self.filter.is_empty() {
            s.push_str(&format!(" ({}; {} in total)", self.filter, n.total));
        }
        if n.lost > 0 {
            s.push_str(&format!(", {} lost", n.lost));
        }
        s
    }
}

/// Runs `flame`.
pub fn run_flame(a: FlameArgs) -> Result<()> {
    let r = read(&a.sel, a.kernel_only)?;
    if let Some(path) = &a.pprof {
        let bytes = jitterscope_profile::pprof::encode(&r.named, r.from, r.to - r.from)?;
        std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("jitterscope: wrote {} ({})", path.display(), r.summary());
        return Ok(());
    }
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let res = if a.folded {
        r.named
            .folded()
            .iter()
            .try_for_each(|l| writeln!(out, "{l}"))
    } else {
        let title = format!(
            "{} {} – {}",
            if r.host.is_empty() {
                "jitterscope"
            } else {
                &r.host
            },
            rfc3339(r.from),
            rfc3339(r.to)
        );
        r.named.svg(&title, &r.summary(), &mut out)
    };
    match res.and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        r => r.context("cannot write the output")?,
    }
    if let Some(p) = &a.output {
        eprintln!("jitterscope: wrote {} ({})", p.display(), r.summary());
    }
    Ok(())
}

/// Runs `top-functions`.
pub fn run_top(a: TopArgs) -> Result<()> {
    let r = read(&a.sel, false)?;
    let (kernel, user) = r.named.hottest(a.limit);
    let total = r.named.samples.max(1) as f64;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let res = if a.json {
        let row = |h: &Hot| {
            serde_json::json!({
                "function": h.func.name.as_ref(),
                "module": h.func.module.as_ref(),
                "self_samples": h.self_samples,
                "total_samples": h.total_samples,
                "self_pct": h.self_samples as f64 * 100.0 / total,
                "total_pct": h.total_samples as f64 * 100.0 / total,
            })
        };
        let v = serde_json::json!({
            "from": rfc3339(r.from),
            "to": rfc3339(r.to),
            "samples": r.named.samples,
            "lost": r.named.lost,
            "hz": r.named.hz,
            "kernel": kernel.iter().map(row).collect::<Vec<_>>(),
            "user": user.iter().map(row).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", crate::jsonout::versioned(v))
    } else {
        (|| {
            writeln!(
                out,
                "{} – {}: {}",
                rfc3339(r.from),
                rfc3339(r.to),
                r.summary()
            )?;
            for (title, rows) in [("kernel", &kernel), ("user", &user)] {
                writeln!(out, "\n{:>7} {:>7}  {title} function", "self%", "total%")?;
                if rows.is_empty() {
                    writeln!(out, "{:>7} {:>7}  (none)", "-", "-")?;
                }
                for h in rows.iter() {
                    let module = match h.func.module.rsplit('/').next() {
                        Some(m) if !m.is_empty() => format!("  [{m}]"),
                        _ => String::new(),
                    };
                    writeln!(
                        out,
                        "{:>7.1} {:>7.1}  {}{module}",
                        h.self_samples as f64 * 100.0 / total,
                        h.total_samples as f64 * 100.0 / total,
                        h.func.name
                    )?;
                }
            }
            Ok(())
        })()
    };
    match res.and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write the output"),
    }
}
