package schemas

import (
	"context"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/keyhook/keyhook/recordexpr"
)

// TestProtoTextSchemaWithAReference defends the other way registries hold
// Protobuf schemas: .proto text (as Confluent's registry returns it by
// default and producers in other languages register it), importing a
// referenced subject's file and a well-known type, a record of a nested
// message found by its indexes.
func TestProtoTextSchemaWithAReference(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	common, err := os.ReadFile("testdata/shop/common.proto")
	if err != nil {
		t.Fatal(err)
	}
	shop, err := os.ReadFile("testdata/shop.proto")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.RegisterSchema("shop/common.proto", sr.Schema{Schema: string(common), Type: sr.TypeProtobuf}); err != nil {
		t.Fatal(err)
	}
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: string(shop), Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "shop/common.proto", Subject: "shop/common.proto", Version: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, reg)
	s, err := r.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	// Order.Item is message 1 (Order), nested message 0.
	md, err := s.message([]int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(md)
	m.Set(md.Fields().ByName("sku"), protoValueOf("z"))
	m.Set(md.Fields().ByName("quantity"), protoValueOf(int32(7)))
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	value, _ := h.AppendEncode(nil, id, []int{1, 0})
	p, err := recordexpr.Compile(recordexpr.Spec{ValueFormat: recordexpr.FormatProtobuf, Filter: `value.quantity == 7`}, recordexpr.WithSchemas(r))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordexpr.Record{Value: append(value, b...)}
	if ok, err := p.Filter(rec); !ok || err != nil {
		t.Fatalf("filter: %v %v", ok, err)
	}
	body, err := p.Render(rec)
	if err != nil || string(body.Value) != `{"quantity":7,"sku":"z"}` {
		t.Fatalf("body %s: %v", body.Value, err)
	}
	rec.Value = append(value[:5:5], append([]byte{2, 6, 0}, b...)...) // indexes [3, 0]: no such message
	if _, err := p.Render(rec); !recordexpr.IsDecode(err) {
		t.Fatalf("a message index that names no message: %v, want a decoding error", err)
	}
}
