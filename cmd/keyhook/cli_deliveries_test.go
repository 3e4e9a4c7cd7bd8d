package main

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keyhook/keyhook/deliverylog"
)

func TestSubscriptionsCLIShowsTheDeliveryLog(t *testing.T) {
	e := newCLIEnv(t)
	out := e.mustRun(t, "subscriptions", "create", "--name", "orders", "--topic", "orders", "--url", "http://127.0.0.1:9/hook")
	id := regexp.MustCompile(`sub_[a-z2-7]{20}`).FindString(out)
	w, err := deliverylog.NewWriter(e.rdb, deliverylog.WriterConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	at := func(n int, status int, result, body string) deliverylog.Entry {
		return deliverylog.Entry{Subscription: id, DeliveryID: "dlv_1", Topic: "orders", Partition: 3, Offset: 17,
			Attempt: deliverylog.Attempt{Number: n, Time: t0.Add(time.Duration(n) * time.Second), Status: status, LatencyMS: 12.5, Result: result, Body: body,
				Headers: map[string]string{"Content-Type": "text/plain"}}}
	}
	w.Log(at(1, 503, deliverylog.ResultRetry, "busy\n\x1b[31mforged row"))
	w.Log(at(2, 200, deliverylog.ResultDelivered, ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = w.Run(ctx)

	out = e.mustRun(t, "subscriptions", "deliveries", id, "--failed")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "dlv_1") || !strings.Contains(lines[1], "orders") || !strings.Contains(lines[1], "delivered") {
		t.Fatalf("deliveries --failed:\n%s\nwant one row: dlv_1, its last attempt delivered", out)
	}
	out = e.mustRun(t, "subscriptions", "deliveries", id, "dlv_1")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != "delivery dlv_1: orders/3/17" {
		t.Fatalf("deliveries ID DELIVERY_ID:\n%s\nwant a title and two attempts", out)
	}
	if !strings.Contains(lines[2], "503") || !strings.Contains(lines[2], `"busy\n\x1b[31mforged row"`) || !strings.Contains(lines[2], "Content-Type: text/plain") {
		t.Errorf("first attempt row %q: want 503, the body quoted on one line, its Content-Type", lines[2])
	}
	if _, errOut, err := e.run(t, "subscriptions", "deliveries", id, "dlv_gone"); err == nil || !strings.Contains(err.Error()+errOut, "404") && !strings.Contains(err.Error()+errOut, "not in the delivery log") {
		t.Fatalf("unknown delivery: err %v, stderr %q; want the 404 problem", err, errOut)
	}
}
