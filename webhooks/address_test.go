package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// addressMatrix is every address the policy is tested on, with the reason
// the zero policy gives ("" for allowed). The registration, dial and
// redirect tests all walk it, so a range refused at one layer and let
// through at another shows up.
var addressMatrix = []struct {
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
	{"100.64.0.1", "a special-purpose address (100.64.0.0/10)"},
	{"100.127.255.255", "a special-purpose address (100.64.0.0/10)"},
	{"0.0.0.0", "an unspecified address"},
	{"0.1.2.3", "a special-purpose address (0.0.0.0/8)"},
	{"224.0.0.1", "a multicast address"},
	{"239.255.255.250", "a multicast address"},
	{"255.255.255.255", "a special-purpose address (240.0.0.0/4)"},
	{"240.0.0.1", "a special-purpose address (240.0.0.0/4)"},
	{"192.0.0.1", "a special-purpose address (192.0.0.0/24)"},
	{"192.0.0.170", "a special-purpose address (192.0.0.0/24)"},
	{"198.18.0.1", "a special-purpose address (198.18.0.0/15)"},
	{"198.19.255.254", "a special-purpose address (198.18.0.0/15)"},
	{"192.0.2.1", "a special-purpose address (192.0.2.0/24)"},
	{"198.51.100.7", "a special-purpose address (198.51.100.0/24)"},
	{"203.0.113.9", "a special-purpose address (203.0.113.0/24)"},
	{"192.88.99.1", "a special-purpose address (192.88.99.0/24)"},
	{"8.8.8.8", ""},
	{"93.184.216.34", ""},
	{"100.128.0.1", ""},
	{"172.32.0.1", ""},
	{"198.20.0.1", ""},
	// IPv6
	{"::1", "a loopback address"},
	{"::", "an unspecified address"},
	{"fc00::1", "a private address"},
	{"fd12:3456::1", "a private address"},
	{"fd00:ec2::254", "a cloud metadata address"},
	{"fec0::1", "a special-purpose address (outside 2000::/3)"},
	{"fe80::1", "a link-local address"},
	{"fe80::1%eth0", "a link-local address"},
	{"ff02::1", "a multicast address"},
	{"2001:db8::1", "a special-purpose address (2001:db8::/32)"},
	{"3fff::1", "a special-purpose address (3fff::/20)"},
	{"100::1", "a special-purpose address (outside 2000::/3)"},
	{"2001::1", "a special-purpose address (2001::/23)"},                              // Teredo
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "a special-purpose address (2001::/23)"}, // Teredo
	{"2001:2::1", "a special-purpose address (2001::/23)"},                            // benchmarking
	{"2001:4860:4860::8888", ""},
	{"2606:4700::1111", ""},
	// IPv4 in IPv6
	{"::127.0.0.1", "a special-purpose address (outside 2000::/3)"},        // IPv4-compatible
	{"::7f00:1", "a special-purpose address (outside 2000::/3)"},           // the same, in hex
	{"::8.8.8.8", "a special-purpose address (outside 2000::/3)"},          // IPv4-compatible, deprecated
	{"::ffff:0:127.0.0.1", "a special-purpose address (outside 2000::/3)"}, // IPv4-translated
	{"::ffff:127.0.0.1", "a loopback address (IPv4-mapped)"},
	{"::ffff:10.0.0.1", "a private address (IPv4-mapped)"},
	{"::ffff:169.254.169.254", "a cloud metadata address (IPv4-mapped)"},
	{"::ffff:198.18.0.1", "a special-purpose address (198.18.0.0/15) (IPv4-mapped)"},
	{"::ffff:8.8.8.8", ""},
	{"64:ff9b::7f00:1", "a loopback address (NAT64)"},
	{"64:ff9b::a9fe:a9fe", "a cloud metadata address (NAT64)"},
	{"64:ff9b::c000:201", "a special-purpose address (192.0.2.0/24) (NAT64)"},
	{"64:ff9b::808:808", ""},
	{"64:ff9b:1::7f00:1", "a special-purpose address (outside 2000::/3)"}, // local-use NAT64
	{"64:ff9b:1::808:808", "a special-purpose address (outside 2000::/3)"},
	{"2002:a9fe:a9fe::1", "a special-purpose address (2002::/16)"}, // 6to4
	{"2002:808:808::1", "a special-purpose address (2002::/16)"},
}

