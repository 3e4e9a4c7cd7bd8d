package deadletter

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/subscription"
)

// Headers keyhook adds to a dead letter, after the source record's own.
const (
	HeaderSubscription = "keyhook-subscription"
	HeaderTopic        = "keyhook-source-topic"
	HeaderPartition    = "keyhook-source-partition"
	HeaderOffset       = "keyhook-source-offset"
	HeaderStatus       = "keyhook-last-status"
	HeaderError        = "keyhook-last-error"
	HeaderAttempts     = "keyhook-attempts"
	HeaderFirstAttempt = "keyhook-first-attempt"
	HeaderLastAttempt  = "keyhook-last-attempt"
	HeaderDeliveryID   = "keyhook-delivery-id"
	// HeaderPath lists, comma-separated and oldest first, the ids of the
	// subscriptions that dead-lettered this record, this one last.
	HeaderPath = "keyhook-dead-letter-path"
	// HeaderValueDropped, when present, says the value (of this many
	// bytes) was too large for the dead-letter topic and was left out.
	HeaderValueDropped = "keyhook-value-dropped"
)

// reservedPrefix marks the headers only keyhook may write on a dead
// letter.
const reservedPrefix = "keyhook-"

// Header returns the value of r's last header named key, "" when there is
// none. keyhook appends its block after the record's own headers, so the
// last one of a name is keyhook's even on a dead letter written before
// source records' keyhook-* headers were dropped.
func Header(r *kgo.Record, key string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}

// pathOf returns the subscriptions that dead-lettered r, oldest first; nil
// for a record that is not a dead letter.
func pathOf(r *kgo.Record) []string {
	p := Header(r, HeaderPath)
	if p == "" {
		return nil
	}
	return strings.Split(p, ",")
}

// original returns r's headers without keyhook's: the source record's own
// headers as the endpoint saw them.
func original(r *kgo.Record) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, reservedPrefix) {
			out = append(out, h)
		}
	}
	return out
}

// source is where a dead letter came from, as keyhook wrote it.
type source struct {
	subscription string
	topic        string
	partition    int32
	offset       int64
	deliveryID   string
}

// sourceOf reads keyhook's block of dead letter r.
func sourceOf(r *kgo.Record) source {
	s := source{
		subscription: Header(r, HeaderSubscription),
		topic:        Header(r, HeaderTopic),
		deliveryID:   Header(r, HeaderDeliveryID),
	}
	p, _ := strconv.ParseInt(Header(r, HeaderPartition), 10, 32)
	s.partition = int32(p)
	s.offset, _ = strconv.ParseInt(Header(r, HeaderOffset), 10, 64)
	return s
}

// belongs reports whether dead letter r is one of sub's: keyhook wrote it
// for sub, about a record of one of sub's topics, into the dead-letter
// topic sub uses for that topic. A record whose headers say otherwise (a
// dead letter of another subscription sharing the topic, or anything a
// producer wrote into the dead-letter topic) is not sub's to list or
// redrive.
func belongs(sub *subscription.Subscription, r *kgo.Record) bool {
	s := sourceOf(r)
	return s.subscription == sub.ID && s.deliveryID != "" &&
		slices.Contains(sub.Topics, s.topic) && sub.DeadLetterTopicFor(s.topic) == r.Topic
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
