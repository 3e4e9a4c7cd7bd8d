#!/usr/bin/env bash
# contract.sh holds a live node to what documents its API, on `keyhook dev`:
#
#   1. every curl example of README.md and docs/api.md (their sh blocks) runs as written and
#      answers 2xx;
#   2. schemathesis, driven by openapi.yaml, with a fixed seed and a time
#      bound, finds no server error and no answer the spec does not describe
#      (status code, content type, headers, body schema).
#
# The node and both phases run in a network namespace of their own with only
# loopback: the API dials the endpoint URLs it is given (subscription tests,
# deliveries), and fuzzed URLs must not reach any network.
#
# Usage: scripts/contract.sh
#
# Environment:
#   KEYHOOK_SCHEMATHESIS       the schemathesis command (default: the one
#                              .ci/run installs in ~/.cache/keyhook/venv, else
#                              schemathesis on PATH)
#   KEYHOOK_CONTRACT_SEED      schemathesis seed (default 1)
#   KEYHOOK_CONTRACT_MAX_TIME  schemathesis time budget in seconds (default 150)
#   CI                         "true" makes a missing prerequisite an error;
#                              otherwise the phase is skipped with a message
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

seed=${KEYHOOK_CONTRACT_SEED:-1}
max_time=${KEYHOOK_CONTRACT_MAX_TIME:-150}

# missing reports a missing prerequisite: an error under CI, else a skip.
missing() {
	echo "$1"
	if [[ ${CI:-} == true ]]; then
		echo "CI must run the contract tests: failing" >&2
		exit 1
	fi
}

