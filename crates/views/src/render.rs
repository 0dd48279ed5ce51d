//! Drawing the screen. Meaning never rests on colour: states are words and letters (`NOW`,
//! `GAP`, `E` for exiting, `-` for unknown), emphasis is bold or reversed video, so the screen
//! reads the same on a monochrome terminal, in `tmux capture-pane` and in a test buffer.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;

use crate::app::{App, Findings, Input, Panel, Relation, SortKey};
use crate::snapshot::{Cpu, Snapshot};

/// `12.3%`, `-` when unknown.
pub fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 99.95 => format!("{v:.0}%"),
        Some(v) => format!("{v:.1}%"),
        None => "-".into(),
    }
}

/// A count or rate in at most five characters: `850`, `12.3k`, `4.1M`.
pub fn num(v: Option<f64>) -> String {
    let Some(v) = v else { return "-".into() };
    let a = v.abs();
    if a < 10.0 && a.fract() != 0.0 {
        format!("{v:.1}")
    } else if a < 1e4 {
        format!("{v:.0}")
    } else if a < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else if a < 1e9 {
        format!("{:.1}M", v / 1e6)
    } else {
        format!("{:.1}G", v / 1e9)
    }
}

/// Bytes with a binary suffix: `512K`, `12.1M`, `3.2G`.
pub fn bytes(v: Option<f64>) -> String {
    let Some(v) = v else { return "-".into() };
    let a = v.abs();
    const K: f64 = 1024.0;
    if a < K {
        format!("{v:.0}B")
    } else if a < K * K {
        format!("{:.0}K", v / K)
    } else if a < K * K * K {
        format!("{:.1}M", v / (K * K))
    } else if a < K * K * K * K {
        format!("{:.1}G", v / (K * K * K))
    } else {
        format!("{:.1}T", v / (K * K * K * K))
    }
}

/// Microseconds as `850us`, `2.1ms`, `1.2s`.
pub fn usec(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 1000.0 => format!("{v:.0}us"),
        Some(v) if v < 1e6 => format!("{:.1}ms", v / 1e3),
        Some(v) => format!("{:.1}s", v / 1e6),
    }
}

/// A rate with its sign: `+5.0k`, `-12`, `0`.
fn signed(v: Option<f64>) -> String {
    match v {
        Some(v) if v > 0.0 => format!("+{}", num(Some(v))),
        Some(v) => num(Some(v)),
        None => "-".into(),
    }
}

/// `hh:mm:ss` of an RFC 3339 time (the date is on the title line).
fn clock(rfc: &str) -> &str {
    rfc.get(11..19).unwrap_or(rfc)
}

fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        format!("{s:<w$}")
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('~');
        t
    }
}

fn bold(s: impl Into<String>) -> Span<'static> {
    Span::styled(s.into(), Style::default().add_modifier(Modifier::BOLD))
}

fn cpu_line(c: &Cpu, label: &str) -> Line<'static> {
    Line::from(vec![
        bold(format!("{label:<4}")),
        Span::raw(format!(
            " usr {} sys {} irq {} sirq {} wait {} steal {} idle {}",
            pct(c.usr_pct),
            pct(c.sys_pct),
            pct(c.irq_pct),
            pct(c.softirq_pct),
            pct(c.iowait_pct),
            pct(c.steal_pct),
            pct(c.idle_pct)
        )),
    ])
}

