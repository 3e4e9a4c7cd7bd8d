package dispatcher

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// mailbox is what other goroutines hand a worker's loop: the poll's
// records, the pool's results and attempt notes, the tracker's answers to
// claims, flushes and releases. A sender never blocks: it appends under mu
// and signals wake; the loop takes a kind of mail as a whole. A zero
// mailbox takes mail but wakes nobody (tests of the pool use one).
type mailbox struct {
	// mu guards every field but wake.
	mu       sync.Mutex
	fetched  [][]*kgo.Record
	results  []result
	flushes  []flushResult
	claims   []claimResult
	releases []releaseResult
	// progress is the latest attempt of each record being delivered, for
	// the status of the record holding the watermark; notes counts the
	// changes, so a partition stuck on a retrying record still writes
	// its attempts.
	progress map[*kgo.Record]progress
	notes    uint64
	// refused is set when the node's renewer had the claim refused: the
	// loop flushes to learn why (renewer.go).
	refused bool
	// ctrl are functions to run on the loop (worker.do).
	ctrl []func()

	// wake has room for one signal: mail came since the loop last looked.
	wake chan struct{}
	// onWake starts the loop if it sleeps (dormant.kick); nil in a zero
	// mailbox.
	onWake func()
}

func newMailbox(onWake func()) mailbox { return mailbox{wake: make(chan struct{}, 1), onWake: onWake} }

// signal tells the loop mail came, and starts it if it sleeps: it is
// called after the mail is in, so a loop going to sleep sees either the
// mail or the signal (worker.run).
func (b *mailbox) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
	if b.onWake != nil {
		b.onWake()
	}
}

func (b *mailbox) postRefused() {
	b.mu.Lock()
	b.refused = true
	b.mu.Unlock()
	b.signal()
}

func (b *mailbox) postCtrl(f func()) {
	b.mu.Lock()
	b.ctrl = append(b.ctrl, f)
	b.mu.Unlock()
	b.signal()
}

// takeCtrl takes the functions to run and whether a renewal was refused.
func (b *mailbox) takeCtrl() (fs []func(), refused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fs, refused = b.ctrl, b.refused
	b.ctrl, b.refused = nil, false
	return fs, refused
}

func (b *mailbox) postFetched(rs []*kgo.Record) {
	b.mu.Lock()
	b.fetched = append(b.fetched, rs)
	b.mu.Unlock()
	b.signal()
}

// postResult hands over a delivery's result; its attempt notes go.
func (b *mailbox) postResult(r result) {
	b.mu.Lock()
	b.results = append(b.results, r)
	if b.progress != nil {
		delete(b.progress, r.rec)
	}
	b.mu.Unlock()
	b.signal()
}

func (b *mailbox) postFlush(r flushResult) {
	b.mu.Lock()
	b.flushes = append(b.flushes, r)
	b.mu.Unlock()
	b.signal()
}

func (b *mailbox) postClaim(r claimResult) {
	b.mu.Lock()
	b.claims = append(b.claims, r)
	b.mu.Unlock()
	b.signal()
}

func (b *mailbox) postRelease(r releaseResult) {
	b.mu.Lock()
	b.releases = append(b.releases, r)
	b.mu.Unlock()
	b.signal()
}

// noteProgress records a record's latest attempt. It wakes nobody: the
// next flush reads it.
func (b *mailbox) noteProgress(rec *kgo.Record, p progress) {
	b.mu.Lock()
	if b.progress == nil {
		b.progress = make(map[*kgo.Record]progress)
	}
	b.progress[rec] = p
	b.notes++
	b.mu.Unlock()
}

func (b *mailbox) takeFetched() [][]*kgo.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	rs := b.fetched
	b.fetched = nil
	return rs
}

func (b *mailbox) takeResults() []result {
	b.mu.Lock()
	defer b.mu.Unlock()
	rs := b.results
	b.results = nil
	return rs
}

// takeTracking takes the tracker's answers.
func (b *mailbox) takeTracking() (cs []claimResult, fs []flushResult, rs []releaseResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cs, fs, rs = b.claims, b.flushes, b.releases
	b.claims, b.flushes, b.releases = nil, nil, nil
	return cs, fs, rs
}

// noted returns the count of attempt notes so far.
func (b *mailbox) noted() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.notes
}
