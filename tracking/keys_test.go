package tracking

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPartitionKeyLayoutAndParsing(t *testing.T) {
	tests := []struct {
		pk   PartitionKey
		want string
	}{
		{PartitionKey{"sub-1", "orders", 3}, "keyhook:track:{sub-1:orders:3}"},
		{PartitionKey{"a:b", "t.x", 0}, "keyhook:track:{a:b:t.x:0}"},
		{PartitionKey{"s*", "t", 2147483647}, "keyhook:track:{s*:t:2147483647}"},
	}
	for _, tt := range tests {
		key := partitionKey("keyhook", tt.pk)
		if key != tt.want {
			t.Errorf("partitionKey(%+v) = %q; want %q", tt.pk, key, tt.want)
		}
		got, ok := parsePartitionKey("keyhook", key)
		if !ok {
			t.Errorf("parsePartitionKey(%q) failed", key)
			continue
		}
		if diff := cmp.Diff(tt.pk, got); diff != "" {
			t.Errorf("parsePartitionKey(%q) (-want +got):\n%s", key, diff)
		}
	}
	for _, key := range []string{
		"other:track:{s:t:1}", "keyhook:track:{s:t:x}", "keyhook:track:{t:1}",
		"keyhook:track:{s:t:01}", "keyhook:track:{s:t:-1}", "keyhook:track:{s:t:1}x",
	} {
		if pk, ok := parsePartitionKey("keyhook", key); ok {
			t.Errorf("parsePartitionKey(%q) = %+v; want failure", key, pk)
		}
	}
}

func TestSubscriptionPatternEscapesGlobCharacters(t *testing.T) {
	got := subscriptionPattern("kh", `s*?[x]\`)
	want := `kh:track:{s\*\?\[x\]\\:*`
	if got != want {
		t.Errorf("subscriptionPattern = %q; want %q", got, want)
	}
}
