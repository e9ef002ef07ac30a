package policy

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConnectOffsetKeysSpecExamples(t *testing.T) {
	// The bytes Java Connect writes, with Java's HashMap field order.
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"source", SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 0}.Encode(),
			`["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t"}]`},
		{"checkpoint", CheckpointOffsetKey{Group: "g", Topic: "A.t", Partition: 0}.Encode(),
			`["MirrorCheckpointConnector",{"partition":0,"topic":"A.t","group":"g"}]`},
		{"heartbeat", HeartbeatOffsetKey{SourceAlias: "A", TargetAlias: "B"}.Encode(),
			`["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]`},
		{"source, large partition", SourceOffsetKey{Cluster: "us-west", Topic: "orders", Partition: 2147483647}.Encode(),
			`["MirrorSourceConnector",{"cluster":"us-west","partition":2147483647,"topic":"orders"}]`},
		{"value 5", EncodeConnectOffset(5), `{"offset":5}`},
		{"value 0", EncodeConnectOffset(0), `{"offset":0}`},
		{"value -1", EncodeConnectOffset(-1), `{"offset":-1}`},
		{"value max", EncodeConnectOffset(math.MaxInt64), `{"offset":9223372036854775807}`},
		{"value min", EncodeConnectOffset(math.MinInt64), `{"offset":-9223372036854775808}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, string(tc.got))
		})
	}
}

func TestConnectOffsetKeyJacksonEscaping(t *testing.T) {
	// Expected JSON strings and partitions (of 25) printed by Connect 4.3.1's JsonConverter
	// (schemas.enable=false) for MirrorUtils.wrapPartition(new TopicPartition(s, 7), s).
	tests := []struct {
		name      string
		in        string
		json      string // how Jackson writes in
		partition int32
	}{
		{"plain", "A", `"A"`, 13},
		{"quote", `q"uote`, `"q\"uote"`, 15},
		{"backslash", `back\slash`, `"back\\slash"`, 22},
		{"short escapes", "tab\tnl\ncr\rff\fbs\b", `"tab\tnl\ncr\rff\fbs\b"`, 14},
		{"other controls upper-case hex, DEL raw", "nul\x00x\x01\x1f\x7f", `"nul\u0000x\u0001\u001F` + "\x7f" + `"`, 15},
		{"latin-1 raw", "café", `"café"`, 23},
		{"CJK raw", "中文", `"中文"`, 16},
		{"astral as surrogate escapes", "emoji😀", `"emoji\uD83D\uDE00"`, 15},
		{"line and paragraph separators raw", "ls\u2028ps\u2029", "\"ls\u2028ps\u2029\"", 20},
		{"slash and html raw", "slash/</script>", `"slash/</script>"`, 23},
		{"ampersand and apostrophe raw", "amp&lt<gt>'", `"amp&lt<gt>'"`, 19},
		{"NEL raw", "\u0085nel", "\"\u0085nel\"", 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := SourceOffsetKey{Cluster: tc.in, Topic: tc.in, Partition: 7}.Encode()
			want := `["MirrorSourceConnector",{"cluster":` + tc.json + `,"partition":7,"topic":` + tc.json + `}]`
			require.Equal(t, want, string(key))
			require.Equal(t, tc.partition, ConnectOffsetPartition(key, 25))

			got, err := DecodeConnectOffset(key, EncodeConnectOffset(1))
			require.NoError(t, err)
			require.Equal(t, &SourceOffsetKey{Cluster: tc.in, Topic: tc.in, Partition: 7}, got.Source)
		})
	}
	t.Run("invalid UTF-8 becomes U+FFFD", func(t *testing.T) {
		key := HeartbeatOffsetKey{SourceAlias: "a\xffb", TargetAlias: "\xc3"}.Encode()
		require.Equal(t, `["MirrorHeartbeatConnector",{"sourceClusterAlias":"a`+"\uFFFD"+`b","targetClusterAlias":"`+"\uFFFD"+`"}]`, string(key))
	})
}

func TestDecodeConnectOffset(t *testing.T) {
	tests := []struct {
		name       string
		key, value string
		nilValue   bool
		want       ConnectOffset
	}{
		{
			name: "source written by Java",
			key:  `["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t"}]`, value: `{"offset":5}`,
			want: ConnectOffset{Connector: SourceConnectorName, Source: &SourceOffsetKey{Cluster: "A", Topic: "t"}, Offset: 5},
		},
		{
			name: "source, other field order and whitespace",
			key:  ` [ "MirrorSourceConnector" , {"topic":"t", "partition":5 ,"cluster":"A"} ] `, value: " { \"offset\" : 9223372036854775807 } ",
			want: ConnectOffset{Connector: SourceConnectorName, Source: &SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 5}, Offset: math.MaxInt64},
		},
		{
			name: "source, unknown fields ignored",
			key:  `["MirrorSourceConnector",{"cluster":"A","partition":3,"topic":"t","extra":[1]}]`, value: `{"offset":0,"x":true}`,
			want: ConnectOffset{Connector: SourceConnectorName, Source: &SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 3}},
		},
		{
			name: "checkpoint",
			key:  `["MirrorCheckpointConnector",{"partition":2,"topic":"A.t","group":"g"}]`, value: `{"offset":0}`,
			want: ConnectOffset{Connector: CheckpointConnectorName, Checkpoint: &CheckpointOffsetKey{Group: "g", Topic: "A.t", Partition: 2}},
		},
		{
			name: "heartbeat",
			key:  `["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]`, value: `{"offset":0}`,
			want: ConnectOffset{Connector: HeartbeatConnectorName, Heartbeat: &HeartbeatOffsetKey{SourceAlias: "A", TargetAlias: "B"}},
		},
		{
			name: "escaped strings",
			key:  `["MirrorHeartbeatConnector",{"sourceClusterAlias":"q\"\\\u0041\uD83D\uDE00","targetClusterAlias":"\t"}]`, value: `{"offset":0}`,
			want: ConnectOffset{Connector: HeartbeatConnectorName, Heartbeat: &HeartbeatOffsetKey{SourceAlias: "q\"\\A😀", TargetAlias: "\t"}},
		},
		{
			name: "tombstone (null value)",
			key:  `["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t"}]`, nilValue: true,
			want: ConnectOffset{Connector: SourceConnectorName, Source: &SourceOffsetKey{Cluster: "A", Topic: "t"}, Deleted: true},
		},
		{
			name: "tombstone (empty value)",
			key:  `["MirrorCheckpointConnector",{"partition":0,"topic":"A.t","group":"g"}]`, value: ``,
			want: ConnectOffset{Connector: CheckpointConnectorName, Checkpoint: &CheckpointOffsetKey{Group: "g", Topic: "A.t"}, Deleted: true},
		},
		{
			name: "JSON null value",
			key:  `["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]`, value: ` null `,
			want: ConnectOffset{Connector: HeartbeatConnectorName, Heartbeat: &HeartbeatOffsetKey{SourceAlias: "A", TargetAlias: "B"}, Deleted: true},
		},
		{
			name: "other connector",
			key:  `["my-jdbc-source",{"table":"x"}]`, value: `{"position":"abc","offset":"not ours"}`,
			want: ConnectOffset{Connector: "my-jdbc-source"},
		},
		{
			name: "other connector tombstone",
			key:  `["my-jdbc-source",{}]`, nilValue: true,
			want: ConnectOffset{Connector: "my-jdbc-source", Deleted: true},
		},
		{
			name: "partition as negative zero",
			key:  `["MirrorSourceConnector",{"cluster":"A","partition":-0,"topic":"t"}]`, value: `{"offset":1}`,
			want: ConnectOffset{Connector: SourceConnectorName, Source: &SourceOffsetKey{Cluster: "A", Topic: "t"}, Offset: 1},
		},
		{
			name: "checkpoint offset other than 0 is read as is",
			key:  `["MirrorCheckpointConnector",{"partition":0,"topic":"A.t","group":"g"}]`, value: `{"offset":42}`,
			want: ConnectOffset{Connector: CheckpointConnectorName, Checkpoint: &CheckpointOffsetKey{Group: "g", Topic: "A.t"}, Offset: 42},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var value []byte
			if !tc.nilValue {
				value = []byte(tc.value)
			}
			got, err := DecodeConnectOffset([]byte(tc.key), value)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestConnectOffsetRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		key  []byte
		want ConnectOffset
	}{
		{"source", SourceOffsetKey{Cluster: "primary", Topic: "test-topic-1", Partition: 9}.Encode(),
			ConnectOffset{Connector: SourceConnectorName, Source: &SourceOffsetKey{Cluster: "primary", Topic: "test-topic-1", Partition: 9}, Offset: 99}},
		{"checkpoint", CheckpointOffsetKey{Group: "g\"1\n", Topic: "primary.t", Partition: 0}.Encode(),
			ConnectOffset{Connector: CheckpointConnectorName, Checkpoint: &CheckpointOffsetKey{Group: "g\"1\n", Topic: "primary.t"}, Offset: 99}},
		{"heartbeat", HeartbeatOffsetKey{SourceAlias: "A", TargetAlias: "B- ._~:/?#[]@!$&'()*+;=\"<>%{}|\\^`618"}.Encode(),
			ConnectOffset{Connector: HeartbeatConnectorName, Heartbeat: &HeartbeatOffsetKey{SourceAlias: "A", TargetAlias: "B- ._~:/?#[]@!$&'()*+;=\"<>%{}|\\^`618"}, Offset: 99}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeConnectOffset(tc.key, EncodeConnectOffset(99))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDecodeConnectOffsetErrors(t *testing.T) {
	const src = `["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t"}]`
	tests := []struct {
		name       string
		key, value string
		wantSubstr string
	}{
		{"empty key", ``, `{"offset":0}`, "decode connect offset key: malformed record: unexpected end of JSON input"},
		{"key not JSON", `["MirrorSourceConnector",`, `{"offset":0}`, "decode connect offset key"},
		{"key with trailing garbage", src + `x`, `{"offset":0}`, "decode connect offset key"},
		{"key is an object", `{"a":1}`, `{"offset":0}`, "decode connect offset key"},
		{"key is null", `null`, `{"offset":0}`, "want a JSON array of 2 elements [connector, partition], got 0"},
		{"key with 3 elements", `["MirrorSourceConnector",{},{}]`, `{"offset":0}`, "got 3"},
		{"connector name not a string", `[1,{"cluster":"A"}]`, `{"offset":0}`, `connector name is "1", want a string`},
		{"connector name null", `[null,{}]`, `{"offset":0}`, `connector name is "null", want a string`},
		{"partition not an object", `["MirrorSourceConnector",null]`, `{"offset":0}`, `partition of connector "MirrorSourceConnector": got "null", want a JSON object`},
		{"missing cluster", `["MirrorSourceConnector",{"partition":0,"topic":"t"}]`, `{"offset":0}`, `missing "cluster"`},
		{"topic not a string", `["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":7}]`, `{"offset":0}`, `"topic" is "7", want a string`},
		{"missing partition", `["MirrorSourceConnector",{"cluster":"A","topic":"t"}]`, `{"offset":0}`, `missing "partition"`},
		{"negative partition", `["MirrorSourceConnector",{"cluster":"A","partition":-1,"topic":"t"}]`, `{"offset":0}`, `"partition" is -1, want 0..2147483647`},
		{"partition above int32", `["MirrorCheckpointConnector",{"partition":2147483648,"topic":"t","group":"g"}]`, `{"offset":0}`, `"partition" is 2147483648, want 0..2147483647`},
		{"partition as float", `["MirrorSourceConnector",{"cluster":"A","partition":1.0,"topic":"t"}]`, `{"offset":0}`, `"partition": got "1.0", want a 64-bit integer`},
		{"partition with exponent", `["MirrorSourceConnector",{"cluster":"A","partition":1e2,"topic":"t"}]`, `{"offset":0}`, `want a 64-bit integer`},
		{"partition as string", `["MirrorSourceConnector",{"cluster":"A","partition":"0","topic":"t"}]`, `{"offset":0}`, `want a 64-bit integer`},
		{"partition beyond int64", `["MirrorSourceConnector",{"cluster":"A","partition":99999999999999999999,"topic":"t"}]`, `{"offset":0}`, `want a 64-bit integer`},
		{"checkpoint missing group", `["MirrorCheckpointConnector",{"partition":0,"topic":"t"}]`, `{"offset":0}`, `missing "group"`},
		{"heartbeat alias null", `["MirrorHeartbeatConnector",{"sourceClusterAlias":null,"targetClusterAlias":"B"}]`, `{"offset":0}`, `"sourceClusterAlias" is "null", want a string`},
		{"value not JSON", src, `{"offset":`, `decode connect offset value of connector "MirrorSourceConnector": malformed record: unexpected end of JSON input`},
		{"value not an object", src, `5`, `got "5", want a JSON object`},
		{"value without offset", src, `{"off":5}`, `missing "offset"`},
		{"negative offset", src, `{"offset":-1}`, `"offset" is -1, want >= 0`},
		{"offset as float", src, `{"offset":5.5}`, `"offset": got "5.5", want a 64-bit integer`},
		{"offset beyond int64", src, `{"offset":9223372036854775808}`, `want a 64-bit integer`},
		{"offset null", src, `{"offset":null}`, `got "null", want a 64-bit integer`},
		{"other connector with invalid value", `["x",{}]`, `{`, `decode connect offset value of connector "x": invalid JSON`},
		{"other connector with array partition", `["x",[]]`, `{}`, `partition of connector "x": got "[]", want a JSON object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeConnectOffset([]byte(tc.key), []byte(tc.value))
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.wantSubstr)
			require.Equal(t, ConnectOffset{}, got)
		})
	}
}

// FuzzDecodeConnectOffset checks that decoding never panics, that every error wraps ErrMalformed,
// and that an accepted MM2 record survives Encode and decoding again.
func FuzzDecodeConnectOffset(f *testing.F) {
	f.Add([]byte(`["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t"}]`), []byte(`{"offset":5}`))
	f.Add([]byte(`["MirrorCheckpointConnector",{"partition":0,"topic":"A.t","group":"g"}]`), []byte(`{"offset":0}`))
	f.Add([]byte(`["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]`), []byte(nil))
	f.Add([]byte(`["x",{"a":[1,{"b":null}]}]`), []byte(`{"offset":"x"}`))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		got, err := DecodeConnectOffset(key, value)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		var again []byte
		switch {
		case got.Source != nil:
			again = got.Source.Encode()
		case got.Checkpoint != nil:
			again = got.Checkpoint.Encode()
		case got.Heartbeat != nil:
			again = got.Heartbeat.Encode()
		default:
			return
		}
		var v []byte
		if !got.Deleted {
			v = EncodeConnectOffset(got.Offset)
		}
		round, err := DecodeConnectOffset(again, v)
		require.NoError(t, err)
		require.Equal(t, got, round)
	})
}
