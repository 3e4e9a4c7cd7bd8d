package tracking

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseKeyInvertsKeyAndRefusesInvalidPartitions(t *testing.T) {
	s := &Store{}
	for _, pk := range []PartitionKey{{"sub-1", "orders", 3}, {"a:b", "t.x", 0}} {
		got, ok := s.parseKey(s.key(pk))
		if !ok {
			t.Errorf("parseKey(%q) failed", s.key(pk))
			continue
		}
		if diff := cmp.Diff(pk, got); diff != "" {
			t.Errorf("parseKey(%q) (-want +got):\n%s", s.key(pk), diff)
		}
	}
	for _, key := range []string{"keyhook:track:{s:t:-1}", "keyhook:track:{:t:1}", "other:track:{s:t:1}"} {
		if pk, ok := s.parseKey(key); ok {
			t.Errorf("parseKey(%q) = %+v; want failure", key, pk)
		}
	}
}
