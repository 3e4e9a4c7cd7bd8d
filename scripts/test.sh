#!/usr/bin/env bash
# test.sh is keyhook's one test command: gofmt, go vet, then every test with
# the race detector, the fast tier (unit, in-process kfake, real redis-server)
# and the integration tier (a real Apache Kafka broker).
#
# Usage:
#   ./scripts/test.sh [go test flags...]     e.g. ./scripts/test.sh -run Takeover -v
#
# Environment:
#   KEYHOOK_TEST_PKGS           packages to test (default ./...); gofmt and
#                               go vet always cover the whole module
#   KEYHOOK_TEST_KAFKA_BROKERS  a running broker to use; when unset and java is
#                               present, scripts/kafka.sh starts one for this
#                               run (in its own state dir) and stops it at exit
#   KEYHOOK_TEST_CONTRACT       "1" runs scripts/contract.sh (the README's curl
#                               examples and schemathesis against a live dev
#                               node) after the tests, "0" skips it; default:
#                               run it unless KEYHOOK_TEST_PKGS narrows the run
#   CI                          "true" makes a missing integration tier or
#                               contract prerequisite an error
#
# The broker's version and log path are printed before the tests run; when
# tests fail, the broker log is kept and its path printed again.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step_started=$SECONDS
step() {
	printf '==> %s\n' "$*"
	step_started=$SECONDS
}
step_done() { printf '    done in %d s\n' "$((SECONDS - step_started))"; }

step "gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -not -path './vendor/*' \
	-not -path '*/testdata/*' -print0 | xargs -0 -r gofmt -l)
if [[ -n $unformatted ]]; then
	printf 'gofmt: these files are not formatted (run gofmt -w on them):\n%s\n' "$unformatted" >&2
	exit 1
fi
step_done

step "go vet ./..."
go vet ./...
step_done

kafka_dir=""
# shellcheck disable=SC2317 # called from the EXIT trap
stop_kafka() {
	if [[ -n $kafka_dir ]]; then
		KEYHOOK_KAFKA_DIR=$kafka_dir scripts/kafka.sh stop || true
		kafka_dir=""
	fi
}
trap stop_kafka EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -n ${KEYHOOK_TEST_KAFKA_BROKERS:-} ]]; then
	echo "integration tier: using KEYHOOK_TEST_KAFKA_BROKERS=$KEYHOOK_TEST_KAFKA_BROKERS"
elif command -v java >/dev/null 2>&1 || [[ -x ${JAVA_HOME:-/nonexistent}/bin/java ]]; then
	step "start Apache Kafka (scripts/kafka.sh start)"
	# A state dir of its own, so that a broker someone started by hand in the
	# default dir is neither reused nor stopped by this run.
	kafka_dir=$(mktemp -d "${TMPDIR:-/tmp}/keyhook-kafka-test.XXXXXX")
	broker_env=$(KEYHOOK_KAFKA_DIR=$kafka_dir scripts/kafka.sh start | tail -n 1)
	[[ $broker_env == KEYHOOK_TEST_KAFKA_BROKERS=* ]] || {
		echo "scripts/kafka.sh start printed no broker address" >&2
		exit 1
	}
	export "${broker_env?}"
	# Tests that restart the broker (testutil) and failure reports use these.
	export KEYHOOK_KAFKA_DIR=$kafka_dir
	export KEYHOOK_TEST_KAFKA_LOG=$kafka_dir/broker.log
	echo "integration tier: $broker_env"
	step_done
else
	echo "integration tier SKIPPED: java not found (install a Java 17+ runtime and maven, or set KEYHOOK_TEST_KAFKA_BROKERS)"
	if [[ ${CI:-} == true ]]; then
		echo "CI must run the integration tier: failing" >&2
		exit 1
	fi
fi

rc=0
if [[ -n ${KEYHOOK_TEST_PKGS:-} ]]; then
	read -r -a pkgs <<<"$KEYHOOK_TEST_PKGS"
	step "go test -race -count=1 -timeout 60m ${pkgs[*]} $*"
	go test -race -count=1 -timeout 60m "${pkgs[@]}" "$@" || rc=$?
	step_done
else
	# The fault suite runs alone, after everything else: it kills and
	# restarts processes against timing-sensitive session timeouts, and on a
	# 2-core machine other packages' tests running beside it could stall the
	# broker and turn a clean handover into a fenced one.
	mapfile -t pkgs < <(go list ./... | grep -v '/test/faults$')
	step "go test -race -count=1 -timeout 30m (every package but faults) $*"
	go test -race -count=1 -timeout 30m "${pkgs[@]}" "$@" || rc=$?
	step_done
	# The race detector allocates on its own, so the allocation budgets
	# skip under it and run here.
	step "go test -count=1 -run 'Allocations|ReusesTheKeyedHMAC' ./dispatcher/ ./webhooks/ (allocation budgets, without -race)"
	go test -count=1 -run 'Allocations|ReusesTheKeyedHMAC' ./dispatcher/ ./webhooks/ || rc=$?
	step_done
	step "go test -race -count=1 -timeout 45m -v ./test/faults/ $* (the fault suite, alone)"
	faults_log=$(mktemp "${TMPDIR:-/tmp}/keyhook-faults.XXXXXX.log")
	rc2=0
	go test -race -count=1 -timeout 45m -v ./test/faults/ "$@" >"$faults_log" 2>&1 || rc2=$?
	# Each scenario's figures, each test's verdict, and go test's summary.
	grep -E '^(--- |PASS$|FAIL|ok |panic)|scenario=' "$faults_log" || true
	if ((rc2 != 0)); then
		echo "fault suite failed; its full log is $faults_log; the last 150 lines:"
		tail -n 150 "$faults_log"
		rc=$rc2
	fi
	step_done
fi

contract=${KEYHOOK_TEST_CONTRACT:-}
if [[ -z $contract ]]; then
	contract=1
	[[ -n ${KEYHOOK_TEST_PKGS:-} ]] && contract=0
fi
if [[ $contract == 1 ]]; then
	step "scripts/contract.sh (README examples, schemathesis against openapi.yaml)"
	scripts/contract.sh || rc=$?
	step_done
else
	echo "contract tests not run (KEYHOOK_TEST_PKGS narrows the run; KEYHOOK_TEST_CONTRACT=1 runs them)"
fi

if ((rc != 0)) && [[ -n $kafka_dir && -f $kafka_dir/broker.log ]]; then
	kept="${TMPDIR:-/tmp}/keyhook-kafka-broker.$(date +%Y%m%d-%H%M%S).log"
	cp "$kafka_dir/broker.log" "$kept"
	echo "tests failed; the Kafka broker log is kept at $kept; its last errors:"
	grep -E '\] (ERROR|FATAL) ' "$kept" | tail -n 20 || echo "    (none)"
fi
exit "$rc"
