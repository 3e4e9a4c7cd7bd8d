package webhooks_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// sinkProcessEnv makes the test binary serve as the benchmarks' sink
// instead of running tests (see TestMain).
const sinkProcessEnv = "KEYHOOK_BENCH_SINK"

func TestMain(m *testing.M) {
	if os.Getenv(sinkProcessEnv) == "1" {
		serveSinkProcess()
		return
	}
	os.Exit(m.Run())
}

// BenchmarkSenderCPU sends requests from many goroutines at once, as a
// subscription with a large max_in_flight does, to an endpoint answering
// at once in another process, and reports the CPU this process spends per
// request (cpu-µs/op, user and system time from getrusage): the figure
// the 0 ms bench scenario measures, without Kafka or Redis. The endpoint
// runs in a separate process so its CPU is not counted.
//
// The senders:
//   - keyhook: a record rendered as the raw format, signed, sent by the
//     client a node uses (limiters on) through Client.Attempt;
//   - nethttp: the same body posted by a bare net/http client with a
//     Transport tuned for the concurrency: what net/http costs alone;
//   - rawconn: a prebuilt HTTP/1.1 request written and its answer read
//     over one kept-alive net.Conn per goroutine: the floor of the
//     syscalls, without any client.
func BenchmarkSenderCPU(b *testing.B) {
	url, _, _ := startSinkProcess(b)
	for _, conc := range []int{256, 1000} {
		for _, s := range []struct {
			name string
			new  func(testing.TB, string, int) func(ctx context.Context, i int) error
		}{
			{"keyhook", newKeyhookSender},
			{"nethttp", newNetHTTPSender},
			{"rawconn", newRawConnSender},
		} {
			b.Run(fmt.Sprintf("sender=%s/conc=%d", s.name, conc), func(b *testing.B) {
				send := s.new(b, url, conc)
				runConcurrently(b, conc, send)
			})
		}
	}
}

// BenchmarkSenderCPUHTTPS is BenchmarkSenderCPU to an https endpoint
// (TLS 1.3, HTTP/1.1), through keyhook's client on both transports:
//   - http1: the default, the http1 client over TLS;
//   - nethttp: the same client with NetHTTPOnly (--endpoint-net-http).
//
// The warm-up opens every goroutine's connection, so handshakes are left
// out: what is measured is a request on a kept-alive TLS connection.
func BenchmarkSenderCPUHTTPS(b *testing.B) {
	_, url, roots := startSinkProcess(b)
	for _, conc := range []int{256, 1000} {
		for _, s := range []struct {
			name    string
			netHTTP bool
		}{{"http1", false}, {"nethttp", true}} {
			b.Run(fmt.Sprintf("transport=%s/conc=%d", s.name, conc), func(b *testing.B) {
				send := newKeyhookSenderWith(b, url, webhooks.ClientConfig{NetHTTPOnly: s.netHTTP, RootCAs: roots})
				runConcurrently(b, conc, send)
			})
		}
	}
}

