//! What a process is made of, as far as leaks go: its allocator (and version), whether it is a
//! Python interpreter, and whether it is a worker of a server that can recycle its workers.

use std::io::Read;

use serde::Serialize;

use jitterscope_sources::smaps::Mapping;

/// The allocator a process uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocator {
    /// `jemalloc`, `tcmalloc`, `mimalloc` or `glibc malloc`.
    pub name: String,
    /// The library file it was found in.
    pub library: Option<String>,
    /// Its version, when the file says (jemalloc's version string).
    pub version: Option<String>,
}

/// The allocator, from the libraries a process maps: a preloaded or linked jemalloc, tcmalloc
/// or mimalloc wins over glibc's malloc, which every dynamically linked process maps.
pub fn allocator(paths: &[&str]) -> Option<Allocator> {
    let find = |needle: &str| {
        paths
            .iter()
            .find(|p| p.rsplit('/').next().is_some_and(|f| f.contains(needle)))
            .map(|p| p.to_string())
    };
    for (needle, name) in [
        ("jemalloc", "jemalloc"),
        ("tcmalloc", "tcmalloc"),
        ("mimalloc", "mimalloc"),
    ] {
        if let Some(p) = find(needle) {
            let version = (name == "jemalloc").then(|| jemalloc_version(&p)).flatten();
            return Some(Allocator {
                name: name.into(),
                library: Some(p),
                version,
            });
        }
    }
    find("libc.so").map(|p| Allocator {
        name: "glibc malloc".into(),
        library: Some(p),
        version: None,
    })
}

/// glibc malloc's memory as its mappings show it: the main arena is `[heap]`; every other arena
/// (one per thread that contended for malloc, up to 8 per CPU) is a heap of its own, reserved as
/// a 64 MiB-aligned 64 MiB region, of which the used part is read-write and the rest
/// inaccessible. Their bookkeeping (free lists, top chunk) is inside the process and not read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GlibcArenas {
    /// Resident bytes of the main arena (`[heap]`).
    pub main_resident: u64,
    /// Thread arenas' heaps.
    pub heaps: u64,
    /// Their resident bytes.
    pub heaps_resident: u64,
}

/// Finds glibc's thread-arena heaps among the mappings: 64 MiB-aligned anonymous regions whose
/// read-write start and inaccessible rest add up to 64 MiB.
pub fn glibc_arenas(m: &[Mapping]) -> GlibcArenas {
    const HEAP: u64 = 64 << 20;
    let mut a = GlibcArenas::default();
    for (i, x) in m.iter().enumerate() {
        if x.path == "[heap]" {
            a.main_resident += x.rss_bytes;
        }
        if !x.path.is_empty() || x.start % HEAP != 0 || !x.perms.starts_with("rw") {
            continue;
        }
        let mut end = x.end;
        if let Some(rest) = m.get(i + 1) {
            if rest.start == end && rest.perms.starts_with("---") && rest.path.is_empty() {
                end = rest.end;
            }
        }
        if end - x.start == HEAP {
            a.heaps += 1;
            a.heaps_resident += x.rss_bytes;
        }
    }
    a
}

/// The file paths of a process's mappings, once each.
pub fn mapped_paths(m: &[Mapping]) -> Vec<&str> {
    let mut v: Vec<&str> = m
        .iter()
        .map(|m| m.path.as_str())
        .filter(|p| p.starts_with('/'))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// jemalloc's version string (`5.2.1-0-g<40 hex>`, its `JEMALLOC_VERSION`), read from the
/// library file (at most 32 MiB).
pub fn jemalloc_version(path: &str) -> Option<String> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(32 << 20)
        .read_to_end(&mut buf)
        .ok()?;
    version_in(&buf)
}

/// Finds `<maj>.<min>.<patch>-<n>-g<40 hex>` in bytes and returns `<maj>.<min>.<patch>`.
pub fn version_in(buf: &[u8]) -> Option<String> {
    let mut i = 0;
    while let Some(pos) = buf[i..].windows(2).position(|w| w == b"-g") {
        let g = i + pos;
        let hex = buf.get(g + 2..g + 42)?;
        if hex.iter().all(|c| c.is_ascii_hexdigit()) {
            // Walk back over "<n>-" then the dotted version.
            let mut s = g;
            while s > 0 && (buf[s - 1].is_ascii_digit() || buf[s - 1] == b'.' || buf[s - 1] == b'-')
            {
                s -= 1;
            }
            let text = std::str::from_utf8(&buf[s..g]).ok()?;
            let ver = text.split('-').next()?;
            if ver.split('.').count() == 3
                && ver
                    .split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
            {
                return Some(ver.to_string());
            }
        }
        i = g + 2;
    }
    None
}

