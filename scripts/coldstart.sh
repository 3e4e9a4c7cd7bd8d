#!/usr/bin/env bash
# coldstart.sh measures a newcomer's first minute: from an empty Go module
# cache and an empty build cache, it downloads the modules of ./cmd/keyhook,
# builds it, starts `keyhook dev` and waits for its first delivery. It
# prints what was downloaded and how long each step took.
#
# Usage:
#   ./scripts/coldstart.sh
#
# Environment:
#   GOPROXY                     where modules come from (default: go env
#                               GOPROXY, as a newcomer's go has it)
#   KEYHOOK_COLDSTART_DEADLINE  seconds to wait for the first delivery after
#                               dev starts (default 120)
#
# The download and the build are timed apart (go list -deps fetches and
# unpacks the modules without compiling), and together they are what
# `go run ./cmd/keyhook dev` spends before dev starts. The numbers depend on
# the network and on what else the machine runs: the load average at the
# start is printed with them.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

deadline=${KEYHOOK_COLDSTART_DEADLINE:-120}

tmp=$(mktemp -d)
dev_pid=""
cleanup() {
	if [[ -n $dev_pid ]]; then
		kill "$dev_pid" 2>/dev/null || true
		wait "$dev_pid" 2>/dev/null || true
	fi
	# The module cache is read-only; go clean -modcache removes it.
	GOMODCACHE=$tmp/mod go clean -modcache >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

export GOMODCACHE=$tmp/mod GOCACHE=$tmp/build
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "coldstart: $(go version | cut -d' ' -f3-4), $(nproc) cores, load average $load"

started=$(now)
go list -deps ./cmd/keyhook >/dev/null
download_s=$(since "$started")
zips=$(find "$GOMODCACHE/cache/download" -name '*.zip' -printf '%s\n' | awk '{t += $1} END {printf "%.1f", t / 1e6}')
unpacked=$(du -sm "$GOMODCACHE" | cut -f1)

# The build's CPU seconds too: on a busy machine they say what an idle one
# with the same cores would take (about CPU seconds / cores).
TIMEFORMAT='%R %U %S'
if ! { time go build -o "$tmp/keyhook" ./cmd/keyhook 2>"$tmp/build.err"; } 2>"$tmp/build.time"; then
	cat "$tmp/build.err" >&2
	exit 1
fi
read -r build_s build_user build_sys <"$tmp/build.time"
build_s=$(printf "%.1f" "$build_s")
build_cpu=$(awk -v u="$build_user" -v s="$build_sys" 'BEGIN {printf "%.0f", u + s}')

dev_started=$(now)
"$tmp/keyhook" dev --http-addr 127.0.0.1:0 --log-level error >"$tmp/dev.out" 2>"$tmp/dev.err" &
dev_pid=$!
until grep -Eq 'delivered [1-9]' "$tmp/dev.out"; do
	if ! kill -0 "$dev_pid" 2>/dev/null; then
		cat "$tmp/dev.out" "$tmp/dev.err" >&2
		echo "coldstart: keyhook dev exited before its first delivery" >&2
		exit 1
	fi
	if awk -v a="$dev_started" -v b="$(now)" -v d="$deadline" 'BEGIN {exit !(b - a > d)}'; then
		cat "$tmp/dev.out" "$tmp/dev.err" >&2
		echo "coldstart: no delivery within ${deadline} s of dev's start" >&2
		exit 1
	fi
	sleep 0.1
done
first_s=$(since "$dev_started")
total_s=$(since "$started")

printf 'download   %6s s  %s MB of zips, %s MB unpacked\n' "$download_s" "$zips" "$unpacked"
printf 'build      %6s s  %s CPU seconds\n' "$build_s" "$build_cpu"
printf 'delivery   %6s s  from dev'"'"'s start to its first delivery\n' "$first_s"
printf 'total      %6s s  from an empty cache to the first delivery\n' "$total_s"
