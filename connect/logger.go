package connect

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
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

// maxStdLogLine bounds a line of the standard logger kept in a record:
// net/http quotes what an endpoint sent in some of its lines.
const maxStdLogLine = 512

// StdLogWriter adapts a slog.Logger to the standard library's log
// package, whose default logger net/http writes to ("Unsolicited
// response received on idle HTTP channel starting with ..."), so those
// lines follow --log-format and are bounded. Install it with
// log.SetOutput and log.SetFlags(0), which are process-wide: the binary
// does it once, at start. The standard logger carries no context, so a
// line names no subscription.
type StdLogWriter struct {
	// Logger receives every line at level Warn, with component=stdlog
	// and the line, quoted and cut at 512 bytes, as line. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Write logs one line of the standard logger.
func (w StdLogWriter) Write(p []byte) (int, error) {
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	line := bytes.TrimRight(p, "\n")
	cut := len(line) > maxStdLogLine
	if cut {
		line = line[:maxStdLogLine]
	}
	q := strconv.Quote(string(line))
	if cut {
		q += "..."
	}
	log.Warn("standard library log", "component", "stdlog", "line", q)
	return len(p), nil
}
