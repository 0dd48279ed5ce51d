# jitterscope lab worker: the benign parts of the soak scenario, one per invocation.
# Run as `python3 <lab dir>/soak.py part [args...]`; each part names itself (comm) so the recording shows who did what.
#  httpd DIR PORT              python's http.server on 127.0.0.1:PORT serving DIR
#  load PORT NAMES             a load generator: 4 threads GETting NAMES (comma-separated)
#                              from 127.0.0.1:PORT, each pausing 5 ms between requests
#  db PATH ROWS                an SQLite database of ROWS rows (about 200 bytes each) read at
#                              random by primary key: it fits in memory (page cache and
#                              SQLite's own cache), so the reads are CPU, not disk
#  warmup BYTES RAMP_S         a service warming up: its RSS rises by BYTES over RAMP_S
#                              seconds (a cache being filled), then stays flat while it works
#  tools                       short-lived tools one after another: each grows 20-30 MiB over
#                              4-12 s (as cc1, an archiver or a test runner does) and exits 0
#  grow BYTES SECONDS          one such tool
# Stops on SIGTERM/SIGINT and prints a JSON report.
import ctypes, json, os, random, signal, subprocess, sys, threading, time

libc = ctypes.CDLL(None)


def name(comm):
    libc.prctl(15, comm.encode(), 0, 0, 0)


stop = threading.Event()


def on_term(*_):
    stop.set()


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
part, args = sys.argv[1], sys.argv[2:]
report = {"part": part}


def httpd(root, port):
    import functools, http.server

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_):
            pass

    name("lab-httpd")
    handler = functools.partial(Quiet, directory=root)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    stop.wait()
    srv.shutdown()


def load(port, names):
    import urllib.request

    name("lab-load")
    names = names.split(",")
    counts = {"requests": 0, "bytes": 0, "errors": 0}
    lock = threading.Lock()

    def client():
        while not stop.is_set():
            url = f"http://127.0.0.1:{port}/{random.choice(names)}"
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    n = len(r.read())
                with lock:
                    counts["requests"] += 1
                    counts["bytes"] += n
            except OSError:
                with lock:
                    counts["errors"] += 1
                stop.wait(0.2)  # the server starting, or gone at the end
            stop.wait(0.005)

    ts = [threading.Thread(target=client) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    report.update(counts)


def db(path, rows):
    import sqlite3

    name("lab-sqlite")
    rows = int(rows)
    con = sqlite3.connect(path)
    con.execute("PRAGMA cache_size = -65536")  # 64 MiB: the table fits
    con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
    if con.execute("SELECT count(*) FROM t").fetchone()[0] < rows:
        con.executemany("INSERT OR REPLACE INTO t VALUES (?, ?)",
                        ((i, f"row-{i:09d}-" + "v" * 180) for i in range(rows)))
        con.commit()
    reads = 0
    while not stop.is_set():
        for _ in range(200):
            con.execute("SELECT v FROM t WHERE id = ?", (random.randrange(rows),)).fetchone()
        reads += 200
        time.sleep(0.01)
    report["reads"] = reads


def warmup(nbytes, ramp_s):
    name("lab-warmup")
    nbytes, ramp_s = int(nbytes), float(ramp_s)
    cache, held, t0 = [], 0, time.monotonic()
    # Filled in steps of a tenth of a second, touched so they are resident.
    while not stop.is_set():
        due = min(nbytes, int(nbytes * (time.monotonic() - t0) / ramp_s))
        if due > held:
            cache.append(bytearray(b"w" * (due - held)))
            held = due
        elif held >= nbytes:
            break
        stop.wait(0.1)
    report["warm_s"] = round(time.monotonic() - t0, 1)
    # Warm: serve from the cache (read it), nothing more to allocate.
    while not stop.is_set():
        sum(len(c) for c in cache)
        stop.wait(0.5)
    report["bytes"] = held


def grow(nbytes, secs):
    name("lab-tool")
    nbytes, secs = int(nbytes), float(secs)
    parts, t0, held = [], time.monotonic(), 0
    while held < nbytes and not stop.is_set():
        step = min(nbytes - held, max(1, int(nbytes * 0.05 / secs)))
        parts.append(bytearray(b"t" * step))
        held += step
        time.sleep(0.05)
    # Its work done, it exits normally, as a compiler does.


def tools():
    name("lab-tools")
    runs = 0
    while not stop.is_set():
        size = random.randint(20, 30) << 20
        secs = random.uniform(4, 12)
        p = subprocess.Popen([sys.executable, SELF, "grow", str(size), f"{secs:.1f}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while p.poll() is None:
            if stop.wait(0.2):
                p.terminate()
                p.wait()
        runs += 1
        stop.wait(random.uniform(1, 3))
    report["runs"] = runs


# Run from a file in the lab directory (not -c): the tools start copies of it.
SELF = os.path.abspath(sys.argv[0])
parts = {"httpd": httpd, "load": load, "db": db, "warmup": warmup, "grow": grow, "tools": tools}
parts[part](*args)
print(json.dumps(report))
