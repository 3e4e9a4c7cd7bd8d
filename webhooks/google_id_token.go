package webhooks

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/compute/metadata"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
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
	// "service_account"). Empty uses the node's own credentials: the
	// service account key that GOOGLE_APPLICATION_CREDENTIALS names if it
	// is set, else the metadata server on GCP (workload identity
	// included). Other kinds of credentials files (impersonated or
	// external accounts) are refused at the first delivery. A key's
	// token_uri is egress like the endpoint: the client's address policy
	// applies. The node's own credentials are trusted as its environment
	// is.
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
// before they expire. A key is signed into a JWT assertion and exchanged
// at its token_uri by x/oauth2's JWT flow, through the client in egress
// (see oauth2.HTTPClient), so that a token_uri written by an API client
// faces the address policy. The node's own credentials use the default
// client, since the metadata server is an address the policy refuses.
func (g *GoogleIDToken) tokenSource(egress context.Context) (oauth2.TokenSource, error) {
	if g.CredentialsJSON != "" {
		return serviceAccountIDTokens(egress, []byte(g.CredentialsJSON), g.Audience)
	}
	if file := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); file != "" {
		key, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("GOOGLE_APPLICATION_CREDENTIALS: %w", err)
		}
		var kind struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(key, &kind) != nil || kind.Type != "service_account" {
			return nil, fmt.Errorf("GOOGLE_APPLICATION_CREDENTIALS: %s is not a service account key (type %q); "+
				"keyhook mints ID tokens from a service account key or the metadata server", file, kind.Type)
		}
		return serviceAccountIDTokens(context.Background(), key, g.Audience)
	}
	return oauth2.ReuseTokenSource(nil, &metadataIDTokens{
		client:   metadata.NewWithOptions(&metadata.Options{UseDefaultClient: true}),
		audience: g.Audience,
	}), nil
}

// serviceAccountIDTokens returns a reusing source of ID tokens for
// audience, signed by key, whose token requests use the client in ctx.
func serviceAccountIDTokens(ctx context.Context, key []byte, audience string) (oauth2.TokenSource, error) {
	cfg, err := google.JWTConfigFromJSON(key)
	if err != nil {
		return nil, errors.New("the service account key does not parse")
	}
	cfg.UseIDToken = true
	cfg.PrivateClaims = map[string]any{"target_audience": audience}
	return cfg.TokenSource(ctx), nil // already a reusing source
}

// identityPath is the metadata server's ID token of the instance's
// service account, relative to /computeMetadata/v1/.
const identityPath = "instance/service-accounts/default/identity"

// metadataIDTokens asks the metadata server for ID tokens, as a Cloud Run
// service, a GKE pod with workload identity or a VM gets them.
type metadataIDTokens struct {
	client   *metadata.Client
	audience string
}

func (m *metadataIDTokens) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tokenRequestTimeout)
	defer cancel()
	// format=full adds the instance's project and zone to the claims, as
	// Google's own libraries ask.
	raw, err := m.client.GetWithContext(ctx, identityPath+"?"+url.Values{"audience": {m.audience}, "format": {"full"}}.Encode())
	if err != nil {
		return nil, fmt.Errorf("the metadata server: %w", err)
	}
	exp, err := jwtExpiry(raw)
	if err != nil {
		return nil, fmt.Errorf("the metadata server answered an unusable token: %w", err)
	}
	return &oauth2.Token{AccessToken: raw, TokenType: "Bearer", Expiry: exp}, nil
}

// jwtExpiry reads the exp claim of a compact JWT without checking its
// signature: the token is the endpoint's to verify; the node only needs
// to know when to ask for another.
func jwtExpiry(raw string) (time.Time, error) {
	parts := strings.Split(strings.TrimSpace(raw), ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("not a compact JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, errors.New("its payload is not base64url")
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, errors.New("its payload is not a JSON object")
	}
	exp, err := claims.Exp.Int64()
	if err != nil || exp <= 0 {
		return time.Time{}, errors.New("it has no exp claim")
	}
	return time.Unix(exp, 0), nil
}
