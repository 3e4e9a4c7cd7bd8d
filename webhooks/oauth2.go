package webhooks

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAuth2ClientCredentials gets an access token with the OAuth 2.0 client
// credentials grant (RFC 6749, section 4.4) and sends it as
// "Authorization: Bearer <token>". A token is requested once and reused
// until shortly before it expires, by every delivery of the node that uses
// the same credentials: one token request per expiry, not per delivery.
type OAuth2ClientCredentials struct {
	// TokenURL is the authorization server's token endpoint, http or
	// https. It is egress like the endpoint: the client's address policy
	// applies.
	TokenURL string
	// ClientID and ClientSecret authenticate keyhook to the server.
	ClientID, ClientSecret string
	// Scopes are requested with the token; empty requests the default.
	Scopes []string
}

func (o *OAuth2ClientCredentials) validate() error {
	if o == nil {
		return nil
	}
	u, err := url.Parse(o.TokenURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errors.New("auth.oauth2_client_credentials.token_url must be an absolute http or https URL")
	case u.User != nil:
		return errors.New("auth.oauth2_client_credentials.token_url must not contain user information")
	case o.ClientID == "" || hasControl(o.ClientID):
		return errors.New("auth.oauth2_client_credentials.client_id is required and must not contain control characters")
	case o.ClientSecret == "" || hasControl(o.ClientSecret):
		return errors.New("auth.oauth2_client_credentials.client_secret is required and must not contain control characters")
	}
	for _, s := range o.Scopes {
		if s == "" || hasControl(s) || strings.ContainsAny(s, " \t") {
			return errors.New("auth.oauth2_client_credentials.scopes must be single words without spaces or control characters")
		}
	}
	return nil
}

func (o *OAuth2ClientCredentials) cacheKey() string {
	return "oauth2\x00" + o.TokenURL + "\x00" + o.ClientID + "\x00" + o.ClientSecret + "\x00" + strings.Join(o.Scopes, " ")
}

// tokenSource returns a source of tokens that asks the server only when
// the last token is about to expire. egress carries the HTTP client the
// requests go through (see oauth2.HTTPClient).
func (o *OAuth2ClientCredentials) tokenSource(egress context.Context) oauth2.TokenSource {
	cfg := &clientcredentials.Config{
		ClientID:     o.ClientID,
		ClientSecret: o.ClientSecret,
		TokenURL:     o.TokenURL,
		Scopes:       o.Scopes,
	}
	return cfg.TokenSource(egress) // already a reusing source
}
