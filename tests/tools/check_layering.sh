#!/usr/bin/env bash
# scripts/check-layering passes on the tree, and fails, naming file:line, on a copy of the tree
# with one include that reaches up (control -> agg), one sideways (client -> xdp), a meson.build
# that links a library its module may not use, and front ends (the torch backend, the Python
# module, inagg-worker) that reach the transport or the appliance past client/rank.hpp: the check
# can fail.
set -euo pipefail
src=$1
check=$src/scripts/check-layering
"$check" "$src"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/src" "$src/include" "$tmp/"
mkdir -p "$tmp/python"
cp -r "$src/python/inagg" "$tmp/python/"
sed -i '1i #include "inagg/agg/engine.hpp"' "$tmp/src/control/protocol.cpp"
sed -i '1i #include <inagg/xdp/host.hpp>' "$tmp/include/inagg/client/transport/rc.hpp"
echo "bad = [inagg_dataplane_dep]" >>"$tmp/src/client/meson.build"
sed -i '1i #include "inagg/client/control_client.hpp"' "$tmp/src/torchdist/process_group.cpp"
sed -i '1i #include "inagg/client/transport/udp_transport.hpp"' "$tmp/python/inagg/_inagg.cpp"
sed -i '1i #include <inagg/client/algorithms.hpp>' "$tmp/src/apps/inagg_worker.cpp"
lines=$(wc -l <"$tmp/src/client/meson.build")
set +e
out=$("$check" "$tmp")
rc=$?
set -e
[ "$rc" = 1 ] || { echo "FAIL: check-layering exited $rc on a tree with bad includes: $out"; exit 1; }
for want in "src/control/protocol.cpp:1: control includes agg (up)" "include/inagg/client/transport/rc.hpp:1: client includes xdp (sideways)" \
            "src/client/meson.build:$lines: client links inagg_dataplane_dep" \
            "src/torchdist/process_group.cpp:1: a front end reaches the client library past its rank API" \
            "python/inagg/_inagg.cpp:1: a front end reaches the client library past its rank API" \
            "src/apps/inagg_worker.cpp:1: a front end reaches the client library past its rank API"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: check-layering did not report '$want': $out"; exit 1; }
done
echo "check-layering reports the planted violations:"
echo "$out"
