package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// producedAt is the time of the test messages: milliseconds, as Kafka keeps.
var producedAt = time.Date(2030, time.March, 4, 5, 6, 7, 891_000_000, time.FixedZone("CET", 3600))

// orderMessage is a message as the dispatcher would describe a record.
func orderMessage() *webhooks.Message {
	return &webhooks.Message{
		ID:    "dlv_0123456789abcdef01234567",
		Key:   []byte("customer-42"),
		Value: []byte(`{"order": 1017, "total": "12.50"}`),
		Headers: []webhooks.Header{
			{Name: "content-type", Value: []byte("application/json")},
			{Name: "tenant", Value: []byte("acme")},
			{Name: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		},
		Time:    producedAt,
		Source:  "kafka://main/orders",
		Subject: "3/1017",
		Attributes: []webhooks.Attr{
			{Name: "subscription", Value: "orders-to-billing"},
			{Name: "topic", Value: "orders"},
			{Name: "partition", Value: "3"},
			{Name: "offset", Value: "1017"},
		},
	}
}

func TestEncodeRawPutsMetadataInKeyhookHeaders(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(m *webhooks.Message)
		wantHead http.Header
	}{
		{
			name: "text key, content type from the record header",
			edit: func(*webhooks.Message) {},
			wantHead: http.Header{
				"Content-Type":               {"application/json"},
				"Keyhook-Subscription":       {"orders-to-billing"},
				"Keyhook-Topic":              {"orders"},
				"Keyhook-Partition":          {"3"},
				"Keyhook-Offset":             {"1017"},
				"Keyhook-Key":                {"customer-42"},
				"Keyhook-Timestamp":          {"2030-03-04T04:06:07.891Z"},
				"Keyhook-Header-Tenant":      {"acme"},
				"Keyhook-Header-Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			},
		},
		{
			name: "binary key, explicit content type, unsendable headers left out",
			edit: func(m *webhooks.Message) {
				m.Key = []byte{0xff, 0x00, 'k'}
				m.ContentType = "text/plain; charset=utf-8"
				m.Attributes = nil
				m.Time = time.Time{}
				m.Headers = []webhooks.Header{
					{Name: "content-type", Value: []byte("application/json")},
					{Name: "bad name", Value: []byte("x")},
					{Name: "crlf", Value: []byte("a\r\nInjected: yes")},
					{Name: "binary", Value: []byte{0xff}},
					{Name: "padded", Value: []byte(" x ")},
					{Name: "tab", Value: []byte("a\tb")},
					{Name: "dup", Value: []byte("1")},
					{Name: "dup", Value: []byte("2")},
				}
			},
			wantHead: http.Header{
				"Content-Type":                {"text/plain; charset=utf-8"},
				"Keyhook-Key-Base64":          {"/wBr"},
				"Keyhook-Header-Content-Type": {"application/json"},
				"Keyhook-Header-Dup":          {"1", "2"},
				"Keyhook-Header-Padded":       {" x "},
				"Keyhook-Header-Tab":          {"a\tb"},
			},
		},
		{
			name: "no key, no content type",
			edit: func(m *webhooks.Message) {
				m.Key = nil
				m.Headers = nil
				m.Attributes = nil
			},
			wantHead: http.Header{
				"Content-Type":      {"application/octet-stream"},
				"Keyhook-Timestamp": {"2030-03-04T04:06:07.891Z"},
			},
		},
		{
			name: "empty key is not no key",
			edit: func(m *webhooks.Message) {
				m.Key = []byte{}
				m.Headers = nil
				m.Attributes = nil
				m.Time = time.Time{}
			},
			wantHead: http.Header{
				"Content-Type": {"application/octet-stream"},
				"Keyhook-Key":  {""},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := orderMessage()
			tt.edit(m)

			body, h, err := webhooks.Encode(webhooks.FormatRaw, m, "")

			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if diff := cmp.Diff(tt.wantHead, h); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(m.Value, body); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeDefaultsToRaw(t *testing.T) {
	_, h, err := webhooks.Encode("", orderMessage(), "")
	if err != nil || h.Get("Keyhook-Topic") != "orders" {
		t.Fatalf("Encode(\"\") = %v, %v; want the raw format", h, err)
	}
}

func TestEncodeRefusesBadInputNamingIt(t *testing.T) {
	tests := []struct {
		name   string
		format webhooks.Format
		edit   func(m *webhooks.Message)
		want   string
	}{
		{"unknown format", "xml", func(*webhooks.Message) {}, `format must be one of raw, cloudevents-binary, cloudevents-structured or envelope, not "xml"`},
		{"attribute name not a token", webhooks.FormatRaw, func(m *webhooks.Message) { m.Attributes = []webhooks.Attr{{Name: "a b", Value: "x"}} }, `attribute name "a b" must be an HTTP token`},
		{"attribute value with CRLF", webhooks.FormatRaw, func(m *webhooks.Message) { m.Attributes = []webhooks.Attr{{Name: "topic", Value: "a\r\nX-Evil: 1"}} }, `attribute "topic" value must be UTF-8 text`},
		{"reserved attribute", webhooks.FormatRaw, func(m *webhooks.Message) { m.Attributes = []webhooks.Attr{{Name: "Key", Value: "x"}} }, `attribute name "Key" is reserved`},
		{"attribute shadowing record headers", webhooks.FormatRaw, func(m *webhooks.Message) { m.Attributes = []webhooks.Attr{{Name: "header-x", Value: "x"}} }, `attribute name "header-x" is reserved`},
		{"duplicate attribute", webhooks.FormatRaw, func(m *webhooks.Message) {
			m.Attributes = []webhooks.Attr{{Name: "topic", Value: "a"}, {Name: "Topic", Value: "b"}}
		}, `attribute "Topic" appears twice`},
		{"duplicate among many attributes", webhooks.FormatRaw, func(m *webhooks.Message) {
			for i := range 20 {
				m.Attributes = append(m.Attributes, webhooks.Attr{Name: fmt.Sprintf("a%d", i), Value: "x"})
			}
			m.Attributes = append(m.Attributes, webhooks.Attr{Name: "A7", Value: "y"})
		}, `attribute "A7" appears twice`},
		{"cloudevent without id", webhooks.FormatCloudEventsBinary, func(m *webhooks.Message) { m.ID = "" }, "cloudevents id must be a non-empty string"},
		{"cloudevent without source", webhooks.FormatCloudEventsStructured, func(m *webhooks.Message) { m.Source = "" }, "cloudevents source must be a non-empty URI reference"},
		{"cloudevent with a bad prefix", webhooks.FormatCloudEventsBinary, func(m *webhooks.Message) { m.ExtensionPrefix = "Kafka-" }, `extension prefix "Kafka-" must hold only lowercase ASCII letters and digits`},
		{"attributes that collide as extensions", webhooks.FormatCloudEventsBinary, func(m *webhooks.Message) {
			m.Attributes = []webhooks.Attr{{Name: "topic-name", Value: "a"}, {Name: "topic_name", Value: "b"}}
		}, `attribute "topic-name" and attribute "topic_name" would both become the cloudevents extension "keyhooktopicname"`},
		{"envelope without id", webhooks.FormatEnvelope, func(m *webhooks.Message) { m.ID = "" }, "envelope id must not be empty"},
		{"content type with CRLF", webhooks.FormatRaw, func(m *webhooks.Message) { m.ContentType = "text/plain\r\nX-Evil: 1" }, "content type must not contain control characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := orderMessage()
			tt.edit(m)

			_, _, err := webhooks.Encode(tt.format, m, "")

			if !errors.Is(err, webhooks.ErrInvalidMessage) {
				t.Fatalf("Encode = %v, want ErrInvalidMessage", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
	if _, _, err := webhooks.Encode(webhooks.FormatRaw, nil, ""); !errors.Is(err, webhooks.ErrInvalidMessage) {
		t.Errorf("Encode(nil) = %v, want ErrInvalidMessage", err)
	}
}

func TestFormatValidateAcceptsEveryFormatAndEmpty(t *testing.T) {
	for _, f := range append([]webhooks.Format{""}, webhooks.Formats()...) {
		if err := f.Validate(); err != nil {
			t.Errorf("Format(%q).Validate() = %v", f, err)
		}
	}
}

func TestNewRequestDeliversRawMessageToARealEndpoint(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusNoContent))
	c := newClient(t, webhooks.ClientConfig{})
	m := orderMessage()

	req, err := webhooks.NewRequest(ep.URL+"/hook", webhooks.FormatRaw, m, "")
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	a := c.Send(context.Background(), req, 1)

	if a.Status != http.StatusNoContent {
		t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
	}
	got := ep.requests()[0]
	h := got.Header
	gotHeaders := map[string]string{}
	for _, k := range []string{"Content-Type", "Webhook-Id", "Keyhook-Attempt", "Keyhook-Topic", "Keyhook-Offset", "Keyhook-Key", "Keyhook-Header-Tenant"} {
		gotHeaders[k] = h.Get(k)
	}
	want := map[string]string{
		"Content-Type":          "application/json",
		"Webhook-Id":            m.ID,
		"Keyhook-Attempt":       "1",
		"Keyhook-Topic":         "orders",
		"Keyhook-Offset":        "1017",
		"Keyhook-Key":           "customer-42",
		"Keyhook-Header-Tenant": "acme",
	}
	if diff := cmp.Diff(want, gotHeaders); diff != "" {
		t.Errorf("headers at the endpoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(m.Value, got.Body); diff != "" {
		t.Errorf("body at the endpoint (-want +got):\n%s", diff)
	}
}

func TestEncodeRawSendsKeysThatWouldNotSurviveAsHeadersInBase64(t *testing.T) {
	tests := []struct {
		key  string
		want http.Header
	}{
		{"plain key", http.Header{"Keyhook-Key": {"plain key"}}},
		{"clé", http.Header{"Keyhook-Key": {"clé"}}},
		{" padded", http.Header{"Keyhook-Key-Base64": {"IHBhZGRlZA=="}}},
		{"trailing\t", http.Header{"Keyhook-Key-Base64": {"dHJhaWxpbmcJ"}}},
		{"line\nbreak", http.Header{"Keyhook-Key-Base64": {"bGluZQpicmVhaw=="}}},
		{"\xff\xfe", http.Header{"Keyhook-Key-Base64": {"//4="}}},
	}
	for _, tt := range tests {
		_, h, err := webhooks.Encode(webhooks.FormatRaw, &webhooks.Message{Key: []byte(tt.key)}, "")
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		h.Del("Content-Type")
		if diff := cmp.Diff(tt.want, h); diff != "" {
			t.Errorf("key %q (-want +got):\n%s", tt.key, diff)
		}
	}
}
