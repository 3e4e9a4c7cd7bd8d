package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/internal/verify"
)

// Settings of the parking scenario.
const (
	// parkPartitions is the topic's partition count: as many as nodes, so
	// every node owns a whole partition (no key-range sharing) and a kill
	// moves one partition.
	parkPartitions = 2
	parkNodes      = 2
	// parkKeys are the ordinary keys; stuckEvery-th records go to the
	// stuck keys instead, which then carry 1/stuckEvery of the records.
	parkKeys   = 2000
	stuckEvery = 20
	stuckKeys  = 3
	// stuckLatency is how long the sink takes to answer a stuck key's
	// request until the scenario lets it recover: about 0.7 of its records
	// a second are delivered while some 13 a second arrive, so its lane
	// holds far more than a lane keeps in memory.
	stuckLatency = 1500 * time.Millisecond
	// parkWindow is the nodes' --max-window. Without parking (--park-after
	// 0) a stuck key stops its partition once the window between watermark
	// and fetch position fills; a window of a few seconds of the
	// partition's records makes that stop show within the scenario's time,
	// so the flow check below tells the two behaviours apart. With
	// parking it bounds the records in memory, which the new owner's
	// backlog at the takeover passes: records of ordinary keys with one in
	// memory are parked too, and re-read.
	parkWindow = 2000
)

