#!/usr/bin/env bash
# The Docker image and a lab rack of containers made from it. The image is built once, offline,
# from a copy of the tree (a local debian:bookworm made by docker/make-base-image, no registry);
# Its build stage is `scripts/setup --demo` on a fresh Debian: it must say what it installs, how
# long the build takes and its progress, and install none of the tests' tools (torch, QEMU,
# Docker, tshark, spin, libFuzzer, lintian). `--help`, `self-check` and inagg-ctl run inside the
# image. Then docker/lab-rack starts the appliance
# container and 4 worker containers on veths, the workers run a --check'ed fp32 allreduce in ina
# mode through the appliance, and the appliance's job stats and its SIGTERM exit are checked.
# Starts dockerd itself (--iptables=false --bridge=none) when no engine is running, and stops only
# that one; removes the containers (their veths go with them), the images and the files it
# created, whatever happens. Exit 77 (skipped) when no engine can run here, or, after the image
# checks, when not root (the rack needs ip/nsenter in the containers' namespaces).
#   test_docker.sh SRCDIR
set -uo pipefail
src=$1
# shellcheck source=../../scripts/lib/wait.sh
. "$src/scripts/lib/wait.sh"
tag="inagg-test:$$"
rack="t$$"
dpid="" made_base="" rack_up=""
tmp=$(mktemp -d /tmp/inaggc-test.XXXXXX)
cleanup() {
  [ -n "$rack_up" ] && "$src/docker/lab-rack" down --name "$rack" >/dev/null 2>&1
  docker rmi -f "$tag" "$tag-build" >/dev/null 2>&1
  docker image prune -f --filter "label=inagg.build-stage=$$" >/dev/null 2>&1
  [ -n "$made_base" ] && docker rmi -f debian:bookworm >/dev/null 2>&1
  if [ -n "$dpid" ]; then kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v docker >/dev/null || { echo "SKIP: no docker client (apt-get install docker.io)"; exit 77; }
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { echo "SKIP: no Docker engine"; exit 77; }
  dockerd --iptables=false --bridge=none >"$tmp/dockerd.log" 2>&1 &
  dpid=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "SKIP: dockerd would not start here: $(tail -n 2 "$tmp/dockerd.log")"; exit 77; }
fi
docker image inspect debian:bookworm >/dev/null 2>&1 || made_base=1
"$src/docker/make-base-image" || fail "make-base-image"

# ---- the image ----------------------------------------------------------------------------------
# Built from a copy of the working tree's files (tracked and new, not ignored), as a fresh clone
# of it would have them.
t0=$SECONDS
ctx="$tmp/ctx"
mkdir "$ctx"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  (cd "$src" && while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done) |
  (cd "$src" && xargs -0 cp --parents -t "$ctx") || fail "copy the tree"
build() {  # build ARGS...: docker build of the copied tree, its output in $tmp/build.log
  DOCKER_BUILDKIT=0 docker build --network host --force-rm --build-arg INAGG_BUILD_ID=$$ -f "$ctx/docker/Dockerfile" "$@" "$ctx" \
    >>"$tmp/build.log" 2>&1 || { tail -n 30 "$tmp/build.log"; fail "docker build $*"; }
}
build -t "$tag"
echo "image built in $((SECONDS - t0)) s"
# The build stage as a first-time user's scripts/setup --demo (from the cache: no second build).
build --target build -t "$tag-build"
rm -rf "$ctx"
# (The build's output has the terminal's colour resets, ESC [0m, where apt's stderr and stdout meet.)
sed -i 's/\x1b\[[0-9;]*m//g' "$tmp/build.log"
for line in "setup: installing [0-9]* Debian packages" "setup: building the programs (about [0-9]* minutes" \
  "setup: built 50%" "setup: built 100%" "setup: release build ready"; do
  grep -q "^$line" "$tmp/build.log" || fail "scripts/setup --demo did not print '$line': $(grep '^setup:' "$tmp/build.log")"
