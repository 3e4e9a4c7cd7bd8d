package subscription

import (
	"time"
)

// Ordering says which records of a partition may be delivered concurrently.
type Ordering string

const (
	// OrderKey delivers records of one key one at a time, in offset order;
	// different keys go concurrently. A keyless record is its own lane.
	OrderKey Ordering = "key"
	// OrderPartition delivers a partition strictly in offset order.
	OrderPartition Ordering = "partition"
	// OrderNone delivers every record concurrently.
	OrderNone Ordering = "none"
)

// Sharing says whether a partition may be shared by several nodes, each
// delivering a range of its key hashes.
type Sharing string

const (
	// SharingAuto shares partitions when the subscription's consumers
	// outnumber them.
	SharingAuto Sharing = "auto"
	// SharingOff gives every partition to one node.
	SharingOff Sharing = "off"
)

// Start says where a new subscription begins reading a topic that its
// consumer group has no commit for.
type Start string

const (
	// StartEarliest begins at the oldest retained record.
	StartEarliest Start = "earliest"
	// StartLatest begins at the end of the log: only new records.
	StartLatest Start = "latest"
)

// Defaults applied by Normalize to fields left empty.
const (
	DefaultMaxInFlight = 256
	// DeadLetterNone as dead_letter_topic blocks the key instead of
	// dead-lettering a record that cannot be delivered.
	DeadLetterNone = "none"
)