// Two nodes deliver a two-partition topic over 2,000 keys while three
// stuck keys, one at least on each partition and together 5% of the
// records, are answered slowly: their lanes hold far more records than a
// lane keeps in memory, so the rest are parked by offset, and the other
// keys keep flowing. The owner of a partition with parked records dies
// with kill -9 and is restarted at once; the partition's new owner parks
// the stuck key's records again, and when the stuck keys recover it
// re-reads them from Kafka. Nothing is lost, keys stay in order, the
// commit never passes an unacked offset, duplicates stay within what was
// in flight or unflushed at the kill.
func TestFaultKill9WhileKeysParked(t *testing.T) {
	const records, rate = 24_000, 800
	const parkedFor, takeoverTimeout = 5 * time.Second, 45 * time.Second
	// flowLag is how old a non-stuck record must be at the kill to be
	// expected delivered: the group's first join, a fetch and a 10-50ms
	// answer take well under it.
	const flowLag = 3 * time.Second

	stuck := stuckKeyNames(parkPartitions, stuckKeys)
	isStuck := make(map[string]bool, len(stuck))
	for _, k := range stuck {
		isStuck[k] = true
	}
	keyOf := func(seq int64) string {
		if seq%stuckEvery == 0 {
			return stuck[(seq/stuckEvery)%int64(len(stuck))]
		}
		return fmt.Sprintf("key-%d", seq%parkKeys)
	}
	var stuckNow atomic.Bool
	stuckNow.Store(true)
	c := newCluster(t, "parked-kill9", clusterConfig{
		nodes: parkNodes, partitions: parkPartitions, keys: parkKeys, key: keyOf,
		latency: func(d *testutil.Delivery) time.Duration {
			switch {
			case !isStuck[d.Key]:
				return slowerLatency(d)
			case stuckNow.Load():
				return stuckLatency
			default:
				return smallLatency(d)
			}
		},
	})
	t.Logf("  stuck keys %v on partitions %v", stuck, partitionsOf(stuck, parkPartitions))
	token := "kh_faults_status_token_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c.flags = append(c.flags, "--bootstrap-token", token, "--max-window", strconv.Itoa(parkWindow))
	watch := &parkWatch{c: c, token: token, peak: map[int32]int64{}}

	c.startNodes()
	prodStart := time.Now()
	prod := c.produce(records, rate)

	watch.waitFor(t, 30*time.Second, "every partition shows records parked", func(parts []statusPartition) bool {
		for _, p := range parts {
			if p.parked() == 0 {
				return false
			}
		}
		return len(parts) == parkPartitions
	})
	t.Logf("  parked at %.1fs after the producer started:", time.Since(prodStart).Seconds())
	watch.logLast(t)
	// Let the parked records pile up while the other keys flow.
	for end := time.Now().Add(parkedFor); time.Now().Before(end); {
		_, _ = watch.poll()
		time.Sleep(250 * time.Millisecond)
	}

	parts, err := watch.poll()
	if err != nil {
		t.Fatalf("status before the kill: %v", err)
	}
	var candidates []statusPartition
	for _, p := range parts {
		if p.parked() > 0 {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		t.Fatal("no partition shows parked records before the kill")
	}
	victim := candidates[c.rng.IntN(len(candidates))]
	slot := -1
	for _, s := range c.live() {
		if c.slots[s].Name == victim.Owner {
			slot = s
		}
	}
	if slot < 0 {
		t.Fatalf("partition %d's owner %q is no live node (%v)", victim.Partition, victim.Owner, c.liveNames())
	}
	killed := c.slots[slot].Name
	t.Logf("  before the kill (%.1fs after the producer started):", time.Since(prodStart).Seconds())
	watch.logLast(t)
	killAt := time.Now()
	c.kill(slot)

	// The other keys kept flowing while the stuck ones were parked: of
	// each partition's records of ordinary keys that the producer was due
	// to write flowLag before the kill, at least 90% were acked by the
	// kill. The producer paces by the clock and never runs ahead, so
	// those records were written by then; a partition stopped behind its
	// stuck key (its window full) acks none after the stop, which, with
	// the window of parkWindow records, comes seconds before the kill.
	due := int64(killAt.Add(-flowLag).Sub(prodStart).Seconds() * rate)
	flow := flowBefore(c.sink.Deliveries(), keyOf, isStuck, due, killAt)
	for p := range int32(parkPartitions) {
		f := flow[p]
		t.Logf("  partition %d at the kill: %d of %d ordinary records due by %v before it acked (%.1f%%); stuck keys: %d acked",
			p, f.acked, f.due, flowLag, 100*f.share(), f.stuckAcked)
		if f.due == 0 || f.share() < 0.9 {
			t.Errorf("partition %d: only %d of %d records of ordinary keys due %v before the kill were acked by it: the stuck keys held the others up",
				p, f.acked, f.due, flowLag)
		}
	}

	c.startSlot(slot)
	// The partition's new owner holds the stuck key's records parked again
	// before the stuck keys recover, so that it is the one to re-read them.
	var newOwner string
	watch.waitFor(t, takeoverTimeout, fmt.Sprintf("partition %d has a new owner with records parked", victim.Partition), func(parts []statusPartition) bool {
		for _, p := range parts {
			if p.Partition == victim.Partition && p.Owner != "" && p.Owner != killed && p.parked() > 0 {
				newOwner = p.Owner
				return true
			}
		}
		return false
	})
	t.Logf("  partition %d taken over by %s %.1fs after the kill:", victim.Partition, newOwner, time.Since(killAt).Seconds())
	watch.logLast(t)
	stuckNow.Store(false)
	recovered := time.Now()

	prod.wait(time.Minute)
	o := c.finish()
	if o.Records != records {
		t.Errorf("%d records in the log, want %d", o.Records, records)
	}
	t.Logf("  parked peak per partition %v over %d status polls; settled %.1fs after the stuck keys recovered",
		watch.peak, watch.polls, time.Since(recovered).Seconds())

	// The new owner re-read the parked records of the partition it took
	// over: it logged so after the kill (the survivor may have owned the
	// partition for a moment while the group first settled).
	rereads := map[string][]string{}
	var names []string
	for _, p := range c.procs {
		for _, line := range logLinesOf(p, `msg="re-reading parked records"`) {
			at, err := time.Parse(time.RFC3339Nano, logValue(" "+line, "time"))
			if err != nil || at.Before(killAt) || logValue(line, "partition") != strconv.Itoa(int(victim.Partition)) {
				continue
			}
			if rereads[p.Name] == nil {
				names = append(names, p.Name)
			}
			rereads[p.Name] = append(rereads[p.Name], fmt.Sprintf("from=%s at %+.1fs", logValue(line, "from"), at.Sub(recovered).Seconds()))
		}
	}
	for _, name := range names {
		t.Logf("  %s re-read partition %d %d times after the kill (times from the stuck keys' recovery): %s",
			name, victim.Partition, len(rereads[name]), summarize(rereads[name], 5))
	}
	if len(rereads[newOwner]) == 0 {
		t.Errorf("partition %d's new owner %s never logged re-reading parked records of it", victim.Partition, newOwner)
	}
	// What the new owner delivered of the stuck keys: past the first few
	// of each, records it had parked.
	byKey := map[string]int{}
	for _, d := range c.sink.Deliveries() {
		if d.Origin == newOwner && d.Partition == victim.Partition && isStuck[d.Key] && d.Status >= 200 && d.Status < 300 {
			byKey[d.Key]++
		}
	}
	t.Logf("  %s delivered of the stuck keys of partition %d: %v", newOwner, victim.Partition, byKey)
	for _, p := range c.procs {
		if !p.Exited() {
			n, err := scrapeCounter(p.APIAddr, token, "keyhook_records_reread_total")
			t.Logf("  %s: keyhook_records_reread_total %v (%v)", p.Name, n, err)
		}
	}
}

// stuckKeyNames returns n key names that the producer's partitioner (the
// Kafka murmur2 hash of the key) spreads over every partition: the i-th on
// partition i mod partitions.
func stuckKeyNames(partitions, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("stuck-%d", i)
		if partitionOf(name, partitions) == int32(len(out)%partitions) {
			out = append(out, name)
		}
	}
	return out
}

// partitionOf is the partition a record of key goes to.
func partitionOf(key string, partitions int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, partitions))
}

