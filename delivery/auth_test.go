package delivery_test

import (
	"testing"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// Each subscription version renders its own credentials: a rotated client
// certificate or OAuth2 secret is used from the version that sets it, and
// a Google ID token's audience defaults to the endpoint URL.
func TestRenderCarriesTheCredentialsOfItsSubscriptionVersion(t *testing.T) {
	v1 := newSub(t, "https://svc-abc.a.run.app/hooks/orders?tenant=acme")
	v1.Endpoint.Auth = &subscription.EndpointAuth{
		GoogleIDToken:     &subscription.GoogleIDTokenAuth{},
		ClientCertificate: &subscription.ClientCertificate{CertPEM: "cert-v1", KeyPEM: "key-v1"},
	}
	v2 := *v1
	v2.Version++
	v2.Endpoint.Auth = &subscription.EndpointAuth{
		OAuth2:            &subscription.OAuth2ClientCredentials{TokenURL: "https://idp.example/token", ClientID: "c", ClientSecret: "s-v2"},
		ClientCertificate: &subscription.ClientCertificate{CertPEM: "cert-v2", KeyPEM: "key-v2"},
	}
	render := func(s *subscription.Subscription) *webhooks.Request {
		t.Helper()
		r, err := delivery.New(s, webhooks.RetryPolicy{}).Render(&webhooks.Message{ID: "dlv_1", Value: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Signer == nil {
			t.Errorf("version %d renders unsigned: credentials compose with Standard Webhooks signing", s.Version)
		}
		return r
	}
	r1, r2 := render(v1), render(&v2)
	if g := r1.Auth.GoogleIDToken; g == nil || g.Audience != "https://svc-abc.a.run.app/hooks/orders" {
		t.Errorf("google id token = %+v, want the endpoint URL without its query as audience", g)
	}
	if r1.Auth.ClientCert.CertPEM != "cert-v1" || r2.Auth.ClientCert.CertPEM != "cert-v2" || r2.Auth.ClientCert.KeyPEM != "key-v2" {
		t.Errorf("client certificates rendered: v1 %v, v2 %v", r1.Auth.ClientCert, r2.Auth.ClientCert)
	}
	if o := r2.Auth.OAuth2; o == nil || o.ClientSecret != "s-v2" || r2.Auth.GoogleIDToken != nil {
		t.Errorf("version 2 renders %v", r2.Auth)
	}
}
