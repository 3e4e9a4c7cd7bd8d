package webhooks_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keyhook/keyhook/webhooks"
)

// signatureVector is one golden vector of testdata/signatures.json.
type signatureVector struct {
	Name       string   `json:"name"`
	Secrets    []string `json:"secrets"`
	ID         string   `json:"id"`
	Timestamp  int64    `json:"timestamp"`
	Body       *string  `json:"body"`
	BodyBase64 string   `json:"body_base64"`
	Signature  string   `json:"signature"`
}

func (v signatureVector) body(t *testing.T) []byte {
	if v.Body != nil {
		return []byte(*v.Body)
	}
	b, err := base64.StdEncoding.DecodeString(v.BodyBase64)
	if err != nil {
		t.Fatalf("%s: body_base64: %v", v.Name, err)
	}
	return b
}

func loadSignatureVectors(t *testing.T) []signatureVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/signatures.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []signatureVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("testdata/signatures.json: %v", err)
	}
	if len(file.Vectors) == 0 {
		t.Fatal("testdata/signatures.json holds no vectors")
	}
	return file.Vectors
}

func mustSecret(t *testing.T, s string) webhooks.Secret {
	t.Helper()
	sec, err := webhooks.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return sec
}

func TestSignerReproducesTheGoldenVectors(t *testing.T) {
	for _, v := range loadSignatureVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			var signer webhooks.Signer
			for _, s := range v.Secrets {
				signer.Secrets = append(signer.Secrets, mustSecret(t, s))
			}
			body := v.body(t)
			h := http.Header{}

			signer.Sign(v.ID, time.Unix(v.Timestamp, 0), body, h)

			want := http.Header{
				"Webhook-Id":        {v.ID},
				"Webhook-Timestamp": {strconv.FormatInt(v.Timestamp, 10)},
				"Webhook-Signature": {v.Signature},
			}
			if diff := cmp.Diff(want, h); diff != "" {
				t.Errorf("signature headers (-want +got):\n%s", diff)
			}
			// The independent library agrees, secret by secret.
			for _, s := range v.Secrets {
				wh, err := standardwebhooks.NewWebhook(s)
				if err != nil {
					t.Fatal(err)
				}
				if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
					t.Errorf("standardwebhooks rejects the signature: %v", err)
				}
			}
		})
	}
}

// verifyingEndpoint is a real server that checks each request with the
// Standard Webhooks library under one secret, timestamp tolerance
// included, as a receiving service would.
func verifyingEndpoint(t *testing.T, secret string) (url string, results func() []error) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := wh.Verify(body, r.Header)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
}

func TestStandardWebhooksLibraryVerifiesEitherSecretDuringARotation(t *testing.T) {
	newSecret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	oldSecret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	otherSecret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	signer := &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, newSecret), mustSecret(t, oldSecret)}}
	c := newClient(t, webhooks.ClientConfig{})

	tests := []struct {
		name     string
		verifier string
		wantOK   bool
	}{
		{"endpoint on the new secret", newSecret, true},
		{"endpoint still on the old secret", oldSecret, true},
		{"endpoint on an unrelated secret", otherSecret, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, results := verifyingEndpoint(t, tt.verifier)
			m := orderMessage()
			req, err := webhooks.NewRequest(url, webhooks.FormatEnvelope, m, "")
			if err != nil {
				t.Fatal(err)
			}
			req.Signer = signer

			a := c.Send(context.Background(), req, 1)

			errs := results()
			if len(errs) != 1 {
				t.Fatalf("endpoint verified %d requests, want 1", len(errs))
			}
			if gotOK := errs[0] == nil; gotOK != tt.wantOK {
				t.Errorf("verification error = %v, want ok = %v (status %d)", errs[0], tt.wantOK, a.Status)
			}
			if !tt.wantOK && !errors.Is(errs[0], standardwebhooks.ErrNoMatchingSignature) {
				t.Errorf("verification error = %v, want ErrNoMatchingSignature", errs[0])
			}
		})
	}
}

