//! `serve` under a hostile load, through the release path (the binary, loopback only, bounded in
//! count and time): 200 concurrent heavy requests and 1000 idle sockets. Every request gets an
//! answer (served, or refused with 429/413/400 and a reason, never a hang or a dropped
//! connection), a light request is answered throughout, memory stays under the documented
//! ceiling, idle sockets are closed by the header timeout, and SIGTERM ends the server with
//! heavy work in flight. How fast is `bench/serve.sh`'s business (docs/BENCHMARKS.md); the
//! bounds here are generous and only tell a hang from an answer.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use common::serve;

/// The memory ceiling `serve` documents (crates/web/src/limits.rs, docs/ARCHITECTURE.md).
const CEILING_BYTES: u64 = 256 << 20;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose")
        .join(name)
}

fn raise_nofile() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to a local.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        l.rlim_cur = l.rlim_max.min(8192);
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
}

/// The status of one request, or why there was none.
fn status(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
    let head = String::from_utf8_lossy(&buf[..buf.len().min(64)]).to_string();
    head.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))
}

fn rss_peak(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn heavy_requests_and_idle_sockets_neither_starve_nor_sink_the_server() {
    raise_nofile();
    let (mut srv, addr) = serve(&fixture("reclaim-storm"), &[]);
    let pid = srv.pid();
    let (from, to) = ("0", "4000000000");
    // 1000 sockets that never send a byte.
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(addr).expect("an idle connection is accepted"))
        .collect();
    let heavy = [
        format!("/api/v1/series?select=***&points=5000&from={from}&to={to}"),
        format!(
            "/api/v1/series?select=proc.*.cpu_pct,cgroup.*&top=50&points=2000&from={from}&to={to}"
        ),
        "/api/v1/findings".to_string(),
        "/api/v1/events".to_string(),
        "/api/v1/flame".to_string(),
    ];
    let clients: Vec<_> = (0..200)
        .map(|i| {
            let path = heavy[i % heavy.len()].clone();
            std::thread::spawn(move || (path.clone(), status(addr, &path)))
        })
        .collect();
    // A light request keeps being answered meanwhile.
    let mut light = Vec::new();
    for _ in 0..20 {
        light.push(status(addr, "/api/v1/range"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut counts = std::collections::BTreeMap::new();
    for c in clients {
        let (path, st) = c.join().unwrap();
        let st = st.unwrap_or_else(|e| panic!("{path}: no answer: {e}"));
        assert!(
            matches!(st, 200 | 400 | 413 | 429 | 503),
            "{path}: status {st}"
        );
        *counts.entry(st).or_insert(0) += 1;
    }
    eprintln!("heavy answers by status: {counts:?}");
    assert!(
        counts.contains_key(&429),
        "the queue never filled: {counts:?}"
    );
    assert!(counts.contains_key(&200), "nothing was served: {counts:?}");
    for (i, l) in light.iter().enumerate() {
        assert_eq!(l.as_ref().ok(), Some(&200), "light request {i}: {l:?}");
    }
    let peak = rss_peak(pid);
    assert!(
        peak < CEILING_BYTES,
        "peak RSS {} MiB over the {} MiB ceiling",
        peak >> 20,
        CEILING_BYTES >> 20
    );
    // The idle sockets are closed by the server once the header timeout passes.
    let mut closed = 0;
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Ok(0) | Err(_)) {
            closed += 1;
        }
    }
    assert_eq!(closed, 1000, "idle sockets left open by the server");
    // SIGTERM with heavy work in flight: the server ends.
    let inflight: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || status(addr, "/api/v1/findings")))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    srv.signal(libc::SIGTERM);
    let st = srv.wait_timeout(Duration::from_secs(10));
    assert!(st.is_some(), "serve still running 10 s after SIGTERM");
    for h in inflight {
        let _ = h.join().unwrap();
    }
}
