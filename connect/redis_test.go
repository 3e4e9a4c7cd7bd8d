package connect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// newRedis builds the client cfg describes and closes it with the test.
func newRedis(t *testing.T, cfg connect.RedisConfig) redis.UniversalClient {
	t.Helper()
	rdb, err := connect.NewRedis(cfg)
	if err != nil {
		t.Fatalf("NewRedis(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// roundTrip writes and reads back one key: a working connection, not just
// a dial.
func roundTrip(rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "keyhook:connect-test", "v", time.Minute).Err(); err != nil {
		return err
	}
	got, err := rdb.Get(ctx, "keyhook:connect-test").Result()
	if err != nil {
		return err
	}
	if got != "v" {
		return fmt.Errorf("read back %q, want %q", got, "v")
	}
	return nil
}

func TestRedisTLSAgainstRedisServer(t *testing.T) {
	files := testutil.GenerateTLS(t)
	tlsOnly := testutil.StartRedisTLS(t, files, false)
	mutual := testutil.StartRedisTLS(t, files, true)

	for _, tc := range []struct {
		name    string
		cfg     connect.RedisConfig
		wantErr []string // substrings, one of which the error has; none for success
	}{
		{"CA file verifies the server", connect.RedisConfig{URL: tlsOnly.URL(), TLSCAFile: files.CAFile}, nil},
		{"system roots refuse a private CA", connect.RedisConfig{URL: tlsOnly.URL()}, []string{"certificate"}},
		{"client certificate passes mutual TLS",
			connect.RedisConfig{URL: mutual.URL(), TLSCAFile: files.CAFile, TLSCertFile: files.ClientCertFile, TLSKeyFile: files.ClientKeyFile}, nil},
		// In TLS 1.3 the client's handshake ends before the server checks
		// its certificate: the server's "certificate required" alert
		// comes with the first read, or, when the server closed before
		// the client's command arrived, the command's write is reset.
		{"no client certificate fails mutual TLS", connect.RedisConfig{URL: mutual.URL(), TLSCAFile: files.CAFile},
			[]string{"certificate", "connection reset by peer"}},
		{"plaintext to a TLS port fails", connect.RedisConfig{URL: "redis://" + tlsOnly.Addr + "/0?dial_timeout=1s&read_timeout=1s&max_retries=-1"}, []string{"EOF"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := roundTrip(newRedis(t, tc.cfg))
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("round trip: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("round trip succeeded, want an error containing one of %q", tc.wantErr)
			case len(tc.wantErr) > 0 && !slices.ContainsFunc(tc.wantErr, func(w string) bool { return strings.Contains(err.Error(), w) }):
				t.Fatalf("round trip error %q, want it to contain one of %q", err, tc.wantErr)
			}
		})
	}
}

// keyhookACL is the least privilege keyhook needs, as the deploy
// documentation gives it: its own keys and channels, every command but
// the dangerous ones.
var keyhookACL = []any{"~keyhook:*", "&keyhook:*", "+@all", "-@dangerous"}

func TestRedisACLUserFromTheURL(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "keyhook", "on", ">s3cret"}, keyhookACL...)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER keyhook: %v", err)
	}
	// From here on only named users get in.
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatalf("ACL SETUSER default off: %v", err)
	}

	for _, tc := range []struct {
		name, userinfo, wantErr string
	}{
		{"user and password", "keyhook:s3cret@", ""},
		{"wrong password", "keyhook:wrong@", "WRONGPASS"},
		{"no credentials", "", "NOAUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := roundTrip(newRedis(t, connect.RedisConfig{URL: "redis://" + tc.userinfo + srv.Addr + "/0"}))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("round trip: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("round trip error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}

	t.Run("keyhook's stores work within the ACL", func(t *testing.T) {
		rdb := newRedis(t, connect.RedisConfig{URL: "redis://keyhook:s3cret@" + srv.Addr + "/0"})
		exerciseStores(t, rdb, 4, nil)
	})
}

func TestRedisClusterRunsKeyhookStores(t *testing.T) {
	cluster := testutil.StartRedisCluster(t, 3)
	rdb := newRedis(t, connect.RedisConfig{
		URL:     "redis://" + cluster.Addrs[0] + "/0",
		Cluster: true,
		Addrs:   cluster.Addrs,
	})
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("NewRedis with Cluster returned %T, want *redis.ClusterClient", rdb)
	}
	// Enough partitions that their hash tags land on every node, so each
	// node runs the tracking scripts.
	exerciseStores(t, rdb, 32, func(ctx context.Context) {
		var empty []string
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			n, err := c.DBSize(ctx).Result()
			if err == nil && n == 0 {
				empty = append(empty, c.Options().Addr)
			}
			return err
		})
		if err != nil {
			t.Fatalf("DBSIZE on every master: %v", err)
		}
		if len(empty) > 0 {
			t.Fatalf("cluster nodes %v hold no key: the tracking state did not spread over the cluster", empty)
		}
	})
}