/// The header lines (atop-style, for the mechanisms we diagnose).
pub fn header_lines(s: &Snapshot, per_cpu: bool) -> Vec<Line<'static>> {
    let mut out = vec![cpu_line(&s.cpu, "CPU")];
    if per_cpu {
        for c in &s.cpus {
            out.push(cpu_line(c, &c.name.replace("cpu", "cp")));
        }
    }
    let l = &s.load;
    out.push(Line::from(vec![
        bold("LOAD"),
        Span::raw(format!(
            " {} {} {} run {} blk {} exit {} | runq p99 {} max {} | csw {}/s",
            num(l.avg1.map(|v| (v * 100.0).round() / 100.0)),
            num(l.avg5.map(|v| (v * 100.0).round() / 100.0)),
            num(l.avg15.map(|v| (v * 100.0).round() / 100.0)),
            num(l.running),
            num(l.blocked),
            num(l.exiting),
            usec(l.runq_p99_usec),
            usec(l.runq_max_usec),
            num(l.ctxt_per_s)
        )),
    ]));
    let m = &s.mem;
    out.push(Line::from(vec![
        bold("MEM "),
        Span::raw(format!(
            " free {} (min {} low {}) avail {} cache {} dirty {}",
            bytes(m.free_bytes),
            bytes(m.wmark_min_bytes),
            bytes(m.wmark_low_bytes),
            bytes(m.available_bytes),
            bytes(m.cached_bytes),
            bytes(m.dirty_bytes),
        )),
    ]));
    out.push(Line::from(vec![
        bold("SLAB"),
        Span::raw(format!(
            " {} (reclaimable {}) dentries {} negative {} ({}/s)",
            bytes(m.slab_bytes),
            bytes(m.slab_reclaimable_bytes),
            num(m.dentries),
            num(m.dentries_negative),
            signed(m.negative_growth_per_s)
        )),
    ]));
    let p = &s.pag;
    out.push(Line::from(vec![
        bold("PAG "),
        Span::raw(format!(
            // What reclaim cost tasks first (direct scanning, allocation stalls, traced
            // stalls); a storm's large numbers push only majflt off an 80-column line.
            " scan kswapd {} direct {} allocstall {} stalls {} steal {} refault {} majflt {}",
            num(p.scan_kswapd_per_s),
            num(p.scan_direct_per_s),
            num(p.allocstall_per_s),
            num(p.stalls_per_s),
            num(p.steal_per_s),
            num(p.refault_per_s),
            num(p.majflt_per_s)
        )),
    ]));
    let i = &s.ipi;
    let ps = &s.psi;
    out.push(Line::from(vec![
        bold("IPI "),
        Span::raw(format!(
            " TLB {}/s CAL {}/s sent {}/s |",
            num(i.tlb_per_s),
            num(i.cal_per_s),
            num(i.shootdowns_sent_per_s)
        )),
        bold(" PSI"),
        Span::raw(format!(
            " cpu {} mem {}/{} io {}/{}",
            pct(ps.cpu_some_pct),
            pct(ps.memory_some_pct),
            pct(ps.memory_full_pct),
            pct(ps.io_some_pct),
            pct(ps.io_full_pct)
        )),
    ]));
    let mut disks: Vec<_> = s.disks.iter().collect();
    // The busiest first; loop and ram devices only when busy.
    disks.sort_by(|a, b| {
        b.util_pct
            .unwrap_or(0.0)
            .total_cmp(&a.util_pct.unwrap_or(0.0))
            .then(a.name.cmp(&b.name))
    });
    let shown: Vec<String> = disks
        .iter()
        .filter(|d| {
            !(d.name.starts_with("loop") || d.name.starts_with("ram"))
                || d.util_pct.unwrap_or(0.0) > 0.0
        })
        .take(2)
        .map(|d| {
            format!(
                "{} {} aw {} r {} w {} {}/s",
                d.name,
                pct(d.util_pct),
                usec(d.await_ms.map(|ms| ms * 1000.0)),
                num(d.reads_per_s),
                num(d.writes_per_s),
                bytes(Some(
                    d.read_bytes_per_s.unwrap_or(0.0) + d.write_bytes_per_s.unwrap_or(0.0)
                ))
            )
        })
        .collect();
    out.push(Line::from(vec![
        bold("DSK "),
        Span::raw(format!(
            " {}",
            if shown.is_empty() {
                "-".to_string()
            } else {
                shown.join(" | ")
            }
        )),
    ]));
    out
}

/// The process table's header and rows for a width.
pub fn process_lines(app: &App, rows: usize, scroll: usize, w: usize) -> Vec<Line<'static>> {
    let sorted = app.processes();
    // The sorted column's label carries a `*`.
    let col = |k: SortKey, label: &str, width: usize| {
        let l = if app.sort == k {
            format!("*{label}")
        } else {
            label.to_string()
        };
        format!("{l:>width$}")
    };
    let head = format!(
        "{:>7} {:<15} {} {} {} {} {} {} {} CGROUP",
        "PID",
        "COMM",
        col(SortKey::Cpu, "CPU", 6),
        col(SortKey::Sys, "SYS", 6),
        col(SortKey::Rss, "RSS", 6),
        col(SortKey::RssGrowth, "RGROW", 6),
        col(SortKey::Majflt, "MAJF", 5),
        col(SortKey::Madvise, "MADV", 5),
        col(SortKey::Lookups, "NOENT", 5),
    );
    let mut out = vec![Line::from(Span::styled(
        fit(&head, w),
        Style::default().add_modifier(Modifier::REVERSED),
    ))];
    let cg_w = w.saturating_sub(70).max(8);
    for p in sorted.iter().skip(scroll).take(rows) {
        let comm = if p.state.contains('E') || p.state.starts_with('Z') || p.state.starts_with('D')
        {
            format!("{} {}", p.comm, p.state)
        } else {
            p.comm.clone()
        };
        let growth = match p.rss_growth_bytes_per_s {
            Some(g) if g > 0.0 => format!("+{}", bytes(Some(g))),
            Some(g) if g < 0.0 => format!("-{}", bytes(Some(-g))),
            Some(_) => "0".into(),
            None => "-".into(),
        };
        out.push(Line::from(format!(
            "{:>7} {} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>5} {}",
            p.pid,
            fit(&comm, 15),
            pct(p.cpu_pct),
            pct(p.sys_pct),
            bytes(p.rss_bytes),
            growth,
            num(p.majflt_per_s),
            num(p.madvise_per_s),
            num(p.enoent_per_s),
            fit(short_cgroup(&p.cgroup), cg_w).trim_end()
        )));
    }
    out
}

