#!/usr/bin/env bash
# kafka.sh runs the real Apache Kafka broker that keyhook's integration tests
# use: one KRaft node that is broker and controller at once, on loopback ports
# chosen at start, with settings fit for tests (one partition per new topic,
# replication factor 1 for the internal topics, no initial rebalance delay).
#
# Usage:
#   scripts/kafka.sh start            fetch the jars (once), format a fresh
#                                     cluster, start it and wait until it
#                                     serves; the last stdout line is
#                                     KEYHOOK_TEST_KAFKA_BROKERS=127.0.0.1:<port>
#   scripts/kafka.sh stop             SIGTERM (SIGKILL after 20 s), then
#                                     remove the state dir
#   scripts/kafka.sh restart [--kill] stop the broker and start it again on the
#                                     same ports with the same data, for
#                                     "broker restarted mid-stream" tests;
#                                     --kill ends it with SIGKILL (a crash)
#                                     instead of a clean shutdown (about 9 s
#                                     slower: the dead broker's session must
#                                     expire before the new one registers);
#                                     a test that restarts a broker should own
#                                     it (testutil.StartKafka): the broker of
#                                     scripts/test.sh serves all packages at once
#   scripts/kafka.sh status           say whether it runs; exit 0 if it does,
#                                     3 if it does not
#   scripts/kafka.sh fetch            only fill the jar cache
#   scripts/kafka.sh jmx NAME [ATTRS] print the broker's MBeans matching the
#                                     object name NAME (wildcards allowed),
#                                     attributes ATTRS (comma-separated; all
#                                     without), read once with Kafka's own
#                                     org.apache.kafka.tools.JmxTool: a time
#                                     line, then OBJECT:ATTR,"VALUE" lines;
#                                     fails when nothing matches; needs a
#                                     broker started with
#                                     KEYHOOK_KAFKA_JMX_PORT
#
# Environment:
#   KEYHOOK_CACHE      cache root (default $HOME/.cache/keyhook); the broker's
#                      jars live in $KEYHOOK_CACHE/kafka-4.1.1/libs, fetched
#                      from Maven Central with mvn (scripts/kafka/pom.xml) the
#                      first time and reused after that
#   KEYHOOK_KAFKA_DIR  state dir holding the config, data, pid and broker.log
#                      (default /tmp/keyhook-kafka); one broker per state dir
#   KEYHOOK_KAFKA_HEAP the broker's heap, e.g. 6g, run with the JVM settings
#                      Kafka's documentation gives for production; unset,
#                      256m growing to 512m, enough for the test suite. The
#                      benchmark sets it: under its load the small heap's
#                      collections pause the broker often, for up to 100 ms
#   KEYHOOK_KAFKA_JMX_PORT  on start, a loopback port for the broker's JMX
#                      (unauthenticated, bound to 127.0.0.1), kept across
#                      restart; `jmx` reads it there. Unset, no JMX. The
#                      benchmarks read the brokers' byte counters this way
#   JAVA_HOME          the Java (17 or newer) to run; else java from PATH
#
# Typical use:  export "$(scripts/kafka.sh start | tail -n 1)"
#
# A second listener, CUT, serves the fault scenarios that cut one node off
# from Kafka: it advertises the address of a proxy that nothing runs at
# first, so a client seeded with that address reaches the broker only
# through the proxy the test starts there (testutil.KafkaCut), while every
# other client uses the first listener as before. $KEYHOOK_KAFKA_DIR/cut
# holds "<proxy address> <CUT listener address>".
#
# Everything but the KEYHOOK_TEST_KAFKA_BROKERS line goes to stderr, among it
# the broker's version ("Apache Kafka 4.1.1") and the path of its log.
set -euo pipefail

