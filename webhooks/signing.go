package webhooks

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header names of a Standard Webhooks signature.
const (
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// Sizes of a signing secret's key, as Standard Webhooks recommends.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
	// generatedSecretBytes is the key size of GenerateSecret: 256 bits,
	// the size of the HMAC-SHA256 block's useful key.
	generatedSecretBytes = 32
)

// SecretPrefix starts every signing secret in its text form.
const SecretPrefix = "whsec_"

// redacted is how a secret or a credential is printed.
const redacted = "[REDACTED]"

// ErrInvalidSecret is wrapped by every error of [ParseSecret].
var ErrInvalidSecret = errors.New("webhooks: invalid signing secret")

// Secret is a Standard Webhooks signing key. Its zero value signs nothing.
// It never prints its key: every fmt verb, slog and %#v show
// "whsec_[REDACTED]".
type Secret struct {
	key []byte
	// macs keeps HMACs keyed with key, ready to sign: keying one hashes
	// two blocks and costs ten allocations, and every attempt signs. Nil
	// in a zero Secret.
	macs *sync.Pool
}

// keyedMAC is an HMAC keyed with a secret, with the buffers the signed
// content's prefix and the sum are written to, reused together: handed
// to the hash, buffers of the caller's would escape at each signature.
type keyedMAC struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

func newMACPool(key []byte) *sync.Pool {
	return &sync.Pool{New: func() any { return &keyedMAC{h: hmac.New(sha256.New, key)} }}
}

// GenerateSecret returns a new signing secret in its text form: "whsec_"
// and the standard, padded base64 of 32 random bytes from crypto/rand.
func GenerateSecret() (string, error) {
	key := make([]byte, generatedSecretBytes)
	if _, err := io.ReadFull(rand.Reader, key); err != nil {
		return "", fmt.Errorf("webhooks: generate secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// ParseSecret reads a secret in its text form: "whsec_" followed by the
// standard, padded base64 of 24 to 64 bytes, the form Standard Webhooks
// libraries verify with. Surrounding white space is ignored.
//
// Its errors wrap [ErrInvalidSecret] and never contain any part of s, so
// they can be logged and returned to the user who supplied it.
func ParseSecret(s string) (Secret, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: it must start with %s", ErrInvalidSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil || strings.ContainsAny(rest, "\r\n") {
		// The decoder's error names the offending byte's position, which
		// is harmless, but the message is ours so that nothing of the
		// secret can ever slip into it.
		return Secret{}, fmt.Errorf("%w: the part after %s must be standard base64 with padding", ErrInvalidSecret, SecretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("%w: the key must be %d to %d bytes, not %d", ErrInvalidSecret, MinSecretBytes, MaxSecretBytes, len(key))
	}
	return Secret{key: key, macs: newMACPool(key)}, nil
}

// IsZero reports whether s holds no key.
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// String returns "whsec_[REDACTED]", never the key.
func (s Secret) String() string { return SecretPrefix + redacted }

// GoString returns the same as String, so %#v does not print the key.
func (s Secret) GoString() string { return s.String() }

// Format prints the redacted form for every verb: without it, verbs such
// as %x or %d would print the key's bytes.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// LogValue keeps the key out of slog output, whatever the handler.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// appendSign appends the base64 HMAC-SHA256 of "id.timestamp.body"
// under s to b.
func (s Secret) appendSign(b []byte, id string, ts, body []byte) []byte {
	var m *keyedMAC
	if s.macs != nil {
		m = s.macs.Get().(*keyedMAC)
	} else {
		m = &keyedMAC{h: hmac.New(sha256.New, s.key)}
	}
	// "id.timestamp." in one write.
	m.buf = append(m.buf[:0], id...)
	m.buf = append(m.buf, '.')
	m.buf = append(m.buf, ts...)
	m.buf = append(m.buf, '.')
	m.h.Write(m.buf)
	m.h.Write(body)
	b = base64.StdEncoding.AppendEncode(b, m.h.Sum(m.sum[:0]))
	if s.macs != nil {
		m.h.Reset() // back to the keyed state
		s.macs.Put(m)
	}
	return b
}

// Signer signs requests the Standard Webhooks way. It is safe for
// concurrent use as long as Secrets is not modified.
type Signer struct {
	// Secrets sign every request, the current one first. During a
	// rotation, list the previous secret too: each request then carries a
	// signature under each, so endpoints verify with either, and the
	// previous one can be dropped once every endpoint has moved.
	Secrets []Secret
}

// Sign sets on h the Standard Webhooks headers of a request whose delivery
// id is id, sent at ts, with body as its exact body: webhook-id,
// webhook-timestamp (unix seconds) and webhook-signature, a space-separated
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, in the order of
// Secrets. Zero secrets are skipped; with none left, no webhook-signature is
// set.
//
// The timestamp is part of what is signed and endpoints refuse old ones
// (five minutes is usual), so sign each attempt when it is sent, as
// [Client.Send] does, never once per delivery.
func (s *Signer) Sign(id string, ts time.Time, body []byte, h http.Header) {
	hs := headerSet{h: h, vals: make([]string, 0, 3)}
	s.sign(id, ts, body, &hs)
}

// sign is Sign into hs.
func (s *Signer) sign(id string, ts time.Time, body []byte, hs *headerSet) {
	// The timestamp and the signatures are written into one string and
	// cut from it: every attempt is signed, and each piece on its own
	// would cost an allocation.
	var scratch [256]byte
	b := strconv.AppendInt(scratch[:0], ts.Unix(), 10)
	unixEnd := len(b)
	signed := 0
	for _, sec := range s.Secrets {
		if sec.IsZero() {
			continue
		}
		if signed > 0 {
			b = append(b, ' ')
		}
		b = append(b, "v1,"...)
		b = sec.appendSign(b, id, b[:unixEnd], body)
		signed++
	}
	vals := string(b)
	hs.set(canonicalWebhookID, id)
	hs.set(canonicalWebhookTimestamp, vals[:unixEnd])
	if signed == 0 {
		delete(hs.h, canonicalWebhookSignature)
		return
	}
	hs.set(canonicalWebhookSignature, vals[unixEnd:])
}

var (
	canonicalWebhookTimestamp = http.CanonicalHeaderKey(HeaderWebhookTimestamp)
	canonicalWebhookSignature = http.CanonicalHeaderKey(HeaderWebhookSignature)
)

// signed signs the request's attempt when it is sent, with the attempt's
// start as the timestamp. A signed request needs a delivery id; without
// one the attempt ends, final.
func signed(next handler) handler {
	return func(ctx context.Context, cl *call) {
		if r := cl.r; r.Signer != nil {
			if r.DeliveryID == "" {
				cl.a.Err = fmt.Errorf("%w: a signed request needs a delivery id", ErrInvalidRequest)
				return
			}
			r.Signer.sign(r.DeliveryID, cl.a.Started, r.Body, &cl.owned)
		}
		next(ctx, cl)
	}
}
