package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Names of MM2's three connectors. In dedicated mode a connector's name is its simple class name,
// and Connect stores it as the first element of every offsets-topic key.
const (
	SourceConnectorName     = "MirrorSourceConnector"
	CheckpointConnectorName = "MirrorCheckpointConnector"
	HeartbeatConnectorName  = "MirrorHeartbeatConnector"
)

// SourceOffsetKey is the Connect source partition of MirrorSourceConnector: one source
// topic-partition of the flow whose source alias is Cluster. Its offset is the last replicated
// upstream offset; a restarted task resumes at offset+1.
type SourceOffsetKey struct {
	Cluster   string
	Topic     string
	Partition int32
}

// CheckpointOffsetKey is the Connect source partition of MirrorCheckpointConnector: one consumer
// group and downstream (renamed) topic-partition. Its offset is always 0.
type CheckpointOffsetKey struct {
	Group     string
	Topic     string
	Partition int32
}

// HeartbeatOffsetKey is the Connect source partition of MirrorHeartbeatConnector: one flow. Its
// offset is always 0.
type HeartbeatOffsetKey struct {
	SourceAlias string
	TargetAlias string
}

// The Encode methods return the record key Java Connect writes to the offsets topic:
// the JSON array [connector name, partition map] as JsonConverter (schemas.enable=false) prints it,
// compact, with Jackson's string escaping and the field order of Java's HashMap for these key sets.
// Connect finds offsets by exact key bytes, so these bytes are what lets a Java deployment resume
// from offsets mm2go wrote and the other way round.

// Encode returns ["MirrorSourceConnector",{"cluster":…,"partition":…,"topic":…}].
func (k SourceOffsetKey) Encode() []byte {
	b := make([]byte, 0, 64+len(k.Cluster)+len(k.Topic))
	b = append(b, `["`+SourceConnectorName+`",{"cluster":`...)
	b = appendJSONString(b, k.Cluster)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(k.Partition), 10)
	b = append(b, `,"topic":`...)
	b = appendJSONString(b, k.Topic)
	return append(b, "}]"...)
}

// Encode returns ["MirrorCheckpointConnector",{"partition":…,"topic":…,"group":…}].
func (k CheckpointOffsetKey) Encode() []byte {
	b := make([]byte, 0, 64+len(k.Group)+len(k.Topic))
	b = append(b, `["`+CheckpointConnectorName+`",{"partition":`...)
	b = strconv.AppendInt(b, int64(k.Partition), 10)
	b = append(b, `,"topic":`...)
	b = appendJSONString(b, k.Topic)
	b = append(b, `,"group":`...)
	b = appendJSONString(b, k.Group)
	return append(b, "}]"...)
}

// Encode returns ["MirrorHeartbeatConnector",{"sourceClusterAlias":…,"targetClusterAlias":…}].
func (k HeartbeatOffsetKey) Encode() []byte {
	b := make([]byte, 0, 80+len(k.SourceAlias)+len(k.TargetAlias))
	b = append(b, `["`+HeartbeatConnectorName+`",{"sourceClusterAlias":`...)
	b = appendJSONString(b, k.SourceAlias)
	b = append(b, `,"targetClusterAlias":`...)
	b = appendJSONString(b, k.TargetAlias)
	return append(b, "}]"...)
}

