#!/usr/bin/env bash
# download-budget.sh fails when the Go modules a newcomer downloads grow
# past their budget. It loads the packages into an empty module cache, as a
# first `go build ./cmd/keyhook` (and a first `go test ./...`) does, and
# measures what landed there: the zips fetched and the tree they unpack to.
# It compiles nothing (go list reads the sources only), so it takes seconds
# once the machine's own module cache holds the modules.
#
# Usage:
#   ./scripts/download-budget.sh
#
# Environment:
#   KEYHOOK_BUILD_BUDGET_MB  unpacked MB allowed for ./cmd/keyhook (default 450;
#                            375 MB at the time of writing)
#   KEYHOOK_TESTS_BUDGET_MB  unpacked MB allowed for every package and its
#                            tests (default 500; 423 MB at the time of writing)
#   GOPROXY                  where modules come from; the machine's module
#                            cache is asked first, so that a warm machine
#                            measures without the network
#
# What counts is the unpacked tree (du of the module cache): it is what the
# disk and the first build pay, and it grew with modules whose zips stay
# small. The zips are what the network carries; both are printed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_budget=${KEYHOOK_BUILD_BUDGET_MB:-450}
tests_budget=${KEYHOOK_TESTS_BUDGET_MB:-500}

tmp=$(mktemp -d)
# The module cache is read-only; go clean -modcache is what removes it.
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
	for d in "$tmp"/*/; do
		if [[ -d $d ]]; then
			GOMODCACHE=$d go clean -modcache >/dev/null 2>&1 || true
		fi
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

warm=$(go env GOMODCACHE)
proxy="file://$warm/cache/download,$(go env GOPROXY)"

failed=0
# measure NAME BUDGET_MB PACKAGE_PATTERN... loads the packages into an
# empty module cache and checks its size against BUDGET_MB.
measure() {
	local name=$1 budget=$2
	shift 2
	local cache=$tmp/$name
	if ! GOMODCACHE=$cache GOPROXY=$proxy GOFLAGS=-mod=readonly go list -deps "$@" >/dev/null 2>"$tmp/$name.log"; then
		cat "$tmp/$name.log" >&2
		echo "download-budget: go list -deps $* failed" >&2
		exit 1
	fi
	local unpacked zips
	unpacked=$(du -sm "$cache" | cut -f1)
	zips=$(find "$cache/cache/download" -name '*.zip' -printf '%s\n' | awk '{t += $1} END {printf "%.1f", t / 1e6}')
	printf '%-6s %4d MB unpacked (budget %d MB), %6s MB of zips\n' "$name" "$unpacked" "$budget" "$zips"
	if ((unpacked > budget)); then
		failed=1
		printf 'download-budget: %s downloads %d MB, past its budget of %d MB. The largest modules:\n' "$name" "$unpacked" "$budget" >&2
		(cd "$cache" && find . -mindepth 1 -maxdepth 4 -type d -name '*@v*' -prune -exec du -sm {} + | sort -rn | head -10 | sed 's|\./|  |') >&2
		echo "See which package pulls one in with: go mod why -m MODULE" >&2
	fi
}

measure build "$build_budget" ./cmd/keyhook
measure tests "$tests_budget" -test ./...
exit "$failed"
