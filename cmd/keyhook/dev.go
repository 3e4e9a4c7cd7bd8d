package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"golang.org/x/sync/errgroup"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/demo"
	"github.com/keyhook/keyhook/schemas"
	"github.com/keyhook/keyhook/subscription"
)

const (
	devTopic     = "orders"
	devAvroTopic = "orders-avro"
)

// dev runs a whole keyhook with everything embedded: a kfake Kafka, a
// miniredis, a Schema Registry (franz-go's srfake), a demo endpoint with
// one slow key, a demo producer of JSON records and one of Avro orders
// (with a subscription that decodes them and keeps the paid ones), and a
// one-line summary every second.
func dev(ctx context.Context, c config, stdout, stderr io.Writer) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, devTopic, devAvroTopic), kfake.AllowAutoTopicCreation())
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

	registry := srfake.NewRegistry()
	schemaID, _, err := registry.RegisterSchema(devAvroTopic+"-value", sr.Schema{Schema: demo.OrderSchema})
	if err != nil {
		return fmt.Errorf("keyhook dev: schema registry: %w", err)
	}
	regLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("keyhook dev: schema registry: %w", err)
	}
	registrySrv := &http.Server{Handler: registry.Handler(), ReadHeaderTimeout: 5 * time.Second}
	defer registrySrv.Close()
	go func() { _ = registrySrv.Serve(regLn) }()
	c.node.SchemaRegistry = schemas.Config{URL: "http://" + regLn.Addr().String()}

	c.node.Brokers = cluster.ListenAddrs()
	c.node.AllowPrivateEndpoints = true // the demo endpoint is on loopback
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
	fmt.Fprintf(stdout, "keyhook dev\n  kafka    %s (topics %q, %q in Avro, 4 partitions)\n  redis    %s (embedded)\n  api      http://%s\n  endpoint http://%s/hook (key %q answers in 2s)\n  registry %s (embedded, schema %d of %q)\n",
		strings.Join(c.node.Brokers, ","), devTopic, devAvroTopic, mr.Addr(), apiAddr, ln.Addr(), demo.SlowKey, c.node.SchemaRegistry.URL, schemaID, devAvroTopic)
	fmt.Fprintf(stdout, "  token    %s (admin)\n", c.node.BootstrapToken)
	fmt.Fprintf(stdout, "  try      curl -s -H 'Authorization: Bearer %s' http://%s/v1/subscriptions | jq\n", c.node.BootstrapToken, apiAddr)
	fmt.Fprintf(stdout, "           KEYHOOK_API_URL=http://%s KEYHOOK_TOKEN=%s keyhook subscriptions list\n\n", apiAddr, c.node.BootstrapToken)

	for _, sub := range []*subscription.Subscription{{
		Name:     "demo",
		Topics:   []string{devTopic},
		Endpoint: subscription.Endpoint{URL: "http://" + ln.Addr().String() + "/hook"},
	}, {
		// Avro decoded with the registry's schema, the paid orders only,
		// sent as JSON.
		Name:        "demo-avro",
		Topics:      []string{devAvroTopic},
		Endpoint:    subscription.Endpoint{URL: "http://" + ln.Addr().String() + "/avro"},
		ValueFormat: "avro",
		Filter:      `value.status == 'PAID'`,
		Transform:   `{"order": value.order_id, "customer": key, "amount": value.amount}`,
	}} {
		sub.Normalize()
		if errs := sub.Validate(); errs != nil {
			kh.Close()
			return fmt.Errorf("keyhook dev: demo subscription %s: %v", sub.Name, errs)
		}
		// Signed like every subscription the API creates.
		if err := sub.EnsureSigningSecret(time.Now()); err != nil {
			kh.Close()
			return fmt.Errorf("keyhook dev: %w", err)
		}
		if err := kh.Subscriptions().Create(ctx, sub); err != nil {
			kh.Close()
			return fmt.Errorf("keyhook dev: create demo subscription %s: %w", sub.Name, err)
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return kh.Run(ctx) })
	g.Go(func() error { return demo.Produce(ctx, producer, devTopic, 8, 50) })
	g.Go(func() error { return demo.ProduceAvro(ctx, producer, devAvroTopic, schemaID, 8, 30) })
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
	var delivered, inflight, retrying, dead, filtered int64
	for _, s := range stats {
		delivered += s.Delivered
		inflight += s.InFlight
		retrying += s.Retrying
		dead += s.DeadLettered
		filtered += s.Filtered
	}
	_, slow := e.Received()
	fmt.Fprintf(&b, "%s delivered %d · filtered %d · in flight %d · retrying %d · dead-lettered %d · slow key %d · watermarks",
		time.Now().Format("15:04:05"), delivered, filtered, inflight, retrying, dead, slow)
	// One topic's partitions together, in order: "orders 21 41 61 5".
	for _, s := range stats {
		ps := slices.SortedFunc(slices.Values(s.Partitions), func(a, b dispatcher.PartitionStats) int {
			return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		topic := ""
		for _, p := range ps {
			if p.Topic != topic {
				topic = p.Topic
				fmt.Fprintf(&b, " %s", topic)
			}
			fmt.Fprintf(&b, " %d", p.Watermark)
			if p.Paused {
				b.WriteString("(paused)")
			}
		}
	}
	return b.String()
}
