# shellcheck shell=bash
# find_promtool: prints the path of the Prometheus project's promtool, or returns 1 when there is
# none. promtool comes with Debian's prometheus package (scripts/packages.txt); without it, the
# package is downloaded and promtool alone unpacked (never installed: that would start a
# Prometheus server) into a cache directory, once.
#   . "$src/tests/lib/promtool.sh"
find_promtool() {
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/inagg/prometheus" deb
  if command -v promtool; then return 0; fi
  if [ -x "$cache/usr/bin/promtool" ]; then echo "$cache/usr/bin/promtool"; return 0; fi
  command -v apt-get >/dev/null || return 1
  deb=$(mktemp -d) || return 1
  if (cd "$deb" && apt-get download prometheus >"$deb/log" 2>&1) && dpkg-deb -x "$deb"/prometheus_*.deb "$deb/root" &&
    install -D -m 0755 "$deb/root/usr/bin/promtool" "$cache/usr/bin/promtool"; then
    rm -rf "$deb"
    echo "$cache/usr/bin/promtool"
    return 0
  fi
  echo "find_promtool: apt-get download prometheus failed: $(tail -n 3 "$deb/log" 2>/dev/null)" >&2
  rm -rf "$deb"
  return 1
}
