package connect

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// tlsFiles names the PEM files of one TLS client and the fields they came
// from, so that errors name the right field.
type tlsFiles struct {
	caFile, certFile, keyFile    string
	caField, certField, keyField string
}

// check reports a client certificate without its key or the reverse.
func (f tlsFiles) check() error {
	switch {
	case f.certFile != "" && f.keyFile == "":
		return fieldWrap(f.certField, errCertWithoutKey)
	case f.keyFile != "" && f.certFile == "":
		return fieldWrap(f.keyField, errKeyWithoutCert)
	}
	return nil
}

// apply loads the files into cfg: the CA replaces the system roots, the
// certificate and key become the client certificate.
func (f tlsFiles) apply(cfg *tls.Config) error {
	if err := f.check(); err != nil {
		return err
	}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return fieldWrap(f.caField, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fieldErr(f.caField, "%s holds no PEM certificate", f.caFile)
		}
		cfg.RootCAs = pool
	}
	if f.certFile != "" {
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			// Whether the certificate or the key is wrong, the pair is
			// named by its certificate.
			return fieldWrap(f.certField, fmt.Errorf("load key pair (%s, %s): %w", f.certFile, f.keyFile, err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return nil
}
