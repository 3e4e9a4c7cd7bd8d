package webhooks_test

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// headerClaim is one row of the HTTP contract page's table of the headers an endpoint
// receives: the header names it lists and the formats that send them.
type headerClaim struct {
	names   []string
	formats []webhooks.Format // nil: every format
}

var backticked = regexp.MustCompile("`([^`]+)`")

// httpContractPage is the page of the docs that describes the HTTP
// contract toward endpoints.
const httpContractPage = "docs/http-contract.md"

// readmeHeaderTable reads the table that follows "and these headers" in
// the HTTP contract page. A row without a formats column claims every format.
func readmeHeaderTable(t *testing.T) []headerClaim {
	t.Helper()
	b, err := os.ReadFile("../" + httpContractPage)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "and these headers")
	if i < 0 {
		t.Fatalf(`%s has no "and these headers" table`, httpContractPage)
	}
	var claims []headerClaim
	inTable := false
	for _, line := range strings.Split(s[i:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		first := strings.TrimSpace(cells[0])
		if first == "header" || strings.HasPrefix(first, "---") {
			continue
		}
		// Names in parentheses are alternatives (keyhook-key-base64 when
		// the key is not printable): the test's key is printable.
		if j := strings.Index(first, "("); j >= 0 {
			first = first[:j]
		}
		var c headerClaim
		for _, m := range backticked.FindAllStringSubmatch(first, -1) {
			c.names = append(c.names, strings.ReplaceAll(m[1], "<name>", "x-tenant"))
		}
		if len(cells) > 2 {
			if f := strings.TrimSpace(cells[1]); !strings.HasPrefix(f, "all") {
				for _, m := range backticked.FindAllStringSubmatch(f, -1) {
					c.formats = append(c.formats, webhooks.Format(m[1]))
				}
			}
		}
		claims = append(claims, c)
	}
	if len(claims) == 0 {
		t.Fatalf("%s: the header table has no rows", httpContractPage)
	}
	return claims
}

func TestDocumentedHeaderTableSaysWhichFormatSendsEachHeader(t *testing.T) {
	claims := readmeHeaderTable(t)
	secret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	signer := &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, secret)}}
	ep := newEndpoint(t, statuses(http.StatusNoContent))
	c := newClient(t, webhooks.ClientConfig{})

	for _, f := range webhooks.Formats() {
		t.Run(string(f), func(t *testing.T) {
			// A record as the dispatcher renders it (dispatcher/delivery.go).
			m := &webhooks.Message{
				ID: "dlv_1", Key: []byte("customer-1"), Value: []byte(`{"order":1}`),
				Headers: []webhooks.Header{{Name: "x-tenant", Value: []byte("acme")}},
				Time:    time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC),
				Source:  "kafka://orders", Subject: "0/7",
				Attributes: []webhooks.Attr{
					{Name: "subscription", Value: "sub_1"}, {Name: "topic", Value: "orders"},
					{Name: "partition", Value: "0"}, {Name: "offset", Value: "7"},
				},
			}
			req, err := webhooks.NewRequest(ep.URL, f, m, "")
			if err != nil {
				t.Fatal(err)
			}
			req.Signer = signer
			before := len(ep.requests())
			if a := c.Send(context.Background(), req, 1); a.Err != nil || a.Status != http.StatusNoContent {
				t.Fatalf("Send = {status %d, err %v}", a.Status, a.Err)
			}
			got := ep.requests()[before].Header

			for _, claim := range claims {
				claimed := claim.formats == nil || slices.Contains(claim.formats, f)
				for _, name := range claim.names {
					if !strings.HasPrefix(name, "keyhook-") && !strings.HasPrefix(name, "webhook-") {
						continue // trace context: sent only inside a trace
					}
					if sent := got.Get(name) != ""; sent != claimed {
						t.Errorf("%s says format %s sends %s: %v; it does: %v", httpContractPage, f, name, claimed, sent)
					}
				}
			}
			// And nothing keyhook-* that the table leaves out.
			for name := range got {
				lower := strings.ToLower(name)
				if !strings.HasPrefix(lower, "keyhook-") {
					continue
				}
				if !slices.ContainsFunc(claims, func(c headerClaim) bool { return slices.Contains(c.names, lower) }) {
					t.Errorf("format %s sends %s, which the table of %s does not list", f, lower, httpContractPage)
				}
			}
		})
	}
}
