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
