package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/internal/testutil"
)

// configBackWithin is how soon after Redis lost the configuration every
// node must serve all of it again, with no operator action.
const configBackWithin = 10 * time.Second

// Redis loses everything (FLUSHALL) under load. Subscriptions and tokens
// come back from the config topic within seconds on every node, without an
// operator; a subscription deleted and a token revoked before the flush
// stay gone. Delivery resumes: nothing is lost, and duplicates are bounded
// by the tracking state Redis lost, as after a restart without persistence.
func TestFaultRedisFlushAllRestoresConfig(t *testing.T) {
	const records, rate = 30_000, 1_000
	c := newCluster(t, "redis-flushall", clusterConfig{latency: smallLatency})
	op := c.operator()
	c.startNodes()
	prod := c.produce(records, rate)

	kept := op.createSubscription("kept")
	doomed := op.createSubscription("doomed")
	op.deleteSubscription(doomed)
	op.createToken("reader")
	op.createToken("revoked")
	op.revokeToken("revoked")
	want := op.state()
	if _, ok := want.subs[kept]; !ok || len(want.subs) != 2 || !want.tokens["reader"] || want.tokens["revoked"] {
		t.Fatalf("configuration before the flush: %+v", want)
	}
	sleepFor(8 * time.Second)

	lost := c.ackedAboveCommit()
	inFlight := c.sink.InFlight()
	flushedAt := time.Now()
	if err := c.rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	c.addBound(lost+inFlight, fmt.Sprintf("Redis flushed: %d records acked above the Kafka commit + %d in flight", lost, inFlight))
	back := op.waitState(want, configBackWithin).Sub(flushedAt)
	t.Logf("  config back on every node %v after FLUSHALL: %d subscriptions, tokens %v",
		back.Round(time.Millisecond), len(want.subs), slices.Sorted(maps.Keys(want.tokens)))
	c.recordConfigBack("FLUSHALL", back)

	prod.wait(time.Minute)
	c.finish()
	t.Logf("  node logs: %v", c.logLines("redis brought in step", "tracking state lost", "subscription removed", "reconcile failed"))
}

// Redis comes back from a snapshot taken before subscriptions were
// created, changed and deleted and tokens revoked. The latest state wins on
// every node: nothing deleted or revoked comes back, nothing created or
// changed since is lost.
func TestFaultRedisRollbackKeepsLatestConfig(t *testing.T) {
	const records, rate = 30_000, 1_000
	c := newCluster(t, "redis-rollback-config", clusterConfig{latency: smallLatency})
	op := c.operator()
	c.startNodes()
	prod := c.produce(records, rate)

	toDelete := op.createSubscription("to-delete")
	toChange := op.createSubscription("to-change")
	op.createToken("to-revoke")
	// The nodes have adopted the scenario's subscription into the config
	// topic within a second of starting; the snapshot has it too.
	sleepFor(4 * time.Second)
	snapshot := c.redis.Snapshot()
	snappedAt := time.Now()

	op.deleteSubscription(toDelete)
	op.changeSubscription(toChange, 7)
	created := op.createSubscription("created-after")
	op.revokeToken("to-revoke")
	op.createToken("created-after")
	want := op.state()
	if _, ok := want.subs[toDelete]; ok || want.subs[toChange] != 7 || want.tokens["to-revoke"] || !want.tokens["created-after"] {
		t.Fatalf("configuration before the rollback: %+v", want)
	}
	if _, ok := want.subs[created]; !ok {
		t.Fatalf("configuration before the rollback lacks %s: %+v", created, want)
	}
	sleepFor(2 * time.Second)

	lost := c.ackedAboveCommit()
	inFlight := c.sink.InFlight()
	rolledAt := time.Now()
	c.redis.RestartFromSnapshot(snapshot)
	c.addBound(lost+inFlight, fmt.Sprintf("Redis rolled back %v: %d records acked above the Kafka commit + %d in flight",
		time.Since(snappedAt).Round(time.Millisecond), lost, inFlight))
	back := op.waitState(want, configBackWithin).Sub(rolledAt)
	t.Logf("  latest config on every node %v after the rollback", back.Round(time.Millisecond))
	c.recordConfigBack("rollback", back)

	prod.wait(time.Minute)
	c.finish()
	t.Logf("  node logs: %v", c.logLines("redis brought in step", "tracking state lost", "partition claimed", "fenced", "reconcile failed"))
}