// EncodeConnectOffset returns the offsets-topic value {"offset":N} for any of the three connectors.
func EncodeConnectOffset(offset int64) []byte {
	b := append(make([]byte, 0, 32), `{"offset":`...)
	b = strconv.AppendInt(b, offset, 10)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string the way Jackson's UTF-8 generator writes it: '"' and
// '\' get a backslash; \b \t \n \f \r their short escapes; the other control characters below 0x20
// \u00XX with upper-case hex; characters beyond the Basic Multilingual Plane a surrogate pair of
// \uXXXX escapes; everything else, including DEL, U+2028 and '/', raw UTF-8. Bytes that are not
// valid UTF-8 become U+FFFD, which is what a Java string decoded from them would hold.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	b = append(b, '"')
	for _, r := range s { // ranging over a string yields U+FFFD for each invalid byte
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\b':
			b = append(b, `\b`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\f':
			b = append(b, `\f`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			for _, u := range [2]rune{hi, lo} {
				b = append(b, '\\', 'u', hex[u>>12&0xF], hex[u>>8&0xF], hex[u>>4&0xF], hex[u&0xF])
			}
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// ConnectOffset is one decoded record of a Connect offsets topic. For the three MM2 connectors
// exactly one of Source, Checkpoint and Heartbeat is set; records of other connectors decode with
// all three nil, Connector set and Offset 0. Deleted marks a tombstone (a null or empty value, or
// the JSON value null): Connect forgets the partition's offset.
type ConnectOffset struct {
	Connector  string
	Source     *SourceOffsetKey
	Checkpoint *CheckpointOffsetKey
	Heartbeat  *HeartbeatOffsetKey
	Offset     int64
	Deleted    bool
}

// DecodeConnectOffset parses a key/value pair of a Connect offsets topic, whether Java Connect or
// mm2go wrote it: fields may come in any order, and numbers are read as 64-bit integers as Java's
// JsonConverter does. The key must be a JSON array [connector name, partition object]. For the MM2
// connectors the partition object must hold the connector's string fields and, where it has one, a
// "partition" integer in 0..2147483647; a value that is not a tombstone must be an object with an
// integer "offset" that is not negative (MM2 writes 0 for checkpoints and heartbeats, which is not
// enforced). Unknown fields are ignored. Errors name what is wrong and wrap ErrMalformed.
func DecodeConnectOffset(key, value []byte) (ConnectOffset, error) {
	var out ConnectOffset
	var elems []json.RawMessage
	if err := json.Unmarshal(key, &elems); err != nil {
		return ConnectOffset{}, fmt.Errorf("decode connect offset key: %w: %w", ErrMalformed, err)
	}
	if len(elems) != 2 {
		return ConnectOffset{}, fmt.Errorf("decode connect offset key: want a JSON array of 2 elements [connector, partition], got %d: %w", len(elems), ErrMalformed)
	}
	if !isJSON(elems[0], '"') {
		return ConnectOffset{}, fmt.Errorf("decode connect offset key: connector name is %s, want a string: %w", abbreviate(elems[0]), ErrMalformed)
	}
	if err := json.Unmarshal(elems[0], &out.Connector); err != nil {
		return ConnectOffset{}, fmt.Errorf("decode connect offset key: connector name: %w: %w", ErrMalformed, err)
	}
	partition, err := jsonObject(elems[1])
	if err != nil {
		return ConnectOffset{}, fmt.Errorf("decode connect offset key: partition of connector %q: %w", out.Connector, err)
	}

	switch out.Connector {
	case SourceConnectorName:
		var k SourceOffsetKey
		err = firstErr(
			stringField(partition, "cluster", &k.Cluster),
			stringField(partition, "topic", &k.Topic),
			partitionField(partition, &k.Partition))
		out.Source = &k
	case CheckpointConnectorName:
		var k CheckpointOffsetKey
		err = firstErr(
			stringField(partition, "group", &k.Group),
			stringField(partition, "topic", &k.Topic),
			partitionField(partition, &k.Partition))
		out.Checkpoint = &k
	case HeartbeatConnectorName:
		var k HeartbeatOffsetKey
		err = firstErr(
			stringField(partition, "sourceClusterAlias", &k.SourceAlias),
			stringField(partition, "targetClusterAlias", &k.TargetAlias))
		out.Heartbeat = &k
	}
	if err != nil {
		return ConnectOffset{}, fmt.Errorf("decode connect offset key: partition of connector %q: %w", out.Connector, err)
	}

	trimmed := bytes.TrimSpace(value)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		out.Deleted = true
		return out, nil
	}
	if out.Source == nil && out.Checkpoint == nil && out.Heartbeat == nil {
		if !json.Valid(value) {
			return ConnectOffset{}, fmt.Errorf("decode connect offset value of connector %q: invalid JSON: %w", out.Connector, ErrMalformed)
		}
		return out, nil
	}
	offset, err := jsonObject(value)
	if err != nil {
		return ConnectOffset{}, fmt.Errorf("decode connect offset value of connector %q: %w", out.Connector, err)
	}
	raw, ok := offset["offset"]
	if !ok {
		return ConnectOffset{}, fmt.Errorf("decode connect offset value of connector %q: missing \"offset\": %w", out.Connector, ErrMalformed)
	}
	n, err := jsonInt(raw)
	if err != nil {
		return ConnectOffset{}, fmt.Errorf("decode connect offset value of connector %q: \"offset\": %w", out.Connector, err)
	}
	if n < 0 {
		return ConnectOffset{}, fmt.Errorf("decode connect offset value of connector %q: \"offset\" is %d, want >= 0: %w", out.Connector, n, ErrMalformed)
	}
	out.Offset = n
	return out, nil
}

// isJSON reports whether raw, a single JSON value, starts with the byte that opens the wanted type.
func isJSON(raw json.RawMessage, open byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == open
}

func jsonObject(raw []byte) (map[string]json.RawMessage, error) {
	if !isJSON(raw, '{') {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("invalid JSON: %w", ErrMalformed)
		}
		return nil, fmt.Errorf("got %s, want a JSON object: %w", abbreviate(raw), ErrMalformed)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, nil
}

func stringField(m map[string]json.RawMessage, name string, dst *string) error {
	raw, ok := m[name]
	if !ok {
		return fmt.Errorf("missing %q: %w", name, ErrMalformed)
	}
	if !isJSON(raw, '"') {
		return fmt.Errorf("%q is %s, want a string: %w", name, abbreviate(raw), ErrMalformed)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%q: %w: %w", name, ErrMalformed, err)
	}
	return nil
}

func partitionField(m map[string]json.RawMessage, dst *int32) error {
	raw, ok := m["partition"]
	if !ok {
		return fmt.Errorf("missing \"partition\": %w", ErrMalformed)
	}
	n, err := jsonInt(raw)
	if err != nil {
		return fmt.Errorf("\"partition\": %w", err)
	}
	if n < 0 || n > 1<<31-1 {
		return fmt.Errorf("\"partition\" is %d, want 0..2147483647: %w", n, ErrMalformed)
	}
	*dst = int32(n)
	return nil
}

// jsonInt parses a JSON number that must be an integer fitting in 64 bits ("5", "-0"); fractions,
// exponents and other JSON types are rejected, as MM2 rejects anything but Integer and Long.
func jsonInt(raw json.RawMessage) (int64, error) {
	t := bytes.TrimSpace(raw)
	n, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("got %s, want a 64-bit integer: %w", abbreviate(t), ErrMalformed)
	}
	return n, nil
}

// abbreviate quotes at most the first 40 bytes of a JSON value for an error message.
func abbreviate(raw []byte) string {
	const limit = 40
	if len(raw) > limit {
		return strconv.Quote(string(raw[:limit])) + "…"
	}
	return strconv.Quote(string(raw))
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