/// The Python version (`3.11`) of an interpreter process: from its executable's name or the
/// libpython it maps. `None` for anything else.
pub fn python_version(exe: &str, paths: &[&str]) -> Option<String> {
    let from_name = |f: &str, prefix: &str| -> Option<String> {
        let rest = f.strip_prefix(prefix)?;
        let v: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let v = v.trim_end_matches('.');
        (v.contains('.') && v.starts_with('3')).then(|| v.to_string())
    };
    let file = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    from_name(&file(exe), "python")
        .or_else(|| paths.iter().find_map(|p| from_name(&file(p), "libpython")))
}

/// A server that runs this process as a worker, and how to recycle its workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerServer {
    /// `gunicorn`, `uwsgi` or `celery`.
    pub name: &'static str,
    /// The setting that recycles workers.
    pub mitigation: &'static str,
}

/// The worker server named in a command line, if any.
pub fn worker_server(cmdline: &str) -> Option<WorkerServer> {
    let ws = |name, mitigation| Some(WorkerServer { name, mitigation });
    if cmdline.contains("gunicorn") {
        ws(
            "gunicorn",
            "recycle workers: max_requests = 1000 and max_requests_jitter = 100 (gunicorn.conf.py, or --max-requests 1000 --max-requests-jitter 100); the jitter keeps workers from restarting together",
        )
    } else if cmdline.contains("uwsgi") {
        ws(
            "uwsgi",
            "recycle workers: max-requests = 1000 and max-requests-delta = 100 in the [uwsgi] section",
        )
    } else if cmdline.contains("celery") {
        ws(
            "celery",
            "recycle workers: --max-tasks-per-child 1000 (or --max-memory-per-child in KiB)",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jemalloc_version_strings() {
        let s = b"\0junk5.2.1-0-gea6b3e973b477b8061e0076bb257dbd7f3faa756\0more";
        assert_eq!(version_in(s).as_deref(), Some("5.2.1"));
        let s = b"x4.5.0-0-g04380e79f1e2428bd0ad000bbc6e3d2dfc6b66a5";
        assert_eq!(version_in(s).as_deref(), Some("4.5.0"));
        assert_eq!(version_in(b"no-gversion here"), None);
        assert_eq!(
            version_in(b"1.2-0-gea6b3e973b477b8061e0076bb257dbd7f3faa756"),
            None
        );
    }

    proptest::proptest! {
        #[test]
        fn version_scan_never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = version_in(&b);
        }
    }

    #[test]
    fn finds_glibc_thread_arenas() {
        let map = |start: u64, end: u64, perms: &str, path: &str, rss: u64| Mapping {
            start,
            end,
            perms: perms.into(),
            path: path.into(),
            rss_bytes: rss,
            ..Default::default()
        };
        let base = 0x7f00_0000_0000u64;
        let m = vec![
            map(0x5000_0000, 0x5010_0000, "rw-p", "[heap]", 700),
            map(base, base + (1 << 20), "rw-p", "", 300),
            map(base + (1 << 20), base + (64 << 20), "---p", "", 0),
            // 64 MiB-aligned but not a heap: too small with nothing after it.
            map(base + (128 << 20), base + (130 << 20), "rw-p", "", 50),
        ];
        let a = glibc_arenas(&m);
        assert_eq!((a.main_resident, a.heaps, a.heaps_resident), (700, 1, 300));
    }

    #[test]
    fn finds_allocators_and_pythons() {
        let paths = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/opt/libtcmalloc.so.4",
        ];
        assert_eq!(allocator(&paths).unwrap().name, "tcmalloc");
        assert_eq!(allocator(&paths[..1]).unwrap().name, "glibc malloc");
        assert_eq!(allocator(&[]), None);
        assert_eq!(
            python_version("/usr/bin/python3.11", &[]).as_deref(),
            Some("3.11")
        );
        assert_eq!(
            python_version("/usr/bin/uwsgi", &["/usr/lib/libpython3.9.so.1.0"]).as_deref(),
            Some("3.9")
        );
        assert_eq!(python_version("/usr/bin/perl", &[]), None);
        assert_eq!(
            worker_server("gunicorn: worker [app:app]").unwrap().name,
            "gunicorn"
        );
        assert_eq!(worker_server("/usr/bin/python3 app.py"), None);
    }
}
