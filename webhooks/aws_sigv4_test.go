package webhooks_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/webhooks"
)

// Test credentials, set in the environment the standard AWS chain reads.
const (
	testAccessKey    = "AKIAKEYHOOKTEST00001"
	testSecretKey    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY1"
	testSessionToken = "FwoGZXIvYXdzEKEYHOOKSESSIONTOKEN//////////"
)

// botocore returns a Python that can import botocore (testutil.Python).
func botocore(t *testing.T) string {
	return testutil.Python(t, "import botocore", "verify SigV4 signatures with botocore",
		".ci/run installs it: python3 -m venv ~/.cache/keyhook/venv && ~/.cache/keyhook/venv/bin/pip install botocore")
}

// awsEnv gives the standard AWS chain the test credentials and nothing
// else to find: no shared files, no instance metadata.
func awsEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", testAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecretKey)
	t.Setenv("AWS_SESSION_TOKEN", testSessionToken)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_PROFILE", "")
}

// received is a request as the receiver saw it, in the verifier's terms.
type received struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// receiver records every request.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	seen []received
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := map[string]string{"host": r.Host}
		for k, vs := range r.Header {
			h[k] = strings.Join(vs, ",")
		}
		rc.mu.Lock()
		rc.seen = append(rc.seen, received{Method: r.Method, URL: "http://" + r.Host + r.RequestURI, Headers: h,
			Body: base64.StdEncoding.EncodeToString(body)})
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.seen...)
}

// verifySigV4 has botocore check r's signature.
func verifySigV4(t *testing.T, py string, r received, region, service string) {
	t.Helper()
	if out, err := runSigV4Verifier(py, r, region, service); err != nil {
		t.Errorf("botocore refuses the signature of %s %s: %v\n%s", r.Method, r.URL, err, out)
	}
}

func runSigV4Verifier(py string, r received, region, service string) ([]byte, error) {
	in, _ := json.Marshal(struct {
		received
		Region    string `json:"region"`
		Service   string `json:"service"`
		AccessKey string `json:"access_key"`
		SecretKey string `json:"secret_key"`
		Token     string `json:"token"`
	}{r, region, service, testAccessKey, testSecretKey, testSessionToken})
	cmd := exec.Command(py, filepath.Join("testdata", "sigv4_verify.py"))
	cmd.Stdin = bytes.NewReader(in)
	return cmd.CombinedOutput()
}

func TestAWSSigV4SignaturesVerifyWithBotocore(t *testing.T) {
	py := botocore(t)
	awsEnv(t)
	rc := newReceiver(t)
	c := newClient(t, webhooks.ClientConfig{})
	signer, err := webhooks.ParseSecret("whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, service string
		body                []byte
		auth                webhooks.Auth
		signed              bool
	}{
		{name: "json body", path: "/", body: []byte(`{"order":42,"note":"caf\u00e9"}`)},
		{name: "empty body", path: "/hook", body: nil},
		{name: "unicode path", path: "/caf%C3%A9/%E2%9C%93/orders", body: []byte("x")},
		{name: "spaces and reserved characters in path", path: "/a%20b/c+d/e=f", body: []byte("x")},
		{name: "query string", path: "/fn?b=2&a=1&a=0&empty=&sp=a%20b&uni=%C3%A9", body: []byte(`{"a":1}`)},
		{name: "api gateway", path: "/prod/orders", service: "execute-api", body: []byte(`{}`)},
		{name: "with static headers and webhook signature", path: "/s", body: []byte(`{"s":1}`),
			auth: webhooks.Auth{Headers: map[string]string{"X-Tenant": "acme"}}, signed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(rc.requests())
			auth := tt.auth
			auth.AWSSigV4 = &webhooks.AWSSigV4{Region: "eu-west-1", Service: tt.service}
			req := &webhooks.Request{URL: rc.URL + tt.path, Body: tt.body, ContentType: "application/json",
				DeliveryID: "dlv_1", Auth: &auth}
			if tt.signed {
				req.Signer = &webhooks.Signer{Secrets: []webhooks.Secret{signer}}
			}
			if a := c.Send(context.Background(), req, 1); a.Err != nil || a.Status != http.StatusOK {
				t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
			}
			got := rc.requests()[before:]
			if len(got) != 1 {
				t.Fatalf("receiver saw %d requests, want 1", len(got))
			}
			service := tt.service
			if service == "" {
				service = "lambda"
			}
			if tt.signed && got[0].Headers["Webhook-Signature"] == "" {
				t.Errorf("no webhook-signature next to the SigV4 signature")
			}
			verifySigV4(t, py, got[0], "eu-west-1", service)

			if tt.name != "query string" {
				return
			}
			// The verifier is not vacuous: what a signature covers, changed,
			// fails it.
			for what, tamper := range map[string]func(*received){
				"body": func(r *received) { r.Body = base64.StdEncoding.EncodeToString(append(tt.body, '!')) },
				"path": func(r *received) { r.URL = strings.Replace(r.URL, r.Headers["host"]+"/", r.Headers["host"]+"/x", 1) },
				"host": func(r *received) { r.Headers["host"] = "evil.example" },
			} {
				r := got[0]
				r.Headers = maps.Clone(r.Headers)
				tamper(&r)
				if _, err := runSigV4Verifier(py, r, "eu-west-1", service); err == nil {
					t.Errorf("botocore accepts the signature with the %s changed", what)
				}
			}
		})
	}
}

// stepClock moves forward by step at every reading.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (s *stepClock) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(s.step)
	return s.now
}

func (s *stepClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	ch := make(chan time.Time, 1)
	ch <- s.Now()
	return ch, func() bool { return false }
}

func TestAWSSigV4SignsEachAttemptWhenItIsSent(t *testing.T) {
	py := botocore(t)
	awsEnv(t)
	rc := newReceiver(t)
	c := newClient(t, webhooks.ClientConfig{Clock: &stepClock{now: time.Now(), step: 90 * time.Second}})
	req := &webhooks.Request{URL: rc.URL + "/retry", Body: []byte(`{"n":1}`), DeliveryID: "dlv_2",
		Auth: &webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "us-east-1"}}}
	for attempt := 1; attempt <= 2; attempt++ {
		if a := c.Send(context.Background(), req, attempt); a.Err != nil {
			t.Fatalf("attempt %d: %v", attempt, a.Err)
		}
	}
	got := rc.requests()
	if len(got) != 2 {
		t.Fatalf("receiver saw %d requests, want 2", len(got))
	}
	if d1, d2 := got[0].Headers["X-Amz-Date"], got[1].Headers["X-Amz-Date"]; d1 == d2 {
		t.Errorf("both attempts carry X-Amz-Date %s: a retry must be signed afresh", d1)
	}
	for _, r := range got {
		verifySigV4(t, py, r, "us-east-1", "lambda")
	}
}
