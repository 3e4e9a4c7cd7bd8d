package testutil

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// echo serves connections that write back what they read, until the test
// ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes b and reads as many bytes back within d.
func roundTrip(c net.Conn, b string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(b)); err != nil {
		return "", err
	}
	buf := make([]byte, len(b))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// A hang keeps the connection open and moves nothing, in either direction,
// until Pass, when what waited goes through; a reset ends the open
// connections with a reset and resets new ones until Pass.
func TestProxyHangsAndResetsAsANetworkPartition(t *testing.T) {
	p := StartProxy(t, "127.0.0.1:0", echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "one", time.Second); err != nil || got != "one" {
		t.Fatalf("passing: got %q, %v; want the echo", got, err)
	}

	p.Hang()
	if got, err := roundTrip(c, "two", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hung: got %q, %v; want a timeout", got, err)
	}
	p.Pass()
	buf := make([]byte, 3)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "two" {
		t.Fatalf("after the hang: got %q, %v; want what waited", buf, err)
	}

	p.Reset()
	if _, err := roundTrip(c, "three", time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("reset: got %v; want the connection ended", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(c2, "four", time.Second)
		c2.Close()
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection opened during the reset: %v; want it ended", err)
	}
	p.Pass()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "five", time.Second); err != nil || got != "five" {
		t.Fatalf("after the reset: got %q, %v; want the echo", got, err)
	}
}

// A client seeded with the cut proxy learns from the broker's metadata
// only the proxy's address, so all its connections go through it: hung,
// it reaches nothing, while a client of the first listener goes on.
func TestKafkaCutCarriesEveryConnectionOfItsClient(t *testing.T) {
	brokers := RealKafka(t)
	p := KafkaCut(t)
	cut, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cut).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		if addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); addr != p.Addr() {
			t.Errorf("the cut listener advertises %s, want the proxy %s", addr, p.Addr())
		}
	}

	p.Hang()
	defer p.Pass()
	fresh, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	defer hcancel()
	if _, err := kadm.NewClient(fresh).BrokerMetadata(hctx); err == nil {
		t.Error("a client of the hung proxy reached the broker")
	}
	direct := Admin(t, brokers)
	if _, err := direct.BrokerMetadata(ctx); err != nil {
		t.Errorf("a client of the first listener: %v; want it unaffected", err)
	}
}