// runConcurrently makes b.N calls of send from conc goroutines, after a
// warm-up that opens every goroutine's connection, and reports the CPU
// time spent per call.
func runConcurrently(b *testing.B, conc int, send func(ctx context.Context, i int) error) {
	ctx := context.Background()
	run := func(n int64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for range conc {
			wg.Go(func() {
				for i := next.Add(1); i <= n; i = next.Add(1) {
					if err := send(ctx, int(i)); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
	}
	run(int64(4 * conc))
	b.ReportAllocs()
	before := cpuTime(b)
	b.ResetTimer()
	run(int64(b.N))
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the user and system time this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchValue is a record value of the bench's size (256 bytes).
var benchValue = bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 10)[:256]

func newKeyhookSender(tb testing.TB, url string, _ int) func(context.Context, int) error {
	return newKeyhookSenderWith(tb, url, webhooks.ClientConfig{})
}

func newKeyhookSenderWith(tb testing.TB, url string, cfg webhooks.ClientConfig) func(context.Context, int) error {
	limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Policy, cfg.Limiters = webhooks.AddressPolicy{AllowPrivate: true}, limiters
	c, err := webhooks.NewClient(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.CloseIdleConnections)
	secret, err := webhooks.GenerateSecret()
	if err != nil {
		tb.Fatal(err)
	}
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		tb.Fatal(err)
	}
	signer := &webhooks.Signer{Secrets: []webhooks.Secret{sec}}
	return func(ctx context.Context, i int) error {
		partition, offset := "3", strconv.Itoa(i)
		m := &webhooks.Message{
			ID:      "dlv_" + offset,
			Key:     []byte("customer-" + strconv.Itoa(i%10000)),
			Value:   benchValue,
			Time:    time.Now(),
			Source:  "kafka://t",
			Subject: partition + "/" + offset,
			Attributes: []webhooks.Attr{
				{Name: "subscription", Value: "sub_bench"}, {Name: "topic", Value: "t"},
				{Name: "partition", Value: partition}, {Name: "offset", Value: offset},
			},
		}
		req, err := webhooks.NewRequest(url, webhooks.FormatRaw, m, "")
		if err != nil {
			return err
		}
		req.Signer = signer
		a, err := c.Attempt(ctx, req, 1)
		if err != nil {
			return err
		}
		return wantNoContent(a.Status, a.Err)
	}
}

func newNetHTTPSender(tb testing.TB, url string, conc int) func(context.Context, int) error {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: conc, DisableCompression: true}
	tb.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	return func(ctx context.Context, _ int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(benchValue))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return wantNoContent(resp.StatusCode, nil)
	}
}

func newRawConnSender(tb testing.TB, url string, _ int) func(context.Context, int) error {
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/hook"), "http://")
	request := append([]byte("POST /hook HTTP/1.1\r\nHost: "+host+"\r\nContent-Type: application/octet-stream\r\nContent-Length: "+
		strconv.Itoa(len(benchValue))+"\r\n\r\n"), benchValue...)
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	// Each goroutine takes a connection from the pool for a request and
	// puts it back: as many connections as goroutines, at most.
	var mu sync.Mutex
	var idle, all []*conn
	tb.Cleanup(func() {
		for _, c := range all {
			c.c.Close()
		}
	})
	return func(context.Context, int) error {
		mu.Lock()
		var c *conn
		if n := len(idle); n > 0 {
			c, idle = idle[n-1], idle[:n-1]
		}
		mu.Unlock()
		if c == nil {
			nc, err := net.Dial("tcp", host)
			if err != nil {
				return err
			}
			c = &conn{c: nc, br: bufio.NewReader(nc)}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
		}
		if _, err := c.c.Write(request); err != nil {
			return err
		}
		status := 0
		for first := true; ; first = false {
			line, err := c.br.ReadSlice('\n')
			if err != nil {
				return err
			}
			if first && len(line) > 12 {
				status, _ = strconv.Atoi(string(line[9:12]))
			}
			if len(line) <= 2 {
				break // the sink answers without a body
			}
		}
		mu.Lock()
		idle = append(idle, c)
		mu.Unlock()
		return wantNoContent(status, nil)
	}
}

func wantNoContent(status int, err error) error {
	if status != http.StatusNoContent {
		return fmt.Errorf("status %d, err %v, want 204", status, err)
	}
	return nil
}

// startSinkProcess runs the test binary as the sink, in its own process,
// until the benchmark ends, and returns its http and https URLs and the
// roots that trust the latter.
func startSinkProcess(tb testing.TB) (url, tlsURL string, roots *x509.CertPool) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), sinkProcessEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close() // the sink exits when its stdin closes
		_ = cmd.Wait()
	})
	lines := bufio.NewReader(stdout)
	var got [3]string
	for i := range got {
		l, err := lines.ReadString('\n')
		if err != nil {
			tb.Fatalf("sink process: %v", err)
		}
		got[i] = strings.TrimSpace(l)
	}
	der, err := base64.StdEncoding.DecodeString(got[2])
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return "http://" + got[0] + "/hook", "https://" + got[1] + "/hook", roots
}

// serveSinkProcess answers HTTP/1.1 keep-alive POSTs with 204, allocating
// nothing per request, over TCP and over TLS 1.3 with a certificate of
// its own; it prints both addresses and the certificate (base64 DER),
// and serves until stdin closes.
func serveSinkProcess() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	cert, err := sinkCertificate()
	if err != nil {
		fail(err)
	}
	tln = tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}})
	fmt.Println(ln.Addr().String())
	fmt.Println(tln.Addr().String())
	fmt.Println(base64.StdEncoding.EncodeToString(cert.Certificate[0]))
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	accept := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			go serveSinkConn(c)
		}
	}
	go accept(tln)
	accept(ln)
}

// sinkCertificate is a self-signed certificate for 127.0.0.1.
func sinkCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sink"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

var sinkNoContent = []byte("HTTP/1.1 204 No Content\r\n\r\n")

func serveSinkConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	contentLength := []byte("content-length:")
	for {
		n := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			line = bytes.TrimRight(line, "\r\n")
			if len(line) == 0 {
				break
			}
			if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
				n, _ = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
			}
		}
		if _, err := br.Discard(n); err != nil {
			return
		}
		if _, err := c.Write(sinkNoContent); err != nil {
			return
		}
	}
}
