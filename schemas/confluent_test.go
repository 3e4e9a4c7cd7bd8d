package schemas

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/recordexpr"
)

// confluentPython returns a Python that imports confluent-kafka's
// serializers, fastavro and grpcio-tools: the venv that .ci/run fills.
// Without one the test is skipped, except under CI, which must run it.
func confluentPython(t *testing.T) string {
	return testutil.Python(t, "import confluent_kafka.schema_registry.avro, fastavro, grpc_tools, jsonschema",
		"check the decoding against confluent-kafka's serializers",
		"confluent-kafka, fastavro and grpcio-tools: .ci/run installs them into ~/.cache/keyhook/venv")
}

// confluentRecord is one line of testdata/confluent_serde.py.
type confluentRecord struct {
	Name   string          `json:"name"`
	Format string          `json:"format"`
	Wire   []byte          `json:"wire"`
	Want   json.RawMessage `json:"want"`
}

// TestDecodesWhatConfluentSerializersProduce defends the formats against
// serializers we did not write: confluent-kafka's AvroSerializer (with
// fastavro), ProtobufSerializer and JSONSerializer register their schemas
// with a registry (franz-go's srfake, serving Confluent's REST API) and
// serialize a table of values — nested records, unions, enums, decimals,
// timestamps, maps, repeated and oneof fields, a schema reference, message
// indexes, two versions of one subject — and keyhook must decode each to
// the JSON the same library's deserializer gives, in the documented
// mapping (docs/api.md).
func TestDecodesWhatConfluentSerializersProduce(t *testing.T) {
	py := confluentPython(t)
	reg := srfake.New()
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "confluent_serde.py"), reg.URL(), t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("confluent_serde.py: %v\n%s", err, stderr.String())
	}
	r := newRegistry(t, reg)
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c confluentRecord
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		seen[c.Format]++
		t.Run(c.Name, func(t *testing.T) {
			p, err := recordexpr.Compile(recordexpr.Spec{ValueFormat: recordexpr.Format(c.Format)}, recordexpr.WithSchemas(r))
			if err != nil {
				t.Fatal(err)
			}
			rec := &recordexpr.Record{Value: c.Wire}
			if err := p.Wait(ctx, rec); err != nil {
				t.Fatal(err)
			}
			body, err := p.Render(rec)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(normalJSON(t, c.Want), normalJSON(t, body.Value)); diff != "" {
				t.Errorf("keyhook's JSON differs from the deserializer's (-deserializer +keyhook):\n%s\nkeyhook: %s", diff, body.Value)
			}
			if !strings.HasPrefix(body.Schema, reg.URL()+"/schemas/ids/") {
				t.Errorf("schema %q, want the registry's /schemas/ids/<id>", body.Schema)
			}
		})
	}
	if seen["avro"] < 4 || seen["protobuf"] < 4 || seen["json_schema"] < 2 {
		t.Fatalf("records by format %v: the script stopped short\n%s", seen, stderr.String())
	}
}

// normalJSON decodes b with its numbers kept exact, as their value at 256
// bits of precision: 9007199254740993 is not 9007199254740992, while 0 and
// 0.0 (a double at zero, which protojson writes 0 and Python 0.0), or 12.5
// and 1.25e1, are one number.
func normalJSON(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return exactNumbers(v)
}

func exactNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		f, ok := new(big.Float).SetPrec(256).SetString(string(t))
		if !ok {
			return "bad number " + string(t)
		}
		return "number " + f.Text('g', -1)
	case map[string]any:
		for k, e := range t {
			t[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = exactNumbers(e)
		}
	}
	return v
}
