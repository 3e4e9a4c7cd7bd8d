package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/keyhook/keyhook/api"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

func serve(ctx context.Context, c config, stderr io.Writer) error {
	log := c.logger(stderr)
	opts, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return fmt.Errorf("keyhook serve: --redis-url: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	return runNode(ctx, c, rdb, log, nil)
}

// runNode wires one node over a Redis client and runs it until ctx ends.
// Shutdown order: the API stops accepting, the dispatcher drains, flushes
// and commits, then the Kafka and Redis clients close (by the callers).
// ready, when not nil, receives the API address once it listens.
func runNode(ctx context.Context, c config, rdb redis.UniversalClient, log *slog.Logger, ready func(apiAddr string, node *dispatcher.Node)) error {
	runAPI, runDispatcher, _ := c.roles()
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		return err
	}
	subs := subscription.NewStore(rdb, "")
	policy := webhooks.AddressPolicy{AllowPrivate: c.AllowPrivateEndpoints}

	g, ctx := errgroup.WithContext(ctx)
	var node *dispatcher.Node
	if runDispatcher {
		sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: policy, Timeout: c.RequestTimeout})
		if err != nil {
			return err
		}
		node, err = dispatcher.New(dispatcher.Config{
			NodeID:         c.NodeID,
			Brokers:        c.KafkaBrokers,
			FlushInterval:  c.FlushInterval,
			CommitInterval: c.CommitInterval,
			DrainTimeout:   c.DrainTimeout,
			SessionTimeout: c.SessionTimeout,
			MaxWindow:      c.MaxWindow,
			Logger:         log,
		}, subs, sender, tracker)
		if err != nil {
			return err
		}
		g.Go(func() error { return node.Run(ctx) })
	}
	apiAddr := ""
	if runAPI {
		admClient, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaBrokers...))
		if err != nil {
			return fmt.Errorf("keyhook: kafka admin client: %w", err)
		}
		defer admClient.Close()
		status := dispatcher.NewStatusReader(kadm.NewClient(admClient), tracker)
		handler := api.NewRouter(subs, policy, status, api.Config{Logger: log})
		ln, err := net.Listen("tcp", c.HTTPAddr)
		if err != nil {
			return fmt.Errorf("keyhook: --http-addr (KEYHOOK_HTTP_ADDR) %s: %w", c.HTTPAddr, err)
		}
		apiAddr = ln.Addr().String()
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("keyhook: api: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		log.Info("api listening", "addr", apiAddr)
	}
	log.Info("keyhook node started", "node", c.NodeID, "version", version, "api", runAPI, "dispatcher", runDispatcher)
	if ready != nil {
		ready(apiAddr, node)
	}
	err = g.Wait()
	log.Info("keyhook node stopped", "node", c.NodeID)
	return err
}
