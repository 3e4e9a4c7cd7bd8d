package webhooks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// receivedEvent is what the CloudEvents SDK read from one request.
type receivedEvent struct {
	ID, Source, Type, Subject, DataContentType string
	Time                                       time.Time
	Extensions                                 map[string]any
	Data                                       string
}

// ceEndpoint is a real HTTP server that parses every request with the
// CloudEvents SDK, as a Knative or Cloud Run receiver would.
type ceEndpoint struct {
	*httptest.Server
	mu     sync.Mutex
	events []receivedEvent
	errs   []error
	raw    []http.Header
}

func newCEEndpoint(t *testing.T) *ceEndpoint {
	t.Helper()
	e := &ceEndpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cloudevents.NewEventFromHTTPRequest(r)
		if err == nil {
			err = ev.Validate()
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.raw = append(e.raw, r.Header.Clone())
		if err != nil {
			e.errs = append(e.errs, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		e.events = append(e.events, receivedEvent{
			ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Subject: ev.Subject(),
			DataContentType: ev.DataContentType(), Time: ev.Time(),
			Extensions: ev.Extensions(), Data: string(ev.Data()),
		})
	}))
	t.Cleanup(e.Close)
	return e
}

// received returns the only event the endpoint read.
func (e *ceEndpoint) received(t *testing.T) (receivedEvent, http.Header) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) > 0 {
		t.Fatalf("the CloudEvents SDK refused the request: %v", e.errs)
	}
	if len(e.events) != 1 {
		t.Fatalf("endpoint read %d events, want 1", len(e.events))
	}
	return e.events[0], e.raw[0]
}

func TestCloudEventsSDKReadsWhatEncodeSends(t *testing.T) {
	base := receivedEvent{
		ID:      "dlv_0123456789abcdef01234567",
		Source:  "kafka://main/orders",
		Type:    "com.acme.order.placed",
		Subject: "3/1017",
		Time:    producedAt.UTC(),
		Extensions: map[string]any{
			"partitionkey":        "customer-42",
			"keyhooksubscription": "orders-to-billing",
			"keyhooktopic":        "orders",
			"keyhookpartition":    "3",
			"keyhookoffset":       "1017",
		},
	}
	with := func(edit func(e *receivedEvent)) receivedEvent {
		e := base
		e.Extensions = map[string]any{}
		for k, v := range base.Extensions {
			e.Extensions[k] = v
		}
		edit(&e)
		return e
	}
	binaryValue := []byte{0x00, 0xff, 0x10, 'x'}

	tests := []struct {
		name   string
		format webhooks.Format
		edit   func(m *webhooks.Message)
		want   receivedEvent
		// wantData checks the structured body's data member, if set.
		wantData string
	}{
		{
			name:   "binary mode, JSON value",
			format: webhooks.FormatCloudEventsBinary,
			edit:   func(*webhooks.Message) {},
			want: with(func(e *receivedEvent) {
				e.DataContentType = "application/json"
				e.Data = `{"order": 1017, "total": "12.50"}`
			}),
		},
		{
			name:     "structured mode, JSON value embedded as JSON",
			format:   webhooks.FormatCloudEventsStructured,
			edit:     func(*webhooks.Message) {},
			wantData: "data",
			want: with(func(e *receivedEvent) {
				e.DataContentType = "application/json"
				e.Data = `{"order":1017,"total":"12.50"}`
			}),
		},
		{
			name:   "structured mode, binary value as data_base64",
			format: webhooks.FormatCloudEventsStructured,
			edit: func(m *webhooks.Message) {
				m.Value = binaryValue
				m.Headers = nil
			},
			wantData: "data_base64",
			want:     with(func(e *receivedEvent) { e.Data = string(binaryValue) }),
		},
		{
			name:   "structured mode, JSON content type but invalid JSON",
			format: webhooks.FormatCloudEventsStructured,
			edit: func(m *webhooks.Message) {
				m.Value = []byte("{not json")
			},
			wantData: "data_base64",
			want: with(func(e *receivedEvent) {
				e.DataContentType = "application/json"
				e.Data = "{not json"
			}),
		},
		{
			name:   "binary mode, binary key and a chosen extension prefix",
			format: webhooks.FormatCloudEventsBinary,
			edit: func(m *webhooks.Message) {
				m.Key = []byte{0x01, 0x02}
				m.ExtensionPrefix = "kafka"
				m.Headers = nil
				m.ContentType = "text/plain"
				m.Value = []byte("hello")
			},
			want: receivedEvent{
				ID: base.ID, Source: base.Source, Type: base.Type, Subject: base.Subject, Time: base.Time,
				DataContentType: "text/plain",
				Data:            "hello",
				Extensions: map[string]any{
					"kafkakeybase64":    "AQI=",
					"kafkasubscription": "orders-to-billing",
					"kafkatopic":        "orders",
					"kafkapartition":    "3",
					"kafkaoffset":       "1017",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := newCEEndpoint(t)
			c := newClient(t, webhooks.ClientConfig{})
			m := orderMessage()
			tt.edit(m)

			req, err := webhooks.NewRequest(ep.URL, tt.format, m, "com.acme.order.placed")
			if err != nil {
				t.Fatalf("NewRequest: %v", err)
			}
			a := c.Send(context.Background(), req, 1)
			if a.Status != http.StatusOK {
				t.Fatalf("Send: status %d, err %v, body %q", a.Status, a.Err, a.Body)
			}

			got, _ := ep.received(t)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("event read by the SDK (-want +got):\n%s", diff)
			}
			if tt.wantData != "" {
				var doc map[string]json.RawMessage
				if err := json.Unmarshal(req.Body, &doc); err != nil {
					t.Fatalf("structured body is not JSON: %v", err)
				}
				for _, member := range []string{"data", "data_base64"} {
					if _, ok := doc[member]; ok != (member == tt.wantData) {
						t.Errorf("structured body has %s: %v, want only %s", member, ok, tt.wantData)
					}
				}
			}
		})
	}
}