// A Sentinel failover loses writes the primary acknowledged: the replica
// is frozen while a subscription and a token are created, then the primary
// is killed and the replica, promoted, never saw them. They come back from
// the config topic; no subscription and no record is lost.
func TestFaultRedisSentinelFailover(t *testing.T) {
	const records, rate = 30_000, 1_000
	const master = "keyhook-primary"
	c := newCluster(t, "redis-sentinel-failover", clusterConfig{latency: smallLatency})
	replica := startReplica(t, c.redis.Addr)
	sentinel := testutil.StartRedisSentinel(t, master, c.redis.Addr)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	t.Cleanup(func() { _ = sc.Close() })
	ctx := context.Background()
	for _, kv := range [][2]string{{"down-after-milliseconds", "1000"}, {"failover-timeout", "10000"}} {
		if err := sc.Set(ctx, master, kv[0], kv[1]).Err(); err != nil {
			t.Fatalf("SENTINEL SET %s: %v", kv[0], err)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the Sentinel knows the replica", func() bool {
		rs, err := sc.Replicas(ctx, master).Result()
		return err == nil && len(rs) == 1
	})
	c.useSentinel(sentinel, master)
	op := c.operator()
	c.startNodes()
	prod := c.produce(records, rate)

	before := op.createSubscription("before")
	op.createToken("before")
	sleepFor(8 * time.Second)

	// Writes the primary acknowledges from now on never reach the replica:
	// it is frozen and its link cut (what the primary had sent already
	// waits in the replica's socket, and it applies it when it thaws).
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("freeze the replica: %v", err)
	}
	if err := c.rdb.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatalf("cut the replication link: %v", err)
	}
	last := op.createSubscription("last-second")
	op.createToken("last-second")
	want := op.state()
	if _, ok := want.subs[last]; !ok || !want.tokens["last-second"] {
		t.Fatalf("configuration before the failover: %+v", want)
	}
	if _, ok := want.subs[before]; !ok {
		t.Fatalf("configuration before the failover lacks %s: %+v", before, want)
	}

	lost := c.ackedAboveCommit()
	inFlight := c.sink.InFlight()
	killedAt := time.Now()
	killRedis(t, c.rdb)
	_ = replica.Signal(syscall.SIGCONT)
	testutil.WaitFor(t, 30*time.Second, "the Sentinel promoted the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, master).Result()
		return err == nil && net.JoinHostPort(addr[0], addr[1]) == replica.addr
	})
	promoted := time.Since(killedAt)
	t.Logf("  primary killed; the Sentinel promoted the replica after %v", promoted.Round(time.Millisecond))
	outIn, outUnflushed := c.windowBound(killedAt, time.Now())
	c.addBound(lost+inFlight+outIn+outUnflushed, fmt.Sprintf("failover lost the primary's last writes: %d records acked above the Kafka commit + %d in flight, then %d in flight + %d completed per %v during the failover",
		lost, inFlight, outIn, outUnflushed, unflushedWindow))
	back := op.waitState(want, configBackWithin).Sub(killedAt)
	t.Logf("  config back on every node %v after the kill (%v after the promotion)", back.Round(time.Millisecond), (back - promoted).Round(time.Millisecond))
	if n := c.restoresLogged(); n == 0 {
		t.Error("no node logged a restore: the promoted replica lost nothing, so the scenario proved nothing")
	}
	c.recordConfigBack("sentinel failover", back)

	prod.wait(time.Minute)
	c.finish()
	t.Logf("  node logs: %v", c.logLines("redis brought in step", "tracking state lost", "reconcile failed", "flush failed"))
}

