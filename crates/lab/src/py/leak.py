# jitterscope lab worker: a leaking Python process (case 5).
# argv: mode rate_bytes_per_s cap_bytes [name]
#  native: a C library (libc's malloc through ctypes, as a C extension would) keeps a 64-byte
#          context record per "request" and never frees it; the records carry a repeated marker
#          string. The Python object count stays flat, so gc and guppy see nothing.
#  python: dicts holding strings pile up in a module-level list that is never trimmed; the
#          growth is inside the Python heap, visible to gc and the interpreter's allocator.
# Grows at `rate` in ten steps per second until `cap`; prints a JSON report on SIGTERM/SIGINT.
import ctypes, gc, json, signal, sys, time

mode, rate, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
libc = ctypes.CDLL(None)
name = sys.argv[4] if len(sys.argv) > 4 else "lab-native-leak" if mode == "native" else "lab-python-leak"
libc.prctl(15, name.encode(), 0, 0, 0)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]

stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)

BLOCK, RECORD = 4096, 64
# A dict with a 200-character string costs about 550 bytes (sys.getsizeof of both, plus the
# list slot); the exact figure matters less than the trend.
PER_ITEM = 550
CACHE = []
held = req = 0


def leak_native(budget):
    global req
    done = 0
    while done < budget:
        recs = b"".join(
            (b"jitterscope.lab.context_info{req=%010d}" % (req + i)).ljust(RECORD - 1, b" ") + b"\0"
            for i in range(BLOCK // RECORD)
        )
        req += BLOCK // RECORD
        p = libc.malloc(BLOCK)
        if not p:  # out of memory: stop growing rather than crash
            return None
        ctypes.memmove(p, recs, BLOCK)
        done += BLOCK
    return done


def leak_python(budget):
    global req
    n = budget // PER_ITEM
    for _ in range(n):
        CACHE.append({"request": req, "session": "jitterscope.lab.session-%010d " % req + "x" * 170})
        req += 1
    return n * PER_ITEM


leak = leak_native if mode == "native" else leak_python
# What the interpreter itself accounts for, before and after: pymalloc's live blocks and the
# objects gc tracks. A native leak leaves both flat.
blocks0, gc0 = sys.getallocatedblocks(), len(gc.get_objects())
t0 = time.monotonic()
while not stop:
    tick = time.monotonic()
    grown = leak(max(0, min(rate // 10, cap - held)))
    if grown is None:
        cap = held
    else:
        held += grown
    time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))

print(json.dumps({"mode": mode, "leaked_bytes": held, "records": req, "objects": len(CACHE),
                  "allocated_blocks_start": blocks0, "allocated_blocks_end": sys.getallocatedblocks(),
                  "gc_objects_start": gc0, "gc_objects_end": len(gc.get_objects()),
                  "seconds": time.monotonic() - t0}))
