package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

func TestAuthValidateNamesTheBadFieldWithoutItsValue(t *testing.T) {
	tests := []struct {
		name string
		auth webhooks.Auth
		want string // "" for valid
	}{
		{"zero", webhooks.Auth{}, ""},
		{"headers and bearer", webhooks.Auth{Headers: map[string]string{"X-Api-Key": "k1", "x-tenant": "acme"}, BearerToken: "tok.en-1/2+3="}, ""},
		{"basic with empty password", webhooks.Auth{BasicUser: "billing"}, ""},
		{"basic password with colon", webhooks.Auth{BasicUser: "billing", BasicPassword: "a:b c"}, ""},
		{"header name with space", webhooks.Auth{Headers: map[string]string{"X Api": "secret-v"}}, `auth.headers: "X Api" is not a valid header name`},
		{"empty header name", webhooks.Auth{Headers: map[string]string{"": "secret-v"}}, `auth.headers: "" is not a valid header name`},
		{"CRLF injection in a header", webhooks.Auth{Headers: map[string]string{"X-Api-Key": "secret-v\r\nX-Admin: 1"}}, `auth.headers["X-Api-Key"] must not contain control characters such as CR or LF`},
		{"content type", webhooks.Auth{Headers: map[string]string{"content-type": "secret-v"}}, `auth.headers: "content-type" is set by keyhook and cannot be configured`},
		{"host", webhooks.Auth{Headers: map[string]string{"Host": "secret-v"}}, `auth.headers: "Host" is set by keyhook and cannot be configured`},
		{"signature", webhooks.Auth{Headers: map[string]string{"webhook-signature": "secret-v"}}, `auth.headers: "webhook-signature" is set by keyhook and cannot be configured`},
		{"keyhook header", webhooks.Auth{Headers: map[string]string{"Keyhook-Topic": "secret-v"}}, `auth.headers: "Keyhook-Topic" is set by keyhook and cannot be configured`},
		{"cloudevents header", webhooks.Auth{Headers: map[string]string{"ce-id": "secret-v"}}, `auth.headers: "ce-id" is set by keyhook and cannot be configured`},
		{"traceparent", webhooks.Auth{Headers: map[string]string{"traceparent": "secret-v"}}, `auth.headers: "traceparent" is set by keyhook and cannot be configured`},
		{"same header twice", webhooks.Auth{Headers: map[string]string{"X-Key": "secret-v", "x-key": "secret-w"}}, `auth.headers: "X-Key" and "x-key" name the same header`},
		{"authorization header and bearer", webhooks.Auth{Headers: map[string]string{"authorization": "secret-v"}, BearerToken: "secret-t"}, `auth.headers: "authorization" conflicts with auth.bearer_token or auth.basic_user, which set it too`},
		{"authorization header alone", webhooks.Auth{Headers: map[string]string{"Authorization": "Token secret-v"}}, ""},
		{"bearer and basic", webhooks.Auth{BearerToken: "secret-t", BasicUser: "u"}, "auth.bearer_token and auth.basic_user cannot both be set: each sets Authorization"},
		{"bearer with LF", webhooks.Auth{BearerToken: "secret-t\nX: y"}, "auth.bearer_token must not contain spaces or control characters such as CR or LF"},
		{"bearer with space", webhooks.Auth{BearerToken: "secret t"}, "auth.bearer_token must not contain spaces or control characters such as CR or LF"},
		{"password without user", webhooks.Auth{BasicPassword: "secret-p"}, "auth.basic_password is set without auth.basic_user"},
		{"user with colon", webhooks.Auth{BasicUser: "a:b"}, "auth.basic_user must not contain a colon"},
		{"user with CR", webhooks.Auth{BasicUser: "a\rb"}, "auth.basic_user must not contain control characters such as CR or LF"},
		{"password with NUL", webhooks.Auth{BasicUser: "u", BasicPassword: "secret-p\x00"}, "auth.basic_password must not contain control characters such as CR or LF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.auth.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "secret-") {
				t.Errorf("Validate() message %q repeats a value", got)
			}
		})
	}
}