// exerciseStores runs keyhook's tracking and subscription stores on rdb:
// a subscription created and seen through the change feed, then for each
// of partitions partitions a claim, a flush of acked ranges, a load, a
// release and a takeover that sees the acked ranges, then the deletion of
// the subscription's tracking state. beforeDelete, when not nil, runs
// while the state of every partition is stored.
func exerciseStores(t *testing.T, rdb redis.UniversalClient, partitions int32, beforeDelete func(context.Context)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	subs, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []*subscription.Subscription, 16)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- subs.Watch(watchCtx, time.Hour, func(s []*subscription.Subscription) {
			select {
			case seen <- s:
			default:
			}
		})
	}()
	defer func() {
		stopWatch()
		if err := <-watchDone; err != nil {
			t.Errorf("subscription watch: %v", err)
		}
	}()
	// The first call confirms the feed is subscribed, so the create
	// below is announced to it.
	select {
	case <-seen:
	case <-ctx.Done():
		t.Fatal("subscription watch never called back")
	}
	sub := &subscription.Subscription{Name: "orders", Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: "https://example.com/hook"}}
	if err := subs.Create(ctx, sub); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	for found := false; !found; {
		select {
		case s := <-seen:
			found = slices.ContainsFunc(s, func(x *subscription.Subscription) bool { return x.ID == sub.ID })
		case <-ctx.Done():
			t.Fatal("the change feed never announced the new subscription")
		}
	}
	if got, err := subs.Get(ctx, sub.ID); err != nil || got.Name != "orders" {
		t.Fatalf("get subscription = %+v, %v", got, err)
	}

	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var pks []tracking.PartitionKey
	for p := range partitions {
		pks = append(pks, tracking.PartitionKey{Subscription: sub.ID, Topic: "orders", Partition: p})
	}
	wantAcked := []offsets.Range{{Start: 12, End: 15}, {Start: 20, End: 21}}
	for _, pk := range pks {
		claim, err := store.ClaimRanges(ctx, pk, "node-a", 1, "", nil)
		if err != nil {
			t.Fatalf("claim %s: %v", pk, err)
		}
		acked := new(offsets.Set)
		for _, r := range wantAcked {
			acked.Add(r.Start, r.End)
		}
		f := tracking.Flush{Epoch: claim.Epoch, Acked: acked, Watermark: 10, Fetched: 21, Committed: 10, Pending: 7}
		if err := store.FlushRanges(ctx, []tracking.PartitionFlush{{Key: pk, Flush: f}})[0].Err; err != nil {
			t.Fatalf("flush %s: %v", pk, err)
		}
		if err := store.ReleaseMany(ctx, []tracking.PartitionRelease{{Key: pk, Epoch: claim.Epoch}})[0]; err != nil {
			t.Fatalf("release %s: %v", pk, err)
		}
	}
	states, err := store.Load(ctx, pks)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(states) != len(pks) {
		t.Fatalf("load found %d partitions, want %d", len(states), len(pks))
	}
	for _, pk := range pks {
		if diff := cmp.Diff(wantAcked, states[pk].AckedRanges); diff != "" {
			t.Fatalf("loaded acked ranges of %s (-want +got):\n%s", pk, diff)
		}
		takeover, err := store.ClaimRanges(ctx, pk, "node-b", 2, "", nil)
		if err != nil {
			t.Fatalf("takeover claim %s: %v", pk, err)
		}
		if diff := cmp.Diff(wantAcked, takeover.Acked.Ranges()); diff != "" {
			t.Fatalf("acked ranges the new owner of %s sees (-want +got):\n%s", pk, diff)
		}
	}
	if beforeDelete != nil {
		beforeDelete(ctx)
	}
	if err := store.DeleteSubscription(ctx, sub.ID); err != nil {
		t.Fatalf("delete tracking state: %v", err)
	}
	if states, err := store.Load(ctx, pks); err != nil || len(states) != 0 {
		t.Fatalf("load after delete = %d partitions, %v; want none", len(states), err)
	}
}

func TestRedisSentinelFindsThePrimary(t *testing.T) {
	primary := testutil.StartRedis(t)
	sentinel := testutil.StartRedisSentinel(t, "keyhook-primary", primary.Addr)
	rdb := newRedis(t, connect.RedisConfig{
		URL:            "redis://" + sentinel + "/0",
		SentinelMaster: "keyhook-primary",
	})
	if err := roundTrip(rdb); err != nil {
		t.Fatalf("round trip through Sentinel: %v", err)
	}
	// The write landed on the primary the Sentinel named.
	if got, err := primary.Client().Get(context.Background(), "keyhook:connect-test").Result(); err != nil || got != "v" {
		t.Fatalf("primary holds %q, %v; want %q", got, err, "v")
	}
}

