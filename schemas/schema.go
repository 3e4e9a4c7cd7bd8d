package schemas

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Schema is one registry schema, parsed. It is immutable.
type Schema struct {
	// ID is the registry's id of the schema.
	ID int
	// Type is AVRO, PROTOBUF or JSON.
	Type sr.SchemaType
	// URI names the schema: the registry's URL and /schemas/ids/<id>.
	URI string

	avro  avro.Schema
	proto protoreflect.FileDescriptor
}

// parse parses s, the schema of id, with refs, the schemas it references
// (each after those it references).
func parse(id int, s sr.Schema, refs []named) (*Schema, error) {
	p := &Schema{ID: id, Type: s.Type}
	var err error
	switch s.Type {
	case sr.TypeAvro:
		p.avro, err = parseAvro(s.Schema, refs)
	case sr.TypeProtobuf:
		p.proto, err = parseProto(id, s.Schema, refs)
	case sr.TypeJSON:
		// The value is JSON text; the schema is not used to decode it.
	default:
		err = fmt.Errorf("schema type %s is not one keyhook decodes", s.Type)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// parseAvro parses text, its named references first into a cache of its
// own (a registry's names are not the process's).
func parseAvro(text string, refs []named) (avro.Schema, error) {
	cache := &avro.SchemaCache{}
	for _, r := range refs {
		if _, err := avro.ParseWithCache(r.schema.Schema, "", cache); err != nil {
			return nil, fmt.Errorf("reference %q: %w", r.name, err)
		}
	}
	return avro.ParseWithCache(text, "", cache)
}

// parseProto compiles a .proto file with the files it imports: its
// references by name, and the well-known types (google/protobuf/*.proto)
// that protocompile carries. Each file is .proto text, or, as Confluent's
// serializers register them and registries return them with
// format=serialized, a FileDescriptorProto in base64.
func parseProto(id int, text string, refs []named) (protoreflect.FileDescriptor, error) {
	name := fmt.Sprintf("keyhook-schema-%d.proto", id)
	files := map[string]string{name: text}
	for _, r := range refs {
		files[r.name] = r.schema.Schema
	}
	resolve := protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		text, ok := files[path]
		if !ok {
			return protocompile.SearchResult{}, fs.ErrNotExist
		}
		if fdp := serializedDescriptor(text); fdp != nil {
			fdp.Name = proto.String(path)
			return protocompile.SearchResult{Proto: fdp}, nil
		}
		return protocompile.SearchResult{Source: strings.NewReader(text)}, nil
	})
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(resolve)}
	fds, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), name+":", ""))
	}
	return fds[0], nil
}

// serializedDescriptor is text as a base64 FileDescriptorProto, nil when
// it is not one (.proto text is never valid base64: it has spaces and
// semicolons).
func serializedDescriptor(text string) *descriptorpb.FileDescriptorProto {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil || len(b) == 0 {
		return nil
	}
	var fdp descriptorpb.FileDescriptorProto
	if proto.Unmarshal(b, &fdp) != nil {
		return nil
	}
	for _, m := range fdp.MessageType {
		fillJSONNames(m)
	}
	return &fdp
}

// fillJSONNames gives each field without a json_name its default one. The
// descriptors Python's protobuf serializes (serialized_pb) have none, and
// protocompile's linker, expecting protoc's output, would read the
// missing name as a custom "" shared by every field.
func fillJSONNames(m *descriptorpb.DescriptorProto) {
	for _, f := range m.Field {
		if f.JsonName == nil {
			f.JsonName = proto.String(jsonName(f.GetName()))
		}
	}
	for _, n := range m.NestedType {
		fillJSONNames(n)
	}
}

// jsonName is protoc's default JSON name of a field: each underscore
// dropped and the letter after it upper-cased (order_id: orderId).
func jsonName(name string) string {
	b := make([]byte, 0, len(name))
	up := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '_' {
			up = true
			continue
		}
		if up && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b = append(b, c)
	}
	return string(b)
}

// message is the message type of a Protobuf header's indexes: the first
// index picks a top-level message of the file, each next one a message
// nested in the previous.
func (s *Schema) message(idx []int) (protoreflect.MessageDescriptor, error) {
	if len(idx) == 0 {
		idx = []int{0}
	}
	msgs := s.proto.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range idx {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v names no message of schema %d", idx, s.ID)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md, nil
}
