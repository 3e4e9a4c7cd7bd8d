package webhooks_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// Every attempt is signed, so the HMAC must not be keyed again for each:
// a signature costs its header values and nothing else, however many
// times a secret signs.
func TestSigningReusesTheKeyedHMAC(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test.sh runs this test again without -race")
	}
	key, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	s := &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, key)}}
	body := make([]byte, 256)
	h := make(http.Header, 8)
	ts := time.Unix(1700000000, 0)
	s.Sign("dlv_0123456789abcdef01234567", ts, body, h) // the first signature keys the HMAC
	// Two allocations are the signature's own: the string the header
	// values are cut from and their slices.
	const want = 2
	if got := testing.AllocsPerRun(200, func() { s.Sign("dlv_0123456789abcdef01234567", ts, body, h) }); got > want {
		t.Errorf("%v allocations per signature, want at most %v", got, want)
	}
}
