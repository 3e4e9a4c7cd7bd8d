package partition

// readyQueue holds the records free to go, lowest offset first: a binary
// min-heap keyed by offset.
//
// The oldest goes first, not the one that became ready first. In the
// order of readiness a key's next record joins the back of the queue each
// time its previous one is acked, so every key advances one record per
// turn of the whole queue: a key with many records falls behind the
// others, pins the watermark (the window and the acked ranges above it
// grow) and, at the end of a backlog, is left alone delivering its tail
// one record at a time. Oldest first, a key that fell behind goes again
// as soon as it is free, and the watermark's record is always the next
// to go once its key is.
type readyQueue[P any] struct {
	// items keeps each entry's offset beside it so that sifting compares
	// without following the pointer.
	items []readyItem[P]
}

type readyItem[P any] struct {
	off int64
	e   *Entry[P]
}

func (q *readyQueue[P]) len() int { return len(q.items) }

// peek returns the ready record of the lowest offset, nil when none is.
func (q *readyQueue[P]) peek() *Entry[P] {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0].e
}

func (q *readyQueue[P]) push(e *Entry[P]) {
	q.items = append(q.items, readyItem[P]{off: e.Offset, e: e})
	q.up(len(q.items) - 1)
}

// pop takes the record peek returns.
func (q *readyQueue[P]) pop() *Entry[P] {
	n := len(q.items) - 1
	if n < 0 {
		return nil
	}
	e := q.items[0].e
	q.items[0] = q.items[n]
	q.items[n] = readyItem[P]{}
	q.items = q.items[:n]
	if n > 0 {
		q.down(0)
	}
	return e
}

// filter keeps the records keep accepts and drops the others.
func (q *readyQueue[P]) filter(keep func(*Entry[P]) bool) {
	out := q.items[:0]
	for _, it := range q.items {
		if keep(it.e) {
			out = append(out, it)
		}
	}
	clear(q.items[len(out):])
	q.items = out
	for i := len(q.items)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q *readyQueue[P]) up(i int) {
	it := q.items[i]
	for i > 0 {
		p := (i - 1) / 2
		if q.items[p].off <= it.off {
			break
		}
		q.items[i] = q.items[p]
		i = p
	}
	q.items[i] = it
}

func (q *readyQueue[P]) down(i int) {
	n := len(q.items)
	it := q.items[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && q.items[r].off < q.items[c].off {
			c = r
		}
		if it.off <= q.items[c].off {
			break
		}
		q.items[i] = q.items[c]
		i = c
	}
	q.items[i] = it
}
