#!/usr/bin/env bash
# Prints the CPython structure offsets the profiler's Python frame walk uses
# (crates/profile/src/python.rs, LAYOUTS), computed by the C compiler from each version's own
# internal headers: one line per version, `3.11 key=value ...`.
#
#   scripts/python-offsets.sh [INCLUDE_DIR...]
#
# Without arguments it uses every CPython include directory it finds: Debian's
# /usr/include/python3.X (python3.X-dev) and pyenv's ~/.pyenv/versions/*/include/python3.X.
# The profiler's test `layouts_match_the_headers` runs it and compares.
set -euo pipefail
dirs=("$@")
if ((${#dirs[@]} == 0)); then
  for d in /usr/include/python3.* "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/include/python3.*; do
    [ -f "$d/internal/pycore_runtime.h" ] || [ -f "$d/internal/pycore_pystate.h" ] || continue
    dirs+=("$d")
  done
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/off.c" <<'C'
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX < 0x03090000
#include "internal/pycore_pystate.h"
#else
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#endif
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif
#define K(name, v) printf(" %s=%ld", name, (long)(v))
int main(void)
{
	printf("%d.%d", PY_MAJOR_VERSION, PY_MINOR_VERSION);
	K("runtime_interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX < 0x030C0000
	K("runtime_tstate", offsetof(_PyRuntimeState, gilstate.tstate_current));
#endif
#if PY_VERSION_HEX >= 0x030B0000
	K("interp_threads_head", offsetof(PyInterpreterState, threads.head));
	K("tstate_tid", offsetof(PyThreadState, native_thread_id));
#else
	K("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
	K("tstate_tid", offsetof(PyThreadState, thread_id));
#endif
	K("tstate_next", offsetof(PyThreadState, next));
#if PY_VERSION_HEX >= 0x030D0000
	K("tstate_frame", offsetof(PyThreadState, current_frame));
	K("frame_code", offsetof(_PyInterpreterFrame, f_executable));
	K("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#elif PY_VERSION_HEX >= 0x030B0000
	K("tstate_frame", offsetof(PyThreadState, cframe));
	K("cframe_current", offsetof(_PyCFrame, current_frame));
	K("frame_code", offsetof(_PyInterpreterFrame, f_code));
	K("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
	K("tstate_frame", offsetof(PyThreadState, frame));
	K("frame_code", offsetof(PyFrameObject, f_code));
	K("frame_instr", offsetof(PyFrameObject, f_lasti));
#endif
#if PY_VERSION_HEX >= 0x030C0000
	K("frame_previous", offsetof(_PyInterpreterFrame, previous));
	K("frame_entry", offsetof(_PyInterpreterFrame, owner));
	K("owner_cstack", FRAME_OWNED_BY_CSTACK);
#elif PY_VERSION_HEX >= 0x030B0000
	K("frame_previous", offsetof(_PyInterpreterFrame, previous));
	K("frame_entry", offsetof(_PyInterpreterFrame, is_entry));
#else
	K("frame_previous", offsetof(PyFrameObject, f_back));
#endif
	K("code_filename", offsetof(PyCodeObject, co_filename));
	K("code_name", offsetof(PyCodeObject, co_name));
	K("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030B0000
	K("code_qualname", offsetof(PyCodeObject, co_qualname));
	K("code_lines", offsetof(PyCodeObject, co_linetable));
	K("code_bytecode", offsetof(PyCodeObject, co_code_adaptive));
#elif PY_VERSION_HEX >= 0x030A0000
	K("code_lines", offsetof(PyCodeObject, co_linetable));
#else
	K("code_lines", offsetof(PyCodeObject, co_lnotab));
#endif
	K("bytes_size", offsetof(PyVarObject, ob_size));
	K("bytes_data", offsetof(PyBytesObject, ob_sval));
	K("str_length", offsetof(PyASCIIObject, length));
	K("str_state", offsetof(PyASCIIObject, state));
	K("str_ascii_data", sizeof(PyASCIIObject));
	K("str_compact_data", sizeof(PyCompactUnicodeObject));
	printf("\n");
	return 0;
}
C
for d in "${dirs[@]}"; do
  cc -w -I"$d" "$tmp/off.c" -o "$tmp/off"
  "$tmp/off"
done
