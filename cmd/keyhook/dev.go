package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/demo"
	"github.com/keyhook/keyhook/subscription"
)

const devTopic = "orders"

// dev runs a whole keyhook with everything embedded: a kfake Kafka, a
// miniredis, a demo endpoint with one slow key, a demo producer, and a
// one-line summary every second.
func dev(ctx context.Context, c config, stdout, stderr io.Writer) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, devTopic), kfake.AllowAutoTopicCreation())
	if err != nil {
		return fmt.Errorf("keyhook dev: kafka: %w", err)
	}
	defer cluster.Close()
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("keyhook dev: redis: %w", err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	endpoint := &demo.Endpoint{Fast: 20 * time.Millisecond, Slow: 2 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("keyhook dev: demo endpoint: %w", err)
	}
	endpointSrv := &http.Server{Handler: endpoint, ReadHeaderTimeout: 5 * time.Second}
	defer endpointSrv.Close()
	go func() { _ = endpointSrv.Serve(ln) }()

	c.node.Brokers = cluster.ListenAddrs()
	c.node.AllowPrivateEndpoints = true // the demo endpoint is on loopback
	// A dev node shows what it delivered: GET .../deliveries answers.
	c.node.DeliveryLog.Enabled = true
	// --traces-exporter console prints spans next to the summary.
	c.node.Console = stdout
	log := c.logger(stderr)

	producer, err := kgo.NewClient(kgo.SeedBrokers(c.node.Brokers...))
	if err != nil {
		return fmt.Errorf("keyhook dev: producer: %w", err)
	}
	defer producer.Close()

	if c.node.BootstrapToken == "" {
		// The embedded Redis starts empty: Build makes this the admin
		// token of the run, and the banner prints it.
		c.node.BootstrapToken = auth.Generate()
	}
	kh, err := buildNode(ctx, "dev", c, log, app.Deps{Redis: rdb})
	if err != nil {
		return err
	}
	apiAddr := kh.APIAddr()
	fmt.Fprintf(stdout, "keyhook dev\n  kafka    %s (topic %q, 4 partitions)\n  redis    %s (embedded)\n  api      http://%s\n  endpoint http://%s/hook (key %q answers in 2s)\n",
		strings.Join(c.node.Brokers, ","), devTopic, mr.Addr(), apiAddr, ln.Addr(), demo.SlowKey)
	fmt.Fprintf(stdout, "  token    %s (admin)\n", c.node.BootstrapToken)
	fmt.Fprintf(stdout, "  try      curl -s -H 'Authorization: Bearer %s' http://%s/v1/subscriptions | jq\n", c.node.BootstrapToken, apiAddr)
	fmt.Fprintf(stdout, "           KEYHOOK_API_URL=http://%s KEYHOOK_TOKEN=%s keyhook subscriptions list\n\n", apiAddr, c.node.BootstrapToken)

	sub := &subscription.Subscription{
		Name:     "demo",
		Topics:   []string{devTopic},
		Endpoint: subscription.Endpoint{URL: "http://" + ln.Addr().String() + "/hook"},
	}
	sub.Normalize()
	// Signed like every subscription the API creates.
	if err := sub.EnsureSigningSecret(time.Now()); err != nil {
		kh.Close()
		return fmt.Errorf("keyhook dev: %w", err)
	}
	if err := kh.Subscriptions().Create(ctx, sub); err != nil {
		kh.Close()
		return fmt.Errorf("keyhook dev: create demo subscription: %w", err)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return kh.Run(ctx) })
	g.Go(func() error { return demo.Produce(ctx, producer, devTopic, 8, 50) })
	g.Go(func() error {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				fmt.Fprintln(stdout, "\nshutting down: draining in-flight deliveries and committing")
				return nil
			case <-t.C:
				fmt.Fprintln(stdout, summary(kh.Node().Stats(), endpoint))
			}
		}
	})
	return g.Wait()
}

// summary is the one-line view of a dev node.
func summary(stats []dispatcher.GroupStats, e *demo.Endpoint) string {
	var b strings.Builder
	var delivered, inflight, retrying, dead int64
	for _, s := range stats {
		delivered += s.Delivered
		inflight += s.InFlight
		retrying += s.Retrying
		dead += s.DeadLettered
	}
	_, slow := e.Received()
	fmt.Fprintf(&b, "%s delivered %d · in flight %d · retrying %d · dead-lettered %d · slow key %d · watermarks",
		time.Now().Format("15:04:05"), delivered, inflight, retrying, dead, slow)
	for _, s := range stats {
		for _, p := range s.Partitions {
			paused := ""
			if p.Paused {
				paused = " (paused)"
			}
			fmt.Fprintf(&b, " %s/%d=%d%s", p.Topic, p.Partition, p.Watermark, paused)
		}
	}
	return b.String()
}