/// The tail of a cgroup path that fits: the leaf names the container or unit.
fn short_cgroup(path: &str) -> &str {
    if path.len() <= 24 {
        return path;
    }
    match path.rfind('/') {
        Some(i) if i + 1 < path.len() => &path[i + 1..],
        _ => path,
    }
}

/// A container's label (`<runtime> [<ns>/<pod>/]<name> (<short id>)`) in `w` columns. What
/// goes first when it does not fit: the short id, then the runtime, then the start of what is
/// left, so the container's own name, at the end, stays.
fn fit_name(label: &str, w: usize) -> String {
    let fits = |s: &str| s.chars().count() <= w;
    if fits(label) {
        return label.to_string();
    }
    let name = label.rsplit_once(" (").map_or(label, |(n, _)| n);
    if fits(name) {
        return name.to_string();
    }
    let bare = name.split_once(' ').map_or(name, |(_, n)| n);
    if fits(bare) {
        return bare.to_string();
    }
    let n = bare.chars().count();
    let tail: String = bare.chars().skip(n + 1 - w.max(1)).collect();
    format!("~{tail}")
}

/// The cgroup table.
pub fn cgroup_lines(app: &App, rows: usize, scroll: usize, w: usize) -> Vec<Line<'static>> {
    let head = format!(
        "{:<26} {:>6} {:>5} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6}",
        "CGROUP", "CPU", "QUOTA", "OFQUOT", "THROT", "MEM", "LIMIT", "OFLIM", "STALL"
    );
    let mut out = vec![Line::from(Span::styled(
        fit(&head, w),
        Style::default().add_modifier(Modifier::REVERSED),
    ))];
    for c in app.cgroups().iter().skip(scroll).take(rows) {
        // A container's path is a 64-hex id; its name is what people look for.
        let path = match &c.owner {
            Some(owner) => fit_name(owner, 26),
            None if c.path.chars().count() > 26 => {
                let tail: String = c
                    .path
                    .chars()
                    .rev()
                    .take(25)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                format!("~{tail}")
            }
            None => c.path.clone(),
        };
        out.push(Line::from(format!(
            "{:<26} {:>6} {:>5} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6}",
            path,
            pct(c.cpu_pct),
            c.quota_cores.map_or("-".into(), |q| format!("{q:.2}")),
            pct(c.usage_of_quota_pct),
            pct(c.throttled_pct),
            bytes(c.mem_bytes),
            bytes(c.mem_limit_bytes),
            pct(c.mem_of_limit_pct),
            num(c.reclaim_stalls_per_s)
        )));
    }
    out
}

