package schemas

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// parseProto compiles text, a .proto file, with the files it imports:
// its references by name, and the well-known types
// (google/protobuf/*.proto) that protocompile carries.
func parseProto(id int, text string, refs []named) (protoreflect.FileDescriptor, error) {
	name := fmt.Sprintf("keyhook-schema-%d.proto", id)
	files := map[string]string{name: text}
	for _, r := range refs {
		files[r.name] = r.schema.Schema
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(files),
		}),
	}
	fds, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), name+":", ""))
	}
	return fds[0], nil
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
