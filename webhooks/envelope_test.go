package webhooks_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

func TestEnvelopeFollowsItsDocumentedSchema(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *webhooks.Message)
		want map[string]any
	}{
		{
			name: "JSON value embedded, text key",
			edit: func(*webhooks.Message) {},
			want: map[string]any{
				"id":           "dlv_0123456789abcdef01234567",
				"source":       "kafka://main/orders",
				"subject":      "3/1017",
				"key":          "customer-42",
				"content_type": "application/json",
				"value":        map[string]any{"order": float64(1017), "total": "12.50"},
				"headers": map[string]any{
					"content-type": "application/json",
					"tenant":       "acme",
					"traceparent":  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				},
				"attributes": map[string]any{"subscription": "orders-to-billing", "topic": "orders", "partition": "3", "offset": "1017"},
				"timestamp":  "2030-03-04T04:06:07.891Z",
			},
		},
		{
			name: "text value as a string, binary key and header, repeated header",
			edit: func(m *webhooks.Message) {
				m.Key = []byte{0xff, 0x00}
				m.Value = []byte("line one\nline <two> & three")
				m.ContentType = "text/plain"
				m.Headers = []webhooks.Header{
					{Name: "sig", Value: []byte{0x00, 0x01}},
					{Name: "attempt", Value: []byte("1")},
					{Name: "attempt", Value: []byte("2")},
				}
				m.Attributes = nil
				m.Source, m.Subject = "", ""
			},
			want: map[string]any{
				"id":             "dlv_0123456789abcdef01234567",
				"key":            nil,
				"key_base64":     "/wA=",
				"content_type":   "text/plain",
				"value":          "line one\nline <two> & three",
				"headers":        map[string]any{"attempt": "2"},
				"headers_base64": map[string]any{"sig": "AAE="},
				"attributes":     map[string]any{},
				"timestamp":      "2030-03-04T04:06:07.891Z",
			},
		},
		{
			name: "binary value in base64, no key, no time",
			edit: func(m *webhooks.Message) {
				m.Key = nil
				m.Value = []byte{0x89, 'P', 'N', 'G', 0x00}
				m.Headers = nil
				m.Attributes = nil
				m.Time = time.Time{}
				m.Source, m.Subject = "", ""
			},
			want: map[string]any{
				"id":           "dlv_0123456789abcdef01234567",
				"key":          nil,
				"value":        nil,
				"value_base64": "iVBORwA=",
				"headers":      map[string]any{},
				"attributes":   map[string]any{},
			},
		},
		{
			name: "tombstone: null value, empty key",
			edit: func(m *webhooks.Message) {
				m.Key = []byte{}
				m.Value = nil
				m.Headers = nil
				m.Attributes = nil
				m.Source, m.Subject = "", ""
			},
			want: map[string]any{
				"id":         "dlv_0123456789abcdef01234567",
				"key":        "",
				"value":      nil,
				"headers":    map[string]any{},
				"attributes": map[string]any{},
				"timestamp":  "2030-03-04T04:06:07.891Z",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := orderMessage()
			tt.edit(m)

			body, h, err := webhooks.Encode(webhooks.FormatEnvelope, m, "")
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}

			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body is not JSON: %v\n%s", err, body)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("envelope (-want +got):\n%s", diff)
			}
		})
	}
}

// decodedMessage is what a consumer recovers from an envelope.
type decodedMessage struct {
	ID         string
	Key        []byte
	Value      []byte
	Headers    map[string][]byte
	Attributes map[string]string
}

// decodeEnvelope reads an envelope the way its documentation tells a
// consumer to, without the package's types.
func decodeEnvelope(t *testing.T, body []byte) decodedMessage {
	t.Helper()
	var e struct {
		ID            string            `json:"id"`
		Key           *string           `json:"key"`
		KeyBase64     string            `json:"key_base64"`
		ContentType   string            `json:"content_type"`
		Value         json.RawMessage   `json:"value"`
		ValueBase64   string            `json:"value_base64"`
		Headers       map[string]string `json:"headers"`
		HeadersBase64 map[string]string `json:"headers_base64"`
		Attributes    map[string]string `json:"attributes"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("envelope is not JSON: %v", err)
	}
	mustBase64 := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("bad base64 %q: %v", s, err)
		}
		return b
	}
	d := decodedMessage{ID: e.ID, Headers: map[string][]byte{}, Attributes: e.Attributes}
	switch {
	case e.Key != nil:
		d.Key = []byte(*e.Key)
	case e.KeyBase64 != "":
		d.Key = mustBase64(e.KeyBase64)
	}
	switch {
	case e.ValueBase64 != "":
		d.Value = mustBase64(e.ValueBase64)
	case string(e.Value) == "null":
	case string(e.Value) == `""`:
		d.Value = []byte{}
	case !strings.Contains(e.ContentType, "json"):
		var s string
		if err := json.Unmarshal(e.Value, &s); err != nil {
			t.Fatalf("value: %v", err)
		}
		d.Value = []byte(s)
	default:
		d.Value = e.Value
	}
	for k, v := range e.Headers {
		d.Headers[k] = []byte(v)
	}
	for k, v := range e.HeadersBase64 {
		d.Headers[k] = mustBase64(v)
	}
	return d
}

func TestEnvelopeRoundTripsThroughARealEndpoint(t *testing.T) {
	values := map[string]struct {
		value       []byte
		contentType string
	}{
		"JSON":               {[]byte(`[1,{"a":"b"},null]`), "application/json"},
		"JSON suffix":        {[]byte(`{"x":true}`), "application/cloudevents+json; charset=utf-8"},
		"text":               {[]byte("héllo\tworld\r\n"), "text/plain"},
		"text said JSON":     {[]byte("not json"), "application/json"},
		"binary":             {[]byte{0, 1, 2, 0xfe, 0xff}, ""},
		"invalid UTF-8 text": {[]byte("caf\xe9"), "text/plain"},
		"empty":              {[]byte{}, ""},
		"tombstone":          {nil, ""},
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			ep := newEndpoint(t, statuses(http.StatusOK))
			c := newClient(t, webhooks.ClientConfig{})
			m := &webhooks.Message{
				ID:          "dlv_1",
				Key:         []byte{0xff, 'k'},
				Value:       v.value,
				ContentType: v.contentType,
				Headers: []webhooks.Header{
					{Name: "text", Value: []byte("v")},
					{Name: "bin", Value: []byte{0xc3, 0x28}},
				},
				Attributes: []webhooks.Attr{{Name: "topic", Value: "orders"}, {Name: "offset", Value: "7"}},
			}
			req, err := webhooks.NewRequest(ep.URL, webhooks.FormatEnvelope, m, "")
			if err != nil {
				t.Fatalf("NewRequest: %v", err)
			}
			if a := c.Send(context.Background(), req, 1); a.Status != http.StatusOK {
				t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
			}

			got := decodeEnvelope(t, ep.requests()[0].Body)

			want := decodedMessage{
				ID:         "dlv_1",
				Key:        m.Key,
				Value:      m.Value,
				Headers:    map[string][]byte{"text": []byte("v"), "bin": {0xc3, 0x28}},
				Attributes: map[string]string{"topic": "orders", "offset": "7"},
			}
			if v.value != nil && len(v.value) == 0 {
				want.Value = []byte{}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decoded envelope (-want +got):\n%s", diff)
			}
		})
	}
}
