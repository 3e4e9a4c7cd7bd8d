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

// SchemaRegistry returns the registry configuration c describes, its TLS
// files loaded, so that a missing or malformed file stops the start;
// errors are *FieldError. The zero c gives the zero schemas.Config (no
// registry).
func SchemaRegistry(c SchemaRegistryConfig) (schemas.Config, error) {
	if c.URL == "" {
		for _, f := range []struct{ name, value string }{
			{"Username", c.Username}, {"Password", c.Password}, {"BearerToken", c.BearerToken},
			{"TLSCAFile", c.TLSCAFile}, {"TLSCertFile", c.TLSCertFile}, {"TLSKeyFile", c.TLSKeyFile},
		} {
			if f.value != "" {
				return schemas.Config{}, fieldErr(f.name, "is set, but URL is not")
			}
		}
		return schemas.Config{}, nil
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return schemas.Config{}, fieldErr("URL", "is %q, want http://host:port or https://host:port", c.URL)
	}
	if c.Username != "" && c.BearerToken != "" {
		return schemas.Config{}, fieldErr("BearerToken", "is set with Username: choose basic auth or a bearer token")
	}
	if c.Password != "" && c.Username == "" {
		return schemas.Config{}, fieldErr("Password", "is set, but Username is not")
	}
	cfg := schemas.Config{URL: c.URL, Username: c.Username, Password: c.Password, BearerToken: c.BearerToken}
	f := c.tlsFiles()
	if f.caFile != "" || f.certFile != "" || f.keyFile != "" {
		if u.Scheme != "https" {
			return schemas.Config{}, fieldErr("TLSCAFile", "TLS files need an https:// URL")
		}
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if err := f.apply(cfg.TLS); err != nil {
			return schemas.Config{}, err
		}
	}
	return cfg, nil
}
