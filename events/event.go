package events

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"
)

// The event types. Each has a data object of its own, documented with its
// type below and in docs/operations.md.
const (
	// TypeSubscriptionAutoPaused: a node paused a subscription whose
	// endpoint failed for its disable_after ([AutoPaused]).
	TypeSubscriptionAutoPaused = "subscription.auto_paused"
	// TypeBreakerOpened: an endpoint origin's circuit breaker opened; no
	// request goes to it but one probe per interval ([BreakerOpened]).
	TypeBreakerOpened = "endpoint.breaker_opened"
	// TypeBreakerClosed: the breaker closed again after a successful
	// probe ([BreakerClosed]).
	TypeBreakerClosed = "endpoint.breaker_closed"
	// TypeDeadLettersThreshold: a subscription's dead letters, over every
	// node, reached the threshold within one window ([DeadLetters]).
	TypeDeadLettersThreshold = "deadletters.threshold_exceeded"
	// TypeCursorDetached: a subscription's cursor fell behind the shared
	// reader of its topics and catches up on a reader of its own
	// ([CursorDetached]): the dispatcher's Config.CursorDetached, at most
	// once per partition every ten minutes.
	TypeCursorDetached = "cursor.detached"
)

// SpecVersion is the CloudEvents version the envelope follows.
const SpecVersion = "1.0"

// Event is one operational event, as both sinks carry it: the JSON of
// this struct is the body of the webhook and the value of the Kafka
// record. Its attributes are CloudEvents' (structured mode) plus node and
// subscription.
type Event struct {
	// SpecVersion is "1.0".
	SpecVersion string `json:"specversion"`
	// ID is unique per event ("evt_" and 24 hex digits); it is the
	// webhook-id of the signed request, the same on every retry.
	ID string `json:"id"`
	// Type is one of the Type constants.
	Type string `json:"type"`
	// Source is "keyhook://<node>", the node that saw it happen.
	Source string `json:"source"`
	// Node is the node's id.
	Node string `json:"node"`
	// Subscription is the subscription concerned, absent for an event of
	// an endpoint origin (a breaker's).
	Subscription string `json:"subscription,omitempty"`
	// Time is when it happened.
	Time time.Time `json:"time"`
	// DataContentType is "application/json".
	DataContentType string `json:"datacontenttype"`
	// Data is the type's data object.
	Data json.RawMessage `json:"data"`
}

// AutoPaused is the data of TypeSubscriptionAutoPaused.
type AutoPaused struct {
	// FailingSince is the first failed attempt after the endpoint's last
	// success, over every node.
	FailingSince time.Time `json:"failing_since"`
	// DisableAfter is the subscription's disable_after, as written.
	DisableAfter string `json:"disable_after"`
	// Reason is the paused_reason the subscription shows.
	Reason string `json:"reason"`
	// Endpoint is the origin (scheme://host:port) of the endpoint.
	Endpoint string `json:"endpoint"`
}

// BreakerOpened is the data of TypeBreakerOpened.
type BreakerOpened struct {
	// Origin is the endpoint origin (scheme://host:port).
	Origin string `json:"origin"`
	// Reason says why in words ("5 consecutive failures").
	Reason string `json:"reason"`
	// Failures counts the failures that opened it.
	Failures int `json:"failures"`
	// LastStatus is the last failure's HTTP status, 0 for none;
	// LastError its error text when no response came.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// ProbeIntervalMS is how often a probe goes while it is open.
	ProbeIntervalMS int64 `json:"probe_interval_ms,omitempty"`
}

// BreakerClosed is the data of TypeBreakerClosed.
type BreakerClosed struct {
	// Origin is the endpoint origin (scheme://host:port).
	Origin string `json:"origin"`
	// OpenMS is how long it was open, in milliseconds.
	OpenMS int64 `json:"open_ms"`
}

// DeadLetters is the data of TypeDeadLettersThreshold.
type DeadLetters struct {
	// Count is the dead letters of the window so far (at least
	// Threshold), over every node.
	Count int64 `json:"count"`
	// Threshold is the node's --events-dead-letter-threshold.
	Threshold int64 `json:"threshold"`
	// WindowStart is when the window began; WindowMS its length.
	WindowStart time.Time `json:"window_start"`
	WindowMS    int64     `json:"window_ms"`
}

// CursorDetached is the data of TypeCursorDetached.
type CursorDetached struct {
	// Topic and Partition are where the cursor left the shared reader.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Behind is how many records it was behind the reader.
	Behind int64 `json:"behind"`
	// Reason says why in words.
	Reason string `json:"reason"`
}

// New builds an event of type typ about subscription ("" for none) with
// data; Emit fills its id, source, node and time.
func New(typ, subscription string, data any) Event {
	raw, err := json.Marshal(data)
	if err != nil {
		// The data types above always encode; a caller's own type that
		// does not is still sent, with its error.
		raw, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return Event{Type: typ, Subscription: subscription, Data: raw}
}

// SubscriptionAutoPaused is the event of a subscription a node paused.
func SubscriptionAutoPaused(subscription string, d AutoPaused) Event {
	return New(TypeSubscriptionAutoPaused, subscription, d)
}

// EndpointBreakerOpened is the event of an origin's breaker opening.
func EndpointBreakerOpened(d BreakerOpened) Event { return New(TypeBreakerOpened, "", d) }

// EndpointBreakerClosed is the event of an origin's breaker closing.
func EndpointBreakerClosed(d BreakerClosed) Event { return New(TypeBreakerClosed, "", d) }

// DeadLettersThresholdExceeded is the event of a subscription's dead
// letters reaching the threshold within a window.
func DeadLettersThresholdExceeded(subscription string, d DeadLetters) Event {
	return New(TypeDeadLettersThreshold, subscription, d)
}

// SubscriptionCursorDetached is the event of a cursor leaving its shared
// reader.
func SubscriptionCursorDetached(subscription string, d CursorDetached) Event {
	return New(TypeCursorDetached, subscription, d)
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}
