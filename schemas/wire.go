package schemas

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"
)

// maxIndexes bounds the Protobuf message indexes of one header: deeper
// nesting than this is a corrupt header, not a schema.
const maxIndexes = 32

// header splits b, in the Confluent wire format, into the schema id and
// the rest (the Protobuf message indexes, then the encoded value).
func header(b []byte) (int, []byte, error) {
	var h sr.ConfluentHeader
	id, rest, err := h.DecodeID(b)
	if err != nil {
		if len(b) > 0 && b[0] != 0 {
			return 0, nil, fmt.Errorf("magic byte is %#02x, not 0: not the Confluent wire format", b[0])
		}
		return 0, nil, errors.New("shorter than the Confluent wire format's 5-byte header")
	}
	return id, rest, nil
}

// indexes splits b, what follows a Protobuf header's id, into the message
// indexes and the encoded message.
func indexes(b []byte) ([]int, []byte, error) {
	var h sr.ConfluentHeader
	idx, rest, err := h.DecodeIndex(b, maxIndexes)
	if err != nil {
		return nil, nil, errors.New("bad Protobuf message indexes after the schema id")
	}
	return idx, rest, nil
}
