package subscription

import (
	"crypto/sha256"
	"encoding/hex"
)

// DefaultPrefix is the key prefix used when NewStore is given "".
const DefaultPrefix = "keyhook"

// keys names every Redis key and channel the store uses; nothing else in
// the package builds one. The whole set lives in a single hash, so every
// change to it is a single-key operation. The idempotency records of
// creates carry the hash's name as their {hash tag}: the create script
// that writes both then touches a single Redis Cluster slot, since a key
// without braces (the hash) hashes its whole name, which is the tag.
type keys struct {
	// subscriptions is the HASH id -> subscription JSON.
	subscriptions string
	// changed is the Pub/Sub channel that carries the id of every
	// subscription created, changed or deleted.
	changed string
	// idempotencyPrefix starts the STRING keys holding the outcome of a
	// create made with an Idempotency-Key.
	idempotencyPrefix string
}

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	subs := prefix + ":subscriptions"
	return keys{
		subscriptions:     subs,
		changed:           subs + ":changed",
		idempotencyPrefix: "{" + subs + "}:idempotency:",
	}
}

// idempotency names the record of a create made with the client's key.
// The key is hashed: it is the client's text, of any bytes, and must not
// shape the key space.
func (k keys) idempotency(clientKey string) string {
	sum := sha256.Sum256([]byte(clientKey))
	return k.idempotencyPrefix + hex.EncodeToString(sum[:])
}
