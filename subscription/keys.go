package subscription

import (
	"encoding/base64"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of the listing of keys not flowing.
const (
	// DefaultKeysLimit is how many keys a listing that names no limit
	// answers.
	DefaultKeysLimit = 100
	// MaxKeysLimit is the most keys one listing answers.
	MaxKeysLimit = 1000
	// KeysPerPartition is the most keys not flowing an owner writes of one
	// partition (of its claim, when the partition is shared), lowest
	// offsets first; it counts the rest.
	KeysPerPartition = 100
	// MaxKeyBytes is how much of a key a listing of keys shows.
	MaxKeyBytes = 128
)

// KeyState says why a key's records do not flow.
type KeyState string

// The states of a key not flowing.
const (
	// KeyRetrying: its head failed and waits for its next attempt (or is
	// making it).
	KeyRetrying KeyState = "retrying"
	// KeyInFlight: its head is being delivered and has been for a while,
	// or the key's next record has waited a while behind it.
	KeyInFlight KeyState = "in_flight"
	// KeyParked: some of its records are parked by offset, their values
	// dropped, to be read again from Kafka when the key has room; none of
	// its records is retrying or slow in flight.
	KeyParked KeyState = "parked"
)

// Valid reports whether s is one of the states.
func (s KeyState) Valid() bool {
	return s == KeyRetrying || s == KeyInFlight || s == KeyParked
}

// KeysQuery narrows a listing of keys not flowing.
type KeysQuery struct {
	// States keeps the keys in one of them; empty keeps every state.
	States []KeyState
	// Topic, when not "", keeps that topic's partitions.
	Topic string
	// Partition, when not nil, keeps that partition (of every topic).
	Partition *int32
	// Limit is the most keys answered; 0 means DefaultKeysLimit.
	Limit int
}

// KeyList is a subscription's keys whose records do not flow, as their
// partitions' owners last wrote them, in topic, partition and offset
// order.
type KeyList struct {
	SubscriptionID string `json:"subscription_id"`
	// Keys is never nil.
	Keys []StalledKey `json:"keys"`
	// Truncated says there are more keys than Keys holds: the limit cut
	// the answer, or an owner counted more keys of a partition than the
	// KeysPerPartition it writes.
	Truncated bool `json:"truncated"`
}

// StalledKey is one key of a partition whose records do not flow.
type StalledKey struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Owner is the node delivering the key's records.
	Owner string `json:"owner"`
	// Key is the record key when it is printable text, else KeyBase64 is
	// its standard base64 (as dead letters show keys), of its first
	// MaxKeyBytes; KeyTruncated says the key is longer.
	Key          string `json:"key,omitempty"`
	KeyBase64    string `json:"key_base64,omitempty"`
	KeyTruncated bool   `json:"key_truncated,omitempty"`
	// Offset is the record holding the key's lane: its first pending one.
	Offset int64    `json:"offset"`
	State  KeyState `json:"state"`
	// Since is when the owner read the record at Offset; AgeMS how long
	// ago that was, as of the answer.
	Since time.Time `json:"since"`
	AgeMS int64     `json:"age_ms"`
	// Dispatched is when its current attempt began, absent while it is
	// not out (parked, or waiting for a delivery slot).
	Dispatched *time.Time `json:"dispatched,omitempty"`
	// Attempts counts its failed attempts so far; LastStatus and
	// LastError are the last one's answer.
	Attempts   int    `json:"attempts"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// NextAttempt is when it is tried again, absent when not waiting.
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// Behind counts the key's records pending behind Offset, parked
	// ones included; Parked counts those parked.
	Behind int64 `json:"behind"`
	Parked int64 `json:"parked"`
}

// KeyText shows a record key the way listings do: text when it is UTF-8
// without control characters, else its standard base64; both "" for no
// key.
func KeyText(k []byte) (text, b64 string) {
	if k == nil {
		return "", ""
	}
	if utf8.Valid(k) && !strings.ContainsFunc(string(k), func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return string(k), ""
	}
	return "", base64.StdEncoding.EncodeToString(k)
}

// KeyExcerpt is KeyText of k's first MaxKeyBytes (a text key cut before
// a partial character), and whether k is longer.
func KeyExcerpt(k []byte) (text, b64 string, truncated bool) {
	if len(k) > MaxKeyBytes {
		text := utf8.Valid(k)
		k, truncated = k[:MaxKeyBytes], true
		// A text key cut inside a character is still text.
		for i := 0; text && i < utf8.UTFMax && len(k) > 0 && !utf8.Valid(k); i++ {
			k = k[:len(k)-1]
		}
	}
	text, b64 = KeyText(k)
	return text, b64, truncated
}
