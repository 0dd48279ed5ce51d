#!/usr/bin/env bash
# Sums the "test result:" lines of a cargo test log into one closing line, so the end of the
# run says what ran overall (the last cargo line is the doc-test run, often "0 passed").
# Tests that could not run for lack of privileges print "SKIPPED: <test>: <reason>" and count as
# skipped; with JITTERSCOPE_REQUIRE_PRIVILEGED=1 (as .ci/run sets) such a test fails instead, and
# the summary says so on the line before the totals (the totals line stays alone on the last line,
# in the plain "N passed, N failed, N skipped" form that CI reads).
# usage: scripts/test-summary.sh LOG
set -euo pipefail
log=${1:?usage: test-summary.sh LOG}
awk '
  /^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed;?$/) p += $i
      if ($(i+1) ~ /^failed;?$/) f += $i
      if ($(i+1) ~ /^ignored;?$/) s += $i
    }
  }
  /SKIPPED:/ { s++ }
  END {
    if (ENVIRON["JITTERSCOPE_REQUIRE_PRIVILEGED"] == "1")
      print "tests ran with JITTERSCOPE_REQUIRE_PRIVILEGED=1: a test that would skip fails"
    printf "tests: %d passed, %d failed, %d skipped\n", p, f, s
    exit (f > 0)
  }
' "$log"
