package webhooks_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// offlineResolver resolves from the hosts file only: any DNS query fails,
// so tests never leave the machine.
func offlineResolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no DNS in tests")
		},
	}
}

func TestForbiddenClassifiesEveryRefusedRange(t *testing.T) {
	tests := []struct {
		ip   string
		want string
	}{
		// IPv4
		{"127.0.0.1", "a loopback address"},
		{"127.255.0.9", "a loopback address"},
		{"10.1.2.3", "a private address"},
		{"172.16.0.1", "a private address"},
		{"172.31.255.254", "a private address"},
		{"192.168.1.1", "a private address"},
		{"169.254.1.1", "a link-local address"},
		{"169.254.169.254", "a cloud metadata address"},
		{"100.64.0.1", "a shared (CGNAT) address"},
		{"100.127.255.255", "a shared (CGNAT) address"},
		{"0.0.0.0", "an unspecified address"},
		{"0.1.2.3", "a reserved address"},
		{"224.0.0.1", "a multicast address"},
		{"239.255.255.250", "a multicast address"},
		{"255.255.255.255", "a broadcast address"},
		{"240.0.0.1", "a reserved address"},
		{"8.8.8.8", ""},
		{"100.128.0.1", ""},
		{"172.32.0.1", ""},
		// IPv6
		{"::1", "a loopback address"},
		{"::", "an unspecified address"},
		{"fc00::1", "a private address"},
		{"fd12:3456::1", "a private address"},
		{"fec0::1", "a private address"},
		{"fd00:ec2::254", "a cloud metadata address"},
		{"fe80::1", "a link-local address"},
		{"fe80::1%eth0", "a link-local address"},
		{"ff02::1", "a multicast address"},
		{"2001:4860:4860::8888", ""},
		// IPv4 embedded in IPv6
		{"::ffff:127.0.0.1", "a loopback address (IPv4-mapped)"},
		{"::ffff:10.0.0.1", "a private address (IPv4-mapped)"},
		{"::ffff:169.254.169.254", "a cloud metadata address (IPv4-mapped)"},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::7f00:1", "a loopback address (NAT64)"},
		{"64:ff9b::808:808", ""},
		{"2002:a9fe:a9fe::1", "a cloud metadata address (6to4)"},
		{"2002:808:808::1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.ip)
			if got := (webhooks.AddressPolicy{}).Forbidden(ip); got != tt.want {
				t.Errorf("Forbidden(%s) = %q, want %q", tt.ip, got, tt.want)
			}
			if got := (webhooks.AddressPolicy{AllowPrivate: true}).Forbidden(ip); got != "" {
				t.Errorf("with AllowPrivate, Forbidden(%s) = %q, want allowed", tt.ip, got)
			}
		})
	}
}

func TestForbiddenRefusesTheInvalidAddressEvenWhenPrivateIsAllowed(t *testing.T) {
	for _, p := range []webhooks.AddressPolicy{{}, {AllowPrivate: true}} {
		if got := p.Forbidden(netip.Addr{}); got != "an invalid address" {
			t.Errorf("%+v: Forbidden(zero Addr) = %q, want %q", p, got, "an invalid address")
		}
	}
}