done
status() { docker run --rm --entrypoint dpkg-query "$tag-build" -W -f '${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
for p in iproute2 nftables ethtool meson; do status "$p" || fail "scripts/setup --demo did not install $p"; done
for p in python3-torch qemu-system-x86 docker.io tshark spin libfuzzer-14-dev lintian; do
  if status "$p"; then fail "scripts/setup --demo installed $p, which only the tests need"; fi
done
echo "scripts/setup --demo on a fresh Debian: $(grep -c '^setup: built' "$tmp/build.log") progress lines, $(grep -o '^setup: building the programs (about [0-9]* minutes' "$tmp/build.log" | grep -o '[0-9]* minutes'), none of the tests' tools"
out=$(docker run --rm "$tag" --help 2>&1) || fail "--help: $out"
grep -q "Usage: inagg \[EAL options\]" <<<"$out" || fail "--help output: $out"
out=$(docker run --rm "$tag" self-check 2>&1) || fail "self-check: $out"
grep -q "self-check: ok" <<<"$out" || fail "self-check output: $out"
out=$(docker run --rm "$tag" inagg-ctl --help 2>&1) || fail "inagg-ctl in the image: $out"
echo "docker image builds offline and runs (--help, self-check, inagg-ctl)"

# ---- the lab rack of containers -----------------------------------------------------------------
[ "$(id -u)" = 0 ] || { echo "SKIP: the lab rack needs root (veths into the containers' namespaces)"; exit 77; }
n=4
app="inaggc-$rack-app"
t0=$SECONDS
rack_up=1
"$src/docker/lab-rack" up --name "$rack" --workers $n --image "$tag" -- --resend-us 2000 >"$tmp/up.log" 2>&1 ||
  fail "lab-rack up: $(cat "$tmp/up.log")"
# Each worker alone in its container's namespace: only lo and its eth0, with its address and MAC.
for r in $(seq 0 $((n - 1))); do
  out=$(nsenter -t "$(docker inspect -f '{{.State.Pid}}' "inaggc-$rack-w$r")" -n ip -o link show 2>&1)
  [ "$(wc -l <<<"$out")" = 2 ] && grep -q "eth0@.* link/ether 02:77:00:00:00:0$((r + 1)) " <<<"$out" ||
    fail "worker container $r's links: $out"
done
"$src/docker/lab-rack" run --name "$rack" --logs "$tmp" -- -d float --message 16384 --payload 1024 \
  -b 4 -e 200000 -f 7 -n 1 -w 0 -c 1 --ack-timeout-ms 50 --timeout 90 --mode ina >"$tmp/run.log" 2>&1 ||
  { cat "$tmp/run.log"; "$src/docker/lab-rack" logs --name "$rack" | tail -n 20; fail "lab-rack run"; }
for r in $(seq 0 $((n - 1))); do
  grep -q "^# inagg-worker rank $r of $n (10.77.0.$((r + 1)) ->" "$tmp/w$r.log" || fail "worker $r: $(head -n 3 "$tmp/w$r.log")"
  # Rank 0 prints the job's table (#wrong summed over the ranks), each other rank its own count.
  if [ "$r" = 0 ]; then
    awk '!/^#/ && NF >= 9 {rows++; if ($9 != "0" || (NF >= 13 && $13 != "0")) bad = 1} END {exit bad || rows < 4}' "$tmp/w$r.log" ||
      fail "the job's table reports wrong elements or too few rows: $(cat "$tmp/w$r.log")"
  else
    grep -Eq "^# rank $r: ([4-9]|[1-9][0-9]+) sizes, [0-9]+ checked placements, 0 wrong elements" "$tmp/w$r.log" ||
      fail "worker $r: $(cat "$tmp/w$r.log")"
  fi
done
stats=$("$src/docker/lab-rack" ctl --name "$rack" -- stats 1 2>&1) || fail "stats: $stats"
grep -q "^state active" <<<"$stats" || fail "job not active: $stats"
grep -q "^slots_released [1-9]" <<<"$stats" || fail "nothing released: $stats"
grep -q "^held_packets 0$" <<<"$stats" || fail "stuck slots: $stats"
# SIGTERM (docker stop) reaches inagg, which exits cleanly with its final stats.
docker stop -t 10 "$app" >/dev/null || fail "docker stop $app"
code=$(docker inspect -f '{{.State.ExitCode}}' "$app")
logs=$(docker logs "$app" 2>&1)
[ "$code" = 0 ] && grep -q "inagg: final stats" <<<"$logs" || fail "appliance exit $code: $(tail -n 20 <<<"$logs")"
"$src/docker/lab-rack" down --name "$rack" >/dev/null || fail "lab-rack down"
rack_up=""
[ -z "$(docker ps -aq --filter "label=inaggc.rack=$rack")" ] || fail "containers left after lab-rack down"
echo "lab rack in $((SECONDS - t0)) s: appliance container + $n worker containers on veths, ina fp32 allreduce" \
  "exact on every rank; appliance: $(grep -E '^(slots_released|held_packets) ' <<<"$stats" | tr '\n' ' ')"

# ---- the same rack from docker/compose.yaml, with the metrics port and telemetry on the host -----
t0=$SECONDS
crack="c$$"
rack_up=1 rack=$crack
"$src/docker/lab-rack" up --name "$crack" --compose --metrics --image "$tag" -- --resend-us 2000 >"$tmp/cup.log" 2>&1 ||
  fail "lab-rack up --compose --metrics: $(cat "$tmp/cup.log")"
capp="inaggc-$crack-app"
[ "$(docker inspect -f '{{index .Config.Labels "com.docker.compose.project"}}' "$capp")" = "inaggc-$crack" ] ||
  fail "the appliance container was not made by docker-compose"
"$src/docker/lab-rack" run --name "$crack" --logs "$tmp/c" -- --dtype int32 --message 16384 --payload 1024 \
  -b 65536 -e 262144 -f 4 --iters 2 --warmup 1 --check --ack-timeout-ms 50 --timeout 90 --mode ina >"$tmp/crun.log" 2>&1 ||
  { cat "$tmp/crun.log"; fail "lab-rack run on the compose rack"; }
healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$capp")" = healthy ]; }
wait_for 90 "the appliance container's HEALTHCHECK to report healthy" healthy ||
  fail "health: $(docker inspect -f '{{json .State.Health}}' "$capp" | head -c 600)"