func TestSendSignsEveryAttemptWithItsOwnTimestamp(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusServiceUnavailable, http.StatusOK))
	clock := newFakeClock()
	c := newClient(t, webhooks.ClientConfig{Clock: clock})
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	req := &webhooks.Request{
		URL:        ep.URL,
		Body:       []byte(`{"a":1}`),
		DeliveryID: "dlv_retry",
		Signer:     &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, secret)}},
		// A caller cannot smuggle in a signature of its own.
		Header: http.Header{"Webhook-Signature": {"v1,forged"}, "Webhook-Timestamp": {"1"}},
	}
	// Half a second more than an hour: the jitter, however tiny, cannot
	// move the second attempt to another unix second.
	wait := time.Hour + time.Second/2
	policy := webhooks.RetryPolicy{InitialInterval: wait, MaxInterval: wait, RandomizationFactor: tinyJitter}

	res := c.Deliver(context.Background(), req, policy, nil)

	if res.Outcome != webhooks.OutcomeSuccess || res.Attempts != 2 {
		t.Fatalf("Deliver = {%s, %d attempts, %v}, want success after 2", res.Outcome, res.Attempts, res.Err)
	}
	wh, _ := standardwebhooks.NewWebhook(secret)
	var stamps []int64
	for _, r := range ep.requests() {
		if got := r.Header.Values("Webhook-Signature"); len(got) != 1 || strings.Contains(got[0], "forged") {
			t.Errorf("webhook-signature = %q, want only ours", got)
		}
		if err := wh.VerifyIgnoringTimestamp(r.Body, r.Header); err != nil {
			t.Errorf("attempt %s: %v", r.Header.Get("Keyhook-Attempt"), err)
		}
		ts, _ := strconv.ParseInt(r.Header.Get("Webhook-Timestamp"), 10, 64)
		stamps = append(stamps, ts)
	}
	start := newFakeClock().Now().Unix()
	if diff := cmp.Diff([]int64{start, start + 3600}, stamps); diff != "" {
		t.Errorf("webhook-timestamp per attempt (-want +got):\n%s", diff)
	}
}

func TestSendRefusesToSignWithoutADeliveryID(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	sec, _ := webhooks.GenerateSecret()

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Signer: &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, sec)}}}, 1)

	if !errors.Is(a.Err, webhooks.ErrInvalidRequest) || webhooks.Classify(a) != webhooks.OutcomeFinal {
		t.Fatalf("Send = %v (%s), want a final ErrInvalidRequest", a.Err, webhooks.Classify(a))
	}
	if n := len(ep.requests()); n != 0 {
		t.Errorf("endpoint saw %d requests, want 0", n)
	}
}

