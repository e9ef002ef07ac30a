package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCopyDiff(t *testing.T) {
	base := func() *kgo.Record {
		return &kgo.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(1000),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
	}
	for _, tc := range []struct {
		name   string
		change func(*kgo.Record)
		want   string
	}{
		{name: "copy", change: func(*kgo.Record) {}, want: ""},
		{name: "key", change: func(r *kgo.Record) { r.Key = []byte("j") }, want: "key"},
		{name: "null key", change: func(r *kgo.Record) { r.Key = nil }, want: "key"},
		{name: "empty value", change: func(r *kgo.Record) { r.Value = []byte{} }, want: "value"},
		{name: "timestamp", change: func(r *kgo.Record) { r.Timestamp = time.UnixMilli(1001) }, want: "timestamp"},
		{name: "log append time", change: func(r *kgo.Record) {
			r.Timestamp = time.UnixMilli(5)
			r.Attrs = kgo.NewRecordAttrs(kgo.RecordAttrsOpts{TimestampType: 1})
		}, want: ""},
		{name: "header value", change: func(r *kgo.Record) { r.Headers[0].Value = []byte("y") }, want: "headers"},
		{name: "header key", change: func(r *kgo.Record) { r.Headers[0].Key = "g" }, want: "headers"},
		{name: "header gone", change: func(r *kgo.Record) { r.Headers = nil }, want: "headers"},
		{name: "origin added", change: func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: OriginHeader, Value: []byte("a")})
		}, want: ""},
		{name: "other header added", change: func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "other", Value: []byte("a")})
		}, want: "headers"},
		{name: "several", change: func(r *kgo.Record) { r.Key, r.Value = nil, nil }, want: "key, value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			tc.change(b)
			require.Equal(t, tc.want, CopyDiff(base(), b).String())
		})
	}
}
