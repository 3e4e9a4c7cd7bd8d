package webhooks_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// transportErr wraps err the way http.Client.Do reports a failed POST.
func transportErr(err error) error {
	return &url.Error{Op: "Post", URL: "http://endpoint.example", Err: err}
}

func dialErr(errno syscall.Errno) error {
	return transportErr(&net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}})
}

func TestClassifyDecidesByStatusThenByError(t *testing.T) {
	forbidden := &webhooks.ErrForbiddenAddress{Addr: netip.MustParseAddr("127.0.0.1"), Reason: "a loopback address"}
	tests := []struct {
		name string
		a    webhooks.Attempt
		want webhooks.Outcome
	}{
		// Statuses.
		{"101 switching protocols", webhooks.Attempt{Status: 101}, webhooks.OutcomeFinal},
		{"200 ok", webhooks.Attempt{Status: 200}, webhooks.OutcomeSuccess},
		{"202 accepted", webhooks.Attempt{Status: 202}, webhooks.OutcomeSuccess},
		{"204 no content", webhooks.Attempt{Status: 204}, webhooks.OutcomeSuccess},
		{"299", webhooks.Attempt{Status: 299}, webhooks.OutcomeSuccess},
		{"301 moved", webhooks.Attempt{Status: 301}, webhooks.OutcomeFinal},
		{"302 found", webhooks.Attempt{Status: 302}, webhooks.OutcomeFinal},
		{"304 not modified", webhooks.Attempt{Status: 304}, webhooks.OutcomeFinal},
		{"307 temporary redirect", webhooks.Attempt{Status: 307}, webhooks.OutcomeFinal},
		{"400 bad request", webhooks.Attempt{Status: 400}, webhooks.OutcomeFinal},
		{"401 unauthorized", webhooks.Attempt{Status: 401}, webhooks.OutcomeFinal},
		{"403 forbidden", webhooks.Attempt{Status: 403}, webhooks.OutcomeFinal},
		{"404 not found", webhooks.Attempt{Status: 404}, webhooks.OutcomeFinal},
		{"408 request timeout", webhooks.Attempt{Status: 408}, webhooks.OutcomeRetry},
		{"409 conflict", webhooks.Attempt{Status: 409}, webhooks.OutcomeFinal},
		{"410 gone", webhooks.Attempt{Status: 410}, webhooks.OutcomeFinal},
		{"413 too large", webhooks.Attempt{Status: 413}, webhooks.OutcomeFinal},
		{"422 unprocessable", webhooks.Attempt{Status: 422}, webhooks.OutcomeFinal},
		{"425 too early", webhooks.Attempt{Status: 425}, webhooks.OutcomeRetry},
		{"429 too many requests", webhooks.Attempt{Status: 429}, webhooks.OutcomeRetry},
		{"499", webhooks.Attempt{Status: 499}, webhooks.OutcomeFinal},
		{"500 internal error", webhooks.Attempt{Status: 500}, webhooks.OutcomeRetry},
		{"502 bad gateway", webhooks.Attempt{Status: 502}, webhooks.OutcomeRetry},
		{"503 unavailable", webhooks.Attempt{Status: 503}, webhooks.OutcomeRetry},
		{"504 gateway timeout", webhooks.Attempt{Status: 504}, webhooks.OutcomeRetry},
		{"599", webhooks.Attempt{Status: 599}, webhooks.OutcomeRetry},
		{"600 out of range", webhooks.Attempt{Status: 600}, webhooks.OutcomeFinal},
		{"status wins over a body read error", webhooks.Attempt{Status: 200, Err: io.ErrUnexpectedEOF}, webhooks.OutcomeSuccess},
		// Errors without a response.
		{"forbidden address", webhooks.Attempt{Err: transportErr(&net.OpError{Op: "dial", Net: "tcp", Err: forbidden})}, webhooks.OutcomeFinal},
		{"invalid url", webhooks.Attempt{Err: fmt.Errorf("%w: missing host", webhooks.ErrInvalidURL)}, webhooks.OutcomeFinal},
		{"connection refused", webhooks.Attempt{Err: dialErr(syscall.ECONNREFUSED)}, webhooks.OutcomeRetry},
		{"connection reset", webhooks.Attempt{Err: transportErr(&net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}})}, webhooks.OutcomeRetry},
		{"host unreachable", webhooks.Attempt{Err: dialErr(syscall.EHOSTUNREACH)}, webhooks.OutcomeRetry},
		{"EOF", webhooks.Attempt{Err: transportErr(io.EOF)}, webhooks.OutcomeRetry},
		{"unexpected EOF", webhooks.Attempt{Err: transportErr(io.ErrUnexpectedEOF)}, webhooks.OutcomeRetry},
		{"DNS no such host", webhooks.Attempt{Err: transportErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "gone.example", IsNotFound: true}})}, webhooks.OutcomeRetry},
		{"DNS timeout", webhooks.Attempt{Err: transportErr(&net.DNSError{Err: "i/o timeout", Name: "slow.example", IsTimeout: true})}, webhooks.OutcomeRetry},
		{"attempt timeout", webhooks.Attempt{Err: fmt.Errorf("webhooks: attempt timed out after 30s: %w", transportErr(context.DeadlineExceeded))}, webhooks.OutcomeRetry},
		{"response header timeout", webhooks.Attempt{Err: transportErr(errors.New("net/http: timeout awaiting response headers"))}, webhooks.OutcomeRetry},
		{"context canceled at shutdown", webhooks.Attempt{Err: transportErr(context.Canceled)}, webhooks.OutcomeRetry},
		{"TLS unknown authority", webhooks.Attempt{Err: transportErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}})}, webhooks.OutcomeRetry},
		{"no error and no status", webhooks.Attempt{}, webhooks.OutcomeRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhooks.Classify(tt.a); got != tt.want {
				t.Errorf("Classify(status %d, err %v) = %s, want %s", tt.a.Status, tt.a.Err, got, tt.want)
			}
		})
	}
}