// Subscription binds topics to an endpoint with a delivery policy. Each
// subscription is its own Kafka consumer group.
type Subscription struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Topics   []string `json:"topics"`
	Endpoint Endpoint `json:"endpoint"`
	Ordering Ordering `json:"ordering"`
	// Sharing is SharingAuto unless set; ordering "partition" is never
	// shared.
	Sharing Sharing `json:"sharing,omitempty"`
	// Conflate, with ordering "key", delivers only the newest waiting
	// record of a key when the key frees up; the older ones waiting are
	// acked without delivery and counted (keyhook_records_superseded).
	Conflate    bool  `json:"conflate,omitempty"`
	MaxInFlight int   `json:"max_in_flight"`
	Start       Start `json:"start"`
	// DeadLetterTopic receives records whose delivery ended without
	// success. Empty means "<topic>.keyhook.dlq"; DeadLetterNone disables
	// dead-lettering (the key blocks until an operator acts).
	DeadLetterTopic string `json:"dead_letter_topic,omitempty"`
	// Format shapes each request: "raw" (default: the record value as
	// is), "cloudevents-binary", "cloudevents-structured" or "envelope".
	Format string `json:"format,omitempty"`
	// ContentType overrides the record's content-type header for raw
	// bodies and the CloudEvents datacontenttype.
	ContentType string `json:"content_type,omitempty"`
	// CloudEventsType is the CloudEvents "type" (default
	// "dev.keyhook.record").
	CloudEventsType string `json:"cloudevents_type,omitempty"`
	// Retry is the subscription's retry policy; zero fields take the
	// node's defaults.
	Retry RetryPolicy `json:"retry,omitzero"`
	// Signing holds the secrets deliveries are signed with (Standard
	// Webhooks); a subscription signs by default.
	Signing Signing `json:"signing,omitzero"`
	// Batch groups records into one request (off by default).
	Batch Batch `json:"batch,omitzero"`
	// RateLimit bounds the subscription's requests per second over every
	// node together (off by default).
	RateLimit RateLimit `json:"rate_limit,omitzero"`
	// ValueFormat and KeyFormat decode record values and keys: "bytes"
	// (the default: as they are) or "json" (see recordexpr).
	ValueFormat string `json:"value_format,omitempty"`
	KeyFormat   string `json:"key_format,omitempty"`
	// Filter is a CEL expression of type bool; a record for which it is
	// false is acked without delivery and counted.
	Filter string `json:"filter,omitempty"`
	// Transform is a CEL expression whose result, a map (JSON) or a
	// string (text), becomes the body.
	Transform string `json:"transform,omitempty"`
	// OnFilterError is what happens to a record whose filter fails to
	// evaluate: OnFilterErrorDeliver (the default) or
	// OnFilterErrorDeadLetter.
	OnFilterError string    `json:"on_filter_error,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// Paused stops deliveries on every node (the consumer group is left
	// after a graceful drain) until the subscription is resumed.
	Paused bool `json:"paused"`
	// PausedBy says who paused it: PausedByAuto when a node did, because
	// its endpoint failed for DisableAfter; empty for an operator's pause.
	// PausedReason says why in words. Both are set by the server only,
	// kept while the subscription stays paused, and cleared by a resume.
	PausedBy     string `json:"paused_by,omitempty"`
	PausedReason string `json:"paused_reason,omitempty"`
	// DisableAfter, a Go duration such as "24h", pauses the subscription
	// once its endpoint has failed for that long without a success in
	// between, on any node (see DisableAfterDuration). Empty or "0" is
	// off, the default.
	DisableAfter string `json:"disable_after,omitempty"`
	// Version increases with every change; nodes restart the
	// subscription's consumer when it changes.
	Version int64 `json:"version"`
}

// PausedByAuto is PausedBy of a subscription a node paused because its
// endpoint kept failing for DisableAfter.
const PausedByAuto = "auto"

// MinDisableAfter is the shortest DisableAfter: a shorter one would pause
// a subscription for an endpoint's restart.
const MinDisableAfter = time.Minute

// DisableAfterDuration is DisableAfter as a duration, 0 when off or not
// valid (Validate reports it).
func (s *Subscription) DisableAfterDuration() time.Duration {
	if s.DisableAfter == "" {
		return 0
	}
	d, err := time.ParseDuration(s.DisableAfter)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// Shares reports whether the subscription's partitions may be shared by
// key range.
func (s *Subscription) Shares() bool {
	return s.Sharing != SharingOff && s.Ordering != OrderPartition
}

// Endpoint is where deliveries go.
type Endpoint struct {
	URL string `json:"url"`
	// TimeoutMS bounds one attempt; 0 means the node's default (30 s).
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// Auth authenticates deliveries (static headers, bearer token, basic).
	Auth *EndpointAuth `json:"auth,omitempty"`
	// FollowRedirects is how many 307/308 redirects a delivery follows,
	// each target checked like the endpoint itself; 0 follows none.
	FollowRedirects int `json:"follow_redirects,omitempty"`
	// KeepCredentials, in a request that moves the endpoint to another
	// origin (scheme, host or port), carries Auth over to the new origin.
	// Without it such a request must send Auth again or drop it. It
	// applies to that one request and is never stored.
	KeepCredentials bool `json:"keep_credentials,omitempty"`
}

// GroupID is the Kafka consumer group of the subscription.
func (s *Subscription) GroupID() string { return "keyhook-" + s.ID }

// DeadLetterTopicFor names the dead-letter topic for records read from
// topic, or "" when dead-lettering is off.
func (s *Subscription) DeadLetterTopicFor(topic string) string {
	switch s.DeadLetterTopic {
	case "":
		return topic + ".keyhook.dlq"
	case DeadLetterNone:
		return ""
	default:
		return s.DeadLetterTopic
	}
}

// Status is the delivery state of a subscription, per partition.
type Status struct {
	SubscriptionID string `json:"subscription_id"`
	// Paused, PausedBy and PausedReason are the subscription's: whether
	// its deliveries are stopped, by whom ("auto") and why.
	Paused       bool              `json:"paused"`
	PausedBy     string            `json:"paused_by,omitempty"`
	PausedReason string            `json:"paused_reason,omitempty"`
	Partitions   []PartitionStatus `json:"partitions"`
	// Breakers are the nodes whose circuit breaker of the endpoint's
	// origin is not closed, as they last published it.
	Breakers []EndpointBreaker `json:"breakers,omitempty"`
}

// EndpointBreaker is one node's circuit breaker of a subscription's
// endpoint origin, open or half-open.
type EndpointBreaker struct {
	Node   string `json:"node"`
	Origin string `json:"origin"`
	// State is "open" or "half-open".
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
	Waiting int       `json:"waiting"`
}

// PartitionStatus joins what Kafka knows (commit, log end) with what the
// tracking state in Redis knows (watermark, pending, acked ranges, owner).
type PartitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset in Kafka, -1 if none.
	Committed int64 `json:"committed"`
	// LogEnd is the partition's high watermark.
	LogEnd int64 `json:"log_end"`
	// Lag is LogEnd minus Committed (LogEnd when nothing is committed).
	Lag int64 `json:"lag"`
	// Watermark is the lowest offset not acked, as last flushed.
	Watermark int64 `json:"watermark"`
	// Pending counts fetched offsets at or above the watermark not acked.
	Pending int64 `json:"pending"`
	// InFlight counts records being delivered to the endpoint.
	InFlight int64 `json:"in_flight"`
	// InFlightKeys counts the distinct keys with a record in flight: with
	// ordering "key", how many lanes are busy.
	InFlightKeys int64 `json:"in_flight_keys"`
	// AckedRanges are the acked offsets above the watermark, inclusive
	// [first, last] pairs.
	AckedRanges [][2]int64 `json:"acked_ranges"`
	Owner       string     `json:"owner"`
	// OldestPending is when the oldest pending record was dispatched.
	OldestPending *time.Time `json:"oldest_pending,omitempty"`
	// OldestPendingAgeMS is how long ago, in milliseconds, OldestPending
	// was, as of the answer; absent with OldestPending.
	OldestPendingAgeMS *int64 `json:"oldest_pending_age_ms,omitempty"`
	// Updated is when the owner last flushed its state.
	Updated *time.Time `json:"updated,omitempty"`
	// Ranges are the partition's key hash ranges as the tracking state
	// cuts them, in hash order; absent while nothing is tracked.
	Ranges []RangeStatus `json:"ranges,omitempty"`
	// Holding is the record the watermark waits for — why the commit
	// does not move — absent when nothing is pending.
	Holding *HoldingStatus `json:"holding,omitempty"`
}

// HoldingStatus is the record a partition's watermark waits for, as its
// owner last flushed it.
type HoldingStatus struct {
	Offset int64 `json:"offset"`
	// Key is the record key as text (cut to 128 bytes), absent for none.
	Key string `json:"key,omitempty"`
	// Since is when the owner read the record; AgeMS how long ago that
	// was, as of the answer.
	Since time.Time `json:"since"`
	AgeMS int64     `json:"age_ms"`
	// Dispatched is when its current attempt began, absent while it waits
	// (for its key's earlier record, a delivery slot or its retry).
	Dispatched *time.Time `json:"dispatched,omitempty"`
	// Attempts counts its attempts so far; LastStatus and LastError are
	// the last one's answer.
	Attempts   int    `json:"attempts"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// NextAttempt is when it is tried again, absent when not waiting.
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// Behind counts the records pending behind it.
	Behind int64 `json:"behind"`
	// Parked counts the partition's pending records held by offset only
	// (their key is busy; they are read again from Kafka when it frees
	// up); OldestParked is when the oldest was read, OldestParkedAgeMS how
	// long ago, as of the answer. Absent when none is parked.
	Parked            int64      `json:"parked,omitempty"`
	OldestParked      *time.Time `json:"oldest_parked,omitempty"`
	OldestParkedAgeMS *int64     `json:"oldest_parked_age_ms,omitempty"`
}

// RangeStatus is one range [Lo, Hi) of a partition's key hash space
// (0–65536) and the node claiming it, "" when released or never claimed.
type RangeStatus struct {
	Lo    uint32 `json:"lo"`
	Hi    uint32 `json:"hi"`
	Owner string `json:"owner"`
	// Watermark is the lowest offset not acknowledged among the range's
	// records, as last flushed; -1 if unknown.
	Watermark int64 `json:"watermark"`
}
