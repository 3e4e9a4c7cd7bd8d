package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"code.dny.dev/ssrf"
)

// ErrInvalidURL is wrapped by every error that [AddressPolicy.CheckURL]
// returns for bad input (including forbidden addresses), and by [Client.Send]
// when a request's URL cannot be sent at all. Such an attempt is final:
// retrying cannot fix the URL.
var ErrInvalidURL = errors.New("webhooks: invalid url")

// AddressPolicy decides which destination IP addresses egress may reach.
//
// The zero value refuses every address in the IANA IPv4 and IPv6
// special-purpose address registries (loopback, private, link-local, shared
// (CGNAT), documentation, benchmarking, protocol assignments, Teredo, 6to4,
// ORCHIDv2, reserved, ...), multicast, and every IPv6 address outside global
// unicast (2000::/3): IPv4-compatible (::a.b.c.d), IPv4-translated
// (::ffff:0:a.b.c.d), local-use NAT64 (64:ff9b:1::/48), discard (100::/64),
// unique local (fc00::/7, cloud metadata fd00:ec2::254 among them). The
// ranges come from code.dny.dev/ssrf, which generates them from the IANA
// registries, so they are not kept by hand here.
//
// Two forms carry an IPv4 address that is judged instead of the IPv6 one:
// IPv4-mapped addresses (::ffff:a.b.c.d), which the kernel dials as IPv4, and
// the well-known NAT64 prefix 64:ff9b::/96, so that IPv6-only deployments
// behind DNS64 reach public IPv4 endpoints while a NAT64 form of a refused
// IPv4 address stays refused.
type AddressPolicy struct {
	// AllowPrivate allows every address, metadata endpoints included. It is
	// an operator switch for deployments whose endpoints live on a private
	// network (development, in-cluster services) and is all or nothing on
	// purpose: a partial allow list would look safe while still exposing
	// whatever the operator forgot.
	AllowPrivate bool
	// Resolver resolves host names in CheckURL and at dial time. Nil means
	// net.DefaultResolver.
	Resolver *net.Resolver

	// exempt is one address allowed whatever the policy says. Only tests set
	// it (export_test.go), so that a strict policy can reach a loopback test
	// server while every other address is judged as in production.
	exempt netip.Addr
}

// specialPurpose refuses the IANA special-purpose ranges. Ports and
// networks are not its business here: endpoints may use any port, and the
// dialer only dials TCP.
var specialPurpose = ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork())

// Addresses that get a precise reason: both also fall in broader ranges, and
// the precise reason is the one an operator needs to read.
var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")
)

// Forbidden reports why ip may not be reached, as a phrase such as
// "a loopback address", or "" when it is allowed. With AllowPrivate every
// valid address is allowed.
func (p AddressPolicy) Forbidden(ip netip.Addr) string {
	if !ip.IsValid() {
		// Fail closed: an address we cannot read is not one we can vouch for.
		return "an invalid address"
	}
	ip = ip.WithZone("")
	if p.AllowPrivate || p.exempt.IsValid() && ip == p.exempt {
		return ""
	}
	return forbiddenReason(ip)
}

func forbiddenReason(ip netip.Addr) string {
	if ip.Is4In6() {
		if r := forbiddenReason(ip.Unmap()); r != "" {
			return r + " (IPv4-mapped)"
		}
		return ""
	}
	// A well-known NAT64 address is reached through a gateway that dials
	// the IPv4 address it carries, so that address is the one to judge.
	if ssrf.IPv6NAT64Prefix.Contains(ip) {
		b := ip.As16()
		if r := forbiddenReason(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return r + " (NAT64)"
		}
		return ""
	}
	if specialPurpose.SafeAddr(ip) == nil {
		return ""
	}
	return describe(ip)
}

// describe names the kind of a refused address: in plain words for the
// kinds an operator meets every day, else by the special-purpose range that
// holds it.
func describe(ip netip.Addr) string {
	switch {
	case ip == metadataV4 || ip == metadataV6:
		return "a cloud metadata address"
	case ip.IsUnspecified():
		return "an unspecified address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast():
		return "a multicast address"
	}
	prefixes := ssrf.IPv4DeniedPrefixes
	if ip.Is6() {
		if !ssrf.IPv6GlobalUnicast.Contains(ip) {
			return "a special-purpose address (outside " + ssrf.IPv6GlobalUnicast.String() + ")"
		}
		prefixes = ssrf.IPv6DeniedPrefixes
	}
	for _, pfx := range prefixes {
		if pfx.Contains(ip) {
			return "a special-purpose address (" + pfx.String() + ")"
		}
	}
	return "a special-purpose address"
}

// ErrForbiddenAddress is the error of a connection refused by an
// [AddressPolicy]. The dialer of a [Client] returns it (wrapped in the usual
// *url.Error and *net.OpError) and [AddressPolicy.CheckURL] wraps it; callers
// find it with errors.As. A delivery that meets it is final.
type ErrForbiddenAddress struct {
	// Host is the host name of the URL, when known; it equals Addr for IP
	// literals.
	Host string
	// Addr is the refused address.
	Addr netip.Addr
	// Reason is the phrase returned by [AddressPolicy.Forbidden].
	Reason string
}