// recordConfigBack logs the scenario's row of the configuration table:
// how long after the fault every node served the whole configuration, and
// how many restores of lost entries the nodes logged.
func (c *cluster) recordConfigBack(fault string, back time.Duration) {
	c.t.Logf("  config_back fault=%q after=%v restores_logged=%d", fault, back.Round(time.Millisecond), c.restoresLogged())
}

// restoresLogged counts the log lines of nodes that wrote lost entries
// back to Redis (adoptions of entries the log never saw do not count).
func (c *cluster) restoresLogged() int {
	n := 0
	for _, p := range c.procs {
		data, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if strings.Contains(line, "redis brought in step") && (!strings.Contains(line, "restored=0") || !strings.Contains(line, "removed=0")) {
				n++
			}
		}
	}
	return n
}

// useSentinel points the nodes at the Sentinel instead of the primary.
func (c *cluster) useSentinel(sentinel, master string) {
	for i := 0; i+1 < len(c.flags); i++ {
		if c.flags[i] == "--redis-url" {
			c.flags[i+1] = "redis://" + sentinel + "/0"
		}
	}
	c.flags = append(c.flags, "--redis-sentinel-master", master)
}

// operator changes the scenario's configuration as an operator does:
// through the REST API of a live node, with a bootstrap token the nodes
// are started with, and with the keyhook token command. Its subscriptions
// read a topic of their own that nobody produces to, so that the
// scenario's sink sees only the scenario's subscription.
type operator struct {
	c      *cluster
	token  string
	topic  string
	tokens map[string]string
}

// operator must be called before the nodes start: it adds the bootstrap
// token to their flags.
func (c *cluster) operator() *operator {
	c.t.Helper()
	op := &operator{c: c, token: "kh_faults_bootstrap_token_" + strconv.FormatInt(time.Now().UnixNano(), 36), topic: c.topic + ".idle", tokens: map[string]string{}}
	testutil.CreateTopics(c.t, c.brokers, 1, op.topic)
	c.flags = append(c.flags, "--bootstrap-token", op.token)
	return op
}

// api sends a request to a live node's API with the bootstrap token and
// decodes a JSON answer into out.
func (op *operator) api(method, path string, body any, out any) int {
	t := op.c.t
	t.Helper()
	live := op.c.live()
	node := op.c.slots[live[op.c.rng.IntN(len(live))]]
	return callAPI(t, node.APIAddr, op.token, method, path, body, out)
}