func TestSendAppliesAuthAtTheEndpoint(t *testing.T) {
	tests := []struct {
		name string
		auth webhooks.Auth
		want map[string]string
	}{
		{
			name: "headers and bearer token",
			auth: webhooks.Auth{Headers: map[string]string{"x-api-key": "k-123"}, BearerToken: "t-456"},
			want: map[string]string{"X-Api-Key": "k-123", "Authorization": "Bearer t-456", "basic": ""},
		},
		{
			name: "basic",
			auth: webhooks.Auth{BasicUser: "billing", BasicPassword: "p:w d"},
			want: map[string]string{"X-Api-Key": "", "Authorization": "Basic YmlsbGluZzpwOncgZA==", "basic": "billing/p:w d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				got["X-Api-Key"] = r.Header.Get("X-Api-Key")
				got["Authorization"] = r.Header.Get("Authorization")
				if u, p, ok := r.BasicAuth(); ok {
					got["basic"] = u + "/" + p
				} else {
					got["basic"] = ""
				}
			})
			c := newClient(t, webhooks.ClientConfig{})

			a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Auth: &tt.auth}, 1)

			if a.Status != http.StatusOK {
				t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("credentials at the endpoint (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSendMakesInvalidAuthFinalWithoutSending(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	auth := &webhooks.Auth{Headers: map[string]string{"X-Api-Key": "k\r\nX-Admin: yes"}}

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Auth: auth}, 1)

	if !errors.Is(a.Err, webhooks.ErrInvalidRequest) || webhooks.Classify(a) != webhooks.OutcomeFinal {
		t.Fatalf("Send = %v (%s), want a final ErrInvalidRequest", a.Err, webhooks.Classify(a))
	}
	if strings.Contains(a.Err.Error(), "X-Admin") {
		t.Errorf("error %q repeats the value", a.Err)
	}
	if n, conns := len(ep.requests()), ep.conns.Load(); n != 0 || conns != 0 {
		t.Errorf("endpoint saw %d requests on %d connections, want none", n, conns)
	}
}