func TestSignerWithoutUsableSecretsSetsNoSignature(t *testing.T) {
	h := http.Header{"Webhook-Signature": {"stale"}}
	(&webhooks.Signer{Secrets: []webhooks.Secret{{}}}).Sign("id", time.Unix(5, 0), nil, h)
	want := http.Header{"Webhook-Id": {"id"}, "Webhook-Timestamp": {"5"}}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

func TestGenerateSecretMakesDistinctParsableSecrets(t *testing.T) {
	a, errA := webhooks.GenerateSecret()
	b, errB := webhooks.GenerateSecret()
	if errA != nil || errB != nil {
		t.Fatalf("GenerateSecret: %v, %v", errA, errB)
	}
	if a == b {
		t.Fatal("two generated secrets are equal")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if !strings.HasPrefix(a, "whsec_") || err != nil || len(key) != 32 {
		t.Errorf("GenerateSecret = %d key bytes, err %v, prefix ok %v; want whsec_ and 32 bytes", len(key), err, strings.HasPrefix(a, "whsec_"))
	}
	if _, err := webhooks.ParseSecret(a); err != nil {
		t.Errorf("ParseSecret(GenerateSecret()) = %v", err)
	}
}

func TestParseSecretAcceptsOnlyPaddedBase64Of24To64Bytes(t *testing.T) {
	key := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, n)) }
	tests := []struct {
		name  string
		input string
		want  string // "" for valid
	}{
		{"24 bytes", "whsec_" + key(24), ""},
		{"64 bytes", "whsec_" + key(64), ""},
		{"surrounding space", "  whsec_" + key(32) + "\n", ""},
		{"no prefix", key(32), "webhooks: invalid signing secret: it must start with whsec_"},
		{"other prefix", "whsk_" + key(32), "webhooks: invalid signing secret: it must start with whsec_"},
		{"not base64", "whsec_" + strings.Repeat("!", 40), "webhooks: invalid signing secret: the part after whsec_ must be standard base64 with padding"},
		{"missing padding", "whsec_" + strings.TrimRight(key(32), "="), "webhooks: invalid signing secret: the part after whsec_ must be standard base64 with padding"},
		{"URL alphabet", "whsec_" + strings.ReplaceAll(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16)), "/", "_"), "webhooks: invalid signing secret: the part after whsec_ must be standard base64 with padding"},
		{"line break inside", "whsec_" + key(12) + "\n" + key(12), "webhooks: invalid signing secret: the part after whsec_ must be standard base64 with padding"},
		{"23 bytes", "whsec_" + key(23), "webhooks: invalid signing secret: the key must be 24 to 64 bytes, not 23"},
		{"65 bytes", "whsec_" + key(65), "webhooks: invalid signing secret: the key must be 24 to 64 bytes, not 65"},
		{"empty", "", "webhooks: invalid signing secret: it must start with whsec_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := webhooks.ParseSecret(tt.input)
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, webhooks.ErrInvalidSecret) {
					t.Errorf("error %v does not wrap ErrInvalidSecret", err)
				}
			}
			if got != tt.want {
				t.Errorf("ParseSecret error = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSecretNeverPrintsItsKey(t *testing.T) {
	const text = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sec := mustSecret(t, text)
	keyBytes, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(text, "whsec_"))
	signer := webhooks.Signer{Secrets: []webhooks.Secret{sec}}

	var printed []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		printed = append(printed, fmt.Sprintf(verb, sec), fmt.Sprintf(verb, signer), fmt.Sprintf(verb, &signer))
	}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "secret", sec, "signer", signer)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", sec, "signer", signer)
	printed = append(printed, logs.String())

	leaks := []string{
		strings.TrimPrefix(text, "whsec_"),
		fmt.Sprintf("%x", keyBytes),
		fmt.Sprintf("%X", keyBytes),
		fmt.Sprint(keyBytes),
		fmt.Sprint(keyBytes[:4])[1:8], // a run of the decimal bytes
	}
	for _, p := range printed {
		for _, leak := range leaks {
			if strings.Contains(p, leak) {
				t.Errorf("printed %q contains the key (%q)", p, leak)
			}
		}
	}
	if got := sec.String(); got != "whsec_[REDACTED]" {
		t.Errorf("String() = %q, want whsec_[REDACTED]", got)
	}
}

// parseSecretMessages are the only error messages ParseSecret may return:
// nothing of the input can appear in them, only its decoded length.
var parseSecretMessages = regexp.MustCompile(`^webhooks: invalid signing secret: (it must start with whsec_|the part after whsec_ must be standard base64 with padding|the key must be 24 to 64 bytes, not \d+)$`)

func FuzzParseSecret(f *testing.F) {
	f.Add("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	f.Add("whsec_")
	f.Add("whsec_====")
	f.Add(" whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\r\n")
	f.Add("whsec_AAECAwQFBgcICQoLDA0O\nDxAREhMUFRYXGBkaGxwdHh8=")
	f.Add("whsec_" + strings.Repeat("A", 90))
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := webhooks.ParseSecret(s)
		if err != nil {
			if !parseSecretMessages.MatchString(err.Error()) {
				t.Fatalf("ParseSecret(%q) error %q is not one of the fixed messages", s, err)
			}
			if !errors.Is(err, webhooks.ErrInvalidSecret) {
				t.Fatalf("ParseSecret(%q) error %v does not wrap ErrInvalidSecret", s, err)
			}
			return
		}
		if sec.IsZero() {
			t.Fatalf("ParseSecret(%q) returned a zero secret without error", s)
		}
		if got := fmt.Sprintf("%v %d %x", sec, sec, sec); strings.Contains(got, strings.TrimSpace(s)[6:]) {
			t.Fatalf("secret %q printed as %q", s, got)
		}
		// The independent library must read the same key: both sign alike.
		wh, err := standardwebhooks.NewWebhook(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("ParseSecret accepted %q, standardwebhooks did not: %v", s, err)
		}
		h := http.Header{}
		(&webhooks.Signer{Secrets: []webhooks.Secret{sec}}).Sign("id", time.Unix(1, 0), []byte("body"), h)
		if err := wh.VerifyIgnoringTimestamp([]byte("body"), h); err != nil {
			t.Fatalf("secret %q: standardwebhooks rejects our signature: %v", s, err)
		}
	})
}
