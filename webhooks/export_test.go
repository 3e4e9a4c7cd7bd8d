package webhooks

import (
	"crypto/x509"
	"net/netip"
	"time"
)

// TrustRootsForTest makes c trust the certificates of pool, so tests can
// reach httptest TLS servers; production clients trust the system roots.
func TrustRootsForTest(c *Client, pool *x509.CertPool) {
	c.tr.TLSClientConfig.RootCAs = pool
}

// ExemptForTest returns p allowing ip whatever else it refuses, so that a
// strict policy can reach one loopback test server.
func ExemptForTest(p AddressPolicy, ip netip.Addr) AddressPolicy {
	p.exempt = ip
	return p
}

// IdleConnTimeoutForTest is how long c keeps an idle connection.
func IdleConnTimeoutForTest(c *Client) time.Duration { return c.tr.IdleConnTimeout }

// ViaHTTP1ForTest reports whether an attempt of r, without credentials,
// goes through c's http1 client.
func ViaHTTP1ForTest(c *Client, r *Request) bool {
	eu, err := c.checkRequest(r)
	if err != nil {
		return false
	}
	return c.viaHTTP1(&call{r: r, url: eu})
}
