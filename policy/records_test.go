package policy

import (
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/kbin"
)

// unhex decodes a hex string that may contain spaces and '|' separators, as in the spec.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "").Replace(s))
	require.NoError(t, err)
	return b
}

// The expected bytes and strings below are MM2's documented record layouts, plus values printed by the
// Java classes of connect-mirror 4.3.1 (OffsetSync/Checkpoint/Heartbeat recordKey, recordValue and
// toString).

func TestOffsetSyncBytes(t *testing.T) {
	tests := []struct {
		name       string
		sync       OffsetSync
		key, value string
		str        string
	}{
		{
			name: "spec example",
			sync: OffsetSync{Topic: "t", Partition: 0, UpstreamOffset: 5, DownstreamOffset: 7},
			key:  "00 01 74 | 00 00 00 00", value: "00 00 00 00 00 00 00 05 | 00 00 00 00 00 00 00 07",
			str: "OffsetSync{topicPartition=t-0, upstreamOffset=5, downstreamOffset=7}",
		},
		{
			name: "spec second example, extreme offsets",
			sync: OffsetSync{Topic: "topic1", Partition: 2, UpstreamOffset: -1, DownstreamOffset: math.MaxInt64},
			key:  "00 06 74 6f 70 69 63 31 00 00 00 02", value: "ffffffffffffffff 7fffffffffffffff",
			str: "OffsetSync{topicPartition=topic1-2, upstreamOffset=-1, downstreamOffset=9223372036854775807}",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := tc.sync.Key()
			require.NoError(t, err)
			require.Equal(t, unhex(t, tc.key), key)
			require.Equal(t, unhex(t, tc.value), tc.sync.Value())
			require.Equal(t, tc.str, tc.sync.String())

			got, err := DecodeOffsetSync(key, tc.sync.Value())
			require.NoError(t, err)
			require.Equal(t, tc.sync, got)
		})
	}
}

func TestCheckpointBytes(t *testing.T) {
	tests := []struct {
		name       string
		cp         Checkpoint
		key, value string
		str        string
	}{
		{
			name:  "spec example, empty metadata",
			cp:    Checkpoint{Group: "g", Topic: "t", Partition: 0, UpstreamOffset: 5, DownstreamOffset: 7},
			key:   "00 01 67 | 00 01 74 | 00 00 00 00",
			value: "00 00 | 00 00 00 00 00 00 00 05 | 00 00 00 00 00 00 00 07 | 00 00",
			str:   "Checkpoint{consumerGroupId=g, topicPartition=t-0, upstreamOffset=5, downstreamOffset=7, metadata=}",
		},
		{
			name:  "metadata m1, non-ASCII group, renamed topic",
			cp:    Checkpoint{Group: "grüppe", Topic: "A.t", Partition: 3, UpstreamOffset: 5, DownstreamOffset: 7, Metadata: "m1"},
			key:   "0007 6772c3bc707065 | 0003 412e74 | 00000003",
			value: "0000 | 0000000000000005 | 0000000000000007 | 0002 6d31",
			str:   "Checkpoint{consumerGroupId=grüppe, topicPartition=A.t-3, upstreamOffset=5, downstreamOffset=7, metadata=m1}",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := tc.cp.Key()
			require.NoError(t, err)
			require.Equal(t, unhex(t, tc.key), key)
			value, err := tc.cp.Value()
			require.NoError(t, err)
			require.Equal(t, unhex(t, tc.value), value)
			require.Equal(t, tc.str, tc.cp.String())

			got, err := DecodeCheckpoint(key, value)
			require.NoError(t, err)
			require.Equal(t, tc.cp, got)
		})
	}
}

func TestHeartbeatBytes(t *testing.T) {
	hb := Heartbeat{SourceAlias: "A", TargetAlias: "B", Timestamp: 1700000000000}
	key, err := hb.Key()
	require.NoError(t, err)
	require.Equal(t, unhex(t, "00 01 41 | 00 01 42"), key)
	require.Equal(t, unhex(t, "00 00 | 00 00 01 8b cf e5 68 00"), hb.Value())
	require.Equal(t, "Heartbeat{sourceClusterAlias=A, targetClusterAlias=B, timestamp=1700000000000}", hb.String())

	got, err := DecodeHeartbeat(key, hb.Value())
	require.NoError(t, err)
	require.Equal(t, hb, got)
}

