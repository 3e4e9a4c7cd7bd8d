package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// The sink reads keyhook's batch requests as keyhook's own encoder writes
// them: every record, in order.
func TestSinkReadsEveryRecordOfAKeyhookBatch(t *testing.T) {
	d := newDataset(dataSpec{Records: 12, Keys: 3, ValueBytes: 256, Seed: 1})
	var ms []*webhooks.Message
	for id := range 12 {
		ms = append(ms, &webhooks.Message{ID: fmt.Sprintf("dlv_%d", id), Key: d.keyName(d.key[id]), Value: d.body(id, time.Unix(0, int64(id)))})
	}
	body, _, err := webhooks.EncodeBatch(ms)
	if err != nil {
		t.Fatalf("EncodeBatch: %v", err)
	}
	infos, err := parseBatch(body)
	if err != nil {
		t.Fatalf("parseBatch: %v", err)
	}
	if len(infos) != len(ms) {
		t.Fatalf("parseBatch read %d records, want %d", len(infos), len(ms))
	}
	for id, info := range infos {
		if want := (bodyInfo{id: uint32(id), key: d.key[id], seq: d.seq[id], ts: int64(id)}); info != want {
			t.Errorf("record %d: read %+v, want %+v", id, info, want)
		}
	}
	for _, bad := range []string{``, `{}`, `{"deliveries": []}`, `{"deliveries": [{"value_base64": "eA=="}]}`, `[1]`} {
		if _, err := parseBatch([]byte(bad)); err == nil {
			t.Errorf("parseBatch(%q): no error, want one", bad)
		}
	}
}
