//! `jitterscope tracers [--check]`: which in-kernel tracers exist and whether they load here.

use anyhow::{bail, Result};
use clap::Args;
use jitterscope_bpf::{Name, TracerCollector};
use jitterscope_sources::Root;

/// Arguments of `tracers`.
#[derive(Args, Debug)]
pub struct TracersArgs {
    /// Load and attach each tracer on this kernel, then detach, and say which work and why not.
    /// Exits non-zero when any tracer cannot run.
    #[arg(long)]
    check: bool,
    /// Print JSON Lines (one object per tracer) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `tracers`.
pub fn run(a: TracersArgs) -> Result<()> {
    if !a.check {
        for n in Name::all() {
            if a.json {
                println!(
                    "{}",
                    crate::jsonout::versioned(
                        serde_json::json!({"tracer": n.as_str(), "traces": n.what()})
                    )
                );
            } else {
                println!("{:<9} {}", n.as_str(), n.what());
            }
        }
        return Ok(());
    }
    let (collector, started) =
        TracerCollector::start(&Root::new("/"), &Name::all().collect::<Vec<_>>());
    drop(collector);
    let mut failed = 0;
    let mut total = 0;
    for s in &started {
        total += s.map_bytes;
        if a.json {
            let (ok, detail) = match &s.outcome {
                Ok(how) => (true, how.as_str()),
                Err(why) => (false, why.as_str()),
            };
            println!(
                "{}",
                crate::jsonout::versioned(serde_json::json!({
                    "tracer": s.name.as_str(),
                    "loads": ok,
                    "detail": detail,
                    "map_bytes_max": s.map_bytes,
                }))
            );
        } else {
            match &s.outcome {
                // A tracer counted by another's programs has no maps of its own.
                Ok(how) if s.map_bytes == 0 => println!("{:<9} ok      {how}", s.name.as_str()),
                Ok(how) => println!(
                    "{:<9} ok      {how}; maps ≤ {:.1} MiB",
                    s.name.as_str(),
                    s.map_bytes as f64 / 1048576.0
                ),
                Err(why) => println!("{:<9} FAILED  {why}", s.name.as_str()),
            }
        }
        failed += usize::from(s.outcome.is_err());
    }
    if !a.json {
        println!(
            "{} of {} tracers load; their maps use at most {:.1} MiB of kernel memory",
            started.len() - failed,
            started.len(),
            total as f64 / 1048576.0
        );
    }
    if failed > 0 {
        bail!("{}", failure(failed, &started));
    }
    Ok(())
}

/// The closing error: a missing privilege is not the kernel's fault, and saying "this kernel"
/// sends the operator looking for a newer one.
fn failure(failed: usize, started: &[jitterscope_bpf::Started]) -> String {
    // SAFETY: geteuid has no failure mode.
    let uid = unsafe { libc::geteuid() };
    let can = jitterscope_model::caps::can_trace();
    let denied = started
        .iter()
        .filter_map(|s| s.outcome.as_ref().err())
        .any(|why| {
            [
                "Operation not permitted",
                "Permission denied",
                "EPERM",
                "EACCES",
            ]
            .iter()
            .any(|e| why.contains(e))
        });
    if !can {
        format!(
            "{failed} tracer(s) cannot run: loading BPF needs root, or CAP_BPF and CAP_PERFMON \
             (running as uid {uid} without them)"
        )
    } else if denied {
        format!(
            "{failed} tracer(s) cannot run: permission denied although this process has CAP_BPF \
             and CAP_PERFMON (uid {uid}; tracefs also needs CAP_DAC_READ_SEARCH when not root, \
             and a container, lockdown or a security module may withhold them; see above)"
        )
    } else {
        format!("{failed} tracer(s) cannot run on this kernel (see above)")
    }
}