/// The episodes near the shown time, then the findings of its window.
pub fn event_lines(app: &App, rows: usize, scroll: usize, w: usize) -> Vec<Line<'static>> {
    let near = app.events_near();
    let title = format!(
        "EPISODES ({}){}",
        app.events.len(),
        app.events_note
            .as_ref()
            .map(|n| format!(" {n}"))
            .unwrap_or_default()
    );
    let mut body: Vec<Line<'static>> = Vec::new();
    for (e, rel) in &near {
        let tag = match rel {
            Relation::Now => "NOW ",
            Relation::Before => "    ",
            Relation::After => "next",
        };
        let dur = ((e.to_ns - e.from_ns) / 1_000_000_000).max(1);
        body.push(Line::from(fit(
            &format!(
                "{tag} {} {:>4}s {:<17} peak {} (base {}, thr {}) {}{}",
                clock(&jitterscope_model::time::rfc3339(e.from_ns)),
                dur,
                e.kind,
                num(Some(e.peak)),
                num(Some(e.baseline)),
                num(Some(e.threshold)),
                e.series,
                if e.ongoing { " ONGOING" } else { "" }
            ),
            w,
        )));
    }
    let window = app
        .findings_window
        .map(|(f, t)| {
            format!(
                " {}-{}",
                clock(&jitterscope_model::time::rfc3339(f)),
                clock(&jitterscope_model::time::rfc3339(t))
            )
        })
        .unwrap_or_default();
    let mut findings: Vec<Line<'static>> = Vec::new();
    let ftitle = match &app.findings {
        Findings::Unavailable(why) => format!("FINDINGS: {why}"),
        Findings::Pending => format!("FINDINGS{window}: diagnosing…"),
        Findings::Ready(Err(e)) => format!("FINDINGS{window}: {e}"),
        Findings::Ready(Ok(f)) if f.is_empty() => format!("FINDINGS{window}: none"),
        Findings::Ready(Ok(f)) => {
            for x in f {
                findings.push(Line::from(fit(
                    &format!(
                        "{:.2} {} {}",
                        x.confidence,
                        if x.mechanism { "MECH" } else { "RES " },
                        x.title
                    ),
                    w,
                )));
                if let Some(r) = x.remediation.first() {
                    findings.push(Line::from(fit(&format!("       fix: {r}"), w)));
                }
            }
            format!("FINDINGS{window} ({})", f.len())
        }
    };
    let head = |s: String| {
        Line::from(Span::styled(
            fit(&s, w),
            Style::default().add_modifier(Modifier::REVERSED),
        ))
    };
    // Below the two title lines: findings keep at least half the rows when there are any
    // (they are the answer), episodes take what they can fill of the rest.
    let free = rows.saturating_sub(1);
    let keep = findings.len().min(free.div_ceil(2));
    let ev_rows = body.len().min(free - keep);
    let mut out = vec![head(title)];
    out.extend(body.into_iter().skip(scroll).take(ev_rows));
    out.push(head(ftitle));
    let left = (rows + 1).saturating_sub(out.len());
    out.extend(findings.into_iter().take(left));
    out
}

/// Lines the findings take when listed in full.
fn finding_lines(app: &App) -> usize {
    match &app.findings {
        Findings::Ready(Ok(f)) => f
            .iter()
            .map(|x| 1 + usize::from(!x.remediation.is_empty()))
            .sum(),
        _ => 0,
    }
}

/// The key help.
pub const HELP: &[&str] = &[
    "t / T      one sample forward / back (as in atop)",
    "[ / ]      previous / next episode",
    "g          go to a time (RFC 3339, HH:MM:SS, '10m ago', epoch s)",
    "f / End    newest sample (top: follow it again)",
    "C S M G    sort by CPU, SYS, RSS, RSS growth",
    "F A L      sort by major faults, madvise/s, failed look-ups/s",
    "/          filter by name, command, cgroup or pid (Esc clears)",
    "c          per-CPU lines",
    "Tab        next panel; Up/Down j/k PgUp/PgDn Home scroll it",
    "? / h      this help (any key closes)",
    "q / Ctrl-C quit",
];

