package auth

import (
	"crypto/sha256"
	"encoding/hex"
)

// DefaultPrefix is the key prefix used when NewStore is given "".
const DefaultPrefix = "keyhook"

// keys names every Redis key the store uses; nothing else in the package
// builds one. They share the {tokens} hash tag so that the scripts, which
// touch several of them, work on Redis Cluster.
type keys struct {
	// tokens is the HASH token hash -> Token JSON.
	tokens string
	// names is the HASH name -> token hash; names are unique.
	names string
	// lastUsed is the HASH token hash -> unix milliseconds of the last
	// recorded use, kept apart so that recording a use never rewrites a
	// token.
	lastUsed string
}

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	base := prefix + ":{tokens}"
	return keys{tokens: base, names: base + ":names", lastUsed: base + ":last_used"}
}

// hashSecret is the stored identity of a token: its SHA-256, in hex. A
// token carries 256 random bits, so a plain hash, unsalted and fast, is
// as strong as the token and lets a lookup find it.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
