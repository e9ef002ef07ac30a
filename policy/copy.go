package policy

import (
	"bytes"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// OriginHeader names the cluster a record was first produced on. mm2go adds
// it as the last header of every record a flow with provenance headers
// (mm2go.provenance.headers) copies, unless the record has one already.
const OriginHeader = "mm2go.origin"

// Fields is a set of the parts of a record that a copy keeps.
type Fields uint8

// The parts of a record that a copy keeps.
const (
	FieldKey Fields = 1 << iota
	FieldValue
	FieldHeaders
	FieldTimestamp
)

// String names the fields, "key, headers" say; "" for none.
func (f Fields) String() string {
	var names []string
	for i, name := range []string{"key", "value", "headers", "timestamp"} {
		if f&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// CopyDiff returns the fields in which dst is not a copy of src: the key,
// the value and the headers byte for byte (a null and an empty key or value
// differ), and the timestamp unless dst's timestamp is log append time
// (the target topic assigns its own). One provenance header (OriginHeader)
// after src's headers is what mm2go added, not a difference.
func CopyDiff(src, dst *kgo.Record) Fields {
	var f Fields
	if !sameBytes(src.Key, dst.Key) {
		f |= FieldKey
	}
	if !sameBytes(src.Value, dst.Value) {
		f |= FieldValue
	}
	dh := dst.Headers
	if n := len(dh); n == len(src.Headers)+1 && dh[n-1].Key == OriginHeader {
		dh = dh[:n-1]
	}
	if len(src.Headers) != len(dh) {
		f |= FieldHeaders
	} else {
		for i, h := range src.Headers {
			if h.Key != dh[i].Key || !sameBytes(h.Value, dh[i].Value) {
				f |= FieldHeaders
				break
			}
		}
	}
	if dst.Attrs.TimestampType() != 1 && !src.Timestamp.Equal(dst.Timestamp) {
		f |= FieldTimestamp
	}
	return f
}

func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}
