package webhooks

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// viaReflection is the envelope as encoding/json writes NewEnvelope's
// struct: what appendEnvelope must write byte for byte.
func viaReflection(t *testing.T, m *Message) []byte {
	t.Helper()
	e, err := NewEnvelope(m)
	if err != nil {
		t.Fatalf("NewEnvelope: %v", err)
	}
	b, err := marshalJSON(e)
	if err != nil {
		t.Fatalf("marshalJSON: %v", err)
	}
	return b
}

var envelopeContentTypes = []string{"", "application/json", "text/plain", "application/cloudevents+json; charset=utf-8", "text/json", "bad;;type", "application/octet-stream"}

func TestAppendEnvelopeMatchesEncodingJSON(t *testing.T) {
	ts := time.Date(2026, 12, 2, 5, 6, 7, 123456789, time.FixedZone("x", 3600))
	cases := map[string]*Message{
		"minimal":                           {ID: "dlv_1"},
		"text key and value":                {ID: "dlv_2", Key: []byte("k<&>"), Value: []byte("a <b> & \"c\"\n\u2028"), Time: ts},
		"binary key and value":              {ID: "dlv_3", Key: []byte{0, 1, 0xff}, Value: []byte{0xde, 0xad, 0xbe, 0xef}},
		"empty value":                       {ID: "dlv_4", Key: []byte{}, Value: []byte{}},
		"json value":                        {ID: "dlv_5", ContentType: "application/json", Value: []byte(" { \"a\" : [1, 2,\n 3], \"<b>\": \"\\u003c\" } ")},
		"invalid json value with json type": {ID: "dlv_6", ContentType: "application/json", Value: []byte("{nope")},
		"json from a header":                {ID: "dlv_7", Value: []byte(`[true]`), Headers: []Header{{Name: "content-type", Value: []byte("application/x+json")}}},
		"headers, repeated, text and binary": {ID: "dlv_8", Headers: []Header{
			{Name: "b", Value: []byte("1")}, {Name: "a", Value: []byte{0}}, {Name: "b", Value: []byte{1, 2}},
			{Name: "c", Value: []byte("x")}, {Name: "a", Value: []byte("text again")}, {Name: "é\t\"", Value: []byte("\xff")},
		}},
		"attributes, unsorted, repeated": {ID: "dlv_9", Source: "kafka://t", Subject: "0/12", Attributes: []Attr{
			{Name: "topic", Value: "t"}, {Name: "offset", Value: "12"}, {Name: "a", Value: "1"}, {Name: "a", Value: "2"},
		}},
		"control and invalid utf-8 in strings": {ID: "dlv_\x01\x1f\x7f\xc3", Source: "\u2029\b\f\r\t\\", Subject: "\xe2\x80"},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := appendEnvelope(nil, m)
			if err != nil {
				t.Fatalf("appendEnvelope: %v", err)
			}
			if want := viaReflection(t, m); !bytes.Equal(got, want) {
				t.Errorf("appendEnvelope wrote\n%s\nencoding/json writes\n%s", got, want)
			}
		})
	}
	if _, err := appendEnvelope(nil, &Message{}); err == nil {
		t.Error("appendEnvelope of a message without an id: no error, want one")
	}
}

func TestEncodeBatchMatchesEncodingJSON(t *testing.T) {
	ms := []*Message{
		{ID: "dlv_1", Key: []byte("a"), Value: []byte("v1"), Attributes: []Attr{{Name: "topic", Value: "t"}}},
		{ID: "dlv_2", Key: []byte{0xff}, Value: []byte{0}, Headers: []Header{{Name: "h", Value: []byte("x")}}, Time: time.Unix(1, 5)},
	}
	got, _, err := EncodeBatch(ms)
	if err != nil {
		t.Fatalf("EncodeBatch: %v", err)
	}
	b := Batch{}
	for _, m := range ms {
		e, err := NewEnvelope(m)
		if err != nil {
			t.Fatal(err)
		}
		b.Deliveries = append(b.Deliveries, e)
	}
	want, err := marshalJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("EncodeBatch wrote\n%s\nencoding/json writes\n%s", got, want)
	}
}

func FuzzAppendEnvelopeMatchesEncodingJSON(f *testing.F) {
	f.Add("dlv_1", "src", "0/1", []byte("key"), []byte(`{"a": 1}`), uint8(1), []byte("h1\x00v1\x00h1\x00\xff"), "topic=t,a=<&>", int64(1700000000123456789), uint8(0))
	f.Add("\u2028", "", "", []byte{0xff}, []byte("plain <text>\n"), uint8(2), []byte{}, "", int64(0), uint8(3))
	f.Fuzz(func(t *testing.T, id, source, subject string, key, value []byte, ctIndex uint8, headerBytes []byte, attrText string, unixNano int64, nils uint8) {
		if id == "" {
			return
		}
		m := &Message{ID: id, Source: source, Subject: subject, Key: key, Value: value,
			ContentType: envelopeContentTypes[int(ctIndex)%len(envelopeContentTypes)]}
		if nils&1 != 0 {
			m.Key = nil
		}
		if nils&2 != 0 {
			m.Value = nil
		}
		if unixNano != 0 {
			m.Time = time.Unix(0, unixNano)
		}
		// Headers: name, value, name, value... split at NUL.
		parts := bytes.Split(headerBytes, []byte{0})
		for i := 0; i+1 < len(parts); i += 2 {
			m.Headers = append(m.Headers, Header{Name: string(parts[i]), Value: parts[i+1]})
		}
		for i, kv := range bytes.Split([]byte(attrText), []byte(",")) {
			name, val, _ := bytes.Cut(kv, []byte("="))
			m.Attributes = append(m.Attributes, Attr{Name: fmt.Sprintf("%s%d", name, i%3), Value: string(val)})
		}
		got, err := appendEnvelope(nil, m)
		if err != nil {
			t.Fatalf("appendEnvelope: %v", err)
		}
		if want := viaReflection(t, m); !bytes.Equal(got, want) {
			t.Errorf("appendEnvelope wrote\n%q\nencoding/json writes\n%q", got, want)
		}
	})
}

// BenchmarkEncodeBatch encodes a batch of ten 256-byte binary records, as
// the bench's scenario 3 sends them, against encoding/json writing the
// same envelopes (the encoder before appendEnvelope): compare the two.
func BenchmarkEncodeBatch(b *testing.B) {
	ms := make([]*Message, 10)
	for i := range ms {
		v := bytes.Repeat([]byte{0xfe, 'a'}, 128)
		ms[i] = &Message{ID: fmt.Sprintf("dlv_%d", i), Key: []byte(fmt.Sprintf("key-%d", i)), Value: v, Time: time.Unix(1700000000, int64(i)),
			Source: "kafka://t", Subject: fmt.Sprintf("0/%d", i),
			Attributes: []Attr{{Name: "subscription", Value: "s"}, {Name: "topic", Value: "t"}, {Name: "partition", Value: "0"}, {Name: "offset", Value: fmt.Sprint(i)}}}
	}
	b.Run("encoder=append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := EncodeBatch(ms); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoder=encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			batch := Batch{Deliveries: make([]*Envelope, 0, len(ms))}
			for _, m := range ms {
				e, err := NewEnvelope(m)
				if err != nil {
					b.Fatal(err)
				}
				batch.Deliveries = append(batch.Deliveries, e)
			}
			if _, err := marshalJSON(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}