readonly KAFKA_VERSION=4.1.1
readonly READY_TIMEOUT_S=90
readonly STOP_TIMEOUT_S=20
readonly MARKER=.keyhook-kafka

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
readonly CACHE_DIR="${KEYHOOK_CACHE:-$HOME/.cache/keyhook}/kafka-$KAFKA_VERSION"
readonly LIBS="$CACHE_DIR/libs"
STATE="${KEYHOOK_KAFKA_DIR:-/tmp/keyhook-kafka}"
# The JVM's command line names the state dir, and running_pid looks for it
# there: keep it absolute so both agree whatever the caller's cwd.
[[ $STATE == /* ]] || STATE="$PWD/$STATE"
readonly STATE
readonly PID_FILE="$STATE/kafka.pid"
readonly PORTS_FILE="$STATE/ports"
readonly CUT_FILE="$STATE/cut"
readonly BROKER_LOG="$STATE/broker.log"
readonly JVM_LOG="$STATE/jvm.log"
readonly JMX_FILE="$STATE/jmx"
# JmxTool lives in kafka-tools, which the broker does not need: its one jar
# is fetched on the first `jmx` and put next to the broker's (whose
# dependencies it uses) on the classpath.
readonly TOOLS_JAR="$CACHE_DIR/tools/kafka-tools-$KAFKA_VERSION.jar"

log() { printf 'kafka: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	sed -n '/^# Usage:/,/^# Typical use:/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

java_bin() {
	if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
		printf '%s\n' "$JAVA_HOME/bin/java"
	elif command -v java >/dev/null 2>&1; then
		command -v java
	else
		die "java not found: Kafka $KAFKA_VERSION needs Java 17 or newer (apt-get install -y default-jre-headless)"
	fi
}

# check_java fails unless the Java runtime is 17 or newer, the oldest that
# Kafka 4 brokers run on; a clear message beats an UnsupportedClassVersionError.
check_java() {
	local spec major
	spec=$("$JAVA" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2; exit}')
	major=${spec#1.}
	major=${major%%.*}
	[[ $major =~ ^[0-9]+$ ]] || die "cannot tell the version of $JAVA"
	((major >= 17)) || die "$JAVA is Java $spec; Kafka $KAFKA_VERSION needs 17 or newer (set JAVA_HOME)"
}

# fetch_libs fills the jar cache once. Concurrent callers (parallel test
# packages) serialise on a lock, and the folder appears by an atomic rename,
# so a half-copied cache is never used.
fetch_libs() {
	if [[ -f $LIBS/kafka_2.13-$KAFKA_VERSION.jar ]]; then
		return
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found: it fetches Kafka from Maven Central (apt-get install -y maven)"
	mkdir -p "$CACHE_DIR"
	local lock tmp
	exec {lock}>"$CACHE_DIR/.lock"
	flock -w 600 "$lock" || die "timed out waiting for $CACHE_DIR/.lock"
	if [[ ! -f $LIBS/kafka_2.13-$KAFKA_VERSION.jar ]]; then
		log "fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies with mvn into $LIBS"
		tmp=$(mktemp -d "$CACHE_DIR/libs.tmp.XXXXXX")
		# mvn -q still writes terminal escapes: keep its output for failures.
		if ! mvn -q -B --no-transfer-progress -Dstyle.color=never \
			-f "$SCRIPT_DIR/kafka/pom.xml" \
			-Dkafka.version="$KAFKA_VERSION" \
			dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
			cat "$tmp.mvn.log" >&2
			rm -rf "$tmp" "$tmp.mvn.log"
			die "mvn could not fetch Kafka $KAFKA_VERSION"
		fi
		rm -f "$tmp.mvn.log"
		mv -T "$tmp" "$LIBS"
	fi
	exec {lock}>&-
}

# new_cluster_id makes a Kafka cluster id (16 random bytes, URL-safe base64
# without padding) without starting a JVM for it. Kafka's own generator never
# returns ids starting with '-', which command lines would take for a flag.
new_cluster_id() {
	local id
	while :; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		if [[ $id != -* ]]; then
			printf '%s\n' "$id"
			return
		fi
	done
}

# listening_ports prints the TCP ports something listens on, read from /proc
# so that no extra tool is needed.
listening_ports() {
	local hex
	awk 'FNR > 1 && $4 == "0A" { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		while read -r hex; do printf '%d\n' "0x$hex"; done
}

# pick_ports prints four distinct free loopback ports: the broker's, the
# controller's, the CUT listener's and its proxy's. They come from below
# the kernel's ephemeral range so that outgoing connections do not take them
# between this check and the broker binding them; start retries on a clash.
pick_ports() {
	local used p picked=()
	used=" $(listening_ports | tr '\n' ' ') "
	while ((${#picked[@]} < 4)); do
		p=$((10000 + RANDOM % 22000))
		if [[ $used != *" $p "* && " ${picked[*]-} " != *" $p "* ]]; then
			picked+=("$p")
		fi
	done
	printf '%s %s %s %s\n' "${picked[@]}"
}

write_config() {
	local broker_port=$1 controller_port=$2 cut_port=$3 proxy_port=$4
	cat >"$STATE/server.properties" <<EOF
# Written by scripts/kafka.sh: a single KRaft node for keyhook's tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$broker_port,CONTROLLER://127.0.0.1:$controller_port,CUT://127.0.0.1:$cut_port
# CUT is reached through a test's proxy: its metadata names the proxy.
advertised.listeners=PLAINTEXT://127.0.0.1:$broker_port,CUT://127.0.0.1:$proxy_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CUT:PLAINTEXT
log.dirs=$STATE/data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Retention is enforced within a second (default 5 min), so that tests of
# keyhook's retention guard see segments deleted while they run.
log.retention.check.interval.ms=1000
# broker.session.timeout.ms stays at 9 s although it slows restart --kill:
# shorter sessions get the broker fenced on a busy 2-core test machine.
EOF
	cat >"$STATE/log4j2.properties" <<EOF
# Written by scripts/kafka.sh: everything the broker logs goes to one file.
status = warn
name = keyhook-test-kafka
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $BROKER_LOG
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
	printf '%s %s %s %s\n' "$broker_port" "$controller_port" "$cut_port" "$proxy_port" >"$PORTS_FILE"
	printf '127.0.0.1:%s 127.0.0.1:%s\n' "$proxy_port" "$cut_port" >"$CUT_FILE"
}

jvm_opts() {
	local heap=${KEYHOOK_KAFKA_HEAP:-}
	if [[ -n $heap ]]; then
		[[ $heap =~ ^[0-9]+[mMgG]$ ]] || die "KEYHOOK_KAFKA_HEAP=$heap: want a size such as 2g or 768m"
		# The JVM settings Kafka's operations documentation gives for a
		# production broker ("Java Version"), on this heap.
		printf '%s\n' "-Xms$heap" "-Xmx$heap" -XX:MetaspaceSize=96m \
			-XX:InitiatingHeapOccupancyPercent=35 -XX:G1HeapRegionSize=16M \
			-XX:MinMetaspaceFreeRatio=50 -XX:MaxMetaspaceFreeRatio=80
	else
		printf '%s\n' -Xms256m -Xmx512m
	fi
	printf '%s\n' -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-XX:+ExitOnOutOfMemoryError -XX:-UsePerfData -Djava.awt.headless=true \
		"-Xlog:gc:file=$STATE/gc.log:time,uptime:filecount=2,filesize=10m" \
		"-Dlog4j2.configurationFile=$STATE/log4j2.properties"
}

# jmx_opts prints the JVM flags serving JMX on the port of $JMX_FILE, on
# loopback only; nothing when the broker was started without one.
jmx_opts() {
	[[ -f $JMX_FILE ]] || return 0
	local jmx
	jmx=$(<"$JMX_FILE")
	printf '%s\n' -Dcom.sun.management.jmxremote \
		"-Dcom.sun.management.jmxremote.port=$jmx" "-Dcom.sun.management.jmxremote.rmi.port=$jmx" \
		-Dcom.sun.management.jmxremote.host=127.0.0.1 -Djava.rmi.server.hostname=127.0.0.1 \
		-Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false
}

format_storage() {
	local cluster_id=$1 opts
	# The storage tool runs for a second: the small heap does.
	mapfile -t opts < <(KEYHOOK_KAFKA_HEAP='' jvm_opts)
	rm -rf "$STATE/data"
	if ! "$JAVA" "${opts[@]}" -cp "$LIBS/*" kafka.tools.StorageTool \
		format -t "$cluster_id" -c "$STATE/server.properties" >>"$JVM_LOG" 2>&1; then
		tail -n 20 "$JVM_LOG" >&2
		die "formatting the storage in $STATE/data failed (see $JVM_LOG)"
	fi
}

# running_pid prints the broker's pid when that process is alive and really is
# the broker of this state dir (a stale pid file may name a reused pid).
running_pid() {
	local pid
	[[ -f $PID_FILE ]] || return 1
	pid=$(<"$PID_FILE")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/server.properties" || return 1
	printf '%s\n' "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# launch starts the JVM detached from this shell (own session, stdin closed,
# output to a file) so that callers reading our stdout see EOF at once, and
# waits until the broker has logged that it started and its port answers.
# Returns 0 when ready, 1 when the JVM died, 2 on timeout.
launch() {
	local broker_port=$1 opts from pid deadline
	mapfile -t opts < <(jvm_opts; jmx_opts)
	from=$(($(stat -c %s "$BROKER_LOG" 2>/dev/null || echo 0) + 1))
	printf '%s\n' "$from" >"$STATE/log.offset"
	setsid "$JAVA" "${opts[@]}" -cp "$LIBS/*" kafka.Kafka "$STATE/server.properties" \
		</dev/null >>"$JVM_LOG" 2>&1 &
	pid=$!
	printf '%s\n' "$pid" >"$PID_FILE"
	deadline=$((SECONDS + READY_TIMEOUT_S))
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null || true
			return 1
		fi
		if tail -c "+$from" "$BROKER_LOG" 2>/dev/null | grep -q 'Kafka Server started' &&
			port_open "$broker_port"; then
			return 0
		fi
		if ((SECONDS >= deadline)); then
			return 2
		fi
		sleep 0.2
	done
}

# new_log prints what the broker logged since the last launch.
new_log() { tail -c "+$(cat "$STATE/log.offset" 2>/dev/null || echo 1)" "$BROKER_LOG" 2>/dev/null || true; }

bind_clash() { new_log | grep -q 'Address already in use'; }

report_started() {
	local broker_port=$1 started=$2 version
	version=$(new_log | sed -n 's/.*Kafka version: \([^ ]*\).*/\1/p' | sed -n 1p)
	log "Apache Kafka ${version:-unknown version} (KRaft broker+controller, node 1, pid $(<"$PID_FILE"), ready in $((SECONDS - started)) s)"
	log "broker log: $BROKER_LOG"
	printf 'KEYHOOK_TEST_KAFKA_BROKERS=127.0.0.1:%s\n' "$broker_port"
}

launch_failed() {
	local why=$1
	log "the broker $why; last lines of $BROKER_LOG:"
	new_log | tail -n 30 >&2
	tail -n 10 "$JVM_LOG" >&2 2>/dev/null || true
	die "Kafka did not start (broker log: $BROKER_LOG, JVM output: $JVM_LOG)"
}

# ensure_state_dir refuses to take over a folder it did not create: stop
# removes the state dir, and that must never be someone's real data.
ensure_state_dir() {
	if [[ -d $STATE && ! -f $STATE/$MARKER ]] && [[ -n $(ls -A "$STATE") ]]; then
		die "$STATE exists and was not made by scripts/kafka.sh; set KEYHOOK_KAFKA_DIR to another folder"
	fi
}

cmd_fetch() {
	fetch_libs
	log "jars for Kafka $KAFKA_VERSION are in $LIBS"
}

cmd_start() {
	local pid started attempt rc ports broker_port controller_port cut_port proxy_port cluster_id
	started=$SECONDS
	JAVA=$(java_bin)
	check_java
	fetch_libs
	ensure_state_dir
	if pid=$(running_pid); then
		read -r broker_port _ <"$PORTS_FILE"
		log "already running in $STATE (pid $pid)"
		log "broker log: $BROKER_LOG"
		printf 'KEYHOOK_TEST_KAFKA_BROKERS=127.0.0.1:%s\n' "$broker_port"
		return
	fi
	rm -rf "$STATE"
	mkdir -p "$STATE"
	touch "$STATE/$MARKER"
	if [[ -n ${KEYHOOK_KAFKA_JMX_PORT:-} ]]; then
		[[ $KEYHOOK_KAFKA_JMX_PORT =~ ^[0-9]+$ ]] && ((KEYHOOK_KAFKA_JMX_PORT > 0 && KEYHOOK_KAFKA_JMX_PORT < 65536)) ||
			die "KEYHOOK_KAFKA_JMX_PORT=$KEYHOOK_KAFKA_JMX_PORT: want a TCP port"
		printf '%s\n' "$KEYHOOK_KAFKA_JMX_PORT" >"$JMX_FILE"
	fi
	cluster_id=$(new_cluster_id)
	for attempt in 1 2 3; do
		ports=$(pick_ports)
		read -r broker_port controller_port cut_port proxy_port <<<"$ports"
		write_config "$broker_port" "$controller_port" "$cut_port" "$proxy_port"
		format_storage "$cluster_id"
		rc=0
		launch "$broker_port" || rc=$?
		if ((rc == 0)); then
			report_started "$broker_port" "$started"
			return
		fi
		if ((rc == 1)) && bind_clash && ((attempt < 3)); then
			log "port $broker_port, $controller_port or $cut_port was taken; trying others"
			continue
		fi
		break
	done
	stop_process TERM
	if ((rc == 2)); then
		launch_failed "was not ready within $READY_TIMEOUT_S s"
	fi
	launch_failed "exited"
}

# stop_process ends the broker, with SIGTERM (a clean shutdown, SIGKILL after
# STOP_TIMEOUT_S) or at once with SIGKILL, and waits until it is gone.
stop_process() {
	local signal=$1 pid deadline
	pid=$(running_pid) || return 0
	kill -"$signal" "$pid" 2>/dev/null || true
	deadline=$((SECONDS + STOP_TIMEOUT_S))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			log "pid $pid still running after ${STOP_TIMEOUT_S} s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			deadline=$((SECONDS + STOP_TIMEOUT_S))
		fi
		sleep 0.1
	done
	rm -f "$PID_FILE"
}

cmd_stop() {
	local pid
	ensure_state_dir
	if pid=$(running_pid); then
		stop_process TERM
		log "stopped pid $pid"
	else
		log "not running"
	fi
	rm -rf "$STATE"
}

cmd_restart() {
	local signal=TERM started attempt rc broker_port controller_port
	case "${1:-}" in
	"") ;;
	--kill) signal=KILL ;;
	*) usage ;;
	esac
	started=$SECONDS
	JAVA=$(java_bin)
	[[ -f $STATE/$MARKER && -f $PORTS_FILE && -d $STATE/data ]] ||
		die "no broker state in $STATE: run scripts/kafka.sh start first"
	read -r broker_port controller_port _ <"$PORTS_FILE"
	stop_process "$signal"
	log "stopped (SIG$signal); starting again on 127.0.0.1:$broker_port with the same data"
	# The ports are the broker's identity for its clients: retry the same ones
	# briefly instead of moving, should something grab one meanwhile.
	for attempt in 1 2 3 4 5; do
		rc=0
		launch "$broker_port" || rc=$?
		if ((rc == 0)); then
			report_started "$broker_port" "$started"
			return
		fi
		if ((rc == 1)) && bind_clash && ((attempt < 5)); then
			sleep 1
			continue
		fi
		break
	done
	stop_process TERM
	if ((rc == 2)); then
		launch_failed "was not ready within $READY_TIMEOUT_S s after the restart"
	fi
	launch_failed "exited after the restart"
}

