package subscription

// DefaultPrefix is the key prefix used when NewStore is given "".
const DefaultPrefix = "keyhook"

// keys names every Redis key and channel the store uses; nothing else in
// the package builds one. The whole set lives in a single hash, so every
// change is a single-key operation and works unchanged on Redis Cluster.
type keys struct {
	// subscriptions is the HASH id -> subscription JSON.
	subscriptions string
	// changed is the Pub/Sub channel that carries the id of every
	// subscription created or deleted.
	changed string
}

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return keys{
		subscriptions: prefix + ":subscriptions",
		changed:       prefix + ":subscriptions:changed",
	}
}