func TestRecordRoundTrips(t *testing.T) {
	long := strings.Repeat("x", kbin.MaxStringLen)
	t.Run("offset sync", func(t *testing.T) {
		for _, s := range []OffsetSync{
			{},
			{Topic: long, Partition: math.MaxInt32, UpstreamOffset: math.MinInt64, DownstreamOffset: math.MaxInt64},
			{Topic: "A.orders", Partition: -1, UpstreamOffset: 1 << 40, DownstreamOffset: 0},
		} {
			key, err := s.Key()
			require.NoError(t, err)
			got, err := DecodeOffsetSync(key, s.Value())
			require.NoError(t, err)
			require.Equal(t, s, got)
		}
	})
	t.Run("checkpoint", func(t *testing.T) {
		for _, c := range []Checkpoint{
			{},
			{Group: long, Topic: long, Partition: math.MinInt32, UpstreamOffset: -5, DownstreamOffset: math.MaxInt64, Metadata: long},
			{Group: "g\x00\n\"", Topic: "B.A.t", Partition: 7, UpstreamOffset: 100, DownstreamOffset: 51, Metadata: "日本"},
		} {
			key, err := c.Key()
			require.NoError(t, err)
			value, err := c.Value()
			require.NoError(t, err)
			got, err := DecodeCheckpoint(key, value)
			require.NoError(t, err)
			require.Equal(t, c, got)
		}
	})
	t.Run("heartbeat", func(t *testing.T) {
		for _, h := range []Heartbeat{
			{},
			{SourceAlias: long, TargetAlias: "B-618", Timestamp: math.MinInt64},
		} {
			key, err := h.Key()
			require.NoError(t, err)
			got, err := DecodeHeartbeat(key, h.Value())
			require.NoError(t, err)
			require.Equal(t, h, got)
		}
	})
}

func TestRecordEncodeStringTooLong(t *testing.T) {
	long := strings.Repeat("x", kbin.MaxStringLen+1)
	tests := []struct {
		name   string
		encode func() ([]byte, error)
	}{
		{"offset sync topic", OffsetSync{Topic: long}.Key},
		{"checkpoint group", Checkpoint{Group: long, Topic: "t"}.Key},
		{"checkpoint topic", Checkpoint{Group: "g", Topic: long}.Key},
		{"checkpoint metadata", Checkpoint{Metadata: long}.Value},
		{"heartbeat source", Heartbeat{SourceAlias: long}.Key},
		{"heartbeat target", Heartbeat{TargetAlias: long}.Key},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.encode()
			require.ErrorIs(t, err, ErrStringTooLong)
			require.Nil(t, b)
		})
	}
}

func TestRecordDecodeErrors(t *testing.T) {
	okSyncKey := unhex(t, "0001 74 00000000")
	okSyncValue := unhex(t, "0000000000000005 0000000000000007")
	okCpKey := unhex(t, "0001 67 0001 74 00000000")
	okCpValue := unhex(t, "0000 0000000000000005 0000000000000007 0000")
	okHbKey := unhex(t, "0001 41 0001 42")
	okHbValue := unhex(t, "0000 0000018bcfe56800")
	tests := []struct {
		name       string
		decode     func() error
		wantSubstr string
	}{
		{"offset sync nil key", func() error { _, err := DecodeOffsetSync(nil, okSyncValue); return err }, "decode offset-sync key: read topic length"},
		{"offset sync string longer than key", func() error {
			_, err := DecodeOffsetSync(unhex(t, "0005 7474"), okSyncValue)
			return err
		}, "read topic: need 5 bytes"},
		{"offset sync negative string length", func() error {
			_, err := DecodeOffsetSync(unhex(t, "ffff 00000000"), okSyncValue)
			return err
		}, "negative string length -1"},
		{"offset sync missing partition", func() error { _, err := DecodeOffsetSync(unhex(t, "0001 74 0000"), okSyncValue); return err }, "read partition"},
		{"offset sync short value", func() error { _, err := DecodeOffsetSync(okSyncKey, okSyncValue[:15]); return err }, "decode offset-sync value: read offset"},
		{"offset sync nil value", func() error { _, err := DecodeOffsetSync(okSyncKey, nil); return err }, "read upstreamOffset"},
		{"checkpoint missing topic", func() error { _, err := DecodeCheckpoint(unhex(t, "0001 67"), okCpValue); return err }, "decode checkpoint key: read topic length"},
		{"checkpoint negative group length", func() error {
			_, err := DecodeCheckpoint(unhex(t, "8000 0001 74 00000000"), okCpValue)
			return err
		}, "negative string length -32768"},
		{"checkpoint value without metadata", func() error { _, err := DecodeCheckpoint(okCpKey, okCpValue[:18]); return err }, "read metadata length"},
		{"checkpoint metadata longer than value", func() error {
			_, err := DecodeCheckpoint(okCpKey, unhex(t, "0000 0000000000000005 0000000000000007 0002 6d"))
			return err
		}, "read metadata: need 2 bytes"},
		{"checkpoint version only", func() error { _, err := DecodeCheckpoint(okCpKey, unhex(t, "0000")); return err }, "read upstreamOffset"},
		{"heartbeat missing target", func() error { _, err := DecodeHeartbeat(unhex(t, "0001 41"), okHbValue); return err }, "decode heartbeat key: read targetClusterAlias length"},
		{"heartbeat short timestamp", func() error { _, err := DecodeHeartbeat(okHbKey, okHbValue[:9]); return err }, "decode heartbeat value: read timestamp"},
		{"heartbeat empty value", func() error { _, err := DecodeHeartbeat(okHbKey, []byte{}); return err }, "read version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode()
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.wantSubstr)
		})
	}
}

