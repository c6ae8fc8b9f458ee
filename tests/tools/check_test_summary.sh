#!/usr/bin/env bash
# scripts/test-summary, the line CI reads: on a meson JUnit log and testlog.json written here, a
# test that timed out must count as failed even though the JUnit log shows its case without a
# failure (meson writes it so), a failing gtest case counts once, and a clean log counts 0 failed.
#   check_test_summary.sh SRCDIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
junit() {  # the JUnit log of: plain tests a and slow, gtest binary g with cases One (passing) and Two ($1)
  local two=${1:+<failure message=\"x\"/>}
  cat >"$tmp/testlog.junit.xml" <<XML
<testsuites><testsuite name="inagg"><testcase name="a" classname="inagg"/><testcase name="slow" classname="inagg"/></testsuite>
<testsuite name="inagg.g.S"><testcase name="One" classname="S"/><testcase name="Two" classname="S">$two</testcase></testsuite></testsuites>
XML
}
results() {  # RESULT_OF_SLOW RESULT_OF_G
  printf '{"name": "a", "result": "OK"}\n{"name": "slow", "result": "%s"}\n{"name": "g", "result": "%s"}\n' "$1" "$2" >"$tmp/testlog.json"
}
expect() {  # WANT_LINE WANT_STATUS
  out=$(/usr/bin/python3 "$src/scripts/test-summary" "$tmp/testlog.junit.xml" 2>/dev/null); rc=$?
  [ "$out" = "$1" ] || fail "want '$1', got '$out'"
  [ "$rc" = "$2" ] || fail "'$1': want exit $2, got $rc"
}
junit ""; results OK OK;            expect "4 passed, 0 failed" 0
junit ""; results TIMEOUT OK;       expect "3 passed, 1 failed" 1
junit fail; results OK FAIL;        expect "3 passed, 1 failed" 1
junit ""; results OK TIMEOUT;       expect "4 passed, 1 failed" 1
rm "$tmp/testlog.json"; junit "";   expect "4 passed, 1 failed" 1
echo "ok: test-summary counts timeouts, failures and a missing testlog.json as failed"