func TestForbiddenClassifiesEveryRefusedRange(t *testing.T) {
	for _, tt := range addressMatrix {
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

// matrixURLs is addressMatrix as URLs: the zoned address cannot be one.
func matrixURLs() (tests []struct{ url, ip, want string }) {
	for _, tt := range addressMatrix {
		ip := netip.MustParseAddr(tt.ip)
		if ip.Zone() != "" {
			continue
		}
		host := ip.String()
		if ip.Is6() {
			// Keep the spelling under test ([::127.0.0.1], not [::7f00:1]).
			host = "[" + tt.ip + "]"
		}
		tests = append(tests, struct{ url, ip, want string }{"http://" + host + ":8080/hook?token=s3cret", tt.ip, tt.want})
	}
	return tests
}

func TestCheckURLRefusesEverySpecialPurposeAddressAtRegistration(t *testing.T) {
	for _, tt := range matrixURLs() {
		t.Run(tt.ip, func(t *testing.T) {
			err := webhooks.AddressPolicy{Resolver: offlineResolver()}.CheckURL(context.Background(), tt.url)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckURL(%q) = %v, want nil", tt.url, err)
				}
				return
			}
			var fa *webhooks.ErrForbiddenAddress
			if !errors.As(err, &fa) || fa.Reason != tt.want || !errors.Is(err, webhooks.ErrInvalidURL) {
				t.Fatalf("CheckURL(%q) = %v, want an ErrInvalidURL with reason %q", tt.url, err, tt.want)
			}
			if err := (webhooks.AddressPolicy{AllowPrivate: true}).CheckURL(context.Background(), tt.url); err != nil {
				t.Errorf("with AllowPrivate, CheckURL(%q) = %v, want nil", tt.url, err)
			}
		})
	}
}

// The dial and redirect tests send to refused addresses only: the dialer's
// Control hook stops them before a packet leaves. Allowed addresses are
// public and never dialled from a test.
func TestSendRefusesEverySpecialPurposeAddressAtDialTime(t *testing.T) {
	c := newStrictClient(t, webhooks.ClientConfig{
		Policy:  webhooks.AddressPolicy{Resolver: offlineResolver()},
		Timeout: 2 * time.Second,
	})
	for _, tt := range matrixURLs() {
		if tt.want == "" {
			continue // allowed addresses are public: never dialled from a test
		}
		t.Run(tt.ip, func(t *testing.T) {
			// The kernel dials an IPv4-mapped address as IPv4, and Control
			// sees it so.
			want := strings.TrimSuffix(tt.want, " (IPv4-mapped)")

			a := c.Send(context.Background(), &webhooks.Request{URL: tt.url}, 1)

			var fa *webhooks.ErrForbiddenAddress
			if !errors.As(a.Err, &fa) || fa.Reason != want {
				t.Fatalf("Send(%s) err = %v, want *ErrForbiddenAddress with reason %q", tt.url, a.Err, want)
			}
			if got := webhooks.Classify(a); got != webhooks.OutcomeFinal {
				t.Errorf("Classify = %s, want final", got)
			}
		})
	}
}

