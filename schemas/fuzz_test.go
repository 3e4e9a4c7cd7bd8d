package schemas

import (
	"context"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keyhook/keyhook/recordexpr"
)

func protoValueOf(v any) protoreflect.Value { return protoreflect.ValueOf(v) }

// FuzzDecode feeds arbitrary bytes to the Avro and Protobuf decoders of
// cached schemas: whatever a topic holds, decoding ends with a value or a
// decoding error, never a panic, a hang or an error that would make the
// record wait (only a missing schema may).
func FuzzDecode(f *testing.F) {
	reg := srfake.New()
	defer reg.Close()
	avroID, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: orderSchema})
	if err != nil {
		f.Fatal(err)
	}
	protoID, _, err := reg.RegisterSchema("p-value", sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
message A { string s = 1; repeated int64 n = 2; map<string, A> m = 3; oneof o { bytes b = 4; double d = 5; } }`})
	if err != nil {
		f.Fatal(err)
	}
	r := newRegistry(f, reg)
	for _, id := range []int{avroID, protoID} {
		if _, err := r.Get(context.Background(), id); err != nil {
			f.Fatal(err)
		}
	}
	avroDec, protoDec := r.Decoder(recordexpr.FormatAvro), r.Decoder(recordexpr.FormatProtobuf)
	f.Add(true, order(f, avroID)[5:])
	f.Add(false, []byte{0, 10, 1, 'x', 16, 5})
	f.Add(true, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, avro bool, payload []byte) {
		var h sr.ConfluentHeader
		d, id := protoDec, protoID
		if avro {
			d, id = avroDec, avroID
		}
		b, _ := h.AppendEncode(nil, id, nil)
		if !avro {
			b = b[:5] // the indexes are the fuzzer's
		}
		dec, err := d.Decode(append(b, payload...))
		if recordexpr.IsNotReady(err) {
			t.Fatalf("a cached schema answered not ready: %v", err)
		}
		if err == nil && dec.Val == nil {
			t.Fatal("no value and no error")
		}
		if err == nil {
			if _, err := recordexpr.EncodeJSON(dec.Val); err != nil {
				t.Logf("decoded but not JSON: %v", err) // NaN, a double Avro may hold
			}
		}
	})
}

// TestACorruptCountIsAnErrorNotALoop defends the worker against a record
// whose array claims 2^62 items of a type that takes no bytes (null):
// decoding stops with an error instead of looping.
func TestACorruptCountIsAnErrorNotALoop(t *testing.T) {
	s := avroParse(t, `{"type":"array","items":"null"}`)
	// The block count 2^62, zigzag varint encoded.
	b := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}
	if _, err := decodeAvro(s, b); err == nil {
		t.Fatal("2^62 items decoded")
	}
}

func avroParse(t *testing.T, schema string) avro.Schema {
	t.Helper()
	s, err := avro.Parse(schema)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
