#!/usr/bin/env bash
# The Docker image: built offline from a fresh tree (a local debian:bookworm made by
# docker/make-base-image, no registry), then `--help` and `self-check` run inside it. Starts
# dockerd itself (--iptables=false --bridge=none) when no engine is running, and stops only that
# one; removes the images it created. Exit 77 (skipped) when no engine can run here.
#   test_docker.sh SRCDIR
set -uo pipefail
src=$1
tag="inagg-test:$$"
dpid="" made_base=""
cleanup() {
  docker rmi -f "$tag" >/dev/null 2>&1
  docker image prune -f --filter "label=inagg.build-stage=$$" >/dev/null 2>&1
  [ -n "$made_base" ] && docker rmi -f debian:bookworm >/dev/null 2>&1
  if [ -n "$dpid" ]; then kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v docker >/dev/null || { echo "SKIP: no docker client (apt-get install docker.io)"; exit 77; }
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { echo "SKIP: no Docker engine"; exit 77; }
  dockerd --iptables=false --bridge=none >/tmp/inagg-test-dockerd.$$.log 2>&1 &
  dpid=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "SKIP: dockerd would not start here: $(tail -n 2 /tmp/inagg-test-dockerd.$$.log)"; exit 77; }
fi
docker image inspect debian:bookworm >/dev/null 2>&1 || made_base=1
"$src/docker/make-base-image" || fail "make-base-image"
# Build from a clean copy of the tree, as a user's fresh clone would.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"; cleanup' EXIT
git -C "$src" ls-files -z | (cd "$src" && xargs -0 cp --parents -t "$ctx") || fail "copy the tree"
docker build --network host -q --build-arg INAGG_BUILD_ID=$$ -f "$ctx/docker/Dockerfile" -t "$tag" "$ctx" >/tmp/inagg-test-build.$$.log 2>&1 ||
  { tail -n 20 /tmp/inagg-test-build.$$.log; fail "docker build"; }
out=$(docker run --rm "$tag" --help 2>&1) || fail "--help: $out"
grep -q "Usage: inagg \[EAL options\]" <<<"$out" || fail "--help output: $out"
out=$(docker run --rm "$tag" self-check 2>&1) || fail "self-check: $out"
grep -q "self-check: ok" <<<"$out" || fail "self-check output: $out"
out=$(docker run --rm "$tag" inagg-ctl --help 2>&1) || fail "inagg-ctl in the image: $out"
echo "docker image builds offline and runs (--help, self-check, inagg-ctl)"
rm -f /tmp/inagg-test-build.$$.log /tmp/inagg-test-dockerd.$$.log
