package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// record is one produced record as the producer registered it.
type record struct {
	produced  int64 // unix nanos, as carried in the value
	partition int32 // set when the produce was acknowledged
	key       int
}

// sink is the endpoint of every subscription: /s/<index> is subscription
// index's. It answers 204 at once (503 for the subscription marked down),
// and keeps, per subscription, when it first got each record and whether
// a key's records came in order. Its state is guarded by mu.
type sink struct {
	srv  *http.Server
	url  string
	keys int
	down atomic.Int64 // index+1 of the subscription answering 503; 0 none

	mu      sync.Mutex
	records []record  // by sequence number
	got     [][]int64 // [sub][seq]: unix nanos of the first 2xx delivery, 0 none
	keyMax  [][]int   // [sub][key]: highest seq first-delivered, -1 none
	dups    []int     // [sub]: deliveries of a record already delivered
	reorder []int     // [sub]: first deliveries below a key's highest seq
	refused atomic.Int64
	bad     atomic.Int64 // requests the sink could not read
	// acceptErrs counts connections the sink failed to accept (this
	// process out of file descriptors: its clients' and the nodes'
	// connections share them); the clients' requests on them wait for
	// their timeout, so a phase with any measured this process, not the
	// client.
	acceptErrs atomic.Int64
	// header is the first readable request's header: what keyhook sends,
	// for the ceiling's client to send the same (ceiling.go).
	header atomic.Pointer[http.Header]
}

func newSink(subs, keys int) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{url: "http://" + ln.Addr().String(), keys: keys, got: make([][]int64, subs), keyMax: make([][]int, subs),
		dups: make([]int, subs), reorder: make([]int, subs)}
	for i := range subs {
		s.keyMax[i] = make([]int, keys)
		for k := range keys {
			s.keyMax[i][k] = -1
		}
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(countingListener{ln, &s.acceptErrs}) }()
	return s, nil
}

func (s *sink) close() { _ = s.srv.Close() }

// countingListener counts the errors of Accept, which net/http's server
// only logs before it tries again.
type countingListener struct {
	net.Listener
	errs *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		l.errs.Add(1)
	}
	return c, err
}

// register adds the next record and returns its sequence number and its
// key, the keys taken in turn; the producer calls it before producing the
// record.
func (s *sink) register(produced int64) (seq, key int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq = len(s.records)
	key = seq % s.keys
	s.records = append(s.records, record{produced: produced, partition: -1, key: key})
	return seq, key
}

func (s *sink) setPartition(seq int, p int32) {
	s.mu.Lock()
	s.records[seq].partition = p
	s.mu.Unlock()
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now().UnixNano()
	body, _ := io.ReadAll(r.Body)
	sub, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/s/"))
	if err != nil || sub < 0 || sub >= len(s.got) {
		s.bad.Add(1)
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if s.down.Load() == int64(sub)+1 {
		s.refused.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// The value is "<seq> <produce time, unix nanos>".
	f := bytes.Fields(body)
	if len(f) != 2 {
		s.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	seq, err := strconv.Atoi(string(f[0]))
	if err != nil {
		s.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if s.header.Load() == nil {
		h := r.Header.Clone()
		s.header.CompareAndSwap(nil, &h)
	}
	s.mu.Lock()
	if seq < 0 || seq >= len(s.records) {
		s.mu.Unlock()
		s.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	g := s.got[sub]
	for len(g) <= seq {
		g = append(g, 0)
	}
	s.got[sub] = g
	if g[seq] != 0 {
		s.dups[sub]++
	} else {
		g[seq] = now
		k := s.records[seq].key
		if s.keyMax[sub][k] > seq {
			s.reorder[sub]++
		} else {
			s.keyMax[sub][k] = seq
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// at is when subscription sub first got record seq (0: not yet).
func (s *sink) at(sub, seq int) int64 {
	if g := s.got[sub]; seq < len(g) {
		return g[seq]
	}
	return 0
}

// missing counts the (subscription, record) pairs of the records [from,
// to) not delivered yet, over the subscriptions in subs.
func (s *sink) missing(subs []int, from, to int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sub := range subs {
		for seq := from; seq < to; seq++ {
			if s.at(sub, seq) == 0 {
				n++
			}
		}
	}
	return n
}

// waitAll waits until subs got every record of [from, to), or timeout.
func (s *sink) waitAll(subs []int, from, to int, timeout time.Duration) (left int) {
	end := time.Now().Add(timeout)
	for {
		left = s.missing(subs, from, to)
		if left == 0 || time.Now().After(end) {
			return left
		}
		time.Sleep(250 * time.Millisecond)
	}
}
