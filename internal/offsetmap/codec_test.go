package offsetmap

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/kbin"
)

func TestOffsetMapBytes(t *testing.T) {
	s := Segment{Topic: "t", Partition: 2, From: 5, Last: 9, Down: 7}
	k, err := s.Key()
	require.NoError(t, err)
	require.Equal(t, "00"+"000174"+"00000002"+"0000000000000005", hex.EncodeToString(k))
	require.Equal(t, "0000"+"0000000000000007"+"0000000000000009", hex.EncodeToString(s.Value()))
	require.EqualValues(t, 11, s.LastDown())
	require.Equal(t, "Segment{topicPartition=t-2, upstream=5..9, downstream=7..11}", s.String())

	p := Position{Topic: "t", Partition: 0, Next: 10, DownNext: 12}
	k, err = p.Key()
	require.NoError(t, err)
	require.Equal(t, "01"+"000174"+"00000000", hex.EncodeToString(k))
	require.Equal(t, "0000"+"000000000000000a"+"000000000000000c", hex.EncodeToString(p.Value()))
}

func TestOffsetMapRoundTrip(t *testing.T) {
	s := Segment{Topic: "orders", Partition: 3, From: 100, Last: 250, Down: 40}
	k, err := s.Key()
	require.NoError(t, err)
	got, err := Decode(k, s.Value())
	require.NoError(t, err)
	require.Equal(t, Record{Segment: &s}, got)

	got, err = Decode(k, nil)
	require.NoError(t, err)
	require.True(t, got.Deleted)
	require.Equal(t, int64(100), got.Segment.From)

	p := Position{Topic: "orders", Partition: 3, Next: 251, DownNext: 191}
	k, err = p.Key()
	require.NoError(t, err)
	got, err = Decode(k, append(p.Value(), 0xff)) // trailing bytes are ignored
	require.NoError(t, err)
	require.Equal(t, Record{Position: &p}, got)

	im := Imported{Topic: "orders", Partition: 1, Upstream: 99, Downstream: 97}
	k, err = im.Key()
	require.NoError(t, err)
	require.Equal(t, "02"+"00066f7264657273"+"00000001"+"0000000000000063", hex.EncodeToString(k))
	got, err = Decode(k, im.Value())
	require.NoError(t, err)
	require.Equal(t, Record{Imported: &im}, got)
}

func TestOffsetMapMalformed(t *testing.T) {
	seg := Segment{Topic: "t", Partition: 0, From: 5, Last: 9, Down: 7}
	segKey, _ := seg.Key()
	bad := Segment{Topic: "t", Partition: 0, From: 5, Last: 4, Down: 7}
	tests := []struct {
		name       string
		key, value []byte
	}{
		{"empty key", nil, []byte{0}},
		{"unknown kind", []byte{9, 0, 1, 't', 0, 0, 0, 0}, []byte{0}},
		{"short key", []byte{0, 0, 5, 't'}, seg.Value()},
		{"short value", segKey, seg.Value()[:10]},
		{"last before from", segKey, bad.Value()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.key, tt.value)
			require.Error(t, err)
			require.ErrorIs(t, err, kbin.ErrMalformed)
		})
	}
}

func FuzzDecode(f *testing.F) {
	s := Segment{Topic: "t", Partition: 1, From: 2, Last: 3, Down: 4}
	k, _ := s.Key()
	f.Add(k, s.Value())
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := Decode(key, value)
		if err != nil || r.Deleted {
			return
		}
		if r.Segment != nil {
			k2, err := r.Segment.Key()
			require.NoError(t, err)
			r2, err := Decode(k2, r.Segment.Value())
			require.NoError(t, err)
			require.Equal(t, r, r2)
		}
	})
}