// Error implements error.
func (e *ErrForbiddenAddress) Error() string {
	if e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("webhooks: refusing to connect to %s (%s), %s", e.Addr, e.Host, e.Reason)
	}
	return fmt.Sprintf("webhooks: refusing to connect to %s, %s", e.Addr, e.Reason)
}

// checkError is a user-facing message that still unwraps to the errors it
// stands for, so callers can branch with errors.Is/As while showing the
// message as is.
type checkError struct {
	msg  string
	errs []error
}

func (e *checkError) Error() string   { return e.msg }
func (e *checkError) Unwrap() []error { return e.errs }

func invalidURL(format string, args ...any) error {
	return &checkError{msg: fmt.Sprintf(format, args...), errs: []error{ErrInvalidURL}}
}

// CheckURL validates an endpoint URL at registration: the scheme must be http
// or https, the host present, no user information, and every address the
// host resolves to must be allowed by the policy. A host that does not
// resolve is refused too, since no delivery could reach it.
//
// Errors are meant for the user who registered the URL (they end up in a
// 400 response): they name the problem, never repeat the query string or
// credentials, wrap [ErrInvalidURL], and wrap *[ErrForbiddenAddress] when an
// address is refused. Only cancellation of ctx returns an error that does not
// wrap ErrInvalidURL.
func (p AddressPolicy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, query string included; keep only
		// the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return invalidURL("endpoint.url is not a valid URL: %v", err)
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return invalidURL("endpoint.url must be an absolute http or https URL")
	default:
		return invalidURL("endpoint.url scheme must be http or https, not %q", u.Scheme)
	}
	if u.User != nil {
		return invalidURL("endpoint.url must not contain user information (user:password@); send credentials in headers instead")
	}
	host := u.Hostname()
	if host == "" {
		return invalidURL("endpoint.url must have a host")
	}

	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = p.resolver().LookupNetIP(ctx, "ip", host)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("webhooks: resolve endpoint host: %w", context.Cause(ctx))
			}
			// A DNSError names the resolver's own address; the user needs
			// only the reason.
			reason := err.Error()
			var de *net.DNSError
			if errors.As(err, &de) {
				reason = dnsReason(de)
			}
			return invalidURL("endpoint.url host %q does not resolve: %s", host, reason)
		}
		// The resolver reports IPv4 answers in their IPv4-mapped form;
		// show the user the address they would recognise.
		for i, a := range addrs {
			addrs[i] = a.Unmap()
		}
		if len(addrs) == 0 {
			return invalidURL("endpoint.url host %q resolves to no address", host)
		}
	}
	for _, a := range addrs {
		reason := p.Forbidden(a)
		if reason == "" {
			continue
		}
		fa := &ErrForbiddenAddress{Host: host, Addr: a.WithZone(""), Reason: reason}
		subject := "endpoint.url"
		if fa.Host != fa.Addr.String() {
			subject = fmt.Sprintf("endpoint.url host %q", host)
		}
		return &checkError{
			msg:  fmt.Sprintf("%s resolves to %s, %s; set --allow-private-endpoints to allow", subject, fa.Addr, reason),
			errs: []error{ErrInvalidURL, fa},
		}
	}
	return nil
}

// withoutResolver returns err without the resolver's address that a
// *net.DNSError in it names ("lookup x on 127.0.0.53:53: no such host"):
// attempt errors reach API answers, test results and dead-letter headers,
// and the address of the node's resolver is none of their readers'
// business. The chain is copied, never changed in place: the resolver may
// hand the same error to concurrent lookups of the same name.
func withoutResolver(err error) error {
	var de *net.DNSError
	if !errors.As(err, &de) || de.Server == "" && dnsReason(de) == de.Err {
		return err
	}
	switch e := err.(type) {
	case *url.Error:
		c := *e
		c.Err = withoutResolver(e.Err)
		return &c
	case *net.OpError:
		c := *e
		c.Err = withoutResolver(e.Err)
		return &c
	case *net.DNSError:
		c := *e
		c.Err, c.Server = dnsReason(e), ""
		return &c
	}
	// A wrapper this function does not know: its text may still name the
	// resolver, so keep only what the DNS error says, and keep it findable.
	c := *de
	c.Err, c.Server = dnsReason(de), ""
	return &c
}

// dnsReason is what de says went wrong, without the resolver's address:
// a resolver that cannot be reached names itself in the reason too
// ("dial udp 10.255.255.53:53: connect: network is unreachable").
func dnsReason(de *net.DNSError) string {
	reason := de.Err
	for _, op := range []string{"dial ", "read ", "write "} {
		if strings.HasPrefix(reason, op) {
			if _, cause, ok := strings.Cut(reason, ": "); ok {
				return "resolver unreachable: " + cause
			}
		}
	}
	if de.Server != "" {
		reason = strings.ReplaceAll(reason, de.Server, "the resolver")
	}
	return reason
}

func (p AddressPolicy) resolver() *net.Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// redactURL keeps only the scheme and host of raw for error messages: query
// strings and, for hosted webhook services, paths routinely carry tokens.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	return u.Scheme + "://" + u.Host + redactedPath(u.Path)
}

func redactedPath(path string) string {
	if strings.Trim(path, "/") == "" {
		return ""
	}
	return "/..."
}
