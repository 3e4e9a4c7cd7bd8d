package dispatcher

import (
	"slices"
	"time"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

const (
	// keysEvery is how often a worker builds its list of keys not
	// flowing: the list reads every lane, so it is not built per flush.
	keysEvery = time.Second
	// slowAfter is how long a key's head is out, or its next record waits
	// behind it, before the key counts as not flowing.
	slowAfter = time.Second
)

// keyList is what a worker wrote of its keys not flowing (see
// partition.Machine.Stalled): a flush carries a list only when it was
// built anew and differs from the one written for the claim. The
// worker's loop owns it; one flush at a time is in flight.
type keyList struct {
	built   time.Time
	epoch   int64 // the claim written is of this epoch
	written *tracking.StalledKeys
	// sent is the list of the flush in flight, nil none.
	sent      *tracking.StalledKeys
	sentEpoch int64
}

// next returns the list a flush of the claim of epoch carries, nil to
// keep the stored one.
func (k *keyList) next(w *worker, epoch int64, now time.Time) *tracking.StalledKeys {
	if k.epoch != epoch {
		// A new claim stores no list yet: as good as an empty one.
		k.epoch, k.written, k.built = epoch, &tracking.StalledKeys{}, time.Time{}
	}
	if now.Sub(k.built) < keysEvery {
		return nil
	}
	k.built = now
	list := w.stalledKeys(now)
	if list.Total == k.written.Total && slices.Equal(list.Keys, k.written.Keys) {
		return nil
	}
	k.sent, k.sentEpoch = &list, epoch
	return k.sent
}

// flushed takes the outcome of the flush that carried the list sent; a
// failed one is sent again at the next build.
func (k *keyList) flushed(ok bool) {
	if ok && k.sent != nil && k.sentEpoch == k.epoch {
		k.written = k.sent
	}
	k.sent = nil
}

// stalledKeys lists the partition's keys not flowing, with the attempts
// the pool noted of their heads.
func (w *worker) stalledKeys(now time.Time) tracking.StalledKeys {
	w.mail.mu.Lock()
	defer w.mail.mu.Unlock()
	lanes, total := w.m.Stalled(subscription.KeysPerPartition, now.Add(-slowAfter), func(e *record) bool {
		_, ok := w.mail.progress[e.Payload]
		return ok
	})
	out := tracking.StalledKeys{Keys: make([]tracking.StalledKey, 0, len(lanes)), Total: total}
	for _, l := range lanes {
		k := tracking.StalledKey{Offset: l.Offset, Since: l.Read, Parked: l.Parked, State: string(subscription.KeyParked)}
		k.Key, k.KeyBase64, k.KeyTruncated = subscription.KeyExcerpt([]byte(l.Key))
		k.Behind = int64(l.Queued) + l.Parked - 1
		if h := l.Head; h != nil && h.Out() {
			k.State, k.Dispatched = string(subscription.KeyInFlight), h.Dispatched
			if p, ok := w.mail.progress[h.Payload]; ok {
				k.State = string(subscription.KeyRetrying)
				k.Attempts, k.LastStatus, k.LastError = p.attempts, p.status, p.err
				if p.next.After(now) {
					k.NextAttempt = p.next
				}
			}
		}
		out.Keys = append(out.Keys, k)
	}
	return out
}