func TestCheckURLRefusesBadAndForbiddenURLsWithUserFacingErrors(t *testing.T) {
	tests := []struct {
		name          string
		url           string
		wantMsg       string // exact message, when stable across machines
		wantPrefix    string // otherwise, its start
		wantForbidden string // Reason of the wrapped *ErrForbiddenAddress
	}{
		{
			name:          "loopback literal",
			url:           "http://127.0.0.1/hook?token=s3cret",
			wantMsg:       "endpoint.url resolves to 127.0.0.1, a loopback address; set --allow-private-endpoints to allow",
			wantForbidden: "a loopback address",
		},
		{
			name:          "localhost resolves to loopback",
			url:           "http://localhost:8080/hook?token=s3cret",
			wantPrefix:    `endpoint.url host "localhost" resolves to `,
			wantForbidden: "a loopback address",
		},
		{
			name:          "IPv6 loopback",
			url:           "https://[::1]:8443/",
			wantMsg:       "endpoint.url resolves to ::1, a loopback address; set --allow-private-endpoints to allow",
			wantForbidden: "a loopback address",
		},
		{
			name:          "cloud metadata",
			url:           "http://169.254.169.254/latest/meta-data/",
			wantMsg:       "endpoint.url resolves to 169.254.169.254, a cloud metadata address; set --allow-private-endpoints to allow",
			wantForbidden: "a cloud metadata address",
		},
		{
			name:          "mapped private",
			url:           "http://[::ffff:10.0.0.1]/",
			wantMsg:       "endpoint.url resolves to ::ffff:10.0.0.1, a private address (IPv4-mapped); set --allow-private-endpoints to allow",
			wantForbidden: "a private address (IPv4-mapped)",
		},
		{
			name:    "ftp scheme",
			url:     "ftp://example.com/file?token=s3cret",
			wantMsg: `endpoint.url scheme must be http or https, not "ftp"`,
		},
		{
			name:    "relative",
			url:     "/hook",
			wantMsg: "endpoint.url must be an absolute http or https URL",
		},
		{
			name:    "missing host",
			url:     "http:///hook",
			wantMsg: "endpoint.url must have a host",
		},
		{
			name:    "userinfo",
			url:     "https://admin:hunter2@example.com/hook",
			wantMsg: "endpoint.url must not contain user information (user:password@); send credentials in headers instead",
		},
		{
			name:       "unparsable",
			url:        "http://example.com/%zz?token=s3cret",
			wantPrefix: "endpoint.url is not a valid URL: ",
		},
		{
			name:       "unresolvable host",
			url:        "https://no-such-host.example/hook?token=s3cret",
			wantPrefix: `endpoint.url host "no-such-host.example" does not resolve: `,
		},
	}
	policy := webhooks.AddressPolicy{Resolver: offlineResolver()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := policy.CheckURL(context.Background(), tt.url)
			if err == nil {
				t.Fatalf("CheckURL(%q) = nil, want an error", tt.url)
			}
			msg := err.Error()
			if tt.wantMsg != "" && msg != tt.wantMsg {
				t.Errorf("message:\n got %q\nwant %q", msg, tt.wantMsg)
			}
			if tt.wantPrefix != "" && !strings.HasPrefix(msg, tt.wantPrefix) {
				t.Errorf("message %q does not start with %q", msg, tt.wantPrefix)
			}
			for _, secret := range []string{"s3cret", "hunter2"} {
				if strings.Contains(msg, secret) {
					t.Errorf("message %q leaks %q", msg, secret)
				}
			}
			if !errors.Is(err, webhooks.ErrInvalidURL) {
				t.Errorf("errors.Is(%v, ErrInvalidURL) = false", err)
			}
			var fa *webhooks.ErrForbiddenAddress
			gotForbidden := ""
			if errors.As(err, &fa) {
				gotForbidden = fa.Reason
			}
			if gotForbidden != tt.wantForbidden {
				t.Errorf("forbidden reason = %q, want %q", gotForbidden, tt.wantForbidden)
			}
		})
	}
}

func TestCheckURLAcceptsPublicAndAllowedPrivateURLs(t *testing.T) {
	tests := []struct {
		name   string
		policy webhooks.AddressPolicy
		url    string
	}{
		{"public IPv4 literal", webhooks.AddressPolicy{}, "https://93.184.216.34/hook?x=1"},
		{"public IPv6 literal", webhooks.AddressPolicy{}, "http://[2001:4860:4860::8888]:8080/"},
		{"loopback when private allowed", webhooks.AddressPolicy{AllowPrivate: true}, "http://127.0.0.1:9000/"},
		{"localhost when private allowed", webhooks.AddressPolicy{AllowPrivate: true}, "http://localhost/hook"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.policy.Resolver = offlineResolver()
			if err := tt.policy.CheckURL(context.Background(), tt.url); err != nil {
				t.Errorf("CheckURL(%q) = %v, want nil", tt.url, err)
			}
		})
	}
}

func TestCheckURLReturnsContextErrorWhenCanceledDuringResolution(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := webhooks.AddressPolicy{Resolver: offlineResolver()}
	err := p.CheckURL(ctx, "https://no-such-host.example/")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("CheckURL with canceled ctx = %v, want context.Canceled", err)
	}
	if errors.Is(err, webhooks.ErrInvalidURL) {
		t.Errorf("a canceled check is not the user's fault, but the error wraps ErrInvalidURL: %v", err)
	}
}

func TestErrForbiddenAddressNamesHostAndAddress(t *testing.T) {
	tests := []struct {
		err  webhooks.ErrForbiddenAddress
		want string
	}{
		{
			webhooks.ErrForbiddenAddress{Host: "internal.example", Addr: netip.MustParseAddr("10.0.0.7"), Reason: "a private address"},
			"webhooks: refusing to connect to 10.0.0.7 (internal.example), a private address",
		},
		{
			webhooks.ErrForbiddenAddress{Host: "127.0.0.1", Addr: netip.MustParseAddr("127.0.0.1"), Reason: "a loopback address"},
			"webhooks: refusing to connect to 127.0.0.1, a loopback address",
		},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.err.Error()); diff != "" {
			t.Errorf("Error() mismatch (-want +got):\n%s", diff)
		}
	}
}
