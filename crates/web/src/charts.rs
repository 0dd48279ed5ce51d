//! The web UI's charts: which series each timeline shows, named by metric handles so a renamed
//! metric fails the build instead of leaving a chart empty. `/api/v1/charts` serves this list
//! and the page draws what it says; each chart's `select` is asked of `/api/v1/series`.

use jitterscope_model::metrics::{cgroup, cpu, irq, mem, process, psi, tracer};
use jitterscope_model::registry::{Sel, Unit};
use serde::Serialize;

/// One timeline.
pub struct Chart {
    /// Stable id (the page's `data-chart`).
    pub id: &'static str,
    /// Title, without its unit (added from the metrics').
    pub title: &'static str,
    /// The series drawn; all in one unit.
    pub series: &'static [Sel],
    /// Keep only the series with the highest peaks (for per-cgroup and per-process metrics).
    pub top: Option<usize>,
}

/// The charts, top to bottom.
pub static CHARTS: &[Chart] = &[
    Chart {
        id: "cpu",
        title: "CPU: system and user, of all CPUs",
        series: &[Sel::all(&cpu::SYS_PCT), Sel::all(&cpu::USR_PCT)],
        top: None,
    },
    Chart {
        id: "runq",
        title: "Run-queue latency p99",
        series: &[Sel::all(&tracer::RUNQLAT_P99_USEC)],
        top: None,
    },
    Chart {
        id: "throttling",
        title: "Throttled periods per cgroup",
        series: &[Sel::all(&cgroup::CPU_THROTTLED_PCT)],
        top: Some(6),
    },
    Chart {
        id: "reclaim",
        title: "Reclaim: stalls and allocation stalls",
        series: &[
            Sel::all(&tracer::RECLAIM_STALLS_PER_S),
            Sel::all(&mem::RECLAIM_ALLOCSTALL_PER_S),
        ],
        top: None,
    },
    Chart {
        id: "tlb",
        title: "TLB-shootdown IPIs",
        series: &[Sel::all(&irq::TLB_PER_S)],
        top: None,
    },
    Chart {
        id: "psi",
        title: "Pressure stalls: some, of the time",
        series: &[
            Sel::of(&psi::SOME_PCT, &["cpu"]),
            Sel::of(&psi::SOME_PCT, &["memory"]),
            Sel::of(&psi::SOME_PCT, &["io"]),
        ],
        top: None,
    },
    Chart {
        id: "rss",
        title: "RSS of the largest processes",
        series: &[Sel::all(&process::PROC_RSS_BYTES)],
        top: Some(6),
    },
];

/// A chart as `/api/v1/charts` gives it.
#[derive(Debug, Serialize)]
pub struct ChartOut {
    pub id: &'static str,
    /// Title with the unit's symbol.
    pub title: String,
    /// Title without it (the page shows its own unit where it scales one, µs as ms).
    pub name: &'static str,
    /// The unit of its series (`percent`, `bytes`…).
    pub unit: &'static str,
    /// Comma-separated series globs for `/api/v1/series`.
    pub select: String,
    /// `top` for `/api/v1/series`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top: Option<usize>,
    /// Help of each metric drawn.
    pub help: Vec<&'static str>,
}

impl Chart {
    /// The unit of its series (its first series'; a test checks they agree).
    pub fn unit(&self) -> Unit {
        self.series[0].def.unit
    }

    /// As served.
    pub fn out(&self) -> ChartOut {
        let mut help: Vec<&'static str> = self.series.iter().map(|s| s.def.help).collect();
        help.dedup();
        ChartOut {
            id: self.id,
            title: format!("{} ({})", self.title, self.unit().symbol()),
            name: self.title,
            unit: self.unit().as_str(),
            select: self
                .series
                .iter()
                .map(|s| s.select().to_string())
                .collect::<Vec<_>>()
                .join(","),
            top: self.top,
            help,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_chart_has_one_unit_and_a_unique_id() {
        jitterscope_testkit::assert_unique(CHARTS.iter().map(|c| c.id), "chart ids");
        for c in CHARTS {
            assert!(!c.series.is_empty(), "{}", c.id);
            assert!(
                c.series.iter().all(|s| s.def.unit == c.unit()),
                "{} mixes units",
                c.id
            );
        }
        let psi = CHARTS.iter().find(|c| c.id == "psi").unwrap().out();
        assert_eq!(
            psi.select,
            "psi.cpu.some_pct,psi.memory.some_pct,psi.io.some_pct"
        );
        assert_eq!(psi.title, "Pressure stalls: some, of the time (%)");
    }
}