func TestOutcomeStringNamesEachOutcome(t *testing.T) {
	for o, want := range map[webhooks.Outcome]string{
		webhooks.OutcomeSuccess: "success",
		webhooks.OutcomeRetry:   "retry",
		webhooks.OutcomeFinal:   "final",
		webhooks.Outcome(0):     "Outcome(0)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}

var retryAfterNow = time.Date(2030, time.March, 4, 5, 6, 7, 0, time.UTC)

func TestParseRetryAfterAcceptsSecondsAndDatesOnly(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want time.Duration
	}{
		{"empty", "", 0},
		{"zero seconds", "0", 0},
		{"seconds", "120", 120 * time.Second},
		{"seconds with spaces", " 7 ", 7 * time.Second},
		{"leading zeros", "007", 7 * time.Second},
		{"huge seconds are capped, not negative", "99999999999999999999999", time.Duration(1<<63-1) / time.Second * time.Second},
		{"negative seconds", "-5", 0},
		{"plus sign", "+5", 0},
		{"fractional seconds", "1.5", 0},
		{"IMF-fixdate in the future", retryAfterNow.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"RFC 850 date in the future", retryAfterNow.Add(time.Hour).Format(time.RFC850), time.Hour},
		{"asctime date in the future", retryAfterNow.Add(2 * time.Minute).Format(time.ANSIC), 2 * time.Minute},
		{"date now", retryAfterNow.Format(http.TimeFormat), 0},
		{"date in the past", retryAfterNow.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"garbage", "soon", 0},
		{"duration syntax", "5s", 0},
		{"ISO date", "2030-03-04T05:07:07Z", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhooks.ParseRetryAfter(tt.v, retryAfterNow); got != tt.want {
				t.Errorf("ParseRetryAfter(%q) = %s, want %s", tt.v, got, tt.want)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{
		"", "0", "120", "-1", "99999999999999999999999", "9223372036", "1e9", " 3 ",
		"Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
		retryAfterNow.Add(time.Minute).Format(http.TimeFormat), "Monday, 02-Jan-06 15:04:05 MST",
		"Mon Jan  2 15:04:05 2006", "\x00", "٣",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got := webhooks.ParseRetryAfter(v, retryAfterNow); got < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s, want >= 0", v, got)
		}
	})
}

func TestClassifyMakesRefusedRequestsAndRedirectsFinal(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: bad auth", webhooks.ErrInvalidRequest),
		transportErr(fmt.Errorf("%w: downgrade", webhooks.ErrRedirectRefused)),
	} {
		if got := webhooks.Classify(webhooks.Attempt{Err: err}); got != webhooks.OutcomeFinal {
			t.Errorf("Classify(%v) = %s, want final", err, got)
		}
	}
}