# fetch_tools fills the cache with the kafka-tools jar once, the way
# fetch_libs fills it with the broker's.
fetch_tools() {
	[[ -f $TOOLS_JAR ]] && return
	command -v mvn >/dev/null 2>&1 || die "mvn not found: it fetches kafka-tools from Maven Central (apt-get install -y maven)"
	mkdir -p "$CACHE_DIR"
	local lock tmp
	exec {lock}>"$CACHE_DIR/.lock"
	flock -w 600 "$lock" || die "timed out waiting for $CACHE_DIR/.lock"
	if [[ ! -f $TOOLS_JAR ]]; then
		log "fetching org.apache.kafka:kafka-tools:$KAFKA_VERSION with mvn into $(dirname "$TOOLS_JAR")"
		tmp=$(mktemp -d "$CACHE_DIR/tools.tmp.XXXXXX")
		if ! mvn -q -B --no-transfer-progress -Dstyle.color=never -f "$SCRIPT_DIR/kafka/pom.xml" \
			dependency:copy -Dartifact="org.apache.kafka:kafka-tools:$KAFKA_VERSION" \
			-DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
			cat "$tmp.mvn.log" >&2
			rm -rf "$tmp" "$tmp.mvn.log"
			die "mvn could not fetch kafka-tools $KAFKA_VERSION"
		fi
		rm -f "$tmp.mvn.log"
		mkdir -p "$(dirname "$TOOLS_JAR")"
		mv "$tmp/kafka-tools-$KAFKA_VERSION.jar" "$TOOLS_JAR"
		rm -rf "$tmp"
	fi
	exec {lock}>&-
}

