package dispatcher

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/internal/testutil"
)

// BenchmarkDeliveryLog measures what the delivery log costs a delivery:
// BenchmarkDelivery's whole delivery against the raw sink, with the log
// off, then on, writing to a real redis-server, in the same run. Besides
// ns/op (the delivery goroutine's time) it reports the process's CPU per
// delivery (cpu-ns/op: the log's writer goroutine included, and the
// sink's, the same in both) and its ratio to the log off (cpu-x-off),
// and what Redis received per delivery: bytes (redis-in-B/op), script
// calls (redis-calls/op) and the commands they ran (redis-cmds/op).
func BenchmarkDeliveryLog(b *testing.B) {
	url := startRawSink(b)
	rdb := testutil.StartRedis(b).Client()
	var offCPU float64
	for _, on := range []bool{false, true} {
		name := "log=off"
		if on {
			name = "log=on"
		}
		b.Run(name, func(b *testing.B) {
			g, w := benchGroup(b, url)
			var writer *deliverylog.Writer
			stop := func() {}
			if on {
				var err error
				writer, err = deliverylog.NewWriter(rdb, deliverylog.WriterConfig{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				g.n.cfg.AttemptLog = writer
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = writer.Run(ctx)
				}()
				stop = func() {
					cancel()
					<-done
				}
			}
			rec := benchRecord()
			before := redisCounters(b, rdb)
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for b.Loop() {
				// A record of its own each time, as a stream has.
				rec.Offset = int64(n)
				n++
				f := g.newFlight(w, rec, nil)
				if _, done := f.step(); !done || !f.acked {
					b.Fatalf("delivery not acked: %+v", f.last)
				}
				w.mail.results = w.mail.results[:0]
			}
			stop() // the writer's last round counts
			b.StopTimer()
			cpu := float64(cpuTime()-cpu0) / float64(n)
			after := redisCounters(b, rdb)
			b.ReportMetric(cpu, "cpu-ns/op")
			if on && offCPU > 0 {
				b.ReportMetric(cpu/offCPU, "cpu-x-off")
			} else if !on {
				offCPU = cpu
			}
			b.ReportMetric(float64(after.inBytes-before.inBytes)/float64(n), "redis-in-B/op")
			b.ReportMetric(float64(after.calls-before.calls)/float64(n), "redis-calls/op")
			b.ReportMetric(float64(after.cmds-before.cmds)/float64(n), "redis-cmds/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type redisStats struct{ inBytes, calls, cmds int64 }

// redisCounters reads what the server has received: bytes, and from
// commandstats the script calls and every command (inner ones included),
// less the INFO calls themselves.
func redisCounters(tb testing.TB, rdb *redis.Client) redisStats {
	tb.Helper()
	ctx := context.Background()
	var s redisStats
	for line := range strings.SplitSeq(rdb.Info(ctx, "stats").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_net_input_bytes:"); ok {
			s.inBytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	for line := range strings.SplitSeq(rdb.Info(ctx, "commandstats").Val(), "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		calls, _ := strconv.ParseInt(v, 10, 64)
		s.cmds += calls
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			s.calls += calls
		}
	}
	return s
}