func TestRedisConfigErrorsNameTheField(t *testing.T) {
	files := testutil.GenerateTLS(t)
	missing := filepath.Join(t.TempDir(), "missing")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cfg       connect.RedisConfig
		wantField string
	}{
		{"no URL", connect.RedisConfig{}, "URL"},
		{"bad scheme", connect.RedisConfig{URL: "http://localhost:6379"}, "URL"},
		{"bad database", connect.RedisConfig{URL: "redis://localhost:6379/x"}, "URL"},
		{"CA with a plaintext URL", connect.RedisConfig{URL: "redis://localhost:6379", TLSCAFile: files.CAFile}, "TLSCAFile"},
		{"cert with a plaintext URL", connect.RedisConfig{URL: "redis://localhost:6379", TLSCertFile: files.ClientCertFile, TLSKeyFile: files.ClientKeyFile}, "TLSCertFile"},
		{"cert without key", connect.RedisConfig{URL: "rediss://localhost:6379", TLSCertFile: files.ClientCertFile}, "TLSCertFile"},
		{"key without cert", connect.RedisConfig{URL: "rediss://localhost:6379", TLSKeyFile: files.ClientKeyFile}, "TLSKeyFile"},
		{"cluster and sentinel", connect.RedisConfig{URL: "redis://localhost:6379", Cluster: true, SentinelMaster: "m"}, "Cluster"},
		{"addrs for a single server", connect.RedisConfig{URL: "redis://localhost:6379", Addrs: []string{"a:1"}}, "Addrs"},
		{"addr without port", connect.RedisConfig{URL: "redis://localhost:6379", Cluster: true, Addrs: []string{"a"}}, "Addrs"},
		{"cluster on database 3", connect.RedisConfig{URL: "redis://localhost:6379/3", Cluster: true}, "URL"},
		{"sentinel over a unix socket", connect.RedisConfig{URL: "unix:///run/redis.sock", SentinelMaster: "m"}, "URL"},
		// The rest pass Validate and fail when the files are read.
		{"missing CA file", connect.RedisConfig{URL: "rediss://localhost:6379", TLSCAFile: missing}, "TLSCAFile"},
		{"CA file without PEM", connect.RedisConfig{URL: "rediss://localhost:6379", TLSCAFile: notPEM}, "TLSCAFile"},
		{"mismatched key", connect.RedisConfig{URL: "rediss://localhost:6379", TLSCertFile: files.ClientCertFile, TLSKeyFile: files.ServerKeyFile}, "TLSCertFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, err := connect.NewRedis(tc.cfg)
			if err == nil {
				_ = rdb.Close()
			}
			var fe *connect.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("NewRedis error %v, want a *connect.FieldError for %s", err, tc.wantField)
			}
			if fe.Field != tc.wantField {
				t.Fatalf("NewRedis error names %s (%v), want %s", fe.Field, err, tc.wantField)
			}
		})
	}
}

func TestRedisURLErrorsDoNotRepeatThePassword(t *testing.T) {
	err := connect.RedisConfig{URL: "redis://keyhook:hunter2@localhost:notaport/0"}.Validate()
	if err == nil {
		t.Fatal("Validate accepted a URL with a bad port")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %q repeats the password", err)
	}
}

func TestRedisTopologyFollowsTheConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  connect.RedisConfig
		want string
	}{
		{"single server", connect.RedisConfig{URL: "redis://localhost:6379/2"}, "*redis.Client"},
		{"cluster", connect.RedisConfig{URL: "redis://localhost:6379", Cluster: true, Addrs: []string{"a:1", "b:2"}}, "*redis.ClusterClient"},
		{"sentinel", connect.RedisConfig{URL: "redis://localhost:26379", SentinelMaster: "m"}, "*redis.Client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := newRedis(t, tc.cfg)
			if got := fmt.Sprintf("%T", rdb); got != tc.want {
				t.Fatalf("NewRedis returned %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRedisLoggerWritesStructuredWarnings(t *testing.T) {
	var buf bytes.Buffer
	l := connect.RedisLogger{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: discarding bad PubSub connection: %v", errors.New("EOF"))
	got := buf.String()
	for _, want := range []string{`"level":"WARN"`, `"msg":"redis: discarding bad PubSub connection: EOF"`, `"component":"go-redis"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log line %s lacks %s", got, want)
		}
	}
}

// net/http's lines through the standard logger follow the node's log
// format, at Warn, with what the endpoint sent quoted and bounded.
func TestStdLogWriterWritesBoundedStructuredWarnings(t *testing.T) {
	var buf bytes.Buffer
	l := stdlog.New(connect.StdLogWriter{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}, "", 0)
	l.Printf("Unsolicited response received on idle HTTP channel starting with %q; err=%v", "HTTP/1.1 200 OK\r\n\x1b[2J"+strings.Repeat("a", 4096), nil)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log output %q is not one JSON record: %v", buf.String(), err)
	}
	line, _ := rec["line"].(string)
	if rec["level"] != "WARN" || rec["component"] != "stdlog" || !strings.HasPrefix(line, `"Unsolicited response`) {
		t.Errorf("record %v, want a warning of component stdlog with the line", rec)
	}
	if len(line) > 600 || strings.ContainsAny(line, "\r\n\x1b") {
		t.Errorf("line of %d bytes with control characters %v, want it quoted and bounded", len(line), strings.ContainsAny(line, "\r\n\x1b"))
	}
}
