package webhooks

import (
	"crypto/tls"
	"errors"
	"net/http"
)

// ClientCert is the TLS client certificate presented to the endpoint
// (mutual TLS), PEM encoded. Connections made with one certificate are
// pooled apart from every other: a connection is never shared between
// subscriptions that authenticate differently.
type ClientCert struct {
	// CertPEM is the certificate, then any intermediates.
	CertPEM string
	// KeyPEM is its private key.
	KeyPEM string
}

func (c *ClientCert) validate() error {
	if c == nil {
		return nil
	}
	if _, err := c.parse(); err != nil {
		return errors.New("auth.client_certificate must hold a PEM certificate (cert_pem) and its matching private key (key_pem)")
	}
	return nil
}

func (c *ClientCert) parse() (tls.Certificate, error) {
	return tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
}

func (c *ClientCert) cacheKey() string { return "cert\x00" + c.CertPEM + "\x00" + c.KeyPEM }

// transportFor returns base's twin presenting c: same dialer, address
// policy and limits, its own connection pool.
func (c *ClientCert) transportFor(base *http.Transport) (*http.Transport, error) {
	cert, err := c.parse()
	if err != nil {
		return nil, err
	}
	tr := base.Clone()
	tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
	return tr, nil
}
