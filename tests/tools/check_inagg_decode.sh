#!/usr/bin/env bash
# inagg-decode: exit 0 and the totals on good captures; 1 and the bad packet named when an ICRC is
# corrupted; 2 and a clear message for a missing or non-pcap file.
set -uo pipefail
bin=$1 fixtures=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" -q "$fixtures"/roce_v4.pcap "$fixtures"/roce_v6.pcap "$fixtures"/cnp_connectx4lx.pcap) || fail "good fixtures: exit $?"
grep -q "frames=129 roce=129 other=0 malformed=0 bad_icrc=0" <<<"$out" || fail "unexpected totals: $out"

# pcapng, as dpdk-dumpcap and Wireshark write it (converted by editcap): the same frames, the same
# verdicts, and the nanosecond timestamps of the original.
if command -v editcap >/dev/null; then
  editcap -F pcapng "$fixtures/roce_v4.pcap" "$tmp/v4.pcapng" || fail "editcap -F pcapng"
  [ "$(head -c 4 "$tmp/v4.pcapng" | od -An -tx1 | tr -d ' ')" = 0a0d0d0a ] || fail "editcap did not write pcapng"
  want=$("$bin" "$fixtures/roce_v4.pcap" | tail -n +2) || fail "roce_v4.pcap: exit $?"
  got=$("$bin" "$tmp/v4.pcapng" | tail -n +2) || fail "v4.pcapng: exit $?"
  [ "$want" = "$got" ] || fail "pcapng decodes differently from the same frames in pcap: $(diff <(echo "$want") <(echo "$got") | head -n 5)"
  pcapng_note="; pcapng read"
else
  echo "(editcap not installed: pcapng part skipped)"
  pcapng_note=""
fi

# Flip the last byte (part of the ICRC) of the CNP capture: 24-byte file header + 16-byte record header + 74.
cp "$fixtures/cnp_connectx4lx.pcap" "$tmp/bad.pcap"
printf '\x00' | dd of="$tmp/bad.pcap" bs=1 seek=$((24 + 16 + 73)) conv=notrunc status=none
out=$("$bin" "$tmp/bad.pcap"); rc=$?
[ $rc -eq 1 ] || fail "corrupted ICRC: exit $rc, want 1"
grep -q "icrc=0x0000fd82 BAD (expected 0x2a00fd82)" <<<"$out" || fail "bad ICRC not reported: $out"

"$bin" "$tmp/missing.pcap" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "cannot open pcap file" "$tmp/err" || fail "missing file: exit $rc, $(cat "$tmp/err")"
echo "this is a text file, certainly not a pcap capture" >"$tmp/text.pcap"
"$bin" "$tmp/text.pcap" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "is not a pcap or pcapng capture" "$tmp/err" || fail "text file: exit $rc, $(cat "$tmp/err")"
"$bin" --bogus 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] || fail "unknown option: exit $rc"
echo "inagg-decode CLI behaves${pcapng_note}"
