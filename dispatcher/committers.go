package dispatcher

import (
	"hash/fnv"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// commitConns is how many clients, hence connections to each group
// coordinator, the node's cursors commit through.
const commitConns = 8

// committers are the clients the node's cursors commit through
// (group.commitCursor): a few plain clients without a group, each its own
// connection to the coordinators, a subscription always on the same one.
//
// Not the reader's client: a broker answers one connection's requests one
// at a time, and its group coordinator holds each offset commit for its
// append linger (group.coordinator.append.linger.ms, 5 ms by default), so
// one connection carries about 200 commits a second. A thousand cursors
// committing each second on the reader's connection queued for seconds,
// and the reader group's heartbeats queued behind them: the membership
// went unconfirmed (liveness.go) and every delivery of the node stopped.
// On connections of their own the commits share the coordinator's linger,
// and the heartbeats are answered in time.
type committers struct {
	opts []kgo.Opt
	// mu guards cls, made on first use; closed says close ran.
	mu     sync.Mutex
	cls    [commitConns]*kgo.Client
	closed bool
}

func newCommitters(opts []kgo.Opt) *committers { return &committers{opts: opts} }

// client returns the client group's commits go through.
func (c *committers) client(group string) (*kgo.Client, error) {
	h := fnv.New32a()
	h.Write([]byte(group))
	i := h.Sum32() % commitConns
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, kgo.ErrClientClosed
	}
	if c.cls[i] == nil {
		cl, err := kgo.NewClient(c.opts...)
		if err != nil {
			return nil, err
		}
		c.cls[i] = cl
	}
	return c.cls[i], nil
}

// close closes the clients made; client fails after it.
func (c *committers) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for i, cl := range c.cls {
		if cl != nil {
			cl.Close()
			c.cls[i] = nil
		}
	}
}
