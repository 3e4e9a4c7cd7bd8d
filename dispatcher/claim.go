package dispatcher

import (
	"errors"
	"time"

	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/tracking"
)

// claim takes the partition over in the tracker: a new epoch fences the
// previous owner, and its acked offsets are skipped here. The claim goes
// in the node's next round of claims (claimer) while the loop goes on
// dispatching; its result comes back to claimed. The worker's stop waits
// for the answer (bg), so no claim lands after its release.
func (w *worker) claim() {
	if w.claiming || w.retired.Load() {
		return
	}
	w.claiming = true
	if _, gen := w.g.client().GroupMetadata(); gen > w.gen {
		w.gen = gen
	}
	ranges := w.claimRanges()
	w.bg.Add(1)
	w.g.n.claims.submit(claimReq{w: w, ranges: ranges, sent: w.since(), c: tracking.PartitionClaim{
		Key: w.pk, Owner: w.g.n.cfg.NodeID, Generation: w.gen, TopicID: w.topicID, Ranges: ranges}})
}

// claimed applies the result of a claim.
func (w *worker) claimed(r claimResult) {
	w.claiming = false
	if w.m.Fenced() {
		return
	}
	if err := r.err; err != nil {
		w.g.countError("claim")
		refused := errors.Is(err, tracking.ErrFenced)
		// A failure to reach Redis the claimer said, once for its round;
		// a refusal is this partition's own.
		if w.m.Claimed() {
			// A claim again after a refused flush: refused in favour of a
			// newer generation, the partition is another owner's; else
			// the next flush retries.
			if refused {
				w.becomeFenced(err)
			}
			return
		}
		// A refusal means a fresh claim of a newer generation is stored:
		// its owner releases it, it goes stale, or Kafka gives this node a
		// newer generation (claim reads it). Until then the partition is
		// assigned but not claimed, which status and metrics show.
		wait := w.claimWait.Next()
		if refused {
			w.log.Warn("claim failed; retrying", "err", err, "in", wait)
		}
		w.claimAt = time.Now().Add(wait)
		return
	}
	if r.c.DiscardedTopicID != "" {
		w.log.Warn("tracking state of a deleted topic of the same name dropped", "topic_id", w.topicID, "old_topic_id", r.c.DiscardedTopicID)
		w.g.countStartReset(w.tp, resetStaleTracking)
	}
	w.epoch = r.c.Epoch
	w.pub.epoch.Store(w.epoch)
	w.lease.renew(r.sent, w.log)
	var floors []partition.Floor
	for _, f := range r.c.Floors {
		if f.Watermark > 0 {
			floors = append(floors, partition.Floor{Range: f.Range, Below: f.Watermark})
		}
	}
	first := !w.m.Claimed()
	w.m.ClaimRanges(r.c.Acked, r.ranges, floors)
	w.releaseClaimHeld()
	w.publishRanges()
	if first && !w.m.Ranges().Equal(w.assignedRanges()) {
		// A sync narrowed the assignment before the first claim: the
		// rest was never delivered here, so it is released at once.
		w.g.rangesReleased(w, w.m.Ranges())
	}
	if w.m.Shared() {
		w.log.Info("partition claimed", "epoch", r.c.Epoch, "ranges", w.m.Ranges().String(), "previous_owner", r.c.PrevOwner, "acked_ranges", r.c.Acked.Len())
	} else {
		w.log.Info("partition claimed", "epoch", r.c.Epoch, "previous_owner", r.c.PrevOwner, "acked_ranges", r.c.Acked.Len())
	}
	if first {
		// The check that came due with the claim found it not done yet.
		w.recheckRetention(time.Now())
	}
	w.processInbox()
}