/// Draws the whole screen. `now_ns` is the wall clock (for the stale marker).
pub fn draw(f: &mut Frame, app: &App, now_ns: i64) {
    let area = f.area();
    let w = area.width as usize;
    let Some(s) = &app.snapshot else {
        let msg = Paragraph::new(vec![
            Line::from(format!("jitterscope {}: {}", app.title, app.describe())),
            Line::from("no sample yet"),
        ]);
        f.render_widget(msg, area);
        return;
    };
    let header = header_lines(s, app.per_cpu);
    let [top, head, rest, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(header.len() as u16),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);

    // Title: what and when, and the markers.
    let mut flags: Vec<String> = Vec::new();
    if let Some(g) = s.missing_before_s {
        flags.push(format!("GAP {g:.0}s missing before"));
    }
    if let Some(age) = app.stale_s(now_ns) {
        flags.push(format!("NO SAMPLE for {age:.0}s"));
    }
    if s.interval_s == 0.0 {
        flags.push("NO PREVIOUS SAMPLE: rates unknown".into());
    }
    let mode = if app.follow { "LIVE" } else { "PAUSED" };
    let title = format!(
        "jitterscope {} {} {} {} {}{}",
        app.title,
        s.time.replace('T', " "),
        s.hostname,
        mode,
        app.describe(),
        if flags.is_empty() {
            String::new()
        } else {
            format!(" | {}", flags.join(" | "))
        }
    );
    f.render_widget(
        Paragraph::new(Line::from(Span::styled(
            fit(&title, w),
            Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD),
        ))),
        top,
    );
    f.render_widget(Paragraph::new(header), head);

    // Panels: each gets a few rows, then the focused one takes what it can fill, then the
    // others; rows nothing can fill go to the processes.
    let h = rest.height as usize;
    let want = [
        1 + app.processes().len(),
        1 + app.cgroups().len(),
        2 + app.events_near().len() + finding_lines(app),
    ];
    let mut alloc = [
        4usize.min(want[0]),
        3usize.min(want[1]),
        4usize.min(want[2]),
    ];
    let focus = match app.focus {
        Panel::Processes => 0,
        Panel::Cgroups => 1,
        Panel::Events => 2,
    };
    let mut left = h.saturating_sub(alloc.iter().sum());
    for i in [focus, 0, 2, 1] {
        let more = want[i].saturating_sub(alloc[i]).min(left);
        alloc[i] += more;
        left -= more;
    }
    alloc[0] += left;
    let [pr, cr, er] = alloc;
    let [pa, ca, ea] = Layout::vertical([
        Constraint::Length(pr as u16),
        Constraint::Length(cr as u16),
        Constraint::Length(er as u16),
    ])
    .areas(rest);
    let scroll = |p: Panel| if app.focus == p { app.scroll } else { 0 };
    f.render_widget(
        Paragraph::new(process_lines(
            app,
            pr.saturating_sub(1),
            scroll(Panel::Processes),
            w,
        )),
        pa,
    );
    f.render_widget(
        Paragraph::new(cgroup_lines(
            app,
            cr.saturating_sub(1),
            scroll(Panel::Cgroups),
            w,
        )),
        ca,
    );
    f.render_widget(
        Paragraph::new(event_lines(
            app,
            er.saturating_sub(1),
            scroll(Panel::Events),
            w,
        )),
        ea,
    );

    // Bottom: the line being typed, a message, or the keys.
    let line = match &app.input {
        Some(Input::Filter(b)) => format!("filter: {b}_"),
        Some(Input::Goto(b)) => format!("go to time: {b}_"),
        None => match &app.message {
            Some(m) => m.clone(),
            None => format!(
                "sort {} {}| t/T step  [/] episode  g time  / filter  ? help  q quit",
                app.sort.label(),
                if app.filter.is_empty() {
                    String::new()
                } else {
                    format!("filter '{}' ", app.filter)
                }
            ),
        },
    };
    f.render_widget(
        Paragraph::new(Line::from(Span::styled(
            fit(&line, w),
            Style::default().add_modifier(Modifier::BOLD),
        ))),
        bottom,
    );

    if app.help {
        let hw = (HELP.iter().map(|l| l.len()).max().unwrap_or(20) + 4).min(w) as u16;
        let hh = (HELP.len() + 2).min(area.height as usize) as u16;
        let r = Rect {
            x: area.x + (area.width.saturating_sub(hw)) / 2,
            y: area.y + (area.height.saturating_sub(hh)) / 2,
            width: hw,
            height: hh,
        };
        let mut lines = vec![Line::from(Span::styled(
            fit(" KEYS", hw as usize),
            Style::default().add_modifier(Modifier::REVERSED),
        ))];
        lines.extend(HELP.iter().map(|l| Line::from(format!("  {l}"))));
        f.render_widget(Clear, r);
        f.render_widget(Paragraph::new(lines), r);
    }
}

#[cfg(test)]
mod tests {
    use super::fit_name;

    #[test]
    fn container_names_fit_their_column() {
        assert_eq!(
            fit_name("podman api (ee295493ada3)", 26),
            "podman api (ee295493ada3)"
        );
        // The id goes first, then the name is cut.
        assert_eq!(
            fit_name("podman checkout-api (ee295493ada3)", 26),
            "podman checkout-api"
        );
        // Then the runtime, then the start: the container's name stays.
        assert_eq!(
            fit_name("containerd shop/checkout-7d9f/api (ee295493ada3)", 26),
            "shop/checkout-7d9f/api"
        );
        assert_eq!(
            fit_name(
                "containerd shop/checkout-api-7d9f5c6b4-x2x9q/api (ee295493ada3)",
                26
            ),
            "~t-api-7d9f5c6b4-x2x9q/api"
        );
        assert_eq!(fit_name("x", 1), "x");
        assert_eq!(fit_name("xyz", 0), "~");
        assert_eq!(fit_name("xyz", 2), "~z");
    }
}