// newEndpointOn starts a server on ip (a loopback address other than
// 127.0.0.1, say) that answers every request with handle.
func newEndpointOn(t *testing.T, ip netip.Addr, handle func(http.ResponseWriter, *http.Request, int)) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(w, r, 1) }))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func TestSendRefusesARedirectToEverySpecialPurposeAddress(t *testing.T) {
	// The first hop stands for a public endpoint: it is the one address the
	// strict policy lets through, and it listens on 127.0.0.2 so that the
	// redirect to 127.0.0.1 is judged like any other.
	firstHop := netip.MustParseAddr("127.0.0.2")
	var location atomic.Value
	ep := newEndpointOn(t, firstHop, redirectTo(http.StatusTemporaryRedirect, func() string { return location.Load().(string) }))
	c := newStrictClient(t, webhooks.ClientConfig{
		FollowRedirects: 5,
		Policy:          webhooks.ExemptForTest(webhooks.AddressPolicy{Resolver: offlineResolver()}, firstHop),
		Timeout:         2 * time.Second,
	})
	for _, tt := range matrixURLs() {
		if tt.want == "" {
			continue // allowed addresses are public: never dialled from a test
		}
		t.Run(tt.ip, func(t *testing.T) {
			location.Store(tt.url)

			a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL + "/hook"}, 1)

			var fa *webhooks.ErrForbiddenAddress
			if !errors.Is(a.Err, webhooks.ErrRedirectRefused) || !errors.As(a.Err, &fa) || fa.Reason != tt.want {
				t.Fatalf("Send via a redirect to %s: status %d, err %v; want ErrRedirectRefused with reason %q", tt.url, a.Status, a.Err, tt.want)
			}
			if got := webhooks.Classify(a); got != webhooks.OutcomeFinal {
				t.Errorf("Classify = %s, want final", got)
			}
			if strings.Contains(a.Err.Error(), "s3cret") {
				t.Errorf("error %q leaks the query string", a.Err)
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

func TestSendErrorsDoNotNameTheResolver(t *testing.T) {
	// The offline resolver fails every query the way an unreachable
	// nameserver does: the *net.DNSError it yields names the nameserver of
	// /etc/resolv.conf (or the 127.0.0.1:53 default).
	c := newStrictClient(t, webhooks.ClientConfig{Policy: webhooks.AddressPolicy{Resolver: offlineResolver()}})

	a := c.Send(context.Background(), &webhooks.Request{URL: "https://no-such-host.example/hook?token=s3cret"}, 1)

	var de *net.DNSError
	if !errors.As(a.Err, &de) {
		t.Fatalf("Send err = %v, want a *net.DNSError", a.Err)
	}
	if de.Server != "" {
		t.Errorf("DNSError.Server = %q, want it cleared", de.Server)
	}
	msg := a.Err.Error()
	if resolverAddr := regexp.MustCompile(` on [^ ]+:53\b`); resolverAddr.MatchString(msg) {
		t.Errorf("error %q names the resolver", msg)
	}
	if want := "lookup no-such-host.example: no DNS in tests"; !strings.Contains(msg, want) {
		t.Errorf("error %q does not contain %q", msg, want)
	}
	if got := webhooks.Classify(a); got != webhooks.OutcomeRetry {
		t.Errorf("Classify = %s, want retry: a DNS failure may pass", got)
	}
}

// unreachableResolver fails every query as a nameserver behind a network
// that is down does: the dial error names the nameserver's address, and
// so does the *net.DNSError's reason built from it.
func unreachableResolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(_ context.Context, network, _ string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: network, Addr: &net.UDPAddr{IP: net.IPv4(10, 255, 255, 53), Port: 53},
				Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}
		},
	}
}

// The resolver's address stays out of errors also when the resolver
// cannot be reached: in CheckURL's answer to the user and in attempt
// errors of both transports, which reach dead-letter headers.
func TestErrorsDoNotNameAnUnreachableResolver(t *testing.T) {
	policy := webhooks.AddressPolicy{Resolver: unreachableResolver()}
	errs := map[string]error{"CheckURL": policy.CheckURL(context.Background(), "http://hooks.example/in")}
	for _, netOnly := range []bool{false, true} {
		c := newClient(t, webhooks.ClientConfig{Policy: policy, NetHTTPOnly: netOnly})
		a := c.Send(context.Background(), &webhooks.Request{URL: "http://hooks.example/in", Body: []byte("{}")}, 1)
		errs[fmt.Sprintf("Send, net/http only %v", netOnly)] = a.Err
	}
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "10.255.255.53") || !strings.Contains(msg, "network is unreachable") {
			t.Errorf("%s: %q; want the reason without the resolver's address", name, msg)
		}
	}
}
