package subscription

import (
	"strings"
	"testing"
)

func TestKeyExcerptShowsTextOrBase64AndCutsLongKeys(t *testing.T) {
	long := strings.Repeat("a", MaxKeyBytes-1) + "é" // é straddles the cut
	for _, tc := range []struct {
		name      string
		key       []byte
		text, b64 string
		truncated bool
	}{
		{"none", nil, "", "", false},
		{"text", []byte("customer-7"), "customer-7", "", false},
		{"control character", []byte("a\nb"), "", "YQpi", false},
		{"binary", []byte{0, 1}, "", "AAE=", false},
		{"cut inside a character", []byte(long), strings.Repeat("a", MaxKeyBytes-1), "", true},
	} {
		text, b64, truncated := KeyExcerpt(tc.key)
		if text != tc.text || b64 != tc.b64 || truncated != tc.truncated {
			t.Errorf("%s: KeyExcerpt = %q, %q, %v; want %q, %q, %v", tc.name, text, b64, truncated, tc.text, tc.b64, tc.truncated)
		}
	}
}