cmd_jmx() {
	local name=${1:-} attrs=${2:-} jmx args errf
	[[ -n $name ]] || usage
	running_pid >/dev/null || die "no broker runs in $STATE"
	[[ -f $JMX_FILE ]] || die "the broker in $STATE was started without KEYHOOK_KAFKA_JMX_PORT"
	jmx=$(<"$JMX_FILE")
	JAVA=$(java_bin)
	fetch_libs
	fetch_tools
	args=(--jmx-url "service:jmx:rmi:///jndi/rmi://127.0.0.1:$jmx/jmxrmi" --object-name "$name" --one-time true --report-format csv)
	[[ -z $attrs ]] || args+=(--attributes "$attrs")
	# A one-off client with a small heap. JmxTool says on stderr that it
	# connects: shown only when it fails (e.g. a query that matches nothing).
	errf=$(mktemp)
	if ! "$JAVA" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$LIBS/*:$TOOLS_JAR" \
		org.apache.kafka.tools.JmxTool "${args[@]}" 2>"$errf"; then
		cat "$errf" >&2
		rm -f "$errf"
		die "JmxTool failed for $name"
	fi
	rm -f "$errf"
}

cmd_status() {
	local pid broker_port
	if pid=$(running_pid); then
		read -r broker_port _ <"$PORTS_FILE"
		printf 'running: pid %s, KEYHOOK_TEST_KAFKA_BROKERS=127.0.0.1:%s, broker log %s\n' \
			"$pid" "$broker_port" "$BROKER_LOG"
		return 0
	fi
	printf 'not running (state dir %s)\n' "$STATE"
	return 3
}

main() {
	local cmd=${1:-}
	shift || true
	case "$cmd" in
	start) cmd_start ;;
	stop) cmd_stop ;;
	restart) cmd_restart "$@" ;;
	status) cmd_status ;;
	fetch) cmd_fetch ;;
	jmx) cmd_jmx "$@" ;;
	*) usage ;;
	esac
}

main "$@"