func TestRecordDecodeIgnoresTrailingBytes(t *testing.T) {
	extra := []byte{0xde, 0xad, 0xbe, 0xef}
	t.Run("offset sync", func(t *testing.T) {
		want := OffsetSync{Topic: "t", Partition: 0, UpstreamOffset: 5, DownstreamOffset: 7}
		key, err := want.Key()
		require.NoError(t, err)
		got, err := DecodeOffsetSync(append(key, extra...), append(want.Value(), extra...))
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
	t.Run("checkpoint", func(t *testing.T) {
		want := Checkpoint{Group: "g", Topic: "t", Partition: 1, UpstreamOffset: 5, DownstreamOffset: 7, Metadata: "m"}
		key, err := want.Key()
		require.NoError(t, err)
		value, err := want.Value()
		require.NoError(t, err)
		got, err := DecodeCheckpoint(append(key, extra...), append(value, extra...))
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
	t.Run("heartbeat", func(t *testing.T) {
		want := Heartbeat{SourceAlias: "A", TargetAlias: "B", Timestamp: 42}
		key, err := want.Key()
		require.NoError(t, err)
		got, err := DecodeHeartbeat(append(key, extra...), append(want.Value(), extra...))
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}

// Java reads the version header and then always applies the version 0 layout.
func TestRecordDecodeIgnoresVersion(t *testing.T) {
	cp, err := DecodeCheckpoint(unhex(t, "0001 67 0001 74 00000000"), unhex(t, "0007 0000000000000005 0000000000000007 0000"))
	require.NoError(t, err)
	require.Equal(t, Checkpoint{Group: "g", Topic: "t", UpstreamOffset: 5, DownstreamOffset: 7}, cp)

	hb, err := DecodeHeartbeat(unhex(t, "0001 41 0001 42"), unhex(t, "ffff 0000000000000001"))
	require.NoError(t, err)
	require.Equal(t, Heartbeat{SourceAlias: "A", TargetAlias: "B", Timestamp: 1}, hb)
}

// The fuzz targets check that the decoders never panic and that whatever they accept re-encodes to
// the bytes they read (trailing bytes aside; for checkpoints and heartbeats also the version header,
// which Java ignores).

func FuzzDecodeOffsetSync(f *testing.F) {
	f.Add([]byte{0, 1, 't', 0, 0, 0, 0}, []byte{0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add([]byte{0xff, 0xff}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		s, err := DecodeOffsetSync(key, value)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		k, err := s.Key()
		require.NoError(t, err)
		require.Equal(t, key[:len(k)], k)
		require.Equal(t, value[:16], s.Value())
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add([]byte{0, 1, 'g', 0, 1, 't', 0, 0, 0, 0}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 2, 'm', '1'})
	f.Add([]byte{0, 0, 0x80, 0}, []byte{0, 0})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		c, err := DecodeCheckpoint(key, value)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		k, err := c.Key()
		require.NoError(t, err)
		require.Equal(t, key[:len(k)], k)
		v, err := c.Value()
		require.NoError(t, err)
		require.Equal(t, value[2:len(v)], v[2:])
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add([]byte{0, 1, 'A', 0, 1, 'B'}, []byte{0, 0, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0})
	f.Add([]byte{0, 2, 'A'}, []byte{1})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		h, err := DecodeHeartbeat(key, value)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		k, err := h.Key()
		require.NoError(t, err)
		require.Equal(t, key[:len(k)], k)
		require.Equal(t, value[2:10], h.Value()[2:])
	})
}
