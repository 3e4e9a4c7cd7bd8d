package webhooks_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// testCA issues client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "keyhook test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

// issue returns a client certificate for cn, PEM encoded.
func (ca *testCA) issue(t *testing.T, cn string) *webhooks.ClientCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &webhooks.ClientCert{
		CertPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		KeyPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}
}

// newMTLSEndpoint is a TLS server that requires a client certificate of
// ca and records the common name of each request's.
func newMTLSEndpoint(t *testing.T, ca *testCA) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].Subject.CommonName)
		mu.Unlock()
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestClientCertificateIsPresentedAndARotatedOneReplacesIt(t *testing.T) {
	ca := newTestCA(t)
	srv, seen := newMTLSEndpoint(t, ca)
	c := newClient(t, webhooks.ClientConfig{})
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	webhooks.TrustRootsForTest(c, roots)

	v1, v2 := ca.issue(t, "subscription-v1"), ca.issue(t, "subscription-v2")
	send := func(auth *webhooks.Auth) webhooks.Attempt {
		return c.Send(context.Background(), &webhooks.Request{URL: srv.URL, Body: []byte("{}"), Auth: auth}, 1)
	}
	if a := send(nil); a.Err == nil && a.Status == http.StatusOK {
		t.Fatal("the endpoint accepted a request without a client certificate")
	}
	for _, cert := range []*webhooks.ClientCert{v1, v1, v2, v2, v1} {
		if a := send(&webhooks.Auth{ClientCert: cert, BearerToken: "composes"}); a.Err != nil || a.Status != http.StatusOK {
			t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
		}
	}
	want := "subscription-v1 subscription-v1 subscription-v2 subscription-v2 subscription-v1"
	if got := strings.Join(seen(), " "); got != want {
		t.Errorf("certificates presented = %s, want %s: each request presents its own, on connections never shared", got, want)
	}
}

func TestClientCertificateThatDoesNotParseIsFinal(t *testing.T) {
	ca := newTestCA(t)
	v1, v2 := ca.issue(t, "a"), ca.issue(t, "b")
	mismatched := &webhooks.ClientCert{CertPEM: v1.CertPEM, KeyPEM: v2.KeyPEM}
	c := newClient(t, webhooks.ClientConfig{})
	a := c.Send(context.Background(), &webhooks.Request{URL: "https://127.0.0.1:1/", Auth: &webhooks.Auth{ClientCert: mismatched}}, 1)
	if webhooks.Classify(a) != webhooks.OutcomeFinal || strings.Contains(a.Err.Error(), "PRIVATE KEY") {
		t.Errorf("err = %v, want a final refusal that shows no key", a.Err)
	}
}

func TestClientCertificateIsNotPresentedToAnotherOriginOnRedirect(t *testing.T) {
	ca := newTestCA(t)
	other, seenOther := newMTLSEndpoint(t, ca)
	first := httptest.NewUnstartedServer(http.RedirectHandler(other.URL+"/elsewhere", http.StatusTemporaryRedirect))
	first.StartTLS()
	t.Cleanup(first.Close)
	c := newClient(t, webhooks.ClientConfig{})
	roots := x509.NewCertPool()
	roots.AddCert(other.Certificate())
	roots.AddCert(first.Certificate())
	webhooks.TrustRootsForTest(c, roots)
	a := c.Send(context.Background(), &webhooks.Request{URL: first.URL, Body: []byte("{}"), FollowRedirects: 1,
		Auth: &webhooks.Auth{ClientCert: ca.issue(t, "subscription")}}, 1)
	if !errors.Is(a.Err, webhooks.ErrRedirectRefused) || len(seenOther()) != 0 {
		t.Errorf("err = %v, other origin saw %v: the certificate must stay with the endpoint's origin", a.Err, seenOther())
	}
}
