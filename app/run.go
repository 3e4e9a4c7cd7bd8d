package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/keyhook/keyhook/nodes"
)

// task is one component running in a goroutine of its own, under a context
// of its own, so that shutdown can stop the components one at a time.
type task struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs fn; when fn fails, fail is called with the error so that the
// whole node stops. A nil fn is a task that is already done.
func start(fn func(context.Context) error, fail context.CancelCauseFunc) *task {
	ctx, cancel := context.WithCancel(context.Background())
	t := &task{cancel: cancel, done: make(chan error, 1)}
	if fn == nil {
		t.done <- nil
		return t
	}
	go func() {
		err := fn(ctx)
		if err != nil {
			fail(err)
		}
		t.done <- err
	}()
	return t
}

// stop ends the task and waits for it.
func (t *task) stop() error {
	t.cancel()
	err := <-t.done
	t.done <- err // a second stop sees the same result
	return err
}

// Run starts every component and returns once ctx ends or one of them
// fails, after all of them stopped. The shutdown order is:
//
//  1. the API stops accepting and finishes the requests in flight
//     (Config.APIShutdownTimeout), so no operator change races the drain;
//     then the cleaner of deleted subscriptions stops (a cleanup cut
//     short is tried again by any API node);
//  2. the dispatcher stops fetching, drains in-flight deliveries
//     (Config.DrainTimeout per partition), flushes acks to Redis, commits
//     the watermarks and leaves its consumer groups;
//  3. the monitor of failing streaks writes what it saw last, the
//     delivery log's writer writes what is left in its buffer, and the
//     events emitter stops (events still queued are dropped and counted);
//  4. the config log's restorer stops, once nothing of this node
//     changes a subscription any more;
//  5. the registry removes this node's entry, so it stops being listed
//     only once it owns nothing;
//  6. the admin and Kafka clients close and pending spans are flushed
//     (Config.TelemetryFlushTimeout).
//
// The caller's Redis client and Kafka options are still in use until Run
// returns. Run returns nil when ctx ended, else the first failure.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()
	parent := ctx
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	log := a.cfg.Logger

	// Start order is the reverse: the registry starts last, once
	// everything it announces runs.
	var runNode, serveAPI, clean, runMonitor, runEvents, runLog func(context.Context) error
	if a.node != nil {
		runNode = a.node.Run
		runMonitor = a.monitor.Run
	}
	if a.events != nil {
		runEvents = a.events.Run
	}
	if a.attempts != nil {
		runLog = a.attempts.Run
	}
	if a.srv != nil {
		serveAPI = a.serveAPI
		clean = a.cleaner.Run
		log.Info("api listening", "addr", a.APIAddr())
	}
	// The config log's restorer runs on every node, whatever its roles:
	// a Redis that lost subscriptions or tokens is rebuilt within
	// Config.ConfigRestoreInterval by whichever node looks first.
	restorer := start(func(ctx context.Context) error { return a.cfgLog.Run(ctx, a.subs, a.tokens) }, fail)
	// What the dispatcher tells its operator runs before it and stops
	// after it, so the last attempts are written and their events sent.
	emitter := start(runEvents, fail)
	attemptLog := start(runLog, fail)
	mon := start(runMonitor, fail)
	node := start(runNode, fail)
	apiTask := start(serveAPI, fail)
	cleaner := start(clean, fail)
	registry := start(a.heartbeat, fail)
	log.Info("keyhook node started", "node", a.cfg.NodeID, "version", a.cfg.Version,
		"api", a.cfg.Roles.Has(RoleAPI), "dispatcher", a.cfg.Roles.Has(RoleDispatcher))

	<-ctx.Done()
	errs := []error{apiTask.stop(), cleaner.stop(), node.stop(), mon.stop(), attemptLog.stop(), emitter.stop(), restorer.stop(), registry.stop()}
	log.Info("keyhook node stopped", "node", a.cfg.NodeID)
	if parent.Err() == nil {
		// A component failed: its error is why the node stopped.
		return context.Cause(ctx)
	}
	return errors.Join(errs...)
}

// serveAPI serves until ctx ends, then shuts the server down gracefully.
func (a *App) serveAPI(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- a.srv.Serve(a.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("app: api: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.APIShutdownTimeout)
	defer cancel()
	shutdownErr := a.srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("app: api: %w", err)
	}
	if shutdownErr != nil {
		// Requests still running past the timeout are cut; that is the
		// timeout's purpose, not a failure of the node.
		a.cfg.Logger.Warn("api shutdown", "err", shutdownErr)
		_ = a.srv.Close()
	}
	return nil
}

// heartbeat keeps this node in the registry with what it owns.
func (a *App) heartbeat(ctx context.Context) error {
	return a.registry.RunReporting(ctx, nodes.Info{ID: a.cfg.NodeID, Version: a.cfg.Version, Roles: a.cfg.Roles.names()}, func(i *nodes.Info) {
		if a.node == nil {
			return
		}
		owned := a.node.Owned()
		i.Owned = make([]nodes.Ownership, 0, len(owned))
		for _, o := range owned {
			i.Owned = append(i.Owned, nodes.Ownership(o))
		}
		for _, b := range a.node.Breakers() {
			i.Breakers = append(i.Breakers, nodes.Breaker(b))
		}
	})
}
