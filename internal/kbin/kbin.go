// Package kbin writes and reads the Kafka protocol primitives that MM2's
// internal records and mm2go's offset map are made of (Connect's
// Schema/Struct layout): big-endian INT16, INT32 and INT64, and
// INT16-length-prefixed strings, written back to back.
package kbin

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every decoding error: the bytes are not a
// record of the expected kind (too short, a negative string length, a
// missing field...). Callers that skip such records, as MM2 does, test for
// it with errors.Is.
var ErrMalformed = errors.New("malformed record")

// ErrStringTooLong is wrapped by the Encoder's error when a string field is
// longer than the protocol's 32767 bytes.
var ErrStringTooLong = errors.New("string longer than 32767 bytes")

// MaxStringLen is the largest length a Kafka protocol STRING can have (its
// INT16 length prefix).
const MaxStringLen = 32767

// Encoder appends primitives to Buf. The first error (a string too long) is
// kept and returned by Result; later writes of strings are skipped.
type Encoder struct {
	Buf []byte
	err error
}

// Int8 appends v.
func (e *Encoder) Int8(v int8) { e.Buf = append(e.Buf, byte(v)) }

// Int16 appends v.
func (e *Encoder) Int16(v int16) { e.Buf = binary.BigEndian.AppendUint16(e.Buf, uint16(v)) }

// Int32 appends v.
func (e *Encoder) Int32(v int32) { e.Buf = binary.BigEndian.AppendUint32(e.Buf, uint32(v)) }

// Int64 appends v.
func (e *Encoder) Int64(v int64) { e.Buf = binary.BigEndian.AppendUint64(e.Buf, uint64(v)) }

// String appends s with its INT16 length; field names it in the error.
func (e *Encoder) String(field, s string) {
	if len(s) > MaxStringLen {
		if e.err == nil {
			e.err = fmt.Errorf("encode %s (%d bytes): %w", field, len(s), ErrStringTooLong)
		}
		return
	}
	e.Int16(int16(len(s)))
	e.Buf = append(e.Buf, s...)
}

// Result returns the bytes, or the first error.
func (e *Encoder) Result() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	return e.Buf, nil
}

// Decoder reads primitives in order. The first error is kept in Err and
// every later read returns zero. Like Java's Schema.read it ignores bytes
// left over after the last field, so values with appended future fields
// still decode.
type Decoder struct {
	B   []byte
	Off int
	Err error
}

func (d *Decoder) need(field string, n int) bool {
	if d.Err != nil {
		return false
	}
	if len(d.B)-d.Off < n {
		d.Err = fmt.Errorf("read %s: need %d bytes at offset %d, have %d: %w", field, n, d.Off, len(d.B)-d.Off, ErrMalformed)
		return false
	}
	return true
}

// Int8 reads an INT8.
func (d *Decoder) Int8(field string) int8 {
	if !d.need(field, 1) {
		return 0
	}
	v := int8(d.B[d.Off])
	d.Off++
	return v
}

// Int16 reads an INT16.
func (d *Decoder) Int16(field string) int16 {
	if !d.need(field, 2) {
		return 0
	}
	v := int16(binary.BigEndian.Uint16(d.B[d.Off:]))
	d.Off += 2
	return v
}

// Int32 reads an INT32.
func (d *Decoder) Int32(field string) int32 {
	if !d.need(field, 4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(d.B[d.Off:]))
	d.Off += 4
	return v
}

// Int64 reads an INT64.
func (d *Decoder) Int64(field string) int64 {
	if !d.need(field, 8) {
		return 0
	}
	v := int64(binary.BigEndian.Uint64(d.B[d.Off:]))
	d.Off += 8
	return v
}

// String reads an INT16-length-prefixed string. The bytes are kept as they
// are; Java would replace invalid UTF-8 with U+FFFD, which cannot happen for
// strings Java wrote.
func (d *Decoder) String(field string) string {
	n := d.Int16(field + " length")
	if d.Err != nil {
		return ""
	}
	if n < 0 {
		d.Err = fmt.Errorf("read %s: negative string length %d: %w", field, n, ErrMalformed)
		return ""
	}
	if !d.need(field, int(n)) {
		return ""
	}
	s := string(d.B[d.Off : d.Off+int(n)])
	d.Off += int(n)
	return s
}
