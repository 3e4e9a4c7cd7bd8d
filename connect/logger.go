package connect

import (
	"context"
	"fmt"
	"log/slog"
)

// RedisLogger adapts a slog.Logger to go-redis's logger, so that the lines
// go-redis prints on its own (a dropped Pub/Sub connection, a Sentinel
// failover, a pool problem) become structured records instead of raw
// lines on stderr. Install it with redis.SetLogger, which is process-wide:
// the binary does it once, at start.
type RedisLogger struct {
	// Logger receives every line at level Warn, with component=go-redis:
	// go-redis only logs what went wrong or changed under it. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Printf logs one go-redis line.
func (l RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Log(ctx, slog.LevelWarn, fmt.Sprintf(format, v...), "component", "go-redis")
}
