package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/idtoken"
)

// GoogleIDToken sends a Google-signed OpenID Connect ID token as
// "Authorization: Bearer <token>", as a private Cloud Run service or a
// Cloud Functions (2nd gen) function expects. Tokens are minted for
// Audience and refreshed shortly before they expire (they last one hour).
type GoogleIDToken struct {
	// Audience is the token's aud claim: the receiving service's URL or a
	// custom audience it is configured with. Required.
	Audience string
	// CredentialsJSON is a service account key (JSON, "type":
	// "service_account"). Empty uses the node's Application Default
	// Credentials: the metadata server on GCP (workload identity
	// included), or GOOGLE_APPLICATION_CREDENTIALS. A key's token_uri is
	// egress like the endpoint: the client's address policy applies. The
	// node's own credentials are trusted as its environment is.
	CredentialsJSON string
}

func (g *GoogleIDToken) validate() error {
	if g == nil {
		return nil
	}
	u, err := url.Parse(g.Audience)
	if g.Audience == "" || hasControl(g.Audience) || (err == nil && u.User != nil) {
		return errors.New("auth.google_id_token.audience is required and must be a URL or name without user information or control characters")
	}
	if g.CredentialsJSON == "" {
		return nil
	}
	var key struct {
		Type       string `json:"type"`
		PrivateKey string `json:"private_key"`
		Email      string `json:"client_email"`
		TokenURI   string `json:"token_uri"`
	}
	// Only service account keys: other credential configurations
	// (external accounts) make the library read files and call URLs they
	// name, which an API client must not choose.
	if err := json.Unmarshal([]byte(g.CredentialsJSON), &key); err != nil || key.Type != "service_account" ||
		key.PrivateKey == "" || key.Email == "" {
		return errors.New(`auth.google_id_token.credentials_json must be a service account key (JSON with "type": "service_account", "client_email" and "private_key")`)
	}
	if key.TokenURI != "" {
		if u, err := url.Parse(key.TokenURI); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("auth.google_id_token.credentials_json: token_uri must be an absolute http or https URL")
		}
	}
	return nil
}

func (g *GoogleIDToken) cacheKey() string {
	return "google\x00" + g.Audience + "\x00" + g.CredentialsJSON
}

// tokenSource returns a source of ID tokens for g, reused until shortly
// before they expire. The node's own credentials use idtoken and its
// default client, since the metadata server is an address the policy
// refuses. A key is signed into a JWT assertion and exchanged at its
// token_uri by x/oauth2's JWT flow, through the client in egress (see
// oauth2.HTTPClient): the same exchange idtoken makes, but idtoken's
// newer service account path takes no HTTP client, and its token_uri,
// written by an API client, must face the address policy.
func (g *GoogleIDToken) tokenSource(egress context.Context) (oauth2.TokenSource, error) {
	if g.CredentialsJSON == "" {
		return idtoken.NewTokenSource(context.Background(), g.Audience)
	}
	cfg, err := google.JWTConfigFromJSON([]byte(g.CredentialsJSON))
	if err != nil {
		return nil, errors.New("the service account key does not parse")
	}
	cfg.UseIDToken = true
	cfg.PrivateClaims = map[string]any{"target_audience": g.Audience}
	return cfg.TokenSource(egress), nil // already a reusing source
}
