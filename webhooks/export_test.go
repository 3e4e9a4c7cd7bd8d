package webhooks

import "crypto/x509"

// TrustRootsForTest makes c trust the certificates of pool, so tests can
// reach httptest TLS servers; production clients trust the system roots.
func TrustRootsForTest(c *Client, pool *x509.CertPool) {
	c.tr.TLSClientConfig.RootCAs = pool
}