func partitionsOf(keys []string, partitions int) []int32 {
	out := make([]int32, len(keys))
	for i, k := range keys {
		out[i] = partitionOf(k, partitions)
	}
	return out
}

// flowCount is what flowBefore counted on one partition.
type flowCount struct {
	due, acked, stuckAcked int
}

func (f flowCount) share() float64 {
	if f.due == 0 {
		return 0
	}
	return float64(f.acked) / float64(f.due)
}

// flowBefore counts, per partition, the records of ordinary keys among
// the first due the producer writes and how many of them the sink acked
// by at, and the stuck keys' records acked by at.
func flowBefore(ds []testutil.Delivery, keyOf func(int64) string, isStuck map[string]bool, due int64, at time.Time) map[int32]flowCount {
	out := map[int32]flowCount{}
	for seq := range due {
		if k := keyOf(seq); !isStuck[k] {
			f := out[partitionOf(k, parkPartitions)]
			f.due++
			out[partitionOf(k, parkPartitions)] = f
		}
	}
	acked := map[int64]bool{}
	for _, d := range ds {
		if d.Status < 200 || d.Status >= 300 || d.End.After(at) {
			continue
		}
		seq, err := verify.SeqOf(d.Body)
		if err != nil || acked[seq] {
			continue
		}
		acked[seq] = true
		f := out[d.Partition]
		switch {
		case isStuck[d.Key]:
			f.stuckAcked++
		case seq < due:
			f.acked++
		}
		out[d.Partition] = f
	}
	return out
}

// statusPartition is what the status API answers for one partition, as
// an operator reads it.
type statusPartition struct {
	Partition int32  `json:"partition"`
	Owner     string `json:"owner"`
	Watermark int64  `json:"watermark"`
	Pending   int64  `json:"pending"`
	LogEnd    int64  `json:"log_end"`
	Holding   *struct {
		Offset            int64  `json:"offset"`
		Key               string `json:"key"`
		Attempts          int    `json:"attempts"`
		AgeMS             int64  `json:"age_ms"`
		Behind            int64  `json:"behind"`
		Parked            int64  `json:"parked"`
		OldestParkedAgeMS *int64 `json:"oldest_parked_age_ms"`
	} `json:"holding"`
}

func (p statusPartition) parked() int64 {
	if p.Holding == nil {
		return 0
	}
	return p.Holding.Parked
}

func (p statusPartition) String() string {
	s := fmt.Sprintf("partition %d: owner %s, watermark %d, pending %d, log end %d", p.Partition, p.Owner, p.Watermark, p.Pending, p.LogEnd)
	if h := p.Holding; h != nil {
		s += fmt.Sprintf("; holding offset %d key %q (%d attempts, %dms old, %d behind), parked %d", h.Offset, h.Key, h.Attempts, h.AgeMS, h.Behind, h.Parked)
		if h.OldestParkedAgeMS != nil {
			s += fmt.Sprintf(", oldest parked %dms old", *h.OldestParkedAgeMS)
		}
	}
	return s
}

// parkWatch reads the subscription's status from a live node's API, as an
// operator does, and keeps each partition's peak of parked records. It is
// used from the test's goroutine only.
type parkWatch struct {
	c     *cluster
	token string
	peak  map[int32]int64
	polls int
	last  []statusPartition
}

func (w *parkWatch) poll() ([]statusPartition, error) {
	live := w.c.live()
	if len(live) == 0 {
		return nil, fmt.Errorf("no live node")
	}
	// Round robin, not the scenario's random source: a replayed seed
	// must make the same choices whatever the number of polls.
	addr := w.c.slots[live[w.polls%len(live)]].APIAddr
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/subscriptions/"+w.c.sub.ID+"/status", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status: %s", resp.Status)
	}
	var st struct {
		Partitions []statusPartition `json:"partitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("status: decode: %w", err)
	}
	w.polls++
	w.last = st.Partitions
	for _, p := range st.Partitions {
		w.peak[p.Partition] = max(w.peak[p.Partition], p.parked())
	}
	return st.Partitions, nil
}

// waitFor polls the status until cond holds on an answer, failing the
// test after timeout with the last answer or error.
func (w *parkWatch) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]statusPartition) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		parts, err := w.poll()
		if err == nil && cond(parts) {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("  last status answer (error %v):", err)
			w.logLast(t)
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *parkWatch) logLast(t *testing.T) {
	t.Helper()
	for _, p := range w.last {
		t.Logf("    %s", p)
	}
}

// logLinesOf returns p's log lines containing substr.
func logLinesOf(p *testutil.Process, substr string) []string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// summarize shows the first n of items and how many more there are.
func summarize(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(", … (%d more)", len(items)-n)
}

// scrapeCounter sums the samples of a counter in a node's /metrics.
func scrapeCounter(addr, token, name string) (float64, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	return sum, nil
}
