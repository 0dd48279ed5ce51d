# jitterscope lab worker: a pre-fork server whose workers leak natively, then the server is
# killed (issue 18: most leaks end in a kill). argv: workers rate_bytes_per_s kill_after_s
#  The master forks `workers` children (named lab-leak-worker) that malloc and touch
#  `rate` bytes per second each and never free them, as a C extension in a web worker would.
#  After `kill_after_s` the master SIGKILLs its workers and does not wait for them, so they
#  stay zombies for two seconds (their RSS then reads 0 in /proc: no memory map), then the
#  master is killed too (SIGKILL, as an OOM kill, a deploy or `kill -9` of the server would).
#  Its zombie workers are then reaped by whoever adopts them.
import ctypes, os, signal, sys, time

workers, rate, kill_after = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.prctl(15, b"lab-prefork", 0, 0, 0)


def work():
    libc.prctl(15, b"lab-leak-worker", 0, 0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    block = 64 << 10
    while True:
        tick = time.monotonic()
        for _ in range(max(1, rate // 10 // block)):
            p = libc.malloc(block)
            if p:
                ctypes.memset(p, 0x5A, block)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))


pids = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        work()
        os._exit(0)
    pids.append(pid)


def stop(*_):
    for p in pids:
        os.kill(p, signal.SIGKILL)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
time.sleep(kill_after)
for p in pids:
    os.kill(p, signal.SIGKILL)
time.sleep(2.0)
os.kill(os.getpid(), signal.SIGKILL)
