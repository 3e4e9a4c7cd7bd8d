package connect

import (
	"crypto/tls"
	"net/url"

	"github.com/keyhook/keyhook/schemas"
)

// SchemaRegistryConfig is how the node reaches its Schema Registry. The
// zero value means none: subscriptions of the avro, protobuf and
// json_schema formats are then refused.
type SchemaRegistryConfig struct {
	// URL is the registry's base URL (http:// or https://).
	URL string
	// Username and Password authenticate with HTTP basic auth.
	Username, Password string
	// BearerToken authenticates with a bearer token instead.
	BearerToken string
	// TLSCAFile is a PEM file of the certificate authorities that sign the
	// registry's certificate, instead of the system roots (https URLs).
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate and its key
	// for mutual TLS; one needs the other.
	TLSCertFile, TLSKeyFile string
}

func (c SchemaRegistryConfig) tlsFiles() tlsFiles {
	return tlsFiles{
		caFile: c.TLSCAFile, certFile: c.TLSCertFile, keyFile: c.TLSKeyFile,
		caField: "TLSCAFile", certField: "TLSCertFile", keyField: "TLSKeyFile",
	}
}

// Validate reports the first field of c that is wrong, without reading
// any file; errors are *FieldError.
func (c SchemaRegistryConfig) Validate() error {
	if c.URL == "" {
		for _, f := range []struct{ name, value string }{
			{"Username", c.Username}, {"Password", c.Password}, {"BearerToken", c.BearerToken},
			{"TLSCAFile", c.TLSCAFile}, {"TLSCertFile", c.TLSCertFile}, {"TLSKeyFile", c.TLSKeyFile},
		} {
			if f.value != "" {
				return fieldErr(f.name, "is set, but URL is not")
			}
		}
		return nil
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldErr("URL", "is %q, want http://host:port or https://host:port", c.URL)
	}
	switch {
	case c.Username != "" && c.BearerToken != "":
		return fieldErr("BearerToken", "is set with Username: choose basic auth or a bearer token")
	case c.Password != "" && c.Username == "":
		return fieldErr("Password", "is set, but Username is not")
	case u.Scheme != "https" && c.TLSCAFile != "":
		return fieldErr("TLSCAFile", "needs an https:// URL")
	case u.Scheme != "https" && c.TLSCertFile != "":
		return fieldErr("TLSCertFile", "needs an https:// URL")
	}
	return c.tlsFiles().check()
}

// SchemaRegistry returns the registry configuration c describes, its TLS
// files loaded, so that a missing or malformed file stops the start;
// errors are *FieldError. The zero c gives the zero schemas.Config (no
// registry).
func SchemaRegistry(c SchemaRegistryConfig) (schemas.Config, error) {
	if err := c.Validate(); err != nil || c.URL == "" {
		return schemas.Config{}, err
	}
	cfg := schemas.Config{URL: c.URL, Username: c.Username, Password: c.Password, BearerToken: c.BearerToken}
	if f := c.tlsFiles(); f.caFile != "" || f.certFile != "" {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if err := f.apply(cfg.TLS); err != nil {
			return schemas.Config{}, err
		}
	}
	return cfg, nil
}
