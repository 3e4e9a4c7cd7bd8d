package subscription

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRedactedHidesTheSecretsOfEveryCredentialKind(t *testing.T) {
	s := validSubscription()
	s.Endpoint.Auth = &EndpointAuth{
		AWSSigV4:          &AWSSigV4Auth{Region: "eu-west-1", Service: "execute-api", RoleARN: "arn:aws:iam::123456789012:role/r"},
		GoogleIDToken:     &GoogleIDTokenAuth{Audience: "https://a.run.app", CredentialsJSON: "sa-key-secret"},
		OAuth2:            &OAuth2ClientCredentials{TokenURL: "https://idp/token", ClientID: "cid", ClientSecret: "client-secret", Scopes: []string{"a"}},
		ClientCertificate: &ClientCertificate{CertPEM: "public cert", KeyPEM: "private-key-secret"},
	}
	want := &EndpointAuth{
		AWSSigV4:          &AWSSigV4Auth{Region: "eu-west-1", Service: "execute-api", RoleARN: "arn:aws:iam::123456789012:role/r"},
		GoogleIDToken:     &GoogleIDTokenAuth{Audience: "https://a.run.app", CredentialsJSON: redactedValue},
		OAuth2:            &OAuth2ClientCredentials{TokenURL: "https://idp/token", ClientID: "cid", ClientSecret: redactedValue, Scopes: []string{"a"}},
		ClientCertificate: &ClientCertificate{CertPEM: "public cert", KeyPEM: redactedValue},
	}
	r := s.Redacted()
	if diff := cmp.Diff(want, r.Endpoint.Auth); diff != "" {
		t.Errorf("redacted auth (-want +got):\n%s", diff)
	}
	b, _ := json.Marshal(r)
	for _, secret := range []string{"sa-key-secret", "client-secret", "private-key-secret"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("%s shows in %s", secret, b)
		}
	}
	if s.Endpoint.Auth.OAuth2.ClientSecret != "client-secret" {
		t.Errorf("Redacted changed the subscription it copies")
	}
}

func TestGoogleIDTokenAudienceDefaultsToTheEndpointURL(t *testing.T) {
	for _, tc := range []struct{ url, audience, want string }{
		{"https://svc-abc.a.run.app/", "", "https://svc-abc.a.run.app/"},
		{"https://europe-west1-p.cloudfunctions.net/fn?x=1#f", "", "https://europe-west1-p.cloudfunctions.net/fn"},
		{"https://svc-abc.a.run.app/hooks", "https://svc-abc.a.run.app", "https://svc-abc.a.run.app"},
	} {
		e := Endpoint{URL: tc.url, Auth: &EndpointAuth{GoogleIDToken: &GoogleIDTokenAuth{Audience: tc.audience}}}
		if got := e.WebhookAuth().GoogleIDToken.Audience; got != tc.want {
			t.Errorf("%s with audience %q: %q, want %q", tc.url, tc.audience, got, tc.want)
		}
		if e.Auth.GoogleIDToken.Audience != tc.audience {
			t.Errorf("WebhookAuth changed the stored audience")
		}
	}
}

func TestValidateReportsCredentialProblemsUnderEndpointAuth(t *testing.T) {
	s := validSubscription()
	s.Endpoint.Auth = &EndpointAuth{
		AWSSigV4:          &AWSSigV4Auth{Region: "eu-west-1"},
		OAuth2:            &OAuth2ClientCredentials{TokenURL: "https://idp/token", ClientID: "c", ClientSecret: redactedValue},
		ClientCertificate: &ClientCertificate{CertPEM: "x", KeyPEM: redactedValue},
	}
	var got []string
	for _, fe := range s.Validate() {
		got = append(got, fe.Field)
	}
	want := []string{"endpoint.auth", "endpoint.auth.oauth2_client_credentials.client_secret", "endpoint.auth.client_certificate.key_pem"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}
