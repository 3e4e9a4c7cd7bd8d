package backoff_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/backoff"
)

// recordingClock fires every timer at once and remembers what was asked.
type recordingClock struct {
	waits []time.Duration
}

func (c *recordingClock) Now() time.Time { return time.Unix(0, 0) }

func (c *recordingClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	ch <- time.Unix(0, 0)
	return ch, func() bool { return false }
}

func TestWaitsGrowWithinJitterAndStopAtMax(t *testing.T) {
	clock := &recordingClock{}
	b := backoff.MustNew(backoff.Config{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5, Clock: clock})
	for range 8 {
		if err := b.Wait(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	base := 100 * time.Millisecond
	for i, got := range clock.waits {
		lo, hi := time.Duration(float64(base)*0.5), time.Duration(float64(base)*1.5)
		hi = min(hi, time.Second)
		if got < lo || got > hi {
			t.Errorf("wait %d = %s, want within [%s, %s]", i, got, lo, hi)
		}
		base = min(2*base, time.Second)
	}
}

func TestWaitHonoursFloorButNotBeyondMax(t *testing.T) {
	clock := &recordingClock{}
	b := backoff.MustNew(backoff.Config{Initial: 10 * time.Millisecond, Max: 2 * time.Second, Clock: clock})
	_ = b.Wait(context.Background(), time.Second)
	_ = b.Wait(context.Background(), time.Hour)
	if clock.waits[0] != time.Second || clock.waits[1] != 2*time.Second {
		t.Fatalf("waits = %v, want [1s 2s]", clock.waits)
	}
}

func TestResetStartsOver(t *testing.T) {
	clock := &recordingClock{}
	b := backoff.MustNew(backoff.Config{Initial: time.Second, Max: time.Minute, Jitter: 0.01, Clock: clock})
	for range 5 {
		b.Next()
	}
	b.Reset()
	if d := b.Next(); d > 1100*time.Millisecond {
		t.Fatalf("first wait after Reset = %s, want about 1s", d)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	cause := errors.New("stopping")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- backoff.Sleep(ctx, nil, time.Hour) }()
	cancel(cause)
	if err := <-done; !errors.Is(err, cause) {
		t.Fatalf("Sleep = %v, want the context's cause", err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  backoff.Config
		want string
	}{
		{backoff.Config{Initial: -1}, "initial"},
		{backoff.Config{Max: -1}, "max"},
		{backoff.Config{Multiplier: 0.5}, "multiplier"},
		{backoff.Config{Jitter: 2}, "jitter"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if err := (backoff.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}
