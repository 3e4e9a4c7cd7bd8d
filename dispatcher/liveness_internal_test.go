package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The membership is confirmed for the window from when the last request
// the coordinator answered was written, not from when its answer came:
// the coordinator may have heard it as early as that. Answers to other
// requests, and round trips that failed, confirm nothing.
func TestMembershipIsConfirmedFromTheWriteOfTheLastAnswer(t *testing.T) {
	const window = 4 * time.Second
	t0 := time.Unix(1000, 0)
	now := t0
	l := newLiveness(window, func() time.Time { return now })
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	answer := func(key kmsg.Key, rtt time.Duration, err error) {
		l.OnBrokerE2E(kgo.BrokerMetadata{}, int16(key), kgo.BrokerE2E{TimeToWrite: rtt / 4, ReadWait: rtt / 2, TimeToRead: rtt / 4, ReadErr: err})
	}
	if l.confirmedAt(at(0)) {
		t.Fatal("confirmed before any answer")
	}

	now = at(time.Second)
	answer(kmsg.JoinGroup, 400*time.Millisecond, nil) // written at 0.6 s
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{
		{time.Second, true},
		{4500 * time.Millisecond, true},
		{4600 * time.Millisecond, false}, // 0.6 s + 4 s
		{5 * time.Second, false},
	} {
		if got := l.confirmedAt(at(tc.at)); got != tc.want {
			t.Errorf("after a join written at 0.6 s: confirmed at %v = %v, want %v", tc.at, got, tc.want)
		}
	}

	// A heartbeat that hangs and fails, and answers of other requests,
	// renew nothing.
	now = at(3 * time.Second)
	answer(kmsg.Heartbeat, 2*time.Second, errors.New("i/o timeout"))
	answer(kmsg.Fetch, 10*time.Millisecond, nil)
	answer(kmsg.OffsetCommit, 10*time.Millisecond, nil)
	answer(kmsg.Metadata, 10*time.Millisecond, nil)
	if l.confirmedAt(at(4600 * time.Millisecond)) {
		t.Error("a failed heartbeat or another request's answer renewed the membership")
	}

	now = at(4 * time.Second)
	answer(kmsg.Heartbeat, time.Second, nil) // written at 3 s
	if !l.confirmedAt(at(6900*time.Millisecond)) || l.confirmedAt(at(7*time.Second)) {
		t.Error("an answered heartbeat written at 3 s does not confirm the membership until 7 s exactly")
	}
	// An answer that arrives late, of a request written before, never
	// takes the confirmation back.
	now = at(5 * time.Second)
	answer(kmsg.SyncGroup, 4*time.Second, nil) // written at 1 s
	if !l.confirmedAt(at(6900 * time.Millisecond)) {
		t.Error("a late answer of an older request shortened the confirmation")
	}
}
