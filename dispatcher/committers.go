package dispatcher

import (
	"context"
	"hash/fnv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// commitOffset is one partition's offset for commitOffsets.
type commitOffset struct {
	tp topicPartition
	at int64
	// topicID is the topic's Kafka ID as the assignment read it, zero
	// when it could not.
	topicID kadm.TopicID
}

// commitOffsets commits os for group in one OffsetCommit and returns each
// partition's outcome; err is set when the request got no answer.
//
// Not kadm's CommitOffsets: that asks the brokers for the topics' IDs
// before every commit, a Metadata request per commit, which with a
// thousand cursors committing each second was half of a node's requests
// to the brokers and a twentieth of its CPU. The topics are named here by
// name and by the IDs their cursors' assignment read: a broker taking
// OffsetCommit v10 or later names them by ID, so a commit meant for a
// topic since deleted and created again under its name is refused
// (UNKNOWN_TOPIC_ID) instead of landing on the new one (Kafka 4.1 answers
// v9 and takes the name, as kadm's commit did). When an ID is unknown (the
// assignment could not read it), kadm looks them all up.
func commitOffsets(ctx context.Context, cl *kgo.Client, group string, os []commitOffset) (map[topicPartition]error, error) {
	for _, o := range os {
		if o.topicID == (kadm.TopicID{}) {
			return commitOffsetsByName(ctx, cl, group, os)
		}
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = group
	byTopic := make(map[string]int)
	for _, o := range os {
		i, ok := byTopic[o.tp.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[o.tp.topic] = i
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic, t.TopicID = o.tp.topic, o.topicID
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch = o.tp.partition, o.at, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	byID := make(map[[16]byte]string, len(req.Topics))
	for _, t := range req.Topics {
		byID[t.TopicID] = t.Topic
	}
	out := make(map[topicPartition]error, len(os))
	for _, t := range resp.Topics {
		topic := t.Topic
		if topic == "" { // v10 and later answer by ID
			topic = byID[t.TopicID]
		}
		for _, p := range t.Partitions {
			out[topicPartition{topic, p.Partition}] = kerr.ErrorForCode(p.ErrorCode)
		}
	}
	return out, nil
}

// commitOffsetsByName is commitOffsets through kadm, which looks the
// topics' IDs up first.
func commitOffsetsByName(ctx context.Context, cl *kgo.Client, group string, os []commitOffset) (map[topicPartition]error, error) {
	offsets := make(kadm.Offsets)
	for _, o := range os {
		offsets.Add(kadm.Offset{Topic: o.tp.topic, Partition: o.tp.partition, At: o.at, LeaderEpoch: -1})
	}
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, offsets)
	if err != nil {
		return nil, err
	}
	out := make(map[topicPartition]error, len(os))
	resp.Each(func(r kadm.OffsetResponse) {
		out[topicPartition{r.Topic, r.Partition}] = r.Err
	})
	return out, nil
}
