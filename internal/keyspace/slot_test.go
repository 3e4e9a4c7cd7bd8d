package keyspace

import "testing"

// TestSlotAgreesWithRedisCluster pins Slot to the slots CLUSTER KEYSLOT
// answers (the values of the Redis Cluster specification and of
// redis-server 7), hash tags included.
func TestSlotAgreesWithRedisCluster(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31c3 % Slots},
		{"foo", 12182},
		{"bar", 5061},
		{"somekey", 11058},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		// An empty tag is no tag: the whole key is hashed.
		{"foo{}{bar}", 8363},
		{"{}", 15257},
		// Only the first tag counts.
		{"foo{{bar}}zap", 4015},
		{"foo{bar}{zap}", 5061},
		{"keyhook:track:{sub-1:orders:3}", 8371},
	} {
		if got := Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d; want %d", tt.key, got, tt.want)
		}
	}
}