func TestAuthNeverPrintsItsValues(t *testing.T) {
	auth := webhooks.Auth{
		Headers:       map[string]string{"X-Api-Key": "value-of-key"},
		BearerToken:   "value-of-token",
		BasicUser:     "value-of-user",
		BasicPassword: "value-of-password",
	}
	holder := struct{ Auth webhooks.Auth }{auth}

	var printed []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		printed = append(printed, fmt.Sprintf(verb, auth), fmt.Sprintf(verb, &auth), fmt.Sprintf(verb, holder))
	}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "auth", auth)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "auth", &auth)
	printed = append(printed, logs.String())

	for _, p := range printed {
		if strings.Contains(p, "value-of") {
			t.Errorf("printed %q contains a credential", p)
		}
	}
	want := "Auth{headers: [X-Api-Key], bearer_token: [REDACTED], basic: [REDACTED]}"
	if got := auth.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestAuthValidateFaaSCredentials(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t, "c")
	oauth := func() *webhooks.OAuth2ClientCredentials {
		return &webhooks.OAuth2ClientCredentials{TokenURL: "https://auth.example.com/token", ClientID: "id", ClientSecret: "secret-v"}
	}
	key := `{"type":"service_account","client_email":"a@b.iam.gserviceaccount.com","private_key":"secret-v","token_uri":"https://oauth2.googleapis.com/token"}`
	tests := []struct {
		name string
		auth webhooks.Auth
		want string // "" for valid
	}{
		{"sigv4 lambda", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1"}}, ""},
		{"sigv4 api gateway with role", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "us-gov-west-1", Service: "execute-api",
			RoleARN: "arn:aws:iam::123456789012:role/keyhook-invoker"}}, ""},
		{"sigv4 without region", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{}}, `auth.aws_sigv4.region must be an AWS region such as "eu-west-1"`},
		{"sigv4 bad service", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1", Service: "Lambda Svc"}}, `auth.aws_sigv4.service must be a signing name such as "lambda" or "execute-api"`},
		{"sigv4 bad role", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1", RoleARN: "keyhook"}}, "auth.aws_sigv4.role_arn must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)"},
		{"sigv4 and an x-amz header", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1"}, Headers: map[string]string{"x-amz-date": "secret-v"}}, `auth.headers: "x-amz-date" is set by the aws_sigv4 signature`},
		{"sigv4 and bearer", webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1"}, BearerToken: "secret-v"}, "auth: bearer_token, basic_user, an Authorization header, aws_sigv4, google_id_token and oauth2_client_credentials each set Authorization: set one"},
		{"oauth2", webhooks.Auth{OAuth2: oauth()}, ""},
		{"oauth2 and google", webhooks.Auth{OAuth2: oauth(), GoogleIDToken: &webhooks.GoogleIDToken{Audience: "https://x.run.app"}}, "auth: bearer_token, basic_user, an Authorization header, aws_sigv4, google_id_token and oauth2_client_credentials each set Authorization: set one"},
		{"oauth2 and an authorization header", webhooks.Auth{OAuth2: oauth(), Headers: map[string]string{"Authorization": "secret-v"}}, "auth: bearer_token, basic_user, an Authorization header, aws_sigv4, google_id_token and oauth2_client_credentials each set Authorization: set one"},
		{"oauth2 token url not absolute", webhooks.Auth{OAuth2: &webhooks.OAuth2ClientCredentials{TokenURL: "/token", ClientID: "id", ClientSecret: "secret-v"}}, "auth.oauth2_client_credentials.token_url must be an absolute http or https URL"},
		{"oauth2 without secret", webhooks.Auth{OAuth2: &webhooks.OAuth2ClientCredentials{TokenURL: "https://a/t", ClientID: "id"}}, "auth.oauth2_client_credentials.client_secret is required and must not contain control characters"},
		{"oauth2 scope with space", webhooks.Auth{OAuth2: &webhooks.OAuth2ClientCredentials{TokenURL: "https://a/t", ClientID: "id", ClientSecret: "secret-v", Scopes: []string{"a b"}}}, "auth.oauth2_client_credentials.scopes must be single words without spaces or control characters"},
		{"google with node credentials", webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: "https://x.run.app"}}, ""},
		{"google with a key", webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: "https://x.run.app", CredentialsJSON: key}}, ""},
		{"google without audience", webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{}}, "auth.google_id_token.audience is required and must be a URL or name without user information or control characters"},
		{"google external account", webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: "a", CredentialsJSON: `{"type":"external_account","credential_source":{"file":"/etc/secret-v"}}`}}, `auth.google_id_token.credentials_json must be a service account key (JSON with "type": "service_account", "client_email" and "private_key")`},
		{"client certificate with bearer", webhooks.Auth{ClientCert: cert, BearerToken: "tok"}, ""},
		{"client certificate with sigv4", webhooks.Auth{ClientCert: cert, AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1"}}, ""},
		{"client certificate without key", webhooks.Auth{ClientCert: &webhooks.ClientCert{CertPEM: cert.CertPEM}}, "auth.client_certificate must hold a PEM certificate (cert_pem) and its matching private key (key_pem)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.auth.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "secret-v") {
				t.Errorf("the error shows a value: %s", got)
			}
		})
	}
}

func TestAuthStringNamesTheFaaSCredentialsWithoutTheirValues(t *testing.T) {
	a := webhooks.Auth{AWSSigV4: &webhooks.AWSSigV4{Region: "eu-west-1"}, ClientCert: &webhooks.ClientCert{CertPEM: "c", KeyPEM: "secret-key"},
		GoogleIDToken: &webhooks.GoogleIDToken{Audience: "a", CredentialsJSON: "secret-json"},
		OAuth2:        &webhooks.OAuth2ClientCredentials{ClientSecret: "secret-cs"}}
	want := "Auth{aws_sigv4: eu-west-1/lambda, google_id_token: [REDACTED], oauth2_client_credentials: [REDACTED], client_certificate: [REDACTED]}"
	for _, got := range []string{a.String(), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", &a)} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}