func callAPI(t *testing.T, addr, token, method, path string, body, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decode: %v", method, path, err)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// createSubscription creates a subscription named name and returns its id.
func (op *operator) createSubscription(name string) string {
	op.c.t.Helper()
	var sub struct {
		ID string `json:"id"`
	}
	body := map[string]any{"name": name, "topics": []string{op.topic}, "endpoint": map[string]any{"url": "http://127.0.0.1:9/" + name}}
	if code := op.api(http.MethodPost, "/v1/subscriptions", body, &sub); code != http.StatusCreated {
		op.c.t.Fatalf("create subscription %s: status %d", name, code)
	}
	return sub.ID
}

func (op *operator) deleteSubscription(id string) {
	op.c.t.Helper()
	if code := op.api(http.MethodDelete, "/v1/subscriptions/"+id, nil, nil); code >= 300 {
		op.c.t.Fatalf("delete subscription %s: status %d", id, code)
	}
}

func (op *operator) changeSubscription(id string, maxInFlight int) {
	op.c.t.Helper()
	if code := op.api(http.MethodPatch, "/v1/subscriptions/"+id, map[string]any{"max_in_flight": maxInFlight}, nil); code != http.StatusOK {
		op.c.t.Fatalf("change subscription %s: status %d", id, code)
	}
}

// tokenCmd runs "keyhook token ..." with the scenario's Redis and Kafka
// flags and returns its standard output.
func (op *operator) tokenCmd(args ...string) string {
	t := op.c.t
	t.Helper()
	for i := 0; i+1 < len(op.c.flags); i++ {
		switch op.c.flags[i] {
		case "--redis-url", "--kafka-brokers", "--config-topic", "--redis-sentinel-master":
			args = append(args, op.c.flags[i], op.c.flags[i+1])
		}
	}
	cmd := exec.Command(testutil.KeyhookBinary(t), append([]string{"token"}, args...)...)
	cmd.Env = os.Environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("keyhook token %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

func (op *operator) createToken(name string) {
	op.tokens[name] = strings.TrimSpace(op.tokenCmd("create", "--name", name, "--scopes", "subscriptions:read"))
}

func (op *operator) revokeToken(name string) { op.tokenCmd("revoke", name) }

// configState is what one node serves: its subscriptions (id to
// max_in_flight) and which of the operator's tokens it accepts.
type configState struct {
	subs   map[string]int
	tokens map[string]bool
}

func (s configState) equal(o configState) bool {
	return maps.Equal(s.subs, o.subs) && maps.Equal(s.tokens, o.tokens)
}

// stateOf reads what the node at addr serves; ok is false when it does
// not answer with the bootstrap token.
func (op *operator) stateOf(addr string) (configState, bool) {
	t := op.c.t
	var page struct {
		Items []struct {
			ID          string `json:"id"`
			MaxInFlight int    `json:"max_in_flight"`
		} `json:"items"`
	}
	if code := callAPI(t, addr, op.token, http.MethodGet, "/v1/subscriptions?limit=100", nil, &page); code != http.StatusOK {
		return configState{}, false
	}
	st := configState{subs: map[string]int{}, tokens: map[string]bool{}}
	for _, s := range page.Items {
		st.subs[s.ID] = s.MaxInFlight
	}
	for name, secret := range op.tokens {
		code := callAPI(t, addr, secret, http.MethodGet, "/v1/subscriptions?limit=1", nil, nil)
		if code != http.StatusOK && code != http.StatusUnauthorized {
			return configState{}, false
		}
		st.tokens[name] = code == http.StatusOK
	}
	return st, true
}

// state is what a live node serves now.
func (op *operator) state() configState {
	op.c.t.Helper()
	live := op.c.live()
	st, ok := op.stateOf(op.c.slots[live[0]].APIAddr)
	if !ok {
		op.c.t.Fatal("a live node does not answer with the bootstrap token")
	}
	return st
}

// waitState waits until every live node serves want, failing after
// within; it returns when they first all did.
func (op *operator) waitState(want configState, within time.Duration) time.Time {
	op.c.t.Helper()
	start := time.Now()
	var last configState
	for {
		agreed := true
		for _, slot := range op.c.live() {
			st, ok := op.stateOf(op.c.slots[slot].APIAddr)
			if !ok || !st.equal(want) {
				agreed, last = false, st
				break
			}
		}
		if agreed {
			return time.Now()
		}
		if time.Since(start) > within {
			op.c.t.Fatalf("the configuration was not back on every node within %v: want %+v, last seen %+v", within, want, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaProc is a redis-server replicating the scenario's primary.
type replicaProc struct {
	addr string
	cmd  *exec.Cmd
}

func (r *replicaProc) Signal(sig syscall.Signal) error { return r.cmd.Process.Signal(sig) }

// startReplica starts a redis-server replicating primary and waits until
// it is in sync; it is killed when the test ends.
func startReplica(t *testing.T, primary string) *replicaProc {
	t.Helper()
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		t.Fatal(err)
	}
	p := testutil.FreePort(t)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--protected-mode", "no", "--replicaof", host, port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start replica: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	r := &replicaProc{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), cmd: cmd}
	rc := redis.NewClient(&redis.Options{Addr: r.addr})
	defer rc.Close()
	testutil.WaitFor(t, 30*time.Second, "the replica is in sync", func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return r
}

// killRedis kills the redis-server rdb talks to with SIGKILL.
func killRedis(t *testing.T, rdb *redis.Client) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("redis INFO: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("redis process_id %q: %v", v, err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill redis %d: %v", pid, err)
			}
			return
		}
	}
	t.Fatal("redis INFO names no process_id")
}
