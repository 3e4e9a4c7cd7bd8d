package connect_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/internal/testutil"
)

// The counter holds what the client sent: a pipeline's commands one
// each, a script call once though Redis runs commands inside it.
func TestCountRedisCommandsCountsWhatTheClientSends(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartRedis(t)
	rdb, err := connect.NewRedis(connect.RedisConfig{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if err := connect.CountRedisCommands(rdb, mp); err != nil {
		t.Fatal(err)
	}
	// A connection go-redis dials sends its handshake (HELLO, CLIENT ...)
	// through the hooks too: counted, as sent, but not the test's.
	dials := &handshakes{}
	rdb.AddHook(dials)
	before := sent(t, reader)

	if err := rdb.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "a")
		p.Get(ctx, "a")
		p.Del(ctx, "b")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	script := redis.NewScript(`redis.call("SET", KEYS[1], "x"); redis.call("TIME"); return redis.call("GET", KEYS[1])`)
	if err := script.Eval(ctx, rdb, []string{"c"}).Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := sent(t, reader)-before, 5+dials.count(); got != want {
		t.Errorf("counted %d commands for SET, a pipeline of 3 and a script (and %d handshake commands); want %d", got, dials.count(), want)
	}
	// Redis ran the script's calls too: INFO commandstats holds them.
	info, err := srv.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cmdstat_eval:calls=1,", "cmdstat_time:calls=1,", "cmdstat_set:calls=2,"} {
		if !strings.Contains(info, want) {
			t.Errorf("commandstats lack %q:\n%s", want, info)
		}
	}
}

// handshakes counts the commands of connection handshakes a client sends.
type handshakes struct {
	mu sync.Mutex
	n  int64
}

func (h *handshakes) see(cmd redis.Cmder) {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
}

func (h *handshakes) count() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *handshakes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *handshakes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd)
		return next(ctx, cmd)
	}
}

func (h *handshakes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.see(c)
		}
		return next(ctx, cmds)
	}
}

// sent reads the counter's total.
func sent(t *testing.T, reader sdkmetric.Reader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "keyhook.redis.commands" {
				continue
			}
			var n int64
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				n += dp.Value
			}
			return n
		}
	}
	return 0
}