if [[ ${KEYHOOK_CONTRACT_NETNS:-} != 1 ]]; then
	for tool in curl unshare ip; do
		if ! command -v "$tool" >/dev/null 2>&1; then
			missing "contract tests SKIPPED: $tool not found (curl, util-linux and iproute2 are needed)"
			exit 0
		fi
	done
	st=${KEYHOOK_SCHEMATHESIS:-}
	if [[ -z $st ]]; then
		if [[ -x $HOME/.cache/keyhook/venv/bin/schemathesis ]]; then
			st=$HOME/.cache/keyhook/venv/bin/schemathesis
		else
			st=$(command -v schemathesis || true)
		fi
	fi
	work=$(mktemp -d "${TMPDIR:-/tmp}/keyhook-contract.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	# Built out here: inside, there is no network to fetch modules from.
	go build -o "$work/keyhook" ./cmd/keyhook
	netns=(unshare --net)
	if ((EUID != 0)); then
		netns=(unshare --map-root-user --net)
	fi
	if ! "${netns[@]}" true 2>/dev/null; then
		missing "contract tests SKIPPED: cannot make a network namespace (${netns[*]}); user namespaces may be off"
		exit 0
	fi
	rc=0
	KEYHOOK_CONTRACT_NETNS=1 KEYHOOK_CONTRACT_WORK=$work KEYHOOK_SCHEMATHESIS=$st \
		"${netns[@]}" "$0" || rc=$?
	exit "$rc"
fi

# From here on: inside the namespace.
work=$KEYHOOK_CONTRACT_WORK
st=$KEYHOOK_SCHEMATHESIS
ip link set lo up

"$work/keyhook" dev --http-addr 127.0.0.1:0 --log-level warn >"$work/dev.out" 2>"$work/dev.err" &
node=$!
# shellcheck disable=SC2317 # called from the EXIT trap
stop_node() {
	kill "$node" 2>/dev/null || true
	wait "$node" 2>/dev/null || true
}
trap stop_node EXIT

for _ in $(seq 300); do
	grep -q '^  token ' "$work/dev.out" 2>/dev/null && break
	if ! kill -0 "$node" 2>/dev/null; then
		echo "keyhook dev exited before it was ready:" >&2
		cat "$work/dev.err" >&2
		exit 1
	fi
	sleep 0.1
done
api=$(sed -n 's/^  api *//p' "$work/dev.out")
token=$(sed -n 's/^  token *\([^ ]*\).*/\1/p' "$work/dev.out")
endpoint=$(sed -n 's/^  endpoint *\([^ ]*\).*/\1/p' "$work/dev.out")
if [[ -z $api || -z $token || -z $endpoint ]]; then
	echo "keyhook dev printed no api, token or endpoint:" >&2
	cat "$work/dev.out" "$work/dev.err" >&2
	exit 1
fi
echo "node: $api (keyhook dev, in a network namespace of its own)"

step_started=$SECONDS
step() {
	printf '==> %s\n' "$*"
	step_started=$SECONDS
}
step_done() { printf '    done in %d s\n' "$((SECONDS - step_started))"; }

# The examples of README.md and docs/api.md, as the reader would paste
# them. The one host they name cannot be reached from here; the dev node's
# endpoint stands in.
step "curl examples (README.md, docs/api.md)"
awk '
	/^```sh$/ { in_sh = 1; next }
	/^```/    { in_sh = 0; next }
	in_sh && (cont || /^curl /) {
		line = line (cont ? " " : "") $0
		# A line goes on after a backslash, or inside a quoted -d body.
		cont = sub(/\\$/, "", line) || split(line, parts, "\047") % 2 == 0
		if (!cont) { print line; line = "" }
	}
' README.md docs/api.md >"$work/examples"
export KEYHOOK_API_URL=$api KEYHOOK_TOKEN=$token
H="Authorization: Bearer $KEYHOOK_TOKEN"
ID=""
examples=0
failed=0
while IFS= read -r example; do
	examples=$((examples + 1))
	cmd=${example//https:\/\/billing.example.com\/hooks\/orders/$endpoint}
	# Each example, unchanged but for where the answer goes.
	cmd="curl -o \"\$work/body\" -w '%{http_code}' ${cmd#curl }"
	code=$(eval "$cmd") || code="curl exit $?"
	if [[ ! $code =~ ^2[0-9][0-9]$ ]]; then
		failed=$((failed + 1))
		printf 'FAIL (%s): %s\n' "$code" "$example"
		sed 's/^/    /' "$work/body" 2>/dev/null || true
		echo
	fi
	if [[ -z $ID ]]; then
		ID=$(grep -o '"id": *"sub_[^"]*"' "$work/body" 2>/dev/null | head -n 1 | sed 's/.*"\(sub_[^"]*\)"/\1/' || true)
	fi
done <"$work/examples"
if ((examples == 0)); then
	echo "README.md and docs/api.md have no curl examples in sh blocks: the extraction is broken" >&2
	exit 1
fi
printf 'curl examples: %d passed, %d failed\n' "$((examples - failed))" "$failed"
step_done
if ((failed > 0)); then
	exit 1
fi

step "schemathesis (openapi.yaml, seed $seed, at most ${max_time}s)"
if [[ -z $st || ! -x $st ]]; then
	missing "schemathesis SKIPPED: not installed (.ci/run installs it: python3 -m venv ~/.cache/keyhook/venv && ~/.cache/keyhook/venv/bin/pip install schemathesis==4.32.5)"
	exit 0
fi
"$st" --version
# Reports go to the work dir, not the checkout.
rc=0
spec=$PWD/openapi.yaml
(cd "$work" && "$st" run "$spec" --url "$api" \
	-H "Authorization: Bearer $token" \
	--checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
	--seed "$seed" --max-time "$max_time" --workers 1 \
	--request-timeout 10 --no-color) >"$work/schemathesis.log" 2>&1 || rc=$?
if ((rc != 0)); then
	cat "$work/schemathesis.log"
	echo "schemathesis: the node does not keep to openapi.yaml (exit $rc); reproduce with: KEYHOOK_CONTRACT_SEED=$seed scripts/contract.sh"
	exit "$rc"
fi
# The phases' verdicts, then the warnings and the summary as printed.
grep -E '^ (✅|❌|⏭|🚫)|^ +✅ ' "$work/schemathesis.log" || true
sed -n '/= \(WARNINGS\|SUMMARY\) =/,$p' "$work/schemathesis.log"

step_done
