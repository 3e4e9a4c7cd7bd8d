package schemas

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"cel.dev/cel-go/common/types"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/keyhook/keyhook/recordexpr"
)

// Decoder returns the decoder of f, one of the registry formats
// (recordexpr.NeedsRegistry); it implements recordexpr.SchemaDecoders.
func (r *Registry) Decoder(f recordexpr.Format) recordexpr.Decoder {
	d := &decoder{r: r, f: f}
	switch f {
	case recordexpr.FormatAvro:
		d.want = sr.TypeAvro
	case recordexpr.FormatProtobuf:
		d.want = sr.TypeProtobuf
	default:
		d.want = sr.TypeJSON
	}
	return d
}

// decoder decodes one format with the registry's cached schemas; it
// implements recordexpr.Decoder and recordexpr.Waiter.
type decoder struct {
	r    *Registry
	f    recordexpr.Format
	want sr.SchemaType
}

// Decode decodes b, a key or value in the Confluent wire format, with
// its schema when cached; otherwise it starts the schema's fetch and
// returns an error wrapping recordexpr.ErrNotReady. A nil b (a tombstone)
// is null.
func (d *decoder) Decode(b []byte) (recordexpr.Decoded, error) {
	if b == nil {
		return recordexpr.Decoded{Val: types.NullValue}, nil
	}
	id, rest, err := header(b)
	if err != nil {
		return recordexpr.Decoded{}, err
	}
	s, err := d.r.Lookup(id)
	if err != nil {
		return recordexpr.Decoded{}, err
	}
	return d.decode(s, rest)
}

// Wait waits, bounded by ctx, until the schema of b is cached.
func (d *decoder) Wait(ctx context.Context, b []byte) error {
	if b == nil {
		return nil
	}
	id, _, err := header(b)
	if err != nil {
		return fmt.Errorf("%w: %w", recordexpr.ErrDecode, err)
	}
	_, err = d.r.Get(ctx, id)
	return err
}

func (d *decoder) decode(s *Schema, b []byte) (recordexpr.Decoded, error) {
	if s.Type != d.want {
		return recordexpr.Decoded{}, fmt.Errorf("schema %d is of type %s, not %s", s.ID, s.Type, d.want)
	}
	var out recordexpr.Decoded
	switch s.Type {
	case sr.TypeAvro:
		v, err := decodeAvro(s.avro, b)
		if err != nil {
			return out, fmt.Errorf("does not match schema %d: %w", s.ID, err)
		}
		out.Val = types.DefaultTypeAdapter.NativeToValue(v)
	case sr.TypeProtobuf:
		idx, msg, err := indexes(b)
		if err != nil {
			return out, err
		}
		md, err := s.message(idx)
		if err != nil {
			return out, err
		}
		m := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(msg, m); err != nil {
			return out, fmt.Errorf("does not match schema %d (message %s): %w", s.ID, md.FullName(), err)
		}
		j, err := protoJSON.Marshal(m)
		if err != nil {
			return out, fmt.Errorf("message %s has no JSON: %w", md.FullName(), err)
		}
		if out, err = recordexpr.DecodeJSON(j); err != nil {
			return out, err
		}
		out.JSON = nil // encoded again from Val: protojson's spacing is not stable
	default:
		var err error
		if out, err = recordexpr.DecodeJSON(b); err != nil {
			return out, err
		}
	}
	out.Schema = s.URI
	return out, nil
}

// protoJSON is the canonical proto3 JSON mapping, with the field names of
// the .proto file (order_id, not orderId) and every field without
// presence written even at its default value (as Python's
// MessageToDict(preserving_proto_field_name=True,
// always_print_fields_with_no_presence=True) does), so that a filter
// reads value.amount whether or not it is zero.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}

// avroSizes are the bounds of a string or bytes value the Avro readers
// accept, one pool of readers each: a decoding takes the smallest bound
// at least as long as the record, so that a corrupt length never makes it
// allocate more than the record could hold.
var avroSizes = []int{64 << 10, 1 << 20, 16 << 20, 64 << 20}

var avroReaders = func() []*sync.Pool {
	pools := make([]*sync.Pool, len(avroSizes))
	for i, n := range avroSizes {
		api := avro.Config{MaxByteSliceSize: n}.Freeze()
		pools[i] = &sync.Pool{New: func() any { return avro.NewReader(nil, 0, avro.WithReaderConfig(api)) }}
	}
	return pools
}()

