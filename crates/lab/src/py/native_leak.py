# jitterscope lab worker: a Python process leaking outside the Python heap (case 5).
# A C library (here libc's malloc through ctypes, as a C extension would) keeps a context
# record per "request" and never frees it; the records carry a repeated marker string. The
# Python object count stays flat, so Python-level tools (gc, guppy) see nothing.
# argv: rate_bytes_per_s cap_bytes
import ctypes, json, signal, sys, time

libc = ctypes.CDLL(None)
libc.prctl(15, b"lab-native-leak", 0, 0, 0)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]

rate, cap = int(sys.argv[1]), int(sys.argv[2])
BLOCK, RECORD = 4096, 64
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)

leaked = blocks = 0
req = 0
t0 = time.monotonic()
while not stop:
    tick = time.monotonic()
    want = min(rate // 10, cap - leaked)
    done = 0
    while done < want:
        recs = b"".join(
            (b"jitterscope.lab.context_info{req=%010d}" % (req + i)).ljust(RECORD - 1, b" ") + b"\0"
            for i in range(BLOCK // RECORD)
        )
        req += BLOCK // RECORD
        p = libc.malloc(BLOCK)
        ctypes.memmove(p, recs, BLOCK)
        done += BLOCK
        blocks += 1
    leaked += done
    time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))

print(json.dumps({"leaked_bytes": leaked, "blocks": blocks, "records": req,
                  "seconds": time.monotonic() - t0}))