func TestCloudEventsBinaryModeCarriesRecordHeadersAndDefaultType(t *testing.T) {
	ep := newCEEndpoint(t)
	c := newClient(t, webhooks.ClientConfig{})

	req, err := webhooks.NewRequest(ep.URL, webhooks.FormatCloudEventsBinary, orderMessage(), "")
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	c.Send(context.Background(), req, 1)

	got, raw := ep.received(t)
	if got.Type != webhooks.DefaultCloudEventsType {
		t.Errorf("type = %q, want the default %q", got.Type, webhooks.DefaultCloudEventsType)
	}
	gotHeaders := []string{raw.Get("Ce-Specversion"), raw.Get("Keyhook-Header-Tenant"), raw.Get("Keyhook-Header-Content-Type")}
	if diff := cmp.Diff([]string{"1.0", "acme", ""}, gotHeaders); diff != "" {
		t.Errorf("ce-specversion, keyhook-header-tenant, keyhook-header-content-type (-want +got):\n%s", diff)
	}
}

func TestCloudEventsBinaryModePercentEncodesHeaderValues(t *testing.T) {
	m := orderMessage()
	m.Subject = "Euro € 😀" // the binding's own example
	m.Attributes = []webhooks.Attr{{Name: "note", Value: `50% "off"`}}

	_, h, err := webhooks.Encode(webhooks.FormatCloudEventsBinary, m, "")
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}

	got := []string{h.Get("Ce-Subject"), h.Get("Ce-Keyhooknote"), h.Get("Ce-Source")}
	want := []string{"Euro%20%E2%82%AC%20%F0%9F%98%80", "50%25%20%22off%22", "kafka://main/orders"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ce-subject, ce-keyhooknote, ce-source (-want +got):\n%s", diff)
	}
}

func TestCloudEventsStructuredDocumentHoldsEveryAttribute(t *testing.T) {
	m := orderMessage()
	m.Headers = nil
	m.ContentType = "application/vnd.acme+json"

	body, h, err := webhooks.Encode(webhooks.FormatCloudEventsStructured, m, "")
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}

	if ct := h.Get("Content-Type"); ct != "application/cloudevents+json" {
		t.Errorf("Content-Type = %q, want application/cloudevents+json", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, body)
	}
	want := map[string]any{
		"specversion":         "1.0",
		"id":                  m.ID,
		"source":              "kafka://main/orders",
		"type":                "dev.keyhook.record",
		"subject":             "3/1017",
		"time":                "2030-03-04T04:06:07.891Z",
		"datacontenttype":     "application/vnd.acme+json",
		"partitionkey":        "customer-42",
		"keyhooksubscription": "orders-to-billing",
		"keyhooktopic":        "orders",
		"keyhookpartition":    "3",
		"keyhookoffset":       "1017",
		"data":                map[string]any{"order": float64(1017), "total": "12.50"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("structured document (-want +got):\n%s", diff)
	}
}
