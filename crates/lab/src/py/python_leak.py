# jitterscope lab worker: the opposite of native_leak.py. Python objects (dicts holding
# strings) pile up in a module-level list that nothing ever trims, so the growth is inside
# the Python heap and visible to gc and the interpreter's allocator.
# argv: rate_bytes_per_s cap_bytes
import ctypes, gc, json, signal, sys, time

ctypes.CDLL(None).prctl(15, b"lab-python-leak", 0, 0, 0)

rate, cap = int(sys.argv[1]), int(sys.argv[2])
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)

CACHE = []
# A dict with a 200-character string costs about 550 bytes (sys.getsizeof of both, plus the
# list slot); the exact figure matters less than the trend.
PER_ITEM = 550
held = 0
req = 0
t0 = time.monotonic()
while not stop:
    tick = time.monotonic()
    n = min(rate // 10, cap - held) // PER_ITEM
    for _ in range(max(n, 0)):
        CACHE.append({"request": req, "session": "jitterscope.lab.session-%010d " % req + "x" * 170})
        req += 1
    held += max(n, 0) * PER_ITEM
    time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))

print(json.dumps({"objects": len(CACHE), "approx_bytes": held, "gc_objects": len(gc.get_objects()),
                  "seconds": time.monotonic() - t0}))