// decodeAvro decodes b, Avro binary of schema s, into what expressions see
// (see the package doc of recordexpr and docs/api.md): records and maps
// as map[string]any, arrays as []any, unions as the branch's value, enums
// as their symbol, int and long as int64, float and double as float64,
// bytes and fixed as []byte, decimals as their exact decimal string,
// timestamps (millis, micros) as time.Time in UTC, dates, times of day and
// local timestamps as ISO 8601 strings.
func decodeAvro(s avro.Schema, b []byte) (any, error) {
	i := 0
	for i < len(avroSizes)-1 && avroSizes[i] < len(b) {
		i++
	}
	r := avroReaders[i].Get().(*avro.Reader)
	r.Reset(b)
	r.Error = nil
	// Every item of an array or map takes a byte at least, but for
	// items of zero bytes (null, an empty record): a count beyond this
	// is a corrupt record, not a long loop.
	d := avroDecoder{r: r, items: len(b) + 1024}
	v := d.read(s, 0)
	err := r.Error
	r.Reset(nil)
	avroReaders[i].Put(r)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// avroDecoder is one decoding: the reader and the items it may still
// read.
type avroDecoder struct {
	r     *avro.Reader
	items int
}

// item counts one array or map item against the budget.
func (d *avroDecoder) item() bool {
	if d.items--; d.items < 0 {
		d.r.ReportError("Read", "more array or map items than the record has bytes")
		return false
	}
	return true
}

func (d *avroDecoder) read(s avro.Schema, depth int) any {
	r := d.r
	if r.Error != nil {
		return nil
	}
	if depth > 64 {
		r.ReportError("Read", "nested more than 64 deep")
		return nil
	}
	var logical avro.LogicalType
	if ls, ok := s.(avro.LogicalTypeSchema); ok && ls.Logical() != nil {
		logical = ls.Logical().Type()
	}
	switch s.Type() {
	case avro.Null:
		return nil
	case avro.Boolean:
		return r.ReadBool()
	case avro.Int:
		i := r.ReadInt()
		switch logical {
		case avro.Date:
			return time.Unix(int64(i)*86400, 0).UTC().Format(time.DateOnly)
		case avro.TimeMillis:
			return timeOfDay(time.Duration(i) * time.Millisecond)
		}
		return int64(i)
	case avro.Long:
		i := r.ReadLong()
		switch logical {
		case avro.TimestampMillis:
			return time.UnixMilli(i).UTC()
		case avro.TimestampMicros:
			return time.UnixMicro(i).UTC()
		case avro.LocalTimestampMillis:
			return time.UnixMilli(i).UTC().Format("2006-01-02T15:04:05.999999")
		case avro.LocalTimestampMicros:
			return time.UnixMicro(i).UTC().Format("2006-01-02T15:04:05.999999")
		case avro.TimeMicros:
			return timeOfDay(time.Duration(i) * time.Microsecond)
		}
		return i
	case avro.Float:
		return float64(r.ReadFloat())
	case avro.Double:
		return r.ReadDouble()
	case avro.String:
		return r.ReadString()
	case avro.Bytes:
		b := r.ReadBytes()
		if logical == avro.Decimal {
			return decimal(b, s.(avro.LogicalTypeSchema).Logical().(*avro.DecimalLogicalSchema).Scale())
		}
		return b
	case avro.Fixed:
		fs := s.(*avro.FixedSchema)
		b := make([]byte, fs.Size())
		r.Read(b)
		if logical == avro.Decimal {
			return decimal(b, fs.Logical().(*avro.DecimalLogicalSchema).Scale())
		}
		return b
	case avro.Enum:
		symbols := s.(*avro.EnumSchema).Symbols()
		i := int(r.ReadInt())
		if i < 0 || i >= len(symbols) {
			r.ReportError("Read", fmt.Sprintf("enum index %d out of range", i))
			return nil
		}
		return symbols[i]
	case avro.Record:
		fields := s.(*avro.RecordSchema).Fields()
		m := make(map[string]any, len(fields))
		for _, f := range fields {
			m[f.Name()] = d.read(f.Type(), depth+1)
		}
		return m
	case avro.Ref:
		return d.read(s.(*avro.RefSchema).Schema(), depth)
	case avro.Array:
		items := s.(*avro.ArraySchema).Items()
		l := []any{}
		for n := blockLen(r); n > 0 && r.Error == nil; n = blockLen(r) {
			for ; n > 0 && d.item(); n-- {
				l = append(l, d.read(items, depth+1))
			}
		}
		return l
	case avro.Map:
		values := s.(*avro.MapSchema).Values()
		m := map[string]any{}
		for n := blockLen(r); n > 0 && r.Error == nil; n = blockLen(r) {
			for ; n > 0 && d.item(); n-- {
				k := r.ReadString()
				m[k] = d.read(values, depth+1)
			}
		}
		return m
	case avro.Union:
		branches := s.(*avro.UnionSchema).Types()
		i := r.ReadLong()
		if i < 0 || i >= int64(len(branches)) {
			r.ReportError("Read", fmt.Sprintf("union branch %d out of range", i))
			return nil
		}
		return d.read(branches[i], depth+1)
	}
	r.ReportError("Read", "unexpected schema type "+string(s.Type()))
	return nil
}

// blockLen reads an array or map block's item count (its byte size, when
// written, skipped).
func blockLen(r *avro.Reader) int64 {
	n, _ := r.ReadBlockHeader()
	return n
}

// decimal is the two's-complement unscaled b with scale digits after the
// point, exactly ("12.50" for 1250 at scale 2).
func decimal(b []byte, scale int) string {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
	}
	return new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)).FloatString(scale)
}

// timeOfDay is d after midnight as Python's time.isoformat writes it:
// HH:MM:SS, then .ffffff when there are microseconds.
func timeOfDay(d time.Duration) string {
	t := time.Time{}.Add(d)
	if t.Nanosecond() == 0 {
		return t.Format(time.TimeOnly)
	}
	return t.Format("15:04:05.000000")
}