url=$("$src/docker/lab-rack" metrics-url --name "$crack")
/usr/bin/python3 - "$url" <<'PY' || fail "metrics from the host at $url"
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
agg = [l for l in text.splitlines() if l.startswith('inagg_job_aggregated_packets_total{job_id="1"}')]
assert agg and float(agg[0].split()[-1]) > 0, agg or text[:400]
rx = [l for l in text.splitlines() if l.startswith("inagg_port_rx_packets_total{")]
assert len(rx) == 4, rx
PY
tel=$(printf '/inagg/jobs\n' | dpdk-telemetry.py -f "inaggc-$crack" 2>&1)
grep -q '"/inagg/jobs": \[1\]' <<<"$tel" || fail "DPDK telemetry from the host: $tel"
"$src/docker/lab-rack" down --name "$crack" >/dev/null || fail "lab-rack down (compose)"
rack_up=""
[ -z "$(docker ps -aq --filter "label=inaggc.rack=$crack")" ] || fail "containers left after lab-rack down (compose)"
! ip link show "ic-$crack" >/dev/null 2>&1 || fail "the management veth ic-$crack was left behind"
echo "compose rack in $((SECONDS - t0)) s: healthy by its HEALTHCHECK, int32 allreduce exact, metrics scraped from the host" \
  "at $url, DPDK telemetry reached from the host"
